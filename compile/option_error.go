package compile

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// OptionError is an Options or BatchOptions value that a Runner or Batch
// cannot take. It names the field and says what is wrong in the terms of
// this package, never of a command line: cmd restates it with the flag
// that set each field it names (cmd/options.go), as vLLM's engine
// arguments are checked below the CLI that spells them.
//
// The message is Option's name and Value, then Want (the values the field
// takes, for a value out of range) or Reason (why this value cannot be
// used here). Reason may name other fields as {Field}; Text fills them in.
// It wraps Kind, an errs sentinel: errs.ErrUsage when nil,
// errs.ErrUnsupported for a valid value this model, backend or
// combination does not support, errs.ErrDeviceUnavailable for one the
// devices cannot hold.
type OptionError struct {
	Option string // the field, as "TP" or "MaxBatch"
	Value  any
	Want   string
	Reason string
	Kind   error
}

// Error names the fields as Go does: "Options.TP 3: ...".
func (e *OptionError) Error() string { return e.Text(func(f string) string { return fieldName(f) }) }

// Text is the message with each field named by name.
func (e *OptionError) Text(name func(field string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v: ", name(e.Option), e.Value)
	if e.Want != "" {
		b.WriteString("want " + e.Want)
		return b.String()
	}
	r := e.Reason
	for {
		i := strings.IndexByte(r, '{')
		j := strings.IndexByte(r[max(i, 0):], '}')
		if i < 0 || j < 0 {
			break
		}
		b.WriteString(r[:i] + name(r[i+1:i+j]))
		r = r[i+j+1:]
	}
	b.WriteString(r)
	return b.String()
}

// Unwrap is the error's kind (errs.ErrUsage by default).
func (e *OptionError) Unwrap() error {
	if e.Kind == nil {
		return errs.ErrUsage
	}
	return e.Kind
}

// fieldName is field's Go name: a BatchOptions field, or an Options one.
func fieldName(field string) string {
	switch field {
	case "MaxBatch", "MaxContext", "PrefillChunk", "PrefixCache":
		return "BatchOptions." + field
	}
	return "Options." + field
}
