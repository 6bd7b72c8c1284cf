package lm_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// DecodeBlocks gives the values Tensor gives, block by block (the last
// block shorter), and reports NaN/Inf once for the whole tensor with the
// index of the first.
func TestDecodeBlocks(t *testing.T) {
	const n = "model.layers.0.mlp.up_proj.weight"
	for _, src := range []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16} {
		dir := tiny(t, true)
		rewrite(t, dir, func(m map[string]safetensors.Tensor) {
			vals := make([]float32, 24*16)
			for i := range vals {
				vals[i] = float32(i%9) - 4
			}
			vals[100], vals[250] = float32(math.NaN()), float32(math.Inf(1))
			v, _ := safetensors.Float32Tensor(n, src, []int{24, 16}, vals)
			m[n] = v
		})
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := l.Tensor(n, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		want := tensors.MustCopyFlatData[float32](whole)
		var reports []safetensors.NonFiniteTensor
		l.OnNonFinite = func(nf safetensors.NonFiniteTensor) { reports = append(reports, nf) }
		got := make([]float32, 0, len(want))
		var starts []int
		if err := l.DecodeBlocks(n, 50, func(at int, vals []float32) {
			starts = append(starts, at)
			got = append(got, vals...)
		}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if len(starts) != 8 || starts[7] != 350 || len(got) != len(want) {
			t.Fatalf("%s: blocks at %v, %d values", src, starts, len(got))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: value %d = %v, want %v", src, i, got[i], want[i])
			}
		}
		if len(reports) != 1 || reports[0].Count != 2 || reports[0].First != 100 || reports[0].Elements != 24*16 {
			t.Errorf("%s: reports %+v, want one with 2 of 384, first 100", src, reports)
		}
	}
}
