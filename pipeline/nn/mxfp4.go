package nn

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// MXFP4 weights held as checkpoints store them (loader/quant): blocks U8
// [..., out, in/32, 16], two FP4 E2M1 values a byte, low nibble first,
// and scales U8 [..., out, in/32], one E8M0 exponent per 32 values.

// mxfp4Pairs and mxfp4Scales are DequantizeMXFP4's tables: a byte's two
// values (low nibble first), and 2^(s−127) for each exponent s.
var mxfp4Pairs, mxfp4Scales = func() ([][]float32, [][]float32) {
	fp4 := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for i := 0; i < 8; i++ {
		fp4 = append(fp4, -fp4[i])
	}
	fp4[8] = float32(math.Copysign(0, -1))
	pairs := make([][]float32, 256)
	scales := make([][]float32, 256)
	for b := range pairs {
		pairs[b] = []float32{fp4[b&15], fp4[b>>4]}
		scales[b] = []float32{float32(math.Ldexp(1, b-127))}
	}
	return pairs, scales
}()

// DequantizeMXFP4 is the MXFP4 weight of blocks and scales as a
// [..., out, in] tensor of dtype. The form is fixed: each byte's two
// values and each block's scale are gathered from constant tables
// ([256, 2] and [256, 1] f32) and multiplied,
//
//	Reshape(Mul(Reshape(Gather(pairs, Reshape(ConvertDType(blocks, i32), n, 1))),
//	            BroadcastInDim(Reshape(Gather(scales, Reshape(ConvertDType(scales, i32), n/16, 1))))))
//
// so that a backend can recognise it (tputool's cpu backend does, under
// the gathered products of routed experts: tpu/cpu/grouped.go) and
// multiply the MXFP4 weight directly; elsewhere it is computed as written.
func DequantizeMXFP4(blocks, scales *Node, dtype dtypes.DType) *Node {
	bd := blocks.Shape().Dimensions
	r := len(bd)
	if r < 3 || bd[r-1] != 16 || blocks.DType() != dtypes.Uint8 || scales.DType() != dtypes.Uint8 ||
		!slices.Equal(scales.Shape().Dimensions, bd[:r-1]) {
		panic(fmt.Errorf("DequantizeMXFP4: want uint8 blocks [..., out, groups, 16] and scales [..., out, groups], got %s and %s", blocks.Shape(), scales.Shape()))
	}
	g := blocks.Graph()
	lead := bd[:r-1]                                                                                                        // [..., out, groups]
	pairs := lookupBytes(Const(g, mxfp4Pairs), blocks)                                                                      // [n, 2]
	vals := Reshape(pairs, append(slices.Clone(lead), 32)...)                                                               // [..., out, groups, 32]
	sc := lookupBytes(Const(g, mxfp4Scales), scales)                                                                        // [n/16, 1]
	sc = Reshape(sc, append(slices.Clone(lead), 1)...)                                                                      // [..., out, groups, 1]
	w := Reshape(Mul(vals, BroadcastToDims(sc, vals.Shape().Dimensions...)), append(slices.Clone(bd[:r-2]), 32*bd[r-2])...) // [..., out, in]
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}

// lookupBytes is the row of table [256, width] that each byte of x picks,
// as Gather(table, Reshape(ConvertDType(x, i32), n, 1)): [n, width], n
// x's size. The indices are flat [n, 1]: the go backend's Gather refuses
// indices of a higher rank than the table's.
func lookupBytes(table, x *Node) *Node {
	return Gather(table, Reshape(ConvertDType(x, dtypes.Int32), x.Shape().Size(), 1))
}

// dequantizeMXFP4Parts returns blocks and scales when w is
// DequantizeMXFP4's f32 form.
func dequantizeMXFP4Parts(w *Node) (blocks, scales *Node, ok bool) {
	pt, blocks, st, scales, ok := lookupPair(w)
	if !ok || pt.Type() != NodeTypeConstant || st.Type() != NodeTypeConstant {
		return nil, nil, false
	}
	return blocks, scales, true
}

// lookupPair matches the form the byte-coded dequantisations share,
// Reshape(Mul(Reshape(lookupBytes(vt, vx)), BroadcastInDim(Reshape(lookupBytes(st, sx))))),
// in f32, and returns the values' table and bytes and the scales' table
// and bytes.
func lookupPair(w *Node) (vt, vx, st, sx *Node, ok bool) {
	v, b, ok := valuesTimesScales(w)
	if !ok {
		return nil, nil, nil, nil, false
	}
	vt, vx = lookupSource(v.Inputs()[0])
	st, sx = lookupSource(b.Inputs()[0])
	return vt, vx, st, sx, vt != nil && st != nil
}

// valuesTimesScales matches the product the byte-coded dequantisations
// end with, Reshape(Mul(Reshape(values), BroadcastInDim(scales))) in f32,
// and returns the Mul's two operands.
func valuesTimesScales(w *Node) (v, b *Node, ok bool) {
	if w.Type() != NodeTypeReshape || w.DType() != dtypes.Float32 {
		return nil, nil, false
	}
	m := w.Inputs()[0]
	if m.Type() != NodeTypeMul || len(m.Inputs()) != 2 {
		return nil, nil, false
	}
	v, b = m.Inputs()[0], m.Inputs()[1]
	if v.Type() != NodeTypeReshape || b.Type() != NodeTypeBroadcastInDim {
		return nil, nil, false
	}
	return v, b, true
}

// lookupSource returns table and x when n is lookupBytes(table, x) under
// any Reshapes.
func lookupSource(n *Node) (table, x *Node) {
	for n.Type() == NodeTypeReshape {
		n = n.Inputs()[0]
	}
	if n.Type() != NodeTypeGather {
		return nil, nil
	}
	idx := n.Inputs()[1]
	for idx.Type() == NodeTypeReshape {
		idx = idx.Inputs()[0]
	}
	if idx.Type() != NodeTypeConvertDType || idx.Inputs()[0].DType() != dtypes.Uint8 {
		return nil, nil
	}
	return n.Inputs()[0], idx.Inputs()[0]
}
