package inspect_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/mixtral"
)

// TestMixtral8x7B inspects Mixtral 8x7B's config over a header-only
// checkpoint in the release's layout (the experts one by one,
// block_sparse_moe.experts.E.w1/w2/w3): 46.7B parameters, 12.9B active
// (two of eight experts), 87 GiB of bf16 weights.
func TestMixtral8x7B(t *testing.T) {
	dir, model := realConfig(t, "mixtral_8x7b")
	var rel released
	params := rel.add(lm.Weights(model)...)
	if _, ok := rel.shapes["model.layers.31.block_sparse_moe.experts.7.w2.weight"]; !ok || len(rel.names) != 2+1+32*(4+2+1+8*3) {
		t.Fatalf("%d tensors, want the release's 995 with block_sparse_moe.experts.E.w1/w2/w3", len(rel.names))
	}
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	const total, active = 46_702_792_704, 12_879_925_248 // two of the eight experts' 3·14336·4096 a layer
	if params != total || r.Params.Used != total || r.Params.Active != active {
		t.Errorf("parameters %d, used %d, active %d; want %d, %d active", params, r.Params.Used, r.Params.Active, total, active)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 8 || r.Text.MoE.ExpertsPerToken != 2 {
		t.Errorf("MoE %+v, want 8 experts, 2 per token", r.Text.MoE)
	}
	// KV cache at 32768 positions: 32 layers × K and V × 8 heads × 128 × 2 bytes.
	if want := int64(32 * 2 * 8 * 128 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	t.Logf("%.3fB, active %.3fB, weights %d GiB in bf16, KV at 32768 %d MiB", float64(params)/1e9, float64(r.Params.Active)/1e9,
		r.Memory.Weights>>30, r.Memory.KVCache>>20)
	for _, f := range r.Fit {
		t.Logf("%s: fits %v on %d chips (TP %d), %d GiB a chip; %s", f.Generation, f.Fits, f.Chips, f.TP, f.PerChipBytes>>30, f.Reason)
	}
}
