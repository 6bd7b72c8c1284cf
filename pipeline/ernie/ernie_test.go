package ernie_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/ernieref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// clamped is TinyErnie with a moe_norm_min of 0.9, above what its top 2
// scores sum to, so the renormalization divides by the clamp.
func clamped() ernieref.Ernie {
	c := ernieref.TinyErnie()
	c.NormMin, c.Seed = 0.9, 452
	return c
}

// TestLogitsMatchReference runs tiny ERNIE 4.5 MoEs (a dense first layer
// then sparse ones with a shared expert, head_dim unrelated to the hidden
// size, a tied head; sparse layers placed by interval and end index, no
// shared expert, top 3, untied; and the first with moe_norm_min 0.9) on a left-padded batch of two
// prompts plus decode steps, with each experts formulation, compiled and
// eager, on the go backend and on tputool's cpu backend, against
// ernieref's float64 forward, written apart from the model from
// transformers' modeling_ernie4_5_moe.py.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		e    ernieref.Ernie
	}{{"shared-tied", ernieref.TinyErnie()}, {"interval-untied", ernieref.TinyErnieSparse()}, {"norm-min", clamped()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.e.Write)
			rm, err := c.e.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
}

// TestSwitchesMatter checks that the comparison above can fail where
// ERNIE 4.5 differs from its kin: a reference rotating halves instead of
// adjacent pairs, weighing by the biased scores, choosing without the
// correction bias, not renormalizing, or without the shared expert gives
// other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	c := ernieref.TinyErnie()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, m := range []struct {
		name string
		mis  ernieref.Mistakes
	}{
		{"rotate-half", ernieref.Mistakes{HalfRotary: true}},
		{"weights from the biased scores", ernieref.Mistakes{BiasedWeights: true}},
		{"choice without the bias", ernieref.Mistakes{UnbiasedChoice: true}},
		{"no renormalization", ernieref.Mistakes{NoRenorm: true}},
		{"no shared expert", ernieref.Mistakes{NoShared: true}},
	} {
		mm := &ernieref.Model{C: rm.C, W: rm.W, Mistakes: m.mis}
		mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}
