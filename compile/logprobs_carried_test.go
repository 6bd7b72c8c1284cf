package compile

import (
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/gemma3nref"
	"github.com/tputool/tputool/pipeline/testkit/gemma4ref"
	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
)

// TestPromptLogprobsCarried: models whose layers carry more than the
// residual stream (Gemma 4's E models: the per-layer inputs after it;
// Gemma 3n: four streams, then the per-layer inputs; Zamba2: the
// original embeddings after the stream) score every prompt
// token as their float64 references do: the scoring head reads the whole
// carried width, not Hidden values of it.
func TestPromptLogprobsCarried(t *testing.T) {
	prompts := [][]int{{2, 7, 21, 33, 4, 9}, {2, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}, {2, 40}}
	for name, c := range map[string]struct {
		write  func(dir string) error
		logits func(dir string) (func([]int) [][]float64, error)
	}{
		"gemma4-e": {gemma4ref.TinyE().Write, func(dir string) (func([]int) [][]float64, error) {
			m, err := gemma4ref.Load(dir, gemma4ref.TinyE())
			if err != nil {
				return nil, err
			}
			return m.Logits, nil
		}},
		"gemma3n": {gemma3nref.Tiny().Write, func(dir string) (func([]int) [][]float64, error) {
			m, err := gemma3nref.Load(dir, gemma3nref.Tiny())
			if err != nil {
				return nil, err
			}
			return m.Logits, nil
		}},
		"zamba2": {zamba2ref.Tiny().Write, func(dir string) (func([]int) [][]float64, error) {
			m, err := zamba2ref.Tiny().Load(dir)
			if err != nil {
				return nil, err
			}
			return m.Logits, nil
		}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.write(dir); err != nil {
				t.Fatal(err)
			}
			l := loadDir(t, dir)
			logits, err := c.logits(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := make([][][]float64, len(prompts))
			for i, p := range prompts {
				want[i] = logSoftmax(logits(p))
			}
			for _, mode := range []Mode{Compiled, Eager} {
				r, err := NewRunner(cpuBackend(t), l, Options{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.PromptLogprobs(prompts, 3)
				r.Close()
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				checkLogprobs(t, name+"/"+mode.String(), prompts, got, want, 3, 1e-4)
			}
		})
	}
}

// logSoftmax is each position's log-softmax of the reference's logits,
// but the last's (nothing follows it to score).
func logSoftmax(logits [][]float64) [][]float64 {
	out := make([][]float64, len(logits)-1)
	for j := range out {
		l := logits[j]
		mx := slices.Max(l)
		sum := 0.0
		for _, v := range l {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		out[j] = make([]float64, len(l))
		for k, v := range l {
			out[j][k] = v - lse
		}
	}
	return out
}
