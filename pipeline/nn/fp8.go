package nn

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/safetensors"
)

// FP8 weights held as the Hub's FP8 checkpoints store them (quant_method
// "fp8"): E4M3 bytes u8 [out, in] and one f32 scale per block of b0×b1
// (weight_scale_inv) [⌈out/b0⌉, ⌈in/b1⌉].

// fp8Table is DequantizeFP8's table: the E4M3 value of each byte, as the
// loader decodes it (NaN for 0x7F and 0xFF).
var fp8Table = func() [][]float32 {
	t := make([][]float32, 256)
	for b := range t {
		t[b] = []float32{safetensors.F8E4M3ToFloat32(byte(b))}
	}
	return t
}()

// DequantizeFP8 is the FP8 weight w (u8 [..., out, in]: a matrix or a
// stack of them, routed experts) with block scales scales (f32 [...,
// ⌈out/b0⌉, ⌈in/b1⌉]) as a [..., out, in] tensor of dtype. The form is
// fixed, each byte's value gathered from a constant table and multiplied
// by its block's scale broadcast over the block,
//
//	Mul(Reshape(Gather(values [256, 1], Reshape(ConvertDType(w, i32), n, 1)), ..., out, in),
//	    [Slice](Reshape(BroadcastInDim(Reshape(scales, ..., so, 1, si, 1), [..., so, b0, si, b1]), ..., so·b0, si·b1)))
//
// so that a backend can recognise it (tputool's cpu backend multiplies
// the bytes in place: tpu/cpu/fp8.go, and the chosen experts nn.PairDot
// gathers in its grouped expert node); elsewhere it is computed as
// written.
func DequantizeFP8(w, scales *Node, b0, b1 int, dtype dtypes.DType) *Node {
	d, sd := w.Shape().Dimensions, scales.Shape().Dimensions
	r := len(d)
	if r < 2 || w.DType() != dtypes.Uint8 || scales.DType() != dtypes.Float32 || b0 <= 0 || b1 <= 0 ||
		len(sd) != r || !slices.Equal(sd[:r-2], d[:r-2]) || sd[r-2] != (d[r-2]+b0-1)/b0 || sd[r-1] != (d[r-1]+b1-1)/b1 {
		panic(fmt.Errorf("DequantizeFP8: want uint8 [..., out, in] and float32 scales [..., ⌈out/%d⌉, ⌈in/%d⌉], got %s and %s", b0, b1, w.Shape(), scales.Shape()))
	}
	g := w.Graph()
	lead := d[:r-2]
	dims := func(x ...int) []int { return append(slices.Clone(lead), x...) }
	out, in := d[r-2], d[r-1]
	vals := lookupBytes(Const(g, fp8Table), w) // [n, 1]
	vals = Reshape(vals, dims(out, in)...)
	so, si := sd[r-2], sd[r-1]
	s := BroadcastToDims(Reshape(scales, dims(so, 1, si, 1)...), dims(so, b0, si, b1)...)
	s = Reshape(s, dims(so*b0, si*b1)...)
	if so*b0 != out || si*b1 != in {
		starts := make([]SliceAxisSpec, 0, r)
		for range lead {
			starts = append(starts, AxisRange())
		}
		s = Slice(s, append(starts, AxisRange(0, out), AxisRange(0, in))...)
	}
	res := Mul(vals, s)
	if dtype != dtypes.Float32 {
		res = ConvertDType(res, dtype)
	}
	return res
}

// dequantizeFP8Parts returns w, the scales and the block when x is
// DequantizeFP8's f32 form.
func dequantizeFP8Parts(x *Node) (w, scales *Node, b0, b1 int, ok bool) {
	if x.Type() != NodeTypeMul || x.DType() != dtypes.Float32 {
		return nil, nil, 0, 0, false
	}
	v, s := x.Inputs()[0], x.Inputs()[1]
	if v.Type() != NodeTypeReshape {
		return nil, nil, 0, 0, false
	}
	t, bytes := lookupSource(v.Inputs()[0])
	if t == nil || t.Type() != NodeTypeConstant || t.Shape().Dimensions[1] != 1 {
		return nil, nil, 0, 0, false
	}
	if s.Type() == NodeTypeSlice {
		s = s.Inputs()[0]
	}
	if s.Type() != NodeTypeReshape || s.Inputs()[0].Type() != NodeTypeBroadcastInDim {
		return nil, nil, 0, 0, false
	}
	b := s.Inputs()[0]
	bd := b.Shape().Dimensions // [..., so, b0, si, b1]
	rs := b.Inputs()[0]
	if rs.Type() != NodeTypeReshape || len(bd) < 4 {
		return nil, nil, 0, 0, false
	}
	return bytes, rs.Inputs()[0], bd[len(bd)-3], bd[len(bd)-1], true
}
