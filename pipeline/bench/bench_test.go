package bench

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
)

// fakeClock only moves when a fake model advances it, so every measured
// duration is exactly what the fake charged.
type fakeClock struct{ t time.Time }

func newClock() *fakeClock                   { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func msd(v float64) time.Duration            { return time.Duration(v * float64(time.Millisecond)) }
func near(t *testing.T, want, got float64, what string) {
	t.Helper()
	assert.InDelta(t, want, got, 1e-9*math.Max(1, math.Abs(want)), what)
}

// fakeRunner is an Stepper that charges the fake clock: run k's prefill
// takes prefill(k), its decode step i takes decode(k, i), and the first
// call of each kind compiles (compile time charged and counted).
type fakeRunner struct {
	clk             *fakeClock
	vocab, eos      int
	prefill         func(run int) time.Duration
	decode          func(run, step int) time.Duration
	compilePrefill  time.Duration
	compileDecode   time.Duration
	recompileAtRun  int // a decode compile again at this run (0: never)
	counters        Counters
	run, step       int
	prefills        int
	decodesPerRun   []int
	prompts         [][][]int
	maxNew          []int
	decodeCompiled  bool
	prefillCompiled bool
}

func (f *fakeRunner) logits(batch int) [][]float32 {
	out := make([][]float32, batch)
	for i := range out {
		out[i] = make([]float32, f.vocab)
		out[i][f.eos] = 1 // the model always "wants" to stop
	}
	return out
}

func (f *fakeRunner) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	f.run = f.prefills
	f.prefills++
	f.step = 0
	f.prompts = append(f.prompts, prompts)
	f.maxNew = append(f.maxNew, maxNew)
	f.decodesPerRun = append(f.decodesPerRun, 0)
	if !f.prefillCompiled {
		f.prefillCompiled = true
		f.clk.Advance(f.compilePrefill)
		f.counters.Compile += f.compilePrefill
		f.counters.Misses++
	} else {
		f.counters.Hits++
	}
	f.clk.Advance(f.prefill(f.run))
	return f.logits(len(prompts)), nil
}

func (f *fakeRunner) Decode(next []int) ([][]float32, error) {
	if !f.decodeCompiled || (f.recompileAtRun > 0 && f.run == f.recompileAtRun && f.step == 0) {
		f.decodeCompiled = true
		f.clk.Advance(f.compileDecode)
		f.counters.Compile += f.compileDecode
		f.counters.Misses++
	} else {
		f.counters.Hits++
	}
	f.clk.Advance(f.decode(f.run, f.step))
	f.step++
	f.decodesPerRun[f.run]++
	return f.logits(len(next)), nil
}

// lmModel wraps runners per mode; Load and Open charge the clock too.
func lmModel(clk *fakeClock, runners map[string]*fakeRunner) func() (*Target, error) {
	return func() (*Target, error) {
		clk.Advance(2 * time.Second)
		return &Target{VocabSize: 50, MaxPositions: 64, Special: []int{0, 1, 2},
			Open: func(mode string) (*Session, error) {
				clk.Advance(250 * time.Millisecond)
				r := runners[mode]
				return &Session{Stepper: r, Counters: func() Counters { return r.counters }}, nil
			}}, nil
	}
}

func newFakeRunner(clk *fakeClock, slow float64) *fakeRunner {
	return &fakeRunner{clk: clk, vocab: 50, eos: 2,
		// Runs 0 and 1 are first and warm-up; measured runs 2, 3, 4 take
		// 100, 110 and 120 ms to prefill.
		prefill: func(run int) time.Duration { return msd(slow * float64(100+10*max(0, run-2))) },
		// Decode step i of run k: (10*(i+1) + k) ms.
		decode:         func(run, step int) time.Duration { return msd(slow * float64(10*(step+1)+run)) },
		compilePrefill: time.Second, compileDecode: 500 * time.Millisecond}
}

func TestGenerateFiguresFromMeasuredTimes(t *testing.T) {
	clk := newClock()
	runners := map[string]*fakeRunner{ModeEager: newFakeRunner(clk, 3), ModeCompiled: newFakeRunner(clk, 1)}
	var progress []Progress
	cfg := Config{Repeat: 3, Warmup: 1, Now: clk.Now, OnProgress: func(p Progress) { progress = append(progress, p) }}
	rows, err := Generate(context.Background(), cfg, GenerateSpec{
		Modes: []string{ModeEager, ModeCompiled},
		Cases: []GenerateCase{{Batch: 2, PromptLen: 4, GenLen: 3}},
		Load:  lmModel(clk, runners),
	})
	require.NoError(t, err)
	require.Len(t, rows, 2)

	c := rows[1]
	assert.Equal(t, TaskGenerate, c.Task)
	assert.Equal(t, ModeCompiled, c.Mode)
	assert.Equal(t, 2, c.Batch)
	assert.Equal(t, "p4+g3", c.Shape)
	assert.Equal(t, []int{4, 3, 3, 1}, []int{c.PromptLen, c.GenLen, c.Repeat, c.Warmup})
	near(t, 2.25, c.LoadS, "load = checkpoint 2 s + runner 0.25 s")
	near(t, 1.5, c.CompileS, "compile of the first run")
	// First run: 1 s + 100 ms prefill, 0.5 s + 10 + 20 + 30 ms decode.
	near(t, 1.66, c.FirstRunS, "first run wall time")
	// 5 runs of 1 prefill + 3 decodes: 2 misses, 18 hits.
	assert.Equal(t, []int{18, 2, 0}, []int{c.CacheHits, c.CacheMisses, c.Recompiles})

	// TTFT over the measured runs: 100, 110, 120 ms.
	assert.Equal(t, 3, c.TTFTMs.N)
	near(t, 110, c.TTFTMs.Median, "ttft median")
	near(t, 100, c.TTFTMs.Min, "ttft min")
	near(t, 120, c.TTFTMs.Max, "ttft max")
	near(t, 10, c.TTFTMs.Stddev, "ttft stddev")
	// Prefill: 2 rows × 4 tokens per TTFT.
	near(t, 8/0.110, c.PrefillTokS.Median, "prefill tok/s median")
	near(t, 8/0.120, c.PrefillTokS.Min, "prefill tok/s min")
	near(t, 8/0.100, c.PrefillTokS.Max, "prefill tok/s max")
	// ITL pooled: runs 2..4 take 12/22/32, 13/23/33, 14/24/34 ms.
	assert.Equal(t, 9, c.ITLMs.N)
	near(t, 23, c.ITLMs.Median, "itl median")
	near(t, 12, c.ITLMs.Min, "itl min")
	near(t, 34, c.ITLMs.Max, "itl max")
	itl := []float64{12, 22, 32, 13, 23, 33, 14, 24, 34}
	mean := 23.0
	ss := 0.0
	for _, v := range itl {
		ss += (v - mean) * (v - mean)
	}
	near(t, math.Sqrt(ss/8), c.ITLMs.Stddev, "itl stddev")
	// Decode tok/s per run: batch / that run's median ITL (22, 23, 24 ms).
	near(t, 2/0.023, c.DecodeTokS.Median, "decode tok/s median")
	near(t, 2/0.024, c.DecodeTokS.Min, "decode tok/s min")
	near(t, 2/0.022, c.DecodeTokS.Max, "decode tok/s max")
	// Aggregate: 2 × 3 × 3 tokens over 207 ms of decode steps.
	near(t, 18/0.207, *c.DecodeTokSAggregate, "aggregate decode tok/s")
	assert.Nil(t, c.StepS)
	assert.Nil(t, c.ImageS)

	// The eager runner takes three times as long at every call.
	e := rows[0]
	near(t, 330, e.TTFTMs.Median, "eager ttft")
	near(t, 69, e.ITLMs.Median, "eager itl")
	assert.Nil(t, e.SpeedupVsEager)
	near(t, 3, *c.SpeedupVsEager, "speed-up")
	near(t, 3, *c.PrefillSpeedupVsEager, "prefill speed-up")

	// Exactly GenLen decode steps per run although every token is EOS,
	// prompts of exactly PromptLen ids without special ids, the same
	// prompts every run, and the cache sized for GenLen more tokens.
	r := runners[ModeCompiled]
	assert.Equal(t, []int{3, 3, 3, 3, 3}, r.decodesPerRun)
	assert.Equal(t, []int{3, 3, 3, 3, 3}, r.maxNew)
	for _, ps := range r.prompts {
		assert.Equal(t, r.prompts[0], ps)
		require.Len(t, ps, 2)
		assert.NotEqual(t, ps[0], ps[1], "rows differ")
		for _, p := range ps {
			require.Len(t, p, 4)
			for _, id := range p {
				assert.True(t, id >= 3 && id < 50, "id %d", id)
			}
		}
	}

	// Progress: load, then per row first/warmup/measure runs, then done.
	assert.Equal(t, PhaseLoad, progress[0].Phase)
	var phases []string
	for _, p := range progress {
		if p.Label == c.Label() && p.Step == 0 {
			phases = append(phases, p.Phase)
		}
	}
	assert.Equal(t, []string{PhaseFirst, PhaseWarmup, PhaseMeasure, PhaseMeasure, PhaseMeasure, PhaseDone}, phases)
	last := progress[len(progress)-1]
	assert.Equal(t, PhaseDone, last.Phase)
	assert.Equal(t, "compiled b2 p4+g3", last.Label)
}

func TestGenerateRecompileIsCounted(t *testing.T) {
	clk := newClock()
	r := newFakeRunner(clk, 1)
	r.recompileAtRun = 3 // a measured run
	rows, err := Generate(context.Background(), Config{Repeat: 3, Warmup: 1, Now: clk.Now}, GenerateSpec{
		Modes: []string{ModeCompiled}, Cases: []GenerateCase{{Batch: 1, PromptLen: 2, GenLen: 2}},
		Load: lmModel(clk, map[string]*fakeRunner{ModeCompiled: r}),
	})
	require.NoError(t, err)
	assert.Equal(t, 1, rows[0].Recompiles)
	assert.Equal(t, 3, rows[0].CacheMisses)
	near(t, 1.5, rows[0].CompileS, "only the first run's compile")
}

func TestGenerateSeveralCasesShareTheRunner(t *testing.T) {
	clk := newClock()
	r := newFakeRunner(clk, 1)
	opens := 0
	load := func() (*Target, error) {
		return &Target{VocabSize: 50, Open: func(string) (*Session, error) {
			opens++
			return &Session{Stepper: r}, nil
		}}, nil
	}
	rows, err := Generate(context.Background(), Config{Repeat: 1, Now: clk.Now}, GenerateSpec{
		Modes: []string{ModeCompiled}, Cases: GenerateCases([]int{1, 3}, []int{5}, []int{2, 4}), Load: load})
	require.NoError(t, err)
	var keys []string
	for _, row := range rows {
		keys = append(keys, row.Label())
		assert.Equal(t, 1, row.TTFTMs.N)
		assert.Equal(t, row.GenLen, row.ITLMs.N)
		assert.Zero(t, row.CacheMisses, "no counters: zeros")
	}
	assert.Equal(t, []string{"compiled b1 p5+g2", "compiled b1 p5+g4", "compiled b3 p5+g2", "compiled b3 p5+g4"}, keys)
	assert.Equal(t, 1, opens)
}

func TestGenerateUsageErrors(t *testing.T) {
	clk := newClock()
	load := lmModel(clk, map[string]*fakeRunner{ModeCompiled: newFakeRunner(clk, 1)})
	ok := GenerateSpec{Modes: []string{ModeCompiled}, Cases: []GenerateCase{{1, 4, 4}}, Load: load}
	for name, tc := range map[string]struct {
		cfg  Config
		spec func(GenerateSpec) GenerateSpec
		msg  string
	}{
		"repeat":   {Config{Repeat: 0}, func(s GenerateSpec) GenerateSpec { return s }, "Config.Repeat 0"},
		"warmup":   {Config{Repeat: 1, Warmup: -1}, func(s GenerateSpec) GenerateSpec { return s }, "Config.Warmup -1"},
		"mode":     {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Modes = []string{"foo"}; return s }, `GenerateSpec.Modes "foo"`},
		"no mode":  {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Modes = nil; return s }, "GenerateSpec.Modes"},
		"twice":    {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Modes = []string{"eager", "eager"}; return s }, "Modes eager: given twice"},
		"batch":    {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Cases = []GenerateCase{{0, 4, 4}}; return s }, "GenerateCase.Batch 0"},
		"prompt":   {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Cases = []GenerateCase{{1, 0, 4}}; return s }, "GenerateCase.PromptLen 0"},
		"gen":      {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Cases = []GenerateCase{{1, 4, 0}}; return s }, "GenerateCase.GenLen 0"},
		"position": {Config{Repeat: 1}, func(s GenerateSpec) GenerateSpec { s.Cases = []GenerateCase{{1, 60, 8}}; return s }, "exceeds the model's 64 positions"},
	} {
		_, err := Generate(context.Background(), tc.cfg, tc.spec(ok))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, errs.ErrUsage, name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

// cancelRunner cancels the context at its n-th decode call.
type cancelRunner struct {
	*fakeRunner
	cancel func()
	n      int
}

func (c *cancelRunner) Decode(next []int) ([][]float32, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.fakeRunner.Decode(next)
}

func TestGenerateInterruptedKeepsFinishedRows(t *testing.T) {
	clk := newClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &cancelRunner{fakeRunner: newFakeRunner(clk, 1), cancel: cancel, n: 2*2 + 1} // in the second case
	load := func() (*Target, error) {
		return &Target{VocabSize: 50, Open: func(string) (*Session, error) { return &Session{Stepper: r}, nil }}, nil
	}
	rows, err := Generate(ctx, Config{Repeat: 1, Now: clk.Now}, GenerateSpec{
		Modes: []string{ModeCompiled}, Cases: []GenerateCase{{1, 2, 2}, {2, 2, 2}}, Load: load})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.ErrInterrupted)
	assert.Len(t, rows, 1)
}

func TestGenerateRunnerErrorsAreWrapped(t *testing.T) {
	boom := errors.New("boom")
	load := func() (*Target, error) {
		return &Target{VocabSize: 50, Open: func(string) (*Session, error) { return &Session{Stepper: errRunner{boom}}, nil }}, nil
	}
	_, err := Generate(context.Background(), Config{Repeat: 1}, GenerateSpec{
		Modes: []string{ModeEager}, Cases: []GenerateCase{{1, 2, 2}}, Load: load})
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "eager b1 p2+g2: prefill: boom")
}

type errRunner struct{ err error }

func (e errRunner) Prefill([][]int, int) ([][]float32, error) { return nil, e.err }
func (e errRunner) Decode([]int) ([][]float32, error)         { return nil, e.err }

func TestSyntheticPrompts(t *testing.T) {
	a := SyntheticPrompts(3, 100, 10, []int{0, 5}, 1)
	b := SyntheticPrompts(3, 100, 10, []int{0, 5}, 1)
	assert.Equal(t, a, b, "deterministic")
	assert.NotEqual(t, a, SyntheticPrompts(3, 100, 10, []int{0, 5}, 2), "seeded")
	seen := map[int]bool{}
	for _, p := range a {
		for _, id := range p {
			seen[id] = true
		}
	}
	assert.False(t, seen[0] || seen[5], "special ids excluded")
	assert.Len(t, seen, 8, "every other id used")

	_, err := Generate(context.Background(), Config{Repeat: 1}, GenerateSpec{Modes: []string{ModeEager}, Cases: []GenerateCase{{1, 1, 1}},
		Load: func() (*Target, error) {
			return &Target{VocabSize: 2, Special: []int{0, 1, 1}, Open: func(string) (*Session, error) { return nil, nil }}, nil
		}})
	assert.ErrorContains(t, err, "no id left")
}

func TestSummarize(t *testing.T) {
	assert.Nil(t, Summarize(nil))
	s := Summarize([]float64{5})
	assert.Equal(t, Stat{Median: 5, Min: 5, Max: 5, N: 1}, *s)
	s = Summarize([]float64{4, 1, 3, 2})
	assert.Equal(t, 2.5, s.Median)
	assert.Equal(t, 1.0, s.Min)
	assert.Equal(t, 4.0, s.Max)
	near(t, math.Sqrt(5.0/3), s.Stddev, "sample stddev")
	assert.Equal(t, time.Duration(15), medianDuration([]time.Duration{10, 30, 20, 10}))
}

// fakeDiffuser charges the clock: encode 50 ms, a 2 s UNet compile ahead
// of the loop on the first compiled call, step i of run k (100*(i+1)+k)
// ms, with the eager executor compiling inside its first step, and 30 ms
// of VAE decode.
type fakeDiffuser struct {
	clk      *fakeClock
	counters Counters
	calls    int
	compiled map[bool]bool
	reqs     []sd.Request
}

func (f *fakeDiffuser) Validate(req *sd.Request) error {
	if req.Width == 0 {
		req.Width, req.Height = 64, 48
	}
	if req.Width%8 != 0 {
		return errs.Usagef("size %dx%d: not a multiple of 8", req.Width, req.Height)
	}
	return nil
}

func (f *fakeDiffuser) Generate(ctx context.Context, req sd.Request) (*sd.Result, error) {
	run := f.calls
	f.calls++
	f.reqs = append(f.reqs, req)
	req.OnPhase(sd.PhaseEncode, 0)
	f.clk.Advance(50 * time.Millisecond)
	first := !f.compiled[req.Eager]
	f.compiled[req.Eager] = true
	if first && !req.Eager {
		req.OnPhase(sd.PhaseCompile, 0)
		f.clk.Advance(2 * time.Second)
		f.counters.Compile += 2 * time.Second
		f.counters.Misses++
	} else if !req.Eager {
		f.counters.Hits++
	}
	req.OnPhase(sd.PhaseDenoise, req.Steps)
	for i := range req.Steps {
		if first && req.Eager && i == 0 {
			f.clk.Advance(time.Second)
			f.counters.Compile += time.Second
			f.counters.Misses++
		} else if req.Eager {
			f.counters.Hits++
		}
		f.clk.Advance(msd(float64(100*(i+1) + run)))
		req.OnStep(i+1, req.Steps)
	}
	req.OnPhase(sd.PhaseDecode, 0)
	f.clk.Advance(30 * time.Millisecond)
	return &sd.Result{}, nil
}

func TestDiffuseFiguresFromMeasuredTimes(t *testing.T) {
	clk := newClock()
	f := &fakeDiffuser{clk: clk, compiled: map[bool]bool{}}
	rows, err := Diffuse(context.Background(), Config{Repeat: 2, Warmup: 1, Now: clk.Now}, DiffuseSpec{
		Modes: []string{ModeCompiled, ModeEager}, Cases: []DiffuseCase{{Batch: 2, Steps: 2}}, Prompt: "a fox", Seed: 7,
		Load: func() (*Diffusion, error) {
			clk.Advance(3 * time.Second)
			return &Diffusion{Pipeline: f, Guidance: 7.5, Counters: func() Counters { return f.counters }}, nil
		}})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	c, e := rows[0], rows[1]
	assert.Equal(t, []string{"compiled b2 64x48/2", "eager b2 64x48/2"}, []string{c.Label(), e.Label()})
	assert.Equal(t, []int{2, 64, 48}, []int{c.Steps, c.Width, c.Height})
	near(t, 3, c.LoadS, "load")
	near(t, 3, e.LoadS, "load")
	near(t, 2, c.CompileS, "compiled: the UNet compile")
	near(t, 1, e.CompileS, "eager: compile inside the first step")
	// First compiled run: 50 + 2000 + 100 + 200 + 30 ms.
	near(t, 2.38, c.FirstRunS, "first run")
	assert.Equal(t, []int{3, 1, 0}, []int{c.CacheHits, c.CacheMisses, c.Recompiles})
	assert.Equal(t, []int{7, 1, 0}, []int{e.CacheHits, e.CacheMisses, e.Recompiles})
	// Compiled measured runs are calls 2 and 3: steps 102, 202, 103, 203 ms.
	assert.Equal(t, 4, c.StepS.N)
	near(t, 0.1525, c.StepS.Median, "s/step median")
	near(t, 0.102, c.StepS.Min, "s/step min")
	near(t, 0.203, c.StepS.Max, "s/step max")
	// s/image: (50 + 102 + 202 + 30) / 2 and (50 + 103 + 203 + 30) / 2 ms.
	assert.Equal(t, 2, c.ImageS.N)
	near(t, 0.1925, c.ImageS.Median, "s/image median")
	near(t, 0.192, c.ImageS.Min, "s/image min")
	near(t, 0.193, c.ImageS.Max, "s/image max")
	// Eager runs are calls 4..7; measured 6 and 7: 106, 206, 107, 207 ms.
	near(t, 0.1565, e.StepS.Median, "eager s/step")
	near(t, 0.1565/0.1525, *c.SpeedupVsEager, "speed-up")
	assert.Nil(t, c.PrefillSpeedupVsEager)
	assert.Nil(t, c.TTFTMs)
	for _, r := range f.reqs {
		assert.Equal(t, "a fox", r.Prompt)
		assert.Equal(t, uint64(7), r.Seed)
		assert.Equal(t, 7.5, r.Guidance)
		assert.Equal(t, 2, r.Batch)
	}
	assert.False(t, f.reqs[0].Eager)
	assert.True(t, f.reqs[4].Eager)

	// A bad size fails before anything runs.
	f = &fakeDiffuser{clk: clk, compiled: map[bool]bool{}}
	_, err = Diffuse(context.Background(), Config{Repeat: 1, Now: clk.Now}, DiffuseSpec{
		Modes: []string{ModeEager}, Cases: []DiffuseCase{{Batch: 1, Steps: 1, Width: 60, Height: 60}},
		Load: func() (*Diffusion, error) { return &Diffusion{Pipeline: f}, nil }})
	assert.ErrorIs(t, err, errs.ErrUsage)
	assert.Zero(t, f.calls)
}

func TestDiffuseCases(t *testing.T) {
	cs := DiffuseCases([]int{1, 2}, [][2]int{{0, 0}, {32, 16}}, []int{4})
	var shapes []string
	for _, c := range cs {
		shapes = append(shapes, c.Shape())
	}
	assert.Equal(t, []string{"0x0/4", "32x16/4", "0x0/4", "32x16/4"}, shapes)
	assert.True(t, slices.Equal([]int{1, 1, 2, 2}, []int{cs[0].Batch, cs[1].Batch, cs[2].Batch, cs[3].Batch}))
}
