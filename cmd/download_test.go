package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

func TestDownloadPrintsSnapshotDir(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	dir := filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "snapshots", commit)
	assert.Equal(t, dir+"\n", e.out.String(), "stdout carries only the result")
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		assert.FileExists(t, filepath.Join(dir, f))
	}
	assert.NoFileExists(t, filepath.Join(dir, "README.md"), "only what tputool needs")
	// Not a TTY: plain progress lines on stderr, no bar escape codes.
	assert.Contains(t, e.errOut.String(), "Downloading org/stories:")
	assert.Contains(t, e.errOut.String(), "100% (")
	assert.NotContains(t, e.errOut.String(), "\r")

	// A second download finds everything cached: one listing request, no progress.
	srv.ResetLog()
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories", "--json"), e.errOut.String())
	assert.Equal(t, 1, srv.Count(nil))
	assert.Empty(t, e.errOut.String())
	var res DownloadResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
	assert.Equal(t, commit, res.Commit)
	assert.Equal(t, "main", res.Revision)
	assert.Equal(t, "transformers", res.Kind)
	assert.Len(t, res.Files, 6)
	st, _ := os.Stat(filepath.Join(storiesDir, "model.safetensors"))
	assert.Greater(t, res.Bytes, st.Size())
}

func TestDownloadQuietAndJSONProgress(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	e := newTestFactory(t, hubEnv(t, srv))
	require.Equal(t, ExitOK, e.run("-q", "download", "--model", "org/stories"))
	assert.Empty(t, e.errOut.String())

	e = newTestFactory(t, hubEnv(t, srv))
	require.Equal(t, ExitOK, e.run("--json", "download", "--model", "org/stories"))
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(e.errOut.String()), "\n") {
		require.NoError(t, json.Unmarshal([]byte(line), &last), line)
		assert.Equal(t, "progress", last["type"])
	}
	assert.Equal(t, true, last["done"])
	assert.Equal(t, "bytes", last["unit"])
	assert.Equal(t, last["total"], last["current"])
}

func TestDownloadIncludePatterns(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories@"+commit, "--include", "*.json", "--exclude", "tokenizer*"), e.errOut.String())
	files, _ := os.ReadDir(strings.TrimSpace(e.out.String()))
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	assert.Equal(t, []string{"config.json", "generation_config.json", "special_tokens_map.json"}, names)
}

func TestDownloadErrorsAndToken(t *testing.T) {
	srv := hubtest.New(t)
	r := storiesRepo(t, "org/gated")
	r.Gated = true
	srv.AddRepo(r)
	env := hubEnv(t, srv)

	e := newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("-v", "download", "--model", "org/gated", "--token", "hf_sekrit_value"))
	assert.Contains(t, e.errOut.String(), "gated repository: org/gated")
	assert.Contains(t, e.errOut.String(), "token from --token")
	assert.NotContains(t, e.errOut.String()+e.out.String(), "hf_sekrit_value")

	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/gated", "--token", srv.Token), e.errOut.String())
	for _, r := range srv.Requests() {
		if r.Server == "cdn" {
			assert.Empty(t, r.Auth, "token sent to the CDN")
		}
	}

	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("download", "--model", storiesDir))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitUsage, e.run("download", "--model", "org/x", "--retries", "-1"))
	e = newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("--offline", "download", "--model", "org/never"))
	assert.Contains(t, e.errOut.String(), "offline mode is on")
	assert.Contains(t, e.errOut.String(), "run `tputool download` with network access first")

	srv.AddFault(&hubtest.Fault{Status: 503})
	e = newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("download", "--model", "org/other", "--retries", "0"))
	assert.Contains(t, e.errOut.String(), "HTTP 503")
}

// A cached snapshot that lost config.json is incomplete, not an unsupported
// checkpoint: offline it is "not in the cache" (exit 5, like any file
// missing offline), naming the file and the fix.
func TestOfflineSnapshotWithoutConfigIsNotCached(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	require.NoError(t, os.Remove(filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "snapshots", commit, "config.json")))
	for _, args := range [][]string{
		{"--offline", "download", "--model", "org/stories"},
		{"--offline", "inspect", "--model", "org/stories"},
		{"--offline", "download", "--model", "org/stories@" + commit},
	} {
		e = newTestFactory(t, env)
		assert.Equal(t, ExitHub, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "lacks config.json", args)
		assert.Contains(t, e.errOut.String(), "tputool download --model org/stories", args)
		assert.NotContains(t, e.errOut.String(), "unsupported", args)
	}
}

// A snapshot link planted to a file outside the cache is refused for a Hub
// id as for a local folder, online and offline; a local cache problem
// (exit 1), not a Hub one.
func TestSnapshotLinkOutOfCacheIsRefused(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("download", "--model", "org/stories"), e.errOut.String())
	ptr := filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "snapshots", commit, "tokenizer.json")
	outside := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(outside, []byte(`{"secret":1}`), 0o600))
	require.NoError(t, os.Remove(ptr))
	require.NoError(t, os.Symlink(outside, ptr))
	for _, args := range [][]string{
		{"download", "--model", "org/stories"},
		{"--offline", "download", "--model", "org/stories"},
		{"--offline", "download", "--model", "org/stories@" + commit},
	} {
		e = newTestFactory(t, env)
		assert.Equal(t, ExitError, e.run(args...), "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), "outside", args)
		assert.Contains(t, e.errOut.String(), "tputool cache rm org/stories", args)
	}
}

// Credentials inside HF_ENDPOINT (http://user:token@host) never reach
// stdout or stderr: not the -v endpoint line, not the request log, not a
// Hub error or a not-a-Hub error, in text or --json mode.
func TestEndpointCredentialsNeverPrinted(t *testing.T) {
	const secret = "hf_EndpointCanary0123456789"
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	for _, args := range [][]string{
		{"-v", "download", "--model", "org/stories"},
		{"-v", "--json", "download", "--model", "org/stories"},
		{"-v", "download", "--model", "org/missing"},
		{"-v", "--json", "inspect", "--model", "org/missing"},
	} {
		env := hubEnv(t, srv)
		env["HF_ENDPOINT"] = strings.Replace(srv.URL(), "://", "://alice:"+secret+"@", 1)
		e := newTestFactory(t, env)
		code := e.run(args...)
		all := e.out.String() + e.errOut.String()
		assert.NotContains(t, all, secret, "%v", args)
		assert.Contains(t, all, "://***@", "%v: the endpoint line shows the credentials masked", args)
		if strings.Contains(args[len(args)-1], "missing") {
			assert.Equal(t, ExitHub, code, args)
		} else {
			assert.Equal(t, ExitOK, code, "%v: %s", args, e.errOut.String())
		}
	}
	// A server that is no Hub: the error names the endpoint, masked.
	env := hubEnv(t, srv)
	env["HF_ENDPOINT"] = strings.Replace(srv.CDN.URL, "://", "://alice:"+secret+"@", 1)
	e := newTestFactory(t, env)
	assert.Equal(t, ExitHub, e.run("--json", "download", "--model", "org/stories", "--retries", "0"))
	assert.NotContains(t, e.out.String()+e.errOut.String(), secret)
}

// A download that does not fit fails before fetching the weights with exit
// 1 (a local problem, not the Hub), saying what is needed, what is free and
// how to reclaim space; the partial download stays, `cache ls` shows it,
// and the download resumes once there is room.
func TestDownloadWithoutSpace(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(storiesRepo(t, "org/stories"))
	env := hubEnv(t, srv)
	weightsData := mustRead(t, filepath.Join(storiesDir, "model.safetensors"))
	sha := hubtest.File{Data: weightsData, LFS: true}.SHA256()
	blobs := filepath.Join(env["HF_HUB_CACHE"], "models--org--stories", "blobs")
	require.NoError(t, os.MkdirAll(blobs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(blobs, sha+".incomplete"), weightsData[:100_000], 0o644))

	e := newTestFactory(t, env)
	var free int64 = 50_000 // the configs and tokenizer fit, the weights do not
	opts := &DownloadOptions{IO: e.f.IOStreams, Model: "org/stories", HubClient: func() *hub.Client {
		c := e.f.HubClient()
		c.FreeSpace = func(string) (int64, error) { return free, nil }
		return c
	}}
	err := downloadRun(context.Background(), opts)
	require.Error(t, err)
	assert.True(t, errors.Is(err, hub.ErrNoSpace), err.Error())
	assert.Equal(t, ExitError, ExitCodeFor(err))
	for _, want := range []string{"needs 1.0 MiB more", "48.8 KiB are free", "tputool cache rm org/stories", ".incomplete", "resume"} {
		assert.Contains(t, err.Error(), want)
	}
	restated := restateHub(err) // as cmd.Run says it: with the flag that moves the cache
	assert.Contains(t, restated.Error(), "point --cache-dir or HF_HUB_CACHE at a bigger disk")
	assert.Equal(t, ExitError, ExitCodeFor(restated))
	assert.Equal(t, 0, srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" }), "no weight byte was fetched")

	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("cache", "ls", "org/stories"), e.errOut.String())
	assert.Contains(t, e.out.String(), "97.7 KiB of partial downloads in 1 file(s)")
	e = newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("--json", "cache", "ls"), e.errOut.String())
	var listing CacheListing
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &listing))
	require.Len(t, listing.Repos, 1)
	assert.Equal(t, int64(100_000), listing.Repos[0].IncompleteBytes)

	free = 10 << 20
	require.NoError(t, downloadRun(context.Background(), opts))
	assert.Equal(t, 1, srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "bytes=100000-" }), "resumed")
}
