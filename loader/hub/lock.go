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

// fileLock is an exclusive inter-process lock: flock(2) (LockFileEx on
// Windows) on a lock file, or, where the file system has no such locks, a
// soft lock that is the existence of a second file.
type fileLock struct {
	f *os.File // the flock'ed lock file; nil for a soft lock

	soft       string        // the soft lock file this process created
	stop, done chan struct{} // end and wait for the soft lock's heartbeat
}

// lockFunc takes the non-blocking exclusive lock on f. Tests replace it to
// simulate file systems without flock, or with one that never excludes.
var lockFunc = tryLock

// Soft locks: the holder refreshes its lock file's mtime every
// softLockRefresh; one left untouched for softLockStale belongs to a
// process that died, and is broken. Variables so tests can shorten them.
var (
	softLockRefresh = 20 * time.Second
	softLockStale   = 3 * time.Minute
)

// acquireLock blocks until it holds the lock at path or ctx ends. Like
// Python's filelock it polls a non-blocking lock, so a waiting download
// can be interrupted. Where flock fails because the file system does not
// implement it (ENOSYS, EOPNOTSUPP, ENOLCK: some FUSE, Lustre noflock and
// NFS mounts), it falls back to a soft lock on path+".soft", as
// huggingface_hub falls back to filelock's SoftFileLock; warn (may be nil)
// is told why.
func acquireLock(ctx context.Context, path string, warn func(format string, args ...any)) (*fileLock, error) {
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
		ok, err := lockFunc(f)
		if err != nil {
			f.Close()
			if lockUnsupported(err) {
				if warn != nil {
					warn("the file system of %s does not support flock (%v); using the soft lock %s.soft instead", filepath.Dir(path), err, path)
				}
				return acquireSoftLock(ctx, path+".soft")
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok {
			return &fileLock{f: f}, nil
		}
		if err := pause(ctx, wait); err != nil {
			f.Close()
			return nil, err
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// acquireSoftLock creates path with O_EXCL, which only one process can do,
// and keeps its mtime fresh while held. A lock file whose mtime is older
// than softLockStale is removed as the leftover of a dead process. Two
// waiters breaking the same stale lock at once may both get it: that
// costs a duplicate download, never a corrupt blob, since each writer has
// its own partial file and the blob is verified on disk before the rename.
func acquireSoftLock(ctx context.Context, path string) (*fileLock, error) {
	host, _ := os.Hostname()
	wait := 10 * time.Millisecond
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
		if err == nil {
			// Who holds it, for a person looking at a lock that will not go.
			fmt.Fprintf(f, "%d %s\n", os.Getpid(), host)
			f.Close()
			l := &fileLock{soft: path, stop: make(chan struct{}), done: make(chan struct{})}
			go l.heartbeat()
			return l, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) > softLockStale {
			// Check again right before removing, so that a lock someone
			// just refreshed or re-created survives.
			if st2, err := os.Stat(path); err == nil && st2.ModTime().Equal(st.ModTime()) && os.SameFile(st, st2) {
				// A stale lock that cannot be removed would never be
				// released: say so rather than retrying without a pause.
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("lock %s: removing a stale soft lock: %w", path, err)
				}
			}
			continue
		}
		if err := pause(ctx, wait); err != nil {
			return nil, err
		}
		if wait < time.Second {
			wait *= 2
		}
	}
}

func (l *fileLock) heartbeat() {
	defer close(l.done)
	t := time.NewTicker(softLockRefresh)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			now := time.Now()
			os.Chtimes(l.soft, now, now)
		}
	}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// release unlocks and closes the lock file. A flock'ed file stays, as with
// filelock: removing it would let a waiter lock a different inode. A soft
// lock file is removed, which is what releases it.
func (l *fileLock) release() error {
	if l.f == nil {
		close(l.stop)
		<-l.done
		if err := os.Remove(l.soft); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	err := unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
