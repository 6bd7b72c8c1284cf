package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

// fakeEmbedder charges the fake clock: its call k (0-based, over the
// session) takes slow*(20+2k) ms, and its first call compiles for 1 s
// (charged and counted).
type fakeEmbedder struct {
	clk      *fakeClock
	slow     float64
	counters Counters
	calls    int
	inputs   [][][]int
	// cancel, when set, is called at call number cancelAt (1-based).
	cancel   func()
	cancelAt int
}

func (f *fakeEmbedder) Embed(inputs [][]int) error {
	k := f.calls
	f.calls++
	if f.cancel != nil && f.calls == f.cancelAt {
		f.cancel()
	}
	f.inputs = append(f.inputs, inputs)
	if k == 0 {
		f.clk.Advance(time.Second)
		f.counters.Compile += time.Second
		f.counters.Misses++
	} else {
		f.counters.Hits++
	}
	f.clk.Advance(msd(f.slow * float64(20+2*k)))
	return nil
}

// embedModel wraps embedders per mode; Load and Open charge the clock too.
func embedModel(clk *fakeClock, embedders map[string]*fakeEmbedder) func() (*EmbedTarget, error) {
	return func() (*EmbedTarget, error) {
		clk.Advance(2 * time.Second)
		return &EmbedTarget{VocabSize: 50, MaxPositions: 16, Special: []int{0, 1, 2},
			Open: func(mode string) (*EmbedSession, error) {
				clk.Advance(250 * time.Millisecond)
				e := embedders[mode]
				return &EmbedSession{Embedder: e, Counters: func() Counters { return e.counters }}, nil
			}}, nil
	}
}

func TestEmbedFiguresFromMeasuredTimes(t *testing.T) {
	clk := newClock()
	embedders := map[string]*fakeEmbedder{ModeEager: {clk: clk, slow: 3}, ModeCompiled: {clk: clk, slow: 1}}
	var progress []Progress
	cfg := Config{Repeat: 3, Warmup: 1, Now: clk.Now, OnProgress: func(p Progress) { progress = append(progress, p) }}
	rows, err := Embed(context.Background(), cfg, EmbedSpec{
		Modes: []string{ModeEager, ModeCompiled},
		Cases: []EmbedCase{{Batch: 2, InputLen: 4}},
		Load:  embedModel(clk, embedders),
	})
	require.NoError(t, err)
	require.Len(t, rows, 2)

	c := rows[1]
	assert.Equal(t, TaskEmbed, c.Task)
	assert.Equal(t, ModeCompiled, c.Mode)
	assert.Equal(t, "compiled b2 p4", c.Label())
	assert.Equal(t, []int{2, 4, 0, 3, 1}, []int{c.Batch, c.PromptLen, c.GenLen, c.Repeat, c.Warmup})
	near(t, 2.25, c.LoadS, "load = checkpoint 2 s + runner 0.25 s")
	near(t, 1, c.CompileS, "compile of the first call")
	near(t, 1.02, c.FirstRunS, "first call: 1 s compile + 20 ms")
	// 5 calls: 1 miss, 4 hits.
	assert.Equal(t, []int{4, 1, 0}, []int{c.CacheHits, c.CacheMisses, c.Recompiles})
	// Measured calls 2, 3, 4: 24, 26, 28 ms.
	assert.Equal(t, &Stat{Median: 26, Min: 24, Max: 28, Stddev: 2, N: 3}, roundStat(c.EmbedMs))
	// 2 inputs × 4 tokens per call.
	assert.Equal(t, 3, c.EmbedTokS.N)
	near(t, 8/0.026, c.EmbedTokS.Median, "embed tok/s median")
	near(t, 8/0.028, c.EmbedTokS.Min, "embed tok/s min")
	near(t, 8/0.024, c.EmbedTokS.Max, "embed tok/s max")
	for _, s := range []*Stat{c.PrefillTokS, c.DecodeTokS, c.TTFTMs, c.ITLMs, c.StepS, c.ImageS} {
		assert.Nil(t, s, "other tasks' figures")
	}
	assert.Nil(t, c.DecodeTokSAggregate)
	assert.Nil(t, c.PrefillSpeedupVsEager)

	// Eager: 3 times as long at every call: 72, 78, 84 ms.
	e := rows[0]
	assert.Equal(t, "eager b2 p4", e.Label())
	assert.Equal(t, &Stat{Median: 78, Min: 72, Max: 84, Stddev: 6, N: 3}, roundStat(e.EmbedMs))
	near(t, 8/0.078, e.EmbedTokS.Median, "eager embed tok/s")
	assert.Nil(t, e.SpeedupVsEager)
	near(t, 3, *c.SpeedupVsEager, "speed-up: eager median ms / compiled median ms")

	// One call per run, on exactly Batch inputs of InputLen ids without
	// special ids, rows different, the same inputs every run.
	f := embedders[ModeCompiled]
	assert.Equal(t, 5, f.calls)
	for _, in := range f.inputs {
		assert.Equal(t, f.inputs[0], in)
		require.Len(t, in, 2)
		assert.NotEqual(t, in[0], in[1], "rows differ")
		for _, p := range in {
			require.Len(t, p, 4)
			for _, id := range p {
				assert.True(t, id >= 3 && id < 50, "id %d", id)
			}
		}
	}

	// Progress: load, the modes' preparation, per row first/warmup/measure
	// runs of one call each, then done.
	assert.Equal(t, Progress{Phase: PhaseLoad}, progress[0])
	var phases []string
	for _, p := range progress {
		if p.Label == c.Label() && p.Step == 0 {
			phases = append(phases, p.Phase)
		}
		if p.Label == c.Label() && p.Step > 0 {
			assert.Equal(t, []int{1, 1, 5}, []int{p.Step, p.Steps, p.Runs})
		}
	}
	assert.Equal(t, []string{PhaseFirst, PhaseWarmup, PhaseMeasure, PhaseMeasure, PhaseMeasure, PhaseDone}, phases)
	assert.Contains(t, progress, Progress{Phase: PhaseLoad, Label: ModeCompiled})
	last := progress[len(progress)-1]
	assert.Equal(t, PhaseDone, last.Phase)
	assert.Same(t, &rows[1], last.Row)
}

// roundStat rounds a Stat's figures to 1e-9 for exact comparison.
func roundStat(s *Stat) *Stat {
	if s == nil {
		return nil
	}
	r := func(v float64) float64 { return float64(int64(v*1e9+0.5)) / 1e9 }
	return &Stat{Median: r(s.Median), Min: r(s.Min), Max: r(s.Max), Stddev: r(s.Stddev), N: s.N}
}

func TestEmbedSeveralCasesShareTheSession(t *testing.T) {
	clk := newClock()
	f := &fakeEmbedder{clk: clk, slow: 1}
	opens, closes := 0, 0
	rows, err := Embed(context.Background(), Config{Repeat: 1, Now: clk.Now}, EmbedSpec{
		Modes: []string{ModeCompiled}, Cases: EmbedCases([]int{1, 3}, []int{5, 7}),
		Load: func() (*EmbedTarget, error) {
			return &EmbedTarget{VocabSize: 50, Open: func(string) (*EmbedSession, error) {
				opens++
				return &EmbedSession{Embedder: f, Close: func() { closes++ }}, nil
			}}, nil
		}})
	require.NoError(t, err)
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label())
		assert.Equal(t, 1, r.EmbedMs.N)
		assert.Zero(t, r.CacheMisses, "no counters: zeros")
	}
	assert.Equal(t, []string{"compiled b1 p5", "compiled b1 p7", "compiled b3 p5", "compiled b3 p7"}, labels)
	assert.Equal(t, []int{1, 1}, []int{opens, closes})
	assert.Equal(t, 8, f.calls, "a first and a measured call per case")
	assert.Len(t, f.inputs[7], 3)
	assert.Len(t, f.inputs[7][0], 7)
}

func TestEmbedUsageErrors(t *testing.T) {
	clk := newClock()
	load := embedModel(clk, map[string]*fakeEmbedder{ModeCompiled: {clk: clk, slow: 1}})
	ok := EmbedSpec{Modes: []string{ModeCompiled}, Cases: []EmbedCase{{1, 4}}, Load: load}
	for name, tc := range map[string]struct {
		cfg  Config
		spec func(EmbedSpec) EmbedSpec
		msg  string
	}{
		"repeat":   {Config{Repeat: 0}, func(s EmbedSpec) EmbedSpec { return s }, "Config.Repeat 0"},
		"mode":     {Config{Repeat: 1}, func(s EmbedSpec) EmbedSpec { s.Modes = []string{"foo"}; return s }, `Modes "foo"`},
		"no case":  {Config{Repeat: 1}, func(s EmbedSpec) EmbedSpec { s.Cases = nil; return s }, "no batch and shape"},
		"batch":    {Config{Repeat: 1}, func(s EmbedSpec) EmbedSpec { s.Cases = []EmbedCase{{0, 4}}; return s }, "EmbedCase.Batch 0"},
		"input":    {Config{Repeat: 1}, func(s EmbedSpec) EmbedSpec { s.Cases = []EmbedCase{{1, 0}}; return s }, "EmbedCase.InputLen 0"},
		"position": {Config{Repeat: 1}, func(s EmbedSpec) EmbedSpec { s.Cases = []EmbedCase{{1, 4}, {1, 17}}; return s }, "EmbedCase.InputLen 17: exceeds the model's 16 positions"},
	} {
		_, err := Embed(context.Background(), tc.cfg, tc.spec(ok))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, errs.ErrUsage, name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

// TestEmbedValidateRunsFirst: every case is validated before any runs, and
// the target's error comes back as it is.
func TestEmbedValidateRunsFirst(t *testing.T) {
	clk := newClock()
	f := &fakeEmbedder{clk: clk, slow: 1}
	tooBig := errs.Usagef("too big")
	var seen []EmbedCase
	closed := false
	_, err := Embed(context.Background(), Config{Repeat: 1, Now: clk.Now}, EmbedSpec{
		Modes: []string{ModeEager}, Cases: EmbedCases([]int{1, 64}, []int{4}),
		Load: func() (*EmbedTarget, error) {
			return &EmbedTarget{VocabSize: 50,
				Validate: func(c EmbedCase) error {
					seen = append(seen, c)
					if c.Batch > 8 {
						return tooBig
					}
					return nil
				},
				Open:  func(string) (*EmbedSession, error) { return &EmbedSession{Embedder: f}, nil },
				Close: func() { closed = true }}, nil
		}})
	assert.Same(t, tooBig, err)
	assert.Equal(t, []EmbedCase{{1, 4}, {64, 4}}, seen)
	assert.Zero(t, f.calls)
	assert.True(t, closed, "the model is released")
}

type errEmbedder struct{ err error }

func (e errEmbedder) Embed([][]int) error { return e.err }

func TestEmbedErrorsAndInterruption(t *testing.T) {
	boom := errors.New("boom")
	_, err := Embed(context.Background(), Config{Repeat: 1}, EmbedSpec{
		Modes: []string{ModeEager}, Cases: []EmbedCase{{1, 2}},
		Load: func() (*EmbedTarget, error) {
			return &EmbedTarget{VocabSize: 50, Open: func(string) (*EmbedSession, error) { return &EmbedSession{Embedder: errEmbedder{boom}}, nil }}, nil
		}})
	assert.ErrorIs(t, err, boom)
	assert.EqualError(t, err, "eager b1 p2: boom")

	_, err = Embed(context.Background(), Config{Repeat: 1}, EmbedSpec{
		Modes: []string{ModeCompiled}, Cases: []EmbedCase{{1, 2}},
		Load: func() (*EmbedTarget, error) {
			return &EmbedTarget{VocabSize: 50, Open: func(string) (*EmbedSession, error) { return nil, boom }}, nil
		}})
	assert.EqualError(t, err, "compiled mode: boom")

	// Cancelled during the second case's first call: the first case's row
	// comes back with the interruption.
	clk := newClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeEmbedder{clk: clk, slow: 1, cancel: cancel, cancelAt: 3}
	rows, err := Embed(ctx, Config{Repeat: 1, Now: clk.Now}, EmbedSpec{
		Modes: []string{ModeCompiled, ModeEager}, Cases: []EmbedCase{{1, 2}, {2, 2}},
		Load: func() (*EmbedTarget, error) {
			return &EmbedTarget{VocabSize: 50, Open: func(string) (*EmbedSession, error) { return &EmbedSession{Embedder: f}, nil }}, nil
		}})
	assert.ErrorIs(t, err, errs.ErrInterrupted)
	require.Len(t, rows, 1)
	assert.Equal(t, "compiled b1 p2", rows[0].Label())
}

func embedReport() *Report {
	h := Header{TputoolVersion: "1.2.3", Device: "cpu (go, 1 device)", Backend: "go", DType: "float32", Model: "./bert",
		Task: TaskEmbed, Date: "2026-01-02T03:04:05Z", Host: Host{OS: "linux", Arch: "amd64", Cores: 2}, Repeat: 3, Warmup: 1,
		Call: "embed", Pooling: "mean"}
	rows := []Row{
		{Task: TaskEmbed, Mode: ModeEager, Batch: 8, Shape: "p128", PromptLen: 128, Repeat: 3, Warmup: 1,
			LoadS: 0.5, CompileS: 0.25, FirstRunS: 0.4, CacheHits: 12, CacheMisses: 3,
			EmbedTokS: &Stat{Median: 4096, Min: 4000, Max: 4200, Stddev: 100, N: 3}, EmbedMs: &Stat{Median: 250, Min: 240, Max: 256, Stddev: 8, N: 3}},
		{Task: TaskEmbed, Mode: ModeCompiled, Batch: 8, Shape: "p128", PromptLen: 128, Repeat: 3, Warmup: 1,
			LoadS: 0.5, CompileS: 0.75, FirstRunS: 0.9, CacheHits: 4, CacheMisses: 1,
			EmbedTokS: &Stat{Median: 8192, Min: 8192, Max: 8192, N: 3}, EmbedMs: &Stat{Median: 125, Min: 125, Max: 125, N: 3}},
	}
	setSpeedups(rows)
	return NewReport(h, rows)
}

func TestEmbedTableCSVAndJSON(t *testing.T) {
	rep := embedReport()
	near(t, 2, *rep.Rows[1].SpeedupVsEager, "250 ms / 125 ms")

	header, cells := Table(rep.Rows)
	assert.Equal(t, []string{"mode", "batch", "shape", "load s", "compile s", "hits/misses", "embed tok/s", "embed ms", "compiled vs eager"}, header)
	assert.Equal(t, []string{"eager", "8", "p128", "0.5", "0.25", "12/3", "4096.0 ± 100.0", "250.0 ± 8.00", "-"}, cells[0])
	assert.Equal(t, []string{"compiled", "8", "p128", "0.5", "0.75", "4/1", "8192.0 ± 0", "125.0 ± 0", "2.00x"}, cells[1])
	line := HeaderLine(rep.Header)
	assert.Contains(t, line, "| embed ./bert |")
	assert.Contains(t, line, "dtype float32, call embed, pooling mean |")

	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, rep))
	recs, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	col := map[string]int{}
	for i, n := range recs[0] {
		col[n] = i
	}
	assert.Len(t, col, len(recs[0]), "column names are unique")
	c := recs[2]
	assert.Equal(t, []string{"embed", "compiled", "8", "p128", "128", ""}, []string{c[col["task"]], c[col["mode"]], c[col["batch"]],
		c[col["shape"]], c[col["prompt_len"]], c[col["gen_len"]]})
	assert.Equal(t, []string{"8192", "125", "3", "2"}, []string{c[col["embed_tok_s_median"]], c[col["embed_ms_median"]],
		c[col["embed_ms_n"]], c[col["speedup_vs_eager"]]})
	assert.Equal(t, "256", recs[1][col["embed_ms_max"]])
	assert.Equal(t, "", c[col["itl_ms_median"]])

	b.Reset()
	require.NoError(t, WriteJSON(&b, rep, false))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &raw))
	h := raw["header"].(map[string]any)
	assert.Equal(t, "embed", h["call"])
	assert.Equal(t, "mean", h["pooling"])
	assert.EqualValues(t, 1, raw["schema_version"])
	row := raw["rows"].([]any)[1].(map[string]any)
	assert.Equal(t, map[string]any{"median": 125.0, "min": 125.0, "max": 125.0, "stddev": 0.0, "n": 3.0}, row["embed_ms"])
	for _, k := range []string{"task", "mode", "batch", "shape", "prompt_len", "load_s", "compile_s", "first_run_s",
		"cache_hits", "cache_misses", "recompiles", "embed_tok_s", "embed_ms", "speedup_vs_eager"} {
		assert.Contains(t, row, k)
	}
	for _, k := range []string{"gen_len", "prefill_tok_s", "decode_tok_s", "decode_tok_s_aggregate", "ttft_ms", "itl_ms",
		"prefill_speedup_vs_eager", "step_s", "image_s", "steps", "width", "height"} {
		assert.NotContains(t, row, k, "other tasks' fields are absent from embed rows")
	}
	got, err := ReadReport(&b, "embed.json")
	require.NoError(t, err)
	assert.Equal(t, rep, got)

	// Generate rows carry no embed fields.
	b.Reset()
	require.NoError(t, WriteJSON(&b, sampleReport(), false))
	assert.NotContains(t, b.String(), "embed")
	assert.NotContains(t, b.String(), `"call"`)
}

func TestCompareEmbedRows(t *testing.T) {
	old, nw := embedReport(), embedReport()
	nw.Rows[1].EmbedTokS = &Stat{Median: 10240, N: 3}
	nw.Rows[1].EmbedMs = &Stat{Median: 100, N: 3}
	c := Compare(old, nw)
	require.Len(t, c.Rows, 2)
	byName := map[string]Ratio{}
	for _, r := range c.Rows[1].Ratios {
		byName[r.Metric] = r
	}
	assert.Equal(t, Ratio{Metric: "embed_tok_s", Old: 8192, New: 10240, Ratio: 1.25, Direction: "higher", Verdict: Better}, byName["embed_tok_s"])
	assert.Equal(t, Ratio{Metric: "embed_ms", Old: 125, New: 100, Ratio: 0.8, Direction: "lower", Verdict: Better}, byName["embed_ms"])
	assert.NotContains(t, byName, "itl_ms")

	header, cells := c.Table()
	assert.Equal(t, []string{"task", "mode", "batch", "shape", "embed tok/s ↑", "embed ms ↓", "compile s ↓", "load s ↓", "note"}, header)
	assert.Equal(t, []string{"embed", "compiled", "8", "p128", "1.250x better", "0.800x better", "1.000x same", "1.000x same", ""}, cells[1])
}
