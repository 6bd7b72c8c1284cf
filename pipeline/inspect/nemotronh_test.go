package inspect_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/nemotronh"
)

// TestNemotron3Nano inspects Nemotron 3 Nano 30B-A3B's config over a
// checkpoint in the release's layout (backbone.*, the experts one by
// one): 31.58B parameters, 3.58B active (3.23B besides the input
// embedding), a KV cache for its 6 attention layers only, a fixed
// Mamba-2 state for 23 layers and none for its 23 MoE layers.
func TestNemotron3Nano(t *testing.T) {
	dir, model := realConfig(t, "nemotron_3_nano_30b_a3b")
	var rel released
	var params int64
	for _, w := range lm.Weights(model) {
		params += rel.add(w)
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
	if b := float64(params) / 1e9; b < 31.5 || b > 31.7 || r.Params.Used != params {
		t.Errorf("parameters %d (%.4gB), used %d; want about 31.58B, all used", params, b, r.Params.Used)
	}
	if a := float64(r.Params.ActiveLessEmbedding) / 1e9; a < 3.1 || a > 3.3 {
		t.Errorf("active less the embedding %.3gB, want about 3.23B", a)
	}
	if r.Text.MoE == nil || r.Text.MoE.Experts != 128 || r.Text.MoE.ExpertsPerToken != 6 {
		t.Errorf("MoE %+v", r.Text.MoE)
	}
	// 6 attention layers × 2 KV heads × 128 × K and V × 2 bytes × 32768.
	if want := int64(6 * 2 * 128 * 2 * 2 * ctxLen); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d (the attention layers only)", r.Memory.KVCache, want)
	}
	// 23 Mamba layers × (conv [3, 4096+2·8·128] bf16 + SSM [64, 64, 128] f32).
	if want := int64(23 * (3*(4096+2048)*2 + 64*64*128*4)); r.Memory.Recurrent != want {
		t.Errorf("recurrent state %d, want %d", r.Memory.Recurrent, want)
	}
	if tx := r.Text; tx.MambaLayers != 23 || tx.FullAttentionLayers != 6 || tx.FeedForwardLayers != 23 {
		t.Errorf("layers: %d Mamba-2, %d attention, %d MLP or experts only; want 23, 6, 23", tx.MambaLayers, tx.FullAttentionLayers, tx.FeedForwardLayers)
	}
	// The config's own reading (what inspect shows for a model it cannot
	// build) gives the same state.
	if st := r.Text.StateBytes(1, ctxLen, 2); st.KVCache != r.Memory.KVCache || st.Recurrent != r.Memory.Recurrent {
		t.Errorf("from the config: KV %d, recurrent %d; from the model: %d, %d", st.KVCache, st.Recurrent, r.Memory.KVCache, r.Memory.Recurrent)
	}
	t.Logf("%.3fB, active %.3fB (%.3fB less the embedding), weights %d GiB in bf16, KV at %d %d MiB, Mamba state %d MiB",
		float64(params)/1e9, float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, ctxLen,
		r.Memory.KVCache>>20, r.Memory.Recurrent>>20)
}

// TestHybridConfigReading reads Mamba-2 layers from a config alone, as
// inspect does for a model it cannot build: NemotronH's layers_block_type
// in transformers' names (its linear_attention layers are Mamba-2) with
// NemotronHConfig's default sizes, and a GraniteMoeHybrid without
// layer_types (every layer Mamba-2) with GraniteMoeHybridConfig's.
func TestHybridConfigReading(t *testing.T) {
	for _, c := range []struct {
		js                  string
		mamba, attn, ffOnly int
		want                inspect.Mamba
	}{
		{`{"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
		  "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]}`, 1, 1, 2,
			inspect.Mamba{Heads: 128, HeadDim: 64, State: 128, Groups: 8, ConvKernel: 4}},
		{`{"model_type": "granitemoehybrid", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "mamba_n_heads": 8}`, 3, 0, 0,
			inspect.Mamba{Heads: 8, HeadDim: 16, State: 256, Groups: 1, ConvKernel: 4}},
	} {
		cfg, err := config.ParseModel([]byte(c.js))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := inspect.TextConfig(cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.js, err)
		}
		if tx.MambaLayers != c.mamba || tx.FullAttentionLayers != c.attn || tx.FeedForwardLayers != c.ffOnly || tx.Mamba == nil || *tx.Mamba != c.want {
			t.Errorf("%s: %d Mamba-2, %d attention, %d feed-forward only, %+v", c.js, tx.MambaLayers, tx.FullAttentionLayers, tx.FeedForwardLayers, tx.Mamba)
		}
	}
}
