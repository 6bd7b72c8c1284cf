package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrUnsafeLink marks a snapshot file that is a symbolic link leading out
// of its repository's folder in the cache. huggingface_hub only ever links
// snapshots/<commit>/<file> to ../../blobs/<etag>, so such a link was
// planted by hand or by another user of a shared cache; it is refused
// exactly as loader refuses a link out of a local model folder. It is no
// Hub error: the fix is local (`tputool cache rm`), so cmd exits 1.
var ErrUnsafeLink = errors.New("snapshot link leads out of the cache")

// linkRoots are the folders a snapshot link of repo may resolve into: the
// repository's blobs/ (itself possibly a link, to a cache moved to another
// disk) and snapshots/<commit> under the repository's real folder.
func (c Cache) linkRoots(repo, commit string) []string {
	repoDir := c.RepoDir(repo)
	if r, err := filepath.EvalSymlinks(repoDir); err == nil {
		repoDir = r
	}
	roots := []string{filepath.Join(repoDir, "snapshots", commit)}
	if r, err := filepath.EvalSymlinks(filepath.Join(repoDir, "blobs")); err == nil {
		roots = append(roots, r)
	}
	return roots
}

func inside(roots []string, p string) bool {
	for _, r := range roots {
		if p == r {
			return true
		}
		if rel, err := filepath.Rel(r, p); err == nil && filepath.IsLocal(rel) {
			return true
		}
	}
	return false
}

// checkPointer refuses a snapshot file of repo at commit that is a
// symbolic link (or sits under one) resolving outside the repository's
// blobs/ and snapshot folders. Files that do not exist or dangle pass:
// they are never read.
func (c Cache) checkPointer(repo, commit, ptr string) error {
	target, err := filepath.EvalSymlinks(ptr)
	if err != nil {
		return nil
	}
	roots := c.linkRoots(repo, commit)
	if inside(roots, target) {
		return nil
	}
	rel, _ := filepath.Rel(c.SnapshotDir(repo, commit), ptr)
	return c.unsafeLink(repo, filepath.ToSlash(rel), target)
}

func (c Cache) unsafeLink(repo, rel, target string) error {
	return fmt.Errorf("%s: snapshot file %s resolves to %s, outside %s: %w; refusing to read it "+
		"(remove the model with `tputool cache rm %s` and download it again)",
		repo, rel, target, c.RepoDir(repo), ErrUnsafeLink, repo)
}

// CheckSnapshotLinks walks snapshots/<commit> of repo and refuses any
// symbolic link that resolves outside the repository's blobs/ and that
// snapshot folder, as loader.CheckLinks does for a local folder. A
// missing snapshot passes (nothing to read).
func (c Cache) CheckSnapshotLinks(repo, commit string) error {
	dir := c.SnapshotDir(repo, commit)
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	roots := c.linkRoots(repo, commit)
	if !inside(roots, root) {
		return c.unsafeLink(repo, ".", root)
	}
	link, target, err := LinkOutside(root, roots, false)
	if err != nil || link == "" {
		return err
	}
	rel, _ := filepath.Rel(root, link)
	return c.unsafeLink(repo, filepath.ToSlash(rel), target)
}

// LinkOutside walks the folder root (already free of links itself) and
// returns the first symbolic link under it that resolves outside every
// allowed folder, with what it resolves to; "" when there is none. Hidden
// folders (.git, .cache) are skipped and dangling links ignored: nothing
// reads them. With strict, an unreadable entry below root is an error;
// otherwise it is passed over. The Hub cache's snapshot check and
// loader.CheckLinks (local model folders) share it.
func LinkOutside(root string, allowed []string, strict bool) (link, target string, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root || strict {
				return err
			}
			return nil
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		t, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil // dangling or a loop: never read
		}
		if !inside(allowed, t) {
			link, target = p, t
			return filepath.SkipAll
		}
		return nil
	})
	return link, target, err
}
