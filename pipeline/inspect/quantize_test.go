package inspect_test

import (
	"context"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// loadStories resolves the stories checkpoint and loads it as generate
// does (closed at the test's end).
func loadStories(t *testing.T) (*loader.Checkpoint, *lm.Loaded) {
	t.Helper()
	m, err := resolve(context.Background(), "../../testdata/stories260K-hf", loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lm.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return m, l
}

// inspect --quantize int8 and int4 count the weights as generate
// --quantize holds them (the figure the pre-flight check and
// compile.NewRunner use).
func TestQuantizedWeightsFigure(t *testing.T) {
	m, l := loadStories(t)
	plain, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	last := plain.Memory.Weights
	for _, q := range []string{"int8", "int4"} {
		r, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32", Quantize: q})
		if err != nil {
			t.Fatal(err)
		}
		want := l.HeldBytes(lm.Holding{Compute: dtypes.Float32, Quantize: q})
		if r.Memory.Weights != want || r.Memory.Quantize != q {
			t.Errorf("%s: weights %d bytes (quantize %q), want %d as held", q, r.Memory.Weights, r.Memory.Quantize, want)
		}
		if r.Memory.Weights >= last {
			t.Errorf("%s weights %d bytes, the wider holding's %d", q, r.Memory.Weights, last)
		}
		last = r.Memory.Weights
	}
}

// TestKVCacheDTypeFigure: --kv-cache-dtype counts the KV caches as the
// executors hold them (lm.StateBytes: int8 with its scales), and int8 is
// refused for an architecture tputool does not run, whose caches and so
// scales it does not know.
func TestKVCacheDTypeFigure(t *testing.T) {
	m, l := loadStories(t)
	const batch, ctx = 2, 512
	base, err := inspect.Run(context.Background(), m, inspect.Options{DType: "bf16", Batch: batch, Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := lm.StateBytes(l.Model, batch, ctx, dtypes.BFloat16, dtypes.InvalidDType); base.Memory.KVCache != want || base.Memory.KVCacheDType != "" {
		t.Errorf("bf16, KV cache auto: %d bytes (%q), want %d", base.Memory.KVCache, base.Memory.KVCacheDType, want)
	}
	for _, c := range []struct {
		kv   dtypes.DType
		name string
	}{{dtypes.Float32, "f32"}, {dtypes.BFloat16, "bf16"}, {dtypes.Int8, "int8"}} {
		r, err := inspect.Run(context.Background(), m, inspect.Options{DType: "bf16", Batch: batch, Context: ctx, KVDType: c.kv})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := lm.StateBytes(l.Model, batch, ctx, dtypes.BFloat16, c.kv)
		if r.Memory.KVCache != want || r.Memory.KVCacheDType != c.name || r.Memory.Total != r.Memory.Weights+want {
			t.Errorf("%s: KV cache %d bytes (%q), total %d; want %d as held, total %d", c.name, r.Memory.KVCache, r.Memory.KVCacheDType, r.Memory.Total, want, r.Memory.Weights+want)
		}
	}
	// 5 layers x K and V x 4 KV heads x (8 codes + a 4-byte scale) a position.
	if r, _ := inspect.Run(context.Background(), m, inspect.Options{DType: "f32", Batch: 1, Context: 100, KVDType: dtypes.Int8}); r == nil || r.Memory.KVCache != 100*5*2*4*(8+4) {
		t.Errorf("int8: %+v, want %d bytes of KV cache", r, 100*5*2*4*(8+4))
	}
}

// --quantize counts a Gemma3ForConditionalGeneration checkpoint's weights
// the same in both of its layouts: the original upload's names, which
// the model reads renamed (lm.Renamer), are matched to its weights too.
func TestQuantizedWeightsRenamedLayout(t *testing.T) {
	c := lmckpt.Config{Vocab: 64, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6, Gemma: true, Tied: true}
	c.Window = []int{4, 0}
	c.RopeTheta = []float64{10000, 1e6}
	tiny := lmckpt.Tiny{Arch: "Gemma3ForCausalLM", Config: c, Seed: 3}
	figures := map[lmckpt.Gemma3Layout]int64{}
	for _, layout := range []lmckpt.Gemma3Layout{lmckpt.Gemma3Original, lmckpt.Gemma3Saved} {
		cfg, ts, err := tiny.Gemma3Multimodal(layout)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
			t.Fatal(err)
		}
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32", Quantize: "int8"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Memory.Weights >= plain.Memory.Weights {
			t.Errorf("%s: int8 weights %d bytes, f32 %d: nothing counted as quantised", layout, r.Memory.Weights, plain.Memory.Weights)
		}
		figures[layout] = r.Memory.Weights
	}
	if figures[lmckpt.Gemma3Original] != figures[lmckpt.Gemma3Saved] {
		t.Errorf("int8 weights: %d bytes in the original layout, %d in the saved one", figures[lmckpt.Gemma3Original], figures[lmckpt.Gemma3Saved])
	}
}
