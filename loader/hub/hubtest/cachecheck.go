package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// CacheState counts what CheckCache found.
type CacheState struct {
	// Blobs are complete blobs (each verified against its name).
	Blobs int
	// Pointers are snapshot entries (each resolving to a verified blob).
	Pointers int
	// Incomplete are blobs/*.incomplete partial downloads, which a later
	// run resumes; their bytes are not checked.
	Incomplete int
	// IncompleteBytes is their total size.
	IncompleteBytes int64
}

var (
	sha256Name = regexp.MustCompile(`^[0-9a-f]{64}$`)
	sha1Name   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// CheckCache fails the test unless the Hugging Face cache at dir is valid:
// every blob's content matches its name (sha256 for LFS files, the git blob
// sha1 for the others), every snapshot entry is a link (or, where links
// are impossible, a copy) of a valid blob of the same repository, and
// nothing else lies in blobs/ but resumable .incomplete files. A missing
// dir is an empty, valid cache.
func CheckCache(t testing.TB, dir string) CacheState {
	t.Helper()
	st, err := checkCache(dir)
	if err != nil {
		t.Fatalf("cache %s is corrupt: %v", dir, err)
	}
	return st
}

func checkCache(dir string) (CacheState, error) {
	var st CacheState
	repos, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	for _, r := range repos {
		if !r.IsDir() || !strings.HasPrefix(r.Name(), "models--") {
			continue
		}
		repoDir := filepath.Join(dir, r.Name())
		blobs := filepath.Join(repoDir, "blobs")
		good := map[string]bool{}
		entries, err := os.ReadDir(blobs)
		if err != nil && !os.IsNotExist(err) {
			return st, err
		}
		for _, e := range entries {
			p := filepath.Join(blobs, e.Name())
			if strings.HasSuffix(e.Name(), ".incomplete") {
				info, err := os.Stat(p)
				if err != nil {
					return st, err
				}
				st.Incomplete++
				st.IncompleteBytes += info.Size()
				continue
			}
			if !e.Type().IsRegular() {
				return st, fmt.Errorf("%s is not a regular file", p)
			}
			if err := verifyBlob(p); err != nil {
				return st, err
			}
			good[p] = true
			st.Blobs++
		}
		snaps := filepath.Join(repoDir, "snapshots")
		err = filepath.WalkDir(snaps, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && p == snaps {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			st.Pointers++
			if d.Type()&fs.ModeSymlink == 0 {
				// The copy fallback: the bytes must be those of some blob.
				return verifyCopy(p, good)
			}
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				return fmt.Errorf("%s links to the absolute path %s", p, target)
			}
			abs := filepath.Clean(filepath.Join(filepath.Dir(p), target))
			if !good[abs] {
				return fmt.Errorf("%s links to %s, which is not a verified blob of %s", p, target, r.Name())
			}
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// verifyBlob checks a blob's content against its file name.
func verifyBlob(p string) error {
	name := filepath.Base(p)
	var h hash.Hash
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	switch {
	case sha256Name.MatchString(name):
		h = sha256.New()
	case sha1Name.MatchString(name):
		info, err := f.Stat()
		if err != nil {
			return err
		}
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", info.Size())
	default:
		return nil // an ETag that names no hash: only its presence counts
	}
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != name {
		return fmt.Errorf("blob %s holds content with hash %s", p, got)
	}
	return nil
}

func verifyCopy(p string, good map[string]bool) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	for blob := range good {
		if c, err := os.ReadFile(blob); err == nil && string(c) == string(b) {
			return nil
		}
	}
	return fmt.Errorf("%s is neither a link nor a copy of a verified blob", p)
}
