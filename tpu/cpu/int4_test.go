package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// TestDotGeneralInt4 builds nn.DequantizeInt4's form under a DotGeneral
// (packed values and codes decoded through the constant pairs table and
// the matrix's table input): the cpu backend multiplies the int4 weight
// directly (checked by the rewritten node's inputs) and agrees with the go
// backend, which computes the f32 weight as written. A pairs table that
// differs from nn.DequantizeInt4's, or a scale table that is a constant,
// is not taken for it.
func TestDotGeneralInt4(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name       string
		x          []int
		out, g     int
		contrax    int
		badPairs   bool
		constTable bool
	}{
		{"prefill", []int{5, 128}, 33, 4, 1, false, false},
		{"decode", []int{1, 96}, 7, 3, 1, false, false},
		{"rank 3", []int{2, 3, 64}, 17, 2, 2, false, false},
		{"other pairs", []int{3, 64}, 9, 2, 1, true, false},
		{"constant table", []int{3, 64}, 9, 2, 1, false, true},
	} {
		k := c.g * 32
		r := rand.New(rand.NewPCG(37, uint64(c.out)))
		w := make([]float32, c.out*k)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		table := kernels.Int4Table(kernels.Int4Range(w, c.out, k))
		packed, codes := kernels.QuantizeInt4(w, c.out, k, table)
		shs := []shapes.Shape{sh(dtypes.Float32, c.x...), sh(dtypes.Uint8, c.out, c.g, 16), sh(dtypes.Uint8, c.out, c.g), sh(dtypes.Float32, 256, 1)}
		data := []any{randFlat(r, shs[0], false), packed, codes, table}
		pairs := int4PairTable
		if c.badPairs {
			pairs[5] = 3
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			tb := ps[3]
			if c.constTable {
				var err error
				if tb, err = b.Constant(table, 256, 1); err != nil {
					return nil, err
				}
			}
			wt, err := nibbleTableForm(b, pairs[:], ps[1], ps[2], tb, c.out, k, 32)
			if err != nil {
				return nil, err
			}
			dot, err = b.DotGeneral(ps[0], []int{c.contrax}, nil, wt, []int{1}, nil)
			return dot, err
		}
		compareBackends(t, fmt.Sprintf("int4 dot %s", c.name), ref, cpu, shs, data, build)
		n := dot.(*node)
		rewritten := n.aux.(*dotAux).int4 && len(n.inputs) == 4
		if rewritten == (c.badPairs || c.constTable) {
			t.Errorf("%s: rewritten to read int4: %v, want %v", c.name, rewritten, !rewritten)
		}
		if !rewritten {
			continue
		}
		// With int8 activations (act=int8): the go backend's product of
		// the activations quantised and dequantised (kernels.FakeQuantizeQ8
		// along the contracted axis, the last here).
		if c.contrax != len(c.x)-1 {
			continue
		}
		q8 := int8ActBackend(t)
		compareInt8Activations(t, "int4 dot "+c.name, ref, q8, shs, data, build, nil)
		if a := dot.(*node).aux.(*dotAux); !a.int4Q8 {
			t.Errorf("%s: act=int8 did not make the product quantise its activations", c.name)
		}
	}
}

// nibbleTableForm builds nn.DequantizeInt4's form (and nn.
// DequantizeNVFP4's: another pairs table, a code per 16 values) of an
// [out, k] weight: the packed values' pairs looked up in the constant
// pairs, times the table entry each code (a code per span values) looks
// up.
func nibbleTableForm(b backends.Builder, pairs []float32, packed, codes, table backends.Op, out, k, span int) (backends.Op, error) {
	decode := func(tb, x backends.Op, width, n int) (backends.Op, error) {
		i, _ := b.ConvertDType(x, dtypes.Int32)
		i, _ = b.Reshape(i, n, 1)
		return b.Gather(tb, i, 1, []int{1}, []int{0}, []int{0}, []int{1, width}, false)
	}
	pt, err := b.Constant(pairs, 256, 2)
	if err != nil {
		return nil, err
	}
	vals, err := decode(pt, packed, 2, out*k/2)
	if err != nil {
		return nil, err
	}
	nc := k / span
	vals, _ = b.Reshape(vals, out, nc, span)
	sc, err := decode(table, codes, 1, out*nc)
	if err != nil {
		return nil, err
	}
	sc, _ = b.Reshape(sc, out, nc, 1)
	sc, _ = b.BroadcastInDim(sc, sh(dtypes.Float32, out, nc, span), []int{0, 1, 2})
	m, _ := b.Mul(vals, sc)
	return b.Reshape(m, out, k)
}
