package cmd

import (
	"context"
	"errors"

	"github.com/tputool/tputool/internal/errs"
)

// ExitCode is a process exit status. The values are part of tputool's
// interface: scripts and CI jobs branch on them, so they never change.
type ExitCode int

// The exit codes, documented in every command's help and in docs/cli.md.
const (
	ExitOK          ExitCode = 0
	ExitError       ExitCode = 1   // any other failure
	ExitUsage       ExitCode = 2   // bad flag, argument or flag combination
	ExitUnsupported ExitCode = 3   // model, checkpoint or feature not supported (yet)
	ExitDevice      ExitCode = 4   // requested device or PJRT plugin unavailable
	ExitHub         ExitCode = 5   // network or Hugging Face Hub failure
	ExitLimit       ExitCode = 6   // untrusted input (a chat template) exceeded a safety limit
	ExitInterrupted ExitCode = 130 // interrupted by SIGINT/SIGTERM
)

// exitCodeHelp is appended to every command's help.
const exitCodeHelp = `Exit codes:
  0    ok
  1    error
  2    usage error (bad flag or argument)
  3    unsupported model, checkpoint or feature
  4    device unavailable (no TPU/GPU/PJRT plugin, or it failed to load)
  5    network or Hugging Face Hub error
  6    a chat template exceeded a safety limit (steps, time, size, memory, depth)
  130  interrupted (Ctrl-C)
`

// ExitCodeFor maps an error to its exit code. Interruption wins over the
// error's own kind, since a cancelled download often surfaces as a network
// error.
func ExitCodeFor(err error) ExitCode {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errs.ErrInterrupted), errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.Is(err, errs.ErrUsage):
		return ExitUsage
	case errors.Is(err, errs.ErrUnsupported):
		return ExitUnsupported
	case errors.Is(err, errs.ErrDeviceUnavailable):
		return ExitDevice
	case errors.Is(err, errs.ErrHub):
		return ExitHub
	case errors.Is(err, errs.ErrLimit):
		return ExitLimit
	default:
		return ExitError
	}
}
