package inspect_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	_ "github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestDeepSeekV3 inspects DeepSeek-V3's config (its FP8
// quantization_config dropped: the header-only checkpoint is bf16, as the
// community's bf16 conversions are) over a checkpoint in the release's
// layout, experts one by one, plus its multi-token-prediction layer 61,
// which is skipped: 671B parameters, about 37B active, and a KV cache of
// the latent, 576 values a token and layer, keys and values at once.
func TestDeepSeekV3(t *testing.T) {
	dir, model := realConfig(t, "deepseek_v3")
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "quantization_config")
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var rel released
	params := rel.add(lm.Weights(model)...)
	rel.add( // two of the MTP layer's
		lm.WeightSpec{Name: "model.layers.61.enorm.weight", Shape: []int{7168}},
		lm.WeightSpec{Name: "model.layers.61.eh_proj.weight", Shape: []int{7168, 14336}})
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 671_026_419_200 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 671,026,419,200", params, r.Params.Used)
	}
	if a := float64(r.Params.Active) / 1e9; a < 36 || a > 39 {
		t.Errorf("active %.2fB, want about 37B", a)
	}
	if r.Text.MLA == nil || r.Text.MLA.KVLoraRank != 512 || r.Text.KVHeads != 1 || r.Text.HeadDim != 192 {
		t.Errorf("attention %+v, MLA %+v", r.Text, r.Text.MLA)
	}
	// 61 layers × the latent and rope key (576), one cache, × 2 bytes × 32768.
	if want := int64(61 * 576 * 2 * 32768); r.Memory.KVCache != want || r.Text.StateBytes(1, 32768, 2).KVCache != want {
		t.Errorf("KV cache %d (from the config alone %d), want %d", r.Memory.KVCache, r.Text.StateBytes(1, 32768, 2).KVCache, want)
	}
	t.Logf("%.2fB, active %.2fB, weights %d GiB in bf16, KV at 32768 %d MiB; notes %q", float64(params)/1e9, float64(r.Params.Active)/1e9,
		r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Notes)
}

// TestDeepSeekV32 inspects DeepSeek-V3.2's config the same way: V3's
// model plus an indexer a layer (671.88B parameters), and a cache of the
// latent and the indexer's key, 576 + 128 values a token and layer.
func TestDeepSeekV32(t *testing.T) {
	dir, model := realConfig(t, "deepseek_v32")
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "quantization_config")
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var rel released
	params := rel.add(lm.Weights(model)...)
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 671_877_944_064 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 671,877,944,064", params, r.Params.Used)
	}
	if r.Text.MLA == nil || r.Text.MLA.IndexHeadDim != 128 {
		t.Errorf("MLA %+v", r.Text.MLA)
	}
	if want := int64(61 * (576 + 128) * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	// GLM-5's config names its class's model_type; its indexer's key is
	// GlmMoeDsaConfig's 128 wide when the config leaves it out.
	cfg5, err := config.ParseModel([]byte(`{"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "hidden_size": 6144,
		"num_hidden_layers": 78, "num_attention_heads": 64, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192}`))
	if err != nil {
		t.Fatal(err)
	}
	t5, err := inspect.TextConfig(cfg5)
	if err != nil || t5.MLA == nil || t5.MLA.IndexHeadDim != 128 || t5.StateBytes(1, 1000, 2).KVCache != 78*(576+128)*2*1000 {
		t.Errorf("GLM-5: %+v, %v", t5, err)
	}
}

// TestGLM45Air inspects GLM-4.5-Air's config over a checkpoint in the
// release's layout (experts one by one, biases on q/k/v, the MTP layer
// 46, skipped): 106.85B parameters, about 12B active as published, and
// a grouped-query KV cache of 8 heads of 128.
func TestGLM45Air(t *testing.T) {
	dir, model := realConfig(t, "glm_4_5_air")
	var rel released
	params := rel.add(lm.Weights(model)...)
	rel.add( // two of the MTP layer's
		lm.WeightSpec{Name: "model.layers.46.enorm.weight", Shape: []int{4096}},
		lm.WeightSpec{Name: "model.layers.46.eh_proj.weight", Shape: []int{4096, 8192}})
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 106_852_251_264 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 106,852,251,264", params, r.Params.Used)
	}
	if a := float64(r.Params.ActiveLessEmbedding) / 1e9; a < 12 || a > 13.5 {
		t.Errorf("active %.2fB (less the input embedding), want about 12B", a)
	}
	if r.Text.MLA != nil || r.Text.KVHeads != 8 || r.Text.HeadDim != 128 || r.Text.MoE == nil || r.Text.MoE.Experts != 128 {
		t.Errorf("text %+v, MoE %+v", r.Text, r.Text.MoE)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.Contains(n, "multi-token-prediction head is loaded by generate --mtp")
	}) {
		t.Errorf("notes %q: the MTP layer not named as the head --mtp loads", r.Notes)
	}
	// 46 layers × 8 heads × 128 × K and V × 2 bytes × 32768.
	if want := int64(46 * 8 * 128 * 2 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	t.Logf("%.2fB, active %.2fB (%.2fB less the input embedding), weights %d GiB in bf16, KV at 32768 %d MiB; notes %q", float64(params)/1e9,
		float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Notes)
}

// TestMiniMaxM25 inspects MiniMax-M2.5's config over a checkpoint in the
// release's layout (block_sparse_moe, experts one by one as w1/w2/w3, q/k
// norms over whole projections, and two of its multi-token-prediction
// tensors, skipped): 228.69B parameters, about 10B active as published,
// and a grouped-query KV cache of 8 heads of 128.
func TestMiniMaxM25(t *testing.T) {
	dir, model := realConfig(t, "minimax_m2_5")
	var rel released
	params := rel.add(lm.Weights(model)...)
	rel.add(
		lm.WeightSpec{Name: "model.mtp_modules.0.enorm.weight", Shape: []int{3072}},
		lm.WeightSpec{Name: "model.layers.62.self_attn.q_proj.weight", Shape: []int{6144, 3072}})
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 228_689_764_864 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 228,689,764,864", params, r.Params.Used)
	}
	if a := float64(r.Params.ActiveLessEmbedding) / 1e9; a < 9.5 || a > 11 {
		t.Errorf("active %.2fB (less the input embedding), want about 10B", a)
	}
	if r.Text.KVHeads != 8 || r.Text.HeadDim != 128 || r.Text.MoE == nil || r.Text.MoE.Experts != 256 || r.Text.MoE.ExpertsPerToken != 8 {
		t.Errorf("text %+v, MoE %+v", r.Text, r.Text.MoE)
	}
	// 62 layers × 8 heads × 128 × K and V × 2 bytes × 32768.
	if want := int64(62 * 8 * 128 * 2 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	t.Logf("%.2fB, active %.2fB (%.2fB less the input embedding), weights %d GiB in bf16, KV at 32768 %d MiB; notes %q", float64(params)/1e9,
		float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Notes)
}

// TestMiniMaxText01 inspects MiniMax-Text-01's config over a checkpoint
// in the release's layout (qkv_proj, output_gate, norm and out_proj in
// the lightning layers; experts one by one as w1/w2/w3): 456.09B
// parameters, 47.17B active less the input embedding (the card's 45.9B
// leaves out the head's 1.23B too), a KV cache for the 10
// softmax layers alone, and the lightning layers' state of 64 × 128 ×
// 128 float32 each, whatever the context.
func TestMiniMaxText01(t *testing.T) {
	dir, model := realConfig(t, "minimax_text_01")
	var rel released
	params := rel.add(lm.Weights(model)...)
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 456_089_655_296 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 456,089,655,296", params, r.Params.Used)
	}
	if a := float64(r.Params.ActiveLessEmbedding) / 1e9; a < 47.1 || a > 47.2 {
		t.Errorf("active %.2fB (less the input embedding), want 47.17B", a)
	}
	if r.Text.FullAttentionLayers != 10 || r.Text.LinearAttentionLayers != 70 || r.Text.KVHeads != 8 || r.Text.HeadDim != 128 ||
		r.Text.MoE == nil || r.Text.MoE.Experts != 32 || r.Text.MoE.ExpertsPerToken != 2 {
		t.Errorf("text %+v, MoE %+v", r.Text, r.Text.MoE)
	}
	// 10 layers × 8 heads × 128 × K and V × 2 bytes × 32768; 70 layers
	// × 64 × 128 × 128 × 4 bytes.
	if want := int64(10 * 8 * 128 * 2 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	if want := int64(70 * 64 * 128 * 128 * 4); r.Memory.Recurrent != want {
		t.Errorf("recurrent state %d, want %d", r.Memory.Recurrent, want)
	}
	t.Logf("%.2fB, active %.2fB (%.2fB less the input embedding), weights %d GiB in bf16, KV at 32768 %d MiB, recurrent %d MiB; notes %q", float64(params)/1e9,
		float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Memory.Recurrent>>20, r.Notes)

	// The releases' names, with and without model_type: attn_type_list
	// gives the kinds; without it their architectures are softmax
	// throughout, MiniMaxForCausalLM's alternate.
	for _, c := range []struct {
		js              string
		full, lightning int
	}{
		{`"architectures": ["MiniMaxM1ForCausalLM"], "model_type": "minimax_m1", "attn_type_list": [0, 0, 0, 1]`, 1, 3},
		{`"architectures": ["MiniMaxText01ForCausalLM"], "attn_type_list": [0, 1, 0, 1]`, 2, 2},
		{`"architectures": ["MiniMaxText01ForCausalLM"]`, 4, 0},
		{`"architectures": ["MiniMaxForCausalLM"]`, 2, 2},
	} {
		cfg, err := config.ParseModel([]byte(`{` + c.js + `, "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := inspect.TextConfig(cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.js, err)
		}
		if got.FullAttentionLayers != c.full || got.LinearAttentionLayers != c.lightning || (c.lightning > 0 && (got.Linear == nil || got.Linear.KeyHeads != 4 || got.Linear.KeyHeadDim != 16)) {
			t.Errorf("%s: %d full, %d linear (%+v), want %d and %d", c.js, got.FullAttentionLayers, got.LinearAttentionLayers, got.Linear, c.full, c.lightning)
		}
	}
}

// TestDeepSeekV2Lite inspects DeepSeek-V2-Lite's config over a checkpoint
// in the release's layout (q_proj, no correction bias, experts one by
// one): 15.71B parameters, about 2.4B active as published, and the latent
// cache of 576 a token and layer.
func TestDeepSeekV2Lite(t *testing.T) {
	dir, model := realConfig(t, "deepseek_v2_lite")
	var rel released
	params := rel.add(lm.Weights(model)...)
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if params != 15_706_484_224 || r.Params.Used != params {
		t.Errorf("parameters %d, used %d; want 15,706,484,224", params, r.Params.Used)
	}
	if a := float64(r.Params.ActiveLessEmbedding) / 1e9; a < 2.3 || a > 2.6 {
		t.Errorf("active %.2fB (less the input embedding), want about 2.4B", a)
	}
	if r.Text.MLA == nil || r.Text.MLA.KVLoraRank != 512 || r.Text.KVHeads != 1 || r.Text.MoE == nil || r.Text.MoE.Experts != 64 || r.Text.MoE.ExpertsPerToken != 6 {
		t.Errorf("text %+v, MLA %+v, MoE %+v", r.Text, r.Text.MLA, r.Text.MoE)
	}
	// 27 layers × the latent and rope key (576), one cache, × 2 bytes × 32768.
	if want := int64(27 * 576 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	t.Logf("%.2fB, active %.2fB (%.2fB less the input embedding), weights %d GiB in bf16, KV at 32768 %d MiB; notes %q", float64(params)/1e9,
		float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Notes)
}

// TestLongcatText reads LongCat-Flash's config as its attention
// sublayers, two a layer, each with a latent cache, whatever
// num_hidden_layers says; and a MiniMax config by its class where
// model_type and the class disagree.
func TestLongcatText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "num_layers": 28,
		"hidden_size": 6144, "num_attention_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
		"v_head_dim": 128, "n_routed_experts": 512, "moe_topk": 12, "expert_ffn_hidden_size": 2048, "ffn_hidden_size": 12288}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layers != 56 || got.FullAttentionLayers != 56 || got.MLA == nil || got.MoE == nil || got.MoE.Experts != 512 || got.MoE.ExpertsPerToken != 12 || got.MoE.ExpertIntermediate != 2048 {
		t.Errorf("text %+v, MoE %+v", got, got.MoE)
	}
	// 56 latent caches of 512 + 64 a token, bf16, at 1000 tokens.
	if s := got.StateBytes(1, 1000, 2); s.KVCache != 56*576*2*1000 {
		t.Errorf("KV cache %d, want %d", s.KVCache, 56*576*2*1000)
	}

	cfg, err = config.ParseModel([]byte(`{"architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax", "num_hidden_layers": 4,
		"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = inspect.TextConfig(cfg); err != nil || got.FullAttentionLayers != 4 || got.LinearAttentionLayers != 0 {
		t.Errorf("MiniMaxText01ForCausalLM without attn_type_list: %+v, %v (want every layer softmax, as pipeline/minimax reads it)", got, err)
	}
}

// TestErnieVLText reads an ERNIE 4.5 VL config's per-modality lists, the
// release's and transformers', as its text model's: the text experts'
// count and width.
func TestErnieVLText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "model_type": "ernie4_5_moe_vl",
		"num_hidden_layers": 28, "hidden_size": 2560, "num_attention_heads": 20, "num_key_value_heads": 4, "moe_num_experts": [64, 64],
		"moe_intermediate_size": [1536, 512], "moe_k": 6, "moe_num_shared_experts": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.MoE == nil || got.MoE.Experts != 64 || got.MoE.ExpertIntermediate != 1536 || got.MoE.ExpertsPerToken != 6 {
		t.Errorf("MoE %+v, want the text experts' (64 of 1536, 6 a token)", got.MoE)
	}
	// transformers' config: text_config, its moe_intermediate_size a list.
	cfg, err = config.ParseModel([]byte(`{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "model_type": "ernie4_5_vl_moe",
		"text_config": {"model_type": "ernie4_5_vl_moe_text", "num_hidden_layers": 28, "hidden_size": 2560, "num_attention_heads": 20,
		"num_key_value_heads": 4, "moe_num_experts": 64, "moe_intermediate_size": [1536, 512], "moe_k": 6}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = inspect.TextConfig(cfg); err != nil || got.MoE == nil || got.MoE.ExpertIntermediate != 1536 {
		t.Errorf("transformers' config: MoE %+v, %v", got.MoE, err)
	}
}
