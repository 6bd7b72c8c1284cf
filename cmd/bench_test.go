package cmd

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/bench"
	"github.com/tputool/tputool/pipeline/testkit/sdckpt"
	"github.com/tputool/tputool/tpu"
)

// tickClock advances by one millisecond at every reading, so each figure
// bench measures between two consecutive readings is exactly 1 ms.
type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func benchEnv(t *testing.T) *testEnv {
	e := newTestFactory(t, nil)
	withFakeMachine(t, e, nil)
	e.f.Now = (&tickClock{t: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}).now
	return e
}

func TestBenchOptions(t *testing.T) {
	var got *BenchOptions
	e := benchEnv(t)
	c := NewCmdBench(e.f, func(_ context.Context, o *BenchOptions) error { got = o; return nil })
	c.SetArgs([]string{"-m", "org/name", "--batch", "1, 8,64", "--prompt-len", "128,512", "--mode", "compiled", "-r", "3", "--warmup", "0", "-o", "csv"})
	require.NoError(t, c.Execute())
	assert.Equal(t, []int{1, 8, 64}, got.Batches)
	assert.Equal(t, []int{128, 512}, got.PromptLens)
	assert.Equal(t, []int{128}, got.GenLens)
	assert.Equal(t, []compile.Mode{compile.Compiled}, got.Modes)
	assert.Equal(t, 3, got.Repeat)
	assert.Equal(t, 0, got.Warmup)
	assert.Equal(t, "csv", got.Format)
	assert.Equal(t, []string{"prompt-len"}, got.TaskFlags)
	assert.Nil(t, got.Compare)

	c = NewCmdBench(e.f, func(_ context.Context, o *BenchOptions) error { got = o; return nil })
	c.SetArgs([]string{"-m", "x/y", "--size", "512,640x384", "--steps", "1,4"})
	require.NoError(t, c.Execute())
	assert.Nil(t, got.Batches, "the task's default")
	assert.Equal(t, []compile.Mode{compile.Eager, compile.Compiled}, got.Modes)
	assert.Equal(t, [][2]int{{512, 512}, {640, 384}}, got.Sizes)
	assert.Equal(t, []int{1, 4}, got.Steps)
	assert.Equal(t, []int{512}, got.PromptLens)
	assert.Equal(t, 5, got.Repeat)
	assert.Equal(t, 1, got.Warmup)
	assert.Equal(t, "md", got.Format)

	c = NewCmdBench(e.f, func(_ context.Context, o *BenchOptions) error { got = o; return nil })
	c.SetArgs([]string{"--compare", "a.json", "b.jsonl"})
	require.NoError(t, c.Execute())
	assert.Equal(t, []string{"a.json", "b.jsonl"}, got.Compare)
}

func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bench"}, "--model is required"},
		{[]string{"bench", "-m", storiesDir, "--batch", "0"}, `--batch 0: "0" is not a positive integer`},
		{[]string{"bench", "-m", storiesDir, "--batch", "1,x"}, `"x" is not a positive integer`},
		{[]string{"bench", "-m", storiesDir, "--batch", "8,8"}, "8 is given twice"},
		{[]string{"bench", "-m", storiesDir, "--mode", "foo"}, `--mode foo: "foo" is not an execution mode`},
		{[]string{"bench", "-m", storiesDir, "--mode", "eager,eager"}, "eager is given twice"},
		{[]string{"bench", "-m", storiesDir, "--repeat", "0"}, "--repeat 0"},
		{[]string{"bench", "-m", storiesDir, "--warmup", "-1"}, "--warmup -1"},
		{[]string{"bench", "-m", storiesDir, "--gen-len", "0"}, "--gen-len 0"},
		{[]string{"bench", "-m", storiesDir, "--steps", "2000"}, "--steps 2000"},
		{[]string{"bench", "-m", storiesDir, "--size", "7x7"}, "between 8 and 8192"},
		{[]string{"bench", "-m", storiesDir, "--size", "big"}, `"big" is not WIDTHxHEIGHT`},
		{[]string{"bench", "-m", storiesDir, "--task", "train"}, `--task "train"`},
		{[]string{"bench", "-m", storiesDir, "--dtype", "f8"}, `--dtype "f8"`},
		{[]string{"bench", "-m", storiesDir, "-o", "xml"}, `-o "xml": want one of md, csv, json, jsonl`},
		{[]string{"bench", "-m", storiesDir, "--json", "-o", "csv"}, "--json and -o csv contradict"},
		{[]string{"bench", "-m", storiesDir, "extra"}, `unexpected argument "extra"`},
		{[]string{"bench", "-m", storiesDir, "--task", "generate", "--steps", "3"}, "--steps does not apply to --task generate"},
		{[]string{"bench", "-m", storiesDir, "--steps", "3"}, "--steps does not apply to --task generate"},
		{[]string{"bench", "-m", storiesDir, "--task", "diffuse"}, "--task diffuse does not fit"},
		{[]string{"bench", "-m", storiesDir, "--prompt-len", "500", "--gen-len", "100", "--mode", "compiled", "--batch", "1"}, "exceeds the model's 512 positions"},
		{[]string{"bench", "--compare", "a.json"}, "--compare takes two reports"},
		{[]string{"bench", "--compare", "a.json", "b.json", "-m", "x/y"}, "--model does not apply"},
		{[]string{"bench", "--compare", "missing-a.json", "missing-b.json"}, "missing-a.json"},
	} {
		e := benchEnv(t)
		code := e.run(tc.args...)
		assert.Equal(t, ExitUsage, code, "%v: %s", tc.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), tc.msg, "%v", tc.args)
		assert.Empty(t, e.out.String(), "%v", tc.args)
	}
}

// runBenchJSON runs bench on the stories checkpoint and decodes the report.
func runBenchJSON(t *testing.T, args ...string) (*bench.Report, *testEnv) {
	e := benchEnv(t)
	code := e.run(append([]string{"bench", "-m", storiesDir, "--json"}, args...)...)
	require.Equal(t, ExitOK, code, e.errOut.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &rep), e.out.String())
	return &rep, e
}

func TestBenchGenerateJSON(t *testing.T) {
	rep, e := runBenchJSON(t, "--batch", "1,2", "--prompt-len", "6", "--gen-len", "3", "--repeat", "2")
	assert.Equal(t, bench.SchemaVersion, rep.SchemaVersion)
	h := rep.Header
	assert.Equal(t, "1.2.3", h.TputoolVersion)
	assert.Equal(t, "v0.26.0", h.GoMLX)
	assert.Equal(t, "v0.1.4", h.GoXLA)
	assert.Equal(t, "cpu ("+tpu.DefaultCPUBackend+", 1 device)", h.Device)
	assert.Equal(t, tpu.DefaultCPUBackend, h.Backend)
	assert.Equal(t, "float32", h.DType)
	assert.Equal(t, storiesDir, h.Model)
	assert.Equal(t, "generate", h.Task, "inferred from the checkpoint")
	assert.Equal(t, int64(16384*1024), h.Host.MemoryBytes, "from the fake machine's meminfo")
	assert.Positive(t, h.Host.Cores)
	assert.Equal(t, []int{2, 1}, []int{h.Repeat, h.Warmup})
	assert.True(t, strings.HasPrefix(h.Date, "2026-12-02T12:00:00"), h.Date)

	require.Len(t, rep.Rows, 4)
	var labels []string
	for _, r := range rep.Rows {
		labels = append(labels, r.Label())
		// Every figure comes from two consecutive readings of the clock,
		// which advances 1 ms per reading.
		assert.Equal(t, 0.002, r.LoadS, "checkpoint + runner: 1 ms each")
		assert.Equal(t, &bench.Stat{Median: 1, Min: 1, Max: 1, N: 2}, r.TTFTMs)
		assert.Equal(t, &bench.Stat{Median: 1, Min: 1, Max: 1, N: 6}, r.ITLMs)
		assert.Equal(t, float64(r.Batch*6)/0.001, r.PrefillTokS.Median)
		assert.Equal(t, float64(r.Batch)/0.001, r.DecodeTokS.Median)
		assert.InDelta(t, float64(r.Batch)/0.001, *r.DecodeTokSAggregate, 1e-6)
		// The first run spans 4 readings of calls plus the progress
		// reporter's readings between them.
		assert.GreaterOrEqual(t, r.FirstRunS, 0.004)
		assert.Positive(t, r.CompileS, "compile time comes from the executables' own timer")
		assert.Positive(t, r.CacheMisses)
		assert.Zero(t, r.Recompiles)
		assert.Nil(t, r.StepS)
	}
	assert.Equal(t, []string{"eager b1 p6+g3", "eager b2 p6+g3", "compiled b1 p6+g3", "compiled b2 p6+g3"}, labels)
	assert.Equal(t, 3, rep.Rows[2].CacheMisses, "compiled: prefill, decode and the decode's argmax executables")
	assert.False(t, h.HostArgmax)
	assert.Empty(t, h.KVCacheDType+h.Quantize+h.Activations+h.Experts, "the executor's defaults are not named")
	assert.Zero(t, h.TP+h.DP)
	assert.Equal(t, 1.0, *rep.Rows[2].SpeedupVsEager)
	assert.Nil(t, rep.Rows[0].SpeedupVsEager)

	// --json: NDJSON events on stderr, one bench_row per row.
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(e.errOut.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		if ev["type"] == "bench_row" {
			rows++
		}
	}
	assert.Equal(t, 4, rows)

	// --host-argmax: each step's logits come back and their argmax is
	// taken here, so no argmax executable.
	rep, _ = runBenchJSON(t, "--batch", "1", "--prompt-len", "6", "--gen-len", "3", "--repeat", "1", "--mode", "compiled", "--host-argmax")
	assert.True(t, rep.Header.HostArgmax)
	require.Len(t, rep.Rows, 1)
	assert.Equal(t, 2, rep.Rows[0].CacheMisses, "compiled: prefill and decode executables")

	// The executor's settings that change what is measured are in the
	// header, JSON and text.
	rep, _ = runBenchJSON(t, "--batch", "1", "--prompt-len", "6", "--gen-len", "2", "--repeat", "1", "--mode", "compiled",
		"--kv-cache-dtype", "int8", "--quantize", "int8", "--activations", "bf16")
	assert.Equal(t, "int8", rep.Header.KVCacheDType)
	assert.Equal(t, "int8", rep.Header.Quantize)
	assert.Equal(t, "bf16", rep.Header.Activations)
	assert.Contains(t, bench.HeaderLine(rep.Header), "dtype float32, kv cache int8, quantize int8, activations bf16 |")
}

func TestBenchFormats(t *testing.T) {
	args := []string{"bench", "-m", storiesDir, "--batch", "1", "--prompt-len", "4", "--gen-len", "2", "--repeat", "2", "--warmup", "0"}

	// md, not a terminal: header line, a markdown table, plain progress
	// lines on stderr.
	e := benchEnv(t)
	require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
	out := e.out.String()
	assert.True(t, strings.HasPrefix(out, "tputool 1.2.3 (gomlx v0.26.0, go-xla v0.1.4) | generate "+storiesDir), out)
	assert.Regexp(t, `\n\| +mode +\| batch \|`, out)
	assert.Contains(t, out, "compiled vs eager")
	assert.Contains(t, out, "| compiled | 1     | p4+g2 |")
	assert.Contains(t, out, "1.00x")
	assert.NotContains(t, out, "│")
	stderr := e.errOut.String()
	assert.Contains(t, stderr, "loading "+storiesDir)
	assert.Contains(t, stderr, "eager b1 p4+g2: prefill 4000.0 tok/s, decode 1000.0 tok/s, TTFT 1.00 ms, ITL 1.00 ms")
	assert.NotContains(t, stderr, "\r")

	// md on a terminal: a box-drawn table and a progress bar.
	e = benchEnv(t)
	e.f.IOStreams.SetStdoutTTY(true)
	e.f.IOStreams.SetStderrTTY(true)
	require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
	assert.Contains(t, e.out.String(), "│ compiled")
	assert.Contains(t, e.errOut.String(), "\r", "a progress bar redraws in place")

	// csv
	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run(append(args, "-o", "csv")...), e.errOut.String())
	recs, err := csv.NewReader(strings.NewReader(e.out.String())).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	assert.Equal(t, bench.CSVHeader(), recs[0])
	assert.Equal(t, []string{"generate", "eager", "1", "p4+g2"}, recs[1][:4])

	// jsonl: a header line then one line per row, read back as a report.
	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run(append(args, "-o", "jsonl")...), e.errOut.String())
	lines := strings.Split(strings.TrimSpace(e.out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], `"type":"header"`)
	rep, err := bench.ReadReport(strings.NewReader(e.out.String()), "out.jsonl")
	require.NoError(t, err)
	assert.Len(t, rep.Rows, 2)

	// -o json is --json; compact when stdout is not a terminal.
	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run(append(args, "-o", "json", "--mode", "compiled", "--repeat", "1")...), e.errOut.String())
	assert.Equal(t, 1, strings.Count(e.out.String(), "\n"))
}

func TestBenchDiffuse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-sd")
	require.NoError(t, sdckpt.Generate(dir, sdckpt.TinySD()))
	e := benchEnv(t)
	code := e.run("bench", "-m", dir, "--json", "--steps", "2", "--size", "32x32", "--repeat", "2", "--warmup", "0")
	require.Equal(t, ExitOK, code, e.errOut.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &rep), e.out.String())
	assert.Equal(t, "diffuse", rep.Header.Task)
	assert.Equal(t, "float32", rep.Header.DType)
	require.Len(t, rep.Rows, 2)
	for _, r := range rep.Rows {
		assert.Equal(t, "32x32/2", r.Shape)
		assert.Equal(t, 1, r.Batch)
		// PNDM makes 3 UNet calls for 2 steps; s/step is per call.
		assert.Equal(t, 6, r.StepS.N, "3 calls × 2 measured runs")
		assert.Positive(t, r.StepS.Median)
		assert.Equal(t, 2, r.ImageS.N)
		assert.Positive(t, r.ImageS.Median)
		assert.Positive(t, r.CompileS)
		assert.Positive(t, r.CacheMisses)
		assert.Nil(t, r.TTFTMs)
	}
	assert.Equal(t, []string{"eager", "compiled"}, []string{rep.Rows[0].Mode, rep.Rows[1].Mode})
	assert.NotNil(t, rep.Rows[1].SpeedupVsEager)

	e = benchEnv(t)
	assert.Equal(t, ExitUsage, e.run("bench", "-m", dir, "--gen-len", "3"))
	assert.Contains(t, e.errOut.String(), "--gen-len does not apply to --task diffuse")
	e = benchEnv(t)
	assert.Equal(t, ExitUsage, e.run("bench", "-m", dir, "--host-argmax"))
	assert.Contains(t, e.errOut.String(), "--host-argmax does not apply to --task diffuse")
	for _, flag := range [][]string{{"--kv-cache-dtype", "int8"}, {"--experts", "host"}} {
		e = benchEnv(t)
		assert.Equal(t, ExitUsage, e.run(append([]string{"bench", "-m", dir}, flag...)...))
		assert.Contains(t, e.errOut.String(), flag[0]+" does not apply to --task diffuse")
	}
	e = benchEnv(t)
	assert.Equal(t, ExitUsage, e.run("bench", "-m", dir, "--size", "36x36", "--steps", "1", "--repeat", "1"))
	assert.Contains(t, e.errOut.String(), "multiples of")
	// Every case is checked before any runs, memory included (16 MiB on
	// the fake machine; as in diffuse).
	e = benchEnv(t)
	assert.Equal(t, ExitUsage, e.run("bench", "-m", dir, "--size", "32x32,8192x8192", "--steps", "1", "--repeat", "1"))
	assert.Contains(t, e.errOut.String(), "--size 8192x8192 --batch 1: the UNet's self-attention scores at 1024x1024 latents")
	assert.Contains(t, e.errOut.String(), "16.0 TiB, more than this machine's 16.0 MiB")
	assert.Empty(t, e.out.String())
}

func writeReport(t *testing.T, path string, rep *bench.Report, jsonl bool) {
	var b bytes.Buffer
	if jsonl {
		require.NoError(t, bench.WriteJSONL(&b, rep))
	} else {
		require.NoError(t, bench.WriteJSON(&b, rep, true))
	}
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

func TestBenchCompare(t *testing.T) {
	dir := t.TempDir()
	row := func(mode string, decode, itl float64) bench.Row {
		return bench.Row{Task: "generate", Mode: mode, Batch: 1, Shape: "p4+g2", LoadS: 1, CompileS: 2,
			PrefillTokS: &bench.Stat{Median: 100, N: 1}, DecodeTokS: &bench.Stat{Median: decode, N: 1},
			TTFTMs: &bench.Stat{Median: 10, N: 1}, ITLMs: &bench.Stat{Median: itl, N: 2}}
	}
	oldRep := bench.NewReport(bench.Header{TputoolVersion: "1.0.0", Task: "generate", Model: "m"}, []bench.Row{row("eager", 10, 100), row("compiled", 20, 50)})
	newRep := bench.NewReport(bench.Header{TputoolVersion: "1.1.0", Task: "generate", Model: "m"}, []bench.Row{row("compiled", 30, 40)})
	oldPath, newPath := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.jsonl")
	writeReport(t, oldPath, oldRep, false)
	writeReport(t, newPath, newRep, true)

	e := benchEnv(t)
	require.Equal(t, ExitOK, e.run("bench", "--compare", oldPath, newPath), e.errOut.String())
	out := e.out.String()
	assert.Contains(t, out, "old: "+oldPath+": tputool 1.0.0")
	assert.Contains(t, out, "new: "+newPath+": tputool 1.1.0")
	assert.Contains(t, out, "decode tok/s ↑")
	assert.Contains(t, out, "1.500x better")
	assert.Contains(t, out, "0.800x better")
	assert.Contains(t, out, "only in old")

	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run("bench", "--compare", oldPath, newPath, "--json"), e.errOut.String())
	var c bench.CompareReport
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &c))
	require.Len(t, c.Rows, 2)
	assert.Equal(t, bench.OldOnly, c.Rows[0].Status)
	assert.Equal(t, bench.InBoth, c.Rows[1].Status)

	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run("bench", "--compare", oldPath, newPath, "-o", "csv"), e.errOut.String())
	assert.True(t, strings.HasPrefix(e.out.String(), "task,mode,batch,shape,prefill tok/s ↑,"), e.out.String())

	// Not a report: a usage error naming the file.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"rows": []}`), 0o644))
	e = benchEnv(t)
	assert.Equal(t, ExitUsage, e.run("bench", "--compare", oldPath, bad))
	assert.Contains(t, e.errOut.String(), bad+": no schema_version")
}

// TestBenchDefaultsFitTheModel: the default 512 + 128 do not fit the
// stories model's 512 positions, so they are clamped with a note; lengths
// given explicitly are left for the check to refuse.
func TestBenchDefaultsFitTheModel(t *testing.T) {
	cfg, err := config.ReadModel(filepath.Join(storiesDir, "config.json"))
	require.NoError(t, err)
	m := &loader.Checkpoint{Config: cfg}
	for _, tc := range []struct {
		given        []string
		prompt, gen  []int
		wantP, wantG []int
		note         bool
	}{
		{nil, []int{512}, []int{128}, []int{384}, []int{128}, true},
		{[]string{"gen-len"}, []int{512}, []int{28}, []int{484}, []int{28}, true},
		{[]string{"prompt-len"}, []int{500}, []int{128}, []int{500}, []int{12}, true},
		{[]string{"prompt-len", "gen-len"}, []int{512}, []int{128}, []int{512}, []int{128}, false},
		{nil, []int{256}, []int{128}, []int{256}, []int{128}, false},
	} {
		e := genEnv(t)
		opts := &BenchOptions{TaskFlags: tc.given, PromptLens: tc.prompt, GenLens: tc.gen}
		clampBenchLens(opts, m, e.f.Reporter())
		assert.Equal(t, tc.wantP, opts.PromptLens, "%v", tc)
		assert.Equal(t, tc.wantG, opts.GenLens, "%v", tc)
		assert.Equal(t, tc.note, strings.Contains(e.errOut.String(), "note: the model has 512 positions"), e.errOut.String())
	}
}

// TestBenchCompareRefusesRunFlags: --compare reads two reports, so a flag
// that sets up a run is refused by name rather than ignored.
func TestBenchCompareRefusesRunFlags(t *testing.T) {
	for _, flag := range [][]string{{"--variant", "fp16"}, {"--kv-cache-dtype", "int8"}, {"--quantize", "int8"}, {"--activations", "int8"}, {"--experts", "host"}, {"--warmup", "2"}} {
		e := benchEnv(t)
		args := append([]string{"bench", "--compare", "old.json", "new.json"}, flag...)
		assert.Equal(t, ExitUsage, e.run(args...), "%v", flag)
		assert.Contains(t, e.errOut.String(), "--compare reads two reports; "+flag[0]+" does not apply")
	}
}
