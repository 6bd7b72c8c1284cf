package hub

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// FileMetadata is what a HEAD on a file's /resolve/ URL tells us.
type FileMetadata struct {
	// Commit is the commit the revision resolved to (X-Repo-Commit).
	Commit string `json:"commit"`
	// ETag names the blob: the sha256 of an LFS file, the git blob sha1 of
	// a regular one (X-Linked-Etag, else ETag, without W/ and quotes).
	ETag string `json:"etag"`
	// Size is the file size (X-Linked-Size, else Content-Length).
	Size int64 `json:"size"`
	// Location is where to GET the bytes: the CDN URL the Hub redirected to,
	// or the /resolve/ URL itself.
	Location string `json:"-"`
}

// NormalizeETag strips a weak-validator prefix and quotes the way
// huggingface_hub's _normalize_etag does (etag.lstrip("W/").strip('"')).
func NormalizeETag(etag string) string {
	return strings.Trim(strings.TrimLeft(etag, "W/"), `"`)
}

// FileMetadata asks the Hub for a file's commit, ETag, size and download
// location with one HEAD request (plus any relative redirects of a renamed
// repository). It is not retried: callers decide between falling back to
// the cache and retrying. An EntryNotFound answer is recorded in the
// cache's .no_exist folder so that the file is not asked for again.
func (c *Client) FileMetadata(ctx context.Context, repo, rev, file string) (*FileMetadata, error) {
	if err := CheckFilename(file); err != nil {
		return nil, &Error{Kind: ErrEntryNotFound, Repo: repo, Revision: rev, File: file, Err: err}
	}
	if err := CheckRevision(rev); err != nil {
		return nil, &Error{Kind: ErrRevisionNotFound, Repo: repo, Revision: rev, Err: err}
	}
	hctx, cancel := context.WithTimeout(ctx, c.etagTimeout())
	defer cancel()
	resp, err := c.send(hctx, http.MethodHead, c.ResolveURL(repo, rev, file), nil, false, c.etagTimeout())
	if err != nil {
		if err := c.metadataEnded(ctx, hctx, "metadata request", repo, rev, file); err != nil {
			return nil, err
		}
		return nil, withFile(err, repo, rev, file)
	}
	defer resp.close()
	if resp.StatusCode >= 400 {
		e := statusError(resp.Response, repo, rev, file)
		if errors.Is(e.Kind, ErrEntryNotFound) {
			if commit := resp.Header.Get("X-Repo-Commit"); IsCommitHash(commit) {
				if err := c.Cache.markNoExist(repo, commit, file); err != nil {
					c.warnf("could not record that %s has no %s: %v", repo, file, err)
				}
				if err := c.Cache.WriteRef(repo, rev, commit); err != nil {
					c.warnf("could not record ref %s of %s: %v", rev, repo, err)
				}
			}
		}
		return nil, e
	}
	m := &FileMetadata{Commit: resp.Header.Get("X-Repo-Commit")}
	if m.Commit == "" {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode,
			Detail: "no X-Repo-Commit header: " + RedactURL(c.endpoint()) + " does not look like a Hugging Face Hub (check HF_ENDPOINT and proxy settings)"}
	}
	if !IsCommitHash(m.Commit) {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, File: file,
			Detail: "X-Repo-Commit " + strconv.Quote(m.Commit) + " is not a 40-hex commit hash"}
	}
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	m.ETag = NormalizeETag(etag)
	if m.ETag == "" {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, File: file, Detail: "no ETag header: cannot name the blob"}
	}
	if err := checkETag(m.ETag); err != nil {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, File: file, Err: err}
	}
	redirect := resp.StatusCode >= 300 && resp.StatusCode < 400
	size := resp.Header.Get("X-Linked-Size")
	if size == "" && !redirect {
		size = resp.Header.Get("Content-Length")
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if size == "" || err != nil || n < 0 {
		return nil, &Error{Kind: ErrMetadata, Repo: repo, Revision: rev, File: file,
			Detail: "no valid X-Linked-Size or Content-Length header (got " + strconv.Quote(size) + ")"}
	}
	m.Size = n
	m.Location = resp.URL.String()
	if redirect {
		if loc, err := resp.URL.Parse(resp.Header.Get("Location")); err == nil {
			m.Location = loc.String()
		}
	}
	return m, nil
}

// metadataEnded explains a metadata call (what) that failed after its
// context ended: ctx's own error when the caller cancelled, a timeout
// naming HF_HUB_ETAG_TIMEOUT when hctx, the call's deadline, ran out; nil
// when neither ended.
func (c *Client) metadataEnded(ctx, hctx context.Context, what, repo, rev, file string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if hctx.Err() != nil {
		return &Error{Kind: ErrNetwork, Repo: repo, Revision: rev, File: file,
			Detail: what + " timed out after " + c.etagTimeout().String() + " (HF_HUB_ETAG_TIMEOUT)"}
	}
	return nil
}

// withFile fills in the repository coordinates of an *Error.
func withFile(err error, repo, rev, file string) error {
	var he *Error
	if errors.As(err, &he) && he.Repo == "" {
		he.Repo, he.Revision, he.File = repo, rev, file
	}
	return err
}
