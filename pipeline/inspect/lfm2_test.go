package inspect_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/inspect"
	_ "github.com/tputool/tputool/pipeline/lfm2"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestLFM2MoE inspects LFM2-8B-A1B's config over a checkpoint in the
// release's names (the experts one by one): 8.34B parameters, 1.56B
// active, a KV cache for its 6 attention layers only and, for the other
// 18, the short convolution's last two inputs, whatever the context.
func TestLFM2MoE(t *testing.T) {
	dir, model := realConfig(t, "lfm2_8b_a1b")
	var rel released // the experts one by one (w1, w3, w2), as the release stores them
	params := rel.add(lm.Weights(model)...)
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
	if b := float64(params) / 1e9; b < 8.3 || b > 8.4 || r.Params.Used != params {
		t.Errorf("parameters %d (%.4gB), used %d; want about 8.34B, all used", params, b, r.Params.Used)
	}
	if a := float64(r.Params.Active) / 1e9; a < 1.5 || a > 1.6 {
		t.Errorf("active %.3gB, want about 1.56B", a)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 32 || r.Text.MoE.ExpertsPerToken != 4 {
		t.Errorf("MoE %+v", r.Text.MoE)
	}
	// 6 attention layers × 8 KV heads × 64 × K and V × 2 bytes × 32768.
	if want := int64(6 * 8 * 64 * 2 * 2 * ctxLen); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d (the attention layers only)", r.Memory.KVCache, want)
	}
	// 18 conv layers × [2, 2048] bf16.
	if want := int64(18 * 2 * 2048 * 2); r.Memory.Recurrent != want {
		t.Errorf("recurrent state %d, want %d", r.Memory.Recurrent, want)
	}
	if tx := r.Text; tx.ConvLayers != 18 || tx.FullAttentionLayers != 6 || tx.ConvKernel != 3 {
		t.Errorf("layers: %d conv (kernel %d), %d attention; want 18 (3), 6", tx.ConvLayers, tx.ConvKernel, tx.FullAttentionLayers)
	}
	if st := r.Text.StateBytes(1, ctxLen, 2); st.KVCache != r.Memory.KVCache || st.Recurrent != r.Memory.Recurrent {
		t.Errorf("from the config: KV %d, recurrent %d; from the model: %d, %d", st.KVCache, st.Recurrent, r.Memory.KVCache, r.Memory.Recurrent)
	}
	t.Logf("%.3fB, active %.3fB, weights %d MiB in bf16, KV at %d %d MiB, conv state %d KiB",
		float64(params)/1e9, float64(r.Params.Active)/1e9, r.Memory.Weights>>20, ctxLen, r.Memory.KVCache>>20, r.Memory.Recurrent>>10)
}

// TestLFM2FullAttnIdxs reads LFM2-1.2B's original config, whose
// attention layers full_attn_idxs lists: 10 conv layers and 6 attention
// layers from the config alone, and the model's state agrees; the MLP's
// width is the one the model derives from block_ff_dim.
func TestLFM2FullAttnIdxs(t *testing.T) {
	dir, model := realConfig(t, "lfm2_1_2b")
	var rel released
	rel.add(lm.Weights(model)...)
	r := rel.inspect(t, dir, inspect.Options{Batch: 2, Context: 4096, DType: "bf16"})
	if tx := r.Text; tx.ConvLayers != 10 || tx.FullAttentionLayers != 6 || tx.TiedEmbeddings != nil {
		t.Errorf("layers: %d conv, %d attention, tied %v; want 10, 6, unsaid", tx.ConvLayers, tx.FullAttentionLayers, tx.TiedEmbeddings)
	}
	if st := r.Text.StateBytes(2, 4096, 2); st.KVCache != r.Memory.KVCache || st.Recurrent != r.Memory.Recurrent || st.Recurrent != 10*2*2*2048*2 {
		t.Errorf("from the config: KV %d, recurrent %d; from the model: %d, %d", st.KVCache, st.Recurrent, r.Memory.KVCache, r.Memory.Recurrent)
	}
	if b := float64(r.Params.Used) / 1e9; b < 1.16 || b > 1.18 {
		t.Errorf("%.4gB parameters, want 1.17B", b)
	}
	// block_ff_dim 12288 runs 8192 wide (Lfm2MLP's 2/3, rounded).
	if r.Text.Intermediate != 8192 || !slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.Contains(n, "8192 wide") && strings.Contains(n, "config.json has no intermediate_size")
	}) {
		t.Errorf("intermediate %d, notes %q; want 8192 and a note", r.Text.Intermediate, r.Notes)
	}
}
