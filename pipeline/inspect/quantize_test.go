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

// inspect --quantize int8 counts the weights as generate --quantize int8
// holds them (the figure the pre-flight check and compile.NewLM use).
func TestQuantizedWeightsFigure(t *testing.T) {
	const dir = "../../testdata/stories260K-hf"
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32", Quantize: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lm.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := l.HeldBytes(lm.Holding{Compute: dtypes.Float32, Quantize: "int8"})
	if r.Memory.Weights != want || r.Memory.Quantize != "int8" {
		t.Errorf("weights %d bytes (quantize %q), want %d as held", r.Memory.Weights, r.Memory.Quantize, want)
	}
	plain, err := inspect.Run(context.Background(), m, inspect.Options{DType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Memory.Weights*2 > plain.Memory.Weights {
		t.Errorf("int8 weights %d bytes, f32 %d", r.Memory.Weights, plain.Memory.Weights)
	}
}
