package hub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// downloadTiny puts every file of tinyRepo into c's cache.
func downloadTiny(t *testing.T, c *hub.Client) *hub.Snapshot {
	t.Helper()
	ctx := context.Background()
	s, err := c.ListFiles(ctx, "org/tiny", "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DownloadFiles(ctx, "org/tiny", s.Commit, s.RepoFiles); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTruncatedBlobIsFetchedAgain(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	s := downloadTiny(t, c)
	f := tinyRepo().Files[1]
	blob := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs", f.ETag())

	// Truncated to a prefix: the listing's size differs, the blob is
	// resumed from where it stops.
	if err := os.Truncate(blob, 100_000); err != nil {
		t.Fatal(err)
	}
	srv.ResetLog()
	s = downloadTiny(t, c)
	if b, _ := os.ReadFile(filepath.Join(s.Dir, f.Path)); !bytes.Equal(b, weights) {
		t.Fatal("the truncated blob was not repaired")
	}
	if n := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Range == "bytes=100000-" }); n != 1 {
		t.Errorf("want one ranged CDN request from byte 100000, log: %+v", srv.Requests())
	}
	if !strings.Contains(rec.all(), "has 100000 bytes, the Hub announces 300000") {
		t.Errorf("no warning naming the sizes: %s", rec.all())
	}

	// Truncated to bytes that are no prefix: the resumed hash fails, the
	// download restarts from zero, and a valid blob lands.
	if err := os.WriteFile(blob, bytes.Repeat([]byte{7}, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	s = downloadTiny(t, c)
	if b, _ := os.ReadFile(filepath.Join(s.Dir, f.Path)); !bytes.Equal(b, weights) {
		t.Fatal("a short corrupt blob was not replaced")
	}

	// A lone Download of a branch has no listing: the HEAD's size decides.
	if err := os.Truncate(blob, 10); err != nil {
		t.Fatal(err)
	}
	p, err := c.Download(context.Background(), "org/tiny", "main", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("Download returned a truncated blob")
	}

	// When the HEAD fails, a truncated cached file is not the fallback.
	if err := os.Truncate(blob, 10); err != nil {
		t.Fatal(err)
	}
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", "HEAD"), Status: 401})
	if p, err := c.Download(context.Background(), "org/tiny", s.Commit, f.Path); err == nil {
		t.Errorf("a truncated file was the fallback: %s", p)
	}
	srv.ClearFaults()
	if p, err := c.Download(context.Background(), "org/tiny", s.Commit, f.Path); err != nil {
		t.Fatal(err)
	} else if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("not repaired after the HEAD came back")
	}

	// Intact files cost no transfer: the listing plus one HEAD at most.
	srv.ResetLog()
	downloadTiny(t, c)
	if n := srv.Count(func(r hubtest.Request) bool { return r.Method == "GET" && isCDN(r) }); n != 0 {
		t.Errorf("%d CDN downloads of intact files", n)
	}
}

func TestBlobThatIsALinkIsReplaced(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	f := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, bytes.Repeat([]byte{1}, len(weights)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(blobs, f.ETag())); err != nil {
		t.Fatal(err)
	}
	p, err := c.Download(context.Background(), "org/tiny", "main", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("the planted blob link was used")
	}
	if !strings.Contains(rec.all(), "not a regular file") {
		t.Errorf("no warning: %s", rec.all())
	}
	if b, _ := os.ReadFile(outside); !bytes.Equal(b, bytes.Repeat([]byte{1}, len(weights))) {
		t.Error("the file outside the cache was written to")
	}
}

func TestSnapshotLinkOutOfCacheIsRefused(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	s := downloadTiny(t, c)
	outside := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(outside, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	ptr := filepath.Join(s.Dir, "config.json")
	if err := os.Remove(ptr); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, ptr); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, hub.ErrUnsafeLink) {
			t.Errorf("%s: %v, want ErrUnsafeLink", what, err)
			return
		}
		if errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "config.json") ||
			!strings.Contains(err.Error(), "tputool cache rm org/tiny") {
			t.Errorf("%s: message %q should name the file and the fix", what, err)
		}
	}
	_, err := c.Download(ctx, "org/tiny", "main", "config.json")
	check("online Download of a branch", err)
	_, err = c.Download(ctx, "org/tiny", commit, "config.json")
	check("Download of a cached commit", err)
	check("CheckSnapshotLinks", c.Cache.CheckSnapshotLinks("org/tiny", commit))
	_, err = c.Cache.Lookup("org/tiny", "main", "config.json")
	check("Lookup", err)
	c.Offline = true
	_, err = c.ListFiles(ctx, "org/tiny", "main")
	check("offline ListFiles", err)
	_, err = c.Download(ctx, "org/tiny", "main", "config.json")
	check("offline Download", err)

	// Links that stay in the repository are fine, including a blobs/
	// folder moved to another disk and linked back.
	if err := os.Remove(ptr); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("tokenizer", "tokenizer.json"), ptr); err != nil {
		t.Fatal(err)
	}
	if err := c.Cache.CheckSnapshotLinks("org/tiny", commit); err != nil {
		t.Errorf("a link inside the snapshot: %v", err)
	}
	repoDir := filepath.Join(c.Cache.Dir, "models--org--tiny")
	moved := filepath.Join(t.TempDir(), "blobs")
	if err := os.Rename(filepath.Join(repoDir, "blobs"), moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, filepath.Join(repoDir, "blobs")); err != nil {
		t.Fatal(err)
	}
	if err := c.Cache.CheckSnapshotLinks("org/tiny", commit); err != nil {
		t.Errorf("blobs/ linked to another disk: %v", err)
	}
	if _, err := c.Download(ctx, "org/tiny", "main", "model.safetensors"); err != nil {
		t.Errorf("offline Download through a linked blobs/: %v", err)
	}

	// A subfolder of the snapshot linked out of the cache: nothing is
	// written there.
	c.Offline = false
	tokDir := filepath.Join(repoDir, "snapshots", commit, "tokenizer")
	evilDir := t.TempDir()
	if err := os.RemoveAll(tokDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(evilDir, tokDir); err != nil {
		t.Fatal(err)
	}
	_, err = c.Download(ctx, "org/tiny", "main", "tokenizer/tokenizer.json")
	if !errors.Is(err, hub.ErrUnsafeLink) {
		t.Errorf("linked subfolder: %v", err)
	}
	if entries, _ := os.ReadDir(evilDir); len(entries) != 0 {
		t.Errorf("wrote into the linked folder: %v", entries)
	}
	c.Offline = true

	// A snapshot folder that is itself a link out of the cache.
	snap := filepath.Join(repoDir, "snapshots", commit)
	elsewhere := t.TempDir()
	if err := os.RemoveAll(snap); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, snap); err != nil {
		t.Fatal(err)
	}
	if err := c.Cache.CheckSnapshotLinks("org/tiny", commit); !errors.Is(err, hub.ErrUnsafeLink) {
		t.Errorf("snapshot folder linked out of the cache: %v", err)
	}
}

// Credentials in HF_ENDPOINT (http://user:token@host) reach the server as
// basic auth but never a log line or an error: successful downloads with
// -v style debug logging, a 5xx with retries, a server that is no Hub, an
// unparsable endpoint.
func TestEndpointCredentialsAreMasked(t *testing.T) {
	const secret = "hf_endpointSECRET"
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	c.Endpoint = strings.Replace(srv.URL(), "://", "://alice:"+secret+"@", 1)
	ctx := context.Background()
	if _, err := c.Download(ctx, "org/tiny", "main", "model.safetensors"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.all(), "://***@") {
		t.Errorf("debug lines should show masked credentials: %s", rec.all())
	}
	var errsSeen []error
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", "HEAD"), Status: 503})
	_, err := c.Download(ctx, "org/tiny", "main", "config.json")
	errsSeen = append(errsSeen, err)
	srv.ClearFaults()
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", "HEAD"), Header: map[string]string{"X-Repo-Commit": ""}})
	_, err = c.Download(ctx, "org/tiny", "main", "tokenizer/tokenizer.json")
	errsSeen = append(errsSeen, err)
	if !errors.Is(err, hub.ErrMetadata) || !strings.Contains(err.Error(), "://***@") {
		t.Errorf("not-a-Hub error should name the masked endpoint: %v", err)
	}
	srv.ClearFaults()
	c.Endpoint = "http://alice:" + secret + "@bad host/"
	_, err = c.Download(ctx, "org/tiny", "main", "missing.json")
	errsSeen = append(errsSeen, err)
	c.Cache.Dir = t.TempDir()
	_, err = c.ListFiles(ctx, "org/tiny", "main")
	errsSeen = append(errsSeen, err)
	for i, err := range errsSeen {
		if err == nil {
			t.Errorf("case %d did not fail", i)
			continue
		}
		if s := fmt.Sprintf("%v %+v %#v", err, err, err); strings.Contains(s, secret) {
			t.Errorf("case %d: credentials in the error: %s", i, s)
		}
	}
	if strings.Contains(rec.all(), secret) {
		t.Errorf("credentials in a log line: %s", rec.all())
	}
	if got := hub.RedactURL("https://" + secret + "@hub.example/api?sig=" + secret); strings.Contains(got, secret) || got != "https://***@hub.example/api?…" {
		t.Errorf("RedactURL = %q", got)
	}
}

// A download that does not fit on the cache's disk fails before the first
// byte with ErrNoSpace, naming what is needed and what is free and how to
// reclaim space; partial downloads are kept and counted, and resume once
// there is room.
func TestFreeSpaceCheckedBeforeDownload(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	var (
		mu    sync.Mutex
		free  int64 = 1000
		asked []string
	)
	c.FreeSpace = func(dir string) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, dir)
		return free, nil
	}
	ctx := context.Background()
	f := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blobs, f.ETag()+".incomplete"), weights[:100_000], 0o644); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, f := range tinyRepo().Files {
		total += int64(len(f.Data))
	}
	need := total - 100_000

	s, err := c.ListFiles(ctx, "org/tiny", "main")
	if err != nil {
		t.Fatal(err)
	}
	srv.ResetLog()
	err = c.DownloadFiles(ctx, "org/tiny", s.Commit, s.RepoFiles)
	if !errors.Is(err, hub.ErrNoSpace) || errors.Is(err, hub.ErrNotCached) {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
	for _, want := range []string{"needs 195.4 KiB more", "1000 B are free", blobs, "tputool cache rm org/tiny", "97.7 KiB", ".incomplete", "resume"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	if n := srv.Count(nil); n != 0 {
		t.Errorf("%d requests before the space check failed", n)
	}
	if len(asked) != 1 || asked[0] != blobs {
		t.Errorf("free space asked for %v, want once for %s", asked, blobs)
	}
	// A lone Download checks its own file after the HEAD.
	_, err = c.Download(ctx, "org/tiny", "main", f.Path)
	if !errors.Is(err, hub.ErrNoSpace) {
		t.Fatalf("Download: %v, want ErrNoSpace", err)
	}
	if st, err := os.Stat(filepath.Join(blobs, f.ETag()+".incomplete")); err != nil || st.Size() != 100_000 {
		t.Errorf("the partial download was not kept: %v", err)
	}

	// Exactly enough room: the download goes ahead and resumes the part.
	mu.Lock()
	free = need
	mu.Unlock()
	if err := c.DownloadFiles(ctx, "org/tiny", s.Commit, s.RepoFiles); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Range == "bytes=100000-" }); n != 1 {
		t.Errorf("the partial download did not resume: %+v", srv.Requests())
	}
	// Everything cached: nothing is needed, a full disk does not matter.
	mu.Lock()
	free = 0
	mu.Unlock()
	if err := c.DownloadFiles(ctx, "org/tiny", s.Commit, s.RepoFiles); err != nil {
		t.Errorf("cached files on a full disk: %v", err)
	}
	// An unknown free space skips the check.
	c.FreeSpace = func(string) (int64, error) { return 0, errors.New("no statfs") }
	c.Cache.Dir = t.TempDir()
	if _, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{}); err != nil {
		t.Errorf("unknown free space: %v", err)
	}
}
