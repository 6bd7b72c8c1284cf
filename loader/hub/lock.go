package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// fileLock is an exclusive inter-process lock on a lock file.
type fileLock struct{ f *os.File }

// acquireLock blocks until it holds the lock at path or ctx ends. Like
// Python's filelock it polls a non-blocking lock, so a waiting download
// can be interrupted.
func acquireLock(ctx context.Context, path string) (*fileLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, filePerm)
	if errors.Is(err, fs.ErrPermission) {
		// A lock file another user created without group write (an older
		// client, or umask 022): flock needs no write access, so a
		// read-only descriptor still excludes the others.
		if rf, rerr := os.Open(path); rerr == nil {
			f, err = rf, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	wait := 10 * time.Millisecond
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok {
			return &fileLock{f: f}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// release unlocks and closes the lock file. The file stays, as with
// filelock: removing it would let a waiter lock a different inode.
func (l *fileLock) release() error {
	err := unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
