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

// DequantizeNVFP4Tables is an NVFP4 stack whose matrices' rows fall in
// parts of their own global scale (an expert stack compressed-tensors
// stores as one Linear per expert and projection: gate_up's gate rows
// and up rows) as a [..., out, in] tensor of dtype: packed and codes as
// DequantizeNVFP4's, and halves F32 [..., T, 256], the tables of each
// matrix's T parts of out/T rows (part t's codes index halves[..., t, :]):
//
//	W[..., o, i] = 2·fp4 · halves[..., o/(out/T), codes[..., o, i/16]]
//
// The form is DequantizeNVFP4's with the codes offset into the tables
// laid end to end by a constant (256 per table, in order),
//
//	Reshape(Mul(Reshape(Gather(pairs, Reshape(ConvertDType(packed, i32), n, 1)), ..., out, in/16, 16),
//	            BroadcastInDim(Reshape(Gather(Reshape(halves, M·T·256, 1),
//	                Reshape(Add(Reshape(ConvertDType(codes, i32), M·T, out/T·in/16), BroadcastInDim(offsets [M·T, 1])), n/16, 1)),
//	                ..., out, in/16, 1))), ..., out, in)
//
// for M matrices, so that a backend can recognise it (tputool's cpu
// backend does, for the chosen experts nn.PairDot gathers: tpu/cpu/grouped.go);
// elsewhere it is computed as written.
func DequantizeNVFP4Tables(packed, codes, halves *Node, dtype dtypes.DType) *Node {
	bd, hd := packed.Shape().Dimensions, halves.Shape().Dimensions
	r := len(bd)
	ok := r >= 3 && bd[r-1] == 16 && packed.DType() == dtypes.Uint8 && codes.DType() == dtypes.Uint8 &&
		slices.Equal(codes.Shape().Dimensions, append(slices.Clone(bd[:r-2]), bd[r-2]*2)) &&
		halves.DType() == dtypes.Float32 && len(hd) == r-1 && slices.Equal(hd[:r-3], bd[:r-3]) && hd[r-2] == 256 &&
		hd[r-3] > 0 && bd[r-3]%hd[r-3] == 0
	if !ok {
		panic(fmt.Errorf("DequantizeNVFP4Tables: want uint8 packed [..., out, in/32, 16], uint8 codes [..., out, in/16] and float32 tables [..., T, 256] with T dividing out, got %s, %s and %s",
			packed.Shape(), codes.Shape(), halves.Shape()))
	}
	g := packed.Graph()
	lead := slices.Clone(bd[:r-3])
	out, ng, parts := bd[r-3], bd[r-2]*2, hd[r-3]
	m := 1
	for _, d := range lead {
		m *= d
	}
	dims := func(d ...int) []int { return append(slices.Clone(lead), d...) }
	vals := Reshape(lookupBytes(Const(g, nvfp4Pairs), packed), dims(out, ng, 16)...)
	offsets := make([][]int32, m*parts)
	for t := range offsets {
		offsets[t] = []int32{int32(256 * t)}
	}
	idx := Reshape(ConvertDType(codes, dtypes.Int32), m*parts, out/parts*ng)
	idx = Add(idx, BroadcastToDims(Const(g, offsets), m*parts, out/parts*ng))
	sc := Gather(Reshape(halves, m*parts*256, 1), Reshape(idx, m*out*ng, 1))
	sc = Reshape(sc, dims(out, ng, 1)...)
	w := Reshape(Mul(vals, BroadcastToDims(sc, dims(out, ng, 16)...)), dims(out, 16*ng)...)
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}

// dequantizeNVFP4TablesParts returns packed, codes and halves when w is
// DequantizeNVFP4Tables' f32 form.
func dequantizeNVFP4TablesParts(w *Node) (packed, codes, halves *Node, ok bool) {
	v, b, ok := valuesTimesScales(w)
	if !ok || b.Inputs()[0].Type() != NodeTypeReshape {
		return nil, nil, nil, false
	}
	pt, px := lookupSource(v.Inputs()[0])
	g := b.Inputs()[0].Inputs()[0]
	if pt == nil || pt.Type() != NodeTypeConstant || g.Type() != NodeTypeGather {
		return nil, nil, nil, false
	}
	ht, idx := g.Inputs()[0], g.Inputs()[1]
	if ht.Type() != NodeTypeReshape || idx.Type() != NodeTypeReshape {
		return nil, nil, nil, false
	}
	add := idx.Inputs()[0]
	if add.Type() != NodeTypeAdd || add.Inputs()[0].Type() != NodeTypeReshape || add.Inputs()[1].Type() != NodeTypeBroadcastInDim ||
		add.Inputs()[1].Inputs()[0].Type() != NodeTypeConstant {
		return nil, nil, nil, false
	}
	c := add.Inputs()[0].Inputs()[0]
	if c.Type() != NodeTypeConvertDType || c.Inputs()[0].DType() != dtypes.Uint8 {
		return nil, nil, nil, false
	}
	packed, codes, halves = px, c.Inputs()[0], ht.Inputs()[0]
	if halves.DType() != dtypes.Float32 || halves.Rank() != packed.Rank()-1 || halves.Shape().Dimensions[halves.Rank()-1] != 256 {
		return nil, nil, nil, false
	}
	return packed, codes, halves, true
}
