package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
)

// scatterAux is ScatterSum's aux: XLA's scatter dimension numbers.
type scatterAux struct {
	indexVectorAxis                                                int
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int
}

// ScatterSum implements backends.Builder (XLA scatter semantics with
// addition). Update elements that land outside the operand are dropped,
// element by element. The operand's memory is reused when it is dead
// after this op (a donated cache), so for f32 and the other native types
// only the updates are touched; a bf16/f16 operand is widened to f32
// whole and rounded back.
func (b *Builder) ScatterSum(operand, indices, updates backends.Op, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	in, err := b.in("ScatterSum", operand, indices, updates)
	if err != nil {
		return nil, err
	}
	if !in[1].shape.DType.IsInt() {
		return nil, fmt.Errorf("cpu backend: ScatterSum: indices must be integers, got %s", in[1].shape)
	}
	shape, err := shapeinference.ScatterOp(in[0].shape, in[1].shape, in[2].shape, indexVectorAxis, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes)
	if err != nil {
		return nil, err
	}
	if !shape.DType.IsFloat() && !shape.DType.IsInt() {
		return nil, fmt.Errorf("cpu backend: op ScatterSum is not implemented for %s", shape.DType)
	}
	n := b.add(backends.OpTypeScatterSum, shape, in, execScatterSum)
	n.aux = scatterAux{indexVectorAxis, append([]int(nil), updateWindowAxes...), append([]int(nil), insertedWindowAxes...), append([]int(nil), scatterAxesToOperandAxes...)}
	return n, nil
}

// execScatterSum maps each update element to its operand element: the
// update's scatter axes (those not in updateWindowAxes) pick a position
// in the indices' batch axes (all but indexVectorAxis), whose index
// vector gives start positions along scatterAxesToOperandAxes; the
// update's window axes then add, in order, to the operand axes not in
// insertedWindowAxes. The adds run on one goroutine, in update order, so
// repeated indices accumulate deterministically.
func execScatterSum(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(scatterAux)
	od := n.shape.Dimensions
	os := stridesOf(od)
	id := n.inputs[1].shape.Dimensions
	ud := n.inputs[2].shape.Dimensions
	idx, err := intsOf(in[1].data)
	if err != nil {
		return nil, err
	}
	// The target: the operand itself when it may be overwritten, else a
	// copy; not when the updates are the operand's own memory, which the
	// adds would change while reading it.
	out := st.reuse(n, 0)
	if out == in[2] {
		out = nil
	}
	if out == nil {
		out = st.alloc(n.shape)
		copyFlat(out.data, in[0].data)
	}
	// Flat offsets of every update element into the output, -1 when out of
	// range; then one typed pass adds them.
	isWindow := make([]bool, len(ud))
	for _, ax := range a.updateWindowAxes {
		isWindow[ax] = true
	}
	inserted := make([]bool, len(od))
	for _, ax := range a.insertedWindowAxes {
		inserted[ax] = true
	}
	// windowToOperand[k]: operand axis of the k-th window axis.
	var windowToOperand []int
	for ax := range od {
		if !inserted[ax] {
			windowToOperand = append(windowToOperand, ax)
		}
	}
	var scatterUpdAxes []int
	for ax := range ud {
		if !isWindow[ax] {
			scatterUpdAxes = append(scatterUpdAxes, ax)
		}
	}
	is := stridesOf(id)
	ivLen, ivStride := 1, 0
	if a.indexVectorAxis < len(id) {
		ivLen, ivStride = id[a.indexVectorAxis], is[a.indexVectorAxis]
	}
	var idxBatchStrides []int
	for ax := range id {
		if ax != a.indexVectorAxis {
			idxBatchStrides = append(idxBatchStrides, is[ax])
		}
	}
	total := n.inputs[2].shape.Size()
	offsets := make([]int, total)
	uIdx := make([]int, len(ud))
	pos := make([]int, len(od))
	for u := 0; u < total; u++ {
		r := u
		for ax := len(ud) - 1; ax >= 0; ax-- {
			uIdx[ax] = r % ud[ax]
			r /= ud[ax]
		}
		ioff := 0
		for k, ax := range scatterUpdAxes {
			ioff += uIdx[ax] * idxBatchStrides[k]
		}
		for j := range pos {
			pos[j] = 0
		}
		for k := 0; k < ivLen && k < len(a.scatterAxesToOperandAxes); k++ {
			pos[a.scatterAxesToOperandAxes[k]] += idx[ioff+k*ivStride]
		}
		for k, ax := range a.updateWindowAxes {
			pos[windowToOperand[k]] += uIdx[ax]
		}
		off := 0
		for ax, p := range pos {
			if p < 0 || p >= od[ax] {
				off = -1
				break
			}
			off += p * os[ax]
		}
		offsets[u] = off
	}
	upd := in[2].data
	if is16(n.shape.DType) {
		acc := toF32(out.data)
		scatterAdd(acc, toF32(upd), offsets)
		fromF32(out.data, acc)
		return out, nil
	}
	switch o := out.data.(type) {
	case []float32:
		scatterAdd(o, upd.([]float32), offsets)
	case []float64:
		scatterAdd(o, upd.([]float64), offsets)
	case []int32:
		scatterAdd(o, upd.([]int32), offsets)
	case []int64:
		scatterAdd(o, upd.([]int64), offsets)
	case []int8:
		scatterAdd(o, upd.([]int8), offsets)
	case []uint8:
		scatterAdd(o, upd.([]uint8), offsets)
	default:
		return nil, fmt.Errorf("not implemented for %s", n.shape.DType)
	}
	return out, nil
}

func scatterAdd[T number](dst, upd []T, offsets []int) {
	for u, off := range offsets {
		if off >= 0 {
			dst[off] += upd[u]
		}
	}
}
