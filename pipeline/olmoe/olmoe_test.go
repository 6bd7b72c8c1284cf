package olmoe_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/olmoe"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/olmoeref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestConfig reads OLMoE-1B-7B's config.json (q/k norms over whole
// projections, 64 experts of 1024, top 8 not renormalized, on all 16
// layers) and OlmoeConfig's defaults, and refuses bad values naming the
// field.
func TestConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "olmoe_1b_7b", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen3moe.Model).Options()
	var n, active int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * int64(o.TopK) / int64(o.Experts)
		}
		active += k
	}
	if n != 6_919_161_856 { // the published 6.9B
		t.Errorf("%d parameters, want 6,919,161,856", n)
	}
	if a := float64(active) / 1e9; a < 1.2 || a > 1.35 {
		t.Errorf("%.3gB active, want about 1.3B", a)
	}
	if s := m.Spec(); !o.QKNorm || !o.QKNormAcross || o.QKVBias || o.ClipQKV != 0 || o.Experts != 64 || o.TopK != 8 || o.NormTopK ||
		o.MoEIntermediate != 1024 || !o.Sparse[0] || s.Heads != 16 || s.KVHeads != 16 || s.HeadDim != 128 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	names := map[string][]int{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = w.Shape
	}
	if fmt.Sprint(names["model.layers.0.self_attn.q_norm.weight"], names["model.layers.0.self_attn.k_norm.weight"]) != "[2048] [2048]" {
		t.Errorf("q/k norms %v %v, want over the whole projections", names["model.layers.0.self_attn.q_norm.weight"], names["model.layers.0.self_attn.k_norm.weight"])
	}

	d, err := olmoe.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["OlmoeForCausalLM"], "clip_qkv": 8, "norm_topk_prob": true, "num_key_value_heads": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Hidden != 2048 || d.Spec.VocabSize != 50304 || d.Experts != 64 || d.TopK != 8 || d.ClipQKV != 8 || !d.NormTopK || d.Spec.KVHeads != 4 {
		t.Errorf("defaults: %+v", d)
	}
	base := `"architectures": ["OlmoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2`
	for _, bad := range []struct{ js, want string }{
		{`"clip_qkv": -1`, "clip_qkv must be positive"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"num_key_value_heads": 3`, "num_key_value_heads"},
		{`"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, err := olmoe.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny OLMoEs (multi-head, the top 2 of 8
// not renormalized; and grouped-query, renormalized, q, k and v clamped
// to ±0.5 after the norms, a tied head) on a left-padded batch of two
// prompts plus decode steps, under every experts formulation, compiled
// and eager, on the go and cpu backends (moecheck.Run), against
// olmoeref's float64 OlmoeForCausalLM, written by a separate helper
// session from transformers' code.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []olmoeref.Olmoe{olmoeref.TinyOlmoe(), olmoeref.TinyOlmoeGQA()} {
		t.Run(fmt.Sprint(c.Seed), func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.Write)
			rm, err := c.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
}

// TestSwitchesMatter checks that the comparison above can fail where
// OLMoE differs from its kin: a reference renormalizing the top k, or
// without the clip, gives other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	for _, c := range []olmoeref.Olmoe{olmoeref.TinyOlmoe(), olmoeref.TinyOlmoeGQA()} {
		dir, l := lmckpt.WriteLoad(t, c.Write)
		prompt := prompts[1]
		got := moecheck.Prefill(t, l, prompt)
		rm, err := c.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mutant := func(name string, f func(*olmoeref.Olmoe)) refcheck.Mutant {
			mc := c
			f(&mc)
			mm, err := mc.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			return refcheck.Mutant{Name: name, Logits: mm.Logits}
		}
		mutants := []refcheck.Mutant{mutant("the top k renormalized the other way", func(c *olmoeref.Olmoe) { c.NormTopK = !c.NormTopK })}
		if c.ClipQKV > 0 {
			mutants = append(mutants, mutant("no clip", func(c *olmoeref.Olmoe) { c.ClipQKV = 0 }))
		}
		refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
	}
}
