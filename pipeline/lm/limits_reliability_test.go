package lm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	_ "github.com/tputool/tputool/pipeline/gemma4"
	_ "github.com/tputool/tputool/pipeline/gptoss"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/qwen35"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestAbsurdConfigSizesAreRefused: config.json sizes no model has (2^40
// layers, heads, head_dim, experts, ...) are errors naming the field,
// returned before the architecture resolves them. Before this check a
// num_hidden_layers or head_dim of 2^40 made the Llama resolver allocate
// terabytes and the Go runtime abort the process.
func TestAbsurdConfigSizesAreRefused(t *testing.T) {
	const huge = 1 << 40
	base, err := os.ReadFile("../../testdata/stories260K-hf/config.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"num_hidden_layers", "head_dim", "num_attention_heads", "num_key_value_heads",
		"hidden_size", "intermediate_size", "vocab_size"} {
		var m map[string]any
		json.Unmarshal(base, &m)
		m[field] = huge
		b, _ := json.Marshal(m)
		cfg, err := config.ParseModel(b)
		if err != nil {
			t.Fatal(err)
		}
		_, err = lm.New(cfg)
		if err == nil || !strings.Contains(err.Error(), field+" is 1099511627776") {
			t.Errorf("%s: got %v", field, err)
		}
	}
	// In a multimodal wrapper's text_config too, and through Load.
	dir := t.TempDir()
	cfg := `{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",
		"text_config":{"model_type":"qwen3_5_text","num_hidden_layers":4,"hidden_size":16,"linear_num_value_heads":1e13}}`
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644)
	if _, err := lmckpt.Load(dir); err == nil || !strings.Contains(err.Error(), "text_config.linear_num_value_heads is 10000000000000") {
		t.Errorf("text_config: got %v", err)
	}
}

// TestTooManyExpertsRefused: a config whose layers times routed experts
// passes lm.MaxExpertMLPs (each field alone within dimLimits) is refused
// by every MoE architecture, naming the fields, before its expert
// matrices are listed (at 1024 of 1024 that list took seconds, at 16384
// of 1024 nearly a minute); Qwen3-Next at the bound resolves.
func TestTooManyExpertsRefused(t *testing.T) {
	for _, c := range []struct{ name, json string }{
		{"qwen3-next", `{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next","num_hidden_layers":1024,"num_experts":1024}`},
		{"qwen3.5-moe", `{"architectures":["Qwen3_5MoeForConditionalGeneration"],"model_type":"qwen3_5_moe",
			"text_config":{"model_type":"qwen3_5_moe_text","num_hidden_layers":1024,"num_experts":1024}}`},
		{"qwen3-moe", `{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","num_hidden_layers":1024,"num_experts":1024}`},
		{"gpt-oss", `{"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss","num_hidden_layers":1024,"num_local_experts":1024}`},
		{"gemma4", `{"architectures":["Gemma4ForCausalLM"],"model_type":"gemma4_text","num_hidden_layers":1024,"enable_moe_block":true,
			"num_experts":1024,"top_k_experts":2,"moe_intermediate_size":8}`},
	} {
		cfg, err := config.ParseModel([]byte(c.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), "1024 layers of") || !strings.Contains(err.Error(), "1048576 expert MLPs, beyond any real model") {
			t.Errorf("%s: got %v", c.name, err)
		}
	}
	cfg, err := config.ParseModel([]byte(`{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next","num_hidden_layers":256,"num_experts":512,"hidden_size":64,"moe_intermediate_size":8}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.New(cfg); err != nil {
		t.Errorf("at the bound (256 layers of 512 experts): %v", err)
	}
}
