//go:build unix

package hub

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes an exclusive, non-blocking flock(2) on f: the lock
// Python's filelock.UnixFileLock takes, so tputool and huggingface_hub
// exclude each other on the same lock file.
func tryLock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		}
		return false, err
	}
}

func unlock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }

// lockUnsupported reports a file system without flock: ENOSYS (what
// filelock checks), EOPNOTSUPP/ENOTSUP (FUSE, Lustre mounted noflock) and
// ENOLCK (NFS without a lock manager).
func lockUnsupported(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) ||
		errors.Is(err, unix.ENOLCK)
}
