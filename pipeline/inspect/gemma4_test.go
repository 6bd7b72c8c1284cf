package inspect_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader"
	_ "github.com/tputool/tputool/pipeline/gemma4"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/tpu"
)

// TestGemma4Sizes inspects each real Gemma 4 config (testdata/configs)
// with a header-only bf16 checkpoint of the text model's tensors (names
// and shapes from pipeline/gemma4) plus a vision-tower tensor: the tower
// is skipped, and the sizes are the model cards' where they count the
// text model the same way: 26B-A4B 25.2B total and 3.8B active (8 of 128
// experts), 31B 30.7B, E2B 2.3B "effective" (without the per-layer
// embedding table). The KV cache of E2B and E4B counts only the layers
// that keep one (the last num_kv_shared_layers read an earlier layer's):
// at 4096 positions in bf16, keys and values, E2B's 15 of 35 layers (12
// sliding of 1 KV head x 256, 3 full of 1 x 512) take 4096·2·2·(12·256 +
// 3·512) bytes, E4B's 24 of 42 (20 sliding and 4 full, 2 KV heads)
// 4096·2·2·2·(20·256 + 4·512).
func TestGemma4Sizes(t *testing.T) {
	for _, c := range []struct {
		dir                 string
		total, active, less float64 // billions; 0: not checked
		kv                  int64   // bytes at 4096 positions; 0: not checked
	}{
		{"gemma_4_26b_a4b", 25.2, 3.8, 0, 0},
		{"gemma_4_31b", 30.7, 0, 0, 0},
		{"gemma_4_e2b", 0, 0, 2.3, 4096 * 2 * 2 * (12*256 + 3*512)},
		{"gemma_4_e4b", 0, 0, 0, 4096 * 2 * 2 * 2 * (20*256 + 4*512)},
	} {
		dir, model := realConfig(t, c.dir)
		var names []string
		shapes := map[string][]int{}
		var params int64
		for _, w := range lm.Weights(model) {
			names = append(names, w.Name)
			shapes[w.Name] = w.Shape
			params += elements(w.Shape)
		}
		names = append(names, "model.vision_tower.encoder.layers.0.mlp.up_proj.weight")
		shapes["model.vision_tower.encoder.layers.0.mlp.up_proj.weight"] = []int{4304, 1152}
		writeSparseCheckpoint(t, filepath.Join(dir, "model.safetensors"), names, shapes)
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var fitReq tpu.FitRequest
		r, err := inspect.Run(context.Background(), m, inspect.Options{Batch: 1, Context: 4096, DType: "bf16",
			Fit: func(req tpu.FitRequest) ([]tpu.FitResult, error) { fitReq = req; return tpu.FitAll(req) }})
		if err != nil {
			t.Fatalf("%s: %v", c.dir, err)
		}
		// The 26B's and 31B's full-attention layers' caches (their own,
		// fewer KV heads) stay whole on every chip under tensor
		// parallelism; E2B's and E4B's have as many KV heads as the others.
		if global := c.dir == "gemma_4_26b_a4b" || c.dir == "gemma_4_31b"; global != (fitReq.WholeStateBytes > 0) || fitReq.WholeStateBytes >= r.Memory.KVCache {
			t.Errorf("%s: whole state %d of a KV cache of %d: want the full-attention layers' part", c.dir, fitReq.WholeStateBytes, r.Memory.KVCache)
		}
		if r.Params.Used != params {
			t.Errorf("%s: %d parameters used, the architecture reads %d", c.dir, r.Params.Used, params)
		}
		near := func(what string, got int64, want float64) {
			if want > 0 && math.Abs(float64(got)/1e9-want) > 0.051 {
				t.Errorf("%s: %s %.3fB, the model card says %.1fB", c.dir, what, float64(got)/1e9, want)
			}
		}
		near("total", r.Params.Used, c.total)
		near("active", r.Params.Active, c.active)
		near("without per-layer embeddings", r.Params.Used-r.Params.PerLayerEmbedding, c.less)
		if c.kv > 0 && r.Memory.KVCache != c.kv {
			t.Errorf("%s: KV cache at 4096 positions %d bytes, want %d (the layers that keep a cache)", c.dir, r.Memory.KVCache, c.kv)
		}
		if shares := strings.Contains(strings.Join(r.Notes, "\n"), "read an earlier layer's KV cache"); shares != (c.kv > 0) {
			t.Errorf("%s: KV-sharing note %v, want %v: %q", c.dir, shares, c.kv > 0, r.Notes)
		}
		t.Logf("%s: %.3fB, active %.3fB, per-layer embeddings %.3fB, KV at 4096 %d MiB", c.dir, float64(r.Params.Used)/1e9,
			float64(r.Params.Active)/1e9, float64(r.Params.PerLayerEmbedding)/1e9, r.Memory.KVCache>>20)
	}
}
