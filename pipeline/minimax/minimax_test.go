package minimax_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/minimax"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestConfig reads MiniMax-M2.5's config.json (GQA of 48 query and 8
// key/value heads of 128, a rotary_dim of 64, q/k norms over the whole
// projections, 256 experts of 1536, top 8, on all 62 layers; the MTP
// modules skipped), MiniMaxM2Config's defaults, and refuses what it
// cannot run, naming the field.
func TestConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "minimax_m2_5", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	mm := m.(*minimax.Model)
	o := mm.Options()
	var n int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 228_689_764_864 { // the published 230B
		t.Errorf("%d parameters, want 228,689,764,864", n)
	}
	if s := m.Spec(); !o.GQA || s.Heads != 48 || s.KVHeads != 8 || s.HeadDim != 128 || o.Rope.RotaryDim != 64 || !o.QKNorm || !o.QKNormAcross ||
		o.QKVBias || o.Experts != 256 || o.TopK != 8 || o.MoEIntermediate != 1536 || o.Shared != 0 || o.RoutedScale != 1 || !o.NormTopK ||
		!o.Sparse[0] || s.Layers != 62 || s.BOS != 200034 || fmt.Sprint(s.EOS) != "[200020]" {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	names := map[string][]int{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = w.Shape
		for _, p := range w.Parts {
			names[p.Name] = p.Shape
		}
	}
	for name, shape := range map[string][]int{
		"model.layers.0.self_attn.q_norm.weight":                  {6144},
		"model.layers.0.self_attn.k_norm.weight":                  {1024},
		"model.layers.0.block_sparse_moe.gate.weight":             {256, 3072},
		"model.layers.0.block_sparse_moe.e_score_correction_bias": {256},
		"model.layers.0.block_sparse_moe.experts.7.w1.weight":     {1536, 3072},
		"model.layers.0.block_sparse_moe.experts.7.w2.weight":     {3072, 1536},
	} {
		if fmt.Sprint(names[name]) != fmt.Sprint(shape) {
			t.Errorf("%s: shape %v, want %v", name, names[name], shape)
		}
	}
	for _, skip := range []string{"model.layers.62.self_attn.q_proj.weight", "model.mtp_modules.0.enorm.weight", "mtp_transition.weight"} {
		if r, ok := mm.SkipWeight(skip); !ok || !strings.Contains(r, "multi-token") {
			t.Errorf("%s not skipped: %q %v", skip, r, ok)
		}
	}
	if _, ok := mm.SkipWeight("model.layers.61.block_sparse_moe.gate.weight"); ok {
		t.Error("layer 61 skipped")
	}
	if got := mm.RenameWeight("model.layers.3.mlp.e_score_correction_bias"); got != "model.layers.3.block_sparse_moe.e_score_correction_bias" {
		t.Errorf("v5 name read as %s", got)
	}

	// MiniMaxM2Config's defaults: rotary_dim head_dim/2, which overrides a
	// partial_rotary_factor in rope_parameters, as transformers does.
	for _, c := range []struct {
		js  string
		rot int
	}{
		{``, 64},
		{`, "rotary_dim": 128`, 128},
		{`, "rotary_dim": 32, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000, "partial_rotary_factor": 1.0}`, 32},
	} {
		d, err := minimax.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["MiniMaxM2ForCausalLM"]`+c.js+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Hidden != 3072 || d.Spec.Heads != 48 || d.Spec.KVHeads != 8 || d.Spec.HeadDim != 128 || d.Experts != 256 || d.TopK != 8 ||
			d.Spec.Layers != 62 || d.Spec.VocabSize != 200064 || d.Eps != 1e-6 || !d.QKNormAcross || d.Rope.RotaryDim != c.rot {
			t.Errorf("defaults%s: %+v (rotary dim %d, want %d)", c.js, d, d.Rope.RotaryDim, c.rot)
		}
	}
	if d, err := minimax.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["MiniMaxM2ForCausalLM"], "qk_norm_type": "per_head"}`)); err != nil || !d.QKNorm || d.QKNormAcross {
		t.Errorf("per_head: %+v, %v", d, err)
	}
	base := `"architectures": ["MiniMaxM2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 2`
	for _, bad := range []struct{ js, want string }{
		{`"scoring_func": "softmax"`, "scoring_func \"softmax\" is not supported"},
		{`"use_routing_bias": false`, "use_routing_bias is false"},
		{`"shared_intermediate_size": 64`, "shared_intermediate_size 64"},
		{`"attn_type_list": [1, 0]`, "attn_type_list[1] is 0"},
		{`"qk_norm_type": "per_token"`, "qk_norm_type \"per_token\""},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"rotary_dim": 3`, "rotary_dim 3"},
		{`"num_key_value_heads": 3`, "num_key_value_heads"},
		{`"sliding_window": 128`, "sliding_window 128"},
	} {
		_, err := minimax.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
