//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The umask decides the mode, as for os.WriteFile: a group-shared cache
// (umask 002) gets 0664, a private one (022) 0644. Not parallel: the umask
// is process-wide.
func TestWriteRespectsUmask(t *testing.T) {
	for _, tc := range []struct {
		umask int
		want  os.FileMode
	}{{0o002, 0o664}, {0o022, 0o644}, {0o077, 0o600}} {
		old := syscall.Umask(tc.umask)
		p := filepath.Join(t.TempDir(), "f")
		err := Write(p, []byte("x"), 0o666)
		// Overwriting keeps the rule: the new file is created afresh.
		if err == nil {
			err = Write(p, []byte("y"), 0o666)
		}
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != tc.want {
			t.Errorf("umask %03o: mode %v, %v; want %v", tc.umask, st.Mode().Perm(), err, tc.want)
		}
	}
}
