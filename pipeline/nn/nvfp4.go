package nn

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// NVFP4 weights held as compressed-tensors checkpoints store them
// (tpu/cpu/kernels/nvfp4.go states the format): packed U8 [..., out,
// in/32, 16], two FP4 E2M1 codes a byte, low nibble first; codes U8 [...,
// out, in/16], each 16 values' E4M3 scale byte as stored; and the matrix's
// table half F32 [256, 1]: half of each code's effective scale (its E4M3
// value over the tensor's global scale).

// nvfp4Pairs is DequantizeNVFP4's constant table: each byte's two E2M1
// values doubled (low nibble first), which half's entries scale.
var nvfp4Pairs = func() [][]float32 {
	pairs := make([][]float32, 256)
	for b := range pairs {
		pairs[b] = []float32{2 * mxfp4Pairs[b][0], 2 * mxfp4Pairs[b][1]}
	}
	return pairs
}()

// DequantizeNVFP4 is the NVFP4 weight of packed, codes and half as a
// [..., out, in] tensor of dtype: W = 2·fp4 · half[code], which is fp4
// times the effective scale exactly. The form is DequantizeInt4's with
// the doubled E2M1 values as the constant pairs table and a code per 16
// values,
//
//	Reshape(Mul(Reshape(Gather(pairs, Reshape(ConvertDType(packed, i32), n, 1)), ..., out, in/16, 16),
//	            BroadcastInDim(Reshape(Gather(half, Reshape(ConvertDType(codes, i32), n/8, 1)), ..., out, in/16, 1))), ..., out, in)
//
// so that a backend can recognise it under a DotGeneral and multiply the
// NVFP4 weight directly (tputool's cpu backend does: tpu/cpu/quant.go);
// elsewhere it is computed as written.
func DequantizeNVFP4(packed, codes, half *Node, dtype dtypes.DType) *Node {
	bd := packed.Shape().Dimensions
	r := len(bd)
	want := []int(nil)
	if r >= 3 {
		want = append(slices.Clone(bd[:r-2]), bd[r-2]*2)
	}
	if r < 3 || bd[r-1] != 16 || packed.DType() != dtypes.Uint8 || codes.DType() != dtypes.Uint8 ||
		!slices.Equal(codes.Shape().Dimensions, want) || half.DType() != dtypes.Float32 || !slices.Equal(half.Shape().Dimensions, []int{256, 1}) {
		panic(fmt.Errorf("DequantizeNVFP4: want uint8 packed [..., out, in/32, 16], uint8 codes [..., out, in/16] and a float32 table [256, 1], got %s, %s and %s",
			packed.Shape(), codes.Shape(), half.Shape()))
	}
	g := packed.Graph()
	lead := codes.Shape().Dimensions                          // [..., out, in/16]
	pairs := lookupBytes(Const(g, nvfp4Pairs), packed)        // [n, 2]
	vals := Reshape(pairs, append(slices.Clone(lead), 16)...) // [..., out, in/16, 16]
	sc := lookupBytes(half, codes)                            // [n/8, 1]
	sc = Reshape(sc, append(slices.Clone(lead), 1)...)        // [..., out, in/16, 1]
	w := Reshape(Mul(vals, BroadcastToDims(sc, vals.Shape().Dimensions...)), append(slices.Clone(bd[:r-2]), 32*bd[r-2])...)
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}
