package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Shape ops move data with strided copies (layout.go) and so work for
// every dtype. Each exec function below walks the output (or, for
// Concatenate, Pad and DynamicUpdateSlice, the part of it an operand
// fills) in row-major order and says where each index reads in the
// input: a base offset and one stride per output axis.

// ---- Transpose ----------------------------------------------------------

// Transpose implements backends.Builder.
func (b *Builder) Transpose(x backends.Op, perm ...int) (backends.Op, error) {
	in, err := b.in("Transpose", x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.TransposeOp(in[0].shape, perm)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeTranspose, shape, in, execTranspose)
	n.aux = append([]int(nil), perm...)
	return n, nil
}

// execTranspose: output axis ax is input axis perm[ax], so it steps by
// that axis's input stride.
func execTranspose(st *execState, n *node, in []*slot) (*slot, error) {
	perm := n.aux.([]int)
	out := st.alloc(n.shape)
	is := stridesOf(n.inputs[0].shape.Dimensions)
	ss := make([]int, len(perm))
	for ax, p := range perm {
		ss[ax] = is[p]
	}
	copyWalk(out.data, in[0].data, walk{dims: n.shape.Dimensions, dStrides: stridesOf(n.shape.Dimensions), sStrides: ss})
	return out, nil
}

// ---- BroadcastInDim -----------------------------------------------------

// BroadcastInDim implements backends.Builder.
func (b *Builder) BroadcastInDim(x backends.Op, outputShape shapes.Shape, axes []int) (backends.Op, error) {
	in, err := b.in("BroadcastInDim", x)
	if err != nil {
		return nil, err
	}
	if err := shapeinference.BroadcastInDimOp(in[0].shape, outputShape, axes); err != nil {
		return nil, err
	}
	shape := outputShape.Clone()
	shape.DType = in[0].shape.DType
	n := b.add(backends.OpTypeBroadcastInDim, shape, in, execBroadcastInDim)
	n.aux = append([]int(nil), axes...)
	return n, nil
}

// execBroadcastInDim: input axis k is output axis axes[k]; output axes
// that no input axis maps to, and those an input axis of size 1 maps to,
// read with stride 0 (the value repeats).
func execBroadcastInDim(st *execState, n *node, in []*slot) (*slot, error) {
	axes := n.aux.([]int)
	out := st.alloc(n.shape)
	ishape := n.inputs[0].shape
	is := stridesOf(ishape.Dimensions)
	ss := make([]int, n.shape.Rank())
	for k, ax := range axes {
		if ishape.Dimensions[k] != 1 {
			ss[ax] = is[k]
		}
	}
	copyWalk(out.data, in[0].data, walk{dims: n.shape.Dimensions, dStrides: stridesOf(n.shape.Dimensions), sStrides: ss})
	return out, nil
}

// ---- Slice --------------------------------------------------------------

// sliceAux is Slice's aux; the limits are in the node's shape.
type sliceAux struct{ starts, strides []int }

// Slice implements backends.Builder.
func (b *Builder) Slice(x backends.Op, starts, limits, strides []int) (backends.Op, error) {
	in, err := b.in("Slice", x)
	if err != nil {
		return nil, err
	}
	if strides == nil {
		strides = make([]int, len(starts))
		for i := range strides {
			strides[i] = 1
		}
	}
	shape, err := shapeinference.SliceOp(in[0].shape, starts, limits, strides)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeSlice, shape, in, execSlice)
	n.aux = sliceAux{append([]int(nil), starts...), append([]int(nil), strides...)}
	return n, nil
}

// execSlice: the walk starts at the starts' offset and steps by the
// input strides times the slice strides.
func execSlice(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(sliceAux)
	out := st.alloc(n.shape)
	is := stridesOf(n.inputs[0].shape.Dimensions)
	ss := make([]int, len(is))
	base := 0
	for ax := range is {
		ss[ax] = is[ax] * a.strides[ax]
		base += is[ax] * a.starts[ax]
	}
	copyWalk(out.data, in[0].data, walk{dims: n.shape.Dimensions, dStrides: stridesOf(n.shape.Dimensions), sStrides: ss, sBase: base})
	return out, nil
}

// ---- Reverse ------------------------------------------------------------

// Reverse implements backends.Builder.
func (b *Builder) Reverse(x backends.Op, axes ...int) (backends.Op, error) {
	in, err := b.in("Reverse", x)
	if err != nil {
		return nil, err
	}
	if err := axesOK("Reverse", axes, in[0].shape.Rank()); err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeReverse, in[0].shape, in, execReverse)
	n.aux = append([]int(nil), axes...)
	return n, nil
}

// execReverse: a reversed axis starts at its last element and steps by
// the negated stride.
func execReverse(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.alloc(n.shape)
	dims := n.shape.Dimensions
	ss := stridesOf(dims)
	base := 0
	for _, ax := range n.aux.([]int) {
		base += (dims[ax] - 1) * ss[ax]
		ss[ax] = -ss[ax]
	}
	copyWalk(out.data, in[0].data, walk{dims: dims, dStrides: stridesOf(dims), sStrides: ss, sBase: base})
	return out, nil
}

// ---- Concatenate --------------------------------------------------------

// Concatenate implements backends.Builder.
func (b *Builder) Concatenate(axis int, operands ...backends.Op) (backends.Op, error) {
	in, err := b.in("Concatenate", operands...)
	if err != nil {
		return nil, err
	}
	ss := make([]shapes.Shape, len(in))
	for i, x := range in {
		ss[i] = x.shape
	}
	shape, err := shapeinference.ConcatenateOp(ss, axis)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeConcatenate, shape, in, execConcatenate)
	n.aux = axis
	return n, nil
}

// execConcatenate copies each operand whole into the output, with the
// output's strides, at its offset along axis.
func execConcatenate(st *execState, n *node, in []*slot) (*slot, error) {
	axis := n.aux.(int)
	out := st.alloc(n.shape)
	os := stridesOf(n.shape.Dimensions)
	off := 0
	for k, x := range n.inputs {
		copyWalk(out.data, in[k].data, walk{dims: x.shape.Dimensions, dStrides: os, sStrides: stridesOf(x.shape.Dimensions), dBase: off * os[axis]})
		off += x.shape.Dimensions[axis]
	}
	return out, nil
}

// ---- Pad ----------------------------------------------------------------

// Pad implements backends.Builder.
func (b *Builder) Pad(x, fill backends.Op, cfg ...backends.PadAxis) (backends.Op, error) {
	in, err := b.in("Pad", x, fill)
	if err != nil {
		return nil, err
	}
	xs := in[0].shape
	if !in[1].shape.IsScalar() || in[1].shape.DType != xs.DType {
		return nil, fmt.Errorf("cpu backend: Pad: fill value must be a %s scalar, got %s", xs.DType, in[1].shape)
	}
	if len(cfg) > xs.Rank() {
		return nil, fmt.Errorf("cpu backend: Pad: %d axes configured for rank %d", len(cfg), xs.Rank())
	}
	full := make([]backends.PadAxis, xs.Rank())
	copy(full, cfg)
	shape := xs.Clone()
	for ax, p := range full {
		d := xs.Dimensions[ax]
		if p.Interior < 0 {
			return nil, fmt.Errorf("cpu backend: Pad: negative interior padding on axis %d", ax)
		}
		size := p.Start + p.End + d
		if d > 0 {
			size += (d - 1) * p.Interior
		}
		if size < 0 {
			return nil, fmt.Errorf("cpu backend: Pad: axis %d would have negative size %d", ax, size)
		}
		shape.Dimensions[ax] = size
	}
	n := b.add(backends.OpTypePad, shape, in, execPad)
	n.aux = full
	return n, nil
}

// execPad fills the output with the fill value, then copies the operand
// elements that land inside it: input index i of an axis goes to
// Start + i·(Interior+1). Negative Start or End crop, so per axis only the
// input indices [first, last] that land in [0, size) are copied; when an
// axis keeps none, the output is all fill.
func execPad(st *execState, n *node, in []*slot) (*slot, error) {
	cfg := n.aux.([]backends.PadAxis)
	out := st.alloc(n.shape)
	dims := n.shape.Dimensions
	os := stridesOf(dims)
	// Fill, then place the operand.
	copyWalk(out.data, in[1].data, walk{dims: []int{n.shape.Size()}, dStrides: []int{1}, sStrides: []int{0}})
	xdims := n.inputs[0].shape.Dimensions
	xs := stridesOf(xdims)
	w := walk{dims: make([]int, len(dims)), dStrides: make([]int, len(dims)), sStrides: make([]int, len(dims))}
	for ax, p := range cfg {
		step := p.Interior + 1
		// Input indices i with 0 <= p.Start + i*step < dims[ax].
		first := 0
		if p.Start < 0 {
			first = (-p.Start + step - 1) / step
		}
		last := xdims[ax] - 1
		if lim := dims[ax] - 1 - p.Start; lim < last*step {
			if lim < 0 {
				last = -1
			} else {
				last = lim / step
			}
		}
		cnt := last - first + 1
		if cnt <= 0 {
			return out, nil
		}
		w.dims[ax] = cnt
		w.dStrides[ax] = os[ax] * step
		w.sStrides[ax] = xs[ax]
		w.dBase += (p.Start + first*step) * os[ax]
		w.sBase += first * xs[ax]
	}
	copyWalk(out.data, in[0].data, w)
	return out, nil
}

// ---- Iota ---------------------------------------------------------------

// Iota implements backends.Builder.
func (b *Builder) Iota(shape shapes.Shape, axis int) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("cpu backend: Iota: builder already compiled")
	}
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	if axis < 0 || axis >= shape.Rank() {
		return nil, fmt.Errorf("cpu backend: Iota: axis %d out of range for %s", axis, shape)
	}
	n := b.add(backends.OpTypeIota, shape.Clone(), nil, execIota)
	n.aux = axis
	return n, nil
}

// execIota fills runs of equal values straight into the output for the
// common dtypes (an attention mask's [1, 128, 768] int32 took 0.76 ms
// through float64); others compute the values in f64 (exact for any
// index) and convert them.
func execIota(st *execState, n *node, _ []*slot) (*slot, error) {
	axis := n.aux.(int)
	out := st.alloc(n.shape)
	dims := n.shape.Dimensions
	inner := 1
	for _, d := range dims[axis+1:] {
		inner *= d
	}
	switch v := out.data.(type) {
	case []int32:
		iotaFill(v, dims[axis], inner)
	case []int64:
		iotaFill(v, dims[axis], inner)
	case []float32:
		iotaFill(v, dims[axis], inner)
	case []float64:
		iotaFill(v, dims[axis], inner)
	default:
		vals := make([]float64, n.shape.Size())
		for i := range vals {
			vals[i] = float64((i / inner) % dims[axis])
		}
		if err := convertFlat(out.data, vals); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// iotaFill writes v, laid out as [outer, d, inner], with each element's
// index along d.
func iotaFill[T int32 | int64 | float32 | float64](v []T, d, inner int) {
	for o := 0; o < len(v); o += d * inner {
		for k := range d {
			run := v[o+k*inner : o+(k+1)*inner]
			x := T(k)
			for i := range run {
				run[i] = x
			}
		}
	}
}

// ---- DynamicSlice / DynamicUpdateSlice -----------------------------------

// indexValue reads a scalar integer from a slot; a uint64 above 2⁶² is
// read as 2⁶² so that it does not wrap negative (callers clamp it).
func indexValue(s *slot) (int, error) {
	switch v := s.data.(type) {
	case []int32:
		return int(v[0]), nil
	case []int64:
		return int(v[0]), nil
	case []int16:
		return int(v[0]), nil
	case []int8:
		return int(v[0]), nil
	case []uint8:
		return int(v[0]), nil
	case []uint16:
		return int(v[0]), nil
	case []uint32:
		return int(v[0]), nil
	case []uint64:
		if v[0] > 1<<62 {
			return 1 << 62, nil
		}
		return int(v[0]), nil
	}
	return 0, fmt.Errorf("index of type %T", s.data)
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }

// checkScalarIndices checks the start indices of a dynamic slice: one
// integer scalar per operand axis.
func checkScalarIndices(where string, idx []*node, rank int) error {
	if len(idx) != rank {
		return fmt.Errorf("cpu backend: %s: %d start indices for rank %d", where, len(idx), rank)
	}
	for i, x := range idx {
		if !x.shape.IsScalar() || !x.shape.DType.IsInt() {
			return fmt.Errorf("cpu backend: %s: start index #%d must be an integer scalar, got %s", where, i, x.shape)
		}
	}
	return nil
}

// DynamicSlice implements backends.Builder. As in XLA, start indices are
// clamped at run time so that the slice fits in the operand.
func (b *Builder) DynamicSlice(operand backends.Op, startIndices []backends.Op, sliceDims []int) (backends.Op, error) {
	in, err := b.in("DynamicSlice", append([]backends.Op{operand}, startIndices...)...)
	if err != nil {
		return nil, err
	}
	xs := in[0].shape
	if err := checkScalarIndices("DynamicSlice", in[1:], xs.Rank()); err != nil {
		return nil, err
	}
	if len(sliceDims) != xs.Rank() {
		return nil, fmt.Errorf("cpu backend: DynamicSlice: %d slice sizes for rank %d", len(sliceDims), xs.Rank())
	}
	for ax, d := range sliceDims {
		if d < 0 || d > xs.Dimensions[ax] {
			return nil, fmt.Errorf("cpu backend: DynamicSlice: slice size %d on axis %d of %s", d, ax, xs)
		}
	}
	return b.add(backends.OpTypeDynamicSlice, shapes.Make(xs.DType, sliceDims...), in, execDynamicSlice), nil
}

func execDynamicSlice(st *execState, n *node, in []*slot) (*slot, error) {
	xd := n.inputs[0].shape.Dimensions
	is := stridesOf(xd)
	base := 0
	for ax := range xd {
		v, err := indexValue(in[1+ax])
		if err != nil {
			return nil, err
		}
		base += clampInt(v, 0, xd[ax]-n.shape.Dimensions[ax]) * is[ax]
	}
	out := st.alloc(n.shape)
	copyWalk(out.data, in[0].data, walk{dims: n.shape.Dimensions, dStrides: stridesOf(n.shape.Dimensions), sStrides: is, sBase: base})
	return out, nil
}

// DynamicUpdateSlice implements backends.Builder. When the operand's
// memory may be overwritten (a dead intermediate or a donated input, such
// as a KV cache), the update is written in place: only the update's bytes
// move. Start indices are clamped so that the update fits, as in XLA.
func (b *Builder) DynamicUpdateSlice(operand, update backends.Op, startIndices []backends.Op) (backends.Op, error) {
	in, err := b.in("DynamicUpdateSlice", append([]backends.Op{operand, update}, startIndices...)...)
	if err != nil {
		return nil, err
	}
	xs, us := in[0].shape, in[1].shape
	if err := checkScalarIndices("DynamicUpdateSlice", in[2:], xs.Rank()); err != nil {
		return nil, err
	}
	if us.DType != xs.DType || us.Rank() != xs.Rank() {
		return nil, fmt.Errorf("cpu backend: DynamicUpdateSlice: update %s does not fit operand %s", us, xs)
	}
	for ax, d := range us.Dimensions {
		if d > xs.Dimensions[ax] {
			return nil, fmt.Errorf("cpu backend: DynamicUpdateSlice: update %s larger than operand %s", us, xs)
		}
	}
	return b.add(backends.OpTypeDynamicUpdateSlice, xs, in, execDynamicUpdateSlice), nil
}

func execDynamicUpdateSlice(st *execState, n *node, in []*slot) (*slot, error) {
	xd := n.shape.Dimensions
	ud := n.inputs[1].shape.Dimensions
	os := stridesOf(xd)
	base := 0
	for ax := range xd {
		v, err := indexValue(in[2+ax])
		if err != nil {
			return nil, err
		}
		base += clampInt(v, 0, xd[ax]-ud[ax]) * os[ax]
	}
	// In place unless the update is the operand's own memory.
	out := st.reuse(n, 0)
	if out == in[1] {
		out = nil
	}
	if out == nil {
		out = st.alloc(n.shape)
		copyFlat(out.data, in[0].data)
	}
	copyWalk(out.data, in[1].data, walk{dims: ud, dStrides: os, sStrides: stridesOf(ud), dBase: base})
	return out, nil
}

// ---- Gather ---------------------------------------------------------------

// gatherAux is Gather's aux: XLA's gather dimension numbers and the slice
// sizes (one per operand axis).
type gatherAux struct {
	indexVectorAxis                                            int
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sizes []int
}

// Gather implements backends.Builder (XLA semantics; out-of-range starts
// are clamped so the slice fits).
func (b *Builder) Gather(operand, startIndices backends.Op, indexVectorAxis int, offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (backends.Op, error) {
	in, err := b.in("Gather", operand, startIndices)
	if err != nil {
		return nil, err
	}
	if !in[1].shape.DType.IsInt() {
		return nil, fmt.Errorf("cpu backend: Gather: indices must be integers, got %s", in[1].shape)
	}
	shape, err := shapeinference.Gather(in[0].shape, in[1].shape, indexVectorAxis, offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes, indicesAreSorted)
	if err != nil {
		return nil, err
	}
	n := b.add(backends.OpTypeGather, shape, in, execGather)
	n.aux = gatherAux{indexVectorAxis, append([]int(nil), offsetOutputAxes...), append([]int(nil), collapsedSliceAxes...), append([]int(nil), startIndexMap...), append([]int(nil), sliceSizes...)}
	return n, nil
}

// intsOf converts an integer flat slice to []int.
func intsOf(flat any) ([]int, error) {
	switch v := flat.(type) {
	case []int32:
		out := make([]int, len(v))
		for i, x := range v {
			out[i] = int(x)
		}
		return out, nil
	case []int64:
		out := make([]int, len(v))
		for i, x := range v {
			out[i] = int(x)
		}
		return out, nil
	}
	tmp := make([]int64, flatLen(flat))
	if err := convertFlat(tmp, flat); err != nil {
		return nil, err
	}
	out := make([]int, len(tmp))
	for i, x := range tmp {
		out[i] = int(x)
	}
	return out, nil
}

// execGather copies one slice per batch position of the indices (every
// indices axis but indexVectorAxis, row-major). The index vector there
// gives the slice's start along the operand axes startIndexMap names
// (other axes start at 0), clamped so that the slice fits. The slice lands
// at the output's batch axes (those not in offsetOutputAxes, in order) for
// that position; its operand axes that are not collapsed map, in order,
// to offsetOutputAxes. An embedding lookup is one row copy per token.
func execGather(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(gatherAux)
	xd := n.inputs[0].shape.Dimensions
	xs := stridesOf(xd)
	id := n.inputs[1].shape.Dimensions
	idx, err := intsOf(in[1].data)
	if err != nil {
		return nil, err
	}
	od := n.shape.Dimensions
	os := stridesOf(od)
	isOffset := make([]bool, len(od))
	for _, ax := range a.offsetOutputAxes {
		isOffset[ax] = true
	}
	var batchOutAxes []int
	for ax := range od {
		if !isOffset[ax] {
			batchOutAxes = append(batchOutAxes, ax)
		}
	}
	// Index-vector layout in the indices tensor.
	var batchDims []int
	ivStride, ivLen := 0, 1
	is := stridesOf(id)
	var batchStrides []int
	for ax, d := range id {
		if ax == a.indexVectorAxis {
			ivStride, ivLen = is[ax], d
			continue
		}
		batchDims = append(batchDims, d)
		batchStrides = append(batchStrides, is[ax])
	}
	if a.indexVectorAxis == len(id) {
		ivLen = 1
	}
	collapsed := make([]bool, len(xd))
	for _, ax := range a.collapsedSliceAxes {
		collapsed[ax] = true
	}
	// Destination strides for the slice axes: collapsed ones have size 1.
	ds := make([]int, len(xd))
	k := 0
	for ax := range xd {
		if collapsed[ax] {
			continue
		}
		ds[ax] = os[a.offsetOutputAxes[k]]
		k++
	}
	out := st.alloc(n.shape)
	nb := 1
	for _, d := range batchDims {
		nb *= d
	}
	start := make([]int, len(xd))
	for bi := 0; bi < nb; bi++ {
		r, ioff, obase := bi, 0, 0
		for j := len(batchDims) - 1; j >= 0; j-- {
			i := r % batchDims[j]
			r /= batchDims[j]
			ioff += i * batchStrides[j]
			obase += i * os[batchOutAxes[j]]
		}
		for j := range start {
			start[j] = 0
		}
		for j := 0; j < ivLen && j < len(a.startIndexMap); j++ {
			ax := a.startIndexMap[j]
			start[ax] = clampInt(idx[ioff+j*ivStride], 0, xd[ax]-a.sizes[ax])
		}
		sbase := 0
		for ax := range xd {
			sbase += start[ax] * xs[ax]
		}
		copyWalk(out.data, in[0].data, walk{dims: a.sizes, dStrides: ds, sStrides: xs, dBase: obase, sBase: sbase})
	}
	return out, nil
}

var _ = dtypes.Float32
