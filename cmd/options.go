package cmd

import (
	"errors"
	"strings"

	"github.com/tputool/tputool/compile"
)

// optionFlags names the flag that sets each compile.Options and
// compile.BatchOptions field. compile's errors name fields, not flags
// (compile.OptionError); the commands restate them here, in one place.
var optionFlags = map[string]string{
	"Mode":         "--mode",
	"DType":        "--dtype",
	"KVDType":      "--kv-cache-dtype",
	"TP":           "--tp",
	"DP":           "--dp",
	"Quantize":     "--quantize",
	"Experts":      "--experts",
	"MaxBatch":     "--max-batch",
	"MaxContext":   "--max-context",
	"PrefillChunk": "--prefill-chunk",
	"PrefixCache":  "--prefix-cache",
}

// flagOf is the flag that sets a compile option field, or the field's own
// name for one no flag sets.
func flagOf(field string) string {
	if f, ok := optionFlags[field]; ok {
		return f
	}
	return field
}

// restatedError is an error whose message names flags where the error it
// wraps named option fields; its kind (and exit code) is the wrapped
// error's.
type restatedError struct {
	msg string
	err error
}

func (e *restatedError) Error() string { return e.msg }
func (e *restatedError) Unwrap() error { return e.err }

// restateOptions restates a compile.OptionError inside err with the flags
// that set the fields it names; other errors pass as they are.
func restateOptions(err error) error {
	var oe *compile.OptionError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	return &restatedError{msg: strings.Replace(err.Error(), oe.Error(), oe.Text(flagOf), 1), err: err}
}
