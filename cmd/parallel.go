package cmd

import "github.com/tputool/tputool/internal/errs"

// checkParallelFlags validates --tp and --dp; whether the model's heads
// split and the device has enough chips is checked once both are known
// (compile.CheckParallel, compile.CheckDevices).
func checkParallelFlags(tp, dp int) error {
	if tp < 1 || tp > 4096 {
		return errs.Usagef("--tp %d: want 1 to 4096 devices", tp)
	}
	if dp < 1 || dp > 4096 {
		return errs.Usagef("--dp %d: want 1 to 4096 devices", dp)
	}
	return nil
}
