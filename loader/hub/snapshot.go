package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// RepoInfo is the part of GET /api/models/{repo}/revision/{rev} that
// tputool uses.
type RepoInfo struct {
	ID           string    `json:"id"`
	SHA          string    `json:"sha"`
	Private      bool      `json:"private"`
	Gated        any       `json:"gated"` // false, "auto" or "manual"
	LibraryName  string    `json:"library_name,omitempty"`
	PipelineTag  string    `json:"pipeline_tag,omitempty"`
	LastModified string    `json:"lastModified,omitempty"`
	Siblings     []Sibling `json:"siblings"`
}

// Sibling is one file of a repository listing.
type Sibling struct {
	RFilename string `json:"rfilename"`
	// Size is the file size (for LFS files, the pointer's; see LFS).
	Size *int64 `json:"size,omitempty"`
	// BlobID is the git blob sha1 (of the LFS pointer, for LFS files).
	BlobID string `json:"blobId,omitempty"`
	// LFS is set for files stored in LFS.
	LFS *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs,omitempty"`
}

// FileSize returns the size of the file's content and whether the
// listing gave it.
func (s Sibling) FileSize() (int64, bool) {
	if s.LFS != nil {
		return s.LFS.Size, true
	}
	if s.Size != nil {
		return *s.Size, true
	}
	return 0, false
}

// Files returns the sibling names, sorted.
func (ri *RepoInfo) Files() []string {
	out := make([]string, 0, len(ri.Siblings))
	for _, s := range ri.Siblings {
		out = append(out, s.RFilename)
	}
	sort.Strings(out)
	return out
}

const maxRepoInfoSize = 32 << 20

// RepoInfo fetches a repository's commit and file list, with sizes
// (blobs=true, as huggingface_hub's repo_info(files_metadata=True)), at
// rev with one GET (not retried; see ListFiles).
func (c *Client) RepoInfo(ctx context.Context, repo, rev string) (*RepoInfo, error) {
	if err := CheckRevision(rev); err != nil {
		return nil, &Error{Kind: ErrRevisionNotFound, Repo: repo, Revision: rev, Err: err}
	}
	u := c.endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
	hctx, cancel := context.WithTimeout(ctx, c.etagTimeout())
	defer cancel()
	resp, err := c.send(hctx, http.MethodGet, u, nil, false, c.etagTimeout())
	if err != nil {
		if err := c.metadataEnded(ctx, hctx, "repository listing", repo, rev, ""); err != nil {
			return nil, err
		}
		return nil, withFile(err, repo, rev, "")
	}
	defer resp.close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.Response, repo, rev, "")
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRepoInfoSize+1))
	if err != nil {
		if err := c.metadataEnded(ctx, hctx, "repository listing", repo, rev, ""); err != nil {
			return nil, err
		}
		return nil, &Error{Kind: ErrNetwork, Repo: repo, Revision: rev, Detail: "reading the repository listing", Err: err}
	}
	if len(b) > maxRepoInfoSize {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, Detail: "repository listing over 32 MiB"}
	}
	ri := &RepoInfo{}
	if err := json.Unmarshal(b, ri); err != nil {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, Detail: "repository listing is not valid JSON", Err: err}
	}
	if !IsCommitHash(ri.SHA) {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev,
			Detail: fmt.Sprintf("repository listing has no valid commit hash (sha %q)", ri.SHA)}
	}
	// A name that is only not a portable path here (a backslash, a drive
	// letter) is left out of the listing with a warning rather than
	// failing it: tputool never needs such a file, and Download refuses it
	// by name if it is asked for. A name that climbs or is absolute
	// (".", "..", empty segments, a leading "/") no Git tree holds: such a
	// listing is hostile and refused as a whole.
	kept := ri.Siblings[:0]
	for _, s := range ri.Siblings {
		if err := CheckFilename(s.RFilename); err != nil {
			if escapingName(s.RFilename) {
				return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, Detail: "repository listing", Err: err}
			}
			c.warnf("%s@%s: skipping a file of the repository listing: %v", repo, rev, err)
			continue
		}
		kept = append(kept, s)
	}
	ri.Siblings = kept
	return ri, nil
}

// Snapshot is a revision of a repository resolved to a commit.
type Snapshot struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Commit   string `json:"commit"`
	// Dir is snapshots/<commit> in the cache.
	Dir string `json:"dir"`
	// RepoFiles lists every file of the commit: the Hub's listing, or when
	// FromCache, the files present in the snapshot folder.
	RepoFiles []string `json:"repo_files"`
	// Files are the files selected (and downloaded) by Snapshot; empty
	// after ListFiles.
	Files []string `json:"files,omitempty"`
	// FromCache is set when the Hub was not asked (offline) or could not
	// be reached and the cached snapshot answered.
	FromCache bool `json:"from_cache"`
	// Sizes maps files to their sizes where the listing gave them.
	Sizes map[string]int64 `json:"-"`
	// Info is the Hub's listing; nil when FromCache.
	Info *RepoInfo `json:"-"`
}

// ListFiles resolves rev to a commit and lists the repository's files with
// one request, like the first step of huggingface_hub's snapshot_download.
// Offline it answers from the cache; when the request fails with an error
// the cache can cover (network, timeout, 5xx, auth) and the revision is
// cached, it warns and answers from the cache too; otherwise it retries
// with backoff where that can help.
func (c *Client) ListFiles(ctx context.Context, repo, rev string) (*Snapshot, error) {
	if rev == "" {
		rev = DefaultRevision
	}
	if c.Offline {
		s, err := c.cachedSnapshot(repo, rev)
		if err != nil {
			return nil, offlineErr(err)
		}
		return s, nil
	}
	ri, err := c.RepoInfo(ctx, repo, rev)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !fallbackAllowed(err) {
			return nil, err
		}
		if s, cerr := c.cachedSnapshot(repo, rev); cerr == nil {
			c.warnf("using the cached snapshot %s of %s@%s: the Hub could not be asked (%v)", s.Commit, repo, rev, err)
			return s, nil
		}
		if !retryable(err) {
			return nil, err
		}
		err = c.retryAfter(ctx, "listing "+repo, err, func() error {
			var rerr error
			ri, rerr = c.RepoInfo(ctx, repo, rev)
			return rerr
		})
		if err != nil {
			return nil, err
		}
	}
	if err := c.Cache.WriteRef(repo, rev, ri.SHA); err != nil {
		c.warnf("could not record ref %s of %s: %v", rev, repo, err)
	}
	sizes, etags := map[string]int64{}, map[string]string{}
	for _, s := range ri.Siblings {
		if n, ok := s.FileSize(); ok {
			sizes[s.RFilename] = n
		}
		if s.LFS != nil && sha256RE.MatchString(s.LFS.SHA256) {
			etags[s.RFilename] = s.LFS.SHA256
		}
	}
	c.rememberSizes(repo, ri.SHA, sizes, etags)
	return &Snapshot{Repo: repo, Revision: rev, Commit: ri.SHA, Dir: c.Cache.SnapshotDir(repo, ri.SHA),
		RepoFiles: ri.Files(), Sizes: sizes, Info: ri}, nil
}

// cachedSnapshot resolves rev through the cache and lists the snapshot.
func (c *Client) cachedSnapshot(repo, rev string) (*Snapshot, error) {
	commit, ok := c.Cache.ResolveCommit(repo, rev)
	if !ok {
		return nil, &Error{Kind: ErrNotCached, Repo: repo, Revision: rev, Detail: "no cached ref in " + c.Cache.Dir}
	}
	dir := c.Cache.SnapshotDir(repo, commit)
	files, err := ListDir(dir)
	if err != nil {
		return nil, &Error{Kind: ErrNotCached, Repo: repo, Revision: rev, Detail: "no cached snapshot " + commit, Err: err}
	}
	if err := c.Cache.CheckSnapshotLinks(repo, commit); err != nil {
		return nil, err
	}
	return &Snapshot{Repo: repo, Revision: rev, Commit: commit, Dir: dir, RepoFiles: files, FromCache: true}, nil
}

// ListDir lists the regular files under dir (following the snapshot
// symlinks; dangling ones are skipped) as sorted slash-separated paths.
func ListDir(dir string) ([]string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	// WalkDir does not follow a root that is itself a link to a folder.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, err
	}
	var out []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir // .git, .cache
			}
			return nil
		}
		st, err := os.Stat(p) // follows the blob symlink
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	sort.Strings(out)
	return out, err
}

// DownloadFiles fetches files of one commit into the cache, at most
// Parallel at a time. The first failure cancels the rest. When the last
// listing gave sizes, it first checks that what is left to fetch fits on
// the cache's disk and fails with ErrNoSpace otherwise.
func (c *Client) DownloadFiles(ctx context.Context, repo, commit string, files []string) error {
	if need, have := c.pendingBytes(repo, commit, files); need > 0 {
		if err := c.checkSpace(repo, need, have); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, c.parallel())
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	var total int64
	for _, f := range files {
		n, _ := c.knownSize(repo, commit, f)
		total += n
	}
	c.report(Progress{Event: BatchStart, Repo: repo, Files: len(files), Total: total})
	defer c.report(Progress{Event: BatchDone, Repo: repo, Files: len(files), Total: total})
	for _, f := range files {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(f string) {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.Download(ctx, repo, commit, f); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
		}(f)
	}
	wg.Wait()
	if firstErr != nil {
		// A sibling's cancellation is not the interesting error.
		return firstErr
	}
	return ctx.Err()
}

// SnapshotOptions selects what Snapshot downloads.
type SnapshotOptions struct {
	// Revision is a branch, tag or commit; "" means main.
	Revision string
	// Allow and Ignore are fnmatch patterns (see FilterFiles).
	Allow, Ignore []string
}

// Snapshot downloads the files of a revision that pass the allow/ignore
// patterns and returns the snapshot, like huggingface_hub's
// snapshot_download. From the cache (offline or Hub unreachable) it returns
// the cached snapshot as it is.
func (c *Client) Snapshot(ctx context.Context, repo string, opts SnapshotOptions) (*Snapshot, error) {
	s, err := c.ListFiles(ctx, repo, opts.Revision)
	if err != nil {
		return nil, err
	}
	s.Files = FilterFiles(s.RepoFiles, opts.Allow, opts.Ignore)
	if s.FromCache {
		return s, nil
	}
	if err := c.DownloadFiles(ctx, repo, s.Commit, s.Files); err != nil {
		return nil, err
	}
	return s, nil
}

// rememberSizes keeps a listing's file sizes for the progress totals of
// DownloadFiles.
func (c *Client) rememberSizes(repo, commit string, sizes map[string]int64, lfsETags map[string]string) {
	c.sizesMu.Lock()
	defer c.sizesMu.Unlock()
	if c.sizes == nil {
		c.sizes = map[string]map[string]int64{}
		c.lfsETags = map[string]map[string]string{}
	}
	c.sizes[repo+"@"+commit] = sizes
	c.lfsETags[repo+"@"+commit] = lfsETags
}

// knownSize returns a file's size from a listing or the cache.
func (c *Client) knownSize(repo, commit, file string) (int64, bool) {
	c.sizesMu.Lock()
	n, ok := c.sizes[repo+"@"+commit][file]
	c.sizesMu.Unlock()
	if ok {
		return n, true
	}
	if st, err := os.Stat(c.Cache.PointerPath(repo, commit, file)); err == nil {
		return st.Size(), true
	}
	return 0, false
}

// sizeMatches reports whether the cached file at path has the size the
// last listing of repo@commit gave; true when no listing gave one (offline,
// or a lone Download), since the size is then unknown.
func (c *Client) sizeMatches(repo, commit, file, path string) bool {
	c.sizesMu.Lock()
	want, ok := c.sizes[repo+"@"+commit][file]
	c.sizesMu.Unlock()
	if !ok {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && st.Size() == want
}

// ETag is the ETag the Hub names the file's blob by: the sha256 of an LFS
// file, the git blob sha1 of the others; "" when the listing gave neither.
func (s Sibling) ETag() string {
	if s.LFS != nil {
		return s.LFS.SHA256
	}
	return s.BlobID
}

// RemoteETags lists a commit's files with their ETags (one request, as
// RepoInfo), for Cache.Verify's Remote option.
func (c *Client) RemoteETags(ctx context.Context, repo, commit string) (map[string]string, error) {
	ri, err := c.RepoInfo(ctx, repo, commit)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ri.Siblings))
	for _, s := range ri.Siblings {
		out[s.RFilename] = s.ETag()
	}
	return out, nil
}

// escapingName reports a listed name no Git tree can hold: empty, with a
// NUL, absolute, or with an empty, "." or ".." segment (split at '/' and
// at '\').
func escapingName(file string) bool {
	if file == "" || strings.ContainsRune(file, 0) || strings.HasPrefix(file, "/") || strings.HasPrefix(file, `\`) {
		return true
	}
	for _, seg := range strings.Split(strings.ReplaceAll(file, `\`, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
