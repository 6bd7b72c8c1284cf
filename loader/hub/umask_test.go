//go:build unix

package hub_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// What tputool creates in the cache follows the umask, as with
// huggingface_hub: under 002 a group shares the cache (0664 files and lock
// files, 0775 folders), under 022 it does not (0644, 0755). The umask is
// process-wide, so this test is not parallel and restores it.
func TestCacheModesFollowUmask(t *testing.T) {
	for _, tc := range []struct {
		umask          int
		file, dir      os.FileMode
		groupCanLockIt bool
	}{
		{0o002, 0o664, 0o775, true},
		{0o022, 0o644, 0o755, false},
	} {
		srv := hubtest.New(t)
		srv.AddRepo(tinyRepo())
		c, _ := newClient(t, srv)
		c.Cache.Dir = filepath.Join(c.Cache.Dir, "hub") // created by the client
		old := syscall.Umask(tc.umask)
		s, err := c.ListFiles(context.Background(), "org/tiny", "main")
		if err == nil {
			err = c.DownloadFiles(context.Background(), "org/tiny", s.Commit, s.RepoFiles)
		}
		var nf error
		if err == nil {
			_, nf = c.Download(context.Background(), "org/tiny", "main", "missing.json") // .no_exist
		}
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(nf, hub.ErrEntryNotFound) {
			t.Fatalf("missing.json: %v", nf)
		}
		var files, dirs, locks int
		err = filepath.WalkDir(c.Cache.Dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink != 0 {
				return err
			}
			st, err := d.Info()
			if err != nil {
				return err
			}
			want := tc.file
			if d.IsDir() {
				want, dirs = tc.dir, dirs+1
			} else {
				files++
				if strings.HasSuffix(p, ".lock") {
					locks++
				}
			}
			if st.Mode().Perm() != want {
				t.Errorf("umask %03o: %s has mode %v, want %v", tc.umask, p, st.Mode().Perm(), want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// 3 blobs, 3 locks, refs/main, the .no_exist marker, CACHEDIR.TAG;
		// hub, models--org--tiny, blobs, refs, snapshots, <commit>,
		// tokenizer, .no_exist, <commit>, .locks, .locks/models--org--tiny.
		if files != 9 || locks != 3 || dirs != 11 {
			t.Errorf("umask %03o: %d files (%d locks), %d folders; want 9 (3), 11", tc.umask, files, locks, dirs)
		}
	}
}
