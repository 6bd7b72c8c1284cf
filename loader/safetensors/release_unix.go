//go:build unix

package safetensors

import "golang.org/x/sys/unix"

// dropPages drops the resident pages of a read-only file mapping
// (MADV_DONTNEED: the next read faults them in from the file again).
func dropPages(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }
