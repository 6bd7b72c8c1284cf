package granite_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/testkit/granitehref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// hybridPrompts are two short prompts and one of 150 tokens, whose
// prefill runs the recurrence in several chunks (granite.HybridChunk is
// 64) and carries the state from chunk to chunk; the decode steps carry
// it token by token.
var hybridPrompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 90, 77, 6, 31, 44}, longPrompt(150)}

// longPrompt is n pseudo-random token ids of the tiny models' vocabulary
// after a BOS.
func longPrompt(n int) []int {
	p := []int{1}
	for i := 1; i < n; i++ {
		p = append(p, 3+(i*37+i*i*11)%90)
	}
	return p
}

// noShared is TinyMoeShared with shared_intermediate_size 0: no
// shared_mlp, GraniteMoe's layer.
func noShared() granitehref.Hybrid {
	g := granitehref.TinyMoeShared()
	g.SharedIntermediate, g.Seed = 0, 4004
	return g
}

// TestHybridLogitsMatchReference runs three tiny GraniteMoeHybrid models
// against granitehref's float64 forward, written apart from the model
// from transformers' modeling_granitemoehybrid.py with the state space
// recurrence token by token: a Granite 4.0-H (Mamba-2 and a NoPE
// attention layer, 4 experts beside the shared MLP, tied), a dense one
// (two groups of B and C, in_proj and out_proj biases, a rotary attention
// layer, mamba_d_head "auto") and a Granite 4.0 Micro (attention only),
// and two GraniteMoeShared models on the same decoder (rotary attention
// layers, 4 experts beside a shared MLP; the same without it).
// Each runs a left-padded batch of the three prompts plus decode steps,
// compiled and eager (and each experts formulation), on the go and cpu
// backends.
func TestHybridLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		g    granitehref.Hybrid
	}{{"h-moe", granitehref.TinyHybrid()}, {"h-dense", granitehref.TinyHybridDense()}, {"micro", granitehref.TinyMicro()},
		{"moe-shared", granitehref.TinyMoeShared()}, {"moe-shared-none", noShared()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.g.Write)
			rm, err := c.g.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, hybridPrompts, refcheck.GreedySequences(rm, hybridPrompts, steps), steps, 1e-4)
		})
	}
}

// TestHybridMistakesMatter checks that the comparison above can fail
// where GraniteMoeHybrid's Mamba-2 layers and MLPs could be misread: a
// reference that normalizes before the gate (Qwen3.5's order), drops the
// D skip, dt_bias or the convolution's bias, splits in_proj in another
// order, forgets residual_multiplier or the shared MLP, or rotates a NoPE
// layer gives other logits than the model (on the GraniteMoeShared, which
// has no Mamba-2 layer, the last two that apply).
func TestHybridMistakesMatter(t *testing.T) {
	for _, g := range []granitehref.Hybrid{granitehref.TinyHybrid(), granitehref.TinyHybridDense(), granitehref.TinyMoeShared()} {
		dir, l := lmckpt.WriteLoad(t, g.Write)
		prompt := hybridPrompts[1]
		got := moecheck.Prefill(t, l, prompt)
		rm, err := g.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var mutants []refcheck.Mutant
		for _, m := range []struct {
			name string
			mis  granitehref.Mistakes
		}{
			{"the norm before the gate", granitehref.Mistakes{NormBeforeGate: true}},
			{"no D skip", granitehref.Mistakes{NoD: true}},
			{"no dt_bias", granitehref.Mistakes{NoDtBias: true}},
			{"no convolution bias", granitehref.Mistakes{NoConvBias: true}},
			{"the gate last in in_proj", granitehref.Mistakes{GateLast: true}},
			{"no residual multiplier", granitehref.Mistakes{NoResidualMultiplier: true}},
			{"no shared MLP", granitehref.Mistakes{NoSharedMLP: true}},
			{"the rotary on a NoPE layer", granitehref.Mistakes{RopeOnNoPE: true}},
			{"the norm per group", granitehref.Mistakes{GroupedNorm: true}},
		} {
			mis := m.mis
			mamba := mis.NormBeforeGate || mis.NoD || mis.NoDtBias || mis.NoConvBias || mis.GateLast || mis.GroupedNorm
			if (mis.RopeOnNoPE && g.Rope) || (mis.GroupedNorm && g.MambaGroups == 1) || (mamba && g.MoeShared) {
				continue
			}
			mm := &granitehref.Model{C: rm.C, W: rm.W, Mistakes: m.mis}
			mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
		}
		refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
	}
}

// TestHybridBFloat16 runs the tiny model with bfloat16 compute (its weights and
// activations rounded; the recurrence, the convolution's sums, the norms
// and the router in float32), prefill and one decode step over the
// prompts (the longest runs the chunked recurrence in three chunks):
// within 5% of the float64 reference.
func TestHybridBFloat16(t *testing.T) {
	c := granitehref.TinyHybrid()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest relative error %.3g", moecheck.BFloat16(t, l, rm, hybridPrompts, 0.05))
}
