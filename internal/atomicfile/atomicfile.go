// Package atomicfile writes files so that readers see the old content or
// the new, never a partial write: a temporary file in the same folder,
// renamed over the target.
package atomicfile

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// Write writes data to path atomically. perm is the mode before the
// umask, as with os.WriteFile: the temporary file is created with it, so
// the process umask (and a folder's default ACL) applies. Pass 0o666 for
// a file others may share, as Python's open() does; the mode is never
// widened past the umask by a chmod.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := create(path, perm)
	if err != nil {
		return err
	}
	err = write(tmp, data)
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// create makes a new, exclusive temporary file next to path.
func create(path string, perm os.FileMode) (*os.File, error) {
	dir, base := filepath.Split(path)
	for range 1000 {
		name := filepath.Join(dir, "."+base+"."+strconv.FormatUint(rand.Uint64(), 36)+".tmp")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "create temporary file for", Path: path, Err: fs.ErrExist}
}

func write(tmp *os.File, data []byte) error {
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	return tmp.Close()
}
