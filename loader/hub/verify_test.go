package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

func statuses(v *hub.Verification) map[string]string {
	out := map[string]string{}
	for _, rv := range v.Revisions {
		for _, f := range rv.Files {
			out[rv.Commit[:7]+" "+f.File] = f.Status
		}
	}
	return out
}

// Verify rehashes a cache laid out by huggingface_hub: sha256 for LFS
// blobs, git sha1 for the others, each blob once; then finds a corrupt
// blob of the right size (which a size check cannot), a missing blob, a
// plain-file copy, an ETag that is no hash, and a link out of the cache.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	commitA, commitB := buildPythonCache(t, dir)
	cache := hub.Cache{Dir: dir}
	ctx := context.Background()
	var last, total int64
	v, err := cache.Verify(ctx, "google/tiny", hub.VerifyOptions{Progress: func(d, tot int64) { last, total = d, tot }})
	if err != nil {
		t.Fatal(err)
	}
	if v.Failed() || v.Checked != 5 || v.OK != 5 {
		t.Fatalf("clean cache: %+v", v)
	}
	cfgB := len(`{"model_type":"llama","v":2}`)
	sched := len(`{"_class_name":"DDIMScheduler"}`)
	want := int64(len(cfgJSON) + len(weights) + cfgB + sched) // the shared weights once
	if v.Bytes != want || last != want || total != want {
		t.Errorf("hashed %d bytes (progress %d of %d), want %d", v.Bytes, last, total, want)
	}
	algos := map[string]string{}
	for _, f := range v.Revisions[0].Files {
		algos[f.File] = f.Algorithm
	}
	if algos["model.safetensors"] != "sha256" || algos["config.json"] != "git-sha1" {
		t.Errorf("algorithms = %v", algos)
	}

	repo := filepath.Join(dir, "models--google--tiny")
	w := hubtest.File{Path: "model.safetensors", Data: weights, LFS: true}
	cfg := hubtest.File{Path: "config.json", Data: cfgJSON}
	blob := filepath.Join(repo, "blobs", w.ETag())
	// One flipped byte: same size, different sha256.
	b, _ := os.ReadFile(blob)
	b[1234] ^= 0x40
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// config.json of A gone from blobs/.
	if err := os.Remove(filepath.Join(repo, "blobs", cfg.ETag())); err != nil {
		t.Fatal(err)
	}
	v, err = cache.Verify(ctx, "google/tiny", hub.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := statuses(v)
	if got[commitA[:7]+" model.safetensors"] != hub.VerifyMismatch || got[commitB[:7]+" model.safetensors"] != hub.VerifyMismatch ||
		got[commitA[:7]+" config.json"] != hub.VerifyMissing || got[commitB[:7]+" config.json"] != hub.VerifyOK ||
		!v.Failed() || v.Mismatches != 2 || v.Missing != 1 {
		t.Errorf("statuses = %v (%+v)", got, v)
	}
	for _, f := range v.Revisions[0].Files {
		if f.File == "model.safetensors" && (f.Expected != w.ETag() || f.Actual == w.ETag() || f.Blob != blob ||
			!strings.Contains(f.Detail, "sha256 of the content is")) {
			t.Errorf("mismatch report = %+v", f)
		}
	}

	// One revision by ref; a plain copy that names a blob is ok, one that
	// names none is unverified; a link out of the cache is a mismatch.
	ptrB := filepath.Join(repo, "snapshots", commitB, "config.json")
	data, _ := os.ReadFile(ptrB)
	os.Remove(ptrB)
	if err := os.WriteFile(ptrB, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "snapshots", commitB, "notes.txt"), []byte("hand-made"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "x")
	os.WriteFile(outside, []byte("x"), 0o644)
	if err := os.Symlink(outside, filepath.Join(repo, "snapshots", commitB, "evil.json")); err != nil {
		t.Fatal(err)
	}
	v, err = cache.Verify(ctx, "google/tiny", hub.VerifyOptions{Revision: "refs/pr/1"})
	if err != nil {
		t.Fatal(err)
	}
	got = statuses(v)
	b7 := commitB[:7]
	if len(v.Revisions) != 1 || got[b7+" config.json"] != hub.VerifyOK || got[b7+" notes.txt"] != hub.VerifyUnverified ||
		got[b7+" evil.json"] != hub.VerifyMismatch || got[b7+" model.safetensors"] != hub.VerifyMismatch {
		t.Errorf("revision B: %v", got)
	}

	// A non-hash ETag (a non-Hub server) cannot be checked.
	odd := filepath.Join(repo, "blobs", "not-a-hash")
	os.WriteFile(odd, []byte("y"), 0o644)
	os.Symlink("../../blobs/not-a-hash", filepath.Join(repo, "snapshots", commitA, "odd.txt"))
	v, _ = cache.Verify(ctx, "google/tiny", hub.VerifyOptions{Revision: commitA[:8]})
	if s := statuses(v)[commitA[:7]+" odd.txt"]; s != hub.VerifyUnverified {
		t.Errorf("non-hash ETag: %s", s)
	}

	for _, tc := range []struct{ repo, rev string }{{"google/none", ""}, {"google/tiny", "deadbeef"}} {
		_, err := cache.Verify(ctx, tc.repo, hub.VerifyOptions{Revision: tc.rev})
		if !errors.Is(err, hub.ErrAbsent) || errors.Is(err, errs.ErrHub) {
			t.Errorf("%s@%s: %v, want ErrAbsent", tc.repo, tc.rev, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cache.Verify(cctx, "google/tiny", hub.VerifyOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// What tputool downloads verifies clean.
func TestVerifyAfterDownload(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	downloadTiny(t, c)
	v, err := c.Cache.Verify(context.Background(), "org/tiny", hub.VerifyOptions{Revision: "main"})
	if err != nil || v.Failed() || v.OK != 3 || v.Checked != 3 {
		t.Fatalf("%+v, %v", v, err)
	}
}

// BenchmarkVerify rehashes one 256 MiB LFS blob (sha256 only, as for
// weights); b.SetBytes makes the MB/s the verify throughput.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	data := randBytes(256<<20, 3)
	f := hubtest.File{Path: "model.safetensors", Data: data, LFS: true}
	repo := filepath.Join(dir, "models--org--big")
	commit := "0123456789abcdef0123456789abcdef01234567"
	if err := os.MkdirAll(filepath.Join(repo, "blobs"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "blobs", f.ETag()), data, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "snapshots", commit), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("../../blobs/"+f.ETag(), filepath.Join(repo, "snapshots", commit, f.Path)); err != nil {
		b.Fatal(err)
	}
	cache := hub.Cache{Dir: dir}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		v, err := cache.Verify(context.Background(), "org/big", hub.VerifyOptions{})
		if err != nil || v.OK != 1 {
			b.Fatal(v, err)
		}
	}
}

// With Remote, files are checked against the Hub's listing: a blob renamed
// to match its corrupt content passes the offline check but not this one;
// a file the commit does not have is a mismatch; listed files that were
// never downloaded are counted, not failed.
func TestVerifyRemote(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	ctx := context.Background()
	s, err := c.Snapshot(ctx, "org/tiny", hub.SnapshotOptions{Ignore: []string{"tokenizer/*"}})
	if err != nil {
		t.Fatal(err)
	}
	remote := hub.VerifyOptions{Remote: func(ctx context.Context, commit string) (map[string]string, error) {
		return c.RemoteETags(ctx, "org/tiny", commit)
	}}
	v, err := c.Cache.Verify(ctx, "org/tiny", remote)
	if err != nil || v.Failed() || v.OK != 2 || v.NotDownloaded != 1 ||
		len(v.Revisions[0].NotDownloaded) != 1 || v.Revisions[0].NotDownloaded[0] != "tokenizer/tokenizer.json" {
		t.Fatalf("clean: %+v, %v", v, err)
	}

	// Consistent tampering: corrupt the weights, rename the blob to the
	// new sha256 and relink the snapshot entry.
	w := tinyRepo().Files[1]
	blobs := filepath.Join(c.Cache.Dir, "models--org--tiny", "blobs")
	bad := append([]byte(nil), w.Data...)
	bad[7] ^= 1
	forged := hubtest.File{Data: bad, LFS: true}.SHA256()
	if err := os.WriteFile(filepath.Join(blobs, forged), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	ptr := filepath.Join(s.Dir, w.Path)
	os.Remove(ptr)
	if err := os.Symlink("../../blobs/"+forged, ptr); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "extra.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err = c.Cache.Verify(ctx, "org/tiny", hub.VerifyOptions{})
	if err != nil || statuses(v)[s.Commit[:7]+" model.safetensors"] != hub.VerifyOK {
		t.Fatalf("offline, the forged blob is consistent: %v %v", statuses(v), err)
	}
	v, err = c.Cache.Verify(ctx, "org/tiny", remote)
	if err != nil {
		t.Fatal(err)
	}
	got := statuses(v)
	if got[s.Commit[:7]+" model.safetensors"] != hub.VerifyMismatch || got[s.Commit[:7]+" extra.json"] != hub.VerifyMismatch ||
		got[s.Commit[:7]+" config.json"] != hub.VerifyOK || v.Mismatches != 2 {
		t.Errorf("remote: %v", got)
	}
	for _, f := range v.Revisions[0].Files {
		if f.File == "model.safetensors" && (f.Expected != w.ETag() || !strings.Contains(f.Detail, "the Hub's ETag is "+w.ETag())) {
			t.Errorf("forged report: %+v", f)
		}
	}
	// The listing failing is the call's error (a Hub error, exit 5).
	srv.AddFault(&hubtest.Fault{Status: 404, Header: map[string]string{"X-Error-Code": "RepoNotFound"}})
	if _, err := c.Cache.Verify(ctx, "org/tiny", remote); !errors.Is(err, errs.ErrHub) {
		t.Errorf("listing failure: %v", err)
	}
}
