//go:build unix

package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	l, err := acquireLock(context.Background(), p)
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
