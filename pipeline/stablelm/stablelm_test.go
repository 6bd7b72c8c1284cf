package stablelm_test

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/stablelm"
)

func options(t *testing.T, js string) (llama.Options, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		return llama.Options{}, err
	}
	return m.(*llama.Model).Options(), nil
}

// TestStableLM2: StableLM 2 1.6B's config (24 layers, hidden 2048, 32
// heads of 64, MLP 5632, vocabulary 100352, q/k/v biases, the rotary over
// a quarter of each head, untied) has 1,644,515,328 parameters, the
// card's 1.6B; use_parallel_residual drops post_attention_layernorm;
// StableLmConfig's 32 KV heads and bos/eos 0 apply when absent.
func TestStableLM2(t *testing.T) {
	o, err := options(t, `{"architectures": ["StableLmForCausalLM"], "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
		"layer_norm_eps": 1e-05, "max_position_embeddings": 4096, "model_type": "stablelm", "num_attention_heads": 32,
		"num_hidden_layers": 24, "num_key_value_heads": 32, "partial_rotary_factor": 0.25, "qk_layernorm": false, "rope_theta": 10000,
		"tie_word_embeddings": false, "use_parallel_residual": false, "use_qkv_bias": true, "vocab_size": 100352}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Rope.RotaryDim != 16 || !o.QKVBias || o.OBias || !o.LayerNorm || o.Parallel || o.Norms != llama.LlamaNorms {
		t.Errorf("options %+v", o)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 1_644_515_328 {
		t.Errorf("%d parameters, want 1,644,515,328", n)
	}
	p, err := options(t, `{"architectures": ["StableLmForCausalLM"], "num_attention_heads": 64, "use_parallel_residual": true}`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range llama.NewModel(p).LayerWeights(0) {
		names = append(names, w.Name)
	}
	if !p.Parallel || slices.Contains(names, "model.layers.0.post_attention_layernorm.weight") || p.Spec.KVHeads != 32 || p.Spec.BOS != 0 || !slices.Equal(p.Spec.EOS, []int{0}) {
		t.Errorf("parallel and defaults: parallel %v, %d KV heads, bos %d, eos %v, layer 0: %v", p.Parallel, p.Spec.KVHeads, p.Spec.BOS, p.Spec.EOS, names)
	}
	// StableLM 2 12B (40 layers, hidden 5120, 32 heads of 160 over 8, MLP
	// 13824, vocabulary 100352, untied, parallel, qk_layernorm): its
	// 12,143,185,920 parameters are the card's 12.1B, the q/k LayerNorms
	// read one tensor a head.
	o12, err := options(t, `{"architectures": ["StableLmForCausalLM"], "hidden_size": 5120, "intermediate_size": 13824,
		"num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "partial_rotary_factor": 0.25,
		"qk_layernorm": true, "use_parallel_residual": true, "use_qkv_bias": false, "vocab_size": 100352, "tie_word_embeddings": false}`)
	if err != nil {
		t.Fatal(err)
	}
	m12 := llama.NewModel(o12)
	if n := lmckpt.Params(m12); n != 12_143_185_920 {
		t.Errorf("StableLM 2 12B: %d parameters, want 12,143,185,920", n)
	}
	parts := 0
	for _, w := range m12.LayerWeights(0) {
		if w.Name == "model.layers.0.self_attn.q_norm.weight" || w.Name == "model.layers.0.self_attn.k_norm.weight" {
			parts += len(w.Parts)
		}
	}
	if !o12.QKLayerNorm || !o12.QKLayerNormPerHead || parts != 40 {
		t.Errorf("qk_layernorm: QKLayerNorm %v, per head %v, %d parts, want 32 + 8", o12.QKLayerNorm, o12.QKLayerNormPerHead, parts)
	}
}
