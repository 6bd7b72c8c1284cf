package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Verification statuses of a snapshot file.
const (
	// VerifyOK: the content hashes to the ETag its blob is named by.
	VerifyOK = "ok"
	// VerifyMismatch: the content does not hash to its ETag (a corrupt or
	// truncated blob), or the file leads out of the cache.
	VerifyMismatch = "mismatch"
	// VerifyMissing: the snapshot entry points to a blob that is gone.
	VerifyMissing = "missing"
	// VerifyUnverified: there is nothing to check against: the ETag is no
	// sha256 or git sha1 (a non-Hub server), or the file is a copy that
	// names no blob.
	VerifyUnverified = "unverified"
)

// VerifiedFile is one snapshot file as `cache verify` found it.
type VerifiedFile struct {
	File   string `json:"file"`
	Status string `json:"status"`
	// Algorithm is "sha256" (LFS files) or "git-sha1" (files in git).
	Algorithm string `json:"algorithm,omitempty"`
	// Expected is the ETag (the blob's name), Actual the hash computed.
	Expected string `json:"expected,omitempty"`
	Actual   string `json:"actual,omitempty"`
	Size     int64  `json:"size"`
	// Blob is the file that holds the bytes.
	Blob   string `json:"blob,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// VerifiedRevision is one snapshot of a Verification.
type VerifiedRevision struct {
	Commit string         `json:"commit"`
	Refs   []string       `json:"refs"`
	Files  []VerifiedFile `json:"files"`
	// NotDownloaded lists the files the Hub's listing has and the
	// snapshot does not (only with VerifyOptions.Remote): tputool fetches
	// only what it needs, so they are no failure.
	NotDownloaded []string `json:"not_downloaded,omitempty"`
}

// Verification is what Cache.Verify found for one repository.
type Verification struct {
	Repo      string             `json:"repo"`
	Dir       string             `json:"dir"`
	Revisions []VerifiedRevision `json:"revisions"`
	VerifyCounts
}

// VerifyCounts are the totals of a verification, for one repository or
// summed over several (Add).
type VerifyCounts struct {
	Checked    int `json:"checked"`
	OK         int `json:"ok"`
	Mismatches int `json:"mismatches"`
	Missing    int `json:"missing"`
	Unverified int `json:"unverified"`
	// NotDownloaded counts the listed files absent from the snapshots
	// (Remote only).
	NotDownloaded int `json:"not_downloaded"`
	// Bytes is how much was hashed (a blob shared by revisions once).
	Bytes int64 `json:"bytes_hashed"`
}

// Add sums o into c.
func (c *VerifyCounts) Add(o VerifyCounts) {
	c.Checked += o.Checked
	c.OK += o.OK
	c.Mismatches += o.Mismatches
	c.Missing += o.Missing
	c.Unverified += o.Unverified
	c.NotDownloaded += o.NotDownloaded
	c.Bytes += o.Bytes
}

// Failed reports whether any file mismatched or was missing.
func (v *Verification) Failed() bool { return v.Mismatches+v.Missing > 0 }

// ErrAbsent marks a repository or revision that the cache does not hold,
// for the commands that only look at the cache (cache ls, rm, verify). It
// is no Hub error: nothing was asked of the network (cmd exits 1).
var ErrAbsent = errors.New("not in the cache")

func (c Cache) absent(repo, rev, what string) error {
	name := repo
	if rev != "" {
		name += "@" + rev
	}
	return fmt.Errorf("%s: %w %s%s", name, ErrAbsent, c.Dir, what)
}

// findRevision picks the cached revision rev names: a commit, a commit
// prefix of at least 7 characters, or a branch or tag in refs/.
func (c Cache) findRevision(r CachedRepo, rev string) (int, error) {
	idx := -1
	for i, rv := range r.Revisions {
		match := rv.Commit == rev || (len(rev) >= 7 && strings.HasPrefix(rv.Commit, rev))
		for _, ref := range rv.Refs {
			match = match || ref == rev
		}
		if match {
			if idx >= 0 {
				return 0, fmt.Errorf("revision %q of %s is ambiguous: %s and %s", rev, r.ID, r.Revisions[idx].Commit, rv.Commit)
			}
			idx = i
		}
	}
	if idx < 0 {
		return 0, c.absent(r.ID, rev, " (no such cached revision)")
	}
	return idx, nil
}

// VerifyOptions selects what Verify checks.
type VerifyOptions struct {
	// Revision is a commit, a commit prefix or a ref; "" checks every
	// cached revision.
	Revision string
	// Progress, when set, gets the bytes hashed so far and the total.
	Progress func(done, total int64)
	// Remote, when set, returns the ETags the Hub lists for the files of
	// a commit (Client.RemoteETags; "" for a file listed without one).
	// Each file is then checked against the Hub's ETag rather than the
	// name of its blob, which also catches a blob renamed to match
	// corrupt content; a file the listing lacks is a mismatch.
	Remote func(ctx context.Context, commit string) (map[string]string, error)
}

// Verify rehashes every file of repo's cached snapshots (or one revision)
// and compares it with the ETag its blob is named by, as `hf cache verify`
// compares with the Hub's: the sha256 of LFS files, the git blob sha1 of
// the others. Nothing is asked of the network and nothing is changed. A
// repository that is not cached fails with ErrAbsent; a corrupt file is
// no error but a VerifyMismatch in the result.
func (c Cache) Verify(ctx context.Context, repo string, opts VerifyOptions) (*Verification, error) {
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	r, _, ok := c.ScanRepo(repo)
	if !ok {
		return nil, c.absent(repo, "", "")
	}
	revs := r.Revisions
	if opts.Revision != "" {
		i, err := c.findRevision(r, opts.Revision)
		if err != nil {
			return nil, err
		}
		revs = revs[i : i+1]
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].Commit < revs[j].Commit })
	v := &Verification{Repo: repo, Dir: r.Dir, Revisions: []VerifiedRevision{}}
	type entry struct {
		rev  int
		file string
		path string
	}
	var (
		entries []entry
		total   int64
		sized   = map[string]bool{}
	)
	for i, rv := range revs {
		v.Revisions = append(v.Revisions, VerifiedRevision{Commit: rv.Commit, Refs: rv.Refs, Files: []VerifiedFile{}})
		if rv.Refs == nil {
			v.Revisions[i].Refs = []string{}
		}
		root := rv.Dir
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != root && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			entries = append(entries, entry{rev: i, file: filepath.ToSlash(rel), path: p})
			if t, err := filepath.EvalSymlinks(p); err == nil && !sized[t] {
				if st, err := os.Stat(t); err == nil && st.Mode().IsRegular() {
					sized[t] = true
					total += st.Size()
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cache verify %s: %w", repo, err)
		}
	}
	h := &hasher{ctx: ctx, total: total, progress: opts.Progress, done: map[string]digests{}}
	blobDir := filepath.Join(r.Dir, "blobs")
	if b, err := filepath.EvalSymlinks(blobDir); err == nil {
		blobDir = b
	}
	var remote []map[string]string
	if opts.Remote != nil {
		for i, rv := range revs {
			etags, err := opts.Remote(ctx, rv.Commit)
			if err != nil {
				return nil, err
			}
			remote = append(remote, etags)
			local := map[string]bool{}
			for _, e := range entries {
				if e.rev == i {
					local[e.file] = true
				}
			}
			for f := range etags {
				if !local[f] {
					v.Revisions[i].NotDownloaded = append(v.Revisions[i].NotDownloaded, f)
				}
			}
			sort.Strings(v.Revisions[i].NotDownloaded)
			v.NotDownloaded += len(v.Revisions[i].NotDownloaded)
		}
	}
	for _, e := range entries {
		var want *string
		if remote != nil {
			w, listed := remote[e.rev][e.file]
			if !listed {
				v.Revisions[e.rev].Files = append(v.Revisions[e.rev].Files, VerifiedFile{File: e.file, Status: VerifyMismatch,
					Detail: "not in the Hub's listing of commit " + revs[e.rev].Commit})
				v.Checked++
				v.Mismatches++
				continue
			}
			want = &w
		}
		f, err := c.verifyFile(h, repo, revs[e.rev].Commit, blobDir, e.file, e.path, want)
		if err != nil {
			return nil, err
		}
		v.Revisions[e.rev].Files = append(v.Revisions[e.rev].Files, f)
		v.Checked++
		switch f.Status {
		case VerifyOK:
			v.OK++
		case VerifyMismatch:
			v.Mismatches++
		case VerifyMissing:
			v.Missing++
		default:
			v.Unverified++
		}
	}
	v.Bytes = h.hashed
	return v, nil
}

// verifyFile checks one snapshot entry against the ETag its blob is named
// by, or against *remote (the Hub's) when given.
func (c Cache) verifyFile(h *hasher, repo, commit, blobDir, file, ptr string, remote *string) (VerifiedFile, error) {
	vf := VerifiedFile{File: file}
	target, err := filepath.EvalSymlinks(ptr)
	if err != nil {
		link, _ := os.Readlink(ptr)
		vf.Status, vf.Detail = VerifyMissing, fmt.Sprintf("the link to %s dangles: the blob is gone", link)
		return vf, nil
	}
	if err := c.checkPointer(repo, commit, ptr); err != nil {
		vf.Status, vf.Blob, vf.Detail = VerifyMismatch, target, "resolves outside the repository's folder in the cache"
		return vf, nil
	}
	st, err := os.Stat(target)
	if err != nil || !st.Mode().IsRegular() {
		vf.Status, vf.Detail = VerifyMissing, "not a regular file"
		return vf, nil
	}
	vf.Size, vf.Blob = st.Size(), target
	if remote != nil || filepath.Dir(target) == blobDir {
		etag := filepath.Base(target)
		if remote != nil {
			etag = *remote
		}
		vf.Expected = etag
		switch {
		case sha256RE.MatchString(etag):
			d, err := h.sum(target, true, false)
			if err != nil {
				return vf, err
			}
			vf.Algorithm, vf.Actual = "sha256", d.sha256
		case sha1RE.MatchString(etag):
			d, err := h.sum(target, false, true)
			if err != nil {
				return vf, err
			}
			vf.Algorithm, vf.Actual = "git-sha1", d.gitSHA1
		default:
			vf.Status, vf.Detail = VerifyUnverified, fmt.Sprintf("the ETag %q is no sha256 or git sha1", etag)
			if remote != nil && etag == "" {
				vf.Detail = "the Hub's listing gives no ETag for it"
			}
			return vf, nil
		}
		switch {
		case vf.Actual == etag:
			vf.Status = VerifyOK
		case remote != nil:
			vf.Status = VerifyMismatch
			vf.Detail = fmt.Sprintf("%s of the content is %s, the Hub's ETag is %s", vf.Algorithm, vf.Actual, etag)
		default:
			vf.Status = VerifyMismatch
			vf.Detail = fmt.Sprintf("%s of the content is %s, the blob is named %s", vf.Algorithm, vf.Actual, etag)
		}
		return vf, nil
	}
	// A copy or hard link (where symlinks are unavailable): good when a
	// blob of that content exists under its hash.
	d, err := h.sum(target, true, true)
	if err != nil {
		return vf, err
	}
	for _, cand := range []struct{ algo, sum string }{{"sha256", d.sha256}, {"git-sha1", d.gitSHA1}} {
		if bst, err := os.Stat(filepath.Join(blobDir, cand.sum)); err == nil && bst.Size() == st.Size() {
			vf.Status, vf.Algorithm, vf.Expected, vf.Actual = VerifyOK, cand.algo, cand.sum, cand.sum
			return vf, nil
		}
	}
	vf.Status, vf.Detail = VerifyUnverified, "a plain file that names no blob: no ETag to check against"
	return vf, nil
}

type digests struct{ sha256, gitSHA1 string }

// hasher hashes each blob once per algorithm (both in one pass when both
// are wanted), checking ctx between reads.
type hasher struct {
	ctx      context.Context
	total    int64
	hashed   int64
	progress func(done, total int64)
	done     map[string]digests
}

func (h *hasher) sum(path string, want256, want1 bool) (digests, error) {
	d := h.done[path]
	want256 = want256 && d.sha256 == ""
	want1 = want1 && d.gitSHA1 == ""
	if !want256 && !want1 {
		return d, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return d, fmt.Errorf("cache verify: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return d, fmt.Errorf("cache verify: %w", err)
	}
	var ws []io.Writer
	var s256, g hash.Hash
	if want256 {
		s256 = sha256.New()
		ws = append(ws, s256)
	}
	if want1 {
		g = sha1.New()
		fmt.Fprintf(g, "blob %d\x00", st.Size())
		ws = append(ws, g)
	}
	w := io.MultiWriter(ws...)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	first := h.done[path] == (digests{}) // count bytes once per blob
	for {
		if err := h.ctx.Err(); err != nil {
			return d, err
		}
		n, rerr := f.Read(*bp)
		if n > 0 {
			w.Write((*bp)[:n])
			if first {
				h.hashed += int64(n)
				if h.progress != nil {
					h.progress(h.hashed, h.total)
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return d, fmt.Errorf("cache verify: reading %s: %w", path, rerr)
		}
	}
	if s256 != nil {
		d.sha256 = hexSum(s256)
	}
	if g != nil {
		d.gitSHA1 = hexSum(g)
	}
	h.done[path] = d
	return d, nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
