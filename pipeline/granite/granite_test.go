package granite_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/graniteref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs a tiny Granite (dense, tied) and a tiny
// GraniteMoe (8 experts of 16, top 2, untied; its experts in GraniteMoe's
// input_linear/output_linear stacks, read through the renaming), each
// with all four multipliers away from 1, on a left-padded batch of two
// prompts plus decode steps, compiled and eager (and for GraniteMoe each
// experts formulation), on the go and cpu backends, against graniteref's
// float64 forward, written apart from the model from transformers'
// modeling_granite.py and modeling_granitemoe.py.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		g    graniteref.Granite
	}{{"dense", graniteref.TinyGranite()}, {"moe", graniteref.TinyGraniteMoe()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.g.Write)
			rm, err := c.g.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
}

// TestSwitchesMatter checks that the comparison above can fail where
// Granite differs from Llama: a reference without any one of the four
// multipliers, or (GraniteMoe) reading input_linear's halves the other
// way round, gives other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	for _, g := range []graniteref.Granite{graniteref.TinyGranite(), graniteref.TinyGraniteMoe()} {
		dir, l := lmckpt.WriteLoad(t, g.Write)
		prompt := prompts[1]
		got := moecheck.Prefill(t, l, prompt)
		rm, err := g.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var mutants []refcheck.Mutant
		for _, m := range []struct {
			name string
			mis  graniteref.Mistakes
		}{
			{"no embedding multiplier", graniteref.Mistakes{NoEmbeddingMultiplier: true}},
			{"the default attention scale", graniteref.Mistakes{DefaultAttentionScale: true}},
			{"no residual multiplier", graniteref.Mistakes{NoResidualMultiplier: true}},
			{"no logits scaling", graniteref.Mistakes{NoLogitsScaling: true}},
			{"up first", graniteref.Mistakes{UpFirst: true}},
		} {
			if m.mis.UpFirst && !g.MoE() {
				continue
			}
			mm := &graniteref.Model{C: rm.C, W: rm.W, Mistakes: m.mis}
			mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
		}
		refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
	}
}
