package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/loader/safetensors"
)

// TestDotGeneralFP8 builds nn.DequantizeFP8's form under a DotGeneral
// (E4M3 bytes decoded through the constant values table, times the block
// scales broadcast over their blocks, sliced where the blocks overhang):
// the cpu backend multiplies the bytes directly (checked by the rewritten
// node) and agrees with the go backend, which computes the f32 weight as
// written. Another values table is not taken for it.
func TestDotGeneralFP8(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name          string
		x             []int
		out, in       int
		b0, b1        int
		contrax       int
		badTable      bool
		wantRewritten bool
	}{
		{"prefill", []int{5, 128}, 33, 128, 16, 32, 1, false, true},
		{"decode, partial blocks", []int{1, 100}, 37, 100, 8, 16, 1, false, true},
		{"rank 3", []int{2, 3, 64}, 17, 64, 128, 128, 2, false, true},
		{"other table", []int{3, 64}, 9, 64, 4, 16, 1, true, false},
	} {
		r := rand.New(rand.NewPCG(41, uint64(c.out)))
		so, si := (c.out+c.b0-1)/c.b0, (c.in+c.b1-1)/c.b1
		w := make([]uint8, c.out*c.in)
		for i := range w {
			for w[i] = uint8(r.IntN(256)); w[i]&0x7f == 0x7f; w[i] = uint8(r.IntN(256)) {
			}
		}
		scales := make([]float32, so*si)
		for i := range scales {
			scales[i] = float32(0.001 + r.Float64()/100)
		}
		shs := []shapes.Shape{sh(dtypes.Float32, c.x...), sh(dtypes.Uint8, c.out, c.in), sh(dtypes.Float32, so, si)}
		data := []any{randFlat(r, shs[0], false), w, scales}
		table := fp8Table
		if c.badTable {
			table[9] = 5
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			tb, err := b.Constant(table[:], 256, 1)
			if err != nil {
				return nil, err
			}
			i, _ := b.ConvertDType(ps[1], dtypes.Int32)
			i, _ = b.Reshape(i, c.out*c.in, 1)
			vals, err := b.Gather(tb, i, 1, []int{1}, []int{0}, []int{0}, []int{1, 1}, false)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, c.out, c.in)
			s, _ := b.Reshape(ps[2], so, 1, si, 1)
			s, _ = b.BroadcastInDim(s, sh(dtypes.Float32, so, c.b0, si, c.b1), []int{0, 1, 2, 3})
			s, _ = b.Reshape(s, so*c.b0, si*c.b1)
			if so*c.b0 != c.out || si*c.b1 != c.in {
				s, _ = b.Slice(s, []int{0, 0}, []int{c.out, c.in}, []int{1, 1})
			}
			wt, _ := b.Mul(vals, s)
			dot, err = b.DotGeneral(ps[0], []int{c.contrax}, nil, wt, []int{1}, nil)
			return dot, err
		}
		checkData(t, fmt.Sprintf("fp8 dot %s", c.name), ref, cpu, shs, data, build)
		n := dot.(*node)
		if rewritten := n.aux.(*dotAux).fp8B0 > 0; rewritten != c.wantRewritten {
			t.Errorf("%s: rewritten to read FP8: %v, want %v", c.name, rewritten, c.wantRewritten)
		}
	}
}

// The table rewriteFP8 looks for is nn.DequantizeFP8's, bit for bit: the
// loader's E4M3 decoding (NaN bytes included), so that the models' FP8
// weights are multiplied in place rather than decoded at every step.
func TestFP8TableIsTheLoaders(t *testing.T) {
	loaders := make([]float32, 256)
	for b := range loaders {
		loaders[b] = safetensors.F8E4M3ToFloat32(byte(b))
	}
	if !sameBits(fp8Table[:], loaders) {
		t.Error("fp8Table differs from loader/safetensors' E4M3 values")
	}
}

// TestGroupedExpertDotFP8 builds nn.PairDot's FP8 form (the gathered
// bytes decoded through the E4M3 table, times the gathered block scales
// broadcast over their blocks, sliced where they overhang): the cpu
// backend rewrites it into the grouped node reading the bytes in place
// and agrees with the go backend, alone on an expert or not.
func TestGroupedExpertDotFP8(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name    string
		e, n, k int
		b0, b1  int
		ids     []int32
	}{
		{"spread", 5, 24, 64, 16, 32, []int32{3, 0, 3, 4, 1, 3, 0}},
		{"one pair each, overhanging blocks", 4, 9, 40, 4, 16, []int32{2, 0, 1}},
	} {
		p := len(c.ids)
		so, si := (c.n+c.b0-1)/c.b0, (c.k+c.b1-1)/c.b1
		shs := []shapes.Shape{sh(dtypes.Float32, p, c.k), sh(dtypes.Uint8, c.e, c.n, c.k), sh(dtypes.Float32, c.e, so, si), sh(dtypes.Int32, p, 1)}
		r := rand.New(rand.NewPCG(71, uint64(p)))
		w := make([]uint8, c.e*c.n*c.k)
		for i := range w {
			for w[i] = uint8(r.IntN(256)); w[i]&0x7f == 0x7f; w[i] = uint8(r.IntN(256)) {
			}
		}
		scales := make([]float32, c.e*so*si)
		for i := range scales {
			scales[i] = float32(0.001 + r.Float64()/100)
		}
		data := []any{randFlat(r, shs[0], false), w, scales, c.ids}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			gw, err := b.Gather(ps[1], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, c.n, c.k}, false)
			if err != nil {
				return nil, err
			}
			gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, so, si}, false)
			if err != nil {
				return nil, err
			}
			tb, err := b.Constant(fp8Table[:], 256, 1)
			if err != nil {
				return nil, err
			}
			vals, err := gatherByBytes(b, tb, gw, 1, p*c.n*c.k)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, p, c.n, c.k)
			s, _ := b.Reshape(gs, p, so, 1, si, 1)
			s, _ = b.BroadcastInDim(s, sh(dtypes.Float32, p, so, c.b0, si, c.b1), []int{0, 1, 2, 3, 4})
			s, _ = b.Reshape(s, p, so*c.b0, si*c.b1)
			if so*c.b0 != c.n || si*c.b1 != c.k {
				s, _ = b.Slice(s, []int{0, 0, 0}, []int{p, c.n, c.k}, []int{1, 1, 1})
			}
			wt, _ := b.Mul(vals, s)
			dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, wt, []int{2}, []int{0})
			return dot, err
		}
		checkData(t, c.name, ref, cpu, shs, data, build)
		if n := dot.(*node); n.op != opTypeGrouped || n.aux.(*groupedAux).fp8B0 != c.b0 {
			t.Errorf("%s: not rewritten into the grouped FP8 node", c.name)
		}
	}
}
