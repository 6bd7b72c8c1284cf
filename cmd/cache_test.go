package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub/hubtest"
)

func TestCacheLsAndRm(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())

	for _, tty := range []bool{false, true} {
		e = newTestFactory(t, env)
		e.f.IOStreams.SetStdoutTTY(tty)
		require.Equal(t, ExitOK, e.run("cache", "ls"), e.errOut.String())
		out := e.out.String()
		assert.Contains(t, out, "org/stories")
		assert.Contains(t, out, "1.1 MiB")
		assert.Contains(t, out, "main")
		if tty {
			assert.Contains(t, out, "1 model(s)")
			assert.NotRegexp(t, `\d{4}-\d\d-\d\dT`, out, "relative times on a terminal")
		} else {
			assert.NotContains(t, out, "model(s)", "no summary line for scripts")
			assert.Regexp(t, `\d{4}-\d\d-\d\dT`, out)
		}
	}

	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "ls", "org/stories"))
	assert.Contains(t, e.out.String(), commit)

	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("--json", "cache", "ls"))
	var listing CacheListing
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &listing))
	require.Len(t, listing.Repos, 1)
	assert.Equal(t, "org/stories", listing.Repos[0].ID)
	assert.Equal(t, listing.SizeOnDisk, listing.Repos[0].SizeOnDisk)
	assert.Equal(t, []string{"main"}, listing.Repos[0].Revisions[0].Refs)

	// rm needs --yes without a terminal.
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("cache", "rm", "org/stories"))
	assert.DirExists(t, filepath.Join(env["HF_HUB_CACHE"], "models--org--stories"))
	// On a terminal it asks; "n" keeps the model.
	e = newTestFactory(t, env)
	e.f.IOStreams.SetStdinTTY(true)
	e.f.IOStreams.SetStderrTTY(true)
	e.f.IOStreams.In.(interface{ WriteString(string) (int, error) }).WriteString("n\n")
	assert.Equal(t, ExitError, e.run("cache", "rm", "org/stories"))
	assert.Contains(t, e.errOut.String(), "Remove org/stories")
	assert.DirExists(t, filepath.Join(env["HF_HUB_CACHE"], "models--org--stories"))

	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("--json", "cache", "rm", "org/stories@main", "--yes"), e.errOut.String())
	var rm CacheRemoval
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &rm))
	assert.Greater(t, rm.Freed, int64(1<<20))
	_, err := os.Stat(filepath.Join(env["HF_HUB_CACHE"], "models--org--stories"))
	assert.True(t, os.IsNotExist(err))

	e = newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("cache", "rm", "org/stories", "-y"))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("cache", "rm", "../etc", "-y"))
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "ls"))
	assert.Contains(t, e.out.String(), "No models in")
}
