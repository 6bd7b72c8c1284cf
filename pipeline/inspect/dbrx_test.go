package inspect_test

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestDbrxText: DBRX keeps its key/value heads in attn_config and its
// experts in ffn_config, and its context in max_seq_len; inspect reads
// them, with DbrxConfig's defaults for what a config leaves out.
func TestDbrxText(t *testing.T) {
	for _, c := range []struct {
		js                    string
		kv, experts, top, ffn int
	}{
		{`"attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000}, "ffn_config": {"ffn_hidden_size": 10752,
			"moe_num_experts": 16, "moe_top_k": 4}`, 8, 16, 4, 10752},
		{`"attn_config": {}, "ffn_config": {"moe_top_k": 2}`, 1, 4, 2, 3584},
	} {
		cfg, err := config.ParseModel([]byte(`{"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": 6144,
			"n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352, ` + c.js + `}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := inspect.TextConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got.Hidden != 6144 || got.Heads != 48 || got.KVHeads != c.kv || got.HeadDim != 128 || got.Layers != 40 || got.MaxPositions != 32768 {
			t.Errorf("%s: %+v", c.js, got)
		}
		if m := got.MoE; m == nil || m.Experts != c.experts || m.ExpertsPerToken != c.top || m.ExpertIntermediate != c.ffn {
			t.Errorf("%s: MoE %+v", c.js, got.MoE)
		}
	}
	// A config of DbrxConfig's defaults alone.
	cfg, err := config.ParseModel([]byte(`{"architectures": ["DbrxForCausalLM"], "model_type": "dbrx"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hidden != 2048 || got.Heads != 16 || got.KVHeads != 1 || got.Layers != 24 || got.Vocab != 32000 || got.MaxPositions != 2048 ||
		got.MoE == nil || got.MoE.Experts != 4 || got.MoE.ExpertsPerToken != 1 {
		t.Errorf("defaults: %+v, MoE %+v", got, got.MoE)
	}
}
