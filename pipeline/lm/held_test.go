package lm

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Which weights --quantize holds as int4 and which as int8: matrices and
// expert stacks whose inputs come in blocks of 32 are int4, the others
// int8, and weights that no product multiplies neither.
func TestHoldingInt4(t *testing.T) {
	h := Holding{Compute: dtypes.Float32, Quantize: "int4"}
	for _, c := range []struct {
		w          WeightSpec
		int4, int8 bool
	}{
		{WeightSpec{Name: "matrix", Shape: []int{48, 64}, Matmul: true}, true, false},
		{WeightSpec{Name: "stack", Shape: []int{8, 48, 64}, Matmul: true}, true, false},
		{WeightSpec{Name: "stack of 24 inputs", Shape: []int{8, 64, 24}, Matmul: true}, false, true},
		{WeightSpec{Name: "matrix of 40 inputs", Shape: []int{8, 40}, Matmul: true}, false, true},
		{WeightSpec{Name: "norm", Shape: []int{64}}, false, false},
		{WeightSpec{Name: "not multiplied", Shape: []int{8, 64}}, false, false},
	} {
		if got := h.Int4(c.w); got != c.int4 {
			t.Errorf("%s: Int4 %v, want %v", c.w.Name, got, c.int4)
		}
		if got := h.Quantized(c.w); got != c.int8 {
			t.Errorf("%s: Quantized %v, want %v", c.w.Name, got, c.int8)
		}
	}
	// A stack of [8, 48, 64]: half a byte a value, a code per 32, one table.
	if got, want := h.HeldBytes(WeightSpec{Shape: []int{8, 48, 64}, Matmul: true}, dtypes.BFloat16), int64(8*48*64/2+8*48*2+1024); got != want {
		t.Errorf("int4 stack: %d bytes, want %d", got, want)
	}
}
