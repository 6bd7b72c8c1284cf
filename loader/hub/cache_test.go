package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// buildPythonCache lays out a cache by hand exactly as huggingface_hub's
// hf_hub_download/snapshot_download leave it: refs/<branch> with the bare
// commit, blobs named by ETag, snapshot entries as relative symlinks, and
// a .no_exist marker for a file the Hub said was absent.
func buildPythonCache(t *testing.T, dir string) (commitA, commitB string) {
	t.Helper()
	commitA = "0123456789abcdef0123456789abcdef01234567"
	commitB = "89abcdef0123456789abcdef0123456789abcdef"
	repo := filepath.Join(dir, "models--google--tiny")
	cfg := hubtest.File{Path: "config.json", Data: cfgJSON}
	w := hubtest.File{Path: "model.safetensors", Data: weights, LFS: true}
	cfgB := hubtest.File{Path: "config.json", Data: []byte(`{"model_type":"llama","v":2}`)}
	sched := hubtest.File{Path: "scheduler/scheduler_config.json", Data: []byte(`{"_class_name":"DDIMScheduler"}`)}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []hubtest.File{cfg, w, cfgB, sched} {
		must(os.MkdirAll(filepath.Join(repo, "blobs"), 0o755))
		must(os.WriteFile(filepath.Join(repo, "blobs", f.ETag()), f.Data, 0o644))
	}
	link := func(commit string, f hubtest.File, target string) {
		p := filepath.Join(repo, "snapshots", commit, filepath.FromSlash(f.Path))
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.Symlink(target, p))
	}
	link(commitA, cfg, "../../blobs/"+cfg.ETag())
	link(commitA, w, "../../blobs/"+w.ETag())
	link(commitA, sched, "../../../blobs/"+sched.ETag())
	link(commitB, cfgB, "../../blobs/"+cfgB.ETag())
	link(commitB, w, "../../blobs/"+w.ETag()) // shared blob
	must(os.MkdirAll(filepath.Join(repo, "refs", "refs", "pr"), 0o755))
	must(os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commitA), 0o644))
	must(os.WriteFile(filepath.Join(repo, "refs", "refs", "pr", "1"), []byte(commitB), 0o644))
	must(os.MkdirAll(filepath.Join(repo, ".no_exist", commitA), 0o755))
	must(os.WriteFile(filepath.Join(repo, ".no_exist", commitA, "generation_config.json"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(dir, ".locks", "models--google--tiny"), 0o755))
	must(os.WriteFile(filepath.Join(dir, ".locks", "models--google--tiny", w.ETag()+".lock"), nil, 0o644))
	return commitA, commitB
}

func TestReadsCacheLaidOutByHuggingfaceHub(t *testing.T) {
	srv := hubtest.New(t) // never asked: offline
	c, _ := newClient(t, srv)
	c.Offline = true
	commitA, commitB := buildPythonCache(t, c.Cache.Dir)
	ctx := context.Background()

	p, err := c.Download(ctx, "google/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !slices.Equal(b, weights) {
		t.Error("weights differ")
	}
	p, err = c.Download(ctx, "google/tiny", "refs/pr/1", "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"model_type":"llama","v":2}` {
		t.Errorf("refs/pr/1 config = %s", b)
	}
	if _, err := c.Download(ctx, "google/tiny", "main", "generation_config.json"); !errors.Is(err, hub.ErrEntryNotFound) {
		t.Errorf(".no_exist not honoured: %v", err)
	}
	s, err := c.ListFiles(ctx, "google/tiny", "main")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"config.json", "model.safetensors", "scheduler/scheduler_config.json"}
	if s.Commit != commitA || !slices.Equal(s.RepoFiles, want) {
		t.Errorf("ListFiles = %s %q", s.Commit, s.RepoFiles)
	}
	if _, err := c.Cache.Lookup("google/tiny", commitB, "model.safetensors"); err != nil {
		t.Errorf("Lookup by commit: %v", err)
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("%d requests", n)
	}
}

func TestScanAndDelete(t *testing.T) {
	dir := t.TempDir()
	commitA, commitB := buildPythonCache(t, dir)
	os.MkdirAll(filepath.Join(dir, "datasets--x--y"), 0o755) // not a model: skipped
	cache := hub.Cache{Dir: dir}
	repos, warns, err := cache.Scan()
	if err != nil || len(warns) != 0 || len(repos) != 1 {
		t.Fatalf("Scan = %+v, %q, %v", repos, warns, err)
	}
	r := repos[0]
	cfgB := int64(len(`{"model_type":"llama","v":2}`))
	schedLen := int64(len(`{"_class_name":"DDIMScheduler"}`))
	total := int64(len(cfgJSON)+len(weights)) + cfgB + schedLen
	if r.ID != "google/tiny" || r.SizeOnDisk != total || r.Blobs != 4 || len(r.Revisions) != 2 {
		t.Fatalf("repo = %+v, want size %d", r, total)
	}
	byCommit := map[string]hub.CachedRevision{}
	for _, rv := range r.Revisions {
		byCommit[rv.Commit] = rv
	}
	if a := byCommit[commitA]; !slices.Equal(a.Refs, []string{"main"}) || a.Files != 3 {
		t.Errorf("revision A = %+v", a)
	}
	if b := byCommit[commitB]; !slices.Equal(b.Refs, []string{"refs/pr/1"}) || b.Size != cfgB+int64(len(weights)) {
		t.Errorf("revision B = %+v", b)
	}

	// Deleting B frees only its own config blob: the weights are shared.
	freed, err := cache.DeleteRevision("google/tiny", "refs/pr/1")
	if err != nil || freed != cfgB {
		t.Fatalf("DeleteRevision = %d, %v; want %d", freed, err, cfgB)
	}
	if _, err := os.Stat(filepath.Join(dir, "models--google--tiny", "refs", "refs", "pr", "1")); !errors.Is(err, os.ErrNotExist) {
		t.Error("ref of the deleted revision kept")
	}
	c := &hub.Client{Cache: cache, Offline: true}
	if _, err := c.Download(context.Background(), "google/tiny", "main", "model.safetensors"); err != nil {
		t.Fatalf("remaining revision broken: %v", err)
	}
	// Absent from the cache is no Hub error: nothing asked the network.
	if _, err := cache.DeleteRevision("google/tiny", "deadbeef"); !errors.Is(err, hub.ErrAbsent) || errors.Is(err, errs.ErrHub) {
		t.Errorf("unknown revision: %v", err)
	}
	if _, err := cache.DeleteRepo("google/other"); !errors.Is(err, hub.ErrAbsent) || errors.Is(err, errs.ErrHub) {
		t.Errorf("unknown repository: %v", err)
	}
	// The last revision takes the repo (and its locks) with it.
	if _, err := cache.DeleteRevision("google/tiny", commitA[:8]); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"models--google--tiny", ".locks/models--google--tiny"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there", p)
		}
	}
	if _, err := cache.DeleteRepo("../etc"); err == nil {
		t.Error("DeleteRepo accepted a path")
	}
}

func TestEnvResolution(t *testing.T) {
	home := t.TempDir()
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{"HOME": home}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cases := []struct {
		lookup func(string) (string, bool)
		want   string
	}{
		{env(), filepath.Join(home, ".cache/huggingface/hub")},
		{env("XDG_CACHE_HOME", "/xdg"), "/xdg/huggingface/hub"},
		{env("XDG_CACHE_HOME", "/xdg", "HF_HOME", "~/hf"), filepath.Join(home, "hf/hub")},
		{env("HF_HOME", "/hf", "HF_HUB_CACHE", "$HOME/c"), filepath.Join(home, "c")},
		{env("HUGGINGFACE_HUB_CACHE", "/legacy"), "/legacy"},
	}
	for i, tc := range cases {
		if got := hub.EnvFrom(tc.lookup).CacheDir; got != tc.want {
			t.Errorf("case %d: cache dir %s, want %s", i, got, tc.want)
		}
	}
	os.MkdirAll(filepath.Join(home, ".cache/huggingface"), 0o755)
	os.WriteFile(filepath.Join(home, ".cache/huggingface/token"), []byte("hf_from_file\r\n"), 0o600)
	if e := hub.EnvFrom(env()); e.Token.Reveal() != "hf_from_file" {
		t.Errorf("token file: %q", e.Token.Reveal())
	}
	if e := hub.EnvFrom(env("HF_TOKEN", " hf_env ")); e.Token.Reveal() != "hf_env" || e.TokenSource != "HF_TOKEN" {
		t.Errorf("HF_TOKEN: %q from %s", e.Token.Reveal(), e.TokenSource)
	}
	e := hub.EnvFrom(env("HF_HUB_OFFLINE", "yes", "HF_ENDPOINT", "http://mirror/", "HF_HUB_ETAG_TIMEOUT", "3"))
	if !e.Offline || e.Endpoint != "http://mirror" || e.EtagTimeout.Seconds() != 3 {
		t.Errorf("env = %+v", e)
	}
	if e := hub.EnvFrom(env("HF_HUB_OFFLINE", "0")); e.Offline {
		t.Error("HF_HUB_OFFLINE=0 is not offline")
	}
}

func TestValidateRepoID(t *testing.T) {
	for _, ok := range []string{"gpt2", "Qwen/Qwen3-0.6B", "a_b/c.d-e"} {
		if err := hub.ValidateRepoID(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b/c", "../x", "a--b/c", "a/b..c", "-a/b", "a/b.git", "a/ b", "./a"} {
		if err := hub.ValidateRepoID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
