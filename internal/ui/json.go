package ui

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// jsonPrinter is the Printer for machines (--json): one JSON object per
// line, each with a "type": "log" (level, message), "progress" (task,
// unit, current, total, percent, done, elapsed_s) or the type of an event.
type jsonPrinter struct {
	w        io.Writer
	interval time.Duration
	mu       sync.Mutex
}

// NewJSONPrinter returns the NDJSON printer on w; progress events of one
// task come at most once per interval, plus the first and the last.
func NewJSONPrinter(w io.Writer, interval time.Duration) Printer {
	return &jsonPrinter{w: w, interval: interval}
}

func (p *jsonPrinter) write(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.w.Write(append(b, '\n'))
}

// Log writes {"type":"log","level":...,"message":...}.
func (p *jsonPrinter) Log(level Level, msg string) {
	p.write(map[string]any{"type": "log", "level": level.String(), "message": msg})
}

// Event writes the fields with "type": typ; the text line is not used.
func (p *jsonPrinter) Event(typ, text string, fields map[string]any) {
	ev := map[string]any{"type": typ}
	for k, v := range fields {
		ev[k] = v
	}
	p.write(ev)
}

// StartTask writes the task's first progress event.
func (p *jsonPrinter) StartTask(s TaskStatus) TaskPrinter {
	t := &jsonTask{p: p, th: throttle{interval: p.interval}}
	t.write(s, true)
	return t
}

type jsonTask struct {
	p  *jsonPrinter
	th throttle
}

func (t *jsonTask) Update(s TaskStatus) { t.write(s, false) }
func (t *jsonTask) Done(s TaskStatus)   { t.write(s, true) }

func (t *jsonTask) write(s TaskStatus, force bool) {
	if !t.th.due(s.Now, force) {
		return
	}
	ev := map[string]any{"type": "progress", "task": s.Name, "unit": string(s.Unit), "current": s.Current, "done": s.Done,
		"elapsed_s": s.Elapsed().Seconds()}
	if s.Total > 0 {
		ev["total"] = s.Total
		ev["percent"] = float64(s.Current) * 100 / float64(s.Total)
	}
	t.p.write(ev)
}
