package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Grouped expert products. pipeline/nn.PairDot (the gathered matmul of
// routed experts) reaches the backend as
//
//	DotGeneral(v [P, K], Gather(w [E, N, K], ids [P, 1]))    batch P, contracting K
//
// (with a ConvertDType from bf16/f16 after the Gather, or of the whole
// stack before it, when the weights are held narrow; for an int8 stack,
// the dequantisation of the gathered int8 matrices and scales, see
// int8Gathered; for MXFP4, int4 and NVFP4 stacks, the decoding of the
// gathered nibbles, see mxfp4Gathered, int4Gathered and
// nvfp4TablesGathered): every pair gathers its expert's whole matrix, P copies
// of [N, K] per product. rewriteGrouped turns that into one node that never
// makes the gathered copy: at run time it sorts the pairs by expert
// (a counting sort over the ids), and each active expert's matrix, read
// in place in the stack, is multiplied once by the rows routed to it, one
// GEMM (a GEMV for a single row) per active expert. Only the active
// experts' weights are read, each once per product. A pair whose expert
// is -1 multiplies nothing and gives a row of zeros: lm.Routing's pair
// that runs no expert, whose weight is 0 (Gather, as XLA and the go
// backend run it, clamps it to expert 0, weighed 0 after).

const opTypeGrouped = backends.OpTypeLast + 102

// groupedAux: E experts of [N, K] each; from16 when w is bf16/f16;
// group > 0 when w is int8 with one f32 scale per group of input columns;
// mxfp4 when w is MXFP4; int4 when w is int4.
type groupedAux struct {
	e, n, k int
	from16  bool
	group   int
	mxfp4   bool // w is MXFP4: blocks [E, N, K/32, 16] and scales [E, N, K/32] (mxfp4.go)
	// int4: w is int4 (quant.go's layout): packed [E, N, K/32, 16], codes
	// [E, N, K/32] and the stack's one scale table [256, 1]. int4Q8: the
	// rows are quantised to int8 per block of 32 first and multiplied as
	// the dense int4 products are under SetActivations "int8" (VNNI), in
	// the GEMVs as in the GEMMs.
	int4, int4Q8 bool
	// int4Group: w is grouped int4 (quant.go's int4GroupsWeight layout, a
	// stack): packed [E, N, K/32, 16], scales [E, N, K/int4Group] and,
	// with int4Mins, mins [E, K/int4Group, N]; int4Q8 as for int4.
	int4Group int
	int4Mins  bool
	// int4FP4: that grouped stack's values are FP4 E2M1 codes and its
	// scales half-scales (nn.DequantizeFP4Groups: NVFP4 experts).
	int4FP4 bool
	// nvfp4Parts > 0: w is NVFP4 with a table per part (nvfp4.go): packed
	// [E, N, K/32, 16], scale bytes [E, N, K/16] and tables [E,
	// nvfp4Parts, 256], each part N/nvfp4Parts rows; int4Q8 as for int4.
	nvfp4Parts int
	// fp8B0, fp8B1: w is FP8 (fp8.go's layout, a stack): E4M3 bytes [E,
	// N, K] and f32 scales [E, ⌈N/fp8B0⌉, ⌈K/fp8B1⌉].
	fp8B0, fp8B1 int
	// bf16Act: the rows are rounded to bf16 before they multiply
	// (SetActivations "bf16"), in the GEMVs as in the GEMMs, w bf16 or
	// held quantised (then the GEMMs run on kernels.GemmInt8DotNT and its
	// kin, which round w to bf16 from 16 rows); or w is held quantised
	// under out16 in bf16, and the GEMMs round it to bf16 as the graph
	// does (the same kernels; the GEMVs read it exact).
	bf16Act bool
	// int8Q8: w is int8 and the rows are quantised to int8 per block of 32
	// (SetActivations "int8"), in the GEMVs as in the GEMMs.
	int8Q8 bool
	// combine > 0: the node also sums each token's combine pairs weighted
	// by the routing weights, its last input [P/combine, combine, 1] (see
	// rewriteGroupedSum); the output is then [P/combine, N]. With
	// combineBias, a stack of biases [E, N] (f32, bf16 or f16) is the
	// input before it, and each pair's row gets its expert's bias first.
	combine     int
	combineBias bool
	// out16: the product is in 16-bit activations (--dtype bf16 or f16):
	// the rows are that dtype and w is too (from16) or is held quantised,
	// which the graph dequantises and rounds to the rows' dtype; the rows
	// are widened, multiplied as an f32 product's, and the result rounded
	// back, as execDot does a 16-bit product.
	out16 bool
}

// wholeRowGather reports whether g gathers whole entries (matrices, or
// int8 matrices as [N, g, G]) from a stack of rank 3 or 4 by one index per
// row: indices [P, 1], output [P, ...].
func wholeRowGather(g *node) bool {
	return g.op == backends.OpTypeGather && g.inputs[0].shape.Rank() >= 3 && rowGather(g)
}

// rowGather is wholeRowGather for a stack of any rank from 2 (a stack of
// bias vectors [E, N] included).
func rowGather(g *node) bool {
	if g.op != backends.OpTypeGather || g.inputs[0].shape.Rank() < 2 || g.inputs[1].shape.Rank() != 2 {
		return false
	}
	a, ok := g.aux.(gatherAux)
	w := g.inputs[0].shape.Dimensions
	offsets, sizes := []int{}, []int{1}
	for i := 1; i < len(w); i++ {
		offsets, sizes = append(offsets, i), append(sizes, w[i])
	}
	return ok && a.indexVectorAxis == 1 && slices.Equal(a.offsetOutputAxes, offsets) &&
		slices.Equal(a.collapsedSliceAxes, []int{0}) && slices.Equal(a.startIndexMap, []int{0}) &&
		slices.Equal(a.sizes, sizes) && g.inputs[1].shape.Dimensions[1] == 1
}

// int8Gathered matches nn.PairDot's int8 form at r [P, N, K]: the
// dequantisation (see quant.go) of whole-row gathers of an int8 stack
// q [E, N, g, G] and its scales [E, N, g, 1] by the same indices.
func int8Gathered(r *node) (q, scales, ids *node, group int, ok bool) {
	if r.op != backends.OpTypeReshape || r.shape.Rank() != 3 {
		return nil, nil, nil, 0, false
	}
	m := r.inputs[0]
	if m.op != backends.OpTypeMul || m.shape.DType != dtypes.Float32 || m.shape.Rank() != 4 {
		return nil, nil, nil, 0, false
	}
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		c, b := m.inputs[k[0]], m.inputs[k[1]]
		if c.op != backends.OpTypeConvertDType || c.inputs[0].shape.DType != dtypes.Int8 ||
			b.op != backends.OpTypeBroadcastInDim || !slices.Equal(b.aux.([]int), []int{0, 1, 2, 3}) {
			continue
		}
		gq, gs := c.inputs[0], b.inputs[0]
		if !wholeRowGather(gq) || !wholeRowGather(gs) || !sameIndices(gq.inputs[1], gs.inputs[1]) {
			continue
		}
		d := m.shape.Dimensions
		if gs.shape.DType != dtypes.Float32 || !slices.Equal(gs.shape.Dimensions, []int{d[0], d[1], d[2], 1}) ||
			!slices.Equal(r.shape.Dimensions, []int{d[0], d[1], d[2] * d[3]}) {
			continue
		}
		return gq.inputs[0], gs.inputs[0], gq.inputs[1], d[3], true
	}
	return nil, nil, nil, 0, false
}

// sameIndices reports whether two index operands are one node or the same
// parameter.
func sameIndices(a, b *node) bool {
	if a == b {
		return true
	}
	return a.op == backends.OpTypeParameter && b.op == backends.OpTypeParameter && a.paramIdx == b.paramIdx
}

// rewriteGrouped finds the gathered product at n (see above).
func rewriteGrouped(n *node, act actKind) {
	if n.op != backends.OpTypeDotGeneral || (n.shape.DType != dtypes.Float32 && !is16(n.shape.DType)) || len(n.inputs) != 2 {
		return
	}
	a := n.aux.(*dotAux)
	lhs, r := n.inputs[0], n.inputs[1]
	if lhs.shape.Rank() != 2 || r.shape.Rank() != 3 || a.m != 1 || a.b != lhs.shape.Dimensions[0] ||
		!slices.Equal(a.lhsPerm, []int{0, 1}) || !slices.Equal(a.rhsNT, []int{0, 1, 2}) || a.rhsFrom16 || a.int8Group > 0 || a.int4 {
		return
	}
	if dt := n.shape.DType; is16(dt) {
		if lhs.shape.DType != dt {
			return
		}
		if r.op == backends.OpTypeConvertDType && !r.aliasesInput && r.inputs[0].shape.DType == dtypes.Float32 {
			// A stack held quantised, in 16-bit activations: its gathered
			// dequantisation rounded to dt. The rows are widened and
			// multiplied by the weights as held, the result rounded back
			// (execDotWide16 says how near that is to the graph's).
			if g, inputs, ok := heldGathered(r.inputs[0], act); ok {
				g.out16 = true
				g.bf16Act = dt == dtypes.BFloat16 && act != actInt8 // the pair kernels (pairAct)
				becomeGrouped(n, g, append([]*node{lhs}, inputs...)...)
				wide16Rewrites.Add(1)
			}
			return
		}
		// 16-bit activations: rows and stack of the product's dtype. The
		// rows are exact in bf16, so the pair kernel multiplies the same
		// products (execDot's 16-bit case).
		if !wholeRowGather(r) || r.inputs[0].shape.DType != dt {
			return
		}
		d := r.inputs[0].shape.Dimensions
		becomeGrouped(n, &groupedAux{e: d[0], n: d[1], k: d[2], from16: true, out16: true, bf16Act: dt == dtypes.BFloat16}, lhs, r.inputs[0], r.inputs[1])
		return
	}
	if g, inputs, ok := heldGathered(r, act); ok {
		becomeGrouped(n, g, append([]*node{lhs}, inputs...)...)
		return
	}
	from16 := false
	if r.op == backends.OpTypeConvertDType && is16(r.inputs[0].shape.DType) {
		r, from16 = r.inputs[0], true
	}
	if !wholeRowGather(r) {
		return
	}
	w, ids := r.inputs[0], r.inputs[1]
	if !from16 && w.op == backends.OpTypeConvertDType && !w.aliasesInput && is16(w.inputs[0].shape.DType) {
		w, from16 = w.inputs[0], true // a narrow stack converted whole: read it narrow instead
	}
	if from16 != is16(w.shape.DType) || (!from16 && w.shape.DType != dtypes.Float32) {
		return
	}
	d := w.shape.Dimensions
	becomeGrouped(n, &groupedAux{e: d[0], n: d[1], k: d[2], from16: from16,
		bf16Act: act == actBF16 && w.shape.DType == dtypes.BFloat16}, lhs, w, ids)
}

// heldGathered matches r, an f32 [P, N, K], as the gathered
// dequantisation of a stack held quantised (int8, int4, grouped int4 or
// FP4, NVFP4, FP8, MXFP4), and returns the grouped node's aux and its
// inputs after the rows: the stack, the ids, then the stack's other
// parts.
func heldGathered(r *node, act actKind) (*groupedAux, []*node, bool) {
	if q, scales, ids, group, ok := int8Gathered(r); ok {
		d := q.shape.Dimensions
		// --activations bf16 (f32 compute), here and for every format
		// below: rows rounded to bf16, the GEMMs on the pair kernels
		// (GemmInt8DotNT and its kin), as a dense product has them.
		return &groupedAux{e: d[0], n: d[1], k: d[2] * d[3], group: group, int8Q8: act == actInt8 && d[2]*d[3]%32 == 0, bf16Act: act == actBF16}, []*node{q, ids, scales}, true
	}
	if packed, codes, ids, table, ok := int4Gathered(r); ok {
		d := packed.shape.Dimensions
		return &groupedAux{e: d[0], n: d[1], k: d[2] * 32, int4: true, int4Q8: act == actInt8, bf16Act: act == actBF16}, []*node{packed, ids, codes, table}, true
	}
	if packed, scales, mins, ids, group, fp4, ok := int4GroupsGathered(r); ok && kernels.CheckInt4Groups(packed.shape.Dimensions[2]*32, group) == nil {
		d := packed.shape.Dimensions
		inputs := []*node{packed, ids, scales}
		if mins != nil {
			inputs = append(inputs, mins)
		}
		return &groupedAux{e: d[0], n: d[1], k: d[2] * 32, int4Group: group, int4Mins: mins != nil, int4Q8: act == actInt8, int4FP4: fp4, bf16Act: act == actBF16}, inputs, true
	}
	if packed, codes, tables, ids, parts, ok := nvfp4TablesGathered(r); ok {
		d := packed.shape.Dimensions
		return &groupedAux{e: d[0], n: d[1], k: d[2] * 32, nvfp4Parts: parts, int4Q8: act == actInt8, bf16Act: act == actBF16}, []*node{packed, ids, codes, tables}, true
	}
	if w, scales, ids, b0, b1, ok := fp8Gathered(r); ok {
		d := w.shape.Dimensions
		return &groupedAux{e: d[0], n: d[1], k: d[2], fp8B0: b0, fp8B1: b1, bf16Act: act == actBF16}, []*node{w, ids, scales}, true
	}
	if blocks, scales, ids, ok := mxfp4Gathered(r); ok {
		d := blocks.shape.Dimensions
		return &groupedAux{e: d[0], n: d[1], k: d[2] * 32, mxfp4: true, bf16Act: act == actBF16}, []*node{blocks, ids, scales}, true
	}
	return nil, nil, false
}

// becomeGrouped makes n the grouped node over inputs (the rows, the
// stack, the ids, then the stack's other parts) with aux a.
func becomeGrouped(n *node, a *groupedAux, inputs ...*node) {
	n.op, n.fn, n.aux, n.inputs = opTypeGrouped, execGrouped, a, inputs
}

// rewriteGroupedSum folds the routing-weighted sum of each token's k
// expert outputs (nn.ExpertStack.Gathered's last step) into the grouped
// product before it:
//
//	ReduceSum(Mul(Reshape(grouped [P, N]) [T, k, N], w [T, k, 1]), axis 1)
//
// becomes one grouped node with w as a last input, which writes [T, N]
// and never the [T, k, N] products. The sum keeps ReduceSum's order over
// the k terms (sumRow's four accumulators) and the products are Mul's, so
// the results are identical. Each inner node must have no other reader.
// It runs after rewrite, on the nodes' reader counts.
func rewriteGroupedSum(nodes, outputs []*node) {
	users := countUsers(nodes, outputs)
	for _, rs := range nodes {
		if rs.op != backends.OpTypeReduceSum || rs.shape.DType != dtypes.Float32 || rs.inputs[0].shape.Rank() != 3 ||
			!slices.Equal(rs.aux.([]int), []int{1}) {
			continue
		}
		m := rs.inputs[0]
		if m.op != backends.OpTypeMul || m.fn == nil || m.aliasesInput || users[m.idx] != 1 {
			continue
		}
		d := m.shape.Dimensions // [T, k, N]
		for _, ord := range [][2]int{{0, 1}, {1, 0}} {
			r, w := m.inputs[ord[0]], m.inputs[ord[1]]
			if r.op != backends.OpTypeReshape || !r.aliasesInput || users[r.idx] != 1 || !r.shape.Equal(m.shape) ||
				w.shape.DType != dtypes.Float32 || !slices.Equal(w.shape.Dimensions, []int{d[0], d[1], 1}) {
				continue
			}
			g, bias := r.inputs[0], (*node)(nil)
			if g.op == backends.OpTypeAdd && users[g.idx] == 1 && g.fn != nil && !g.aliasesInput {
				g, bias = pairBias(g)
			}
			if g == nil || g.op != opTypeGrouped || users[g.idx] != 1 || g.aux.(*groupedAux).combine != 0 || g.aux.(*groupedAux).out16 {
				continue
			}
			a := *g.aux.(*groupedAux)
			a.combine = d[1]
			rs.op, rs.fn, rs.aux = opTypeGrouped, execGrouped, &a
			rs.inputs = slices.Clone(g.inputs)
			if bias != nil {
				a.combineBias = true
				rs.inputs = append(rs.inputs, bias)
			}
			rs.inputs = append(rs.inputs, w)
			break
		}
	}
}

// pairBias matches add = grouped + each pair's bias (GPT-OSS's down
// projection): Add(grouped [P, N], Gather(biases [E, N], ids)) with the
// grouped node's own ids, the gathered biases f32 or widened from bf16 or
// f16 (an exact ConvertDType). It returns the grouped node and the bias
// stack, or nil.
func pairBias(add *node) (g, bias *node) {
	for _, ord := range [][2]int{{0, 1}, {1, 0}} {
		g, gb := add.inputs[ord[0]], add.inputs[ord[1]]
		if g.op != opTypeGrouped || !gb.shape.Equal(g.shape) {
			continue
		}
		if gb.op == backends.OpTypeConvertDType && !gb.aliasesInput && is16(gb.inputs[0].shape.DType) {
			gb = gb.inputs[0]
		}
		if !rowGather(gb) || gb.inputs[0].shape.Rank() != 2 || !sameIndices(gb.inputs[1], g.inputs[2]) {
			continue
		}
		if dt := gb.shape.DType; dt != dtypes.Float32 && !is16(dt) {
			continue
		}
		return g, gb.inputs[0]
	}
	return nil, nil
}

// combinePairs writes out[t] = Σⱼ w[t, j] · res[t·k + j] for the T = len(w)/k
// tokens, rows of n, in the order ReduceSum sums a row of k (sumRow).
func combinePairs(out, res, w []float32, k, n int) {
	kernels.Parallel(len(w)/k, max(1, elemGrain/max(1, k*n)), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			wt, o := w[t*k:(t+1)*k], out[t*n:(t+1)*n]
			rows := res[t*k*n : (t+1)*k*n]
			for h := range o {
				var a0, a1, a2, a3 float32
				j := 0
				for ; j+4 <= k; j += 4 {
					a0 += float32(rows[j*n+h] * wt[j])
					a1 += float32(rows[(j+1)*n+h] * wt[j+1])
					a2 += float32(rows[(j+2)*n+h] * wt[j+2])
					a3 += float32(rows[(j+3)*n+h] * wt[j+3])
				}
				for ; j < k; j++ {
					a0 += float32(rows[j*n+h] * wt[j])
				}
				o[h] = (a0 + a1) + (a2 + a3)
			}
		}
	})
}

func execGrouped(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(*groupedAux)
	ids, err := intsOf(in[2].data)
	if err != nil {
		return nil, err
	}
	P := len(ids)
	// Counting sort of the pairs by expert. A pair of expert -1 (a
	// Routing's pair that runs no expert, weighed 0: LongCat-Flash's zero
	// experts) is left out, its row of zeros.
	start := make([]int, a.e+1)
	skipped := 0
	for p, e := range ids {
		if e == -1 {
			skipped++
			continue
		}
		if e < 0 || e >= a.e {
			return nil, fmt.Errorf("expert index %d of pair %d is outside [0, %d)", e, p, a.e)
		}
		start[e+1]++
	}
	for e := 0; e < a.e; e++ {
		start[e+1] += start[e]
	}
	order := make([]int, P-skipped)
	next := slices.Clone(start[:a.e])
	for p, e := range ids {
		if e == -1 {
			continue
		}
		order[next[e]] = p
		next[e]++
	}
	N, K := a.n, a.k
	var lhs []float32
	switch {
	case a.out16: // widened: bf16 values stay exact, so no rounding either
		wide := st.scratchF32(n.inputs[0].shape.Size())
		defer st.drop(wide)
		lhs = wide.data.([]float32)
		widenInto(lhs, in[0].data)
	case a.bf16Act:
		rounded := st.scratchF32(n.inputs[0].shape.Size())
		defer st.drop(rounded)
		lhs = rounded.data.([]float32)
		kernels.RoundBF16(lhs, in[0].data.([]float32))
	default:
		lhs = in[0].data.([]float32)
	}
	// The pairs' products go to the output, or with combine or in 16-bit
	// activations to scratch that the weighted sum or the rounding reads.
	var out, pairs *slot
	if a.combine > 0 || a.out16 {
		pairs = st.alloc(shapes.Make(dtypes.Float32, P, N))
	} else {
		out = st.alloc(n.shape)
		pairs = out
	}
	o := pairs.data.([]float32)
	for p, e := range ids {
		if e == -1 {
			clear(o[p*N : (p+1)*N])
		}
	}
	var table []float32
	if a.int4 {
		table = in[4].data.([]float32)
	}
	most := 0
	for e := 0; e < a.e; e++ {
		most = max(most, start[e+1]-start[e])
	}
	// Experts with one routed row (every expert at batch-1 decode) are
	// GEMVs run together in one parallel pass, reading the row and writing
	// the result in place; the others are one GEMM each.
	var gemvs []kernels.Gemv
	for e := 0; e < a.e && a.fp8B0 == 0; e++ { // (FP8 experts: one GEMV or GEMM each, below)
		if start[e+1]-start[e] != 1 {
			continue
		}
		p := order[start[e]]
		if a.nvfp4Parts > 0 { // a product a part, each with its table
			rows := N / a.nvfp4Parts
			for t := range a.nvfp4Parts {
				packed, codes, table := nvfp4Part(a, in, e, t)
				gemvs = append(gemvs, kernels.Gemv{A: lhs[p*K : (p+1)*K], C: o[p*N+t*rows : p*N+(t+1)*rows], N: rows,
					Int4: packed, Int4Codes: codes, Int4Table: table, NVFP4: true, Int4Q8: a.int4Q8})
			}
			continue
		}
		g := kernels.Gemv{A: lhs[p*K : (p+1)*K], C: o[p*N : (p+1)*N], N: N, LDB: K}
		switch {
		case a.int4Group > 0:
			g.Int4, g.Int4Scales, g.Int4Group = in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), a.int4Group
			g.Int4Mins, g.Int4Q8, g.Int4FP4 = groupMins(a, in, e), a.int4Q8, a.int4FP4
		case a.mxfp4:
			g.MXFP4, g.MXScales = in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32]
		case a.int4:
			g.Int4, g.Int4Codes, g.Int4Table = in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], table
			g.Int4Q8 = a.int4Q8
		case a.group > 0:
			g.I8, g.Scales, g.Group = in[1].data.([]int8)[e*N*K:(e+1)*N*K], in[3].data.([]float32)[e*N*(K/a.group):], a.group
			g.Int8Q8 = a.int8Q8
		case !a.from16:
			g.F32 = in[1].data.([]float32)[e*N*K : (e+1)*N*K]
		case dtypeOfFlat(in[1].data) == dtypes.BFloat16:
			g.BF16 = u16(in[1].data)[e*N*K : (e+1)*N*K]
		default:
			g.F16 = u16(in[1].data)[e*N*K : (e+1)*N*K]
		}
		gemvs = append(gemvs, g)
	}
	kernels.GemvMulti(K, gemvs)
	if most < 2 && a.fp8B0 == 0 {
		return combined(st, n, a, in, ids, out, pairs), nil
	}
	rows := make([]float32, most*K) // the rows routed to one expert
	res := make([]float32, most*N)
	for e := 0; e < a.e; e++ {
		group := order[start[e]:start[e+1]]
		m := len(group)
		if m < 2 && (m == 0 || a.fp8B0 == 0) {
			continue
		}
		x, c := rows[:m*K], res[:m*N]
		for i, p := range group {
			copy(x[i*K:(i+1)*K], lhs[p*K:(p+1)*K])
		}
		switch {
		case a.nvfp4Parts > 0:
			rows := N / a.nvfp4Parts
			for t := range a.nvfp4Parts {
				packed, codes, table := nvfp4Part(a, in, e, t)
				if a.int4Q8 {
					kernels.GemmNVFP4Q8NT(m, rows, K, x, K, packed, codes, table, c[t*rows:], N)
				} else if a.bf16Act {
					kernels.GemmNVFP4DotNT(m, rows, K, x, K, packed, codes, table, c[t*rows:], N)
				} else {
					kernels.GemmNVFP4NT(m, rows, K, x, K, packed, codes, table, c[t*rows:], N)
				}
			}
		case a.fp8B0 > 0:
			so, si := (N+a.fp8B0-1)/a.fp8B0, (K+a.fp8B1-1)/a.fp8B1
			gemm := kernels.GemmFP8NT
			if a.bf16Act {
				gemm = kernels.GemmFP8DotNT
			}
			gemm(m, N, K, x, K, in[1].data.([]uint8)[e*N*K:(e+1)*N*K], K, in[3].data.([]float32)[e*so*si:(e+1)*so*si], a.fp8B0, a.fp8B1, c, N)
		case a.int4FP4 && a.int4Q8:
			kernels.GemmFP4GroupsQ8NT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), a.int4Group, c, N)
		case a.int4FP4 && a.bf16Act:
			kernels.GemmFP4GroupsDotNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), a.int4Group, c, N)
		case a.int4FP4:
			kernels.GemmFP4GroupsNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), a.int4Group, c, N)
		case a.int4Group > 0 && a.int4Q8:
			kernels.GemmInt4GroupsQ8NT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), groupMins(a, in, e), a.int4Group, c, N)
		case a.int4Group > 0 && a.bf16Act:
			kernels.GemmInt4GroupsDotNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), groupMins(a, in, e), a.int4Group, c, N)
		case a.int4Group > 0:
			kernels.GemmInt4GroupsNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], groupScales(a, in, e), groupMins(a, in, e), a.int4Group, c, N)
		case a.mxfp4 && a.bf16Act:
			kernels.GemmMXFP4DotNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], c, N)
		case a.mxfp4:
			kernels.GemmMXFP4NT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], c, N)
		case a.int4 && a.int4Q8:
			kernels.GemmInt4Q8NT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], table, c, N)
		case a.int4 && a.bf16Act:
			kernels.GemmInt4DotNT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], table, c, N)
		case a.int4:
			kernels.GemmInt4NT(m, N, K, x, K, in[1].data.([]uint8)[e*N*K/2:(e+1)*N*K/2], in[3].data.([]uint8)[e*N*K/32:(e+1)*N*K/32], table, c, N)
		case a.group > 0 && a.int8Q8:
			kernels.GemmInt8Q8NT(m, N, K, x, K, in[1].data.([]int8)[e*N*K:], K, in[3].data.([]float32)[e*N*(K/a.group):], a.group, c, N)
		case a.group > 0 && a.bf16Act: // bf16 activations: the weight rounded to bf16, as the graph has it
			kernels.GemmInt8DotNT(m, N, K, x, K, in[1].data.([]int8)[e*N*K:], K, in[3].data.([]float32)[e*N*(K/a.group):], a.group, c, N)
		case a.group > 0:
			kernels.GemmInt8NT(m, N, K, x, K, in[1].data.([]int8)[e*N*K:], K, in[3].data.([]float32)[e*N*(K/a.group):], a.group, c, N)
		case !a.from16:
			kernels.GemmF32NT(m, N, K, x, K, in[1].data.([]float32)[e*N*K:], K, c, N)
		case a.bf16Act:
			kernels.GemmBF16DotNT(m, N, K, x, K, u16(in[1].data)[e*N*K:], K, c, N)
		case dtypeOfFlat(in[1].data) == dtypes.BFloat16:
			kernels.GemmBF16NT(m, N, K, x, K, u16(in[1].data)[e*N*K:], K, c, N)
		default:
			kernels.GemmF16NT(m, N, K, x, K, u16(in[1].data)[e*N*K:], K, c, N)
		}
		for i, p := range group {
			copy(o[p*N:(p+1)*N], c[i*N:(i+1)*N])
		}
	}
	return combined(st, n, a, in, ids, out, pairs), nil
}

// combined is execGrouped's result: out, or with combine the weighted sum
// of pairs, or with out16 pairs rounded to 16 bits, whose scratch goes
// back to the free list.
func combined(st *execState, n *node, a *groupedAux, in []*slot, ids []int, out, pairs *slot) *slot {
	if a.out16 {
		out = st.alloc(n.shape)
		fromF32(out.data, pairs.data.([]float32))
		pairs.refs = 1
		st.release(pairs)
		return out
	}
	if a.combine == 0 {
		return out
	}
	res := pairs.data.([]float32)
	if a.combineBias { // each pair's row plus its expert's bias, as the Add did
		for p, e := range ids {
			if e == -1 { // no expert: no bias either (its weight is 0)
				continue
			}
			row := res[p*a.n : (p+1)*a.n]
			switch b := in[len(in)-2].data.(type) {
			case []float32:
				for h, v := range b[e*a.n : (e+1)*a.n] {
					row[h] += v
				}
			case []bfloat16.BFloat16:
				for h, v := range b[e*a.n : (e+1)*a.n] {
					row[h] += v.Float32()
				}
			case []float16.Float16:
				for h, v := range b[e*a.n : (e+1)*a.n] {
					row[h] += v.Float32()
				}
			}
		}
	}
	out = st.alloc(n.shape)
	combinePairs(out.data.([]float32), res, in[len(in)-1].data.([]float32), a.combine, a.n)
	pairs.refs = 1
	st.release(pairs)
	return out
}

// groupScales and groupMins are expert e's scales [N, K/G] and mins
// [K/G, N] (nil for none) of a grouped int4 stack.
func groupScales(a *groupedAux, in []*slot, e int) []float32 {
	ng := a.k / a.int4Group
	return in[3].data.([]float32)[e*a.n*ng : (e+1)*a.n*ng]
}

func groupMins(a *groupedAux, in []*slot, e int) []float32 {
	if !a.int4Mins {
		return nil
	}
	ng := a.k / a.int4Group
	return in[4].data.([]float32)[e*ng*a.n : (e+1)*ng*a.n]
}

// nvfp4Part is part t of expert e of an NVFP4 stack with a table per
// part: its packed values, scale bytes and table.
func nvfp4Part(a *groupedAux, in []*slot, e, t int) (packed, codes []uint8, table []float32) {
	rows := a.n / a.nvfp4Parts
	r0 := e*a.n + t*rows // the part's first row over the stack
	packed = in[1].data.([]uint8)[r0*a.k/2 : (r0+rows)*a.k/2]
	codes = in[3].data.([]uint8)[r0*a.k/16 : (r0+rows)*a.k/16]
	at := (e*a.nvfp4Parts + t) * 256
	return packed, codes, in[4].data.([]float32)[at : at+256]
}
