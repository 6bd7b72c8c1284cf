package cpu

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// NVFP4 expert stacks. An expert stack compressed-tensors stores as one
// NVFP4 Linear per expert and projection has a global scale per part
// (gate_up's gate rows and up rows each their own), so it is held with a
// table of 256 half-scales per part: packed u8 [E, N, K/32, 16], scale
// bytes u8 [E, N, K/16] and tables f32 [E, T, 256], part t of expert e
// being rows [t·N/T, (t+1)·N/T) with table [e, t]. pipeline/nn.PairDot
// over it (nn.DequantizeNVFP4Tables of the gathered stacks) reaches the
// backend as
//
//	Reshape(Mul(Reshape(Gather(pairs [256, 2], Reshape(ConvertDType(Gather(packed, ids), i32), n, 1))),
//	            BroadcastInDim(Reshape(Gather(Reshape(Gather(tables, ids), P·T·256, 1),
//	                Reshape(Add(Reshape(ConvertDType(Gather(codes, ids), i32), P·T, ·), BroadcastInDim(offsets [P·T, 1])), n/16, 1))))))
//
// with offsets the constant 256·i (each pair's part's table, laid end to
// end); nvfp4TablesGathered finds it, and the grouped node (grouped.go)
// multiplies each active expert's parts in place with their own tables
// (kernels.GemvMulti's NVFP4 products, kernels.GemmNVFP4NT).

// nvfp4TablesGathered matches that form at r [P, N, K] and returns the
// stacks, the pairs' expert ids and the number of parts T.
func nvfp4TablesGathered(r *node) (packed, codes, tables, ids *node, parts int, ok bool) {
	if r.op != backends.OpTypeReshape || r.shape.Rank() != 3 || r.shape.DType != dtypes.Float32 {
		return nil, nil, nil, nil, 0, false
	}
	m := r.inputs[0]
	if m.op != backends.OpTypeMul || m.shape.Rank() != 4 || m.shape.DType != dtypes.Float32 {
		return nil, nil, nil, nil, 0, false
	}
	d := m.shape.Dimensions // [P, N, K/16, 16]
	if d[3] != 16 || d[2]%2 != 0 || !slices.Equal(r.shape.Dimensions, []int{d[0], d[1], d[2] * 16}) {
		return nil, nil, nil, nil, 0, false
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		v, b := m.inputs[k[0]], m.inputs[k[1]]
		if v.op != backends.OpTypeReshape || b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), []int{0, 1, 2, 3}) {
			continue
		}
		gp := tableSource(v.inputs[0], nvfp4PairTable[:], 2)
		sc := b.inputs[0]
		if gp == nil || sc.op != backends.OpTypeReshape || !slices.Equal(sc.shape.Dimensions, []int{d[0], d[1], d[2], 1}) {
			continue
		}
		gc, gt, parts := nvfp4TableLookup(sc.inputs[0], d[0], d[1]*d[2])
		if gc == nil || !wholeRowGather(gp) || !wholeRowGather(gc) || !wholeRowGather(gt) ||
			!sameIndices(gp.inputs[1], gc.inputs[1]) || !sameIndices(gp.inputs[1], gt.inputs[1]) {
			continue
		}
		p, c, t := gp.inputs[0], gc.inputs[0], gt.inputs[0]
		e := p.shape.Dimensions[0]
		if p.shape.DType != dtypes.Uint8 || c.shape.DType != dtypes.Uint8 || t.shape.DType != dtypes.Float32 ||
			!slices.Equal(p.shape.Dimensions, []int{e, d[1], d[2] / 2, 16}) || !slices.Equal(c.shape.Dimensions, []int{e, d[1], d[2]}) ||
			!slices.Equal(t.shape.Dimensions, []int{e, parts, 256}) || d[1]%parts != 0 {
			continue
		}
		return p, c, t, gp.inputs[1], parts, true
	}
	return nil, nil, nil, nil, 0, false
}

// nvfp4TableLookup matches the half-scales' lookup of that form at g for
// pairs matrices of codes scale codes each, and returns the gathered
// codes and tables and the number of parts T: g gathers whole rows of
// width 1 from Reshape(tables [pairs, T, 256]) by the codes [pairs·T, ·]
// plus the constant offsets 256·i [pairs·T, 1].
func nvfp4TableLookup(g *node, pairs, codes int) (gc, gt *node, parts int) {
	if g.op != backends.OpTypeGather || len(g.inputs) != 2 {
		return nil, nil, 0
	}
	ht, idx := g.inputs[0], g.inputs[1]
	if ht.op != backends.OpTypeReshape || ht.shape.Rank() != 2 || ht.shape.Dimensions[1] != 1 || ht.shape.Dimensions[0]%(256*pairs) != 0 {
		return nil, nil, 0
	}
	parts = ht.shape.Dimensions[0] / (256 * pairs)
	a, ok := g.aux.(gatherAux)
	if !ok || a.indexVectorAxis != 1 || !slices.Equal(a.collapsedSliceAxes, []int{0}) || !slices.Equal(a.startIndexMap, []int{0}) ||
		!slices.Equal(a.sizes, []int{1, 1}) || !slices.Equal(a.offsetOutputAxes, []int{1}) ||
		idx.op != backends.OpTypeReshape || !slices.Equal(idx.shape.Dimensions, []int{pairs * codes, 1}) {
		return nil, nil, 0
	}
	add := idx.inputs[0]
	if parts == 0 || codes%parts != 0 || add.op != backends.OpTypeAdd || !slices.Equal(add.shape.Dimensions, []int{pairs * parts, codes / parts}) {
		return nil, nil, 0
	}
	ci, off := add.inputs[0], add.inputs[1]
	if ci.op != backends.OpTypeReshape || ci.inputs[0].op != backends.OpTypeConvertDType || ci.inputs[0].inputs[0].shape.DType != dtypes.Uint8 ||
		off.op != backends.OpTypeBroadcastInDim || !slices.Equal(off.aux.([]int), []int{0, 1}) || off.inputs[0].op != backends.OpTypeConstant {
		return nil, nil, 0
	}
	vals, ok := off.inputs[0].constant.([]int32)
	if !ok || len(vals) != pairs*parts || !slices.Equal(off.inputs[0].shape.Dimensions, []int{pairs * parts, 1}) {
		return nil, nil, 0
	}
	for i, v := range vals {
		if v != int32(256*i) {
			return nil, nil, 0
		}
	}
	return ci.inputs[0].inputs[0], ht.inputs[0], parts
}
