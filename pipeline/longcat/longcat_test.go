package longcat_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/longcat"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/longcatref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig reads LongcatFlashConfig's defaults (LongCat-Flash's sizes:
// 28 layers of two MLA sublayers, 512 experts of 2048 and 256 zero
// experts of which 12, 6144 wide; 560.66B parameters, the published
// 560B), and refuses what it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["LongcatFlashForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*longcat.Model).LongcatOptions()
	if s := m.Spec(); s.Layers != 28 || s.Hidden != 6144 || s.Heads != 64 || o.Experts != 512 || o.Zero != 256 || o.TopK != 12 ||
		o.ExpertIntermediate != 2048 || s.Intermediate != 12288 || o.RoutedScale != 6 || o.QLoraRank != 1536 || o.KVLoraRank != 512 ||
		!o.Interleave || o.QLoraScale != 2 || o.KVLoraScale != 2*1.7320508075688772 || s.VocabSize != 131072 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if n := lmckpt.Params(m); n != 560_664_980_480 {
		t.Errorf("%d parameters, want 560,664,980,480 (the published 560B)", n)
	}
	if st := m.LayerState(0, 1, 16); len(st) != 2 || st[0].Name == st[1].Name {
		t.Errorf("state %+v: two latent caches", st)
	}
	for name, skip := range map[string]bool{"model.mtp.layers.0.eh_proj.weight": true, "model.layers.3.mlp.router.classifier.weight": false} {
		if _, ok := m.(lm.Skipper).SkipWeight(name); ok != skip {
			t.Errorf("%s: skipped %v, want %v", name, ok, skip)
		}
	}
	// null zero experts are none (transformers' `zero_expert_num or 0`);
	// LongcatFlashConfig's attribute_map aliases are read.
	o2, err := longcat.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["LongcatFlashForCausalLM"], "zero_expert_num": null, "num_local_experts": 64, "num_experts_per_tok": 4, "intermediate_size": 1024}`))
	if err != nil || o2.Zero != 0 || o2.Experts != 64 || o2.TopK != 4 || o2.Spec.Intermediate != 1024 {
		t.Errorf("null zero experts and the aliases: %+v, %v", o2, err)
	}
	for _, bad := range []struct{ js, want string }{
		{`"zero_expert_type": "constant"`, `zero_expert_type "constant"`},
		{`"moe_topk": 1000`, "moe_topk 1000"},
		{`"num_layers": 0`, "num_layers"},
		{`"attention_bias": true`, "attention_bias"},
		{`"q_lora_rank": null`, "q_lora_rank"},
		{`"qk_head_dim": 100`, "qk_head_dim 100"},
		{`"router_bias": true`, "router_bias is true"},
		{`"norm_topk_prob": true`, "norm_topk_prob is true"},
		{`"attention_method": "LSA"`, `attention_method "LSA"`},
	} {
		_, err := longcat.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["LongcatFlashForCausalLM"], `+bad.js+`}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestLogitsMatchReference runs a tiny LongCat-Flash (two layers of two
// MLA sublayers, 6 real and 3 zero experts of which 3 chosen, both
// LoRA scales) on a left-padded batch of two prompts plus
// decode steps, with each experts formulation, compiled and eager, on the
// go and cpu backends (moecheck.Run), against longcatref's float64
// forward; the reference must have chosen zero experts. And in bfloat16
// compute.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 6
	c := longcatref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
	if rm.ZeroChosen == 0 {
		t.Error("the reference chose no zero expert")
	}
	t.Logf("zero experts chosen %d times; bfloat16: worst relative error %.3g", rm.ZeroChosen, moecheck.BFloat16(t, l, rm, prompts, 0.05))
}

// TestSwitchesMatter: a reference without the LoRA scales, whose zero
// experts add nothing, or whose MoE reads the second MLP's input,
// differs.
func TestSwitchesMatter(t *testing.T) {
	c := longcatref.Tiny()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}
	mutant := func(f func(*longcatref.Model)) func([]int) [][]float64 {
		m := *rm
		f(&m)
		return m.Logits
	}
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "no LoRA scales", Logits: mutant(func(m *longcatref.Model) { m.NoLoraScale = true })},
		refcheck.Mutant{Name: "zero experts add nothing", Logits: mutant(func(m *longcatref.Model) { m.ZeroAsNothing = true })},
		refcheck.Mutant{Name: "the MoE on the second MLP's input", Logits: mutant(func(m *longcatref.Model) { m.MoEAtEnd = true })})
}
