package inspect_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/phi3"
)

// TestPhi35MoE inspects Phi-3.5-MoE's config over a header-only
// checkpoint in the release's layout (LayerNorm weights and biases, q, k,
// v and o with biases, block_sparse_moe.experts.E.w1/w2/w3, lm_head with
// a bias): 41.9B parameters, 6.6B active (two of sixteen experts).
func TestPhi35MoE(t *testing.T) {
	dir, model := realConfig(t, "phi_3_5_moe")
	var rel released
	params := rel.add(lm.Weights(model)...)
	for _, n := range []string{"model.layers.31.block_sparse_moe.experts.15.w2.weight", "model.layers.0.input_layernorm.bias", "model.norm.bias", "lm_head.bias", "model.layers.3.self_attn.o_proj.bias"} {
		if _, ok := rel.shapes[n]; !ok {
			t.Errorf("no %s among the release's names", n)
		}
	}
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	const total, active = 41_873_153_344, 6_640_999_744
	if params != total || r.Params.Used != total || r.Params.Active != active {
		t.Errorf("parameters %d, used %d, active %d; want %d, %d active", params, r.Params.Used, r.Params.Active, total, active)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 16 || r.Text.MoE.ExpertsPerToken != 2 {
		t.Errorf("MoE %+v, want 16 experts, 2 per token", r.Text.MoE)
	}
	// KV cache at 32768 positions (the window 131072 is wider): 32 layers × K and V × 8 heads × 128 × 2 bytes.
	if want := int64(32 * 2 * 8 * 128 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
}
