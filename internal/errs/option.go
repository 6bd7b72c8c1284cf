package errs

import (
	"fmt"
	"strings"
)

// OptionError is an option value that a library package cannot take. It
// names the option as a field of the package's options type (Owner and
// Option, as "Options" and "TP") and says what is wrong in the package's
// terms, never a command line's: cmd restates it with the flag that set
// each field it names (cmd/options.go), so that flags are named in one
// place, as vLLM's engine arguments are checked below the CLI that spells
// them.
//
// The message is the option's name and Value, then Want (the values the
// option takes, for a value out of range) or Reason (why this value cannot
// be used here), then Cause's message as it is. Reason may name other
// fields of the same owner as {Field}; Text fills them in. Text that is
// not the package's own (a path, another error's message) goes in Cause,
// never in Reason. It wraps Kind, a sentinel of this package:
// ErrUsage when nil, ErrUnsupported for a valid value the model, backend
// or combination does not support, ErrDeviceUnavailable for one the
// devices cannot hold.
type OptionError struct {
	Owner  string // the options type, as "Options" ("" for none)
	Option string // the field, as "TP"
	Value  any
	Want   string
	Reason string
	Kind   error
	// Cause is the error behind Reason, when there is one: its message
	// follows Reason's, and errors.Is and errors.As find it.
	Cause error
}

// Error names the fields as Go does: "Options.TP 3: ...".
func (e *OptionError) Error() string {
	return e.Text(func(f string) string {
		if e.Owner == "" {
			return f
		}
		return e.Owner + "." + f
	})
}

// Text is the message with each field named by name.
func (e *OptionError) Text(name func(field string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v: ", name(e.Option), e.Value)
	if e.Want != "" {
		b.WriteString("want " + e.Want)
	}
	r := e.Reason
	if e.Want != "" {
		r = ""
	}
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
	if e.Cause != nil {
		if e.Want != "" || e.Reason != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap is the error's kind (ErrUsage by default) and its cause.
func (e *OptionError) Unwrap() []error {
	kind := e.Kind
	if kind == nil {
		kind = ErrUsage
	}
	if e.Cause == nil {
		return []error{kind}
	}
	return []error{kind, e.Cause}
}
