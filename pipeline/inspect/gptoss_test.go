package inspect_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	_ "github.com/tputool/tputool/pipeline/gptoss"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestGptOss20B inspects the real openai/gpt-oss-20b config with a
// header-only checkpoint in the release's layout (the experts as MXFP4
// blocks and scales, U8; everything else bf16, names from
// pipeline/gptoss): the parameters are the model card's 20.9B total and
// 3.6B active (the card counts the head, not the input embedding), the
// blocks count two parameters a byte, and with --dtype bf16 the weights
// take two bytes a parameter (the experts are decoded at load).
func TestGptOss20B(t *testing.T) {
	dir, model := realConfig(t, "gpt_oss_20b")
	var names []string
	shapes := map[string][]int{}
	dtypes := map[string]string{}
	var params, experts int64
	for _, w := range lm.Weights(model) {
		n := elements(w.Shape)
		params += n
		if !w.MXFP4 {
			if strings.Contains(w.Name, ".experts.") { // the experts' biases
				experts += n
			}
			names = append(names, w.Name)
			shapes[w.Name] = w.Shape
			continue
		}
		experts += n
		r := len(w.Shape)
		lead, in := w.Shape[:r-1], w.Shape[r-1]
		b, s := w.Name+"_blocks", w.Name+"_scales"
		names = append(names, b, s)
		shapes[b] = append(append([]int(nil), lead...), in/32, 16)
		shapes[s] = append(append([]int(nil), lead...), in/32)
		dtypes[b], dtypes[s] = "U8", "U8"
	}
	writeSparseTyped(t, filepath.Join(dir, "model.safetensors"), names, shapes, dtypes)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 8192, DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Params.Used != params || r.Params.Total != params {
		t.Errorf("parameters %d used of %d, want %d", r.Params.Used, r.Params.Total, params)
	}
	if params < 20.90e9 || params > 20.92e9 {
		t.Errorf("gpt-oss-20b has %d parameters, the card says 20.91B", params)
	}
	if r.Params.Experts != experts {
		t.Errorf("expert parameters %d, want %d", r.Params.Experts, experts)
	}
	if a := r.Params.ActiveLessEmbedding; a < 3.60e9 || a > 3.62e9 {
		t.Errorf("active parameters without the embedding %d, the card says 3.61B", a)
	}
	if r.Params.Active-r.Params.ActiveLessEmbedding != 201088*2880 {
		t.Errorf("active %d and %d differ by other than the embedding", r.Params.Active, r.Params.ActiveLessEmbedding)
	}
	if r.Memory.Weights != 2*params {
		t.Errorf("bf16 weights %d bytes, want %d (MXFP4 decoded at load)", r.Memory.Weights, 2*params)
	}
	// KV: 24 layers × K,V × 8 heads × 64 × 8192 × 2 bytes.
	if want := int64(24 * 2 * 8 * 64 * 8192 * 2); r.Memory.KVCache != want {
		t.Errorf("KV cache %d bytes, want %d", r.Memory.KVCache, want)
	}
	t.Logf("params %d, active %d (%d without the embedding)", params, r.Params.Active, r.Params.ActiveLessEmbedding)
}
