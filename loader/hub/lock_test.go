//go:build unix

package hub

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tputool/tputool/loader/hub/hubtest"
)

// A lock file another user left without write permission for us is
// still locked (flock needs only a read descriptor), and excludes a second
// holder. Root ignores file modes, so this needs an ordinary user.
func TestLockFileWithoutWritePermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root bypasses file permissions")
	}
	p := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	l, err := acquireLock(context.Background(), p, nil)
	if err != nil {
		t.Fatalf("read-only lock file: %v", err)
	}
	defer l.release()
	f, _ := os.Open(p)
	defer f.Close()
	if ok, err := tryLock(f); ok || err != nil {
		t.Errorf("a second lock succeeded (%v, %v)", ok, err)
	}
}

// A cache folder another user made without group write: the download
// fails naming the fix, not with a bare "permission denied".
func TestUnwritableCacheSaysHowToShare(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root bypasses file permissions")
	}
	srv := hubtest.New(t)
	srv.AddRepo(hubtest.Repo{ID: "org/tiny", Files: []hubtest.File{{Path: "config.json", Data: []byte(`{}`)}}})
	dir := t.TempDir()
	blobs := filepath.Join(dir, "models--org--tiny", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(blobs, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(blobs, 0o755)
	c := &Client{Endpoint: srv.URL(), Cache: Cache{Dir: dir}}
	_, err := c.Download(context.Background(), "org/tiny", "main", "config.json")
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "chmod -R g+w "+dir) ||
		!strings.Contains(err.Error(), "umask 002") {
		t.Fatalf("err = %v", err)
	}
}

// Where flock is not implemented (ENOSYS, as filelock checks; EOPNOTSUPP
// on FUSE and Lustre noflock mounts; ENOLCK on NFS without a lock
// manager), downloads fall back to a soft lock file instead of failing,
// and leave no soft lock behind.
func TestNoFlockFallsBackToSoftLock(t *testing.T) {
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EOPNOTSUPP, unix.ENOLCK} {
		t.Run(errno.Error(), func(t *testing.T) {
			old := lockFunc
			lockFunc = func(*os.File) (bool, error) { return false, errno }
			defer func() { lockFunc = old }()
			srv := partialServer(t)
			c, rec := partialClient(srv, t.TempDir())
			p, err := c.Download(context.Background(), "org/tiny", "main", big.Path)
			if err != nil {
				t.Fatalf("download without flock: %v", err)
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, big.Data) {
				t.Error("file differs")
			}
			if !strings.Contains(rec.String(), "does not support flock") {
				t.Errorf("no warning: %s", rec)
			}
			soft := c.Cache.LockPath("org/tiny", big.SHA256()) + ".soft"
			if _, err := os.Stat(soft); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("soft lock %s left behind (%v)", soft, err)
			}
		})
	}
	// Any other flock error still fails, naming the lock.
	old := lockFunc
	lockFunc = func(*os.File) (bool, error) { return false, unix.EIO }
	defer func() { lockFunc = old }()
	srv := partialServer(t)
	c, _ := partialClient(srv, t.TempDir())
	if _, err := c.Download(context.Background(), "org/tiny", "main", big.Path); !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), ".lock") {
		t.Errorf("EIO: %v", err)
	}
}

// A soft lock excludes while its holder refreshes it, and one left by a
// dead process (untouched for softLockStale) is broken.
func TestSoftLockExcludesAndGoesStale(t *testing.T) {
	oldRefresh, oldStale := softLockRefresh, softLockStale
	softLockRefresh, softLockStale = 20*time.Millisecond, time.Minute
	defer func() { softLockRefresh, softLockStale = oldRefresh, oldStale }()
	p := filepath.Join(t.TempDir(), "x.lock.soft")

	l, err := acquireSoftLock(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// The holder keeps it fresh even when someone ages it.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	// Poll rather than sleep a fixed time: a loaded machine may run the
	// heartbeat late.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := os.Stat(p)
		if err == nil && time.Since(st.ModTime()) < time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat did not refresh the lock within 10 s: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := acquireSoftLock(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second holder of a live soft lock: %v", err)
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("released soft lock still there: %v", err)
	}

	// A dead holder's lock: untouched for longer than softLockStale.
	if err := os.WriteFile(p, []byte("4242 elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, old, old)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	l, err = acquireSoftLock(ctx2, p)
	if err != nil {
		t.Fatalf("stale soft lock not broken: %v", err)
	}
	if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), strconv.Itoa(os.Getpid())+" ") {
		t.Errorf("lock file holds %q, want our pid", b)
	}
	l.release()

	// A stale lock that cannot be removed (a non-empty folder in its
	// place) is an error naming it, not a loop that never pauses.
	stuck := filepath.Join(t.TempDir(), "y.lock.soft")
	if err := os.MkdirAll(filepath.Join(stuck, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(stuck, old, old)
	if _, err := acquireSoftLock(ctx2, stuck); err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stale soft lock") {
		t.Errorf("unremovable stale soft lock: %v", err)
	}
}
