// Package ui is tputool's output layer: the IO streams with their TTY facts,
// the Reporter that commands tell about progress, logs and events on stderr,
// the two Printers it hands them to (text: bars on a terminal, throttled
// plain lines in CI logs, only warnings under --quiet; JSON: NDJSON under
// --json), and table/JSON writers for results on stdout.
//
// Commands receive an *IOStreams and never write to os.Stdout directly, so
// tests can inject buffers and choose whether each stream "is" a TTY.
package ui

import (
	"bytes"
	"io"
	"os"

	"github.com/mattn/go-isatty"
)

// IOStreams holds the three standard streams and what is known about them.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY  bool
	stdoutTTY bool
	stderrTTY bool
	color     bool
	// dumb: TERM=dumb, a terminal that cannot redraw a line (no bars, no
	// line editor).
	dumb bool
}

func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// System returns the process's streams. Colour is on only when stderr is a
// terminal, NO_COLOR is unset or empty, and TERM is not "dumb".
func System(getenv func(string) string) *IOStreams {
	s := &IOStreams{
		In:        os.Stdin,
		Out:       os.Stdout,
		ErrOut:    os.Stderr,
		stdinTTY:  isTerminal(os.Stdin),
		stdoutTTY: isTerminal(os.Stdout),
		stderrTTY: isTerminal(os.Stderr),
	}
	s.dumb = getenv("TERM") == "dumb"
	s.color = s.stderrTTY && getenv("NO_COLOR") == "" && !s.dumb
	return s
}

// Test returns streams backed by buffers, none of them a TTY.
func Test() (s *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// IsStdinTTY reports whether stdin is a terminal.
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }

// IsStdoutTTY reports whether stdout is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// IsStderrTTY reports whether stderr is a terminal.
func (s *IOStreams) IsStderrTTY() bool { return s.stderrTTY }

// ColorEnabled reports whether ANSI colour may be written to stderr.
func (s *IOStreams) ColorEnabled() bool { return s.color }

// SetStdinTTY overrides the stdin TTY fact (tests).
func (s *IOStreams) SetStdinTTY(v bool) { s.stdinTTY = v }

// SetStdoutTTY overrides the stdout TTY fact (tests).
func (s *IOStreams) SetStdoutTTY(v bool) { s.stdoutTTY = v }

// SetStderrTTY overrides the stderr TTY fact (tests).
func (s *IOStreams) SetStderrTTY(v bool) { s.stderrTTY = v }

// SetColorEnabled overrides the colour decision (tests, NO_COLOR).
func (s *IOStreams) SetColorEnabled(v bool) { s.color = v }

// IsDumbTerminal reports TERM=dumb: a terminal that cannot redraw a line,
// so no progress bars are drawn (plain lines instead).
func (s *IOStreams) IsDumbTerminal() bool { return s.dumb }

// SetDumbTerminal sets what IsDumbTerminal reports (tests).
func (s *IOStreams) SetDumbTerminal(v bool) { s.dumb = v }
