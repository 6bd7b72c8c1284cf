package lm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
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
