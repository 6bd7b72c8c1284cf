package cpu

import "golang.org/x/sys/unix"

const hugeSupported = true

// adviseHuge asks for transparent huge pages over b (aligned to them);
// a kernel without them, or with them off, refuses and nothing changes.
func adviseHuge(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }
