// Package errs holds the sentinel errors that decide tputool's exit codes.
//
// Library packages (loader, pipeline, tpu, compile) wrap one of these
// sentinels with %w so that cmd can map any error to a documented exit code
// with errors.Is, without the libraries knowing about exit codes:
//
//	return fmt.Errorf("repo %q: %w", id, errs.ErrHub)
//	return errs.Unsupportedf("architecture %q", arch)
//
// The mapping itself lives in one place, cmd/exitcode.go.
package errs

import (
	"errors"
	"fmt"
)

var (
	// ErrUsage marks a bad flag, argument or flag combination (exit 2).
	ErrUsage = errors.New("usage error")
	// ErrUnsupported marks a model, checkpoint format or feature that
	// tputool does not (yet) support (exit 3).
	ErrUnsupported = errors.New("unsupported")
	// ErrDeviceUnavailable marks a requested device or plugin that cannot be
	// found or loaded (exit 4).
	ErrDeviceUnavailable = errors.New("device unavailable")
	// ErrHub marks a network or Hugging Face Hub failure: unreachable host,
	// gated or missing repo, auth failure, exhausted retries (exit 5).
	ErrHub = errors.New("network/hub error")
	// ErrLimit marks untrusted input (a chat template) that ran past a
	// safety limit: steps, time, output or value size, memory, recursion
	// (exit 6).
	ErrLimit = errors.New("safety limit exceeded")
	// ErrInterrupted marks a run stopped by SIGINT/SIGTERM (exit 130).
	// context.Canceled is treated the same way.
	ErrInterrupted = errors.New("interrupted")
)

// Usagef returns an error wrapping ErrUsage.
func Usagef(format string, args ...any) error { return wrapf(ErrUsage, format, args...) }

// Unsupportedf returns an error wrapping ErrUnsupported.
func Unsupportedf(format string, args ...any) error { return wrapf(ErrUnsupported, format, args...) }

// Devicef returns an error wrapping ErrDeviceUnavailable.
func Devicef(format string, args ...any) error { return wrapf(ErrDeviceUnavailable, format, args...) }

// Limitf returns an error wrapping ErrLimit.
func Limitf(format string, args ...any) error { return wrapf(ErrLimit, format, args...) }

// sentinelError carries a message and the sentinel it belongs to, so that the
// message reads naturally ("unsupported architecture X") without the
// sentinel's own text being appended, while errors.Is still finds it.
type sentinelError struct {
	msg      string
	sentinel error
	causes   []error
}

func (e *sentinelError) Error() string { return e.msg }

// Unwrap exposes both the sentinel and, when the format had a %w verb, the
// wrapped cause.
func (e *sentinelError) Unwrap() []error {
	return append([]error{e.sentinel}, e.causes...)
}

func wrapf(sentinel error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	e := &sentinelError{msg: err.Error(), sentinel: sentinel}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		e.causes = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		e.causes = u.Unwrap()
	}
	return e
}
