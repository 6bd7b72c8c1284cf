package nemotronh_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/nemotronhref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// prompts are two short prompts and one of 150 tokens, whose prefill
// runs the Mamba-2 recurrence in several chunks and carries the state
// between them.
var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 90, 77, 6, 31, 44}, longPrompt(150)}

func longPrompt(n int) []int {
	p := []int{1}
	for i := 1; i < n; i++ {
		p = append(p, 3+(i*37+i*i*11)%90)
	}
	return p
}

// TestLogitsMatchReference runs three tiny NemotronH models against
// nemotronhref's float64 forward, written apart from the model from
// transformers' modeling_nemotron_h.py (Zamba2's Mamba-2 mixer,
// DeepSeek-V3's router, Jamba's attention) with the state space
// recurrence token by token: a Nemotron 3 Nano (Mamba-2, MoE and
// attention blocks from hybrid_override_pattern; 8 relu² experts in 2
// groups, top 3 of one group, a correction bias that changes the choice,
// a shared expert; Mamba-2 in 4 groups, each normalized apart), a dense
// Nemotron-H (Mamba-2, relu² MLP and attention blocks from
// layers_block_type; in_proj and out_proj biases) and the Nano with a
// latent projection around its experts. Each runs a left-padded batch of
// three prompts plus decode steps, compiled and eager (and each experts
// formulation), on the go and cpu backends.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		n    nemotronhref.NemotronH
	}{{"nano", nemotronhref.TinyNano()}, {"h-dense", nemotronhref.TinyH()}, {"latent", nemotronhref.TinyLatent()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.n.Write)
			rm, err := c.n.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
}

// TestMistakesMatter checks that the comparison above can fail where
// NemotronH could be misread: normalizing the Mamba-2 output over the
// whole width or before the gate, dropping D, gated (SiLU) experts or a
// SiLU MLP, choosing experts without the correction bias or weighing
// them with it, no group limit, no routed scale, no shared expert.
func TestMistakesMatter(t *testing.T) {
	for _, n := range []nemotronhref.NemotronH{nemotronhref.TinyNano(), nemotronhref.TinyH()} {
		dir, l := lmckpt.WriteLoad(t, n.Write)
		prompt := prompts[1]
		got := moecheck.Prefill(t, l, prompt)
		rm, err := n.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		moe, mlp := n.Has(nemotronhref.MoE), n.Has(nemotronhref.MLP)
		var mutants []refcheck.Mutant
		for _, m := range []struct {
			name    string
			mis     nemotronhref.Mistakes
			applies bool
		}{
			{"the norm over the whole width", nemotronhref.Mistakes{NormWhole: true}, n.Groups > 1},
			{"the norm before the gate", nemotronhref.Mistakes{NormBeforeGate: true}, true},
			{"no D skip", nemotronhref.Mistakes{NoD: true}, true},
			{"gated experts", nemotronhref.Mistakes{GatedExperts: true}, moe},
			{"no correction bias", nemotronhref.Mistakes{NoCorrectionBias: true}, moe},
			{"weights with the bias", nemotronhref.Mistakes{BiasedWeights: true}, moe},
			{"no group limit", nemotronhref.Mistakes{NoGroupLimit: true}, moe && n.NGroup > 1},
			{"no routed scale", nemotronhref.Mistakes{NoRoutedScale: true}, moe},
			{"a SiLU MLP", nemotronhref.Mistakes{SiLUMLP: true}, mlp},
			{"no shared expert", nemotronhref.Mistakes{NoSharedExpert: true}, moe},
		} {
			if !m.applies {
				continue
			}
			mm := &nemotronhref.Model{C: rm.C, W: rm.W, Mistakes: m.mis}
			mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
		}
		refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
	}
}

// TestBFloat16 runs the tiny model with bfloat16 compute (its weights and
// activations rounded; the recurrence, the convolution's sums, the norms
// and the router in float32), prefill and one decode step over the
// prompts (the longest runs the chunked recurrence in three chunks):
// within 8% of the float64 reference (measured: 2.6% on the cpu backend,
// which computes bf16 products in float32, 4.7% on the go backend, which
// rounds each op's result).
func TestBFloat16(t *testing.T) {
	c := nemotronhref.TinyNano()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.08))
}
