package cpu

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Weight-only int8. pipeline/nn.DequantizeInt8 writes the dequantised
// weight in one fixed form,
//
//	Reshape(Mul(ConvertDType(q int8 [out, g, G], f32), BroadcastInDim(scales f32 [out, g, 1])), out, g·G)
//
// and rewriteInt8 finds it as the right operand of an f32 DotGeneral in
// the NT layout: the product then reads q and the scales directly
// (kernels.GemmInt8NT, one scale per group of G input columns), and the
// f32 weight is never made unless something else reads it.
//
// Layout: q [out, g, G] is, row-major, the int8 weight [N, K] with K = g·G,
// and W[o, k] = q[o, k/G, k%G] · scales[o, k/G]. The product computes the
// same products and sums as the f32 weight would give, up to the order of
// the additions.

// int8Weight matches the dequantisation form at r and returns q, scales
// and the group size. The Mul's operands may come in either order.
func int8Weight(r *node) (q, scales *node, group int, ok bool) {
	if r.op != backends.OpTypeReshape || r.shape.Rank() != 2 {
		return nil, nil, 0, false
	}
	m := r.inputs[0]
	if m.op != backends.OpTypeMul || m.shape.DType != dtypes.Float32 || m.shape.Rank() != 3 {
		return nil, nil, 0, false
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		c, b := m.inputs[k[0]], m.inputs[k[1]]
		if c.op != backends.OpTypeConvertDType || c.inputs[0].shape.DType != dtypes.Int8 {
			continue
		}
		if b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), []int{0, 1, 2}) {
			continue
		}
		s := b.inputs[0]
		d := m.shape.Dimensions
		if s.shape.DType != dtypes.Float32 || !slices.Equal(s.shape.Dimensions, []int{d[0], d[1], 1}) {
			continue
		}
		if !slices.Equal(r.shape.Dimensions, []int{d[0], d[1] * d[2]}) {
			continue
		}
		return c.inputs[0], s, d[2], true
	}
	return nil, nil, 0, false
}

// weightDot returns the aux and right operand of n when n is an f32
// DotGeneral not yet rewritten, in the NT layout, with no batch: a
// product whose right operand may be a held weight's dequantisation form
// (the rewrites below, rewriteFP8). A rewritten product has more than two
// inputs, so no two rewrites take the same one.
//
// A product in 16-bit activations (--dtype bf16 or f16) reads the form
// rounded to its dtype, ConvertDType(form, dtype) (nn.DequantizeInt8 and
// its kin with that dtype): weightDot then returns the f32 form and a
// copy of the aux with wide16 set, so that the rewritten product reads
// the weight as held too, its rows widened and its result rounded back
// (execDotWide16).
func weightDot(n *node) (a *dotAux, r *node, ok bool) {
	if n.op != backends.OpTypeDotGeneral || len(n.inputs) != 2 {
		return nil, nil, false
	}
	a, r = n.aux.(*dotAux), n.inputs[1]
	if dt := n.shape.DType; is16(dt) {
		if n.inputs[0].shape.DType != dt || r.op != backends.OpTypeConvertDType || r.aliasesInput || r.inputs[0].shape.DType != dtypes.Float32 {
			return nil, nil, false
		}
		w := *a
		w.wide16 = true
		a, r = &w, r.inputs[0]
	} else if n.shape.DType != dtypes.Float32 {
		return nil, nil, false
	}
	return a, r, a.b == 1 && !a.rhsFrom16 && isIdentity(a.rhsNT, r.shape.Dimensions)
}

// pointAt makes n the product b over inputs: the lhs, then the weight's
// parts as held.
func pointAt(n *node, b *dotAux, inputs ...*node) {
	n.aux, n.inputs = b, inputs
	if b.wide16 {
		wide16Rewrites.Add(1)
	}
}

// pairAct reports whether the wide16 product n (aux a) takes the pair
// kernels (kernels.GemmInt8DotNT and its kin: bf16Act): in bf16
// activations, whose rows are bf16 already, unless they are quantised to
// int8 (act int8). The pair kernels round the weight to bf16, as the
// graph's ConvertDType does.
func pairAct(n *node, a *dotAux, act actKind) bool {
	return a.wide16 && n.shape.DType == dtypes.BFloat16 && act != actInt8
}

// bf16Rows reports whether the product n (aux a) over a weight held
// quantised has bf16 rows and takes the pair kernels from 16 rows
// (bf16Act): --activations bf16 in f32 compute, which rounds the rows,
// or bf16 compute (pairAct).
func bf16Rows(n *node, a *dotAux, act actKind) bool {
	return (act == actBF16 && !a.wide16) || pairAct(n, a, act)
}

// wide16Rewrites counts the products in 16-bit activations pointed at a
// weight held quantised, dense (pointAt) or grouped (rewriteGrouped);
// read by tests.
var wide16Rewrites atomic.Int64

// rewriteInt8 points f32 DotGenerals at int8 weights where the right
// operand is the dequantisation form, in the NT layout, with no batch.
func rewriteInt8(n *node, act actKind) {
	a, r, ok := weightDot(n)
	if !ok {
		return
	}
	q, scales, group, ok := int8Weight(r)
	if !ok {
		return
	}
	b := *a
	b.int8Group = group
	b.bf16Act = bf16Rows(n, a, act)
	b.int8Q8 = act == actInt8
	pointAt(n, &b, n.inputs[0], q, scales)
}

// dotInt8 is the product with an int8 weight [N, K] and its scales
// [N, K/group].
func dotInt8(a *dotAux, out, lhs []float32, q []int8, scales []float32) {
	M, N, K := a.m, a.n, a.k
	if K == 0 {
		clear(out)
		return
	}
	if a.bf16Act {
		kernels.GemmInt8DotNT(M, N, K, lhs, K, q, K, scales, a.int8Group, out, N)
		return
	}
	if a.int8Q8 && K%32 == 0 {
		kernels.GemmInt8Q8NT(M, N, K, lhs, K, q, K, scales, a.int8Group, out, N)
		return
	}
	kernels.GemmInt8NT(M, N, K, lhs, K, q, K, scales, a.int8Group, out, N)
}

// Weight-only int4. pipeline/nn.DequantizeInt4 writes the dequantised
// weight in MXFP4's form (mxfp4.go) with the int4 values as the constant
// pairs table and the matrix's scale table (an input, [256, 1]) gathered
// by the block codes:
//
//	Reshape(Mul(Reshape(Gather(int4 pairs [256, 2], Reshape(ConvertDType(packed u8 [N, G, 16], i32), n, 1))),
//	            BroadcastInDim(Reshape(Gather(table f32 [256, 1], Reshape(ConvertDType(codes u8 [N, G], i32), n/16, 1))))), N, 32·G)
//
// and rewriteInt4 finds it as the right operand of an f32 DotGeneral in
// the NT layout: the product then reads the packed values, codes and
// table directly (kernels.GemmInt4NT), and the f32 weight is never made
// unless something else reads it.
//
// Layout: the input axis is cut into G blocks of 32 columns. packed
// [N, G, 16] holds a block's 32 values two to a byte, column 2k in byte
// k's low nibble and 2k+1 in its high one, each stored as value+8; codes
// [N, G] holds one byte per block, which picks the block's scale from the
// table. So W[n, 32·b + c] = (nibble − 8) · table[codes[n, b]].

// int4PairTable is nn.DequantizeInt4's pairs table, flat: each byte's two
// values (low nibble first, nibble − 8).
var int4PairTable = func() (p [512]float32) {
	for b := 0; b < 256; b++ {
		p[2*b], p[2*b+1] = float32(b&15)-8, float32(b>>4)-8
	}
	return p
}()

// nvfp4PairTable is nn.DequantizeNVFP4's (and nn.DequantizeFP4Groups')
// pairs table, flat: each byte's two E2M1 values doubled (low nibble
// first; code 8 is −0).
var nvfp4PairTable = func() (p [512]float32) {
	for i, v := range mxfp4PairTable {
		p[i] = 2 * v
	}
	return p
}()

// int4Weight matches the dequantisation form at r [N, K] and returns the
// packed values [N, G, 16], the codes [N, G] and the table [256, 1].
func int4Weight(r *node) (packed, codes, table *node, ok bool) {
	return nibbleTableWeight(r, int4PairTable[:], kernels.Int4Block)
}

// nvfp4Weight matches nn.DequantizeNVFP4's form at r [N, K] and returns
// its packed values [N, K/32, 16], its codes [N, K/16] and its table of
// half-scales [256, 1].
func nvfp4Weight(r *node) (packed, codes, half *node, ok bool) {
	return nibbleTableWeight(r, nvfp4PairTable[:], kernels.NVFP4Group)
}

// nibbleTableWeight matches the form DequantizeInt4 and DequantizeNVFP4
// share at r [N, K], with pairs as the constant values' table and a code
// per span values gathering from a table that is an input, and returns
// the packed values [N, K/32, 16], the codes [N, K/span] and the table.
func nibbleTableWeight(r *node, pairs []float32, span int) (packed, codes, table *node, ok bool) {
	if r.op != backends.OpTypeReshape || r.shape.Rank() != 2 || r.shape.DType != dtypes.Float32 {
		return nil, nil, nil, false
	}
	m := r.inputs[0]
	if m.op != backends.OpTypeMul || m.shape.Rank() != 3 || m.shape.DType != dtypes.Float32 {
		return nil, nil, nil, false
	}
	d := m.shape.Dimensions // [N, K/span, span]
	if d[2] != span || (d[1]*span)%32 != 0 || !slices.Equal(r.shape.Dimensions, []int{d[0], d[1] * span}) {
		return nil, nil, nil, false
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		v, b := m.inputs[k[0]], m.inputs[k[1]]
		if v.op != backends.OpTypeReshape || b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), []int{0, 1, 2}) {
			continue
		}
		sc := b.inputs[0]
		if sc.op != backends.OpTypeReshape || !slices.Equal(sc.shape.Dimensions, []int{d[0], d[1], 1}) {
			continue
		}
		p := tableSource(v.inputs[0], pairs, 2)
		t, c := gatherSource(sc.inputs[0], 1)
		if p == nil || t == nil || t.op == backends.OpTypeConstant {
			continue
		}
		if !slices.Equal(p.shape.Dimensions, []int{d[0], d[1] * span / 32, 16}) || !slices.Equal(c.shape.Dimensions, []int{d[0], d[1]}) {
			continue
		}
		return p, c, t, true
	}
	return nil, nil, nil, false
}

// rewriteInt4 points f32 DotGenerals at int4 weights where the right
// operand is the dequantisation form, in the NT layout, with no batch;
// with act int8 the product quantises its activations to int8.
//
// NVFP4 weights held as stored (nn.DequantizeNVFP4: the same form with
// the doubled E2M1 values as the pairs table and a code per 16 values)
// become products that read them the same way (kernels.GemmNVFP4NT).
func rewriteInt4(n *node, act actKind) {
	a, r, ok := weightDot(n)
	if !ok {
		return
	}
	packed, codes, table, ok := int4Weight(r)
	nvfp4 := false
	if !ok {
		if packed, codes, table, ok = nvfp4Weight(r); !ok {
			return
		}
		nvfp4 = true
	}
	b := *a
	b.int4, b.nvfp4, b.int4Q8 = true, nvfp4, act == actInt8
	b.bf16Act = bf16Rows(n, a, act)
	pointAt(n, &b, n.inputs[0], packed, codes, table)
}

// dotInt4 is the product with an int4 or NVFP4 weight [N, K] (packed
// values, codes and table).
func dotInt4(a *dotAux, out, lhs []float32, packed, codes []uint8, table []float32) {
	M, N, K := a.m, a.n, a.k
	if K == 0 {
		clear(out)
		return
	}
	switch {
	case a.nvfp4 && a.int4Q8:
		kernels.GemmNVFP4Q8NT(M, N, K, lhs, K, packed, codes, table, out, N)
	case a.nvfp4 && a.bf16Act:
		kernels.GemmNVFP4DotNT(M, N, K, lhs, K, packed, codes, table, out, N)
	case a.bf16Act:
		kernels.GemmInt4DotNT(M, N, K, lhs, K, packed, codes, table, out, N)
	case a.nvfp4:
		kernels.GemmNVFP4NT(M, N, K, lhs, K, packed, codes, table, out, N)
	case a.int4Q8:
		kernels.GemmInt4Q8NT(M, N, K, lhs, K, packed, codes, table, out, N)
	default:
		kernels.GemmInt4NT(M, N, K, lhs, K, packed, codes, table, out, N)
	}
}

// Grouped int4 (GPTQ, AWQ and compressed-tensors 4-bit held at their
// stored width). pipeline/nn.DequantizeInt4Groups writes the weight as
//
//	Reshape([Add](Mul(Reshape(Gather(int4 pairs [256, 2], Reshape(ConvertDType(packed u8 [N, K/32, 16], i32), n, 1)), N, g, G),
//	                  BroadcastInDim(Reshape(scales f32 [N, g], N, g, 1))),
//	              [BroadcastInDim(Reshape(Transpose(mins f32 [g, N]), N, g, 1))]), N, K)
//
// and rewriteInt4Groups finds it as the right operand of an f32
// DotGeneral in the NT layout: the product then reads the packed values,
// scales and mins directly (kernels.GemmInt4GroupsNT), and the f32
// weight is never made unless something else reads it. W[n, k] =
// (nibble − 8) · scales[n, k/G] + mins[k/G, n].

// int4GroupsWeight matches the dequantisation form at r [N, K] and returns
// the packed values [N, K/32, 16], the scales [N, g], the mins [g, N]
// (nil for none), the group size G and whether the values are FP4's
// (nn.DequantizeFP4Groups: E2M1 codes, half-scales, no mins).
func int4GroupsWeight(r *node) (packed, scales, mins *node, group int, fp4, ok bool) {
	if r.shape.Rank() != 2 {
		return nil, nil, nil, 0, false, false
	}
	return int4GroupsForm(r)
}

// int4GroupsForm matches nn.DequantizeInt4Groups' form at r [..., N, K]
// (a matrix, or a batch of them as nn.PairDot gathers) and returns the
// packed values [..., N, K/32, 16], the scales [..., N, g], the mins
// [..., g, N] (nil for none), the group size (16 or whole blocks of 32)
// and whether the values are FP4's (nn.DequantizeFP4Groups' pairs table:
// half-scales, no mins).
func int4GroupsForm(r *node) (packed, scales, mins *node, group int, fp4, ok bool) {
	fail := func() (*node, *node, *node, int, bool, bool) { return nil, nil, nil, 0, false, false }
	rk := r.shape.Rank()
	if r.op != backends.OpTypeReshape || rk < 2 || r.shape.DType != dtypes.Float32 {
		return fail()
	}
	x := r.inputs[0]
	if x.shape.Rank() != rk+1 || x.shape.DType != dtypes.Float32 {
		return fail()
	}
	lead := x.shape.Dimensions[:rk-2]
	dims := func(d ...int) []int { return append(slices.Clone(lead), d...) }
	d := x.shape.Dimensions[rk-2:] // [N, g, G]
	if d[2] != 16 && d[2]%32 != 0 || (d[1]*d[2])%32 != 0 || !slices.Equal(r.shape.Dimensions, dims(d[0], d[1]*d[2])) {
		return fail()
	}
	ident := iotaInts(rk + 1)
	swap := iotaInts(rk) // the mins' last two axes swapped: [..., g, N] to [..., N, g]
	swap[rk-2], swap[rk-1] = rk-1, rk-2
	// groupInput matches BroadcastInDim(Reshape(s f32 [..., N, g], ..., N,
	// g, 1)) and returns s.
	groupInput := func(b *node) *node {
		if b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), ident) {
			return nil
		}
		rs := b.inputs[0]
		if rs.op != backends.OpTypeReshape || !slices.Equal(rs.shape.Dimensions, dims(d[0], d[1], 1)) {
			return nil
		}
		s := rs.inputs[0]
		if s.shape.DType != dtypes.Float32 || !slices.Equal(s.shape.Dimensions, dims(d[0], d[1])) {
			return nil
		}
		return s
	}
	m := x
	if x.op == backends.OpTypeAdd {
		for _, k := range [][2]int{{0, 1}, {1, 0}} {
			s := groupInput(x.inputs[k[1]])
			if s != nil && s.op == backends.OpTypeTranspose && slices.Equal(s.aux.([]int), swap) && x.inputs[k[0]].op == backends.OpTypeMul {
				m, mins = x.inputs[k[0]], s.inputs[0]
				break
			}
		}
		if mins == nil {
			return fail()
		}
	}
	if m.op != backends.OpTypeMul {
		return fail()
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		v, s := m.inputs[k[0]], groupInput(m.inputs[k[1]])
		if v.op != backends.OpTypeReshape || s == nil {
			continue
		}
		p := tableSource(v.inputs[0], int4PairTable[:], 2)
		fp4 := p == nil && mins == nil
		if fp4 {
			p = tableSource(v.inputs[0], nvfp4PairTable[:], 2) // nn.DequantizeFP4Groups: doubled E2M1 values, half-scales
		}
		if p == nil || !slices.Equal(p.shape.Dimensions, dims(d[0], d[1]*d[2]/32, 16)) {
			continue
		}
		return p, s, mins, d[2], fp4, true
	}
	return fail()
}

// A weight held with its columns sorted by group (GPTQ's activation
// order) comes through nn.GatherColumns,
//
//	Transpose(Gather(Transpose(form), Reshape(inv i32 [K], K, 1)))
//
// W[:, i] = form[:, inv[i]]: the product then multiplies the activations
// with their columns in the held order, x'[j] = x[i] where inv[i] = j.

// columnsGathered matches nn.GatherColumns at r [N, K] and returns the
// matrix whose columns it gathers and the indices inv [K].
func columnsGathered(r *node) (w, inv *node) {
	isT := func(t *node) bool {
		return t.op == backends.OpTypeTranspose && slices.Equal(t.aux.([]int), []int{1, 0})
	}
	if !isT(r) || r.shape.Rank() != 2 {
		return nil, nil
	}
	g := r.inputs[0]
	if g.op != backends.OpTypeGather || !isT(g.inputs[0]) {
		return nil, nil
	}
	k, nOut := r.shape.Dimensions[1], r.shape.Dimensions[0]
	a, ok := g.aux.(gatherAux)
	idx := g.inputs[1]
	if !ok || a.indexVectorAxis != 1 || !slices.Equal(a.offsetOutputAxes, []int{1}) || !slices.Equal(a.collapsedSliceAxes, []int{0}) ||
		!slices.Equal(a.startIndexMap, []int{0}) || !slices.Equal(a.sizes, []int{1, nOut}) ||
		idx.op != backends.OpTypeReshape || !slices.Equal(idx.shape.Dimensions, []int{k, 1}) {
		return nil, nil
	}
	inv = idx.inputs[0]
	if inv.shape.DType != dtypes.Int32 || !slices.Equal(inv.shape.Dimensions, []int{k}) {
		return nil, nil
	}
	return g.inputs[0].inputs[0], inv
}

// rewriteInt4Groups points f32 DotGenerals at grouped int4 weights where
// the right operand is the dequantisation form (or its columns gathered),
// in the NT layout, with no batch; with act int8 the product quantises
// its activations to int8.
func rewriteInt4Groups(n *node, act actKind) {
	a, r, ok := weightDot(n)
	if !ok {
		return
	}
	w, inv := columnsGathered(r)
	if w == nil {
		w = r
	}
	packed, scales, mins, group, fp4, ok := int4GroupsWeight(w)
	if !ok || kernels.CheckInt4Groups(a.k, group) != nil {
		return
	}
	b := *a
	b.int4Group, b.int4Mins, b.int4Perm, b.int4Q8, b.int4FP4 = group, mins != nil, inv != nil, act == actInt8, fp4
	b.bf16Act = bf16Rows(n, a, act)
	inputs := []*node{n.inputs[0], packed, scales}
	if mins != nil {
		inputs = append(inputs, mins)
	}
	if inv != nil {
		inputs = append(inputs, inv)
	}
	pointAt(n, &b, inputs...)
}

// dotInt4Groups is the product with a grouped int4 weight [N, K] (packed
// values, scales, and mins and the columns' places where the product has
// them).
func dotInt4Groups(a *dotAux, out, lhs []float32, in []*slot) {
	var mins []float32
	next := 3
	if a.int4Mins {
		mins = in[next].data.([]float32)
		next++
	}
	if a.int4Perm {
		buf := permPool.Get().(*[]float32)
		defer permPool.Put(buf)
		if cap(*buf) < a.m*a.k {
			*buf = make([]float32, a.m*a.k)
		}
		lhs = permuteColumns((*buf)[:a.m*a.k], lhs, a.m, a.k, in[next].data.([]int32))
	}
	packed, scales := in[1].data.([]uint8), in[2].data.([]float32)
	switch {
	case a.int4FP4 && a.int4Q8:
		kernels.GemmFP4GroupsQ8NT(a.m, a.n, a.k, lhs, a.k, packed, scales, a.int4Group, out, a.n)
	case a.int4FP4 && a.bf16Act:
		kernels.GemmFP4GroupsDotNT(a.m, a.n, a.k, lhs, a.k, packed, scales, a.int4Group, out, a.n)
	case a.int4FP4:
		kernels.GemmFP4GroupsNT(a.m, a.n, a.k, lhs, a.k, packed, scales, a.int4Group, out, a.n)
	case a.int4Q8:
		kernels.GemmInt4GroupsQ8NT(a.m, a.n, a.k, lhs, a.k, packed, scales, mins, a.int4Group, out, a.n)
	case a.bf16Act:
		kernels.GemmInt4GroupsDotNT(a.m, a.n, a.k, lhs, a.k, packed, scales, mins, a.int4Group, out, a.n)
	default:
		kernels.GemmInt4GroupsNT(a.m, a.n, a.k, lhs, a.k, packed, scales, mins, a.int4Group, out, a.n)
	}
}

// permPool holds dotInt4Groups' permuted activations, dotF32's rounded
// ones and dotKVInt8's scaled probabilities between calls.
var permPool = sync.Pool{New: func() any { return new([]float32) }}

// permuteColumns writes x [m, k] into out with column i moved to inv[i]
// (a permutation of k) and returns out. An index out of range or
// repeated leaves a column stale rather than failing: a permutation from
// the loader has neither.
func permuteColumns(out, x []float32, m, k int, inv []int32) []float32 {
	for i := range m {
		row, dst := x[i*k:(i+1)*k], out[i*k:(i+1)*k]
		for c, j := range inv[:k] {
			if uint(j) < uint(k) {
				dst[j] = row[c]
			}
		}
	}
	return out
}
