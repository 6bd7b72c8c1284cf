//go:build unix

package sd_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time: on a machine shared with
// other work it says more about the cost of a step than the wall time.
func cpuTime() time.Duration {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
