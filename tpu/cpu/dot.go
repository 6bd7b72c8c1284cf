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

// DotGeneral is normalized to a batched product of [B, M, K] (lhs) with
// either [B, N, K] ("NT", the layout of a Linear weight [out, in]) or
// [B, K, N] ("NN"), and handed to the kernels. An operand whose axes are
// already in one of those orders is used in place; otherwise it is copied
// once into the NT order.

type dotAux struct {
	lhsPerm, rhsNT, rhsNN []int
	b, m, n, k            int
	// rhsFrom16 is set by rewrite when the rhs is the bf16/f16 operand of
	// a ConvertDType to f32 that the product reads directly.
	rhsFrom16 bool
	// int8Group is set by rewriteInt8 when the inputs are lhs, an int8
	// weight [N, K] and its f32 scales, one per int8Group columns.
	int8Group int
	// int8Q8 when the backend quantises the activations of those products
	// to int8 (SetActivations "int8"; k a multiple of 32).
	int8Q8 bool
	// int4 is set by rewriteInt4 when the inputs are lhs and an int4
	// weight [N, K]: its packed values, block codes and scale table;
	// int4Q8 when the backend quantises the activations to int8
	// (SetActivations "int8"), of those and of grouped int4 products.
	int4, int4Q8 bool
	// nvfp4 (with int4) when that weight is NVFP4 (nn.DequantizeNVFP4):
	// E2M1 values, a code per 16 values, a table of half-scales.
	nvfp4 bool
	// int4Group is set by rewriteInt4Groups when the inputs are lhs and a
	// grouped int4 weight [N, K]: its packed values, its f32 scales, one
	// per int4Group columns, its mins where int4Mins and its columns'
	// places where int4Perm (activation order).
	int4Group          int
	int4Mins, int4Perm bool
	// int4FP4: that weight's values are FP4 E2M1 codes and its scales
	// half-scales (nn.DequantizeFP4Groups: NVFP4 experts).
	int4FP4 bool
	// fp8B0, fp8B1 are set by rewriteFP8 when the inputs are lhs, an FP8
	// weight [N, K] (E4M3 bytes) and its f32 scales, one per block of
	// fp8B0 rows by fp8B1 columns.
	fp8B0, fp8B1 int
	// visible is set by rewriteVisible (visible.go) when the product is
	// attention's scores (visibleN) or its probabilities times the values
	// (visibleK) and its last input is the mask, of the softmax's shape
	// rows, whose visible spans bound the columns or the contraction.
	visible int
	rows    shapes.Shape
	// kv8 is set by rewriteKVInt8 (kvint8.go) when the inputs are lhs, an
	// int8 KV cache [B, N, K] and its f32 scales, one per row (kv8Rows)
	// or per contraction column (kv8Cols).
	kv8 int
	// bf16Act is set by rewrite when the rhs is bf16 or held compact and
	// the backend rounds the activations of such products to bf16
	// (SetActivations "bf16"; compact weights are then rounded to bf16
	// too where the pair kernels run, kernels.GemmInt8DotNT and its kin:
	// bf16Rows); and on wide16 products in bf16 over any held format
	// (pairAct), whose rows are bf16 already.
	bf16Act bool
	// wide16 is set by weightDot's rewrites when the product is in 16-bit
	// activations and its weight held quantised (int8, int4, grouped int4,
	// FP8): the lhs and the result are bf16 or f16 (execDotWide16).
	wide16 bool
}

// held reports whether a rewrite points the product at a weight held
// quantised (int8, int4, NVFP4, grouped int4, FP8): dotHeld runs it.
func (a *dotAux) held() bool {
	return a.int8Group > 0 || a.fp8B0 > 0 || a.int4 || a.int4Group > 0
}

// DotGeneral implements backends.Builder.
func (b *Builder) DotGeneral(lhs backends.Op, lhsContracting, lhsBatch []int, rhs backends.Op, rhsContracting, rhsBatch []int) (backends.Op, error) {
	in, err := b.in("DotGeneral", lhs, rhs)
	if err != nil {
		return nil, err
	}
	ls, rs := in[0].shape, in[1].shape
	if ls.DType != rs.DType {
		return nil, fmt.Errorf("cpu backend: DotGeneral: dtypes differ: %s and %s", ls, rs)
	}
	if len(lhsContracting) != len(rhsContracting) || len(lhsBatch) != len(rhsBatch) {
		return nil, fmt.Errorf("cpu backend: DotGeneral: lhs has %d contracting and %d batch axes, rhs %d and %d",
			len(lhsContracting), len(lhsBatch), len(rhsContracting), len(rhsBatch))
	}
	if err := axesOK("DotGeneral lhs", append(slices.Clone(lhsContracting), lhsBatch...), ls.Rank()); err != nil {
		return nil, err
	}
	if err := axesOK("DotGeneral rhs", append(slices.Clone(rhsContracting), rhsBatch...), rs.Rank()); err != nil {
		return nil, err
	}
	a := dotAux{b: 1, m: 1, n: 1, k: 1}
	var outDims []int
	for i := range lhsBatch {
		d := ls.Dimensions[lhsBatch[i]]
		if d != rs.Dimensions[rhsBatch[i]] {
			return nil, fmt.Errorf("cpu backend: DotGeneral: batch axis %d of %s does not match axis %d of %s", lhsBatch[i], ls, rhsBatch[i], rs)
		}
		a.b *= d
		outDims = append(outDims, d)
	}
	for i := range lhsContracting {
		d := ls.Dimensions[lhsContracting[i]]
		if d != rs.Dimensions[rhsContracting[i]] {
			return nil, fmt.Errorf("cpu backend: DotGeneral: contracting axis %d of %s does not match axis %d of %s", lhsContracting[i], ls, rhsContracting[i], rs)
		}
		a.k *= d
	}
	lFree := freeAxes(ls.Rank(), lhsBatch, lhsContracting)
	rFree := freeAxes(rs.Rank(), rhsBatch, rhsContracting)
	for _, ax := range lFree {
		a.m *= ls.Dimensions[ax]
		outDims = append(outDims, ls.Dimensions[ax])
	}
	for _, ax := range rFree {
		a.n *= rs.Dimensions[ax]
		outDims = append(outDims, rs.Dimensions[ax])
	}
	a.lhsPerm = concat(lhsBatch, lFree, lhsContracting)
	a.rhsNT = concat(rhsBatch, rFree, rhsContracting)
	a.rhsNN = concat(rhsBatch, rhsContracting, rFree)
	n := b.add(backends.OpTypeDotGeneral, shapes.Make(ls.DType, outDims...), in, execDot)
	n.aux = &a
	return n, nil
}

func freeAxes(rank int, batch, contracting []int) []int {
	var free []int
	for ax := 0; ax < rank; ax++ {
		if !slices.Contains(batch, ax) && !slices.Contains(contracting, ax) {
			free = append(free, ax)
		}
	}
	return free
}

func concat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// isIdentity reports whether perm is 0, 1, ..., ignoring axes of size 1
// (they do not change the memory order).
func isIdentity(perm []int, dims []int) bool {
	last := -1
	for _, p := range perm {
		if dims[p] == 1 {
			continue
		}
		if p < last {
			return false
		}
		last = p
	}
	return true
}

// permuted copies data so that its axes follow perm (row-major).
func permuted(data any, s shapes.Shape, perm []int) any {
	is := stridesOf(s.Dimensions)
	dims := make([]int, len(perm))
	ss := make([]int, len(perm))
	for k, p := range perm {
		dims[k], ss[k] = s.Dimensions[p], is[p]
	}
	t := makeFlat(dtypeOfFlat(data), s.Size())
	copyWalk(t, data, walk{dims: dims, dStrides: stridesOf(dims), sStrides: ss})
	return t
}

// rewrite runs at Compile, before liveness, and points products at the
// weights as held: int8, int4, grouped int4 and FP8 dequantisation forms
// become products that read the compact weight (rewriteInt8, rewriteInt4,
// rewriteInt4Groups, rewriteFP8), gathered expert
// products become the grouped node (rewriteGrouped), and a DotGeneral whose
// rhs is a ConvertDType from bf16/f16 to f32 reads the 16-bit operand
// directly (the weights stay in their dtype; the converted copy is never
// made unless something else needs it). act says what the products do
// with their activations (Backend.SetActivations). Serve's slot remaps
// become one node too (rewriteRemap, remap.go).
func rewrite(nodes []*node, act actKind) {
	for _, n := range nodes {
		rewriteInt8(n, act)
		rewriteInt4(n, act)
		rewriteInt4Groups(n, act)
		rewriteFP8(n, act)
		rewriteGrouped(n, act)
		rewriteRemap(n)
		rewriteKVInt8(n)
		rewriteQuantizeKV(n)
		if n.op != backends.OpTypeDotGeneral || n.shape.DType != dtypes.Float32 || len(n.inputs) != 2 {
			continue
		}
		r := n.inputs[1]
		if r.op != backends.OpTypeConvertDType || r.aliasesInput || !is16(r.inputs[0].shape.DType) {
			continue
		}
		a := *n.aux.(*dotAux)
		a.rhsFrom16 = true
		a.bf16Act = act == actBF16 && r.inputs[0].shape.DType == dtypes.BFloat16
		n.aux = &a
		n.inputs = []*node{n.inputs[0], r.inputs[0]}
	}
}

// f32LHS is an f32 product's lhs in the [B, M, K] order the kernels read:
// in's data, permuted where the DotGeneral's axes are in another order.
func f32LHS(a *dotAux, in *slot, ls shapes.Shape) []float32 {
	lhs := in.data.([]float32)
	if !isIdentity(a.lhsPerm, ls.Dimensions) {
		lhs = permuted(lhs, ls, a.lhsPerm).([]float32)
	}
	return lhs
}

func execDot(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(*dotAux)
	if a.wide16 {
		return execDotWide16(st, n, in), nil
	}
	ls, rs := n.inputs[0].shape, n.inputs[1].shape
	out := st.alloc(n.shape)
	var spans []int32
	if a.visible != visibleNone { // the mask is the last input
		spans = visibleSpans(a, in[len(in)-1].data.([]float32), n.inputs[len(in)-1].shape)
	}
	switch {
	case a.kv8 != kv8None:
		dotKVInt8(a, out.data.([]float32), f32LHS(a, in[0], ls), in[1].data.([]int8), in[2].data.([]float32), spans)
	case a.held():
		dotHeld(a, out.data.([]float32), f32LHS(a, in[0], ls), in)
	case n.shape.DType == dtypes.Float32:
		dotF32(a, out.data.([]float32), f32LHS(a, in[0], ls), in[1].data, rs, spans)
	case is16(n.shape.DType):
		// 16-bit activations: lhs to f32, rhs read as 16-bit, result back.
		b16 := *a
		b16.rhsFrom16 = true
		// bf16 activations hold bf16 values already: the pair kernel
		// multiplies the same products, twice as many an instruction.
		b16.bf16Act = n.shape.DType == dtypes.BFloat16
		widened(st, n, in[0].data, out, func(res, lhs []float32) { dotF32(&b16, res, lhs, in[1].data, rs, spans) })
	default:
		if err := dotGeneric(a, out.data, in[0].data, ls, in[1].data, rs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dotHeld is the product with a weight held quantised (a.held()): lhs
// [M, K] in f32, out [M, N].
func dotHeld(a *dotAux, out, lhs []float32, in []*slot) {
	switch {
	case a.int8Group > 0:
		dotInt8(a, out, lhs, in[1].data.([]int8), in[2].data.([]float32))
	case a.fp8B0 > 0 && a.bf16Act:
		kernels.GemmFP8DotNT(a.m, a.n, a.k, lhs, a.k, in[1].data.([]uint8), a.k, in[2].data.([]float32), a.fp8B0, a.fp8B1, out, a.n)
	case a.fp8B0 > 0:
		kernels.GemmFP8NT(a.m, a.n, a.k, lhs, a.k, in[1].data.([]uint8), a.k, in[2].data.([]float32), a.fp8B0, a.fp8B1, out, a.n)
	case a.int4:
		dotInt4(a, out, lhs, in[1].data.([]uint8), in[2].data.([]uint8), in[3].data.([]float32))
	case a.int4Group > 0:
		dotInt4Groups(a, out, lhs, in)
	default:
		panic("dotHeld: the product's weight is not held quantised")
	}
}

// execDotWide16 runs a wide16 product: 16-bit activations times a weight
// held quantised, which the graph dequantises to f32 and rounds to the
// activations' dtype before a 16-bit DotGeneral. The rows are widened to
// f32 (exactly), multiplied by the weight as held, as an f32 product
// reads it, and the result rounded back, as execDot does any 16-bit
// product. The weight's values are the f32 dequantisation's, not rounded
// to 16 bits, except where the pair kernels run in bf16 (bf16Act,
// kernels.GemmInt8DotNT and its kin for the other formats, from 16 rows),
// which round them as the graph does: each product is within a rounding
// of the weight (2⁻⁹ of it in bf16) of the graph's, and the whole weight
// is never dequantised.
func execDotWide16(st *execState, n *node, in []*slot) *slot {
	a := n.aux.(*dotAux)
	out := st.alloc(n.shape)
	widened(st, n, in[0].data, out, func(res, lhs []float32) { dotHeld(a, res, lhs, in) })
	return out
}

// widened runs a 16-bit product's f32 body: the lhs permuted where the
// product's axes ask, widened to f32, f's result rounded into out. The
// widened lhs and the f32 result are scratch from the call's free lists,
// not garbage at every product (a prefill's would be tens of MB).
func widened(st *execState, n *node, lhs any, out *slot, f func(res, lhs []float32)) {
	a, ls := n.aux.(*dotAux), n.inputs[0].shape
	if !isIdentity(a.lhsPerm, ls.Dimensions) {
		lhs = permuted(lhs, ls, a.lhsPerm)
	}
	wide, res := st.scratchF32(ls.Size()), st.scratchF32(n.shape.Size())
	widenInto(wide.data.([]float32), lhs)
	f(res.data.([]float32), wide.data.([]float32))
	fromF32(out.data, res.data.([]float32))
	st.drop(wide, res)
}

// widenInto writes flat's bf16 or f16 values into dst as f32.
func widenInto(dst []float32, flat any) {
	switch f := flat.(type) {
	case []bfloat16.BFloat16:
		widenBF16s(dst, f)
	case []float16.Float16:
		widenF16s(dst, f)
	default:
		panic(fmt.Sprintf("widenInto: %T", flat))
	}
}

// dotF32 computes out[B,M,N] from lhs [B,M,K] (f32) and rhs, f32 or (when
// a.rhsFrom16) bf16/f16 bits, in any of the layouts DotGeneral allows.
// spans, when not nil, bounds each product's columns (a.visible ==
// visibleN: the others are written 0) or its contraction (visibleK) to
// [spans[2b], spans[2b+1]).
func dotF32(a *dotAux, out, lhs []float32, rhs any, rs shapes.Shape, spans []int32) {
	M, N, K := a.m, a.n, a.k
	if K == 0 {
		clear(out)
		return
	}
	nn := false
	switch {
	case isIdentity(a.rhsNT, rs.Dimensions):
	case !a.rhsFrom16 && isIdentity(a.rhsNN, rs.Dimensions):
		nn = true
	default:
		rhs = permuted(rhs, rs, a.rhsNT)
	}
	// nt is one NT product of M rows, n columns and contraction k, at
	// offsets of lhs, rhs and out; the leading dimensions are the full
	// product's.
	var nt func(n, k, lo, ro, oo int)
	switch {
	case nn: // GemmF32NN below, whole: spans apply to the NT layout only
	case a.rhsFrom16 && a.bf16Act && dtypeOfFlat(rhs) == dtypes.BFloat16 && M == 1:
		// One row a product (attention's at decode: a product a row and
		// head): GemmBF16DotNT rounds the row and takes GemmBF16NT's
		// kernels, so the rows are rounded here once for all products.
		buf := permPool.Get().(*[]float32)
		defer permPool.Put(buf)
		if cap(*buf) < len(lhs) {
			*buf = make([]float32, len(lhs))
		}
		rounded := (*buf)[:len(lhs)]
		kernels.RoundBF16(rounded, lhs)
		r := u16(rhs)
		nt = func(n, k, lo, ro, oo int) { kernels.GemmBF16NT(M, n, k, rounded[lo:], K, r[ro:], K, out[oo:], N) }
	case a.rhsFrom16 && a.bf16Act && dtypeOfFlat(rhs) == dtypes.BFloat16:
		r := u16(rhs)
		nt = func(n, k, lo, ro, oo int) { kernels.GemmBF16DotNT(M, n, k, lhs[lo:], K, r[ro:], K, out[oo:], N) }
	case a.rhsFrom16 && dtypeOfFlat(rhs) == dtypes.BFloat16:
		r := u16(rhs)
		nt = func(n, k, lo, ro, oo int) { kernels.GemmBF16NT(M, n, k, lhs[lo:], K, r[ro:], K, out[oo:], N) }
	case a.rhsFrom16:
		r := u16(rhs)
		nt = func(n, k, lo, ro, oo int) { kernels.GemmF16NT(M, n, k, lhs[lo:], K, r[ro:], K, out[oo:], N) }
	case N == 1 && M > 1:
		// A matrix times one vector (Mamba-2's state times C at a decode
		// step, a product a head): out [M, 1] is out [1, M], the GEMV of
		// the vector over lhs's M rows, where GemmF32NT's driver would
		// pack M rows against one column.
		r := rhs.([]float32)
		nt = func(n, k, lo, ro, oo int) {
			if n == 1 { // not a span that leaves the column out
				kernels.GemmF32NT(1, M, k, r[ro:], K, lhs[lo:], K, out[oo:], M)
			}
		}
	default:
		r := rhs.([]float32)
		nt = func(n, k, lo, ro, oo int) { kernels.GemmF32NT(M, n, k, lhs[lo:], K, r[ro:], K, out[oo:], N) }
	}
	eachProduct(a, func(bi int) {
		lo, ro, oo := bi*M*K, bi*N*K, bi*M*N
		if nn {
			kernels.GemmF32NN(M, N, K, lhs[lo:], K, rhs.([]float32)[bi*K*N:], N, out[oo:], N)
			return
		}
		spanned(a, spans, bi, out[oo:], func(n, k, dn, dk int) { nt(n, k, lo+dk, ro+dn*K+dk, oo+dn) })
	})
}

// spanned runs product bi of a's batched NT product, whose output starts
// at out, as nt(n, k, dn, dk): n columns from column dn, contracted over
// k values from dk; bounded by spans as a.visible says (dotF32).
func spanned(a *dotAux, spans []int32, bi int, out []float32, nt func(n, k, dn, dk int)) {
	M, N, K := a.m, a.n, a.k
	switch {
	case spans == nil:
		nt(N, K, 0, 0)
	case a.visible == visibleN:
		s0, s1 := int(spans[2*bi]), int(spans[2*bi+1])
		for i := range M {
			row := out[i*N : i*N+N]
			clear(row[:s0])
			clear(row[s1:])
		}
		nt(s1-s0, K, s0, 0)
	default: // visibleK: blocks of 16 slots, only a span under 5/8 of the cache (visible.go)
		s0, s1 := int(spans[2*bi])&^15, min(K, (int(spans[2*bi+1])+15)&^15)
		if 8*(s1-s0) > 5*K {
			s0, s1 = 0, K
		}
		nt(N, s1-s0, 0, s0)
	}
}

// eachProduct runs gemm(bi) for a's a.b products. Many small ones
// (attention heads): one thread per product, the kernels' own parallel
// loops then run inline. Few large ones: one after the other, each
// spread over the threads.
func eachProduct(a *dotAux, gemm func(bi int)) {
	B, M, N, K := a.b, a.m, a.n, a.k
	if B > 1 && (B >= 4*kernels.Threads() || M*N*K < 1<<18) {
		kernels.Parallel(B, 1, func(lo, hi int) {
			for bi := lo; bi < hi; bi++ {
				gemm(bi)
			}
		})
		return
	}
	for bi := 0; bi < B; bi++ {
		gemm(bi)
	}
}

// dotGeneric is the plain loop for f64 and integer products.
func dotGeneric(a *dotAux, out, lhs any, ls shapes.Shape, rhs any, rs shapes.Shape) error {
	if !isIdentity(a.lhsPerm, ls.Dimensions) {
		lhs = permuted(lhs, ls, a.lhsPerm)
	}
	if !isIdentity(a.rhsNT, rs.Dimensions) {
		rhs = permuted(rhs, rs, a.rhsNT)
	}
	switch o := out.(type) {
	case []float64:
		dotLoop(a, o, lhs.([]float64), rhs.([]float64))
	case []int32:
		dotLoop(a, o, lhs.([]int32), rhs.([]int32))
	case []int64:
		dotLoop(a, o, lhs.([]int64), rhs.([]int64))
	default:
		return fmt.Errorf("not implemented for %s", dtypeOfFlat(out))
	}
	return nil
}

func dotLoop[T number](a *dotAux, out, lhs, rhs []T) {
	B, M, N, K := a.b, a.m, a.n, a.k
	for bi := 0; bi < B; bi++ {
		for i := 0; i < M; i++ {
			l := lhs[(bi*M+i)*K : (bi*M+i+1)*K]
			for j := 0; j < N; j++ {
				r := rhs[(bi*N+j)*K : (bi*N+j+1)*K]
				var s T
				for p := range l {
					s += l[p] * r[p]
				}
				out[(bi*M+i)*N+j] = s
			}
		}
	}
}
