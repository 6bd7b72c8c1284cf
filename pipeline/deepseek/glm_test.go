package deepseek_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestGLMLogitsMatchReference runs tiny GLM-4.5s (GLM-4.5-Air's switches:
// q/k/v biases, half of each head rotated, one expert group; and
// GLM-4.5's: q/k norms, here with 4 groups of which 2 are open, a routed
// scale and a tied head) on a left-padded batch of two prompts plus
// decode steps, with each experts formulation, compiled and eager, on the
// go and cpu backends, against dsref's float64 Glm4MoeForCausalLM.
func TestGLMLogitsMatchReference(t *testing.T) {
	const steps = 6
	const tol = 1e-4
	for _, c := range []struct {
		name string
		glm  dsref.GLM
	}{{"air", dsref.TinyGLM()}, {"qk-norm", dsref.TinyGLMQKNorm()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.glm.Write)
			rm, err := c.glm.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, tol)
		})
	}
}

// TestGLMSwitchesMatter checks that the comparison above can fail where
// GLM-4.5 differs from its kin: a reference rotating whole heads, without
// the attention biases, or without the correction bias gives other
// logits than the model.
func TestGLMSwitchesMatter(t *testing.T) {
	c := dsref.TinyGLM()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mutants []refcheck.Mutant
	for _, mutate := range []struct {
		name string
		f    func(c *dsref.GLM, m *dsref.GLMModel)
	}{
		{"full rotary", func(c *dsref.GLM, _ *dsref.GLMModel) { c.PartialRotary = 1 }},
		{"no attention biases", func(c *dsref.GLM, _ *dsref.GLMModel) { c.AttentionBias = false }},
		{"no correction bias", func(_ *dsref.GLM, m *dsref.GLMModel) {
			for n, v := range m.W {
				if strings.HasSuffix(n, "e_score_correction_bias") {
					m.W[n] = make([]float64, len(v))
				}
			}
		}},
	} {
		mc := c
		mm, err := mc.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		mutate.f(&mc, mm)
		mm.C = mc
		mutants = append(mutants, refcheck.Mutant{Name: mutate.name, Logits: mm.Logits})
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3, mutants...)
}

// TestGLMConfig reads GLM-4.5-Air's config.json (GQA of 96 query and 8
// key/value heads of 128 with half of each rotated, one dense layer,
// 128 experts; the MTP layer skipped) and Glm4MoeConfig's defaults, and
// refuses what it cannot run, naming the field.
func TestGLMConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "glm_4_5_air", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*deepseek.Model).Options()
	var n int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 106_852_251_264 { // the published 106B
		t.Errorf("%d parameters, want 106,852,251,264", n)
	}
	if s := m.Spec(); !o.GQA || s.Heads != 96 || s.KVHeads != 8 || s.HeadDim != 128 || o.Rope.RotaryDim != 64 || !o.QKVBias || o.OBias || o.QKNorm ||
		o.Experts != 128 || o.TopK != 8 || o.Shared != 1 || o.Groups != 1 || o.RoutedScale != 1 || o.Sparse[0] || !o.Sparse[1] ||
		s.Layers != 46 || fmt.Sprint(s.EOS) != "[151329 151336 151338]" || s.BOS != -1 || o.MTPLayers != 1 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	if r, ok := m.(lm.Skipper).SkipWeight("model.layers.46.eh_proj.weight"); !ok || !strings.Contains(r, "multi-token") {
		t.Errorf("layer 46 not skipped: %q %v", r, ok)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(1) {
		names[w.Name] = true
	}
	for _, want := range []string{"model.layers.1.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.bias", "model.layers.1.mlp.gate.e_score_correction_bias",
		"model.layers.1.mlp.shared_experts.down_proj.weight"} {
		if !names[want] {
			t.Errorf("layer 1 does not read %s", want)
		}
	}
	for _, not := range []string{"model.layers.1.self_attn.o_proj.bias", "model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"} {
		if names[not] {
			t.Errorf("layer 1 reads %s", not)
		}
	}

	// Glm4MoeConfig's defaults: partial_rotary_factor 0.5 unless the
	// config or its rope_parameters says otherwise.
	for _, c := range []struct {
		js  string
		rot int
	}{
		{``, 64},
		{`, "partial_rotary_factor": 1.0`, 128},
		{`, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000, "partial_rotary_factor": 0.25}`, 32},
	} {
		d, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Glm4MoeForCausalLM"], "head_dim": 128`+c.js+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Hidden != 4096 || d.Spec.Heads != 96 || d.Spec.KVHeads != 8 || d.Experts != 128 || d.TopK != 8 || d.MoEIntermediate != 1408 ||
			d.Spec.Layers != 46 || d.Spec.VocabSize != 151552 || d.Eps != 1e-5 || d.QKVBias || d.QKNorm || d.Sparse[0] || !d.Sparse[1] ||
			d.Rope.RotaryDim != c.rot {
			t.Errorf("defaults%s: %+v (rotary dim %d, want %d)", c.js, d, d.Rope.RotaryDim, c.rot)
		}
	}
	q, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Glm4MoeForCausalLM"], "head_dim": 128, "use_qk_norm": true, "attention_bias": false, "first_k_dense_replace": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if !q.QKNorm || q.QKVBias || !q.Sparse[3] || q.Sparse[2] {
		t.Errorf("use_qk_norm and first_k_dense_replace 3: %+v", q)
	}
	base := `"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2`
	for _, bad := range []struct{ js, want string }{
		{`"num_key_value_heads": 3`, "num_key_value_heads"},
		{`"head_dim": null, "hidden_size": 66`, "hidden_size 66 is not a multiple of num_attention_heads 4"},
		{`"n_group": 3`, "n_group 3 must divide n_routed_experts 8"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"scoring_func": "softmax"`, "scoring_func \"softmax\" is not supported"},
		{`"layer_types": ["sliding_attention", "full_attention"]`, "attend in full"},
		{`"partial_rotary_factor": 0.1`, "rotary dim"},
		{`"first_k_dense_replace": -1`, "first_k_dense_replace must not be negative"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
