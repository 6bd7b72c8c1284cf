package ernie_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/ernie"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestConfig reads Ernie4_5_MoeConfig's defaults (ERNIE-4.5-21B-A3B's
// sizes: 21.8B parameters, the first layer dense, tied), the
// 300B-A47B's sizes (299.5B, no shared experts, three dense layers
// first), the sparse layers' placement by start, end and interval, and
// refuses bad values naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5_MoeForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*ernie.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 21_825_437_888 || s.Heads != 20 || s.KVHeads != 4 || s.HeadDim != 128 || !s.TieEmbeddings ||
		o.Experts != 64 || o.TopK != 6 || o.Shared != 2 || o.MoEIntermediate != 1536 || o.NormMin != 1e-12 || !o.SoftmaxScores ||
		!o.RopePairs || o.Sparse[0] || !o.Sparse[1] || !o.Sparse[27] || s.BOS != 1 || fmt.Sprint(s.EOS) != "[2]" {
		t.Errorf("21B-A3B defaults: %d parameters, spec %+v, options %+v", n, s, o)
	}
	var bias lm.WeightSpec
	for _, w := range lm.Weights(m) {
		if w.Name == "model.layers.1.mlp.moe_statics.e_score_correction_bias" {
			bias = w
		}
	}
	if fmt.Sprint(bias.Shape) != "[1 64]" || !bias.F32 {
		t.Errorf("correction bias %+v, want [1 64] held in f32", bias)
	}
	big, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5_MoeForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
		"num_hidden_layers": 54, "num_attention_heads": 64, "num_key_value_heads": 8, "moe_num_experts": 64, "moe_k": 8,
		"moe_intermediate_size": 3584, "moe_num_shared_experts": 0, "moe_layer_start_index": 3, "tie_word_embeddings": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(big); n/1e9 != 299 || big.(*ernie.Model).Options().Sparse[2] || !big.(*ernie.Model).Options().Sparse[3] {
		t.Errorf("300B-A47B: %d parameters", n)
	}
	for _, c := range []struct {
		js   string
		want string
	}{
		{`"moe_layer_start_index": 0`, "1111"},
		{`"moe_layer_start_index": 1, "moe_layer_end_index": 2`, "0110"},
		{`"moe_layer_start_index": 0, "moe_layer_interval": 2`, "0101"},
		{`"moe_layer_start_index": 2, "moe_layer_interval": 2, "moe_layer_end_index": -1`, "0001"},
	} {
		m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5_MoeForCausalLM"], "num_hidden_layers": 4, "hidden_size": 64,
			"num_attention_heads": 4, "num_key_value_heads": 2, "moe_num_experts": 8, "moe_k": 2, `+c.js+`}`))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, sp := range m.(*ernie.Model).Options().Sparse {
			got += map[bool]string{true: "1", false: "0"}[sp]
		}
		if got != c.want {
			t.Errorf("%s: sparse layers %s, want %s", c.js, got, c.want)
		}
	}
	base := `"architectures": ["Ernie4_5_MoeForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2`
	for _, bad := range []struct{ js, want string }{
		{`"use_bias": true`, "use_bias is true"},
		{`"moe_k": 9, "moe_num_experts": 8`, "moe_k 9"},
		{`"moe_intermediate_size": 0`, "moe_intermediate_size must be positive"},
		{`"moe_num_shared_experts": -1`, "moe_num_shared_experts must not be negative"},
		{`"moe_norm_min": -1`, "moe_norm_min must not be negative"},
		{`"moe_layer_interval": 0`, "moe_layer_interval 0 must be positive"},
		{`"partial_rotary_factor": 0.5`, "partial rotary embedding"},
	} {
		_, err := ernie.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
	if r, ok := m.(lm.Skipper).SkipWeight("model.mtp_block.0.self_attn.q_proj.weight"); !ok || !strings.Contains(r, "multi-token") {
		t.Errorf("MTP tensor not skipped: %q %v", r, ok)
	}
	if _, ok := m.(lm.Skipper).SkipWeight("model.layers.1.mlp.gate.weight"); ok {
		t.Error("a layer's router skipped")
	}
}
