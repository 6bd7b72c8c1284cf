package ui

import (
	"fmt"
	"sync"
	"time"
)

// Unit says how a task's counts are shown.
type Unit string

// Units of progress.
const (
	UnitBytes  Unit = "bytes"
	UnitSteps  Unit = "steps"
	UnitTokens Unit = "tokens"
	UnitItems  Unit = "items"
)

// Mode is how the flags ask for progress to be shown. ModeQuiet, ModeBar
// and ModePlain are the text printer's; ModeJSON is the JSON printer's.
type Mode int

const (
	// ModeQuiet shows no progress and no info lines (warnings and errors
	// still go out).
	ModeQuiet Mode = iota
	// ModeBar draws progress bars; only on a terminal.
	ModeBar
	// ModePlain prints one throttled line per update, fit for CI logs.
	ModePlain
	// ModeJSON prints NDJSON events with a "type" field.
	ModeJSON
)

// Level is the level of a log message.
type Level int

// Log levels. Debug messages are printed only under --verbose; warnings
// are printed even under --quiet.
const (
	LevelDebug Level = iota
	LevelInfo
	LevelWarning
)

// String is the level as the JSON printer writes it.
func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarning:
		return "warning"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Printer shows what a Reporter is told. The flags choose one, once, in
// NewReporter: the text printer (text.go: bars on a terminal, plain lines
// every few seconds otherwise, only warnings under --quiet) or the JSON
// printer (json.go: NDJSON events with a "type" field). Another output,
// such as a server's JSON access log, is one more Printer, handed over in
// ReporterOptions.Printer. A Printer must be safe for concurrent use.
type Printer interface {
	// Log prints a message. Debug messages reach it only under --verbose.
	Log(level Level, msg string)
	// Event prints a structured event of type typ (a bench row, a
	// summary): text is its line for people, fields its members for
	// machines. Either may be left unused.
	Event(typ, text string, fields map[string]any)
	// StartTask begins showing a task whose state at start is s.
	StartTask(s TaskStatus) TaskPrinter
}

// TaskPrinter shows the progress of one task. Update is called on every
// change (the printer throttles as it sees fit), Done once, at the end.
type TaskPrinter interface {
	Update(s TaskStatus)
	Done(s TaskStatus)
}

// TaskStatus is the state of a task at one moment.
type TaskStatus struct {
	Name string
	Unit Unit
	// Current is the count so far; Total <= 0 means unknown.
	Current, Total int64
	// Started is when the task began, Now the moment of this status.
	Started, Now time.Time
	Done         bool
}

// Elapsed is the time since the task began.
func (s TaskStatus) Elapsed() time.Duration { return s.Now.Sub(s.Started) }

// ReporterOptions selects how progress and logs are shown.
type ReporterOptions struct {
	JSON       bool
	Quiet      bool
	Verbose    bool
	NoProgress bool
	// Now is the clock (tests inject a fake one). Defaults to time.Now.
	Now func() time.Time
	// PlainInterval is the minimum time between two plain progress lines of
	// one task (default 5 s). JSON progress uses the same throttle.
	PlainInterval time.Duration
	// Printer, when set, replaces the printer the flags choose.
	Printer Printer
}

// ChooseMode applies the rules of the output layer: bars only when stderr is
// a TTY that can redraw a line (TERM is not dumb) and neither --quiet,
// --json nor --no-progress is set; NDJSON under
// --json; plain throttled lines otherwise; nothing under --quiet.
func ChooseMode(io *IOStreams, o ReporterOptions) Mode {
	switch {
	case o.Quiet:
		return ModeQuiet
	case o.JSON:
		return ModeJSON
	case io.IsStderrTTY() && !io.IsDumbTerminal() && !o.NoProgress:
		return ModeBar
	default:
		return ModePlain
	}
}

// Reporter is what commands call to report progress, logs and events on
// stderr: it keeps the tasks' state, the clock and the verbosity, and
// hands what is to be shown to its Printer. It is safe for concurrent use
// (parallel downloads report at once).
type Reporter struct {
	p       Printer
	mode    Mode
	verbose bool
	now     func() time.Time
}

// NewReporter returns a reporter writing to io.ErrOut with the printer the
// options choose (ChooseMode).
func NewReporter(io *IOStreams, o ReporterOptions) *Reporter {
	r := &Reporter{p: o.Printer, mode: ChooseMode(io, o), verbose: o.Verbose && !o.Quiet, now: o.Now}
	if r.now == nil {
		r.now = time.Now
	}
	interval := o.PlainInterval
	if interval == 0 {
		interval = 5 * time.Second
	}
	if r.p == nil {
		if r.mode == ModeJSON {
			r.p = NewJSONPrinter(io.ErrOut, interval)
		} else {
			r.p = NewTextPrinter(io, r.mode, interval)
		}
	}
	return r
}

// Mode returns the mode the flags chose.
func (r *Reporter) Mode() Mode { return r.mode }

// Verbose reports whether --verbose output is wanted.
func (r *Reporter) Verbose() bool { return r.verbose }

// Infof prints an informational line (hidden under --quiet).
func (r *Reporter) Infof(format string, args ...any) {
	r.p.Log(LevelInfo, fmt.Sprintf(format, args...))
}

// Debugf prints only under --verbose.
func (r *Reporter) Debugf(format string, args ...any) {
	if r.verbose {
		r.p.Log(LevelDebug, fmt.Sprintf(format, args...))
	}
}

// Warnf prints a warning; warnings show even under --quiet.
func (r *Reporter) Warnf(format string, args ...any) {
	r.p.Log(LevelWarning, fmt.Sprintf(format, args...))
}

// Event writes a structured event: an NDJSON object with the given type under
// --json, and the text line otherwise (unless quiet).
func (r *Reporter) Event(typ, text string, fields map[string]any) {
	r.p.Event(typ, text, fields)
}

// Task is one progress-tracked piece of work.
type Task struct {
	r  *Reporter
	p  TaskPrinter
	mu sync.Mutex
	s  TaskStatus
}

// Start begins a task; total <= 0 means unknown.
func (r *Reporter) Start(name string, total int64, unit Unit) *Task {
	now := r.now()
	t := &Task{r: r, s: TaskStatus{Name: name, Unit: unit, Total: total, Started: now, Now: now}}
	t.p = r.p.StartTask(t.s)
	return t
}

// Add advances the task by n.
func (t *Task) Add(n int64) { t.Set(t.Current() + n) }

// Current returns the current count.
func (t *Task) Current() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s.Current
}

// Set moves the task to n.
func (t *Task) Set(n int64) {
	now := t.r.now()
	t.mu.Lock()
	t.s.Current, t.s.Now = n, now
	s := t.s
	t.mu.Unlock()
	t.p.Update(s)
}

// SetTotal changes the task's total (a count learnt once work started).
func (t *Task) SetTotal(n int64) {
	now := t.r.now()
	t.mu.Lock()
	t.s.Total, t.s.Now = n, now
	s := t.s
	t.mu.Unlock()
	t.p.Update(s)
}

// Done finishes the task: clears the bar, or prints a final line.
func (t *Task) Done() {
	now := t.r.now()
	t.mu.Lock()
	if t.s.Done {
		t.mu.Unlock()
		return
	}
	t.s.Done, t.s.Now = true, now
	s := t.s
	t.mu.Unlock()
	t.p.Done(s)
}

// throttle lets a line through at most once per interval, except when
// forced (a task's first and last lines).
type throttle struct {
	mu       sync.Mutex
	interval time.Duration
	last     time.Time
}

func (th *throttle) due(now time.Time, force bool) bool {
	th.mu.Lock()
	defer th.mu.Unlock()
	if !force && now.Sub(th.last) < th.interval {
		return false
	}
	th.last = now
	return true
}
