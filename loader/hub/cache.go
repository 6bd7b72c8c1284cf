package hub

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tputool/tputool/internal/atomicfile"
)

// Cache is a huggingface_hub cache directory (HF_HUB_CACHE). Its methods
// only touch the disk; Client adds the network.
type Cache struct {
	Dir string
}

// Permissions of what tputool creates in the cache, before the umask: as
// Python's open() and os.makedirs (and so huggingface_hub and filelock),
// files 0666 and folders 0777, so that the process umask decides. Under
// umask 002 a cache shared by a group gets 0664 files, 0775 folders and
// 0664 lock files that every member can open and lock; under 022, 0644
// and 0755.
const (
	filePerm os.FileMode = 0o666
	dirPerm  os.FileMode = 0o777
)

// permissionHint adds the fix to a permission error met while writing to
// the cache: a cache shared by a group needs group-writable files and
// folders, which umask 002 gives new ones.
func (c Cache) permissionHint(err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return fmt.Errorf("%w; a cache shared by a group needs group-writable files and folders: "+
		"have their owner run `chmod -R g+w %s`, and use umask 002 (as huggingface_hub needs too)", err, c.Dir)
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitHash reports whether rev is a full 40-hex commit hash (which is
// immutable, so a cached snapshot for it never needs a network check).
func IsCommitHash(rev string) bool { return commitRE.MatchString(rev) }

// RepoFolderName is the cache folder of a model repository:
// "org/name" -> "models--org--name".
func RepoFolderName(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// RepoIDFromFolder inverts RepoFolderName; ok is false for folders that are
// not model repositories (datasets--, spaces--, .locks, ...).
func RepoIDFromFolder(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "models--")
	if !ok || rest == "" {
		return "", false
	}
	return strings.ReplaceAll(rest, "--", "/"), true
}

// RepoDir is the repository's folder in the cache.
func (c Cache) RepoDir(repo string) string { return filepath.Join(c.Dir, RepoFolderName(repo)) }

// BlobPath is where a file with this ETag is stored.
func (c Cache) BlobPath(repo, etag string) string {
	return filepath.Join(c.RepoDir(repo), "blobs", etag)
}

// SnapshotDir is the folder of one commit's files.
func (c Cache) SnapshotDir(repo, commit string) string {
	return filepath.Join(c.RepoDir(repo), "snapshots", commit)
}

// PointerPath is the snapshot path of a repository file.
func (c Cache) PointerPath(repo, commit, file string) string {
	return filepath.Join(c.SnapshotDir(repo, commit), filepath.FromSlash(file))
}

// LockPath is the lock file huggingface_hub takes while writing a blob.
func (c Cache) LockPath(repo, etag string) string {
	return filepath.Join(c.Dir, ".locks", RepoFolderName(repo), etag+".lock")
}

func (c Cache) refPath(repo, rev string) string {
	return filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev))
}

func (c Cache) noExistPath(repo, commit, file string) string {
	return filepath.Join(c.RepoDir(repo), ".no_exist", commit, filepath.FromSlash(file))
}

// ReadRef returns the commit a branch or tag was last resolved to.
func (c Cache) ReadRef(repo, rev string) (string, bool) {
	if CheckRevision(rev) != nil {
		return "", false
	}
	b, err := os.ReadFile(c.refPath(repo, rev))
	if err != nil {
		return "", false
	}
	commit := strings.TrimSpace(string(b))
	if !IsCommitHash(commit) {
		return "", false
	}
	return commit, true
}

// ResolveCommit maps a revision to a commit without the network: a commit
// hash is itself, a branch or tag goes through refs/.
func (c Cache) ResolveCommit(repo, rev string) (string, bool) {
	if IsCommitHash(rev) {
		return rev, true
	}
	return c.ReadRef(repo, rev)
}

// WriteRef records that rev resolved to commit. It does nothing when rev is
// the commit itself or the ref is already up to date (so a read-only cache
// keeps working), and writes atomically otherwise.
func (c Cache) WriteRef(repo, rev, commit string) error {
	if rev == commit {
		return nil
	}
	if err := CheckRevision(rev); err != nil {
		return err
	}
	if old, ok := c.ReadRef(repo, rev); ok && old == commit {
		return nil
	}
	p := c.refPath(repo, rev)
	if err := os.MkdirAll(filepath.Dir(p), dirPerm); err != nil {
		return err
	}
	return atomicfile.Write(p, []byte(commit), filePerm)
}

// Lookup finds a file in the cache without the network, like
// huggingface_hub's try_to_load_from_cache. It returns the snapshot path,
// or an error wrapping ErrEntryNotFound when the cache records that the
// file does not exist at that commit, or ErrNotCached.
func (c Cache) Lookup(repo, rev, file string) (string, error) {
	if err := CheckFilename(file); err != nil {
		return "", err
	}
	commit, ok := c.ResolveCommit(repo, rev)
	if !ok {
		return "", &Error{Kind: ErrNotCached, Repo: repo, Revision: rev, File: file,
			Detail: "no snapshot of this revision in " + c.Dir}
	}
	if st, err := os.Stat(c.noExistPath(repo, commit, file)); err == nil && st.Mode().IsRegular() {
		return "", &Error{Kind: ErrEntryNotFound, Repo: repo, Revision: rev, File: file,
			Detail: "recorded as absent in the cache (.no_exist)"}
	}
	p := c.PointerPath(repo, commit, file)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		if err := c.checkPointer(repo, commit, p); err != nil {
			return "", err
		}
		return p, nil
	}
	return "", &Error{Kind: ErrNotCached, Repo: repo, Revision: rev, File: file,
		Detail: "not in snapshot " + commit + " of " + c.Dir}
}

// markNoExist records that file is absent at commit, so optional files are
// not asked for again.
func (c Cache) markNoExist(repo, commit, file string) error {
	p := c.noExistPath(repo, commit, file)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), dirPerm); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, filePerm)
	if err != nil {
		return err
	}
	return f.Close()
}

// link makes snapshots/<commit>/<file> a relative symlink to blobs/<etag>,
// as huggingface_hub's _create_symlink does. Where symlinks are not
// available it falls back to a hard link, then to a copy.
func (c Cache) link(repo, etag, commit, file string) error {
	blob := c.BlobPath(repo, etag)
	ptr := c.PointerPath(repo, commit, file)
	if err := os.MkdirAll(filepath.Dir(ptr), dirPerm); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(ptr), blob)
	if err != nil {
		rel = blob
	}
	if err := os.Remove(ptr); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err = os.Symlink(rel, ptr)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrExist) {
		// Another process linked it between Remove and Symlink.
		if target, rerr := os.Readlink(ptr); rerr == nil && target == rel {
			return nil
		}
		return err
	}
	if lerr := os.Link(blob, ptr); lerr == nil {
		return nil
	}
	return copyFile(blob, ptr)
}

// cacheDirTag is the Cache Directory Tagging Standard file huggingface_hub
// writes, so backup tools skip the cache.
const cacheDirTag = "Signature: 8a477f597d28d172789f06886806bc55\n" +
	"# This file is a cache directory tag created by huggingface_hub.\n" +
	"# For information about cache directory tags, see:\n" +
	"#\thttps://bford.info/cachedir/\n"

func (c Cache) tagDir() {
	p := filepath.Join(c.Dir, "CACHEDIR.TAG")
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = os.WriteFile(p, []byte(cacheDirTag), filePerm) // best effort, as upstream
}

// CheckFilename rejects repository file names that are empty or would
// escape the snapshot folder: absolute paths, drive letters, backslashes,
// "." or ".." segments.
func CheckFilename(file string) error {
	if file == "" {
		return fmt.Errorf("empty file name")
	}
	if strings.ContainsRune(file, '\\') || strings.HasPrefix(file, "/") || strings.ContainsRune(file, 0) ||
		(len(file) >= 2 && file[1] == ':') {
		return fmt.Errorf("file name %q is not a relative repository path", file)
	}
	for _, seg := range strings.Split(file, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("file name %q has an empty, \".\" or \"..\" path segment", file)
		}
	}
	return nil
}

// CheckRevision rejects revisions that cannot name a refs/ file: empty,
// absolute, with backslashes or "." / ".." segments. Branch names with
// slashes ("refs/pr/1") are fine.
func CheckRevision(rev string) error {
	if rev == "" {
		return fmt.Errorf("empty revision")
	}
	if err := CheckFilename(rev); err != nil {
		return fmt.Errorf("revision %q is not a valid branch, tag or commit name", rev)
	}
	return nil
}

// checkETag rejects ETags that cannot be a blob file name.
func checkETag(etag string) error {
	if etag == "" || etag == "." || etag == ".." || strings.ContainsAny(etag, "/\\\x00") || path.Base(etag) != etag {
		return fmt.Errorf("ETag %q cannot name a blob file", etag)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, filePerm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
