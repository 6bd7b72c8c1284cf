package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// recorder collects warnings, debug lines and retry sleeps.
type recorder struct {
	mu     sync.Mutex
	warns  []string
	debugs []string
	sleeps []time.Duration
}

func (r *recorder) Warn(m string)  { r.mu.Lock(); r.warns = append(r.warns, m); r.mu.Unlock() }
func (r *recorder) Debug(m string) { r.mu.Lock(); r.debugs = append(r.debugs, m); r.mu.Unlock() }
func (r *recorder) sleep(_ context.Context, d time.Duration) error {
	r.mu.Lock()
	r.sleeps = append(r.sleeps, d)
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(append(append([]string{}, r.warns...), r.debugs...), "\n")
}

// newClient returns a client on srv with a fresh cache, instant retries
// and a backoff of attempt*10ms (so tests can check the schedule).
func newClient(t *testing.T, srv *hubtest.Server) (*hub.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	c := &hub.Client{
		Endpoint:    srv.URL(),
		Cache:       hub.Cache{Dir: t.TempDir()},
		Retries:     3,
		Backoff:     func(a int) time.Duration { return time.Duration(a) * 10 * time.Millisecond },
		Sleep:       rec.sleep,
		Logger:      rec,
		EtagTimeout: 2 * time.Second,
		IdleTimeout: 2 * time.Second,
	}
	return c, rec
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var (
	cfgJSON = []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)
	weights = randBytes(300_000, 1)
	tokJSON = []byte(`{"version":"1.0"}`)
)

func tinyRepo() hubtest.Repo {
	return hubtest.Repo{ID: "org/tiny", Files: []hubtest.File{
		{Path: "config.json", Data: cfgJSON},
		{Path: "model.safetensors", Data: weights, LFS: true},
		{Path: "tokenizer/tokenizer.json", Data: tokJSON},
	}}
}

func isCDN(r hubtest.Request) bool { return r.Server == "cdn" }

func TestDownloadWritesHuggingfaceHubLayout(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	ctx := context.Background()

	for _, f := range []string{"config.json", "model.safetensors", "tokenizer/tokenizer.json"} {
		p, err := c.Download(ctx, "org/tiny", "main", f)
		if err != nil {
			t.Fatalf("Download %s: %v", f, err)
		}
		if want := filepath.Join(c.Cache.Dir, "models--org--tiny", "snapshots", commit, filepath.FromSlash(f)); p != want {
			t.Errorf("path = %s, want %s", p, want)
		}
	}
	repoDir := filepath.Join(c.Cache.Dir, "models--org--tiny")
	// refs/main holds the bare commit hash, no newline.
	if b, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(b) != commit {
		t.Errorf("refs/main = %q, %v; want %q", b, err, commit)
	}
	// Snapshot entries are relative symlinks to blobs/<etag>.
	for _, f := range tinyRepo().Files {
		ptr := filepath.Join(repoDir, "snapshots", commit, filepath.FromSlash(f.Path))
		target, err := os.Readlink(ptr)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", f.Path, err)
		}
		depth := strings.Count(f.Path, "/")
		want := strings.Repeat("../", depth+2) + "blobs/" + f.ETag()
		if target != filepath.FromSlash(want) {
			t.Errorf("%s -> %s, want %s", f.Path, target, want)
		}
		got, err := os.ReadFile(ptr)
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s: content differs (%v)", f.Path, err)
		}
		if _, err := os.Stat(filepath.Join(c.Cache.Dir, ".locks", "models--org--tiny", f.ETag()+".lock")); err != nil {
			t.Errorf("lock file for %s: %v", f.Path, err)
		}
	}
	// LFS blobs are named by sha256, git blobs by git sha1.
	if f := tinyRepo().Files[1]; len(f.ETag()) != 64 {
		t.Fatalf("LFS etag %q", f.ETag())
	}
	if _, err := os.Stat(filepath.Join(c.Cache.Dir, "CACHEDIR.TAG")); err != nil {
		t.Errorf("CACHEDIR.TAG: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(entries) != 3 {
		t.Errorf("blobs/ has %d entries, want 3 (no leftovers)", len(entries))
	}
}

func TestTokenGoesOnlyToEndpoint(t *testing.T) {
	srv := hubtest.New(t)
	r := tinyRepo()
	r.Private = true
	srv.AddRepo(r)
	c, rec := newClient(t, srv)
	c.Token = hub.Token(srv.Token)
	c.Logger = rec
	if _, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors"); err != nil {
		t.Fatal(err)
	}
	var hubAuth, cdn int
	for _, r := range srv.Requests() {
		switch r.Server {
		case "hub":
			if r.Auth == "Bearer "+srv.Token {
				hubAuth++
			}
		case "cdn":
			cdn++
			if r.Auth != "" {
				t.Errorf("CDN request %s %s carried Authorization", r.Method, r.Path)
			}
		}
	}
	if hubAuth == 0 || cdn == 0 {
		t.Errorf("hub requests with token: %d, CDN requests: %d", hubAuth, cdn)
	}
	if strings.Contains(rec.all(), srv.Token) {
		t.Error("token appears in a log line")
	}
	// An error for a private repo without the right token names no token.
	c.Token = hub.Token("hf_wrong_secret")
	_, err := c.Download(context.Background(), "org/tiny", "main", "config.json")
	if !errors.Is(err, hub.ErrRepoNotFound) || !errors.Is(err, errs.ErrHub) {
		t.Fatalf("err = %v, want repository not found wrapping ErrHub", err)
	}
	if strings.Contains(err.Error(), "hf_wrong_secret") || strings.Contains(fmt.Sprintf("%+v %#v", err, c), "hf_wrong_secret") {
		t.Errorf("token leaked: %v", err)
	}
}

func TestTokenNeverFormats(t *testing.T) {
	tok := hub.Token("hf_abcdefSECRET")
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%s %v %q %x %d %+v %#v", tok, tok, tok, tok, tok, tok, tok)} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("formatted token leaked: %s", s)
		}
	}
	b, _ := json.Marshal(struct{ T hub.Token }{tok})
	if strings.Contains(string(b), "SECRET") {
		t.Errorf("JSON leaked: %s", b)
	}
	if tok.Reveal() != "hf_abcdefSECRET" {
		t.Error("Reveal lost the token")
	}
}

func TestResumeAfterDrop(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	drop := srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 2, Drop: true, After: 100_000})
	var events []hub.Progress
	c.Progress = func(p hub.Progress) { events = append(events, p) }
	p, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("resumed file differs")
	}
	if srv.Fired(drop) != 2 {
		t.Fatalf("drop fired %d times", srv.Fired(drop))
	}
	var ranges []string
	for _, r := range srv.Requests() {
		if isCDN(r) {
			ranges = append(ranges, r.Range)
		}
	}
	want := []string{"", "bytes=100000-", "bytes=200000-"}
	if !slices.Equal(ranges, want) {
		t.Errorf("CDN Range headers = %q, want %q", ranges, want)
	}
	// Progress made between drops resets the retry budget, so each retry is
	// the first: 10ms each.
	if !slices.Equal(rec.sleeps, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}) {
		t.Errorf("sleeps = %v", rec.sleeps)
	}
	last := events[len(events)-1]
	if last.Event != hub.FileDone || last.Bytes != int64(len(weights)) || last.Total != int64(len(weights)) {
		t.Errorf("last progress event = %+v", last)
	}
	for i := 1; i < len(events); i++ {
		if events[i].Event == hub.FileAdvance && events[i].Bytes < events[i-1].Bytes {
			t.Errorf("progress went backwards at %d: %+v after %+v", i, events[i], events[i-1])
		}
	}
}

func TestResumeIncompleteFromEarlierRun(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	f := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(blobs, f.ETag()+".incomplete"), weights[:123_456], 0o644)
	p, err := c.Download(context.Background(), "org/tiny", "main", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("file differs")
	}
	if n := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Range == "bytes=123456-" }); n != 1 {
		t.Errorf("want one ranged CDN request from byte 123456, log: %+v", srv.Requests())
	}
}

func TestStalePartialFileIsRedownloaded(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	f := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	bad := bytes.Clone(weights[:50_000])
	bad[10] ^= 1
	os.WriteFile(filepath.Join(blobs, f.ETag()+".incomplete"), bad, 0o644)
	p, err := c.Download(context.Background(), "org/tiny", "main", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("file differs")
	}
	if !strings.Contains(rec.all(), "downloading again from the start") {
		t.Errorf("no restart warning: %s", rec.all())
	}
}

func TestServerIgnoringRangeRestartsFromZero(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	f := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(blobs, f.ETag()+".incomplete"), weights[:1000], 0o644)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 1, IgnoreRange: true})
	p, err := c.Download(context.Background(), "org/tiny", "main", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("file differs")
	}
}

func TestRetryWithBackoffOn5xxAnd429(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 2, Status: 503})
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 1, Status: 429, RetryAfter: "7"})
	p, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("file differs")
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 7 * time.Second}
	if !slices.Equal(rec.sleeps, want) {
		t.Errorf("sleeps = %v, want %v (exponential backoff, then Retry-After)", rec.sleeps, want)
	}
	if n := srv.Count(isCDN); n != 4 {
		t.Errorf("CDN requests = %d, want 4", n)
	}
}

func TestRetriesExhausted(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Status: 500})
	_, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	var he *hub.Error
	if !errors.As(err, &he) || he.Status != 500 || !errors.Is(err, errs.ErrHub) {
		t.Fatalf("err = %v, want HTTP 500 hub error", err)
	}
	if len(rec.sleeps) != c.Retries {
		t.Errorf("slept %d times, want %d", len(rec.sleeps), c.Retries)
	}
	if n := srv.Count(isCDN); n != c.Retries+1 {
		t.Errorf("CDN requests = %d, want %d", n, c.Retries+1)
	}
}

func TestCorruptBlobNeverLands(t *testing.T) {
	for _, file := range []string{"model.safetensors", "config.json"} { // sha256 and git sha1
		t.Run(file, func(t *testing.T) {
			srv := hubtest.New(t)
			commit := srv.AddRepo(tinyRepo())
			c, _ := newClient(t, srv)
			srv.AddFault(&hubtest.Fault{Match: hubtest.OnPath(""), Corrupt: true})
			_, err := c.Download(context.Background(), "org/tiny", "main", file)
			if !errors.Is(err, hub.ErrIntegrity) || !errors.Is(err, errs.ErrHub) {
				t.Fatalf("err = %v, want integrity error", err)
			}
			repoDir := filepath.Join(c.Cache.Dir, "models--org--tiny")
			entries, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
			if len(entries) != 0 {
				t.Errorf("blobs/ holds %v after a corrupt download", entries)
			}
			if _, err := os.Lstat(filepath.Join(repoDir, "snapshots", commit, file)); err == nil {
				t.Error("snapshot pointer created for a corrupt file")
			}
			// Without the fault the next attempt succeeds.
			srv.ClearFaults()
			if _, err := c.Download(context.Background(), "org/tiny", "main", file); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOfflineMakesNoRequests(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	ctx := context.Background()
	if _, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.ResetLog()
	c.Offline = true
	p, err := c.Download(ctx, "org/tiny", "main", "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, cfgJSON) {
		t.Error("content differs")
	}
	s, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{Allow: []string{"*.json"}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.FromCache || s.Commit != commit || !slices.Equal(s.Files, []string{"config.json", "tokenizer/tokenizer.json"}) {
		t.Errorf("offline snapshot = %+v", s)
	}
	if _, err := c.Download(ctx, "org/tiny", commit, "model.safetensors"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Download(ctx, "org/other", "main", "config.json")
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "offline") {
		t.Errorf("uncached offline: %v", err)
	}
	if _, _, err := c.Remote("org/tiny", commit, "model.safetensors").ReadRange(ctx, 0, 8); !errors.Is(err, hub.ErrNotCached) {
		t.Errorf("offline range read: %v", err)
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("offline mode made %d requests: %+v", n, srv.Requests())
	}
}

func TestCommitHashCachedNeedsNoRequest(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	if _, err := c.Download(context.Background(), "org/tiny", "main", "config.json"); err != nil {
		t.Fatal(err)
	}
	srv.ResetLog()
	if _, err := c.Download(context.Background(), "org/tiny", commit, "config.json"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("%d requests for a cached commit", n)
	}
}

func TestMetadataFailureFallsBackToCache(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	ctx := context.Background()
	if _, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("5xx", func(t *testing.T) {
		srv.ResetLog()
		srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", ""), Status: 502})
		defer srv.ClearFaults()
		p, err := c.Download(ctx, "org/tiny", "main", "config.json")
		if err != nil || !strings.HasSuffix(p, "config.json") {
			t.Fatalf("Download = %q, %v", p, err)
		}
		s, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{})
		if err != nil || !s.FromCache {
			t.Fatalf("Snapshot = %+v, %v", s, err)
		}
		if n := srv.Count(nil); n != 2 {
			t.Errorf("requests = %d, want 2 (no retries before falling back)", n)
		}
		if !strings.Contains(rec.all(), "using the cached") {
			t.Errorf("no fallback warning: %s", rec.all())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", ""), Delay: 3 * time.Second})
		defer srv.ClearFaults()
		c.EtagTimeout = 100 * time.Millisecond
		defer func() { c.EtagTimeout = 2 * time.Second }()
		start := time.Now()
		if _, err := c.Download(ctx, "org/tiny", "main", "config.json"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("fallback took %s; the etag timeout is 100ms", d)
		}
	})
	t.Run("uncached file is an error", func(t *testing.T) {
		srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", ""), Status: 502})
		defer srv.ClearFaults()
		_, err := c.Download(ctx, "org/tiny", "main", "missing.json")
		var he *hub.Error
		if !errors.As(err, &he) || he.Status != 502 {
			t.Errorf("err = %v, want the 502 after retries", err)
		}
	})
}

func TestEntryNotFoundIsCached(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	ctx := context.Background()
	_, err := c.Download(ctx, "org/tiny", "main", "generation_config.json")
	if !errors.Is(err, hub.ErrEntryNotFound) || !errors.Is(err, errs.ErrHub) {
		t.Fatalf("err = %v", err)
	}
	marker := filepath.Join(c.Cache.Dir, "models--org--tiny", ".no_exist", commit, "generation_config.json")
	if st, err := os.Stat(marker); err != nil || st.Size() != 0 {
		t.Fatalf(".no_exist marker: %v", err)
	}
	srv.ResetLog()
	// Pinned to the commit, the marker answers without a request; offline,
	// "main" resolves through refs/ to the same marker.
	if _, err := c.Download(ctx, "org/tiny", commit, "generation_config.json"); !errors.Is(err, hub.ErrEntryNotFound) {
		t.Errorf("pinned: %v", err)
	}
	c.Offline = true
	if _, err := c.Download(ctx, "org/tiny", "main", "generation_config.json"); !errors.Is(err, hub.ErrEntryNotFound) {
		t.Errorf("offline: %v", err)
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("%d requests for a file cached as absent", n)
	}
}

func TestHubErrorsMapToKinds(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	gated := tinyRepo()
	gated.ID, gated.Gated = "org/gated", true
	srv.AddRepo(gated)
	ctx := context.Background()
	cases := []struct {
		repo, rev, file string
		token           hub.Token
		kind            error
		status          int
	}{
		{"org/nope", "main", "config.json", "", hub.ErrRepoNotFound, 401},
		{"org/tiny", "v9", "config.json", "", hub.ErrRevisionNotFound, 404},
		{"org/gated", "main", "config.json", "", hub.ErrGatedRepo, 401},
		{"org/gated", "main", "config.json", "hf_not_granted", hub.ErrGatedRepo, 403},
	}
	for _, tc := range cases {
		c, _ := newClient(t, srv)
		c.Token = tc.token
		_, err := c.Download(ctx, tc.repo, tc.rev, tc.file)
		var he *hub.Error
		if !errors.Is(err, tc.kind) || !errors.Is(err, errs.ErrHub) || !errors.As(err, &he) || he.Status != tc.status {
			t.Errorf("%s@%s: err = %v, want %v (HTTP %d)", tc.repo, tc.rev, err, tc.kind, tc.status)
		}
		_, err = c.ListFiles(ctx, tc.repo, tc.rev)
		if !errors.Is(err, tc.kind) {
			t.Errorf("ListFiles %s@%s: err = %v, want %v", tc.repo, tc.rev, err, tc.kind)
		}
	}
	// 401/403 without an X-Error-Code.
	c, _ := newClient(t, srv)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", ""), Times: 1, Status: 403})
	_, err := c.Download(ctx, "org/tiny", "main", "config.json")
	if !errors.Is(err, hub.ErrForbidden) {
		t.Errorf("403: %v", err)
	}
}

func TestRenamedRepoRelativeRedirect(t *testing.T) {
	srv := hubtest.New(t)
	r := tinyRepo()
	r.RenamedFrom = []string{"old/tiny"}
	srv.AddRepo(r)
	c, _ := newClient(t, srv)
	p, err := c.Download(context.Background(), "old/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("content differs")
	}
}

func TestIdleTimeoutCatchesStalledBody(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	c.IdleTimeout = 150 * time.Millisecond
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 1, Stall: 10 * time.Second, After: 4096})
	start := time.Now()
	p, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s: the stall was not cut by the idle timeout", d)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("content differs")
	}
	if n := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Range == "bytes=4096-" }); n != 1 {
		t.Errorf("no resume after the stall: %+v", srv.Requests())
	}
}

func TestConcurrentDownloadsOfOneFile(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c1, _ := newClient(t, srv)
	dir := c1.Cache.Dir
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newClient(t, srv)
			c.Cache.Dir = dir // separate clients, as separate processes would be
			p, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
			if err == nil {
				if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
					err = errors.New("content differs")
				}
			}
			errc <- err
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	// The lock serialises the writers: the blob is downloaded once.
	if n := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Method == "GET" }); n != 1 {
		t.Errorf("blob downloaded %d times", n)
	}
}

func TestSnapshotPatternsAndParallelism(t *testing.T) {
	srv := hubtest.New(t)
	files := []hubtest.File{{Path: "config.json", Data: cfgJSON}, {Path: "pytorch_model.bin", Data: []byte("pickle"), LFS: true}}
	for i := 0; i < 12; i++ {
		files = append(files, hubtest.File{Path: fmt.Sprintf("model-%05d-of-00012.safetensors", i+1), Data: randBytes(20_000, uint64(i)), LFS: true})
	}
	commit := srv.AddRepo(hubtest.Repo{ID: "org/big", Files: files})
	c, _ := newClient(t, srv)
	c.Parallel = 3
	var batch []hub.Progress
	var done int64
	c.Progress = func(p hub.Progress) {
		switch p.Event {
		case hub.BatchStart, hub.BatchDone:
			batch = append(batch, p)
		case hub.FileDone:
			done += p.Total
		}
	}
	s, err := c.Snapshot(context.Background(), "org/big", hub.SnapshotOptions{Allow: []string{"*.json", "*.safetensors"}, Ignore: []string{"*-00012-*"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Commit != commit || len(s.Files) != 12 || len(s.RepoFiles) != 14 {
		t.Fatalf("snapshot = %+v", s)
	}
	got, _ := hub.ListDir(s.Dir)
	if !slices.Equal(got, s.Files) {
		t.Errorf("snapshot dir holds %q, want %q", got, s.Files)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return strings.HasSuffix(r.Path, ".bin") }); n != 0 {
		t.Errorf("ignored .bin was requested")
	}
	want := int64(len(cfgJSON) + 11*20_000)
	if len(batch) != 2 || batch[0].Event != hub.BatchStart || batch[0].Files != 12 || batch[0].Total != want || done != want {
		t.Errorf("batch events %+v, file bytes %d; want 12 files, %d bytes", batch, done, want)
	}
}

func TestRemoteRangeReads(t *testing.T) {
	srv := hubtest.New(t)
	r := tinyRepo()
	r.Private = true
	commit := srv.AddRepo(r)
	c, _ := newClient(t, srv)
	c.Token = hub.Token(srv.Token)
	rf := c.Remote("org/tiny", commit, "model.safetensors")
	b, total, err := rf.ReadRange(context.Background(), 0, 8)
	if err != nil || total != int64(len(weights)) || !bytes.Equal(b, weights[:8]) {
		t.Fatalf("ReadRange(0,8) = %x, %d, %v", b, total, err)
	}
	b, _, err = rf.ReadRange(context.Background(), 1000, 5000)
	if err != nil || !bytes.Equal(b, weights[1000:6000]) {
		t.Fatalf("ReadRange(1000,5000): %v", err)
	}
	// First read: hub redirect + CDN; second read goes straight to the CDN.
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].Server != "hub" || reqs[1].Server != "cdn" || reqs[2].Server != "cdn" {
		t.Errorf("requests = %+v", reqs)
	}
	for _, r := range reqs {
		if r.Server == "cdn" && r.Auth != "" {
			t.Error("token sent to the CDN")
		}
	}
	// Regular (non-LFS) files are served by the Hub with Range too.
	b, total, err = c.Remote("org/tiny", commit, "config.json").ReadRange(context.Background(), 2, 5)
	if err != nil || total != int64(len(cfgJSON)) || string(b) != string(cfgJSON[2:7]) {
		t.Errorf("config range = %q, %d, %v", b, total, err)
	}
}
