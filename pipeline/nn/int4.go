package nn

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// Int4 weights (--quantize int4; tpu/cpu/kernels/int4.go states the
// format): packed U8 [..., out, in/32, 16], two values a byte (low nibble
// first, value nibble − 8), codes U8 [..., out, in/32], one per 32
// values, and the matrix's scale table F32 [256, 1], which codes index.

// int4Pairs is DequantizeInt4's constant table: each byte's two values,
// low nibble first.
var int4Pairs = func() [][]float32 {
	pairs := make([][]float32, 256)
	for b := range pairs {
		pairs[b] = []float32{float32(b&15) - 8, float32(b>>4) - 8}
	}
	return pairs
}()

// DequantizeInt4 is the int4 weight of packed, codes and table as a
// [..., out, in] tensor of dtype. The form is MXFP4's (DequantizeMXFP4)
// with the int4 values as the constant pairs table and the matrix's own
// scale table gathered by the codes:
//
//	Reshape(Mul(Reshape(Gather(pairs, Reshape(ConvertDType(packed, i32), n, 1))),
//	            BroadcastInDim(Reshape(Gather(table, Reshape(ConvertDType(codes, i32), n/16, 1))))))
//
// so that a backend can recognise it under a DotGeneral and multiply the
// int4 weight directly (tputool's cpu backend does: tpu/cpu/quant.go);
// elsewhere it is computed as written.
func DequantizeInt4(packed, codes, table *Node, dtype dtypes.DType) *Node {
	bd := packed.Shape().Dimensions
	r := len(bd)
	if r < 3 || bd[r-1] != 16 || packed.DType() != dtypes.Uint8 || codes.DType() != dtypes.Uint8 ||
		!slices.Equal(codes.Shape().Dimensions, bd[:r-1]) || table.DType() != dtypes.Float32 || !slices.Equal(table.Shape().Dimensions, []int{256, 1}) {
		panic(fmt.Errorf("DequantizeInt4: want uint8 packed [..., out, groups, 16], uint8 codes [..., out, groups] and a float32 table [256, 1], got %s, %s and %s",
			packed.Shape(), codes.Shape(), table.Shape()))
	}
	g := packed.Graph()
	lead := bd[:r-1]                                          // [..., out, groups]
	pairs := lookupBytes(Const(g, int4Pairs), packed)         // [n, 2]
	vals := Reshape(pairs, append(slices.Clone(lead), 32)...) // [..., out, groups, 32]
	sc := lookupBytes(table, codes)                           // [n/16, 1]
	sc = Reshape(sc, append(slices.Clone(lead), 1)...)        // [..., out, groups, 1]
	w := Reshape(Mul(vals, BroadcastToDims(sc, vals.Shape().Dimensions...)), append(slices.Clone(bd[:r-2]), 32*bd[r-2])...)
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}

// dequantizeInt4Parts returns packed, codes and table when w is
// DequantizeInt4's f32 form.
func dequantizeInt4Parts(w *Node) (packed, codes, table *Node, ok bool) {
	pt, packed, table, codes, ok := lookupPair(w)
	if !ok || pt.Type() != NodeTypeConstant || table.Type() == NodeTypeConstant ||
		table.DType() != dtypes.Float32 || !slices.Equal(table.Shape().Dimensions, []int{256, 1}) {
		return nil, nil, nil, false
	}
	// A code per 32 values (DequantizeNVFP4's form has one per 16).
	if pd := packed.Shape().Dimensions; len(pd) < 2 || !slices.Equal(codes.Shape().Dimensions, pd[:len(pd)-1]) {
		return nil, nil, nil, false
	}
	return packed, codes, table, true
}

// DequantizeInt4Groups is a grouped int4 weight (GPTQ, AWQ and
// compressed-tensors 4-bit held at their stored width:
// tpu/cpu/kernels/int4groups.go states the format), a matrix or a stack of
// them (routed experts), as a [..., out, in] tensor of dtype: packed U8
// [..., out, in/32, 16] as DequantizeInt4's, scales F32 [..., out, in/G],
// one per group of G input columns, and mins F32 [..., in/G, out] (by
// group, as checkpoints store zero points) or nil:
//
//	W[..., o, i] = (nibble − 8) · scales[..., o, i/G] + mins[..., i/G, o]
//
// The form is fixed,
//
//	Reshape(Add(Mul(Reshape(Gather(pairs, Reshape(ConvertDType(packed, i32), n, 1)), ..., out, in/G, G),
//	                BroadcastInDim(Reshape(scales, ..., out, in/G, 1))),
//	            BroadcastInDim(Reshape(Transpose(mins), ..., out, in/G, 1))), ..., out, in)
//
// (no Add without mins), so that a backend can recognise it under a
// DotGeneral and multiply the 4-bit weight directly (tputool's cpu
// backend does: tpu/cpu/quant.go, and tpu/cpu/grouped.go for the chosen
// experts nn.PairDot gathers); elsewhere it is computed as written.
func DequantizeInt4Groups(packed, scales, mins *Node, dtype dtypes.DType) *Node {
	return dequantizeNibbleGroups("DequantizeInt4Groups", Const(packed.Graph(), int4Pairs), packed, scales, mins, dtype)
}

// DequantizeFP4Groups is a grouped FP4 weight (NVFP4 expert stacks, whose
// experts each have a global scale of their own:
// tpu/cpu/kernels/nvfp4.go states the format) as a [..., out, in] tensor
// of dtype: packed U8 [..., out, in/32, 16] of E2M1 codes and half F32
// [..., out, in/G], half of each group's effective scale:
//
//	W[..., o, i] = 2·fp4(nibble) · half[..., o, i/G]
//
// in DequantizeInt4Groups' form (without mins) with the doubled E2M1
// values as the pairs table, which tputool's cpu backend recognises.
func DequantizeFP4Groups(packed, half *Node, dtype dtypes.DType) *Node {
	return dequantizeNibbleGroups("DequantizeFP4Groups", Const(packed.Graph(), nvfp4Pairs), packed, half, nil, dtype)
}

// dequantizeNibbleGroups is the grouped form with pairs, the constant
// pairs table [256, 2] (PairDot passes the one of the form it gathers
// from, so that the gathered form has the same values).
func dequantizeNibbleGroups(name string, pairs, packed, scales, mins *Node, dtype dtypes.DType) *Node {
	bd := packed.Shape().Dimensions
	sd := scales.Shape().Dimensions
	r := len(bd)
	ok := r >= 3 && bd[r-1] == 16 && packed.DType() == dtypes.Uint8 && scales.DType() == dtypes.Float32 &&
		len(sd) == r-1 && slices.Equal(sd[:r-2], bd[:r-2]) && sd[r-3] == bd[r-3] && sd[r-2] > 0 && (32*bd[r-2])%sd[r-2] == 0 && (32*bd[r-2]/sd[r-2] == 16 || (32*bd[r-2]/sd[r-2])%32 == 0)
	if ok && mins != nil {
		want := append(slices.Clone(sd[:r-3]), sd[r-2], sd[r-3])
		ok = mins.DType() == dtypes.Float32 && slices.Equal(mins.Shape().Dimensions, want)
	}
	if !ok {
		ms := "none"
		if mins != nil {
			ms = mins.Shape().String()
		}
		panic(fmt.Errorf("%s: want uint8 packed [..., out, blocks, 16], float32 scales [..., out, groups] with groups of 16 or whole blocks, and float32 mins [..., groups, out] or none, got %s, %s and %s",
			name, packed.Shape(), scales.Shape(), ms))
	}
	lead := slices.Clone(bd[:r-3])
	out, in, ng := bd[r-3], 32*bd[r-2], sd[r-2]
	dims := func(d ...int) []int { return append(slices.Clone(lead), d...) }
	vals := Reshape(lookupBytes(pairs, packed), dims(out, ng, in/ng)...)
	w := Mul(vals, BroadcastToDims(Reshape(scales, dims(out, ng, 1)...), dims(out, ng, in/ng)...))
	if mins != nil {
		perm := make([]int, r-1)
		for i := range perm {
			perm[i] = i
		}
		perm[r-3], perm[r-2] = r-2, r-3
		w = Add(w, BroadcastToDims(Reshape(TransposeAllDims(mins, perm...), dims(out, ng, 1)...), dims(out, ng, in/ng)...))
	}
	w = Reshape(w, dims(out, in)...)
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}

// dequantizeInt4GroupsParts returns packed, scales, mins (nil for none)
// and the constant pairs table when w is DequantizeInt4Groups' or
// DequantizeFP4Groups' f32 form.
func dequantizeInt4GroupsParts(w *Node) (packed, scales, mins, pairs *Node, ok bool) {
	if w.Type() != NodeTypeReshape || w.DType() != dtypes.Float32 {
		return nil, nil, nil, nil, false
	}
	x := w.Inputs()[0]
	// groupInput is s under BroadcastInDim(Reshape(s)).
	groupInput := func(b *Node) *Node {
		if b.Type() != NodeTypeBroadcastInDim || b.Inputs()[0].Type() != NodeTypeReshape {
			return nil
		}
		return b.Inputs()[0].Inputs()[0]
	}
	if x.Type() == NodeTypeAdd {
		t := groupInput(x.Inputs()[1])
		if t == nil || t.Type() != NodeTypeTranspose {
			return nil, nil, nil, nil, false
		}
		mins, x = t.Inputs()[0], x.Inputs()[0]
	}
	if x.Type() != NodeTypeMul {
		return nil, nil, nil, nil, false
	}
	v, b := x.Inputs()[0], x.Inputs()[1]
	if v.Type() != NodeTypeReshape {
		return nil, nil, nil, nil, false
	}
	pt, px := lookupSource(v.Inputs()[0])
	scales = groupInput(b)
	if pt == nil || pt.Type() != NodeTypeConstant || scales == nil || scales.DType() != dtypes.Float32 ||
		scales.Rank() != px.Rank()-1 || px.DType() != dtypes.Uint8 {
		return nil, nil, nil, nil, false
	}
	if t, _ := lookupSource(scales); t != nil { // scales looked up by codes: int4's or MXFP4's form
		return nil, nil, nil, nil, false
	}
	return px, scales, mins, pt, true
}

// GatherColumns is w [out, in] with its columns picked by idx (int32
// [in]): result[:, i] = w[:, idx[i]]. The form is fixed,
//
//	Transpose(Gather(Transpose(w), Reshape(idx, in, 1)))
//
// so that a backend can recognise it: under a DotGeneral over a grouped
// int4 weight held with its columns sorted by group (GPTQ's activation
// order), tputool's cpu backend permutes the activations instead
// (tpu/cpu/quant.go).
func GatherColumns(w, idx *Node) *Node {
	wd := w.Shape().Dimensions
	if len(wd) != 2 || idx.DType() != dtypes.Int32 || !slices.Equal(idx.Shape().Dimensions, []int{wd[1]}) {
		panic(fmt.Errorf("GatherColumns: want a matrix [out, in] and int32 indices [in], got %s and %s", w.Shape(), idx.Shape()))
	}
	return TransposeAllDims(Gather(TransposeAllDims(w, 1, 0), Reshape(idx, wd[1], 1)), 1, 0)
}
