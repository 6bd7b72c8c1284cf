package ui

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/tputool/tputool/internal/humanize"
)

// textPrinter is the Printer for people: progress bars on a terminal
// (ModeBar), one line per task every interval otherwise (ModePlain), and
// only warnings under --quiet (ModeQuiet).
type textPrinter struct {
	io       *IOStreams
	mode     Mode
	interval time.Duration
	mu       sync.Mutex
}

// NewTextPrinter returns the text printer on io.ErrOut for mode ModeBar,
// ModePlain or ModeQuiet; plain progress lines of one task come at most
// once per interval.
func NewTextPrinter(io *IOStreams, mode Mode, interval time.Duration) Printer {
	return &textPrinter{io: io, mode: mode, interval: interval}
}

func (p *textPrinter) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	io.WriteString(p.io.ErrOut, s+"\n")
}

// Log prints msg; under --quiet only warnings, which carry a "warning: "
// prefix (yellow when colour is on).
func (p *textPrinter) Log(level Level, msg string) {
	if level < LevelWarning {
		if p.mode != ModeQuiet {
			p.line(msg)
		}
		return
	}
	prefix := "warning: "
	if p.io.ColorEnabled() {
		prefix = "\x1b[33m" + prefix + "\x1b[0m"
	}
	p.line(prefix + msg)
}

// Event prints the event's text line, unless quiet.
func (p *textPrinter) Event(typ, text string, fields map[string]any) {
	if p.mode != ModeQuiet && text != "" {
		p.line(text)
	}
}

// StartTask draws a bar, prints the task's first line, or does nothing.
func (p *textPrinter) StartTask(s TaskStatus) TaskPrinter {
	switch p.mode {
	case ModeBar:
		return newBarTask(p.io.ErrOut, s)
	case ModePlain:
		t := &lineTask{p: p, th: throttle{interval: p.interval}}
		t.print(s, true)
		return t
	}
	return quietTask{}
}

// quietTask shows nothing.
type quietTask struct{}

func (quietTask) Update(TaskStatus) {}
func (quietTask) Done(TaskStatus)   {}

// barTask is a progress bar (a spinner when the total is unknown), cleared
// when the task is done.
type barTask struct {
	bar   *progressbar.ProgressBar
	total int64
}

func newBarTask(w io.Writer, s TaskStatus) *barTask {
	max := s.Total
	if max <= 0 {
		max = -1
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(s.Name),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionEnableColorCodes(false),
		progressbar.OptionShowCount(),
		progressbar.OptionSetRenderBlankState(true),
	}
	if s.Unit == UnitBytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionSetItsString(string(s.Unit)), progressbar.OptionShowIts())
	}
	return &barTask{bar: progressbar.NewOptions64(max, opts...), total: s.Total}
}

func (t *barTask) Update(s TaskStatus) {
	if s.Total != t.total && s.Total > 0 {
		t.total = s.Total
		t.bar.ChangeMax64(s.Total)
	}
	t.bar.Set64(s.Current)
}
func (t *barTask) Done(TaskStatus) { t.bar.Finish() }

// lineTask prints "name:  40% (16 steps/40 steps)" at most once per
// interval, and a last line with the time taken.
type lineTask struct {
	p  *textPrinter
	th throttle
}

func (t *lineTask) Update(s TaskStatus) { t.print(s, false) }
func (t *lineTask) Done(s TaskStatus)   { t.print(s, true) }

func (t *lineTask) print(s TaskStatus, force bool) {
	if !t.th.due(s.Now, force) {
		return
	}
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteString(": ")
	if s.Total > 0 {
		fmt.Fprintf(&b, "%3.0f%% (%s/%s)", float64(s.Current)*100/float64(s.Total), formatCount(s.Current, s.Unit), formatCount(s.Total, s.Unit))
	} else {
		b.WriteString(formatCount(s.Current, s.Unit))
	}
	if s.Done {
		fmt.Fprintf(&b, " done in %s", s.Elapsed().Round(time.Millisecond))
	}
	t.p.line(b.String())
}

func formatCount(n int64, unit Unit) string {
	if unit == UnitBytes {
		return humanize.Bytes(n)
	}
	return fmt.Sprintf("%d %s", n, unit)
}
