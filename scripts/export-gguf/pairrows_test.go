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

// TestGroupsToBlocks: rows go from key/value groups (each group's query
// heads, its key, its value) to blocks (every query head, every key,
// every value), for Falcon's groups and GPT-NeoX's heads, a vector's
// values likewise.
func TestGroupsToBlocks(t *testing.T) {
	for _, c := range []struct {
		groups, per, d int
		want           []float32
	}{
		// 2 groups of 2 query heads, heads of 1 row: q0 q1 k0 v0 | q2 q3 k1 v1.
		{2, 2, 1, []float32{0, 1, 4, 5, 2, 6, 3, 7}},
		// GPT-NeoX: 2 heads, each q k v of 2 rows.
		{2, 1, 2, []float32{0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}},
	} {
		n := c.groups * (c.per + 2) * c.d
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i)
		}
		x := tensors.FromFlatDataAndDimensions(slices.Clone(v), n, 1)
		if err := groupsToBlocks(x, c.groups, c.per); err != nil {
			t.Fatal(err)
		}
		if got := tensors.MustCopyFlatData[float32](x); !slices.Equal(got, c.want) {
			t.Errorf("%d groups of %d (rows %d): %v, want %v", c.groups, c.per, c.d, got, c.want)
		}
		bias := tensors.FromFlatDataAndDimensions(slices.Clone(v), n)
		if err := groupsToBlocks(bias, c.groups, c.per); err != nil {
			t.Fatal(err)
		}
		if got := tensors.MustCopyFlatData[float32](bias); !slices.Equal(got, c.want) {
			t.Errorf("bias, %d groups of %d: %v, want %v", c.groups, c.per, got, c.want)
		}
	}
	if err := groupsToBlocks(tensors.FromFlatDataAndDimensions(make([]float32, 10), 10, 1), 2, 2); err == nil {
		t.Error("10 rows in 2 groups of 2 query heads: no error")
	}
}
