package inspect_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	_ "github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
)

// graniteStored is the name a Granite 4.0-H release stores a weight
// under: GraniteMoe's router.layer and input_linear/output_linear stacks
// where the model reads qwen3moe's names.
func graniteStored(name string) string {
	for model, stored := range map[string]string{
		"block_sparse_moe.gate.weight":          "block_sparse_moe.router.layer.weight",
		"block_sparse_moe.experts.gate_up_proj": "block_sparse_moe.input_linear.weight",
		"block_sparse_moe.experts.down_proj":    "block_sparse_moe.output_linear.weight",
	} {
		if strings.HasSuffix(name, model) {
			return strings.TrimSuffix(name, model) + stored
		}
	}
	return name
}

// TestGraniteHTiny inspects granite-4.0-h-tiny's config over a checkpoint
// in the release's names: 6.94B parameters, 1.47B active (1.31B besides
// the tied embedding; the release says 1B), a KV cache for its 4 attention layers only, and a fixed
// Mamba-2 state for the other 36, whatever the context.
func TestGraniteHTiny(t *testing.T) {
	dir, model := realConfig(t, "granite_4_0_h_tiny")
	var rel released
	var params int64
	for _, w := range lm.Weights(model) {
		name := graniteStored(w.Name)
		rel.names = append(rel.names, name)
		if rel.shapes == nil {
			rel.shapes = map[string][]int{}
		}
		rel.shapes[name] = w.Shape
		params += elements(w.Shape)
	}
	writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), rel.names, rel.shapes)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ctxLen = 32768
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: ctxLen, DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	if b := float64(params) / 1e9; b < 6.9 || b > 7.0 || r.Params.Used != params {
		t.Errorf("parameters %d (%.4gB), used %d; want about 6.94B, all used", params, b, r.Params.Used)
	}
	// The tied embedding is also the head, so it counts as active.
	if a := float64(r.Params.Active) / 1e9; a < 1.4 || a > 1.5 {
		t.Errorf("active %.3gB, want about 1.47B", a)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 64 || r.Text.MoE.ExpertsPerToken != 6 {
		t.Errorf("MoE %+v", r.Text.MoE)
	}
	// 4 attention layers × 4 KV heads × 128 × K and V × 2 bytes × 32768.
	if want := int64(4 * 4 * 128 * 2 * 2 * ctxLen); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d (the attention layers only)", r.Memory.KVCache, want)
	}
	// 36 Mamba layers × (conv [3, 3072+2·128] bf16 + SSM [48, 64, 128] f32).
	if want := int64(36 * (3*(3072+256)*2 + 48*64*128*4)); r.Memory.Recurrent != want {
		t.Errorf("recurrent state %d, want %d", r.Memory.Recurrent, want)
	}
	if tx := r.Text; tx.MambaLayers != 36 || tx.FullAttentionLayers != 4 {
		t.Errorf("layers: %d Mamba-2, %d attention; want 36, 4", tx.MambaLayers, tx.FullAttentionLayers)
	}
	// The config's own reading (what inspect shows for a model it cannot
	// build) gives the same state.
	if st := r.Text.StateBytes(1, ctxLen, 2); st.KVCache != r.Memory.KVCache || st.Recurrent != r.Memory.Recurrent {
		t.Errorf("from the config: KV %d, recurrent %d; from the model: %d, %d", st.KVCache, st.Recurrent, r.Memory.KVCache, r.Memory.Recurrent)
	}
	t.Logf("%.3fB, active %.3fB (%.3fB less the embedding), weights %d MiB in bf16, KV at %d %d MiB, Mamba state %d MiB",
		float64(params)/1e9, float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>20, ctxLen,
		r.Memory.KVCache>>20, r.Memory.Recurrent>>20)
}
