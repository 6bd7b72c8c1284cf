package cpu

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Slot remaps. compile's relayouts (compile/batch.go, remapSlots) rebuild
// a state's slot axis into S' slots, slot j taking old slot j+shift where
// keep[j] holds and zero elsewhere, as
//
//	Where(BroadcastInDim(Reshape(keep bool [S'])),
//	      Gather(Concatenate([Z, x, Z'], axis), start [1]),     start = shift + len(Z)
//	      0)
//
// with Z, Z' zeros (a broadcast constant) S' slots long: the padded copy
// (x three times over in size), the window out of it, the mask broadcast
// to the whole state and the Where, four passes and a padded temporary
// for every cache of every layer whenever serve's batch changes shape.
// rewriteRemap turns the Where into one node that writes each slot once,
// from x or zero. The values are the same bytes.

const opTypeRemap = backends.OpTypeLast + 104

// remapAux: the slot axis, and the left padding's length and the padded
// length along it (the window's start is in the padded coordinates).
type remapAux struct {
	axis, left, padded int
}

// rewriteRemap finds the form above at every Where.
func rewriteRemap(n *node) {
	if x, start, keep, a, ok := remapForm(n); ok {
		n.op, n.fn = opTypeRemap, execRemap
		n.inputs = []*node{x, start, keep}
		n.aux = a
	}
}

// remapForm matches n against the form, returning x, the start index
// [1], keep [S'] and the aux.
func remapForm(n *node) (x, start, keep *node, a remapAux, ok bool) {
	if n.op != backends.OpTypeWhere || len(n.inputs) != 3 || n.shape.Rank() == 0 {
		return nil, nil, nil, a, false
	}
	cond, g, f := n.inputs[0], n.inputs[1], n.inputs[2]
	if !zeroConstant(f) || g.op != backends.OpTypeGather || !g.shape.Equal(n.shape) {
		return nil, nil, nil, a, false
	}
	ga, isGather := g.aux.(gatherAux)
	rank := n.shape.Rank()
	if !isGather || len(ga.startIndexMap) != 1 || len(ga.collapsedSliceAxes) != 0 || ga.indexVectorAxis != 0 ||
		!slices.Equal(ga.sizes, n.shape.Dimensions) || !slices.Equal(ga.offsetOutputAxes, iotaInts(rank)) ||
		!slices.Equal(g.inputs[1].shape.Dimensions, []int{1}) || g.inputs[1].shape.DType != dtypes.Int32 {
		return nil, nil, nil, a, false
	}
	axis := ga.startIndexMap[0]
	c := g.inputs[0]
	if c.op != backends.OpTypeConcatenate || len(c.inputs) != 3 || c.aux.(int) != axis ||
		!zeroConstant(c.inputs[0]) || !zeroConstant(c.inputs[2]) {
		return nil, nil, nil, a, false
	}
	x = c.inputs[1]
	for i, d := range x.shape.Dimensions {
		if i != axis && d != n.shape.Dimensions[i] {
			return nil, nil, nil, a, false
		}
	}
	// cond: keep [S'] reshaped to ones but the axis, broadcast.
	s := n.shape.Dimensions[axis]
	if cond.op != backends.OpTypeBroadcastInDim || !slices.Equal(cond.aux.([]int), iotaInts(rank)) {
		return nil, nil, nil, a, false
	}
	r := cond.inputs[0]
	want := make([]int, rank)
	for i := range want {
		want[i] = 1
	}
	want[axis] = s
	if r.op != backends.OpTypeReshape || !slices.Equal(r.shape.Dimensions, want) ||
		r.inputs[0].shape.DType != dtypes.Bool || !slices.Equal(r.inputs[0].shape.Dimensions, []int{s}) {
		return nil, nil, nil, a, false
	}
	return x, g.inputs[1], r.inputs[0], remapAux{axis: axis, left: c.inputs[0].shape.Dimensions[axis], padded: c.shape.Dimensions[axis]}, true
}

// zeroConstant reports whether n is a constant whose every element is
// zero, or a broadcast of one.
func zeroConstant(n *node) bool {
	if n.op == backends.OpTypeBroadcastInDim {
		n = n.inputs[0]
	}
	if n.op != backends.OpTypeConstant || n.constant == nil {
		return false
	}
	for _, b := range bytesOf(n.constant) {
		if b != 0 {
			return false
		}
	}
	return true
}

// iotaInts is 0, 1, ..., n-1: the identity permutation, a BroadcastInDim's
// axes when no axis is added.
func iotaInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func execRemap(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(remapAux)
	xs, out := n.inputs[0].shape.Dimensions, n.shape.Dimensions
	idx, err := intsOf(in[1].data)
	if err != nil {
		return nil, err
	}
	keep := in[2].data.([]bool)
	s, sx := out[a.axis], xs[a.axis]
	// The start clamped so that the window fits in the padded axis, as
	// Gather clamps it, then in x's coordinates.
	first := min(max(idx[0], 0), a.padded-s) - a.left
	outer := 1
	for _, d := range out[:a.axis] {
		outer *= d
	}
	row := n.shape.DType.Size() // bytes a slot holds
	for _, d := range out[a.axis+1:] {
		row *= d
	}
	// Runs of slots that are copied (kept, and in x) or cleared, the same
	// for every index of the outer axes: a slot axis that is the last
	// (values held transposed) moves in runs, not element by element.
	type run struct {
		j0, j1 int
		copy   bool
	}
	var runs []run
	for j := range s {
		old := first + j
		c := keep[j] && old >= 0 && old < sx
		if len(runs) > 0 && runs[len(runs)-1].copy == c && runs[len(runs)-1].j1 == j {
			runs[len(runs)-1].j1++
			continue
		}
		runs = append(runs, run{j, j + 1, c})
	}
	res := st.alloc(n.shape)
	dst, src := bytesOf(res.data), bytesOf(in[0].data)
	span, xspan := s*row, sx*row // an outer index's bytes in the result and in x
	kernels.Parallel(outer, max(1, (1<<17)/max(span, 1)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			d, x := dst[o*span:(o+1)*span], src[o*xspan:(o+1)*xspan]
			for _, r := range runs {
				if r.copy {
					copy(d[r.j0*row:r.j1*row], x[(first+r.j0)*row:(first+r.j1)*row])
				} else {
					clear(d[r.j0*row : r.j1*row])
				}
			}
		}
	})
	return res, nil
}
