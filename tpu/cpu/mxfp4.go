package cpu

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// MXFP4 expert stacks. pipeline/nn.PairDot over an MXFP4 stack (blocks
// u8 [E, N, G, 16] and scales u8 [E, N, G], nn.DequantizeMXFP4) reaches
// the backend as the dequantisation of the gathered blocks and scales,
//
//	Reshape(Mul(Reshape(Gather(pairs [256, 2], Reshape(ConvertDType(Gather(blocks, ids), i32), n, 1))),
//	            BroadcastInDim(Reshape(Gather(e8m0 [256, 1], Reshape(ConvertDType(Gather(scales, ids), i32), n/16, 1))))))
//
// under the batched DotGeneral; mxfp4Gathered finds it, and the grouped
// node (grouped.go) then multiplies each active expert's MXFP4 matrix in
// place (kernels.GemvMulti, kernels.GemmMXFP4NT): the f32 matrices are
// never made.
//
// Layout, as int4's (quant.go) with MXFP4's values: expert e's weight
// [N, K] is cut along K into G blocks of 32; blocks[e, n, b] holds block
// b's 32 FP4 (E2M1) codes two to a byte, low nibble first, and
// scales[e, n, b] its E8M0 scale, so W[n, 32·b + c] =
// fp4(code) · 2^(scales[e, n, b] − 127).

// mxfp4Gathered matches that form at r [P, N, K] and returns the stacks
// and the pairs' expert ids. Blocks and scales must be gathered by the
// same ids, whole matrices at a time.
func mxfp4Gathered(r *node) (blocks, scales, ids *node, ok bool) {
	blocks, scales, ids, _, ok = nibbleGathered(r, mxfp4PairTable[:], func(g *node) (table, x *node) {
		if x = tableSource(g, mxfp4ScaleTable[:], 1); x == nil {
			return nil, nil
		}
		return g.inputs[0], x
	})
	return blocks, scales, ids, ok
}

// nibbleGathered matches the dequantisation of whole-row gathers of a
// nibble-coded stack (blocks u8 [E, N, G, 16], scale codes u8 [E, N, G])
// at r [P, N, K], whose values come from the constant pairs table and
// whose scales from the table scaleTable matches, and returns the stacks,
// the pairs' expert ids and that scale table.
func nibbleGathered(r *node, pairs []float32, scaleTable func(g *node) (table, x *node)) (blocks, scales, ids, table *node, ok bool) {
	if r.op != backends.OpTypeReshape || r.shape.Rank() != 3 || r.shape.DType != dtypes.Float32 {
		return nil, nil, nil, nil, false
	}
	m := r.inputs[0]
	if m.op != backends.OpTypeMul || m.shape.Rank() != 4 || m.shape.DType != dtypes.Float32 {
		return nil, nil, nil, nil, false
	}
	d := m.shape.Dimensions // [P, N, G, 32]
	if d[3] != 32 || !slices.Equal(r.shape.Dimensions, []int{d[0], d[1], d[2] * 32}) {
		return nil, nil, nil, nil, false
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		v, b := m.inputs[k[0]], m.inputs[k[1]]
		if v.op != backends.OpTypeReshape || b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), []int{0, 1, 2, 3}) {
			continue
		}
		gb := tableSource(v.inputs[0], pairs, 2)
		sc := b.inputs[0]
		if sc.op != backends.OpTypeReshape || !slices.Equal(sc.shape.Dimensions, []int{d[0], d[1], d[2], 1}) {
			continue
		}
		t, gs := scaleTable(sc.inputs[0])
		if gb == nil || gs == nil || !wholeRowGather(gb) || !wholeRowGather(gs) || !sameIndices(gb.inputs[1], gs.inputs[1]) {
			continue
		}
		bl, s := gb.inputs[0], gs.inputs[0]
		e := bl.shape.Dimensions[0]
		if bl.shape.DType != dtypes.Uint8 || s.shape.DType != dtypes.Uint8 ||
			!slices.Equal(bl.shape.Dimensions, []int{e, d[1], d[2], 16}) || !slices.Equal(s.shape.Dimensions, []int{e, d[1], d[2]}) {
			continue
		}
		return bl, s, gb.inputs[1], t, true
	}
	return nil, nil, nil, nil, false
}

// int4Gathered matches nn.PairDot's int4 form (nn.DequantizeInt4 of the
// gathered packed values and codes, quant.go's layout, with the stack's
// one scale table [256, 1], an input) at r [P, N, K] and returns the
// packed stack [E, N, G, 16], the codes [E, N, G], the ids and the table.
func int4Gathered(r *node) (packed, codes, ids, table *node, ok bool) {
	return nibbleGathered(r, int4PairTable[:], func(g *node) (table, x *node) {
		t, x := gatherSource(g, 1)
		if t == nil || t.op == backends.OpTypeConstant {
			return nil, nil
		}
		return t, x
	})
}

// int4GroupsGathered matches nn.PairDot's grouped int4 form (nn.
// DequantizeInt4Groups of the gathered packed values, scales and mins,
// quant.go's layout) at r [P, N, K] and returns the stacks (packed [E, N,
// K/32, 16], scales [E, N, g], mins [E, g, N] or nil), the pairs' expert
// ids, the group size and whether the values are FP4's (nn.
// DequantizeFP4Groups: NVFP4 experts).
func int4GroupsGathered(r *node) (packed, scales, mins, ids *node, group int, fp4, ok bool) {
	if r.shape.Rank() != 3 {
		return nil, nil, nil, nil, 0, false, false
	}
	gp, gs, gm, group, fp4, ok := int4GroupsForm(r)
	if !ok || !wholeRowGather(gp) || !wholeRowGather(gs) || !sameIndices(gp.inputs[1], gs.inputs[1]) ||
		gm != nil && (!wholeRowGather(gm) || !sameIndices(gp.inputs[1], gm.inputs[1])) {
		return nil, nil, nil, nil, 0, false, false
	}
	if gm != nil {
		mins = gm.inputs[0]
	}
	return gp.inputs[0], gs.inputs[0], mins, gp.inputs[1], group, fp4, true
}

// tableSource matches Gather(table, Reshape(ConvertDType(x u8, i32), n, 1))
// at g, table a constant [256, width] holding want's bits (sameBits: NaN
// entries, as FP8's, included), and returns x.
func tableSource(g *node, want []float32, width int) *node {
	t, x := gatherSource(g, width)
	if t == nil || t.op != backends.OpTypeConstant {
		return nil
	}
	if vals, ok := t.constant.([]float32); !ok || !sameBits(vals, want) {
		return nil
	}
	return x
}

// gatherSource matches Gather(table, Reshape(ConvertDType(x u8, i32), n, 1))
// at g, table an f32 [256, width] gathered by whole rows, and returns
// table and x.
func gatherSource(g *node, width int) (table, x *node) {
	if g.op != backends.OpTypeGather || len(g.inputs) != 2 {
		return nil, nil
	}
	t, idx := g.inputs[0], g.inputs[1]
	if t.shape.DType != dtypes.Float32 || !slices.Equal(t.shape.Dimensions, []int{256, width}) {
		return nil, nil
	}
	a, ok := g.aux.(gatherAux)
	if !ok || a.indexVectorAxis != 1 || !slices.Equal(a.collapsedSliceAxes, []int{0}) || !slices.Equal(a.startIndexMap, []int{0}) ||
		!slices.Equal(a.sizes, []int{1, width}) || !slices.Equal(a.offsetOutputAxes, []int{1}) {
		return nil, nil
	}
	if idx.op != backends.OpTypeReshape || idx.shape.Rank() != 2 || idx.shape.Dimensions[1] != 1 {
		return nil, nil
	}
	c := idx.inputs[0]
	if c.op != backends.OpTypeConvertDType || c.inputs[0].shape.DType != dtypes.Uint8 {
		return nil, nil
	}
	return t, c.inputs[0]
}

// mxfp4PairTable and mxfp4ScaleTable are nn.DequantizeMXFP4's tables,
// flat: each byte's two FP4 values (low nibble first), and 2^(s−127).
// FP4 E2M1: bit 3 is the sign, bits 0-2 index the magnitudes 0, 0.5, 1,
// 1.5, 2, 3, 4, 6; code 8 is −0.
var mxfp4PairTable, mxfp4ScaleTable = func() (p [512]float32, s [256]float32) {
	fp4 := [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for i := 0; i < 8; i++ {
		fp4[8+i] = -fp4[i]
	}
	fp4[8] = float32(math.Copysign(0, -1))
	for b := 0; b < 256; b++ {
		p[2*b], p[2*b+1] = fp4[b&15], fp4[b>>4]
		s[b] = float32(math.Ldexp(1, b-127))
	}
	return p, s
}()
