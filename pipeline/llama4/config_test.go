package llama4_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// counts returns a model's parameters, in all and active per token (each
// sparse layer's experts counted TopK/Experts).
func counts(m lm.Model, topK, experts int) (all, active int64) {
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		all += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * int64(topK) / int64(experts)
		}
		active += k
	}
	return all, active
}

// TestScoutConfig reads Llama 4 Scout's config.json (the multimodal
// wrapper's text_config): 48 layers, all sparse, 16 experts of 8192 and
// top 1, every fourth layer without the rotary and attending in full,
// the others in chunks of 8192, q/k norms, the temperature tuning (its
// attn_temperature_tuning written 4), and llama3 rope scaling. Its sizes give the published 17B active.
func TestScoutConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "llama4_scout", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama4.Model).Options()
	all, active := counts(m, o.TopK, o.Experts)
	if b := float64(all) / 1e9; b < 107 || b > 108.5 { // 109B with the vision tower the text model does not read
		t.Errorf("%.4gB parameters in the text model, want about 107.8B", b)
	}
	if a := float64(active) / 1e9; a < 17 || a > 17.5 {
		t.Errorf("%.4gB active, want about 17.2B", a)
	}
	s := m.Spec()
	if s.Architecture != llama4.Conditional || s.Layers != 48 || s.Heads != 40 || s.KVHeads != 8 || s.HeadDim != 128 || s.Intermediate != 16384 ||
		o.MoEIntermediate != 8192 || o.Experts != 16 || o.TopK != 1 || !o.QKL2Norm || o.TempFloor != 8192 || o.TempScale != 0.1 || o.Chunk != 8192 ||
		!o.RopePairs || s.TieEmbeddings || fmt.Sprint(s.EOS) != "[200001 200007 200008]" || s.BOS != 200000 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	for i := 0; i < s.Layers; i++ {
		nope := (i+1)%4 == 0
		want := lm.KindChunked
		if nope {
			want = lm.KindFull
		}
		if o.NoRope[i] != nope || s.LayerKinds[i] != want || !o.Sparse[i] {
			t.Errorf("layer %d: no rope %v, kind %s, sparse %v; want %v, %s, true", i, o.NoRope[i], s.LayerKinds[i], o.Sparse[i], nope, want)
		}
	}
	lowest := math.Pow(5e5, -126.0/128) / 8 // a wavelength past 8192: divided by the factor
	if f := o.Rope.InvFreq; len(f) != 64 || f[0] != 1 || math.Abs(f[63]-lowest) > 1e-9*lowest {
		t.Errorf("inverse frequencies %v, want llama3's, the lowest %g", f, lowest)
	}
	names := map[string][]int{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = w.Shape
	}
	for name, want := range map[string]string{
		"model.layers.0.feed_forward.router.weight":                  "[16 5120]",
		"model.layers.0.feed_forward.experts.gate_up_proj":           "[16 16384 5120]",
		"model.layers.0.feed_forward.experts.down_proj":              "[16 5120 8192]",
		"model.layers.0.feed_forward.shared_expert.down_proj.weight": "[5120 8192]",
	} {
		if got := fmt.Sprint(names[name]); got != want {
			t.Errorf("%s: shape %s, want %s", name, got, want)
		}
	}
}

// TestMaverickShape resolves Maverick's sizes (128 experts on every
// other layer, dense layers of 16384 between, no q/k norms, no rope
// scaling): 400B parameters, 17B active.
func TestMaverickShape(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
		"text_config": {"model_type": "llama4_text", "num_local_experts": 128, "interleave_moe_layer_step": 2,
		"use_qk_norm": false, "rope_scaling": null, "attn_temperature_tuning": 4, "max_position_embeddings": 1048576}}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama4.Model).Options()
	all, active := counts(m, o.TopK, o.Experts)
	if b := float64(all) / 1e9; b < 400 || b > 401 {
		t.Errorf("%.4gB parameters, want about 400.7B", b)
	}
	if a := float64(active) / 1e9; a < 17 || a > 17.5 {
		t.Errorf("%.4gB active, want about 17.2B", a)
	}
	if o.QKL2Norm || o.TempFloor != 8192 || o.Sparse[0] || !o.Sparse[1] || o.Sparse[46] || !o.Sparse[47] || m.Spec().Intermediate != 16384 {
		t.Errorf("options %+v", o)
	}
}

// TestConfigErrors: bad values are refused naming config.json and the
// field; a null attention_chunk_size leaves every layer attending in full.
func TestConfigErrors(t *testing.T) {
	base := `"architectures": ["Llama4ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
		"num_hidden_layers": 4, "intermediate_size": 32, "intermediate_size_mlp": 48, "vocab_size": 100, "num_local_experts": 4`
	for _, bad := range []struct{ js, want string }{
		{`"num_experts_per_tok": 5`, "num_experts_per_tok 5"},
		{`"interleave_moe_layer_step": 0`, "interleave_moe_layer_step must be positive"},
		{`"moe_layers": [4]`, "moe_layers names layer 4"},
		{`"no_rope_layers": [1, 1, 0]`, "no_rope_layers has 3 entries"},
		{`"no_rope_layers": [1, 2, 1, 0]`, "no_rope_layers[1] is 2"},
		{`"attention_chunk_size": -3`, "attention_chunk_size must be a positive integer"},
		{`"attn_temperature_tuning": "yes"`, "attn_temperature_tuning"},
		{`"floor_scale": 0`, "floor_scale must be positive"},
		{`"layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"]`, "layer_types"},
	} {
		_, err := llama4.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
	for _, c := range []struct {
		wrapper, text string
		tie           bool
	}{
		{`"tie_word_embeddings": true`, `"tie_word_embeddings": false`, false}, // the text model's own field decides
		{`"tie_word_embeddings": true`, `"model_type": "llama4_text"`, true},   // the wrapper's when it has none
		{`"model_type": "llama4"`, `"model_type": "llama4_text"`, false},
	} {
		o, err := llama4.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf(`{"architectures": ["Llama4ForConditionalGeneration"], %s, "text_config": {%s}}`, c.wrapper, c.text)))
		if err != nil {
			t.Fatal(err)
		}
		if o.Spec.TieEmbeddings != c.tie {
			t.Errorf("wrapper {%s}, text {%s}: tied %v, want %v", c.wrapper, c.text, o.Spec.TieEmbeddings, c.tie)
		}
	}
	// Explicit nulls take __post_init__'s values, absent fields the
	// defaults; a longer no_rope_layers is read for the model's layers.
	o, err := llama4.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Llama4ForCausalLM"], "num_key_value_heads": null, "head_dim": null,
		"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "no_rope_layers": [0, 1, 1, 1]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := o.Spec; s.KVHeads != 4 || s.HeadDim != 64 || s.BOS != 1 || fmt.Sprint(o.NoRope) != "[true false]" {
		t.Errorf("nulls: KV heads %d, head_dim %d (want 4 and 256/4), BOS %d (want 1), no rope %v", s.KVHeads, s.HeadDim, s.BOS, o.NoRope)
	}
	if _, err := llama4.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Llama4ForConditionalGeneration"]}`)); err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("a wrapper without text_config: error %v", err)
	}
	o, err = llama4.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf(`{%s, "attention_chunk_size": null, "moe_layers": [], "attn_temperature_tuning": false}`, base)))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.Spec.LayerKinds) != "[full_attention full_attention full_attention full_attention]" || o.Chunk != 0 || o.TempFloor != 0 ||
		fmt.Sprint(o.Sparse) != "[false false false false]" || fmt.Sprint(o.NoRope) != "[false false false true]" {
		t.Errorf("null chunk, no MoE layers, no tuning: %+v", o)
	}
}
