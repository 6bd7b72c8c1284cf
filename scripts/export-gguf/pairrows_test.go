package main

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestPairRows: rows of each head go from rotate-half order to adjacent
// pairs over the rotated rows only; the rest stay.
func TestPairRows(t *testing.T) {
	rows := func(heads, d int) *tensors.Tensor {
		v := make([]float32, heads*d) // one column: row r holds r
		for i := range v {
			v[i] = float32(i)
		}
		return tensors.FromFlatDataAndDimensions(v, heads*d, 1)
	}
	for _, c := range []struct {
		heads, d, rot int
		want          []float32
	}{
		{1, 8, 0, []float32{0, 4, 1, 5, 2, 6, 3, 7}},
		{2, 4, 0, []float32{0, 2, 1, 3, 4, 6, 5, 7}},
		{1, 8, 4, []float32{0, 2, 1, 3, 4, 5, 6, 7}},                               // Bamba: the first half rotated
		{2, 8, 4, []float32{0, 2, 1, 3, 4, 5, 6, 7, 8, 10, 9, 11, 12, 13, 14, 15}}, // per head
	} {
		x := rows(c.heads, c.d)
		if err := pairRows(x, c.heads, c.rot); err != nil {
			t.Fatal(err)
		}
		if got := tensors.MustCopyFlatData[float32](x); !slices.Equal(got, c.want) {
			t.Errorf("%d heads of %d, rot %d: %v, want %v", c.heads, c.d, c.rot, got, c.want)
		}
	}
	if err := pairRows(rows(1, 8), 1, 3); err == nil {
		t.Error("an odd rotary: no error")
	}
}
