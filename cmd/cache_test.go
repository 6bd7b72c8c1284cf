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

	// An absent model is no network error: exit 1, for rm as for ls.
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("cache", "rm", "org/stories", "-y"))
	assert.Contains(t, e.errOut.String(), "not in the cache")
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("cache", "ls", "org/stories"))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("cache", "rm", "../etc", "-y"))
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "ls"))
	assert.Contains(t, e.out.String(), "No models in")
}

func TestCacheVerify(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	srv.ResetLog()

	for _, tty := range []bool{false, true} {
		e = newTestFactory(t, env)
		e.f.IOStreams.SetStdoutTTY(tty)
		require.Equal(t, ExitOK, e.run("cache", "verify", "org/stories"), e.errOut.String())
		assert.Contains(t, e.out.String(), "org/stories@"+commit+" (main): 6 file(s) ok")
		if tty {
			assert.Contains(t, e.out.String(), "6 file(s) checked")
		}
	}
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("--json", "cache", "verify", "org/stories@main"), e.errOut.String())
	var res CacheVerification
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
	require.Len(t, res.Repos, 1)
	assert.Equal(t, 6, res.OK)
	assert.Len(t, res.Repos[0].Revisions[0].Files, 6)
	algos := map[string]string{}
	for _, f := range res.Repos[0].Revisions[0].Files {
		algos[f.File] = f.Algorithm
	}
	assert.Equal(t, "sha256", algos["model.safetensors"])
	assert.Equal(t, "git-sha1", algos["config.json"])
	// Every model when none is named.
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "verify"), e.errOut.String())
	assert.Contains(t, e.out.String(), "org/stories@")

	// A corrupt blob of the right size: found, listed, exit 1.
	snap := filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "snapshots", commit)
	blob, err := filepath.EvalSymlinks(filepath.Join(snap, "model.safetensors"))
	require.NoError(t, err)
	b, err := os.ReadFile(blob)
	require.NoError(t, err)
	b[len(b)/2] ^= 1
	require.NoError(t, os.WriteFile(blob, b, 0o644))
	cfgBlob, err := filepath.EvalSymlinks(filepath.Join(snap, "tokenizer.json"))
	require.NoError(t, err)
	require.NoError(t, os.Remove(cfgBlob))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("cache", "verify", "org/stories"))
	out := e.out.String()
	assert.Contains(t, out, "2 of 6 file(s) failed")
	assert.Regexp(t, `mismatch\s+model.safetensors: sha256 of the content is [0-9a-f]{64}`, out)
	assert.Contains(t, out, blob)
	assert.Regexp(t, `missing\s+tokenizer.json`, out)
	assert.NotContains(t, out, "config.json", "only problems are listed")
	assert.Contains(t, e.errOut.String(), "1 mismatch, 1 missing")
	assert.Contains(t, e.errOut.String(), "tputool download --model org/stories")
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("--json", "cache", "verify", "org/stories"))
	res = CacheVerification{}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	assert.Equal(t, 1, res.Mismatches)
	assert.Equal(t, 1, res.Missing)
	assert.Equal(t, 0, srv.Count(nil), "verify never uses the network")

	// Downloading again repairs the deleted blob; the corrupt one has the
	// right size, so only verify finds it: delete it as told.
	require.NoError(t, os.Remove(blob))
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "verify", "org/stories"), e.out.String())

	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("cache", "verify", "org/absent"))
	assert.Contains(t, e.errOut.String(), "not in the cache")
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("cache", "verify", "org/stories@deadbeef"))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("cache", "verify", "../etc"))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("cache", "verify", "org/stories@"))
}

func TestCacheVerifyRemote(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())

	srv.ResetLog()
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "verify", "org/stories", "--remote"), e.errOut.String())
	assert.Contains(t, e.out.String(), "6 file(s) ok, 1 listed by the Hub but not downloaded")
	assert.Equal(t, 1, srv.Count(nil), "one listing request")

	// A blob renamed to match corrupt content: only --remote sees it.
	snap := filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "snapshots", commit)
	ptr := filepath.Join(snap, "tokenizer.json")
	b, err := os.ReadFile(ptr)
	require.NoError(t, err)
	b[0] ^= 1
	forged := hubtest.File{Data: b}.GitSHA1()
	require.NoError(t, os.WriteFile(filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "blobs", forged), b, 0o644))
	require.NoError(t, os.Remove(ptr))
	require.NoError(t, os.Symlink("../../blobs/"+forged, ptr))
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "verify", "org/stories"), e.out.String())
	e = newTestFactory(t, env)
	assert.Equal(t, ExitError, e.run("--json", "cache", "verify", "org/stories", "--remote"))
	var res CacheVerification
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	assert.Equal(t, 1, res.Mismatches)
	assert.Equal(t, 1, res.NotDownloaded)
	assert.Equal(t, []string{"README.md"}, res.Repos[0].Revisions[0].NotDownloaded)

	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("--offline", "cache", "verify", "org/stories", "--remote"))
	// The Hub unreachable: a Hub error.
	srv.AddFault(&hubtest.Fault{Status: 503})
	e = newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("cache", "verify", "org/stories", "--remote"))
}
