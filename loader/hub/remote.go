package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// RemoteFile reads byte ranges of one repository file over HTTP, without
// downloading it: `inspect` reads safetensors headers this way. It
// satisfies safetensors.RangeReader.
type RemoteFile struct {
	c                  *Client
	Repo, Commit, File string

	mu       sync.Mutex
	location string // the CDN URL after the first redirect
}

// Remote returns a RemoteFile for file at commit (a branch or tag works
// too, but a commit keeps every range from the same version).
func (c *Client) Remote(repo, commit, file string) *RemoteFile {
	return &RemoteFile{c: c, Repo: repo, Commit: commit, File: file}
}

// maxRangeRead bounds one ReadRange, as a guard against hostile lengths.
const maxRangeRead = 256 << 20

// ReadRange returns n bytes at off and the file's total size, with one GET
// and a Range header (retried like other requests). The first call follows
// the Hub's redirect to the CDN and later calls go there directly.
func (r *RemoteFile) ReadRange(ctx context.Context, off, n int64) ([]byte, int64, error) {
	if off < 0 || n <= 0 || n > maxRangeRead {
		return nil, 0, fmt.Errorf("%s: invalid range %d+%d", r.File, off, n)
	}
	var (
		data  []byte
		total int64
	)
	err := r.c.withRetry(ctx, "reading "+r.Repo+"/"+r.File, func() error {
		var err error
		data, total, err = r.readOnce(ctx, off, n)
		var he *Error
		if errors.As(err, &he) && he.refused {
			// The remembered CDN URL expired: go through the Hub again.
			r.mu.Lock()
			stale := r.location != ""
			r.location = ""
			r.mu.Unlock()
			if stale {
				r.c.debugf("%s: %v; asking the Hub for a fresh URL", r.File, err)
				data, total, err = r.readOnce(ctx, off, n)
			}
		}
		return err
	})
	return data, total, err
}

func (r *RemoteFile) readOnce(ctx context.Context, off, n int64) ([]byte, int64, error) {
	r.mu.Lock()
	u := r.location
	r.mu.Unlock()
	if u == "" {
		u = r.c.ResolveURL(r.Repo, r.Commit, r.File)
	}
	hdr := http.Header{}
	hdr.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	resp, err := r.c.send(ctx, http.MethodGet, u, hdr, true, r.c.idleTimeout())
	if err != nil {
		return nil, 0, withFile(err, r.Repo, r.Commit, r.File)
	}
	defer resp.close()
	fail := func(kind error, format string, args ...any) error {
		return &Error{Kind: kind, Repo: r.Repo, Revision: r.Commit, File: r.File, Status: resp.StatusCode, Detail: fmt.Sprintf(format, args...)}
	}
	var total int64
	switch resp.StatusCode {
	case http.StatusPartialContent:
		m := contentRangeRE.FindStringSubmatch(resp.Header.Get("Content-Range"))
		if m == nil || m[1] != strconv.FormatInt(off, 10) {
			return nil, 0, fail(ErrMetadata, "asked for bytes %d-%d, got Content-Range %q", off, off+n-1, resp.Header.Get("Content-Range"))
		}
		total, _ = strconv.ParseInt(m[3], 10, 64)
		if m[3] == "*" {
			total = -1
		}
	case http.StatusOK:
		// Range ignored: skip to off and read n bytes of the full body.
		total = resp.ContentLength
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return nil, 0, fail(ErrNetwork, "skipping to byte %d: %v", off, err)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		return nil, 0, fail(ErrMetadata, "bytes %d-%d are past the end of the file", off, off+n-1)
	default:
		return nil, 0, r.c.downloadStatusError(resp, r.Repo, r.Commit, r.File)
	}
	buf := make([]byte, n)
	k, err := io.ReadFull(resp.Body, buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		if total >= 0 && off+int64(k) >= total {
			buf = buf[:k] // the file ends inside the range
			err = nil
		} else {
			return nil, 0, fail(ErrNetwork, "connection closed after %d of %d bytes", k, n)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, &Error{Kind: ErrNetwork, Repo: r.Repo, Revision: r.Commit, File: r.File, Detail: "reading range", Err: err}
	}
	if resp.URL.String() != u {
		r.mu.Lock()
		r.location = resp.URL.String()
		r.mu.Unlock()
	}
	return buf, total, nil
}
