package bench

import (
	"context"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/gomlx/gomlx/backends/simplego"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/llama"
)

const storiesDir = "../../testdata/stories260K-hf"

// tickRunner runs the real model and charges the fake clock a fixed time
// per call, so the figures are exact while the row's structure, the
// executable counters and the token flow are real.
type tickRunner struct {
	r       *compile.State
	clk     *fakeClock
	calls   int
	prefill time.Duration
	decode  time.Duration
}

func (t *tickRunner) Prefill(p [][]int, maxNew int) ([][]float32, error) {
	t.calls++
	out, err := t.r.Prefill(p, maxNew)
	t.clk.Advance(t.prefill)
	return out, err
}

func (t *tickRunner) Decode(next []int) ([][]float32, error) {
	t.calls++
	out, err := t.r.Decode(next)
	t.clk.Advance(t.decode)
	return out, err
}

// TestTinyCheckpoint benchmarks the TinyStories 260K checkpoint in both
// modes through compile.Runner on the pure-Go backend.
func TestTinyCheckpoint(t *testing.T) {
	be, err := backends.NewWithConfig("go:ops_sequential")
	require.NoError(t, err)
	defer be.Finalize()
	clk := newClock()
	calls := map[string]*tickRunner{}
	load := func() (*Target, error) {
		l, err := lmckpt.Load(storiesDir)
		if err != nil {
			return nil, err
		}
		clk.Advance(time.Second)
		spec := l.Model.Spec()
		return &Target{VocabSize: spec.VocabSize, MaxPositions: spec.MaxPositions, Special: append([]int{spec.BOS}, spec.EOS...),
			Open: func(mode string) (*Session, error) {
				m, err := compile.ParseMode(mode)
				if err != nil {
					return nil, err
				}
				r, err := compile.NewRunner(be, l, compile.Options{Mode: m})
				if err != nil {
					return nil, err
				}
				tr := &tickRunner{r: r.NewState(), clk: clk, prefill: 40 * time.Millisecond, decode: 5 * time.Millisecond}
				calls[mode] = tr
				return &Session{Stepper: tr, Close: func() { tr.r.Release(); r.Close() }, Counters: func() Counters {
					s := r.Stats()
					c := Counters{Compile: s.Compile}
					for _, p := range s.Programs {
						c.Hits += p.Hits
						c.Misses += p.Misses
					}
					return c
				}}, nil
			},
			Close: func() { l.Close() }}, nil
	}
	rows, err := Generate(context.Background(), Config{Repeat: 2, Warmup: 1, Now: clk.Now}, GenerateSpec{
		Modes: []string{ModeEager, ModeCompiled},
		Cases: GenerateCases([]int{1, 2}, []int{5}, []int{3}),
		Load:  load,
	})
	require.NoError(t, err)
	require.Len(t, rows, 4)
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.Label())
		assert.Equal(t, 1.0, r.LoadS)
		assert.Positive(t, r.CompileS, "the first run compiles")
		assert.Zero(t, r.Recompiles)
		assert.Equal(t, 40.0, r.TTFTMs.Median)
		assert.Equal(t, 0.0, r.TTFTMs.Stddev)
		assert.Equal(t, 2, r.TTFTMs.N)
		assert.Equal(t, float64(r.Batch*5)/0.04, r.PrefillTokS.Median)
		assert.Equal(t, 5.0, r.ITLMs.Median)
		assert.Equal(t, 6, r.ITLMs.N)
		assert.Equal(t, float64(r.Batch)/0.005, r.DecodeTokS.Median)
		assert.InDelta(t, float64(r.Batch)/0.005, *r.DecodeTokSAggregate, 1e-9)
		assert.InDelta(t, 0.055, r.FirstRunS, 1e-12)
	}
	assert.Equal(t, []string{"eager b1 p5+g3", "eager b2 p5+g3", "compiled b1 p5+g3", "compiled b2 p5+g3"}, labels)
	// Compiled: one executable for prefill and one for decode per batch;
	// 4 runs of 4 calls each.
	assert.Equal(t, []int{14, 2}, []int{rows[2].CacheHits, rows[2].CacheMisses})
	// Eager: per call the embedding, each of the 5 layers (one shared
	// program) and the head; each of the 3 programs compiled once per
	// shape (prefill and decode).
	assert.Equal(t, 16*7, rows[0].CacheHits+rows[0].CacheMisses)
	assert.Equal(t, 6, rows[0].CacheMisses)
	assert.Equal(t, 32, calls[ModeCompiled].calls)
	assert.InDelta(t, 1, *rows[2].SpeedupVsEager, 1e-12, "same fake times")
}
