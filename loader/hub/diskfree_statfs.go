//go:build linux || darwin || freebsd || dragonfly

package hub

import "golang.org/x/sys/unix"

// diskFree returns the bytes an unprivileged process may still write on
// the file system that holds dir (statfs f_bavail x f_bsize, what df
// shows as available and what Python's shutil.disk_usage().free is).
func diskFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return clampInt64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}
