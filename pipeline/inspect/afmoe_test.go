package inspect_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tputool/tputool/loader/config"
	_ "github.com/tputool/tputool/pipeline/afmoe"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestAfmoe inspects an AFMoE whose config.json gives AfmoeConfig's
// defaults (32 layers, every fourth attending
// in full, the first a dense MLP, 64 experts of 1408, top 6, two shared)
// over a header-only checkpoint in the releases' layout (each expert's
// mlp.experts.E.*, the router mlp.router.gate, mlp.expert_bias,
// mlp.shared_experts.*): 19,232,600,000 parameters, 3,678,547,904
// active (pipeline/afmoe's TestDefaults counts them by hand); the
// shared experts are not counted as routed ones.
func TestAfmoe(t *testing.T) {
	dir := t.TempDir()
	raw := []byte(`{"architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "vocab_size": 200192, "hidden_size": 2048,
		"intermediate_size": 6144, "moe_intermediate_size": 1408, "num_hidden_layers": 32, "num_dense_layers": 1,
		"num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 128, "num_experts": 64, "num_experts_per_tok": 6,
		"num_shared_experts": 2, "route_scale": 1.0, "global_attn_every_n_layers": 4, "sliding_window": 1024,
		"max_position_embeddings": 16384, "tie_word_embeddings": false}`)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseModel(raw)
	if err != nil {
		t.Fatal(err)
	}
	model, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rel released
	params := rel.add(lm.Weights(model)...)
	for _, n := range []string{"model.layers.31.mlp.experts.63.down_proj.weight", "model.layers.5.mlp.shared_experts.up_proj.weight",
		"model.layers.1.mlp.expert_bias", "model.layers.0.mlp.gate_proj.weight", "model.layers.2.self_attn.gate_proj.weight", "model.layers.7.post_mlp_layernorm.weight"} {
		if _, ok := rel.shapes[n]; !ok {
			t.Errorf("no %s among the release's names", n)
		}
	}
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 4096, DType: "bf16"})
	const total, active = 19_232_600_000, 3_678_547_904
	if params != total || r.Params.Used != total || r.Params.Active != active {
		t.Errorf("parameters %d, used %d, active %d; want %d, %d active", params, r.Params.Used, r.Params.Active, total, active)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 64 || r.Text.MoE.ExpertsPerToken != 6 {
		t.Errorf("MoE %+v, want 64 experts, 6 per token", r.Text.MoE)
	}
	// Every layer caches the whole context (a sliding layer's window is a
	// mask over the cache, not a smaller one): 32 layers × K and V × 16
	// heads × 128 × 2 bytes × 4096 positions.
	if want := int64(32 * 2 * 16 * 128 * 2 * 4096); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
}
