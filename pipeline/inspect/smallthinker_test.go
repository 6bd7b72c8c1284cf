package inspect_test

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestSmallThinkerText: SmallThinker names its experts
// moe_num_primary_experts, moe_num_active_primary_experts and
// moe_ffn_hidden_size; inspect reads them as the others'.
func TestSmallThinkerText(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["SmallThinkerForCausalLM"], "model_type": "smallthinker",
		"vocab_size": 151936, "hidden_size": 1536, "num_hidden_layers": 32, "num_attention_heads": 12, "num_key_value_heads": 2,
		"head_dim": 128, "moe_num_primary_experts": 32, "moe_num_active_primary_experts": 4, "moe_ffn_hidden_size": 768}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := got.MoE; m == nil || m.Experts != 32 || m.ExpertsPerToken != 4 || m.ExpertIntermediate != 768 {
		t.Errorf("MoE %+v", got.MoE)
	}
}
