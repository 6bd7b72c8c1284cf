package cmd

import (
	"errors"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// optionFlags names the flag that sets each option field that the library
// packages' errors name (errs.OptionError): compile.Options and
// BatchOptions, bench's Config and cases, inspect.Options, loader's model
// reference and Options. The commands restate them here, in one place.
var optionFlags = map[string]string{
	"Ref":          "--model",
	"Revision":     "--revision",
	"Repeat":       "--repeat",
	"Warmup":       "--warmup",
	"Modes":        "--mode",
	"Batch":        "--batch",
	"PromptLen":    "--prompt-len",
	"GenLen":       "--gen-len",
	"Steps":        "--steps",
	"Size":         "--size",
	"Context":      "--context",
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

// restateOptions restates an errs.OptionError inside err with the flags
// that set the fields it names; other errors pass as they are.
func restateOptions(err error) error {
	var oe *errs.OptionError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	return &restatedError{msg: strings.Replace(err.Error(), oe.Error(), oe.Text(flagOf), 1), err: err}
}
