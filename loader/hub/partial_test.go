package hub

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tputool/tputool/loader/hub/hubtest"
)

// logRec collects a client's warnings and debug lines.
type logRec struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRec) Warn(m string)  { r.mu.Lock(); r.lines = append(r.lines, "warn: "+m); r.mu.Unlock() }
func (r *logRec) Debug(m string) { r.mu.Lock(); r.lines = append(r.lines, "debug: "+m); r.mu.Unlock() }
func (r *logRec) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

func noisyBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// big is an LFS file of several read chunks, so that a progress hook runs
// while the body is still arriving.
var big = hubtest.File{Path: "model.safetensors", Data: noisyBytes(3<<20, 7), LFS: true}

func partialServer(t *testing.T) *hubtest.Server {
	srv := hubtest.New(t)
	srv.AddRepo(hubtest.Repo{ID: "org/tiny", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"a":1}`)}, big}})
	return srv
}

func partialClient(srv *hubtest.Server, dir string) (*Client, *logRec) {
	rec := &logRec{}
	return &Client{Endpoint: srv.URL(), Cache: Cache{Dir: dir}, Retries: 3, Logger: rec,
		Sleep: func(context.Context, time.Duration) error { return nil }}, rec
}

// fakeLocks makes every lock succeed at once, as flock does on Lustre
// mounted localflock or NFS mounted nolock, where it excludes nobody.
func fakeLocks(t *testing.T) {
	old := lockFunc
	lockFunc = func(*os.File) (bool, error) { return true, nil }
	t.Cleanup(func() { lockFunc = old })
}

func partials(t *testing.T, blobs string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(blobs, "*.incomplete"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Bytes that change on the disk while the download runs (another writer
// whose lock the file system did not honour, a bad disk) are caught by the
// check of the file as written, never published under the blob's name,
// though every byte received from the network was right.
func TestBlobIsVerifiedAsWrittenToDisk(t *testing.T) {
	for _, file := range []string{big.Path, "config.json"} { // sha256 and git blob sha1
		t.Run(file, func(t *testing.T) {
			srv := partialServer(t)
			c, _ := partialClient(srv, t.TempDir())
			blobs := filepath.Join(c.Cache.RepoDir("org/tiny"), "blobs")
			var once sync.Once
			c.Progress = func(p Progress) {
				if p.Event != FileAdvance {
					return
				}
				once.Do(func() {
					for _, part := range partials(t, blobs) {
						f, err := os.OpenFile(part, os.O_RDWR, 0)
						if err != nil {
							t.Error(err)
							return
						}
						b := make([]byte, 1)
						f.ReadAt(b, 0)
						f.WriteAt([]byte{b[0] ^ 0xff}, 0)
						f.Close()
					}
				})
			}
			_, err := c.Download(context.Background(), "org/tiny", "main", file)
			if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "as written to disk") {
				t.Fatalf("err = %v, want an integrity error on the file as written", err)
			}
			st := hubtest.CheckCache(t, c.Cache.Dir)
			if st.Blobs != 0 || st.Pointers != 0 || st.Incomplete != 0 {
				t.Errorf("cache after a corrupt write: %+v", st)
			}
		})
	}
}

// Two processes on the same blob where the lock excludes nobody: each
// writes its own partial file, neither truncates, removes or renames the
// other's, both succeed and the blob is right. (With one shared
// <etag>.incomplete the second published the first's file from under it.)
func TestWritersWithoutWorkingLockKeepTheirOwnPartialFiles(t *testing.T) {
	fakeLocks(t)
	srv := partialServer(t)
	dir := t.TempDir()
	a, _ := partialClient(srv, dir)
	b, _ := partialClient(srv, dir)
	var (
		once sync.Once
		bErr error
		ran  bool
	)
	a.Progress = func(p Progress) {
		if p.Event == FileAdvance && p.Bytes < p.Total {
			once.Do(func() {
				ran = true
				_, bErr = b.Download(context.Background(), "org/tiny", "main", big.Path)
			})
		}
	}
	p, err := a.Download(context.Background(), "org/tiny", "main", big.Path)
	if !ran {
		t.Fatal("the second writer never ran during the first download")
	}
	if bErr != nil {
		t.Errorf("second writer: %v", bErr)
	}
	if err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, big.Data) {
		t.Error("blob differs")
	}
	if st := hubtest.CheckCache(t, dir); st.Blobs != 1 || st.Pointers != 1 || st.Incomplete != 0 {
		t.Errorf("cache state %+v", st)
	}
}

// Resume across runs: a failed run parks its bytes at <etag>.incomplete and
// the next resumes them; a private partial file nobody has written to for
// staleAfter (a killed process) is adopted, a fresh one (maybe a live
// writer's) is left alone, and stale extras go once the blob is complete.
func TestPartialFilesResumeAcrossRuns(t *testing.T) {
	srv := partialServer(t)
	c, _ := partialClient(srv, t.TempDir())
	c.Retries = 0
	ctx := context.Background()
	blobs := filepath.Join(c.Cache.RepoDir("org/tiny"), "blobs")
	etag := big.SHA256()

	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Drop: true, After: 100_000})
	if _, err := c.Download(ctx, "org/tiny", "main", big.Path); !errors.Is(err, ErrNetwork) {
		t.Fatalf("err = %v, want a network error", err)
	}
	parts := partials(t, blobs)
	if len(parts) != 1 || filepath.Base(parts[0]) != etag+".incomplete" {
		t.Fatalf("partial files after a failure: %v, want the parked %s.incomplete", parts, etag)
	}
	srv.ClearFaults()
	srv.ResetLog()
	if _, err := c.Download(ctx, "org/tiny", "main", big.Path); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "bytes=100000-" }); n != 1 {
		t.Errorf("the parked bytes were not resumed: %+v", srv.Requests())
	}

	// A killed process's leftovers, and a live writer's file.
	c.Cache.Dir = t.TempDir()
	blobs = filepath.Join(c.Cache.RepoDir("org/tiny"), "blobs")
	os.MkdirAll(blobs, 0o755)
	old := time.Now().Add(-3 * time.Hour)
	write := func(name string, data []byte, mtime time.Time) string {
		p := filepath.Join(blobs, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write(etag+".0123abcd.incomplete", big.Data[:200_000], old)
	write(etag+".00000000.incomplete", big.Data[:50_000], old)
	live := write(etag+".89abcdef.incomplete", []byte("a live writer's bytes"), time.Now())
	srv.ResetLog()
	p, err := c.Download(ctx, "org/tiny", "main", big.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, big.Data) {
		t.Error("blob differs")
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Range == "bytes=200000-" }); n != 1 {
		t.Errorf("the biggest stale partial file was not resumed: %+v", srv.Requests())
	}
	if parts := partials(t, blobs); len(parts) != 1 || parts[0] != live {
		t.Errorf("partial files left: %v, want only the live one %s", parts, live)
	}
	if b, _ := os.ReadFile(live); string(b) != "a live writer's bytes" {
		t.Error("the live writer's file was touched")
	}
}
