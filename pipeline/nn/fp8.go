package nn

import (
	"fmt"

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

// DequantizeFP8 is the FP8 weight w (u8 [out, in]) with block scales
// scales (f32 [⌈out/b0⌉, ⌈in/b1⌉]) as an [out, in] tensor of dtype. The
// form is fixed, each byte's value gathered from a constant table and
// multiplied by its block's scale broadcast over the block,
//
//	Mul(Reshape(Gather(values [256, 1], Reshape(ConvertDType(w, i32), out·in, 1)), out, in),
//	    [Slice](Reshape(BroadcastInDim(Reshape(scales, so, 1, si, 1), [so, b0, si, b1]), so·b0, si·b1)))
//
// so that a backend can recognise it (tputool's cpu backend multiplies
// the bytes in place: tpu/cpu/fp8.go); elsewhere it is computed as
// written.
func DequantizeFP8(w, scales *Node, b0, b1 int, dtype dtypes.DType) *Node {
	d, sd := w.Shape().Dimensions, scales.Shape().Dimensions
	if len(d) != 2 || w.DType() != dtypes.Uint8 || scales.DType() != dtypes.Float32 || b0 <= 0 || b1 <= 0 ||
		len(sd) != 2 || sd[0] != (d[0]+b0-1)/b0 || sd[1] != (d[1]+b1-1)/b1 {
		panic(fmt.Errorf("DequantizeFP8: want uint8 [out, in] and float32 scales [⌈out/%d⌉, ⌈in/%d⌉], got %s and %s", b0, b1, w.Shape(), scales.Shape()))
	}
	g := w.Graph()
	out, in := d[0], d[1]
	vals := lookupBytes(Const(g, fp8Table), w) // [out·in, 1]
	vals = Reshape(vals, out, in)
	so, si := sd[0], sd[1]
	s := BroadcastToDims(Reshape(scales, so, 1, si, 1), so, b0, si, b1)
	s = Reshape(s, so*b0, si*b1)
	if so*b0 != out || si*b1 != in {
		s = Slice(s, AxisRange(0, out), AxisRange(0, in))
	}
	r := Mul(vals, s)
	if dtype != dtypes.Float32 {
		r = ConvertDType(r, dtype)
	}
	return r
}
