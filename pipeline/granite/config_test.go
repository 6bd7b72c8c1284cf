package granite_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func configOf(t *testing.T, js string) *config.File {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestConfig reads granite-3.1-3b-a800m's sizes (3.3B parameters, 40
// experts of 512, top 8, the four multipliers), granite-3.1-8b's (8.2B,
// dense), the classes' defaults (every multiplier 1), GraniteMoe's names
// renamed to qwen3moe's, and refuses bad values naming the field.
func TestConfig(t *testing.T) {
	moe, err := lm.New(configOf(t, `{"architectures": ["GraniteMoeForCausalLM"], "hidden_size": 1536, "num_hidden_layers": 32,
		"num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 512, "num_local_experts": 40, "num_experts_per_tok": 8,
		"vocab_size": 49155, "tie_word_embeddings": true, "embedding_multiplier": 12, "attention_multiplier": 0.015625,
		"residual_multiplier": 0.22, "logits_scaling": 6, "bos_token_id": 0, "eos_token_id": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(moe); n < 3.25e9 || n > 3.35e9 {
		t.Errorf("granite-3.1-3b-a800m: %d parameters, want 3.3B", n)
	}
	o := moe.(*granite.MoEModel).Options()
	if o.EmbedScale != 12 || o.AttnScale != 0.015625 || o.ResidualScale != 0.22 || o.LogitsDivisor != 6 || o.Experts != 40 || o.TopK != 8 ||
		!o.NormTopK || o.MoEIntermediate != 512 || !o.Sparse[0] || o.Spec.BOS != 0 || fmt.Sprint(o.Spec.EOS) != "[0]" {
		t.Errorf("granite-3.1-3b-a800m options %+v", o)
	}
	r := moe.(lm.Renamer)
	for stored, want := range map[string]string{
		"model.layers.3.block_sparse_moe.router.layer.weight":  "model.layers.3.block_sparse_moe.gate.weight",
		"model.layers.3.block_sparse_moe.input_linear.weight":  "model.layers.3.block_sparse_moe.experts.gate_up_proj",
		"model.layers.3.block_sparse_moe.output_linear.weight": "model.layers.3.block_sparse_moe.experts.down_proj",
		"model.layers.3.self_attn.q_proj.weight":               "model.layers.3.self_attn.q_proj.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	dense, err := lm.New(configOf(t, `{"architectures": ["GraniteForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 40,
		"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12800, "vocab_size": 49155, "tie_word_embeddings": true,
		"embedding_multiplier": 12, "attention_multiplier": 0.0078125, "residual_multiplier": 0.22, "logits_scaling": 16}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(dense); n/1e8 != 81 {
		t.Errorf("granite-3.1-8b: %d parameters, want 8.1B", n)
	}
	d, _, err := granite.Resolve(configOf(t, `{"architectures": ["GraniteForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.EmbedScale != 1 || d.AttnScale != 1 || d.ResidualScale != 1 || d.LogitsDivisor != 1 || d.Spec.Hidden != 4096 || d.Spec.BOS != 1 ||
		fmt.Sprint(d.Spec.EOS) != "[2]" || d.Spec.TieEmbeddings {
		t.Errorf("GraniteConfig's defaults: %+v", d)
	}
	base := `"architectures": ["GraniteMoeForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4`
	for _, bad := range []struct{ js, want string }{
		{`"embedding_multiplier": 0`, "embedding_multiplier must be positive"},
		{`"logits_scaling": -1`, "logits_scaling must be positive"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"mlp_bias": true`, "mlp_bias is true"},
		{`"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, _, err := granite.Resolve(configOf(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
