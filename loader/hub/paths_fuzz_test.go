package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCachePaths: names that come from the Hub (repository id, revision,
// listing file names, ETags) and pass validation can only name paths
// inside their own parts of the cache: blobs, snapshots, refs, .no_exist
// and .locks of that repository. A repository folder maps back to its id,
// so two ids never share a folder.
func FuzzCachePaths(f *testing.F) {
	f.Add("org/name", "main", "config.json", "0123456789abcdef0123456789abcdef01234567")
	f.Add("gpt2", "refs/pr/1", "sub/dir/model.safetensors", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	f.Add("org/../x", "../../etc", "../passwd", "..")
	f.Add("a/b", "v1.0", "a/./b", "x/y")
	f.Add("a--b/c", "/abs", "/etc/passwd", `W/"etag"`)
	f.Add("a/b", "main", `c:\x`, "\x00")
	cache := Cache{Dir: filepath.Join(f.TempDir(), "hub")}
	f.Fuzz(func(t *testing.T, repo, rev, file, etag string) {
		if ValidateRepoID(repo) != nil {
			return
		}
		repoDir := cache.RepoDir(repo)
		mustBeUnder(t, cache.Dir, repoDir)
		if filepath.Dir(repoDir) != filepath.Clean(cache.Dir) {
			t.Fatalf("repo %q: folder %s is not a direct child of the cache", repo, repoDir)
		}
		if back, ok := RepoIDFromFolder(filepath.Base(repoDir)); !ok || back != repo {
			t.Fatalf("repo %q: folder %s maps back to %q", repo, repoDir, back)
		}
		commit := "0123456789abcdef0123456789abcdef01234567"
		if CheckRevision(rev) == nil {
			mustBeUnder(t, filepath.Join(repoDir, "refs"), cache.refPath(repo, rev))
		}
		if CheckFilename(file) == nil {
			snap := cache.SnapshotDir(repo, commit)
			mustBeUnder(t, snap, cache.PointerPath(repo, commit, file))
			mustBeUnder(t, filepath.Join(repoDir, ".no_exist", commit), cache.noExistPath(repo, commit, file))
		}
		if e := NormalizeETag(etag); checkETag(e) == nil {
			blob := cache.BlobPath(repo, e)
			if filepath.Dir(blob) != filepath.Join(repoDir, "blobs") {
				t.Fatalf("etag %q: blob %s is not in blobs/", e, blob)
			}
			lock := cache.LockPath(repo, e)
			if filepath.Dir(lock) != filepath.Join(cache.Dir, ".locks", filepath.Base(repoDir)) {
				t.Fatalf("etag %q: lock %s is not in .locks/", e, lock)
			}
		}
	})
}

// mustBeUnder fails unless p is dir or inside it (lexically).
func mustBeUnder(t *testing.T, dir, p string) {
	t.Helper()
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		t.Fatalf("%s escapes %s (rel %q, %v)", p, dir, rel, err)
	}
}
