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
		compareBackends(t, fmt.Sprintf("nvfp4 dot %s", c.name), ref, cpu, shs, data, build)
		a := dot.(*node).aux.(*dotAux)
		if rewritten := a.nvfp4 && a.int4 && len(dot.(*node).inputs) == 4; rewritten != c.rewritten {
			t.Errorf("%s: rewritten to read NVFP4: %v, want %v", c.name, rewritten, c.rewritten)
		}
		if !c.rewritten || c.contrax != len(c.x)-1 {
			continue
		}
		// With int8 activations: the go backend's product of the
		// activations quantised and dequantised.
		q8 := int8ActBackend(t)
		compareInt8Activations(t, "nvfp4 dot "+c.name, ref, q8, shs, data, build, nil)
	}
}

// TestGroupedExpertDotNVFP4Tables builds nn.PairDot's form over an NVFP4
// stack with a table per part (nn.DequantizeNVFP4Tables of the gathered
// packed values, scale bytes and tables, the codes offset by the constant
// 256·i): the cpu backend rewrites it into the grouped node reading each
// part with its own table and agrees with the go backend, alone on an
// expert or not (GEMVs, GEMMs), and with int8 activations. Offsets that
// are not 256·i are not taken for it (and still agree as what they are).
func TestGroupedExpertDotNVFP4Tables(t *testing.T) {
	ref, cpu := backendsForTest(t)
	q8 := int8ActBackend(t)
	for _, c := range []struct {
		name          string
		e, n, blks    int
		parts         int
		ids           []int32
		shiftedOffset bool
	}{
		{"two parts, spread", 5, 24, 4, 2, []int32{3, 0, 3, 4, 1, 3, 0}, false},
		{"two parts, one pair each", 4, 18, 2, 2, []int32{2, 0, 1}, false},
		{"one part, all on one", 3, 16, 4, 1, []int32{1, 1, 1, 1}, false},
		{"three parts, spread", 4, 12, 2, 3, []int32{0, 3, 3, 1, 0}, false},
		{"offsets not 256·i", 4, 18, 2, 2, []int32{2, 0, 2}, true},
	} {
		p, k := len(c.ids), c.blks*32
		ng := k / 16
		rows := c.n / c.parts
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Uint8, c.e, c.n, c.blks, 16), sh(dtypes.Uint8, c.e, c.n, ng),
			sh(dtypes.Int32, p, 1), sh(dtypes.Float32, c.e, c.parts, 256)}
		r := rand.New(rand.NewPCG(71, uint64(p)))
		packed, codes := make([]uint8, c.e*c.n*k/2), make([]uint8, c.e*c.n*ng)
		for i := range packed {
			packed[i] = uint8(r.IntN(256))
		}
		for i := range codes {
			codes[i] = uint8(r.IntN(256))
		}
		tables := make([]float32, c.e*c.parts*256)
		for i := range tables {
			tables[i] = float32(0.001 + r.Float64()/50)
		}
		data := []any{randFlat(r, shs[0], false), packed, codes, c.ids, tables}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			gp, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, c.n, c.blks, 16}, false)
			if err != nil {
				return nil, err
			}
			gc, err := b.Gather(ps[2], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, c.n, ng}, false)
			if err != nil {
				return nil, err
			}
			gt, err := b.Gather(ps[4], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, c.parts, 256}, false)
			if err != nil {
				return nil, err
			}
			pt, err := b.Constant(nvfp4PairTable[:], 256, 2)
			if err != nil {
				return nil, err
			}
			vals, err := gatherByBytes(b, pt, gp, 2, p*c.n*c.blks*16)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, p, c.n, ng, 16)
			offsets := make([]int32, p*c.parts)
			for i := range offsets {
				offsets[i] = int32(256 * i)
				if c.shiftedOffset {
					offsets[i] = int32(256*i + 1)
				}
			}
			off, err := b.Constant(offsets, p*c.parts, 1)
			if err != nil {
				return nil, err
			}
			off, _ = b.BroadcastInDim(off, sh(dtypes.Int32, p*c.parts, rows*ng), []int{0, 1})
			idx, _ := b.ConvertDType(gc, dtypes.Int32)
			idx, _ = b.Reshape(idx, p*c.parts, rows*ng)
			idx, _ = b.Add(idx, off)
			idx, _ = b.Reshape(idx, p*c.n*ng, 1)
			ht, _ := b.Reshape(gt, p*c.parts*256, 1)
			s, err := b.Gather(ht, idx, 1, []int{1}, []int{0}, []int{0}, []int{1, 1}, false)
			if err != nil {
				return nil, err
			}
			s, _ = b.Reshape(s, p, c.n, ng, 1)
			s, _ = b.BroadcastInDim(s, sh(dtypes.Float32, p, c.n, ng, 16), []int{0, 1, 2, 3})
			w, _ := b.Mul(vals, s)
			w, _ = b.Reshape(w, p, c.n, k)
			dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		n := dot.(*node)
		if rewritten := n.op == opTypeGrouped && n.aux.(*groupedAux).nvfp4Parts == c.parts; rewritten == c.shiftedOffset {
			t.Errorf("%s: rewritten into the grouped NVFP4 node: %v (op %v)", c.name, rewritten, n.op)
			continue
		}
		if !c.shiftedOffset {
			compareInt8Activations(t, c.name, ref, q8, shs, data, build, nil)
		}
	}
}
