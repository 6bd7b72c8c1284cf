package inspect_test

import (
	"context"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/pipeline/inspect"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/models"
)

// inspect --quantize int8 and int4 count the weights as generate
// --quantize holds them (the figure the pre-flight check and
// compile.NewRunner use).
func TestQuantizedWeightsFigure(t *testing.T) {
	const dir = "../../testdata/stories260K-hf"
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lm.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
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
