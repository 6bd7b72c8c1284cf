package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
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
			var err error
			dot, err = buildNibblePairDot(b, ps, p, c.n, c.g, pairs[:], func(gs backends.Op) (backends.Op, error) {
				t, err := b.Constant(mxfp4ScaleTable[:], 256, 1)
				if err != nil {
					return nil, err
				}
				return gatherByBytes(b, t, gs, 1, p*c.n*c.g)
			})
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		n := dot.(*node)
		rewritten := n.op == opTypeGrouped && n.aux.(*groupedAux).mxfp4
		if rewritten == c.badTable {
			t.Errorf("%s: rewritten into the grouped MXFP4 node: %v, want %v", c.name, rewritten, !c.badTable)
		}
	}
}

// buildNibblePairDot builds nn.PairDot's form over a nibble-coded stack:
// ps are the rows [P, K], blocks [E, N, G, 16], scale codes [E, N, G] and
// ids [P, 1] (then any more inputs scales reads); the blocks' bytes decode
// through the constant pairs table, the gathered codes through scales.
func buildNibblePairDot(b backends.Builder, ps []backends.Op, p, n, g int, pairs []float32, scales func(gs backends.Op) (backends.Op, error)) (backends.Op, error) {
	gb, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, n, g, 16}, false)
	if err != nil {
		return nil, err
	}
	gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, n, g}, false)
	if err != nil {
		return nil, err
	}
	t, err := b.Constant(pairs, 256, 2)
	if err != nil {
		return nil, err
	}
	vals, err := gatherByBytes(b, t, gb, 2, p*n*g*16)
	if err != nil {
		return nil, err
	}
	vals, _ = b.Reshape(vals, p, n, g, 32)
	sc, err := scales(gs)
	if err != nil {
		return nil, err
	}
	sc, _ = b.Reshape(sc, p, n, g, 1)
	sc, _ = b.BroadcastInDim(sc, sh(dtypes.Float32, p, n, g, 32), []int{0, 1, 2, 3})
	m, _ := b.Mul(vals, sc)
	w, _ := b.Reshape(m, p, n, 32*g)
	return b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
}

// gatherByBytes gathers rows of table [256, width] by the count bytes of
// x: Gather(table, Reshape(ConvertDType(x, i32), count, 1)).
func gatherByBytes(b backends.Builder, table, x backends.Op, width, count int) (backends.Op, error) {
	i, _ := b.ConvertDType(x, dtypes.Int32)
	i, _ = b.Reshape(i, count, 1)
	return b.Gather(table, i, 1, []int{1}, []int{0}, []int{0}, []int{1, width}, false)
}

// TestGroupedExpertDotInt4 builds nn.PairDot's int4 form (as the MXFP4
// one above, with int4's pairs table and the stack's scale table an
// input [256, 1]): the cpu backend rewrites it into the grouped node
// reading int4 in place and agrees with the go backend; with int8
// activations (act=int8) every pair's row is quantised per block of 32
// first, alone on its expert or not. A constant scale table or another
// pairs table is not taken for it.
func TestGroupedExpertDotInt4(t *testing.T) {
	ref, cpu := backendsForTest(t)
	q8 := int8ActBackend(t)
	for _, c := range []struct {
		name               string
		e, n, g            int
		ids                []int32
		badPairs, constTab bool
	}{
		{"spread", 5, 24, 2, []int32{3, 0, 3, 4, 1, 3, 0}, false, false},
		{"one pair each", 4, 9, 3, []int32{2, 0, 1}, false, false},
		{"all on one", 4, 16, 1, []int32{1, 1, 1, 1}, false, false},
		{"other pairs", 3, 8, 1, []int32{0, 2}, true, false},
		{"constant table", 3, 8, 1, []int32{0, 2}, false, true},
	} {
		p, k := len(c.ids), c.g*32
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Uint8, c.e, c.n, c.g, 16), sh(dtypes.Uint8, c.e, c.n, c.g),
			sh(dtypes.Int32, p, 1), sh(dtypes.Float32, 256, 1)}
		r := rand.New(rand.NewPCG(17, uint64(p)))
		w := randFlat(r, sh(dtypes.Float32, c.e*c.n, k), false).([]float32)
		lo, hi := kernels.Int4Range(w, c.e*c.n, k)
		table := kernels.Int4Table(lo, hi)
		packed, codes := kernels.QuantizeInt4(w, c.e*c.n, k, table)
		data := []any{randFlat(r, shs[0], false), packed, codes, c.ids, table}
		pairs := int4PairTable
		if c.badPairs {
			pairs[5] = 7
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			var err error
			dot, err = buildNibblePairDot(b, ps, p, c.n, c.g, pairs[:], func(gs backends.Op) (backends.Op, error) {
				t := ps[4]
				if c.constTab {
					if t, err = b.Constant(table, 256, 1); err != nil {
						return nil, err
					}
				}
				return gatherByBytes(b, t, gs, 1, p*c.n*c.g)
			})
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		n := dot.(*node)
		rewritten := n.op == opTypeGrouped && n.aux.(*groupedAux).int4
		if rewritten == (c.badPairs || c.constTab) {
			t.Errorf("%s: rewritten into the grouped int4 node: %v, want %v", c.name, rewritten, !rewritten)
		}
		if !rewritten {
			continue
		}
		// int8 activations: the go backend's product of the rows
		// quantised and dequantised per block of 32.
		compareInt8Activations(t, c.name, ref, q8, shs, data, build, nil)
		if a := dot.(*node).aux.(*groupedAux); !a.int4Q8 {
			t.Errorf("%s: act=int8 did not make the grouped product quantise its rows", c.name)
		}
	}
}
