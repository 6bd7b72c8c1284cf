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

func reflectElem(flat any) reflect.Type { return reflect.TypeOf(flat).Elem() }

// elemGrain is the smallest piece of an elementwise pass worth a thread.
const elemGrain = 1 << 14

var unaryOps = []backends.OpType{
	backends.OpTypeAbs, backends.OpTypeNeg, backends.OpTypeSign, backends.OpTypeExp, backends.OpTypeExpm1,
	backends.OpTypeLog, backends.OpTypeLog1p, backends.OpTypeSqrt, backends.OpTypeRsqrt, backends.OpTypeTanh,
	backends.OpTypeLogistic, backends.OpTypeSin, backends.OpTypeCos, backends.OpTypeErf, backends.OpTypeFloor,
	backends.OpTypeCeil, backends.OpTypeRound, backends.OpTypeLogicalNot,
}

var binaryOps = []backends.OpType{
	backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul, backends.OpTypeDiv, backends.OpTypeMax,
	backends.OpTypeMin, backends.OpTypePow, backends.OpTypeRem, backends.OpTypeLogicalAnd,
	backends.OpTypeLogicalOr, backends.OpTypeLogicalXor,
}

var compareOps = []backends.OpType{
	backends.OpTypeEqual, backends.OpTypeNotEqual, backends.OpTypeLessThan, backends.OpTypeLessOrEqual,
	backends.OpTypeGreaterThan, backends.OpTypeGreaterOrEqual,
}

// number is the set of Go types the generic loops run on; bf16 and f16
// are computed in f32.
type number interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

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
	return b.add(op, shape, in, execBinary), nil
}

func isCompare(op backends.OpType) bool {
	for _, c := range compareOps {
		if c == op {
			return true
		}
	}
	return false
}

// Abs implements backends.Builder.
func (b *Builder) Abs(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeAbs, x) }

// Neg implements backends.Builder.
func (b *Builder) Neg(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeNeg, x) }

// Sign implements backends.Builder.
func (b *Builder) Sign(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSign, x) }

// Exp implements backends.Builder.
func (b *Builder) Exp(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeExp, x) }

// Expm1 implements backends.Builder.
func (b *Builder) Expm1(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeExpm1, x) }

// Log implements backends.Builder.
func (b *Builder) Log(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeLog, x) }

// Log1p implements backends.Builder.
func (b *Builder) Log1p(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeLog1p, x) }

// Sqrt implements backends.Builder.
func (b *Builder) Sqrt(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSqrt, x) }

// Rsqrt implements backends.Builder.
func (b *Builder) Rsqrt(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeRsqrt, x) }

// Tanh implements backends.Builder.
func (b *Builder) Tanh(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeTanh, x) }

// Logistic implements backends.Builder.
func (b *Builder) Logistic(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogistic, x)
}

// Sin implements backends.Builder.
func (b *Builder) Sin(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSin, x) }

// Cos implements backends.Builder.
func (b *Builder) Cos(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeCos, x) }

// Erf implements backends.Builder.
func (b *Builder) Erf(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeErf, x) }

// Floor implements backends.Builder.
func (b *Builder) Floor(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeFloor, x) }

// Ceil implements backends.Builder.
func (b *Builder) Ceil(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeCeil, x) }

// Round implements backends.Builder.
func (b *Builder) Round(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeRound, x) }

// LogicalNot implements backends.Builder.
func (b *Builder) LogicalNot(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogicalNot, x)
}

// Add implements backends.Builder.
func (b *Builder) Add(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeAdd, l, r)
}

// Sub implements backends.Builder.
func (b *Builder) Sub(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeSub, l, r)
}

// Mul implements backends.Builder.
func (b *Builder) Mul(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMul, l, r)
}

// Div implements backends.Builder.
func (b *Builder) Div(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeDiv, l, r)
}

// Max implements backends.Builder.
func (b *Builder) Max(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMax, l, r)
}

// Min implements backends.Builder.
func (b *Builder) Min(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMin, l, r)
}

// Pow implements backends.Builder.
func (b *Builder) Pow(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypePow, l, r)
}

// Rem implements backends.Builder.
func (b *Builder) Rem(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeRem, l, r)
}

// LogicalAnd implements backends.Builder.
func (b *Builder) LogicalAnd(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalAnd, l, r)
}

// LogicalOr implements backends.Builder.
func (b *Builder) LogicalOr(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalOr, l, r)
}

// LogicalXor implements backends.Builder.
func (b *Builder) LogicalXor(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalXor, l, r)
}

// Equal implements backends.Builder.
func (b *Builder) Equal(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeEqual, l, r)
}

// NotEqual implements backends.Builder.
func (b *Builder) NotEqual(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeNotEqual, l, r)
}

// LessThan implements backends.Builder.
func (b *Builder) LessThan(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessThan, l, r)
}

// LessOrEqual implements backends.Builder.
func (b *Builder) LessOrEqual(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLessOrEqual, l, r)
}

// GreaterThan implements backends.Builder.
func (b *Builder) GreaterThan(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterThan, l, r)
}

// GreaterOrEqual implements backends.Builder.
func (b *Builder) GreaterOrEqual(l, r backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeGreaterOrEqual, l, r)
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

// ---- f32 views of 16-bit floats --------------------------------------------

// toF32 returns the values of a float slice as f32: the slice itself for
// f32, a converted copy for bf16 and f16.
func toF32(flat any) []float32 {
	switch f := flat.(type) {
	case []float32:
		return f
	case []bfloat16.BFloat16:
		out := make([]float32, len(f))
		for i, v := range f {
			out[i] = v.Float32()
		}
		return out
	case []float16.Float16:
		out := make([]float32, len(f))
		for i, v := range f {
			out[i] = v.Float32()
		}
		return out
	}
	panic(fmt.Sprintf("toF32: %T", flat))
}

// fromF32 writes f32 values into a bf16, f16 or f32 slice.
func fromF32(dst any, src []float32) {
	switch d := dst.(type) {
	case []float32:
		copy(d, src)
	case []bfloat16.BFloat16:
		for i, v := range src {
			d[i] = bfloat16.FromFloat32(v)
		}
	case []float16.Float16:
		for i, v := range src {
			d[i] = float16.Fromfloat32(v)
		}
	default:
		panic(fmt.Sprintf("fromF32: %T", dst))
	}
}

func is16(dt dtypes.DType) bool { return dt == dtypes.BFloat16 || dt == dtypes.Float16 }

// ---- unary ------------------------------------------------------------------

func execUnary(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.allocOrReuse(n, 0)
	dt := n.shape.DType
	switch {
	case dt == dtypes.Bool:
		x, o := in[0].data.([]bool), out.data.([]bool)
		for i, v := range x {
			o[i] = !v
		}
	case is16(dt):
		tmp := toF32(in[0].data)
		unaryFloat(n.op, tmp, tmp)
		fromF32(out.data, tmp)
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
	case []int8:
		unaryInt(op, dst.([]int8), s)
	case []int16:
		unaryInt(op, dst.([]int16), s)
	case []int32:
		unaryInt(op, dst.([]int32), s)
	case []int64:
		unaryInt(op, dst.([]int64), s)
	default:
		return false
	}
	return true
}

func unaryInt[T int8 | int16 | int32 | int64](op backends.OpType, dst, src []T) {
	for i, v := range src {
		switch op {
		case backends.OpTypeAbs:
			if v < 0 {
				v = -v
			}
		case backends.OpTypeNeg:
			v = -v
		case backends.OpTypeSign:
			switch {
			case v > 0:
				v = 1
			case v < 0:
				v = -1
			}
		}
		dst[i] = v
	}
}

func unaryFloat[T float32 | float64](op backends.OpType, dst, src []T) {
	dst = dst[:len(src)]
	if d, ok := any(dst).([]float32); ok {
		s := any(src).([]float32)
		switch op {
		case backends.OpTypeExp:
			for i, v := range s {
				d[i] = expf(v)
			}
			return
		case backends.OpTypeLogistic:
			for i, v := range s {
				d[i] = logisticf(v)
			}
			return
		case backends.OpTypeErf:
			for i, v := range s {
				d[i] = erff(v)
			}
			return
		}
	}
	switch op {
	case backends.OpTypeNeg:
		for i, v := range src {
			dst[i] = -v
		}
	case backends.OpTypeAbs:
		for i, v := range src {
			dst[i] = T(math.Abs(float64(v)))
		}
	case backends.OpTypeSign:
		for i, v := range src {
			switch {
			case v > 0:
				dst[i] = 1
			case v < 0:
				dst[i] = -1
			default:
				dst[i] = v // 0, -0 and NaN
			}
		}
	case backends.OpTypeExp:
		for i, v := range src {
			dst[i] = T(math.Exp(float64(v)))
		}
	case backends.OpTypeExpm1:
		for i, v := range src {
			dst[i] = T(math.Expm1(float64(v)))
		}
	case backends.OpTypeLog:
		for i, v := range src {
			dst[i] = T(math.Log(float64(v)))
		}
	case backends.OpTypeLog1p:
		for i, v := range src {
			dst[i] = T(math.Log1p(float64(v)))
		}
	case backends.OpTypeSqrt:
		for i, v := range src {
			dst[i] = T(math.Sqrt(float64(v)))
		}
	case backends.OpTypeRsqrt:
		for i, v := range src {
			dst[i] = T(1 / math.Sqrt(float64(v)))
		}
	case backends.OpTypeTanh:
		for i, v := range src {
			dst[i] = T(math.Tanh(float64(v)))
		}
	case backends.OpTypeLogistic:
		for i, v := range src {
			dst[i] = T(logistic(float64(v)))
		}
	case backends.OpTypeSin:
		for i, v := range src {
			dst[i] = T(math.Sin(float64(v)))
		}
	case backends.OpTypeCos:
		for i, v := range src {
			dst[i] = T(math.Cos(float64(v)))
		}
	case backends.OpTypeErf:
		for i, v := range src {
			dst[i] = T(math.Erf(float64(v)))
		}
	case backends.OpTypeFloor:
		for i, v := range src {
			dst[i] = T(math.Floor(float64(v)))
		}
	case backends.OpTypeCeil:
		for i, v := range src {
			dst[i] = T(math.Ceil(float64(v)))
		}
	case backends.OpTypeRound:
		for i, v := range src {
			dst[i] = T(math.Round(float64(v)))
		}
	default:
		panic(fmt.Sprintf("unaryFloat: op %s", op))
	}
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
		a := expandAny(in[0].data, ls, n.shape)
		c := expandAny(in[1].data, rs, n.shape)
		if !binaryDispatch(n.op, out.data, a, c) {
			return nil, fmt.Errorf("not implemented for %s", ls.DType)
		}
		return out, nil
	}
	p := makeBPlan(n.shape, ls, rs)
	a, c := in[0].data, in[1].data
	if is16(ls.DType) {
		af, cf := toF32(a), toF32(c)
		if isCompare(n.op) {
			binaryPlanned(n.op, p, out.data, af, cf)
			return out, nil
		}
		tmp := make([]float32, n.shape.Size())
		binaryPlanned(n.op, p, tmp, af, cf)
		fromF32(out.data, tmp)
		return out, nil
	}
	switch a := a.(type) {
	case []float32:
		binaryPlanned(n.op, p, out.data, a, c.([]float32))
	case []float64:
		binaryPlanned(n.op, p, out.data, a, c.([]float64))
	case []int8:
		binaryPlanned(n.op, p, out.data, a, c.([]int8))
	case []int16:
		binaryPlanned(n.op, p, out.data, a, c.([]int16))
	case []int32:
		binaryPlanned(n.op, p, out.data, a, c.([]int32))
	case []int64:
		binaryPlanned(n.op, p, out.data, a, c.([]int64))
	case []uint8:
		binaryPlanned(n.op, p, out.data, a, c.([]uint8))
	case []uint16:
		binaryPlanned(n.op, p, out.data, a, c.([]uint16))
	case []uint32:
		binaryPlanned(n.op, p, out.data, a, c.([]uint32))
	case []uint64:
		binaryPlanned(n.op, p, out.data, a, c.([]uint64))
	default:
		return nil, fmt.Errorf("not implemented for %s", ls.DType)
	}
	return out, nil
}

// binaryDispatch runs the bool ops on operands already at the output's
// size (or one element).
func binaryDispatch(op backends.OpType, dst, a, c any) bool {
	switch a := a.(type) {
	case []bool:
		d, cc := dst.([]bool), c.([]bool)
		n := len(d)
		for i := 0; i < n; i++ {
			x, y := a[min(i, len(a)-1)], cc[min(i, len(cc)-1)]
			switch op {
			case backends.OpTypeLogicalAnd:
				d[i] = x && y
			case backends.OpTypeLogicalOr:
				d[i] = x || y
			case backends.OpTypeLogicalXor, backends.OpTypeNotEqual:
				d[i] = x != y
			case backends.OpTypeEqual:
				d[i] = x == y
			default:
				return false
			}
		}
		return true
	}
	return false
}

// binaryLoop computes dst = a op c; a or c may have one element (scalar).
func binaryLoop[T number](op backends.OpType, dst, a, c []T) {
	n := len(dst)
	switch {
	case len(a) == n && len(c) == n:
		a, c = a[:n], c[:n]
		switch op {
		case backends.OpTypeAdd:
			for i := range dst {
				x, y := a[i], c[i]
				dst[i] = x + y
			}
			return
		case backends.OpTypeSub:
			for i := range dst {
				x, y := a[i], c[i]
				dst[i] = x - y
			}
			return
		case backends.OpTypeMul:
			for i := range dst {
				x, y := a[i], c[i]
				dst[i] = x * y
			}
			return
		case backends.OpTypeMax:
			for i := range dst {
				x, y := a[i], c[i]
				dst[i] = max(x, y)
			}
			return
		case backends.OpTypeMin:
			for i := range dst {
				x, y := a[i], c[i]
				dst[i] = min(x, y)
			}
			return
		case backends.OpTypeDiv:
			if !isIntType[T]() {
				for i := range dst {
					dst[i] = a[i] / c[i]
				}
				return
			}
		}
	case len(c) == 1 && len(a) == n:
		y := c[0]
		switch op {
		case backends.OpTypeAdd:
			for i, x := range a {
				dst[i] = x + y
			}
			return
		case backends.OpTypeSub:
			for i, x := range a {
				dst[i] = x - y
			}
			return
		case backends.OpTypeMul:
			for i, x := range a {
				dst[i] = x * y
			}
			return
		case backends.OpTypeMax:
			for i, x := range a {
				dst[i] = max(x, y)
			}
			return
		case backends.OpTypeMin:
			for i, x := range a {
				dst[i] = min(x, y)
			}
			return
		case backends.OpTypeDiv:
			if !isIntType[T]() {
				for i, x := range a {
					dst[i] = x / y
				}
				return
			}
		}
	case len(a) == 1 && len(c) == n:
		x := a[0]
		switch op {
		case backends.OpTypeAdd:
			for i, y := range c {
				dst[i] = x + y
			}
			return
		case backends.OpTypeSub:
			for i, y := range c {
				dst[i] = x - y
			}
			return
		case backends.OpTypeMul:
			for i, y := range c {
				dst[i] = x * y
			}
			return
		case backends.OpTypeMax:
			for i, y := range c {
				dst[i] = max(x, y)
			}
			return
		case backends.OpTypeMin:
			for i, y := range c {
				dst[i] = min(x, y)
			}
			return
		case backends.OpTypeDiv:
			if !isIntType[T]() {
				for i, y := range c {
					dst[i] = x / y
				}
				return
			}
		}
	}
	am, cm := len(a) == 1, len(c) == 1
	for i := range dst {
		var x, y T
		if am {
			x = a[0]
		} else {
			x = a[i]
		}
		if cm {
			y = c[0]
		} else {
			y = c[i]
		}
		dst[i] = binaryScalar(op, x, y)
	}
}

func binaryScalar[T number](op backends.OpType, x, y T) T {
	switch op {
	case backends.OpTypeAdd:
		return x + y
	case backends.OpTypeSub:
		return x - y
	case backends.OpTypeMul:
		return x * y
	case backends.OpTypeDiv:
		if isIntType[T]() && y == 0 {
			return 0
		}
		return x / y
	case backends.OpTypeMax:
		return max(x, y)
	case backends.OpTypeMin:
		return min(x, y)
	case backends.OpTypePow:
		if isIntType[T]() {
			return intPow(x, y)
		}
		return T(math.Pow(float64(x), float64(y)))
	case backends.OpTypeRem:
		if isIntType[T]() {
			if y == 0 {
				return 0
			}
			return intRem(x, y)
		}
		return T(math.Mod(float64(x), float64(y)))
	}
	panic(fmt.Sprintf("binary op %s", op))
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

func intRem[T number](x, y T) T {
	switch v := any(x).(type) {
	case int8:
		return T(v % any(y).(int8))
	case int16:
		return T(v % any(y).(int16))
	case int32:
		return T(v % any(y).(int32))
	case int64:
		return T(v % any(y).(int64))
	case uint8:
		return T(v % any(y).(uint8))
	case uint16:
		return T(v % any(y).(uint16))
	case uint32:
		return T(v % any(y).(uint32))
	case uint64:
		return T(v % any(y).(uint64))
	}
	return 0
}

func compareLoop[T number](op backends.OpType, dst []bool, a, c []T) {
	am, cm := len(a) == 1, len(c) == 1
	for i := range dst {
		var x, y T
		if am {
			x = a[0]
		} else {
			x = a[i]
		}
		if cm {
			y = c[0]
		} else {
			y = c[i]
		}
		var r bool
		switch op {
		case backends.OpTypeEqual:
			r = x == y
		case backends.OpTypeNotEqual:
			r = x != y
		case backends.OpTypeLessThan:
			r = x < y
		case backends.OpTypeLessOrEqual:
			r = x <= y
		case backends.OpTypeGreaterThan:
			r = x > y
		case backends.OpTypeGreaterOrEqual:
			r = x >= y
		}
		dst[i] = r
	}
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
	ov, tv, fv := reflect.ValueOf(out.data), reflect.ValueOf(t), reflect.ValueOf(f)
	size := n.shape.Size()
	switch o := out.data.(type) {
	case []float32:
		whereLoop(o, cond, t.([]float32), f.([]float32))
	case []int32:
		whereLoop(o, cond, t.([]int32), f.([]int32))
	case []int64:
		whereLoop(o, cond, t.([]int64), f.([]int64))
	case []bool:
		whereLoop(o, cond, t.([]bool), f.([]bool))
	default:
		for i := 0; i < size; i++ {
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

func whereLoop[T any](dst []T, cond []bool, t, f []T) {
	cm, tm, fm := len(cond) == 1, len(t) == 1, len(f) == 1
	for i := range dst {
		c := cond[0]
		if !cm {
			c = cond[i]
		}
		if c {
			if tm {
				dst[i] = t[0]
			} else {
				dst[i] = t[i]
			}
		} else {
			if fm {
				dst[i] = f[0]
			} else {
				dst[i] = f[i]
			}
		}
	}
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
	// 16-bit floats go through f32.
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
		return convertFrom(dst, s)
	case []float64:
		return convertFrom(dst, s)
	case []int8:
		return convertFrom(dst, s)
	case []int16:
		return convertFrom(dst, s)
	case []int32:
		return convertFrom(dst, s)
	case []int64:
		return convertFrom(dst, s)
	case []uint8:
		return convertFrom(dst, s)
	case []uint16:
		return convertFrom(dst, s)
	case []uint32:
		return convertFrom(dst, s)
	case []uint64:
		return convertFrom(dst, s)
	case []bool:
		u := make([]uint8, len(s))
		for i, v := range s {
			if v {
				u[i] = 1
			}
		}
		return convertFrom(dst, u)
	}
	return fmt.Errorf("ConvertDType from %T is not implemented", src)
}

func convertFrom[S number](dst any, src []S) error {
	switch d := dst.(type) {
	case []float32:
		convertLoop(d, src)
	case []float64:
		convertLoop(d, src)
	case []int8:
		convertLoop(d, src)
	case []int16:
		convertLoop(d, src)
	case []int32:
		convertLoop(d, src)
	case []int64:
		convertLoop(d, src)
	case []uint8:
		convertLoop(d, src)
	case []uint16:
		convertLoop(d, src)
	case []uint32:
		convertLoop(d, src)
	case []uint64:
		convertLoop(d, src)
	case []bool:
		for i, v := range src {
			d[i] = v != 0
		}
	default:
		return fmt.Errorf("ConvertDType to %T is not implemented", dst)
	}
	return nil
}

func convertLoop[D, S number](dst []D, src []S) {
	for i, v := range src {
		dst[i] = D(v)
	}
}
