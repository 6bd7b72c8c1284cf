package inspect_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestHunyuanA13BText: Hunyuan-A13B's config gives moe_topk,
// moe_intermediate_size and num_shared_expert as lists of one value a
// layer; inspect reads each as that value.
func TestHunyuanA13BText(t *testing.T) {
	perLayer := func(v int) string { return "[" + strings.TrimSuffix(strings.Repeat(fmt.Sprint(v, ","), 32), ",") + "]" }
	js := fmt.Sprintf(`{"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe",
		"vocab_size": 128167, "hidden_size": 4096, "intermediate_size": 3072, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "num_experts": 64,
		"moe_topk": %s, "moe_intermediate_size": %s, "num_shared_expert": %s}`, perLayer(8), perLayer(3072), perLayer(1))
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inspect.TextConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := got.MoE; m == nil || m.Experts != 64 || m.ExpertsPerToken != 8 || m.ExpertIntermediate != 3072 || m.SharedExperts != 1 {
		t.Errorf("MoE %+v", got.MoE)
	}
	// A list whose values differ is no single value: no top k, refused.
	cfg, err = config.ParseModel([]byte(strings.Replace(js, `"moe_topk": [8,8,`, `"moe_topk": [8,4,`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.TextConfig(cfg); err == nil || !strings.Contains(err.Error(), "num_experts_per_tok is 0") {
		t.Errorf("mixed moe_topk: %v", err)
	}
}
