package inspect_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestJambaText: Jamba's layer pattern from config.json alone (one
// attention layer in attn_layer_period, at attn_layer_offset; the rest
// Mamba), JambaConfig's 8 KV heads and vocabulary when absent, and an
// offset outside the period refused.
func TestJambaText(t *testing.T) {
	text := func(js string) (*inspect.Text, error) {
		cfg, err := config.ParseModel([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return inspect.TextConfig(cfg)
	}
	base := map[string]any{"architectures": []string{"JambaForCausalLM"}, "model_type": "jamba", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}
	b, _ := json.Marshal(base)
	got, err := text(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.FullAttentionLayers != 4 || got.MambaLayers != 28 || got.KVHeads != 8 || got.Vocab != 65536 || got.Mamba != nil {
		t.Errorf("%+v", got)
	}
	base["attn_layer_offset"] = 9
	b, _ = json.Marshal(base)
	if _, err := text(string(b)); err == nil || !strings.Contains(err.Error(), "attn_layer_offset 9") {
		t.Errorf("offset 9 of period 8: %v", err)
	}
}

// TestBambaText: Bamba's attention layers are those attn_layer_indices
// names, the rest Mamba-2 with BambaConfig's sizes.
func TestBambaText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["BambaForCausalLM"], "model_type": "bamba", "hidden_size": 4096,
		"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "attn_layer_indices": [9, 18, 27]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.FullAttentionLayers != 3 || got.MambaLayers != 29 || got.Mamba == nil || got.Mamba.Heads != 128 || got.Mamba.HeadDim != 64 {
		t.Errorf("%+v, %+v", got, got.Mamba)
	}
	// Without attn_layer_indices (BambaConfig's None) every layer is Mamba.
	cfg, err = config.ParseModel([]byte(`{"architectures": ["BambaForCausalLM"], "model_type": "bamba", "hidden_size": 4096,
		"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = inspect.TextConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got.FullAttentionLayers != 0 || got.MambaLayers != 32 || got.Mamba == nil {
		t.Errorf("no attn_layer_indices: %+v", got)
	}
}

// TestZamba2Text: Zamba2's hybrid layers count as attention and Mamba-2
// both, its heads are 2 × hidden_size / heads wide, and its Mamba sizes
// take Zamba2Config's names.
func TestZamba2Text(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "hidden_size": 2560,
		"num_attention_heads": 32, "num_hidden_layers": 6, "layers_block_type": ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"],
		"n_mamba_heads": 80, "mamba_d_state": 64, "mamba_ngroups": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.FullAttentionLayers != 2 || got.MambaLayers != 6 || got.HeadDim != 160 || got.Mamba == nil || got.Mamba.Heads != 80 || got.Mamba.State != 64 || got.Mamba.HeadDim != 64 {
		t.Errorf("%+v, %+v", got, got.Mamba)
	}
}
