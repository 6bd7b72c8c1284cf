package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestGroupedExpertDotMXFP4 builds nn.PairDot's MXFP4 form (whole-row
// gathers of the blocks [E, N, G, 16] and scales [E, N, G], decoded
// through the constant tables, under a batched DotGeneral): the cpu
// backend rewrites it into the grouped node reading MXFP4 in place (one
// pair per expert: GemvMulti; several: the GEMM) and agrees with the go
// backend, which decodes the gathered matrices as written. A table that
// differs from nn.DequantizeMXFP4's is not taken for it.
func TestGroupedExpertDotMXFP4(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name     string
		e, n, g  int
		ids      []int32
		badTable bool
	}{
		{"spread", 5, 24, 2, []int32{3, 0, 3, 4, 1, 3, 0}, false},
		{"one pair each", 4, 9, 3, []int32{2, 0, 1}, false},
		{"all on one", 4, 16, 1, []int32{1, 1, 1, 1}, false},
		{"other table", 3, 8, 1, []int32{0, 2}, true},
	} {
		p, k := len(c.ids), c.g*32
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Uint8, c.e, c.n, c.g, 16), sh(dtypes.Uint8, c.e, c.n, c.g), sh(dtypes.Int32, p, 1)}
		r := rand.New(rand.NewPCG(13, uint64(p)))
		blocks := make([]uint8, shs[1].Size())
		for i := range blocks {
			blocks[i] = uint8(r.IntN(256))
		}
		scales := make([]uint8, shs[2].Size())
		for i := range scales {
			scales[i] = uint8(120 + r.IntN(12))
		}
		data := []any{randFlat(r, shs[0], false), blocks, scales, c.ids}
		pairs := mxfp4PairTable
		if c.badTable {
			pairs[3] = 7
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			gb, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, c.n, c.g, 16}, false)
			if err != nil {
				return nil, err
			}
			gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, c.n, c.g}, false)
			if err != nil {
				return nil, err
			}
			decode := func(x backends.Op, table []float32, width, n int) (backends.Op, error) {
				t, err := b.Constant(table, 256, width)
				if err != nil {
					return nil, err
				}
				i, _ := b.ConvertDType(x, dtypes.Int32)
				i, _ = b.Reshape(i, n, 1)
				return b.Gather(t, i, 1, []int{1}, []int{0}, []int{0}, []int{1, width}, false)
			}
			vals, err := decode(gb, pairs[:], 2, p*c.n*c.g*16)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, p, c.n, c.g, 32)
			sc, err := decode(gs, mxfp4ScaleTable[:], 1, p*c.n*c.g)
			if err != nil {
				return nil, err
			}
			sc, _ = b.Reshape(sc, p, c.n, c.g, 1)
			sc, _ = b.BroadcastInDim(sc, sh(dtypes.Float32, p, c.n, c.g, 32), []int{0, 1, 2, 3})
			m, _ := b.Mul(vals, sc)
			w, _ := b.Reshape(m, p, c.n, k)
			dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
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
		compareFlat(t, c.name, dtypes.Float32, asFloat64(got), asFloat64(want))
		n := dot.(*node)
		rewritten := n.op == opTypeGrouped && n.aux.(*groupedAux).mxfp4
		if rewritten == c.badTable {
			t.Errorf("%s: rewritten into the grouped MXFP4 node: %v, want %v", c.name, rewritten, !c.badTable)
		}
	}
}
