package inspect_test

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestKimiLinearText: Kimi Linear keeps its layer pattern and its KDA's
// sizes in linear_attn_config (kda_layers 1-based, the rest MLA); inspect
// reads them as the hybrid's linear-attention layers, so that the state
// it sizes is 7 MLA layers' latent cache plus 20 KDA layers' fixed state
// (Kimi-Linear-48B-A3B's sizes).
func TestKimiLinearText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
	"hidden_size": 2304, "num_hidden_layers": 27, "vocab_size": 163840, "num_attention_heads": 32, "num_key_value_heads": 32,
	"head_dim": 72, "num_experts": 256, "num_experts_per_token": 8, "num_shared_experts": 1, "moe_intermediate_size": 1024,
	"intermediate_size": 9216, "kv_lora_rank": 512, "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
	"v_head_dim": 128, "mla_use_nope": true, "first_k_dense_replace": 1,
	"linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
	"short_conv_kernel_size": 4, "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26]}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.FullAttentionLayers != 7 || got.LinearAttentionLayers != 20 || got.MLA == nil || got.MLA.KVLoraRank != 512 {
		t.Errorf("layers %d full, %d linear; MLA %+v", got.FullAttentionLayers, got.LinearAttentionLayers, got.MLA)
	}
	if la := got.Linear; la == nil || la.KeyHeads != 32 || la.ValueHeads != 32 || la.KeyHeadDim != 128 || la.ValueHeadDim != 128 || la.ConvKernel != 4 {
		t.Errorf("linear attention %+v", got.Linear)
	}
	if m := got.MoE; m == nil || m.Experts != 256 || m.ExpertsPerToken != 8 || m.ExpertIntermediate != 1024 {
		t.Errorf("MoE %+v", got.MoE)
	}
	// One sequence of 4096 tokens in bf16: 7 layers × 4096 × 576 × 2
	// bytes of latent cache; 20 layers × (32 heads × 128 × 128 × 4
	// bytes of delta-rule state + 3 × 4096 channels × 3 inputs × 2 bytes
	// of convolution state).
	s := got.StateBytes(1, 4096, 2)
	if want := int64(7 * 4096 * 576 * 2); s.KVCache != want {
		t.Errorf("KV cache %d bytes, want %d", s.KVCache, want)
	}
	if want := int64(20 * (32*128*128*4 + 3*3*4096*2)); s.Recurrent != want {
		t.Errorf("recurrent state %d bytes, want %d", s.Recurrent, want)
	}
}

// TestQwen3OmniText: Qwen3-Omni keeps its thinker's text model in
// thinker_config.text_config; inspect reads its sizes there.
func TestQwen3OmniText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
	"thinker_config": {"model_type": "qwen3_omni_moe_thinker", "text_config": {"model_type": "qwen3_omni_moe_text", "hidden_size": 2048,
	"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 152064,
	"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layers != 48 || got.Hidden != 2048 || got.KVHeads != 4 || got.HeadDim != 128 || got.MoE == nil || got.MoE.Experts != 128 {
		t.Errorf("%+v, MoE %+v", got, got.MoE)
	}
}
