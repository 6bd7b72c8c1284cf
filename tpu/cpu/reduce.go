package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Reductions bring the reduced axes last (with a copy only when they are
// not already last), then reduce each row.
//
// Each row (one output element) is reduced by one goroutine, so results do
// not depend on the thread count; only f32 spreads rows over threads.
// Sums use four accumulators (sumRow), so they differ from a sequential
// sum by rounding. bf16 and f16 are widened and reduced in f32, then
// rounded once (the go backend accumulates bf16 sums in bf16). Max and Min
// propagate NaN.

// reduce adds a reduction over axes (all axes when none are given); the
// node's aux is the axes, sorted.
func (b *Builder) reduce(op backends.OpType, x backends.Op, axes []int) (backends.Op, error) {
	in, err := b.in(op.String(), x)
	if err != nil {
		return nil, err
	}
	if len(axes) == 0 {
		axes = make([]int, in[0].shape.Rank())
		for i := range axes {
			axes[i] = i
		}
	}
	if err := axesOK(op.String(), axes, in[0].shape.Rank()); err != nil {
		return nil, err
	}
	shape, err := shapeinference.ReduceOp(in[0].shape, axes)
	if err != nil {
		return nil, err
	}
	if shape.DType == dtypes.Bool {
		return nil, fmt.Errorf("cpu backend: op %s is not implemented for %s", op, shape.DType)
	}
	n := b.add(op, shape, in, execReduce)
	sorted := slices.Clone(axes)
	slices.Sort(sorted)
	n.aux = sorted
	return n, nil
}

// ReduceSum implements backends.Builder.
func (b *Builder) ReduceSum(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceSum, x, axes)
}

// ReduceMax implements backends.Builder.
func (b *Builder) ReduceMax(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMax, x, axes)
}

// ReduceMin implements backends.Builder.
func (b *Builder) ReduceMin(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMin, x, axes)
}

// ReduceProduct implements backends.Builder.
func (b *Builder) ReduceProduct(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceProduct, x, axes)
}

// rowsLast returns the operand's data arranged as [rows, cols] with the
// given axes last: the data itself when they already are, else a copy.
// rows run over the kept axes in their order, cols over axes in the order
// given (reduce sorts them). When a reduced axis has size 0, cols is 0
// and rows still counts the output elements, each then the op's identity.
func rowsLast(data any, s shapes.Shape, axes []int) (any, int, int) {
	isRed := make([]bool, s.Rank())
	cols := 1
	for _, ax := range axes {
		isRed[ax] = true
		cols *= s.Dimensions[ax]
	}
	rows := 1
	if cols > 0 {
		rows = s.Size() / cols
	} else {
		rows = 1
		for ax, d := range s.Dimensions {
			if !isRed[ax] {
				rows *= d
			}
		}
	}
	var perm []int
	for ax := range s.Dimensions {
		if !isRed[ax] {
			perm = append(perm, ax)
		}
	}
	perm = append(perm, axes...)
	if slices.IsSorted(perm) {
		return data, rows, cols
	}
	is := stridesOf(s.Dimensions)
	dims := make([]int, len(perm))
	ss := make([]int, len(perm))
	for k, p := range perm {
		dims[k], ss[k] = s.Dimensions[p], is[p]
	}
	t := makeFlat(s.DType, s.Size())
	copyWalk(t, data, walk{dims: dims, dStrides: stridesOf(dims), sStrides: ss})
	return t, rows, cols
}

func execReduce(st *execState, n *node, in []*slot) (*slot, error) {
	axes := n.aux.([]int)
	xs := n.inputs[0].shape
	data, rows, cols := rowsLast(in[0].data, xs, axes)
	out := st.alloc(n.shape)
	if is16(xs.DType) {
		tmp := make([]float32, rows)
		reduceRows(n.op, tmp, toF32(data), rows, cols)
		fromF32(out.data, tmp)
		return out, nil
	}
	switch d := data.(type) {
	case []float32:
		o := out.data.([]float32)
		kernels.Parallel(rows, max(1, elemGrain/max(cols, 1)), func(lo, hi int) {
			reduceRows(n.op, o[lo:hi], d[lo*cols:hi*cols], hi-lo, cols)
		})
	case []float64:
		reduceRows(n.op, out.data.([]float64), d, rows, cols)
	case []int8:
		reduceRows(n.op, out.data.([]int8), d, rows, cols)
	case []int16:
		reduceRows(n.op, out.data.([]int16), d, rows, cols)
	case []int32:
		reduceRows(n.op, out.data.([]int32), d, rows, cols)
	case []int64:
		reduceRows(n.op, out.data.([]int64), d, rows, cols)
	case []uint8:
		reduceRows(n.op, out.data.([]uint8), d, rows, cols)
	case []uint16:
		reduceRows(n.op, out.data.([]uint16), d, rows, cols)
	case []uint32:
		reduceRows(n.op, out.data.([]uint32), d, rows, cols)
	case []uint64:
		reduceRows(n.op, out.data.([]uint64), d, rows, cols)
	default:
		return nil, fmt.Errorf("not implemented for %s", xs.DType)
	}
	return out, nil
}

// reduceInit is the identity of the reduction: 0, 1, the lowest or the
// highest value of T (±Inf for floats).
func reduceInit[T number](op backends.OpType) T {
	switch op {
	case backends.OpTypeReduceProduct:
		return 1
	case backends.OpTypeReduceMax:
		return lowest[T]()
	case backends.OpTypeReduceMin:
		return highest[T]()
	}
	return 0
}

// lowest is T's smallest value; 0 for unsigned types (the default case).
func lowest[T number]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(float32(math.Inf(-1))).(T)
	case float64:
		return any(math.Inf(-1)).(T)
	case int8:
		return any(int8(math.MinInt8)).(T)
	case int16:
		return any(int16(math.MinInt16)).(T)
	case int32:
		return any(int32(math.MinInt32)).(T)
	case int64:
		return any(int64(math.MinInt64)).(T)
	}
	return 0
}

func highest[T number]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(float32(math.Inf(1))).(T)
	case float64:
		return any(math.Inf(1)).(T)
	case int8:
		return any(int8(math.MaxInt8)).(T)
	case int16:
		return any(int16(math.MaxInt16)).(T)
	case int32:
		return any(int32(math.MaxInt32)).(T)
	case int64:
		return any(int64(math.MaxInt64)).(T)
	case uint8:
		return any(uint8(math.MaxUint8)).(T)
	case uint16:
		return any(uint16(math.MaxUint16)).(T)
	case uint32:
		return any(uint32(math.MaxUint32)).(T)
	case uint64:
		return any(uint64(math.MaxUint64)).(T)
	}
	return 0
}

// reduceRows reduces each row of x [rows, cols] into out[row]. In Max and
// Min the v != v test makes a NaN win and stay (nothing compares greater
// than NaN); for integers it is always false.
func reduceRows[T number](op backends.OpType, out, x []T, rows, cols int) {
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		acc := reduceInit[T](op)
		switch op {
		case backends.OpTypeReduceSum:
			acc = sumRow(row)
		case backends.OpTypeReduceProduct:
			for _, v := range row {
				acc *= v
			}
		case backends.OpTypeReduceMax:
			for _, v := range row {
				if v > acc || v != v {
					acc = v
				}
			}
		case backends.OpTypeReduceMin:
			for _, v := range row {
				if v < acc || v != v {
					acc = v
				}
			}
		}
		out[r] = acc
	}
}

// sumRow sums with four accumulators (fewer dependent adds, and a little
// better rounding for long rows).
func sumRow[T number](row []T) T {
	var a0, a1, a2, a3 T
	i := 0
	for ; i+4 <= len(row); i += 4 {
		a0 += row[i]
		a1 += row[i+1]
		a2 += row[i+2]
		a3 += row[i+3]
	}
	for ; i < len(row); i++ {
		a0 += row[i]
	}
	return (a0 + a1) + (a2 + a3)
}

// ---- ArgMinMax --------------------------------------------------------------

// argAux is ArgMinMax's aux: the axis to search and which extreme.
type argAux struct {
	axis  int
	isMin bool
}

// ArgMinMax implements backends.Builder.
func (b *Builder) ArgMinMax(x backends.Op, axis int, outputDType dtypes.DType, isMin bool) (backends.Op, error) {
	in, err := b.in("ArgMinMax", x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ArgMinMaxOp(in[0].shape, axis, outputDType)
	if err != nil {
		return nil, err
	}
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	if in[0].shape.DType == dtypes.Bool {
		return nil, fmt.Errorf("cpu backend: ArgMinMax is not implemented for bool")
	}
	n := b.add(backends.OpTypeArgMinMax, shape, in, execArgMinMax)
	n.aux = argAux{axis, isMin}
	return n, nil
}

// execArgMinMax searches rows with the axis last (rowsLast); 16-bit floats
// are searched as f32 and the other dtypes without a typed loop here as
// f64. Indices are found as int64, in the output itself when it is int64,
// else converted to the output dtype.
func execArgMinMax(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(argAux)
	xs := n.inputs[0].shape
	data, rows, cols := rowsLast(in[0].data, xs, []int{a.axis})
	out := st.alloc(n.shape)
	idx, direct := out.data.([]int64)
	if !direct {
		idx = make([]int64, rows)
	}
	switch d := data.(type) {
	case []float32:
		argRows(idx, d, rows, cols, a.isMin)
	case []float64:
		argRows(idx, d, rows, cols, a.isMin)
	case []int32:
		argRows(idx, d, rows, cols, a.isMin)
	case []int64:
		argRows(idx, d, rows, cols, a.isMin)
	default:
		if is16(xs.DType) {
			argRows(idx, toF32(d), rows, cols, a.isMin)
		} else {
			f := make([]float64, flatLen(d))
			if err := convertFlat(f, d); err != nil {
				return nil, err
			}
			argRows(idx, f, rows, cols, a.isMin)
		}
	}
	if !direct {
		if err := convertFlat(out.data, idx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ArgMinMax spreads over threads from argParallelMin elements: rows go
// to threads in chunks of about argGrain elements, and when the rows are
// few and do not divide evenly among the threads (a single row: batch-1
// greedy sampling) each row is cut into up to Threads() segments of at
// least argSegMin elements, searched apart and then combined.
const (
	argParallelMin = 1 << 14
	argGrain       = 1 << 14
	argSegMin      = 1 << 13
)

// argRows sets idx[r] to the index of the first extreme value (the max,
// or the min when isMin) of row r of x [rows, cols]; a NaN wins, the first
// one when there are several. An empty row gives 0. The result does not
// depend on the thread count.
func argRows[T number](idx []int64, x []T, rows, cols int, isMin bool) {
	idx = idx[:rows]
	if cols <= 1 {
		clear(idx)
		return
	}
	search := argMaxRow[T]
	if isMin {
		search = argMinRow[T]
	}
	t := kernels.Threads()
	if t <= 1 || rows*cols < argParallelMin {
		for r := range idx {
			i, _ := search(x[r*cols : (r+1)*cols])
			idx[r] = int64(i)
		}
		return
	}
	segs := 1
	if rows%t != 0 && rows < 4*t {
		segs = min(t, cols/argSegMin)
	}
	if segs <= 1 {
		kernels.Parallel(rows, max(1, argGrain/cols), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				i, _ := search(x[r*cols : (r+1)*cols])
				idx[r] = int64(i)
			}
		})
		return
	}
	// Few long rows: search segments of each row apart, then take per row
	// the first segment's NaN, else its best value, the earlier segment on
	// ties.
	seg := (cols + segs - 1) / segs
	type found struct {
		i   int // index in the row
		nan bool
	}
	res := make([]found, rows*segs)
	kernels.Parallel(rows*segs, 1, func(lo, hi int) {
		for u := lo; u < hi; u++ {
			r, s := u/segs, u%segs
			a, b := min(s*seg, cols), min((s+1)*seg, cols)
			i, nan := search(x[r*cols+a : r*cols+b])
			res[u] = found{a + i, nan}
		}
	})
	for r := range idx {
		row := x[r*cols : (r+1)*cols]
		best := res[r*segs]
		for _, f := range res[r*segs+1 : (r+1)*segs] {
			if best.nan {
				break
			}
			if f.nan || (isMin && row[f.i] < row[best.i]) || (!isMin && row[f.i] > row[best.i]) {
				best = f
			}
		}
		idx[r] = int64(best.i)
	}
}

// argMaxRow returns the index of row's first max, or of its first NaN
// (nan then true); 0 for an empty row. It keeps the best value so far in
// m and tests blocks of 8 elements against it: !(v <= m) is true for a
// greater v and for a NaN, so the block is searched element by element
// only when it holds a new max or a NaN, which is rare after the start of
// a row. That search goes in order and takes only a strictly greater
// value, and a NaN at once, so the first max (or NaN) is found.
func argMaxRow[T number](row []T) (int, bool) {
	if len(row) == 0 {
		return 0, false
	}
	m := row[0]
	if m != m {
		return 0, true
	}
	best, i := 0, 0
	for rest := row; len(rest) >= 8; rest = rest[8:] {
		s := (*[8]T)(rest)
		if !(s[0] <= m) || !(s[1] <= m) || !(s[2] <= m) || !(s[3] <= m) ||
			!(s[4] <= m) || !(s[5] <= m) || !(s[6] <= m) || !(s[7] <= m) {
			for k, v := range s {
				if !(v <= m) {
					if v != v {
						return i + k, true
					}
					m, best = v, i+k
				}
			}
		}
		i += 8
	}
	for k, v := range row[i:] {
		if !(v <= m) {
			if v != v {
				return i + k, true
			}
			m, best = v, i+k
		}
	}
	return best, false
}

// argMinRow is argMaxRow for the first min.
func argMinRow[T number](row []T) (int, bool) {
	if len(row) == 0 {
		return 0, false
	}
	m := row[0]
	if m != m {
		return 0, true
	}
	best, i := 0, 0
	for rest := row; len(rest) >= 8; rest = rest[8:] {
		s := (*[8]T)(rest)
		if !(s[0] >= m) || !(s[1] >= m) || !(s[2] >= m) || !(s[3] >= m) ||
			!(s[4] >= m) || !(s[5] >= m) || !(s[6] >= m) || !(s[7] >= m) {
			for k, v := range s {
				if !(v >= m) {
					if v != v {
						return i + k, true
					}
					m, best = v, i+k
				}
			}
		}
		i += 8
	}
	for k, v := range row[i:] {
		if !(v >= m) {
			if v != v {
				return i + k, true
			}
			m, best = v, i+k
		}
	}
	return best, false
}
