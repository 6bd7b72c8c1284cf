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

// bcast describes how an operand maps onto the output of a broadcasting
// elementwise op: scalar, same shape, or strided with zero strides on
// axes of size 1.
type bcast struct {
	scalar, same bool
	strides      []int
}

func makeBcast(in, out shapes.Shape) bcast {
	if in.Size() == 1 && out.Size() != 1 || in.IsScalar() {
		return bcast{scalar: true}
	}
	if in.Size() == out.Size() {
		return bcast{same: true}
	}
	strides := make([]int, out.Rank())
	s := 1
	for ax := out.Rank() - 1; ax >= 0; ax-- {
		if in.Dimensions[ax] != 1 {
			strides[ax] = s
		}
		s *= in.Dimensions[ax]
	}
	return bcast{strides: strides}
}

// index maps a flat output index to the operand's flat index.
func (b bcast) index(i int, dims []int) int {
	if b.scalar {
		return 0
	}
	if b.same {
		return i
	}
	off := 0
	for ax := len(dims) - 1; ax >= 0; ax-- {
		off += (i % dims[ax]) * b.strides[ax]
		i /= dims[ax]
	}
	return off
}

// expand materializes an operand at the output's shape (the rare general
// broadcast case), returning a flat slice of the output's size.
func expand[T any](src []T, in, out shapes.Shape) []T {
	b := makeBcast(in, out)
	if b.same {
		return src
	}
	dst := make([]T, out.Size())
	for i := range dst {
		dst[i] = src[b.index(i, out.Dimensions)]
	}
	return dst
}

func expandAny(src any, in, out shapes.Shape) any {
	b := makeBcast(in, out)
	if b.same || b.scalar {
		return src
	}
	switch s := src.(type) {
	case []float32:
		return expand(s, in, out)
	case []float64:
		return expand(s, in, out)
	case []bfloat16.BFloat16:
		return expand(s, in, out)
	case []float16.Float16:
		return expand(s, in, out)
	case []int8:
		return expand(s, in, out)
	case []int16:
		return expand(s, in, out)
	case []int32:
		return expand(s, in, out)
	case []int64:
		return expand(s, in, out)
	case []uint8:
		return expand(s, in, out)
	case []uint16:
		return expand(s, in, out)
	case []uint32:
		return expand(s, in, out)
	case []uint64:
		return expand(s, in, out)
	case []bool:
		return expand(s, in, out)
	}
	panic(fmt.Sprintf("expand: %T", src))
}

// ---- binary -----------------------------------------------------------------

func execBinary(st *execState, n *node, in []*slot) (*slot, error) {
	ls, rs := n.inputs[0].shape, n.inputs[1].shape
	a := expandAny(in[0].data, ls, n.shape)
	c := expandAny(in[1].data, rs, n.shape)
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
	size := n.shape.Size()
	if is16(ls.DType) {
		af, cf := toF32(a), toF32(c)
		if isCompare(n.op) {
			compareLoop(n.op, out.data.([]bool), af, cf)
			return out, nil
		}
		tmp := make([]float32, size)
		binaryLoop(n.op, tmp, af, cf)
		fromF32(out.data, tmp)
		return out, nil
	}
	if !binaryDispatch(n.op, out.data, a, c) {
		return nil, fmt.Errorf("not implemented for %s", ls.DType)
	}
	return out, nil
}

func binaryDispatch(op backends.OpType, dst, a, c any) bool {
	cmp := isCompare(op)
	switch a := a.(type) {
	case []float32:
		if cmp {
			compareLoop(op, dst.([]bool), a, c.([]float32))
			return true
		}
		d, cc := dst.([]float32), c.([]float32)
		kernels.Parallel(len(d), elemGrain, func(lo, hi int) {
			binaryLoop(op, d[lo:hi], sub(a, lo, hi), sub(cc, lo, hi))
		})
		return true
	case []float64:
		return binaryTyped(op, dst, a, c.([]float64))
	case []int8:
		return binaryTyped(op, dst, a, c.([]int8))
	case []int16:
		return binaryTyped(op, dst, a, c.([]int16))
	case []int32:
		return binaryTyped(op, dst, a, c.([]int32))
	case []int64:
		return binaryTyped(op, dst, a, c.([]int64))
	case []uint8:
		return binaryTyped(op, dst, a, c.([]uint8))
	case []uint16:
		return binaryTyped(op, dst, a, c.([]uint16))
	case []uint32:
		return binaryTyped(op, dst, a, c.([]uint32))
	case []uint64:
		return binaryTyped(op, dst, a, c.([]uint64))
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

// sub is x[lo:hi], or x itself for a one-element (scalar) operand.
func sub[T any](x []T, lo, hi int) []T {
	if len(x) == 1 {
		return x
	}
	return x[lo:hi]
}

func binaryTyped[T number](op backends.OpType, dst any, a, c []T) bool {
	if isCompare(op) {
		compareLoop(op, dst.([]bool), a, c)
		return true
	}
	binaryLoop(op, dst.([]T), a, c)
	return true
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
				dst[i] = a[i] + c[i]
			}
			return
		case backends.OpTypeSub:
			for i := range dst {
				dst[i] = a[i] - c[i]
			}
			return
		case backends.OpTypeMul:
			for i := range dst {
				dst[i] = a[i] * c[i]
			}
			return
		}
	case len(c) == 1 && len(a) == n:
		y := c[0]
		switch op {
		case backends.OpTypeAdd:
			for i, x := range a {
				dst[i] = x + y
			}
			return
		case backends.OpTypeMul:
			for i, x := range a {
				dst[i] = x * y
			}
			return
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
