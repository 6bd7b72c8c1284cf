//go:build unix

package hub

import (
	"context"
	"os"
	"path/filepath"
	"testing"
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
