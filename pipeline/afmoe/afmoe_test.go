package afmoe_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/afmoeref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// prompts are three prompts longer than the tiny model's window of 5,
// left padded to one batch.
var prompts = [][]int{{1, 7, 21, 33, 4, 9, 12}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 90, 77, 6, 31, 44}, {1, 88, 3}}

const steps = 6

// TestLogitsMatchReference runs the tiny AFMoE against afmoeref's
// float64 forward, written apart from the model from transformers'
// modular_afmoe.py: a left-padded batch of three prompts plus decode
// steps, compiled and eager, on the go and cpu backends (the experts run
// in the graph only: lm.InGraphExperts). The checkpoint is written as the
// releases hold the experts (one by one) and as transformers v5 stacks
// them, which must give identical logits.
func TestLogitsMatchReference(t *testing.T) {
	var hub map[string][]float32
	for _, stacked := range []bool{false, true} {
		name := "release"
		if stacked {
			name = "v5"
		}
		t.Run(name, func(t *testing.T) {
			c := afmoeref.Tiny()
			c.Stacked = stacked
			dir, l := lmckpt.WriteLoad(t, c.Write)
			rm, err := c.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
			if hub == nil {
				hub = got
			} else {
				moecheck.Same(t, "the v5 layout", hub, got)
			}
		})
	}
}

// TestLayerTypes runs a tiny AFMoE whose layer_types are given (full
// attention first, then sliding layers, tied embeddings, no mup, no
// shared MLP, no dense layer) against the reference.
func TestLayerTypes(t *testing.T) {
	c := afmoeref.Tiny()
	c.LayerTypes = []string{"full_attention", "sliding_attention", "sliding_attention", "full_attention"}
	c.Tied, c.Mup, c.Shared, c.DenseLayers, c.Seed = true, false, 0, 0, 23
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
}

// TestMistakesMatter checks that the comparison above can fail where
// AFMoE could be misread: the rotary embedding on the full-attention
// layers, q/k norms after it, no attention gate, no post norms, experts
// weighed by their biased scores or scored by a softmax, no route scale,
// no shared MLP, no mup scaling, no window.
func TestMistakesMatter(t *testing.T) {
	c := afmoeref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1] // 18 tokens: past the window of 5
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, m := range []struct {
		name string
		mis  afmoeref.Mistakes
	}{
		{"rope on every layer", afmoeref.Mistakes{RopeEverywhere: true}},
		{"q/k norms after the rope", afmoeref.Mistakes{NormAfterRope: true}},
		{"no attention gate", afmoeref.Mistakes{NoGate: true}},
		{"no post norms", afmoeref.Mistakes{NoPostNorms: true}},
		{"biased weights", afmoeref.Mistakes{BiasedWeights: true}},
		{"softmax scores", afmoeref.Mistakes{SoftmaxScores: true}},
		{"no route scale", afmoeref.Mistakes{NoRouteScale: true}},
		{"no shared MLP", afmoeref.Mistakes{NoShared: true}},
		{"no mup scaling", afmoeref.Mistakes{NoMup: true}},
		{"no window", afmoeref.Mistakes{NoWindow: true}},
	} {
		mm := &afmoeref.Model{C: rm.C, W: rm.W, Mistakes: m.mis}
		mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}

// TestBFloat16 runs the tiny model with bfloat16 compute, prefill and
// one decode step over the prompts: within 12% of the float64 reference.
func TestBFloat16(t *testing.T) {
	c := afmoeref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.12))
}
