package exaone4_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/exaone4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestMoELogitsMatchReference runs a tiny K-EXAONE (4 layers: a dense
// first layer, then the MoE with the 2 best of 4 groups, a shared
// expert; sliding layers of 5 tokens turning and a fourth, global layer
// without the rotary; q/k norms) on a left-padded batch of two prompts,
// the longer past the window, plus decode steps, with each experts
// formulation, compiled and eager, on the go and cpu backends, against
// dsref's float64 forward; and checks that a reference with every layer
// turning in full, a wider window, or the global layer turning, differs.
func TestMoELogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 6
	c := dsref.TinyExaoneMoE()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))

	mutant := func(f func(*dsref.GLM)) func([]int) [][]float64 {
		m := *rm
		f(&m.C)
		return m.Logits
	}
	prompt := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "every layer turning and attending in full", Logits: mutant(func(c *dsref.GLM) { c.Window = 0 })},
		refcheck.Mutant{Name: "a window of 8", Logits: mutant(func(c *dsref.GLM) { c.Window = 8 })},
		refcheck.Mutant{Name: "the global layer turning", Logits: mutant(func(c *dsref.GLM) { c.GlobalRope = true })})
}

// TestMoEConfig reads ExaoneMoeConfig's defaults (4096 wide, 32 layers,
// 64 experts of 1024 of which 8, one shared, the first layer dense,
// sliding layers of 4096 but every fourth; bos 1, eos 53), mlp_layer_types
// over first_k_dense_replace, and refuses what it cannot run.
func TestMoEConfig(t *testing.T) {
	parse := func(js string) *config.File {
		cfg, err := config.ParseModel([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	m, err := lm.New(parse(`{"architectures": ["ExaoneMoEForCausalLM"]}`)) // the releases' spelling
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*exaone4.MoEModel).Options()
	s := m.Spec()
	if !o.GQA || o.Experts != 64 || o.TopK != 8 || o.MoEIntermediate != 1024 || o.Shared != 1 || o.Sparse[0] || !o.Sparse[1] || !o.NormTopK ||
		o.RoutedScale != 2.5 || !o.MaskInf || !o.QKNorm || s.SlidingWindow != 4096 || s.LayerKinds[0] != lm.KindSliding || s.LayerKinds[3] != lm.KindFull ||
		!o.NoRope[3] || o.NoRope[0] || s.BOS != 1 || fmt.Sprint(s.EOS) != "[53]" || o.Norms.PreAttn != "input_layernorm" {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if _, ok := m.(lm.Skipper).SkipWeight("mtp.layers.0.eh_proj.weight"); !ok {
		t.Error("the MTP module is read")
	}
	d, err := exaone4.ResolveMoE(parse(`{"architectures": ["ExaoneMoeForCausalLM"], "num_hidden_layers": 3, "first_k_dense_replace": 0,
		"mlp_layer_types": ["sparse", "dense", "sparse"]}`))
	if err != nil || !d.Sparse[0] || d.Sparse[1] || !d.Sparse[2] {
		t.Errorf("mlp_layer_types over first_k_dense_replace: %v, %v", d.Sparse, err)
	}
	for _, bad := range []struct{ js, want string }{
		{`"num_experts_per_tok": 99`, "num_experts_per_tok 99"},
		{`"n_group": 3`, "n_group 3"},
		{`"sliding_windows": [4096, 4096, 128, 0]`, "sliding_windows has 4 entries for 32 layers"},
		{`"sliding_windows": [4096, 4096, 4096, 4096` + strings.Repeat(`, 4096`, 28) + `]`, "sliding_windows[3] is 4096 where the layer kinds give 0"},
		{`"swiglu_limits": [0, 7.0]`, "swiglu_limits[1] is 7"},
		{`"is_moe_layer": [false]`, "is_moe_layer has 1 entries"},
		{`"is_moe_layer": [true` + strings.Repeat(`, true`, 31) + `]`, "is_moe_layer (32 entries) disagrees"},
		{`"mlp_layer_types": ["dense"]`, "mlp_layer_types has 1 entries"},
		{`"mlp_layer_types": ` + `["moe"` + strings.Repeat(`, "dense"`, 31) + `]`, `mlp_layer_types[0] is "moe"`},
	} {
		_, err := exaone4.ResolveMoE(parse(`{"architectures": ["ExaoneMoeForCausalLM"], ` + bad.js + `}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
