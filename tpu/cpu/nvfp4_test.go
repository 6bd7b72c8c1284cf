package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestDotGeneralNVFP4 builds nn.DequantizeNVFP4's form under a DotGeneral
// (packed E2M1 codes through the constant table of doubled values, a code
// per 16 values through the matrix's table of half-scales): the cpu
// backend multiplies the NVFP4 weight directly (kernels.GemmNVFP4NT) and
// agrees with the go backend, which computes the f32 weight as written.
// The int4 pairs table, a code per 32 values or a constant scale table
// are not taken for it (the first two still agree as what they are).
func TestDotGeneralNVFP4(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name        string
		x           []int
		out, blocks int
		contrax     int
		int4Pairs   bool
		span        int // values a code
		constTable  bool
		rewritten   bool
	}{
		{"prefill", []int{5, 128}, 33, 4, 1, false, 16, false, true},
		{"decode", []int{1, 96}, 7, 3, 1, false, 16, false, true},
		{"rank 3", []int{2, 3, 64}, 17, 2, 2, false, 16, false, true},
		{"int4 pairs", []int{3, 64}, 9, 2, 1, true, 16, false, false},
		{"a code per 32", []int{3, 64}, 9, 2, 1, false, 32, false, false},
		{"constant table", []int{3, 64}, 9, 2, 1, false, 16, true, false},
	} {
		k := c.blocks * 32
		nc := k / c.span
		r := rand.New(rand.NewPCG(71, uint64(c.out)))
		packed := make([]uint8, c.out*k/2)
		for i := range packed {
			packed[i] = uint8(r.IntN(256))
		}
		codes := make([]uint8, c.out*nc)
		for i := range codes {
			codes[i] = uint8(r.IntN(256))
		}
		half := make([]float32, 256)
		for i := range half {
			half[i] = float32(0.001 + r.Float64()/40)
		}
		shs := []shapes.Shape{sh(dtypes.Float32, c.x...), sh(dtypes.Uint8, c.out, c.blocks, 16), sh(dtypes.Uint8, c.out, nc), sh(dtypes.Float32, 256, 1)}
		data := []any{randFlat(r, shs[0], false), packed, codes, half}
		pairs := nvfp4PairTable
		if c.int4Pairs {
			pairs = int4PairTable
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			tb := ps[3]
			if c.constTable {
				var err error
				if tb, err = b.Constant(half, 256, 1); err != nil {
					return nil, err
				}
			}
			wt, err := nibbleTableForm(b, pairs[:], ps[1], ps[2], tb, c.out, k, c.span)
			if err != nil {
				return nil, err
			}
			dot, err = b.DotGeneral(ps[0], []int{c.contrax}, nil, wt, []int{1}, nil)
			return dot, err
		}
		want, _, err := run(ref, shs, data, build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := run(cpu, shs, data, build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, fmt.Sprintf("nvfp4 dot %s", c.name), dtypes.Float32, asFloat64(got), asFloat64(want))
		a := dot.(*node).aux.(*dotAux)
		if rewritten := a.nvfp4 && a.int4 && len(dot.(*node).inputs) == 4; rewritten != c.rewritten {
			t.Errorf("%s: rewritten to read NVFP4: %v, want %v", c.name, rewritten, c.rewritten)
		}
		if !c.rewritten || c.contrax != len(c.x)-1 {
			continue
		}
		// With int8 activations: the go backend's product of the
		// activations quantised and dequantised.
		q8, err := New("act=int8")
		if err != nil {
			t.Fatal(err)
		}
		compareInt8Activations(t, "nvfp4 dot "+c.name, ref, q8, shs, data, build, nil)
	}
}
