package lm_test

import (
	"os"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader/config"
	_ "github.com/tputool/tputool/pipeline/baichuan"
	_ "github.com/tputool/tputool/pipeline/deepseek"
	_ "github.com/tputool/tputool/pipeline/ernie"
	_ "github.com/tputool/tputool/pipeline/gemma3"
	_ "github.com/tputool/tputool/pipeline/gpt2"
	_ "github.com/tputool/tputool/pipeline/granite"
	_ "github.com/tputool/tputool/pipeline/internlm2"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/minicpm"
	_ "github.com/tputool/tputool/pipeline/minimax"
	_ "github.com/tputool/tputool/pipeline/mistral"
	_ "github.com/tputool/tputool/pipeline/mixtral"
	_ "github.com/tputool/tputool/pipeline/olmoe"
	_ "github.com/tputool/tputool/pipeline/opt"
	_ "github.com/tputool/tputool/pipeline/qwen1"
	_ "github.com/tputool/tputool/pipeline/qwen2"
	_ "github.com/tputool/tputool/pipeline/qwen3"
	_ "github.com/tputool/tputool/pipeline/qwen3moe"
)

// FuzzNewModel resolves arbitrary config.json bytes with every registered
// architecture. The properties: no panic and no runaway allocation (the
// fuzzer's worker would die), and an accepted config yields a consistent
// Spec whose weight list and layer state can be enumerated.
func FuzzNewModel(f *testing.F) {
	for _, p := range []string{
		"../../testdata/stories260K-hf/config.json",
		"../llama/testdata/Llama-3.2-1B.config.json",
		"../gemma3/testdata/gemma-3-1b-it.config.json",
		"../mistral/testdata/Mistral-7B-v0.3.config.json",
		"../qwen2/testdata/Qwen2.5-0.5B.config.json",
		"../qwen3/testdata/Qwen3-0.6B.config.json",
		"../../testdata/configs/qwen3_5_9b/config.json",
		"../../testdata/configs/qwen3_moe_30b_a3b/config.json",
		"../../testdata/configs/mixtral_8x7b/config.json",
		"../../testdata/configs/deepseek_v3/config.json",
		"../../testdata/configs/deepseek_v2_lite/config.json",
		"../../testdata/configs/glm_4_5_air/config.json",
		"../../testdata/configs/minimax_m2_5/config.json",
		"../../testdata/configs/minimax_text_01/config.json",
		"../../testdata/configs/olmoe_1b_7b/config.json",
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":1e12}`))
	f.Add([]byte(`{"architectures":["Qwen3_5ForConditionalGeneration"],"text_config":{"layer_types":["linear_attention"],"num_hidden_layers":1}}`))
	f.Add([]byte(`{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next","num_hidden_layers":4,"num_experts":8,` +
		`"num_experts_per_tok":2,"decoder_sparse_step":2,"mlp_only_layers":[0],"norm_topk_prob":false,"num_nextn_predict_layers":1}`))
	f.Add([]byte(`{"architectures":["Glm4MoeLiteForCausalLM"],"num_hidden_layers":3,"mlp_layer_types":["dense","sparse","sparse"],"q_lora_rank":null}`))
	f.Add([]byte(`{"architectures":["MiniMaxM2ForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"head_dim":16,"rotary_dim":8,"num_local_experts":8,"num_experts_per_tok":2,"intermediate_size":32,"qk_norm_type":"per_layer"}`))
	f.Add([]byte(`{"architectures":["AXK1ForCausalLM"],"num_hidden_layers":3,"hidden_size":64,"num_attention_heads":4,"n_routed_experts":8,` +
		`"num_experts_per_tok":2,"n_group":2,"topk_group":1,"first_k_dense_replace":1,"kv_lora_rank":16,"q_lora_rank":24}`))
	f.Add([]byte(`{"architectures":["LongcatFlashForCausalLM"],"num_layers":2,"hidden_size":64,"num_attention_heads":4,"q_lora_rank":32,` +
		`"kv_lora_rank":16,"qk_nope_head_dim":16,"qk_rope_head_dim":8,"v_head_dim":16,"n_routed_experts":8,"zero_expert_num":4,"moe_topk":3}`))
	f.Add([]byte(`{"architectures":["Ernie4_5_VLMoeForConditionalGeneration"],"num_hidden_layers":3,"hidden_size":64,"num_attention_heads":4,` +
		`"num_key_value_heads":2,"moe_num_experts":[8,8],"moe_k":2,"moe_intermediate_size":[32,16],"moe_layer_start_index":[1,1],"moe_layer_end_index":[3,2]}`))
	f.Add([]byte(`{"architectures":["ExaoneMoEForCausalLM"],"num_hidden_layers":4,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"sliding_window":8,"sliding_window_pattern":"LLLG","num_experts":8,"num_experts_per_tok":2,"mlp_layer_types":["dense","sparse","sparse","sparse"]}`))
	f.Add([]byte(`{"architectures":["SolarOpenForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"n_routed_experts":8,"num_experts_per_tok":2}`))
	f.Add([]byte(`{"architectures":["MiniMaxText01ForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"head_dim":16,"rotary_dim":8,"num_local_experts":8,"num_experts_per_tok":2,"intermediate_size":32,"attn_type_list":[0,1],"postnorm":true}`))
	f.Add([]byte(`{"architectures":["Glm4MoeForCausalLM"],"num_hidden_layers":3,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"head_dim":16,"partial_rotary_factor":0.5,"n_routed_experts":8,"num_experts_per_tok":2,"first_k_dense_replace":1}`))
	f.Add([]byte(`{"architectures":["DeepseekV2ForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"n_routed_experts":8,` +
		`"num_experts_per_tok":2,"topk_method":"group_limited_greedy","n_group":8,"topk_group":2,"q_lora_rank":null}`))
	f.Add([]byte(`{"architectures":["Ernie4_5_MoeForCausalLM"],"num_hidden_layers":4,"hidden_size":64,"num_attention_heads":4,` +
		`"num_key_value_heads":2,"moe_num_experts":8,"moe_k":2,"moe_layer_start_index":1,"moe_layer_interval":2,"moe_layer_end_index":2}`))
	f.Add([]byte(`{"architectures":["Dots1ForCausalLM"],"num_hidden_layers":3,"hidden_size":64,"num_attention_heads":4,"n_routed_experts":8,` +
		`"num_experts_per_tok":2,"n_shared_experts":1,"sliding_window":16,"max_window_layers":1,"first_k_dense_replace":1}`))
	f.Add([]byte(`{"architectures":["GraniteMoeForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,` +
		`"intermediate_size":32,"num_local_experts":8,"num_experts_per_tok":2,"embedding_multiplier":12,"attention_multiplier":0.0625,` +
		`"residual_multiplier":0.22,"logits_scaling":6}`))
	// The forty-first session's families and options.
	f.Add([]byte(`{"architectures":["InternLM2ForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,` +
		`"num_key_value_heads":2,"intermediate_size":96,"bias":true,"rope_scaling":{"type":"dynamic","factor":2.0}}`))
	f.Add([]byte(`{"architectures":["BaichuanForCausalLM"],"num_hidden_layers":2,"hidden_size":48,"num_attention_heads":6,` +
		`"intermediate_size":96,"vocab_size":125696,"model_max_length":64}`))
	f.Add([]byte(`{"architectures":["MiniCPMForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"scale_emb":12,` +
		`"scale_depth":1.4,"dim_model_base":16,"max_position_embeddings":64,"sparse_config":{"dense_len":32},` +
		`"rope_scaling":{"rope_type":"longrope","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2],"original_max_position_embeddings":32}}`))
	f.Add([]byte(`{"architectures":["QWenLMHeadModel"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"kv_channels":16,` +
		`"intermediate_size":96,"rotary_pct":0.5,"seq_length":32,"no_bias":false}`))
	f.Add([]byte(`{"architectures":["OPTForCausalLM"],"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"ffn_dim":96,` +
		`"do_layer_norm_before":false,"word_embed_proj_dim":32,"max_position_embeddings":64}`))
	f.Add([]byte(`{"architectures":["GPT2LMHeadModel"],"n_layer":2,"n_embd":64,"n_head":4,"n_positions":64,"scale_attn_by_inverse_layer_idx":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := config.ParseModel(b)
		if err != nil {
			return
		}
		m, err := lm.New(cfg)
		if err != nil {
			return
		}
		s := m.Spec()
		if s.Layers <= 0 || s.Hidden <= 0 || s.VocabSize <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 {
			t.Fatalf("accepted a spec with non-positive sizes: %+v", s)
		}
		if len(s.LayerKinds) != s.Layers {
			t.Fatalf("%d layer kinds for %d layers", len(s.LayerKinds), s.Layers)
		}
		_ = lm.Weights(m)
		for i := 0; i < s.Layers; i++ {
			_ = m.LayerKind(i)
			_ = m.LayerState(i, 1, 8)
		}
		_, _ = lm.StateBytes(m, 1, 8, dtypes.Float32, dtypes.InvalidDType)
	})
}
