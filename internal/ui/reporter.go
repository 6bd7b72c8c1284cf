package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/tputool/tputool/internal/humanize"
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

// Mode is how a Reporter shows progress.
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
}

// ChooseMode applies the rules of the output layer: bars only when stderr is
// a TTY and neither --quiet, --json nor --no-progress is set; NDJSON under
// --json; plain throttled lines otherwise; nothing under --quiet.
func ChooseMode(io *IOStreams, o ReporterOptions) Mode {
	switch {
	case o.Quiet:
		return ModeQuiet
	case o.JSON:
		return ModeJSON
	case io.IsStderrTTY() && !o.NoProgress:
		return ModeBar
	default:
		return ModePlain
	}
}

// Reporter writes progress, logs and metrics to stderr. It is safe for
// concurrent use (parallel downloads report at once).
type Reporter struct {
	io       *IOStreams
	mode     Mode
	verbose  bool
	now      func() time.Time
	interval time.Duration
	mu       sync.Mutex
}

// NewReporter returns a reporter writing to io.ErrOut.
func NewReporter(io *IOStreams, o ReporterOptions) *Reporter {
	r := &Reporter{io: io, mode: ChooseMode(io, o), verbose: o.Verbose && !o.Quiet, now: o.Now, interval: o.PlainInterval}
	if r.now == nil {
		r.now = time.Now
	}
	if r.interval == 0 {
		r.interval = 5 * time.Second
	}
	return r
}

// Mode returns the chosen mode.
func (r *Reporter) Mode() Mode { return r.mode }

// Verbose reports whether --verbose output is wanted.
func (r *Reporter) Verbose() bool { return r.verbose }

func (r *Reporter) writeJSON(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.io.ErrOut.Write(append(b, '\n'))
}

func (r *Reporter) writeLine(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	io.WriteString(r.io.ErrOut, s+"\n")
}

func (r *Reporter) log(level, prefix, colour string, always bool, format string, args []any) {
	msg := fmt.Sprintf(format, args...)
	switch {
	case r.mode == ModeJSON:
		r.writeJSON(map[string]any{"type": "log", "level": level, "message": msg})
	case r.mode == ModeQuiet && !always:
	default:
		if prefix != "" && r.io.ColorEnabled() {
			prefix = colour + prefix + "\x1b[0m"
		}
		r.writeLine(prefix + msg)
	}
}

// Infof prints an informational line (hidden under --quiet).
func (r *Reporter) Infof(format string, args ...any) { r.log("info", "", "", false, format, args) }

// Debugf prints only under --verbose.
func (r *Reporter) Debugf(format string, args ...any) {
	if r.verbose {
		r.log("debug", "", "", false, format, args)
	}
}

// Warnf prints a warning; warnings show even under --quiet.
func (r *Reporter) Warnf(format string, args ...any) {
	r.log("warning", "warning: ", "\x1b[33m", true, format, args)
}

// Event writes a structured event: an NDJSON object with the given type under
// --json, and the text line otherwise (unless quiet).
func (r *Reporter) Event(typ, text string, fields map[string]any) {
	if r.mode == ModeJSON {
		ev := map[string]any{"type": typ}
		for k, v := range fields {
			ev[k] = v
		}
		r.writeJSON(ev)
		return
	}
	if r.mode != ModeQuiet && text != "" {
		r.writeLine(text)
	}
}

// Task is one progress-tracked piece of work.
type Task struct {
	r       *Reporter
	name    string
	unit    Unit
	total   int64
	current int64
	last    time.Time
	started time.Time
	bar     *progressbar.ProgressBar
	done    bool
	mu      sync.Mutex
}

// Start begins a task; total <= 0 means unknown.
func (r *Reporter) Start(name string, total int64, unit Unit) *Task {
	t := &Task{r: r, name: name, unit: unit, total: total, started: r.now()}
	if r.mode == ModeBar {
		max := total
		if max <= 0 {
			max = -1
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(r.io.ErrOut),
			progressbar.OptionSetDescription(name),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionEnableColorCodes(false),
			progressbar.OptionShowCount(),
			progressbar.OptionSetRenderBlankState(true),
		}
		if unit == UnitBytes {
			opts = append(opts, progressbar.OptionShowBytes(true))
		} else {
			opts = append(opts, progressbar.OptionSetItsString(string(unit)), progressbar.OptionShowIts())
		}
		t.bar = progressbar.NewOptions64(max, opts...)
	}
	t.emit(true)
	return t
}

// Add advances the task by n.
func (t *Task) Add(n int64) { t.Set(t.Current() + n) }

// Current returns the current count.
func (t *Task) Current() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

// Set moves the task to n.
func (t *Task) Set(n int64) {
	t.mu.Lock()
	t.current = n
	bar := t.bar
	t.mu.Unlock()
	if bar != nil {
		bar.Set64(n)
		return
	}
	t.emit(false)
}

// Done finishes the task: clears the bar, or prints a final line.
func (t *Task) Done() {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.done = true
	bar := t.bar
	t.mu.Unlock()
	if bar != nil {
		bar.Finish()
		return
	}
	t.emit(true)
}

// emit prints a plain or JSON progress line, throttled unless forced.
func (t *Task) emit(force bool) {
	r := t.r
	if r.mode != ModePlain && r.mode != ModeJSON {
		return
	}
	now := r.now()
	t.mu.Lock()
	if !force && now.Sub(t.last) < r.interval {
		t.mu.Unlock()
		return
	}
	t.last = now
	cur, total, done := t.current, t.total, t.done
	elapsed := now.Sub(t.started)
	t.mu.Unlock()
	if r.mode == ModeJSON {
		ev := map[string]any{"type": "progress", "task": t.name, "unit": string(t.unit), "current": cur, "done": done,
			"elapsed_s": elapsed.Seconds()}
		if total > 0 {
			ev["total"] = total
			ev["percent"] = float64(cur) * 100 / float64(total)
		}
		r.writeJSON(ev)
		return
	}
	var b strings.Builder
	b.WriteString(t.name)
	b.WriteString(": ")
	if total > 0 {
		fmt.Fprintf(&b, "%3.0f%% (%s/%s)", float64(cur)*100/float64(total), t.format(cur), t.format(total))
	} else {
		b.WriteString(t.format(cur))
	}
	if done {
		fmt.Fprintf(&b, " done in %s", elapsed.Round(time.Millisecond))
	}
	r.writeLine(b.String())
}

func (t *Task) format(n int64) string {
	if t.unit == UnitBytes {
		return humanize.Bytes(n)
	}
	return fmt.Sprintf("%d %s", n, t.unit)
}
