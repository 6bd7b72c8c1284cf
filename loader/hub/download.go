package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Download returns the cache path of one file of repo at rev
// (snapshots/<commit>/<file>), downloading it when needed, the way
// huggingface_hub's hf_hub_download does:
//
//   - a commit hash whose file is already in the cache: no request at all;
//   - offline: the cache answers (refs/ resolves branches and tags);
//   - otherwise one HEAD for the metadata. If it fails (timeout, network,
//     5xx, auth) and the cache has the file, the cached copy is returned
//     with a warning; if not, the HEAD is retried with backoff where that
//     can help. An EntryNotFound answer is cached in .no_exist.
func (c *Client) Download(ctx context.Context, repo, rev, file string) (string, error) {
	if rev == "" {
		rev = DefaultRevision
	}
	if err := CheckFilename(file); err != nil {
		return "", &Error{Kind: ErrEntryNotFound, Repo: repo, Revision: rev, File: file, Err: err}
	}
	if IsCommitHash(rev) {
		// A commit is immutable: a cached file, or a cached absence, is
		// final, unless its size differs from the listing's (a truncated
		// blob), which the HEAD below and fetch then repair.
		p, err := c.Cache.Lookup(repo, rev, file)
		if err == nil {
			if c.sizeMatches(repo, rev, file, p) {
				c.reportCached(repo, file, p)
				return p, nil
			}
		} else if errors.Is(err, ErrEntryNotFound) || errors.Is(err, ErrUnsafeLink) {
			return "", err
		}
	}
	if c.Offline {
		p, err := c.Cache.Lookup(repo, rev, file)
		if err != nil {
			return "", offlineErr(err)
		}
		c.reportCached(repo, file, p)
		return p, nil
	}
	meta, err := c.FileMetadata(ctx, repo, rev, file)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if !fallbackAllowed(err) {
			return "", err
		}
		if p, lerr := c.Cache.Lookup(repo, rev, file); lerr == nil && c.sizeMatches(repo, rev, file, p) {
			c.warnf("using the cached %s of %s@%s: the Hub could not be asked (%v)", file, repo, rev, err)
			c.reportCached(repo, file, p)
			return p, nil
		} else if errors.Is(lerr, ErrEntryNotFound) {
			return "", lerr
		}
		if !retryable(err) {
			return "", err
		}
		err = c.retryAfter(ctx, "metadata for "+repo+"/"+file, err, func() error {
			var rerr error
			meta, rerr = c.FileMetadata(ctx, repo, rev, file)
			return rerr
		})
		if err != nil {
			return "", err
		}
	}
	return c.fetch(ctx, repo, rev, file, meta)
}

func (c *Client) reportCached(repo, file, path string) {
	var n int64
	if st, err := os.Stat(path); err == nil {
		n = st.Size()
	}
	c.report(Progress{Event: FileCached, Repo: repo, File: file, Bytes: n, Total: n})
}

func offlineErr(err error) error {
	var he *Error
	if errors.As(err, &he) && errors.Is(err, ErrNotCached) {
		he.Detail = join(he.Detail, "offline mode is on (HF_HUB_OFFLINE, Client.Offline); download the files with network access first")
	}
	return err
}

// fetch puts the blob described by meta into the cache and links it into
// the snapshot, under the blob's lock.
func (c *Client) fetch(ctx context.Context, repo, rev, file string, meta *FileMetadata) (_ string, err error) {
	defer func() { err = c.Cache.permissionHint(err) }()
	ptr := c.Cache.PointerPath(repo, meta.Commit, file)
	// The entry, and the folder it goes in (a planted link there would
	// make us write outside the cache), must stay in the snapshot.
	for _, p := range []string{filepath.Dir(ptr), ptr} {
		if err := c.Cache.checkPointer(repo, meta.Commit, p); err != nil {
			return "", err
		}
	}
	if st, err := os.Stat(ptr); err == nil && st.Mode().IsRegular() && st.Size() == meta.Size {
		if err := c.Cache.WriteRef(repo, rev, meta.Commit); err != nil {
			c.debugf("could not update ref %s of %s: %v", rev, repo, err)
		}
		c.report(Progress{Event: FileCached, Repo: repo, File: file, Bytes: meta.Size, Total: meta.Size})
		return ptr, nil
	}
	blob := c.Cache.BlobPath(repo, meta.ETag)
	if err := os.MkdirAll(c.Cache.RepoDir(repo)+"/blobs", dirPerm); err != nil {
		return "", fmt.Errorf("cache %s: %w", c.Cache.Dir, err)
	}
	c.Cache.tagDir()
	if err := c.Cache.WriteRef(repo, rev, meta.Commit); err != nil {
		return "", fmt.Errorf("cache %s: writing ref %s: %w", c.Cache.Dir, rev, err)
	}
	lock, err := acquireLock(ctx, c.Cache.LockPath(repo, meta.ETag), c.warnSoftLockOnce)
	if err != nil {
		return "", err
	}
	defer lock.release()
	if st, err := os.Lstat(blob); err == nil {
		switch {
		case st.Mode().IsRegular() && st.Size() == meta.Size:
			if err := c.Cache.link(repo, meta.ETag, meta.Commit, file); err != nil {
				return "", fmt.Errorf("cache: linking %s: %w", file, err)
			}
			c.report(Progress{Event: FileCached, Repo: repo, File: file, Bytes: meta.Size, Total: meta.Size})
			return ptr, nil
		case st.Mode().IsRegular():
			// Truncated (or grown) by hand or by a crash outside tputool:
			// make it the partial download, so a prefix is resumed and
			// anything else fails the hash and starts again from zero.
			c.warnf("%s of %s: the cached blob %s has %d bytes, the Hub announces %d; downloading it again",
				file, repo, blob, st.Size(), meta.Size)
			if err := os.Rename(blob, blob+".incomplete"); err != nil {
				return "", fmt.Errorf("cache: %w", err)
			}
		default:
			// huggingface_hub writes blobs as regular files; a link or a
			// folder in their place is not trusted.
			c.warnf("%s of %s: %s is not a regular file (%s); downloading the blob again", file, repo, blob, st.Mode().Type())
			if err := os.RemoveAll(blob); err != nil {
				return "", fmt.Errorf("cache: %w", err)
			}
		}
	}
	if err := c.downloadBlob(ctx, repo, rev, file, meta, blob); err != nil {
		return "", err
	}
	if err := c.Cache.link(repo, meta.ETag, meta.Commit, file); err != nil {
		return "", fmt.Errorf("cache: linking %s: %w", file, err)
	}
	return ptr, nil
}

var (
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	sha1RE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// newVerifier returns the hash the ETag promises, with the git prefix
// already written, and its name for messages: LFS files are named by their
// sha256, git files by the git blob sha1 of "blob <size>\x00<content>".
// Other ETags can only be checked by size (nil hash).
func newVerifier(etag string, size int64) (hash.Hash, string) {
	switch {
	case sha256RE.MatchString(etag):
		return sha256.New(), "sha256"
	case sha1RE.MatchString(etag):
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
		return h, "git blob sha1"
	}
	return nil, ""
}

// downloadBlob fetches the blob into a partial file only this call writes,
// blobs/<etag>.<8 hex>.incomplete (the name huggingface_hub gives its own
// partial files), checks the size and hash of that file as read back from
// the disk and renames it to blobs/<etag>. The partial file is private so
// that two writers can never mix their bytes, even where the blob's lock is
// not honoured (flock that succeeds for every caller on Lustre localflock or
// NFS nolock, the soft lock's rare race); the read-back check makes sure
// that whatever happened on the disk, a blob that does not match its ETag is
// never published.
//
// Resume across runs goes through blobs/<etag>.incomplete, where a run that
// fails or is interrupted leaves its bytes ("parks" them); the next run
// claims that file by renaming it to its own private name, which only one
// claimant can do. Partial files of a process that died without parking
// (killed, power loss) are adopted once nobody has written to them for
// staleAfter.
func (c *Client) downloadBlob(ctx context.Context, repo, rev, file string, meta *FileMetadata, blob string) error {
	parked := blob + ".incomplete"
	if have := c.incompleteSize(repo, meta.ETag); have <= meta.Size {
		if err := c.checkSpace(repo, meta.Size-have, have); err != nil {
			return err
		}
	}
	for restart := 0; ; restart++ {
		part := c.claimPartial(blob, restart == 0)
		resumed, err := c.downloadPartial(ctx, repo, rev, file, meta, part)
		if err == nil {
			if err := publish(part, blob, meta.Size); err != nil {
				return fmt.Errorf("cache: %w", err)
			}
			c.removeStalePartials(blob)
			c.report(Progress{Event: FileDone, Repo: repo, File: file, Bytes: meta.Size, Total: meta.Size})
			return nil
		}
		if errors.Is(err, ErrIntegrity) {
			os.Remove(part)
			if resumed && restart == 0 {
				// The bad bytes may be a stale partial file from an earlier
				// run: start once more from scratch.
				c.warnf("%s: %v; downloading again from the start", file, err)
				continue
			}
			return err
		}
		park(part, parked)
		return err
	}
}

// publish renames the verified partial file to the blob. A blob another
// writer published meanwhile (a lock that excluded nobody) is kept, so
// that a reader who has it open or mapped is not raced (Windows refuses to
// replace an open file).
func publish(part, blob string, size int64) error {
	if st, err := os.Lstat(blob); err == nil && st.Mode().IsRegular() && st.Size() == size {
		os.Remove(part)
		return nil
	}
	if err := os.Rename(part, blob); err != nil {
		os.Remove(part)
		return err
	}
	return nil
}

// partialRE matches the private partial files of a blob's writers:
// <etag>.<8 hex>.incomplete.
var partialRE = regexp.MustCompile(`^(.+)\.[0-9a-f]{8}\.incomplete$`)

// staleAfter is how long a private partial file must have gone unwritten
// before it is taken for the leftover of a dead process. A live writer
// writes at least once per idle timeout and touches its file around every
// retry wait (at most maxRetryAfter), so an hour leaves a wide margin.
func (c *Client) staleAfter() time.Duration { return time.Hour + 2*c.idleTimeout() }

// claimPartial returns the private partial file for this attempt: the
// parked blobs/<etag>.incomplete or a stale orphan, renamed to a fresh
// private name, when resume is set and one exists; otherwise a fresh name
// with no file yet.
func (c *Client) claimPartial(blob string, resume bool) string {
	part := blob + "." + randomHex8() + ".incomplete"
	if !resume {
		return part
	}
	if err := os.Rename(blob+".incomplete", part); err == nil {
		return part
	}
	if orphan := c.stalePartials(blob); len(orphan) > 0 {
		// The biggest one saves the most; the others go after the download.
		if err := os.Rename(orphan[0], part); err == nil {
			c.debugf("adopting %s, a partial download no process has written to for %s", orphan[0], c.staleAfter())
		}
	}
	return part
}

// stalePartials lists blob's private partial files that nobody has written
// to for staleAfter, biggest first.
func (c *Client) stalePartials(blob string) []string {
	dir, etag := filepath.Dir(blob), filepath.Base(blob)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type partial struct {
		path string
		size int64
	}
	var out []partial
	for _, e := range entries {
		m := partialRE.FindStringSubmatch(e.Name())
		if m == nil || m[1] != etag || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < c.staleAfter() {
			continue
		}
		out = append(out, partial{filepath.Join(dir, e.Name()), info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].size > out[j].size })
	paths := make([]string, len(out))
	for i, p := range out {
		paths[i] = p.path
	}
	return paths
}

// removeStalePartials deletes the stale partial files of a blob that is
// now complete. Fresh ones may belong to a live writer and stay.
func (c *Client) removeStalePartials(blob string) {
	for _, p := range c.stalePartials(blob) {
		if err := os.Remove(p); err == nil {
			c.debugf("removed %s, an abandoned partial download", p)
		}
	}
}

// park leaves a failed attempt's bytes at blobs/<etag>.incomplete for the
// next run to resume, unless a bigger parked file is already there. Parked
// files are never written to, only claimed by a rename, so replacing one
// loses at most some bytes to download again. An empty file is removed.
func park(part, parked string) {
	st, err := os.Stat(part)
	if err != nil {
		return
	}
	if st.Size() == 0 {
		os.Remove(part)
		return
	}
	if pst, err := os.Stat(parked); err == nil && pst.Size() >= st.Size() {
		os.Remove(part)
		return
	}
	if err := os.Rename(part, parked); err != nil {
		os.Remove(part)
	}
}

func randomHex8() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// transfer is one blob download in progress.
type transfer struct {
	c               *Client
	repo, rev, file string
	meta            *FileMetadata
	f               *os.File
	have            int64 // bytes in f
}

func (t *transfer) errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Repo: t.repo, Revision: t.rev, File: t.file, Detail: fmt.Sprintf(format, args...)}
}

// reset empties the file, for a server that ignores Range or a partial
// file that is no prefix of the blob.
func (t *transfer) reset() error {
	if err := truncateAt(t.f, 0); err != nil {
		return err
	}
	t.have = 0
	return nil
}

// maxURLRefresh bounds the fresh download URLs asked for in a row without
// a byte received in between.
const maxURLRefresh = 2

// downloadPartial fills the private partial file part to meta.Size bytes
// and verifies it. resumed reports whether bytes from an earlier attempt
// were reused.
func (c *Client) downloadPartial(ctx context.Context, repo, rev, file string, meta *FileMetadata, part string) (resumed bool, err error) {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, filePerm)
	if err != nil {
		return false, fmt.Errorf("cache: %w", err)
	}
	defer f.Close()
	t := &transfer{c: c, repo: repo, rev: rev, file: file, meta: meta, f: f}
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fmt.Errorf("cache: %w", err)
	}
	if have > meta.Size {
		have = 0
	}
	if have > 0 {
		resumed = true
		c.debugf("resuming %s of %s at byte %d of %d", file, repo, have, meta.Size)
	}
	if err := truncateAt(f, have); err != nil {
		return resumed, err
	}
	t.have = have
	c.report(Progress{Event: FileStart, Repo: repo, File: file, Bytes: have, Total: meta.Size})

	failures, refreshes := 0, 0
	best := t.have           // the most bytes ever on disk: only going past it is progress
	refreshedAt := int64(-1) // t.have at the last fresh URL
	for t.have < meta.Size {
		_, err := t.get(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return resumed, ctx.Err()
		}
		var he *Error
		if errors.As(err, &he) && he.refused {
			// A signed CDN URL that expired during a long download (or
			// its retries): the Hub hands out a fresh one.
			if t.have != refreshedAt {
				refreshes = 0
			}
			if refreshes < maxURLRefresh {
				refreshes++
				refreshedAt = t.have
				c.warnf("%s: %v; asking the Hub for a fresh download URL", file, err)
				if err := t.refreshURL(ctx); err != nil {
					return resumed, err
				}
				continue
			}
			return resumed, err
		}
		if !retryable(err) {
			return resumed, err
		}
		if t.have > best {
			// Progress was made: the retry budget starts over. Bytes
			// downloaded again after a restart from zero are no progress,
			// or a server that restarts us forever would never fail.
			best, failures = t.have, 0
		}
		failures++
		if failures > c.Retries {
			return resumed, err
		}
		d := c.backoff(failures)
		if he != nil && he.retryAfter > 0 {
			d = he.retryAfter
		}
		c.warnf("%s: %v; resuming at byte %d (retry %d/%d in %s)", file, err, t.have, failures, c.Retries, d)
		t.touch()
		if err := c.sleep(ctx, d); err != nil {
			return resumed, err
		}
		t.touch()
	}
	if err := f.Sync(); err != nil {
		return resumed, fmt.Errorf("cache: %w", err)
	}
	return resumed, t.verifyOnDisk(part)
}

// touch marks the partial file as in use, so that no other process takes
// it for abandoned while this one waits to retry.
func (t *transfer) touch() {
	now := time.Now()
	os.Chtimes(t.f.Name(), now, now)
}

// refreshURL asks the Hub again for the file's download location (the
// commit is pinned, so the blob stays the same).
func (t *transfer) refreshURL(ctx context.Context) error {
	var m *FileMetadata
	err := t.c.withRetry(ctx, "metadata for "+t.repo+"/"+t.file, func() error {
		var err error
		m, err = t.c.FileMetadata(ctx, t.repo, t.meta.Commit, t.file)
		return err
	})
	if err != nil {
		return err
	}
	if m.ETag != t.meta.ETag || m.Size != t.meta.Size {
		return t.errorf(ErrMetadata, "asked again for a fresh download URL, the Hub names blob %s of %d bytes, not %s of %d",
			m.ETag, m.Size, t.meta.ETag, t.meta.Size)
	}
	t.meta.Location = m.Location
	return nil
}

// verifyOnDisk checks the finished partial file as it is on the disk, read
// back through its name (the name the rename publishes): the same file this
// transfer wrote, the announced size, and the hash the ETag names. Hashing
// what was received instead would miss bytes another writer changed.
func (t *transfer) verifyOnDisk(part string) error {
	r, err := os.Open(part)
	if err != nil {
		return fmt.Errorf("cache: verifying %s: %w", part, err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return fmt.Errorf("cache: verifying %s: %w", part, err)
	}
	if wst, err := t.f.Stat(); err == nil && !os.SameFile(st, wst) {
		return t.errorf(ErrIntegrity, "%s was replaced by another file while downloading", part)
	}
	if st.Size() != t.meta.Size {
		return t.errorf(ErrIntegrity, "%s holds %d bytes as written to disk, the Hub announced %d", part, st.Size(), t.meta.Size)
	}
	h, algo := newVerifier(t.meta.ETag, t.meta.Size)
	if h == nil {
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	n, err := io.CopyBuffer(struct{ io.Writer }{h}, r, *bp)
	if err != nil {
		return fmt.Errorf("cache: verifying %s: %w", part, err)
	}
	if n != t.meta.Size {
		return t.errorf(ErrIntegrity, "%s changed size while it was verified (%d bytes read, %d announced)", part, n, t.meta.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != t.meta.ETag {
		return t.errorf(ErrIntegrity, "%s of %s as written to disk is %s, the ETag says %s", algo, part, got, t.meta.ETag)
	}
	return nil
}

func truncateAt(f *os.File, n int64) error {
	if err := f.Truncate(n); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if _, err := f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

var (
	contentRangeRE     = regexp.MustCompile(`^bytes (\d+)-(\d+)/(\d+|\*)$`)
	unsatisfiedRangeRE = regexp.MustCompile(`^bytes \*/(\d+)$`)
)

// get issues one GET from t.have on and appends the body to the file. It
// returns how many bytes it appended. A 200 answer to a Range request (the
// server ignored it) restarts the file from zero.
func (t *transfer) get(ctx context.Context) (int64, error) {
	hdr := http.Header{}
	if t.have > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", t.have))
	}
	resp, err := t.c.send(ctx, http.MethodGet, t.meta.Location, hdr, true, t.c.idleTimeout())
	if err != nil {
		return 0, withFile(err, t.repo, t.rev, t.file)
	}
	defer resp.close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && t.have > 0:
		m := contentRangeRE.FindStringSubmatch(resp.Header.Get("Content-Range"))
		if m == nil || m[1] != strconv.FormatInt(t.have, 10) {
			return 0, t.errorf(ErrNetwork, "asked for bytes %d-, got Content-Range %q", t.have, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK:
		if t.have > 0 {
			t.c.debugf("%s: the server ignored the Range header; downloading from the start", t.file)
			if err := t.reset(); err != nil {
				return 0, err
			}
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		if m := unsatisfiedRangeRE.FindStringSubmatch(resp.Header.Get("Content-Range")); m != nil && m[1] != strconv.FormatInt(t.meta.Size, 10) {
			e := t.errorf(ErrIntegrity, "the server holds %s bytes, the Hub announced %d", m[1], t.meta.Size)
			e.Status = resp.StatusCode
			return 0, e
		}
		if err := t.reset(); err != nil {
			return 0, err
		}
		e := t.errorf(ErrNetwork, "range not satisfiable; restarting the download")
		e.Status = resp.StatusCode
		return 0, e
	default:
		return 0, t.c.downloadStatusError(resp, t.repo, t.rev, t.file)
	}
	return t.copyBody(resp.Body)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// copyBody appends body to the file, reporting progress.
func (t *transfer) copyBody(body io.Reader) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var n int64
	size := t.meta.Size
	// One byte over the rest: detect a body longer than announced.
	r := io.LimitReader(body, size-t.have+1)
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			if t.have+int64(k) > size {
				return n, t.errorf(ErrIntegrity, "the server sent more than the announced %d bytes", size)
			}
			if _, err := t.f.Write(buf[:k]); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return n, t.c.noSpace(t.repo, fmt.Sprintf("the disk filled up while writing %s (byte %d of %d)", t.f.Name(), t.have, size), t.have)
				}
				return n, fmt.Errorf("cache: writing %s: %w", t.f.Name(), err)
			}
			n += int64(k)
			t.have += int64(k)
			t.c.report(Progress{Event: FileAdvance, Repo: t.repo, File: t.file, Bytes: t.have, Total: size})
		}
		if rerr == io.EOF {
			if t.have < size {
				return n, t.errorf(ErrNetwork, "connection closed at byte %d of %d", t.have, size)
			}
			return n, nil
		}
		if rerr != nil {
			if errors.Is(rerr, context.Canceled) || errors.Is(rerr, context.DeadlineExceeded) {
				return n, rerr
			}
			e := t.errorf(ErrNetwork, "read failed at byte %d of %d", t.have, size)
			e.Err = rerr
			return n, e
		}
	}
}
