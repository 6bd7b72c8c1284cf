package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tputool/tputool/internal/humanize"
)

// ErrNoSpace marks a download that does not fit on the cache's disk: found
// before it starts (free space below what is left to fetch), or as ENOSPC
// while writing. It is no Hub error (cmd exits 1). Partial downloads are
// kept, so the download resumes once there is room.
var ErrNoSpace = errors.New("not enough free disk space")

var errFreeSpaceUnknown = errors.New("free space unknown on this platform")

func clampInt64(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// freeSpace is the free space for dir, or the nearest folder above it that
// exists (the cache may not exist yet); ok is false when it is unknown.
func (c *Client) freeSpace(dir string) (int64, bool) {
	for {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	get := c.FreeSpace
	if get == nil {
		get = diskFree
	}
	n, err := get(dir)
	if err != nil {
		c.debugf("free space of %s unknown (%v); not checked", dir, err)
		return 0, false
	}
	return n, true
}

// checkSpace fails with ErrNoSpace when need more bytes do not fit in the
// blobs/ folder of repo. have is what partial downloads already hold.
func (c *Client) checkSpace(repo string, need, have int64) error {
	if need <= 0 {
		return nil
	}
	blobs := filepath.Join(c.Cache.RepoDir(repo), "blobs")
	free, ok := c.freeSpace(blobs)
	if !ok || free >= need {
		return nil
	}
	return c.noSpace(repo, fmt.Sprintf("the download needs %s more in %s, and %s are free",
		humanize.Bytes(need), blobs, humanize.Bytes(free)), have)
}

// noSpace explains how to reclaim space and that partial downloads resume.
func (c *Client) noSpace(repo, what string, have int64) error {
	blobs := filepath.Join(c.Cache.RepoDir(repo), "blobs")
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: %s. Free some space and run the command again: `tputool cache ls` lists the cached models and their sizes, "+
		"`tputool cache rm ORG/NAME` removes one (with its partial downloads), or point HF_HUB_CACHE at a bigger disk.",
		repo, ErrNoSpace.Error(), what)
	if have > 0 {
		fmt.Fprintf(&b, " The partial downloads (%s in %s/*.incomplete) are kept and resume where they stopped; `tputool cache rm %s` removes them.",
			humanize.Bytes(have), blobs, repo)
	}
	return &spaceError{msg: b.String()}
}

type spaceError struct{ msg string }

func (e *spaceError) Error() string { return e.msg }
func (e *spaceError) Unwrap() error { return ErrNoSpace }

// incompleteSize is the size of blobs/<etag>.incomplete, 0 when absent.
func (c *Client) incompleteSize(repo, etag string) int64 {
	if etag == "" || checkETag(etag) != nil {
		return 0
	}
	if st, err := os.Stat(c.Cache.BlobPath(repo, etag) + ".incomplete"); err == nil && st.Mode().IsRegular() {
		return st.Size()
	}
	return 0
}

// pendingBytes is what DownloadFiles still has to fetch for files of
// commit, from the listing: nothing for a file whose snapshot entry or
// blob already has the listed size, its size less a partial download
// otherwise. Files the listing gave no size for count 0. have is the bytes
// of partial downloads found.
func (c *Client) pendingBytes(repo, commit string, files []string) (need, have int64) {
	c.sizesMu.Lock()
	sizes := c.sizes[repo+"@"+commit]
	etags := c.lfsETags[repo+"@"+commit]
	c.sizesMu.Unlock()
	for _, f := range files {
		size, ok := sizes[f]
		if !ok {
			continue
		}
		if st, err := os.Stat(c.Cache.PointerPath(repo, commit, f)); err == nil && st.Mode().IsRegular() && st.Size() == size {
			continue
		}
		etag := etags[f]
		if etag != "" {
			if st, err := os.Stat(c.Cache.BlobPath(repo, etag)); err == nil && st.Mode().IsRegular() && st.Size() == size {
				continue
			}
		}
		part := c.incompleteSize(repo, etag)
		if part > size {
			part = 0
		}
		need += size - part
		have += part
	}
	return need, have
}
