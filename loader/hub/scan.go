package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// CachedRepo is one model repository in the cache.
type CachedRepo struct {
	ID  string `json:"id"`
	Dir string `json:"dir"`
	// SizeOnDisk is the total size of its blobs (files shared by several
	// revisions count once).
	SizeOnDisk int64 `json:"size_on_disk"`
	// Blobs is how many blobs it holds.
	Blobs int `json:"blobs"`
	// IncompleteBytes and IncompleteFiles are the partial downloads
	// (blobs/*.incomplete): kept so that a download resumes, removed with
	// the repository.
	IncompleteBytes int64 `json:"incomplete_bytes"`
	IncompleteFiles int   `json:"incomplete_files"`
	// LastModified is the newest blob's modification time.
	LastModified time.Time        `json:"last_modified"`
	Revisions    []CachedRevision `json:"revisions"`
}

// CachedRevision is one snapshot folder.
type CachedRevision struct {
	Commit string `json:"commit"`
	// Refs are the branches and tags that point to it.
	Refs []string `json:"refs"`
	Dir  string   `json:"dir"`
	// Size is the size of the files it links to (shared blobs count in
	// every revision that uses them).
	Size  int64 `json:"size"`
	Files int   `json:"files"`
	// LastModified is the snapshot folder's modification time.
	LastModified time.Time `json:"last_modified"`
	// blobs it links to, by blob path.
	blobs map[string]bool
}

// Scan lists the model repositories of the cache, sorted by id. Problems
// with single entries (a dangling symlink, an unreadable folder) are
// returned as warnings, not failures; a missing cache folder is an empty
// cache.
func (c Cache) Scan() (repos []CachedRepo, warnings []string, err error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cache %s: %w", c.Dir, err)
	}
	for _, e := range entries {
		id, ok := RepoIDFromFolder(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		r, warn := c.scanRepo(id)
		warnings = append(warnings, warn...)
		repos = append(repos, r)
	}
	sort.Slice(repos, func(i, j int) bool { return repos[i].ID < repos[j].ID })
	return repos, warnings, nil
}

// ScanRepo describes one repository; ok is false when it is not cached.
func (c Cache) ScanRepo(repo string) (CachedRepo, []string, bool) {
	if st, err := os.Stat(c.RepoDir(repo)); err != nil || !st.IsDir() {
		return CachedRepo{}, nil, false
	}
	r, warn := c.scanRepo(repo)
	return r, warn, true
}

func (c Cache) scanRepo(id string) (CachedRepo, []string) {
	var warnings []string
	dir := c.RepoDir(id)
	r := CachedRepo{ID: id, Dir: dir}
	blobDir := filepath.Join(dir, "blobs")
	blobs, _ := os.ReadDir(blobDir)
	for _, b := range blobs {
		if b.IsDir() {
			continue
		}
		info, err := b.Info()
		if err != nil {
			continue
		}
		if strings.HasSuffix(b.Name(), ".incomplete") {
			r.IncompleteBytes += info.Size()
			r.IncompleteFiles++
			continue
		}
		r.SizeOnDisk += info.Size()
		r.Blobs++
		if info.ModTime().After(r.LastModified) {
			r.LastModified = info.ModTime()
		}
	}
	refs := map[string][]string{}
	refDir := filepath.Join(dir, "refs")
	filepath.WalkDir(refDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(refDir, p)
		commit := strings.TrimSpace(string(b))
		refs[commit] = append(refs[commit], filepath.ToSlash(rel))
		return nil
	})
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	for _, s := range snaps {
		if !s.IsDir() {
			continue
		}
		rev := CachedRevision{Commit: s.Name(), Dir: filepath.Join(dir, "snapshots", s.Name()), blobs: map[string]bool{}}
		if info, err := s.Info(); err == nil {
			rev.LastModified = info.ModTime()
		}
		rev.Refs = refs[s.Name()]
		sort.Strings(rev.Refs)
		filepath.WalkDir(rev.Dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			st, err := os.Stat(p)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("%s: dangling file %s", id, p))
				return nil
			}
			rev.Files++
			rev.Size += st.Size()
			if target, err := filepath.EvalSymlinks(p); err == nil {
				rev.blobs[target] = true
			}
			return nil
		})
		r.Revisions = append(r.Revisions, rev)
	}
	sort.Slice(r.Revisions, func(i, j int) bool { return r.Revisions[i].LastModified.After(r.Revisions[j].LastModified) })
	return r, warnings
}

// DeleteRepo removes a repository and its locks from the cache. It returns
// the bytes freed.
func (c Cache) DeleteRepo(repo string) (int64, error) {
	if err := ValidateRepoID(repo); err != nil {
		return 0, err
	}
	r, _, ok := c.ScanRepo(repo)
	if !ok {
		return 0, c.absent(repo, "", "; nothing to remove")
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		return 0, fmt.Errorf("cache: removing %s: %w", r.Dir, err)
	}
	os.RemoveAll(filepath.Join(c.Dir, ".locks", RepoFolderName(repo)))
	return r.SizeOnDisk, nil
}

// DeleteRevision removes one snapshot, the refs that point to it, its
// .no_exist markers and the blobs no other snapshot uses, as
// huggingface_hub's delete_revisions does. rev is a commit hash (or an
// unambiguous prefix of one) or a branch/tag name. When it was the last
// snapshot the whole repository folder goes. It returns the bytes freed.
func (c Cache) DeleteRevision(repo, rev string) (int64, error) {
	if err := ValidateRepoID(repo); err != nil {
		return 0, err
	}
	r, _, ok := c.ScanRepo(repo)
	if !ok {
		return 0, c.absent(repo, "", "; nothing to remove")
	}
	idx, err := c.findRevision(r, rev)
	if err != nil {
		return 0, err
	}
	if len(r.Revisions) == 1 {
		return c.DeleteRepo(repo)
	}
	target := r.Revisions[idx]
	keep := map[string]bool{}
	for i, rv := range r.Revisions {
		if i != idx {
			for b := range rv.blobs {
				keep[b] = true
			}
		}
	}
	var freed int64
	blobDir := filepath.Join(evalOr(r.Dir), "blobs")
	for b := range target.blobs {
		if keep[b] || filepath.Dir(b) != blobDir {
			continue
		}
		if st, err := os.Stat(b); err == nil {
			if err := os.Remove(b); err != nil {
				return freed, fmt.Errorf("cache: %w", err)
			}
			freed += st.Size()
		}
	}
	if err := os.RemoveAll(target.Dir); err != nil {
		return freed, fmt.Errorf("cache: %w", err)
	}
	for _, ref := range target.Refs {
		os.Remove(filepath.Join(r.Dir, "refs", filepath.FromSlash(ref)))
	}
	os.RemoveAll(filepath.Join(r.Dir, ".no_exist", target.Commit))
	return freed, nil
}

func evalOr(p string) string {
	if e, err := filepath.EvalSymlinks(p); err == nil {
		return e
	}
	return p
}
