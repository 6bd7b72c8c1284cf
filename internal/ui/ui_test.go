package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestChooseMode(t *testing.T) {
	s, _, _, _ := Test()
	assert.Equal(t, ModePlain, ChooseMode(s, ReporterOptions{}))
	s.SetStderrTTY(true)
	assert.Equal(t, ModeBar, ChooseMode(s, ReporterOptions{}))
	assert.Equal(t, ModePlain, ChooseMode(s, ReporterOptions{NoProgress: true}))
	assert.Equal(t, ModeJSON, ChooseMode(s, ReporterOptions{JSON: true}))
	assert.Equal(t, ModeQuiet, ChooseMode(s, ReporterOptions{Quiet: true, JSON: true}))
}

func TestPlainProgressIsThrottled(t *testing.T) {
	s, _, out, errOut := Test()
	clk := &fakeClock{t: time.Unix(0, 0)}
	r := NewReporter(s, ReporterOptions{Now: clk.now})
	task := r.Start("denoise", 40, UnitSteps)
	for i := 1; i <= 40; i++ {
		clk.advance(500 * time.Millisecond) // 20 s in all: a line every 5 s
		task.Set(int64(i))
	}
	task.Done()
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	assert.Equal(t, "denoise:   0% (0 steps/40 steps)", lines[0])
	assert.Len(t, lines, 1+4+1, "start, one line per 5 s, final: %q", lines)
	assert.Equal(t, "denoise: 100% (40 steps/40 steps) done in 20s", lines[len(lines)-1])
	assert.Empty(t, out.String(), "progress never goes to stdout")
	assert.NotContains(t, errOut.String(), "\x1b", "no ANSI codes off a terminal")
}

func TestJSONProgressAndLogs(t *testing.T) {
	s, _, out, errOut := Test()
	clk := &fakeClock{t: time.Unix(0, 0)}
	r := NewReporter(s, ReporterOptions{JSON: true, Now: clk.now, PlainInterval: time.Second})
	task := r.Start("model.safetensors", 2048, UnitBytes)
	clk.advance(2 * time.Second)
	task.Set(1024)
	task.Done()
	r.Warnf("offline: using cached snapshot %s", "abc")
	r.Infof("hello")
	r.Debugf("not shown without --verbose")
	var events []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		events = append(events, ev)
	}
	require.Len(t, events, 5)
	assert.Equal(t, "progress", events[0]["type"])
	assert.Equal(t, 50.0, events[1]["percent"])
	assert.Equal(t, true, events[2]["done"])
	assert.Equal(t, map[string]any{"type": "log", "level": "warning", "message": "offline: using cached snapshot abc"}, events[3])
	assert.Equal(t, "info", events[4]["level"])
	assert.Empty(t, out.String())
}

func TestQuietKeepsWarnings(t *testing.T) {
	s, _, _, errOut := Test()
	r := NewReporter(s, ReporterOptions{Quiet: true, Verbose: true})
	r.Start("x", 3, UnitItems).Done()
	r.Infof("info")
	r.Debugf("debug")
	r.Warnf("careful")
	assert.Equal(t, "warning: careful\n", errOut.String())
}

func TestColourOnlyWhenEnabled(t *testing.T) {
	s, _, _, errOut := Test()
	s.SetStderrTTY(true)
	s.SetColorEnabled(true)
	NewReporter(s, ReporterOptions{NoProgress: true}).Warnf("w")
	assert.Contains(t, errOut.String(), "\x1b[33mwarning: \x1b[0mw")
}

func TestBarWritesToStderrOnly(t *testing.T) {
	s, _, out, errOut := Test()
	s.SetStderrTTY(true)
	r := NewReporter(s, ReporterOptions{})
	require.Equal(t, ModeBar, r.Mode())
	task := r.Start("download", 100, UnitBytes)
	task.Set(100)
	task.Done()
	assert.Empty(t, out.String())
	assert.NotEmpty(t, errOut.String())
}

func TestTableAndJSON(t *testing.T) {
	s, _, out, _ := Test()
	tbl := s.NewTable("NAME", "BACKEND")
	tbl.Append("cpu", "go")
	require.NoError(t, tbl.Render())
	assert.Contains(t, out.String(), "| cpu  | go      |")
	assert.NotContains(t, out.String(), "─")

	out.Reset()
	s.SetStdoutTTY(true)
	tbl = s.NewTable("NAME", "BACKEND")
	tbl.Append("cpu", "go")
	require.NoError(t, tbl.Render())
	assert.Contains(t, out.String(), "│ cpu  │ go      │")

	out.Reset()
	require.NoError(t, s.WriteJSON(map[string]int{"a": 1}))
	assert.Equal(t, "{\n  \"a\": 1\n}\n", out.String())
	out.Reset()
	s.SetStdoutTTY(false)
	require.NoError(t, s.WriteJSON(map[string]string{"html": "<b>"}))
	assert.Equal(t, "{\"html\":\"<b>\"}\n", out.String())

	var md bytes.Buffer
	require.NoError(t, MarkdownTable(&md, []string{"a", "b"}, [][]string{{"1", "2"}}))
	assert.Contains(t, md.String(), "| 1 | 2 |")
}

// recorder is a third printer, as a server's access log would be: it sees
// every operation the commands call, already filtered by verbosity.
type recorder struct {
	lines []string
}

func (p *recorder) Log(level Level, msg string) { p.lines = append(p.lines, level.String()+" "+msg) }
func (p *recorder) Event(typ, text string, fields map[string]any) {
	p.lines = append(p.lines, "event "+typ+" "+text)
}
func (p *recorder) StartTask(s TaskStatus) TaskPrinter {
	p.lines = append(p.lines, "start "+s.Name)
	return p
}
func (p *recorder) Update(s TaskStatus) {
	p.lines = append(p.lines, fmt.Sprintf("update %d/%d after %s", s.Current, s.Total, s.Elapsed()))
}
func (p *recorder) Done(s TaskStatus) { p.lines = append(p.lines, fmt.Sprintf("done %v", s.Done)) }

func TestReporterWithAnotherPrinter(t *testing.T) {
	s, _, out, errOut := Test()
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := &recorder{}
	r := NewReporter(s, ReporterOptions{Printer: p, Now: clk.now})
	task := r.Start("load", 4, UnitItems)
	clk.advance(time.Second)
	task.Add(2)
	task.Done()
	task.Done()
	r.Infof("n=%d", 1)
	r.Debugf("hidden without --verbose")
	r.Warnf("w")
	r.Event("summary", "all done", map[string]any{"n": 1})
	assert.Equal(t, []string{"start load", "update 2/4 after 1s", "done true", "info n=1", "warning w", "event summary all done"}, p.lines)
	assert.Empty(t, out.String())
	assert.Empty(t, errOut.String(), "the chosen printer replaces the text printer")
}

func TestTextEventLines(t *testing.T) {
	s, _, _, errOut := Test()
	r := NewReporter(s, ReporterOptions{})
	r.Event("bench_row", "row 1", map[string]any{"row": 1})
	r.Event("bench_row", "", nil)
	assert.Equal(t, "row 1\n", errOut.String())
	errOut.Reset()
	NewReporter(s, ReporterOptions{Quiet: true}).Event("bench_row", "row 1", nil)
	assert.Empty(t, errOut.String())
	errOut.Reset()
	NewReporter(s, ReporterOptions{JSON: true}).Event("bench_row", "row 1", map[string]any{"row": 1})
	assert.Equal(t, "{\"row\":1,\"type\":\"bench_row\"}\n", errOut.String())
}

func TestDumbTerminalGetsNoBars(t *testing.T) {
	io, _, _, _ := Test()
	io.SetStderrTTY(true)
	if m := ChooseMode(io, ReporterOptions{}); m != ModeBar {
		t.Fatalf("a terminal: mode %v, want bars", m)
	}
	io.SetDumbTerminal(true)
	if m := ChooseMode(io, ReporterOptions{}); m != ModePlain {
		t.Errorf("TERM=dumb: mode %v, want plain lines", m)
	}
	sys := System(func(k string) string {
		if k == "TERM" {
			return "dumb"
		}
		return ""
	})
	if !sys.IsDumbTerminal() || sys.ColorEnabled() {
		t.Errorf("System with TERM=dumb: dumb %v, colour %v", sys.IsDumbTerminal(), sys.ColorEnabled())
	}
}
