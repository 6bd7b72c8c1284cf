package cpu

import (
	"fmt"
	"math"
	"reflect"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

//go:generate go run ./internal/genelementwise

// The per-op and per-dtype loops (unaryFloat, binaryLoop, compareLoop, the
// type switches onto them, the one-line Builder methods, ...) are in
// elementwise_gen.go, generated from the op table in
// internal/elementwisegen. This file holds what is written once: shape
// checks, the choice of path per dtype, and the broadcasting plan.

func reflectElem(flat any) reflect.Type { return reflect.TypeOf(flat).Elem() }

// elemGrain is the smallest piece of an elementwise pass worth a thread.
const elemGrain = 1 << 14

// ---- Builder methods --------------------------------------------------------

func (b *Builder) unary(op backends.OpType, x backends.Op) (backends.Op, error) {
	in, err := b.in(op.String(), x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.UnaryOp(op, in[0].shape)
	if err != nil {
		return nil, err
	}
	if op != backends.OpTypeLogicalNot && !shape.DType.IsFloat() && !(shape.DType.IsInt() && (op == backends.OpTypeAbs || op == backends.OpTypeNeg || op == backends.OpTypeSign)) {
		return nil, fmt.Errorf("cpu backend: op %s is not implemented for %s", op, shape.DType)
	}
	return b.add(op, shape, in, execUnary), nil
}

func (b *Builder) binary(op backends.OpType, lhs, rhs backends.Op) (backends.Op, error) {
	in, err := b.in(op.String(), lhs, rhs)
	if err != nil {
		return nil, err
	}
	var shape shapes.Shape
	if isCompare(op) {
		shape, err = shapeinference.ComparisonOp(op, in[0].shape, in[1].shape)
	} else {
		shape, err = shapeinference.BinaryOp(op, in[0].shape, in[1].shape)
	}
	if err != nil {
		return nil, err
	}
	n := b.add(op, shape, in, execBinary)
	n.aux = makeBPlan(shape, in[0].shape, in[1].shape) // shapes are fixed: planned once, not at every call
	return n, nil
}

func isCompare(op backends.OpType) bool {
	for _, c := range compareOps {
		if c == op {
			return true
		}
	}
	return false
}

// Where implements backends.Builder.
func (b *Builder) Where(cond, onTrue, onFalse backends.Op) (backends.Op, error) {
	in, err := b.in("Where", cond, onTrue, onFalse)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.WhereOp(in[0].shape, in[1].shape, in[2].shape)
	if err != nil {
		return nil, err
	}
	return b.add(backends.OpTypeWhere, shape, in, execWhere), nil
}

// Clamp implements backends.Builder.
func (b *Builder) Clamp(lo, x, hi backends.Op) (backends.Op, error) {
	in, err := b.in("Clamp", lo, x, hi)
	if err != nil {
		return nil, err
	}
	for _, m := range []*node{in[0], in[2]} {
		if m.shape.DType != in[1].shape.DType || (!m.shape.IsScalar() && !m.shape.Equal(in[1].shape)) {
			return nil, fmt.Errorf("cpu backend: Clamp: bounds %s must be scalars or the shape of x %s", m.shape, in[1].shape)
		}
	}
	return b.add(backends.OpTypeClamp, in[1].shape, in, execClamp), nil
}

// ConvertDType implements backends.Builder.
func (b *Builder) ConvertDType(x backends.Op, dtype dtypes.DType) (backends.Op, error) {
	in, err := b.in("ConvertDType", x)
	if err != nil {
		return nil, err
	}
	if !dtypeSupported(dtype) {
		return nil, fmt.Errorf("cpu backend: ConvertDType to %s is not supported", dtype)
	}
	shape := in[0].shape.Clone()
	shape.DType = dtype
	if dtype == in[0].shape.DType {
		n := b.add(backends.OpTypeConvertDType, shape, in, nil)
		n.aliasesInput = true
		return n, nil
	}
	return b.add(backends.OpTypeConvertDType, shape, in, execConvert), nil
}

func is16(dt dtypes.DType) bool { return dt == dtypes.BFloat16 || dt == dtypes.Float16 }

// Conversions between f32 and the 16-bit floats (toF32 and fromF32, and
// with them every op computed in f32 for a 16-bit dtype). bf16 rounds to
// nearest even, as XLA's convert and torch's .to(torch.bfloat16) do
// (denormals flush to signed zero, as VCVTNEPS2BF16 does), with the
// kernels' vector loops over the pool.

func widenBF16s(dst []float32, src []bfloat16.BFloat16) { kernels.FromBF16(dst, u16(src)) }

func narrowBF16s(dst []bfloat16.BFloat16, src []float32) { kernels.ToBF16(u16(dst), src) }

func widenF16s(dst []float32, src []float16.Float16) {
	for i, v := range src {
		dst[i] = v.Float32()
	}
}

func narrowF16s(dst []float16.Float16, src []float32) {
	for i, v := range src {
		dst[i] = float16.Fromfloat32(v)
	}
}

// ---- unary ------------------------------------------------------------------

func execUnary(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.allocOrReuse(n, 0)
	dt := n.shape.DType
	switch {
	case dt == dtypes.Bool:
		unaryBool(n.op, out.data.([]bool), in[0].data.([]bool))
	case is16(dt):
		w := st.scratchF32(flatLen(in[0].data))
		tmp := w.data.([]float32)
		widenInto(tmp, in[0].data)
		unaryFloat(n.op, tmp, tmp)
		fromF32(out.data, tmp)
		st.drop(w)
	default:
		if !unaryDispatch(n.op, out.data, in[0].data) {
			return nil, fmt.Errorf("not implemented for %s", dt)
		}
	}
	return out, nil
}

func unaryDispatch(op backends.OpType, dst, src any) bool {
	switch s := src.(type) {
	case []float32:
		d := dst.([]float32)
		kernels.Parallel(len(s), elemGrain, func(lo, hi int) { unaryFloat(op, d[lo:hi], s[lo:hi]) })
	case []float64:
		unaryFloat(op, dst.([]float64), s)
	default:
		return unaryIntAny(op, dst, src)
	}
	return true
}

func logistic(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// ---- broadcasting -----------------------------------------------------------

// bcastStrides are an operand's element strides over the output's axes:
// zero on axes where the operand has size 1 (or is a scalar).
func bcastStrides(in, out shapes.Shape) []int {
	st := make([]int, out.Rank())
	if in.Size() == 1 {
		return st
	}
	is := stridesOf(in.Dimensions)
	for ax := range st {
		if in.Dimensions[ax] != 1 {
			st[ax] = is[ax]
		}
	}
	return st
}

// expandAny materializes an operand at the output's shape with a strided
// copy (stride 0 on broadcast axes); a same-size or one-element operand is
// returned as it is (the loops treat one element as a scalar).
func expandAny(src any, in, out shapes.Shape) any {
	if in.Size() == out.Size() || in.Size() == 1 {
		return src
	}
	t := makeFlat(in.DType, out.Size())
	copyWalk(t, src, walk{dims: out.Dimensions, dStrides: stridesOf(out.Dimensions), sStrides: bcastStrides(in, out)})
	return t
}

// bplan splits a broadcasting binary op into rows of a contiguous inner
// run: within a row each operand is either contiguous or one repeated
// value, so the loops take whole slices (or a one-element slice, which they
// treat as a scalar) and only the row offsets need index arithmetic.
type bplan struct {
	rows, inner int
	outer       []int    // outer dims (row index space)
	strides     [2][]int // operand strides over the outer dims
	innerStep   [2]int   // 1: contiguous in the row; 0: one value per row
}

func makeBPlan(out, l, r shapes.Shape) *bplan {
	ls, rs := bcastStrides(l, out), bcastStrides(r, out)
	os := stridesOf(out.Dimensions)
	var dims []int
	var st [3][]int
	for ax, d := range out.Dimensions {
		if d == 1 {
			continue
		}
		if k := len(dims) - 1; k >= 0 && st[0][k] == os[ax]*d && st[1][k] == ls[ax]*d && st[2][k] == rs[ax]*d {
			dims[k] *= d
			st[0][k], st[1][k], st[2][k] = os[ax], ls[ax], rs[ax]
			continue
		}
		dims = append(dims, d)
		st[0] = append(st[0], os[ax])
		st[1] = append(st[1], ls[ax])
		st[2] = append(st[2], rs[ax])
	}
	p := &bplan{rows: 1, inner: 1}
	if len(dims) == 0 {
		return p
	}
	last := len(dims) - 1
	p.inner = dims[last]
	p.innerStep = [2]int{st[1][last], st[2][last]}
	p.outer = dims[:last]
	p.strides = [2][]int{st[1][:last], st[2][:last]}
	for _, d := range p.outer {
		p.rows *= d
	}
	return p
}

// rowOffsets returns the operands' offsets for row r.
func (p *bplan) rowOffsets(r int) (int, int) {
	a, c := 0, 0
	for ax := len(p.outer) - 1; ax >= 0; ax-- {
		i := r % p.outer[ax]
		r /= p.outer[ax]
		a += i * p.strides[0][ax]
		c += i * p.strides[1][ax]
	}
	return a, c
}

func rowSlice[T any](x []T, off, step, n int) []T {
	if step == 0 {
		return x[off : off+1]
	}
	return x[off : off+n]
}

// binaryPlanned runs a (broadcasting) binary op or comparison over rows.
func binaryPlanned[T number](op backends.OpType, p *bplan, dst any, a, c []T) {
	cmp := isCompare(op)
	n := p.inner
	if p.rows == 1 && n > elemGrain {
		// One long row (operands of the same shape merge into one): the
		// threads share it by pieces.
		av, cv := rowSlice(a, 0, p.innerStep[0], n), rowSlice(c, 0, p.innerStep[1], n)
		piece := func(x []T, lo, hi int) []T {
			if len(x) == 1 {
				return x
			}
			return x[lo:hi]
		}
		kernels.Parallel(n, elemGrain, func(lo, hi int) {
			if cmp {
				compareLoop(op, dst.([]bool)[lo:hi], piece(av, lo, hi), piece(cv, lo, hi))
			} else {
				binaryLoop(op, dst.([]T)[lo:hi], piece(av, lo, hi), piece(cv, lo, hi))
			}
		})
		return
	}
	kernels.Parallel(p.rows, max(1, elemGrain/max(n, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			ao, co := p.rowOffsets(r)
			av, cv := rowSlice(a, ao, p.innerStep[0], n), rowSlice(c, co, p.innerStep[1], n)
			if cmp {
				compareLoop(op, dst.([]bool)[r*n:(r+1)*n], av, cv)
			} else {
				binaryLoop(op, dst.([]T)[r*n:(r+1)*n], av, cv)
			}
		}
	})
}

// ---- binary -----------------------------------------------------------------

func execBinary(st *execState, n *node, in []*slot) (*slot, error) {
	ls, rs := n.inputs[0].shape, n.inputs[1].shape
	var out *slot
	if isCompare(n.op) {
		out = st.alloc(n.shape)
	} else {
		var cands []int
		if ls.Size() == n.shape.Size() {
			cands = append(cands, 0)
		}
		if rs.Size() == n.shape.Size() {
			cands = append(cands, 1)
		}
		out = st.allocOrReuse(n, cands...)
	}
	if ls.DType == dtypes.Bool {
		a := expandAny(in[0].data, ls, n.shape).([]bool)
		c := expandAny(in[1].data, rs, n.shape).([]bool)
		if !binaryBool(n.op, out.data.([]bool), a, c) {
			return nil, fmt.Errorf("not implemented for %s", ls.DType)
		}
		return out, nil
	}
	p, ok := n.aux.(*bplan)
	if !ok { // a binary node made by a rewrite rather than Builder.binary
		p = makeBPlan(n.shape, ls, rs)
	}
	a, c := in[0].data, in[1].data
	if is16(ls.DType) { // widened into scratch from the call's free lists
		wa, wc := st.scratchF32(flatLen(a)), st.scratchF32(flatLen(c))
		af, cf := wa.data.([]float32), wc.data.([]float32)
		widenInto(af, a)
		widenInto(cf, c)
		if isCompare(n.op) {
			binaryPlanned(n.op, p, out.data, af, cf)
			st.drop(wa, wc)
			return out, nil
		}
		wt := st.scratchF32(n.shape.Size())
		tmp := wt.data.([]float32)
		binaryPlanned(n.op, p, tmp, af, cf)
		fromF32(out.data, tmp)
		st.drop(wa, wc, wt)
		return out, nil
	}
	if !binaryPlannedAny(n.op, p, out.data, a, c) {
		return nil, fmt.Errorf("not implemented for %s", ls.DType)
	}
	return out, nil
}

func isIntType[T number]() bool {
	var z T
	switch any(z).(type) {
	case float32, float64:
		return false
	}
	return true
}

func intPow[T number](x, y T) T {
	if y < 0 {
		return 0
	}
	r := T(1)
	for ; y > 0; y-- {
		r *= x
	}
	return r
}

// ---- Where, Clamp, ConvertDType ---------------------------------------------

func execWhere(st *execState, n *node, in []*slot) (*slot, error) {
	cond := expandAny(in[0].data, n.inputs[0].shape, n.shape).([]bool)
	t := expandAny(in[1].data, n.inputs[1].shape, n.shape)
	f := expandAny(in[2].data, n.inputs[2].shape, n.shape)
	var cands []int
	for k := 1; k <= 2; k++ {
		if n.inputs[k].shape.Size() == n.shape.Size() {
			cands = append(cands, k)
		}
	}
	out := st.allocOrReuse(n, cands...)
	// Where only selects: one loop per element width serves every dtype
	// (the bits are copied, as copyWalk copies them).
	ob, tb, fb := bytesOf(out.data), bytesOf(t), bytesOf(f)
	switch elemSize(out.data) {
	case 1:
		whereLoop(ob, cond, tb, fb)
	case 2:
		whereLoop(view[uint16](ob), cond, view[uint16](tb), view[uint16](fb))
	case 4:
		whereLoop(view[uint32](ob), cond, view[uint32](tb), view[uint32](fb))
	case 8:
		whereLoop(view[uint64](ob), cond, view[uint64](tb), view[uint64](fb))
	default:
		ov, tv, fv := reflect.ValueOf(out.data), reflect.ValueOf(t), reflect.ValueOf(f)
		for i := 0; i < n.shape.Size(); i++ {
			src, j := fv, i
			if cond[min(i, len(cond)-1)] {
				src = tv
			}
			if src.Len() == 1 {
				j = 0
			}
			ov.Index(i).Set(src.Index(j))
		}
	}
	return out, nil
}

// whereLoop selects dst[i] from t or f by cond[i]; a one-element cond, t
// or f stands for every index. Ranges of elemGrain run in parallel, each
// with its loop chosen once (dst may be t's or f's own memory: each index
// is read before it is written).
func whereLoop[T any](dst []T, cond []bool, t, f []T) {
	kernels.Parallel(len(dst), elemGrain, func(lo, hi int) {
		d := dst[lo:hi]
		switch {
		case len(cond) == 1:
			src := f
			if cond[0] {
				src = t
			}
			if len(src) == 1 {
				v := src[0]
				for i := range d {
					d[i] = v
				}
			} else {
				copy(d, src[lo:hi])
			}
		case len(t) > 1 && len(f) > 1:
			c, tv, fv := cond[lo:hi], t[lo:hi], f[lo:hi]
			for i := range d {
				if c[i] {
					d[i] = tv[i]
				} else {
					d[i] = fv[i]
				}
			}
		case len(t) > 1: // f one value: the zeroing select
			c, tv, v := cond[lo:hi], t[lo:hi], f[0]
			for i := range d {
				if c[i] {
					d[i] = tv[i]
				} else {
					d[i] = v
				}
			}
		case len(f) > 1:
			c, v, fv := cond[lo:hi], t[0], f[lo:hi]
			for i := range d {
				if c[i] {
					d[i] = v
				} else {
					d[i] = fv[i]
				}
			}
		default:
			c, tv, fv := cond[lo:hi], t[0], f[0]
			for i := range d {
				if c[i] {
					d[i] = tv
				} else {
					d[i] = fv
				}
			}
		}
	})
}

func execClamp(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.allocOrReuse(n, 1)
	dt := n.shape.DType
	lo, x, hi := in[0].data, in[1].data, in[2].data
	var tmp []float32
	if is16(dt) {
		lo, x, hi = toF32(lo), toF32(x), toF32(hi)
		tmp = make([]float32, n.shape.Size())
	}
	var ok bool
	switch xv := x.(type) {
	case []float32:
		d := tmp
		if d == nil {
			d = out.data.([]float32)
		}
		ok = clampLoop(d, lo.([]float32), xv, hi.([]float32))
	case []float64:
		ok = clampLoop(out.data.([]float64), lo.([]float64), xv, hi.([]float64))
	case []int32:
		ok = clampLoop(out.data.([]int32), lo.([]int32), xv, hi.([]int32))
	case []int64:
		ok = clampLoop(out.data.([]int64), lo.([]int64), xv, hi.([]int64))
	}
	if !ok {
		return nil, fmt.Errorf("not implemented for %s", dt)
	}
	if tmp != nil {
		fromF32(out.data, tmp)
	}
	return out, nil
}

func clampLoop[T number](dst, lo, x, hi []T) bool {
	for i, v := range x {
		l, h := lo[0], hi[0]
		if len(lo) > 1 {
			l = lo[i]
		}
		if len(hi) > 1 {
			h = hi[i]
		}
		dst[i] = min(max(v, l), h)
	}
	return true
}

func execConvert(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.alloc(n.shape)
	if err := convertFlat(out.data, in[0].data); err != nil {
		return nil, err
	}
	return out, nil
}

// convertFlat converts src into dst element by element.
func convertFlat(dst, src any) error {
	// f32 to and from bf16 directly, with the vector loops.
	switch s := src.(type) {
	case []float32:
		if d, ok := dst.([]bfloat16.BFloat16); ok {
			narrowBF16s(d, s)
			return nil
		}
	case []bfloat16.BFloat16:
		if d, ok := dst.([]float32); ok {
			widenBF16s(d, s)
			return nil
		}
	}
	// Other 16-bit floats go through f32.
	if _, ok := src.([]bfloat16.BFloat16); ok {
		src = toF32(src)
	} else if _, ok := src.([]float16.Float16); ok {
		src = toF32(src)
	}
	switch d := dst.(type) {
	case []bfloat16.BFloat16, []float16.Float16:
		tmp := make([]float32, flatLen(dst))
		if err := convertFlat(tmp, src); err != nil {
			return err
		}
		fromF32(d, tmp)
		return nil
	}
	switch s := src.(type) {
	case []float32:
		if d, ok := dst.([]float32); ok {
			copy(d, s)
			return nil
		}
	case []bool:
		// bool converts as 0 and 1.
		u := make([]uint8, len(s))
		for i, v := range s {
			if v {
				u[i] = 1
			}
		}
		src = u
	}
	return convertNumbers(dst, src)
}

func convertLoop[D, S number](dst []D, src []S) {
	for i, v := range src {
		dst[i] = D(v)
	}
}

// arithOf is the kernels.Arith of an f32 operation ArithF32 runs.
func arithOf(op backends.OpType) (kernels.Arith, bool) {
	switch op {
	case backends.OpTypeAdd:
		return kernels.ArithAdd, true
	case backends.OpTypeSub:
		return kernels.ArithSub, true
	case backends.OpTypeMul:
		return kernels.ArithMul, true
	case backends.OpTypeDiv:
		return kernels.ArithDiv, true
	}
	return 0, false
}
