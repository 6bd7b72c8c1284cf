package inspect_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/inspect"
)

// TestAbsurdSizesNeverFit: a config whose sizes (or --batch/--context)
// make the KV cache overflow 64 bits reports the saturated figure and a
// note, and fits no TPU slice (the product used to wrap around to a small
// or negative number, which "fit" everywhere).
func TestAbsurdSizesNeverFit(t *testing.T) {
	cases := map[string]struct {
		config         string
		batch, context int
	}{
		"huge dimensions": {`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"num_hidden_layers":1073741824,
			"num_attention_heads":8,"num_key_value_heads":1048576,"head_dim":1048576,"vocab_size":1099511627776,"max_position_embeddings":4096}`, 1, 4096},
		"huge context and batch": {`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"num_hidden_layers":5,
			"num_attention_heads":8,"num_key_value_heads":4,"head_dim":8,"vocab_size":512,"max_position_embeddings":4611686018427387904}`, 1000000, 4611686018427387904},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := safetensors.Float32Tensor("model.embed_tokens.weight", safetensors.BF16, []int{4, 4}, make([]float32, 16))
			b, _ := safetensors.Encode([]safetensors.Tensor{w}, nil)
			os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o644)
			m, err := resolve(context.Background(), dir, loader.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: tc.batch, Context: tc.context})
			if err != nil {
				t.Fatal(err)
			}
			if r.Memory.State.KVCache != math.MaxInt64 || r.Memory.Total != math.MaxInt64 {
				t.Errorf("KV cache %d, total %d: want saturated at 8 EiB", r.Memory.State.KVCache, r.Memory.Total)
			}
			if !strings.Contains(strings.Join(r.Notes, "\n"), "more than 8 EiB") {
				t.Errorf("no note about the overflow: %q", r.Notes)
			}
			for _, f := range r.Fit {
				if f.Fits || f.TotalBytes <= 0 || f.PerChipBytes <= 0 {
					t.Errorf("%s: %+v", f.Generation, f)
				}
			}
		})
	}
}
