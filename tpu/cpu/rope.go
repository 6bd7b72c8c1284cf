package cpu

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Rotary position embeddings. pipeline/nn.ApplyRope rotates x [B, T, H, D]
// by cos and sin tables c, s [B, T, 1, h] (any axis but the last may be
// 1, broadcast) in the rotate-half convention, h = rot/2, rot ≤ D:
//
//	Concatenate(Sub(Mul(x1, c), Mul(x2, s)), Add(Mul(x2, c), Mul(x1, s)) [, x[..., rot:]], last axis)
//
// with x1 = x[..., :h] and x2 = x[..., h:rot]. That is nine ops, four of
// them products with an operand broadcast over the heads, which the
// elementwise fusion does not take; twice a layer at every decode step.
// rewriteRope turns the Concatenate into one node over x, c and s that
// writes each row once. Each element is the same product and difference
// (or sum) of products as unfused, so the results are identical.

const opTypeRope = backends.OpTypeLast + 103

// ropeAux: the rotated half h (the tables, inputs 1 and 2, have its
// width, and 1 where they broadcast).
type ropeAux struct {
	h int
}

// rewriteRope finds ApplyRope's form at every f32 Concatenate (above).
// The products, the difference and the sum must have no other reader
// (else nothing would be saved); the slices may.
func rewriteRope(nodes, outputs []*node) {
	users := countUsers(nodes, outputs)
	for _, n := range nodes {
		if x, c, s, h, ok := ropeForm(n, users); ok {
			n.op, n.fn = opTypeRope, execRope
			n.inputs = []*node{x, c, s}
			n.aux = ropeAux{h: h}
		}
	}
}

// ropeForm matches n against ApplyRope's form, returning x, the tables and
// the half width.
func ropeForm(n *node, users []int) (x, c, s *node, h int, ok bool) {
	if n.op != backends.OpTypeConcatenate || n.shape.DType != dtypes.Float32 || n.shape.Rank() != 4 ||
		n.aux.(int) != 3 || (len(n.inputs) != 2 && len(n.inputs) != 3) {
		return nil, nil, nil, 0, false
	}
	sub, add := n.inputs[0], n.inputs[1]
	if sub.op != backends.OpTypeSub || add.op != backends.OpTypeAdd || sub.aliasesInput || add.aliasesInput ||
		users[sub.idx] != 1 || users[add.idx] != 1 {
		return nil, nil, nil, 0, false
	}
	// products returns the slice and the table of Mul m (either order).
	product := func(m *node) (sl, tab *node, ok bool) {
		if m.op != backends.OpTypeMul || m.aliasesInput || users[m.idx] != 1 || !m.shape.Equal(sub.shape) {
			return nil, nil, false
		}
		a, b := m.inputs[0], m.inputs[1]
		if a.op != backends.OpTypeSlice {
			a, b = b, a
		}
		return a, b, a.op == backends.OpTypeSlice && a.shape.Equal(m.shape)
	}
	x1, c1, ok1 := product(sub.inputs[0])
	x2, s1, ok2 := product(sub.inputs[1])
	x2b, c2, ok3 := product(add.inputs[0])
	x1b, s2, ok4 := product(add.inputs[1])
	if !ok1 || !ok2 || !ok3 || !ok4 || x1 != x1b || x2 != x2b || c1 != c2 || s1 != s2 || c1 == s1 {
		return nil, nil, nil, 0, false
	}
	x = x1.inputs[0]
	h = x1.shape.Dimensions[3]
	d := x.shape.Dimensions
	if x2.inputs[0] != x || x.shape.DType != dtypes.Float32 || !lastAxisSlice(x1, 0, h) || !lastAxisSlice(x2, h, h) ||
		!n.shape.Equal(x.shape) {
		return nil, nil, nil, 0, false
	}
	if len(n.inputs) == 3 && (n.inputs[2].op != backends.OpTypeSlice || n.inputs[2].inputs[0] != x ||
		!lastAxisSlice(n.inputs[2], 2*h, d[3]-2*h)) {
		return nil, nil, nil, 0, false
	}
	if len(n.inputs) == 2 && 2*h != d[3] {
		return nil, nil, nil, 0, false
	}
	for _, t := range []*node{c1, s1} {
		td := t.shape.Dimensions
		if t.shape.DType != dtypes.Float32 || len(td) != 4 || td[3] != h {
			return nil, nil, nil, 0, false
		}
		for ax := 0; ax < 3; ax++ {
			if td[ax] != 1 && td[ax] != d[ax] {
				return nil, nil, nil, 0, false
			}
		}
	}
	if !c1.shape.Equal(s1.shape) {
		return nil, nil, nil, 0, false
	}
	return x, c1, s1, h, true
}

// lastAxisSlice reports whether sl takes [start, start+size) of its
// input's last axis, with stride 1, and the whole of the other axes.
func lastAxisSlice(sl *node, start, size int) bool {
	a := sl.aux.(sliceAux)
	in, out := sl.inputs[0].shape.Dimensions, sl.shape.Dimensions
	last := len(in) - 1
	for ax := range in {
		if a.strides[ax] != 1 {
			return false
		}
		if ax < last && (a.starts[ax] != 0 || out[ax] != in[ax]) {
			return false
		}
	}
	return a.starts[last] == start && out[last] == size
}

// execRope rotates each row of x (one head of one token) by its tables'
// row: o[j] = x1·c − x2·s and o[h+j] = x2·c + x1·s for j < h, then the
// rest of the row as it is.
func execRope(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(ropeAux)
	d := n.shape.Dimensions
	x, c, s := in[0].data.([]float32), in[1].data.([]float32), in[2].data.([]float32)
	out := st.alloc(n.shape)
	o := out.data.([]float32)
	D, h := d[3], a.h
	// The table row of (b, t, head): each axis of size 1 broadcast.
	ts := bcastStrides(n.inputs[1].shape, n.shape)
	tableRow := func(b, t, hd int) int { return b*ts[0] + t*ts[1] + hd*ts[2] }
	rows := d[0] * d[1] * d[2]
	kernels.Parallel(rows, max(1, elemGrain/max(1, D)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			b, t, hd := r/(d[1]*d[2]), (r/d[2])%d[1], r%d[2]
			xr, or := x[r*D:(r+1)*D], o[r*D:(r+1)*D]
			tr := tableRow(b, t, hd)
			cr, sr := c[tr:tr+h], s[tr:tr+h]
			x1, x2 := xr[:h], xr[h:2*h]
			o1, o2 := or[:h], or[h:2*h]
			for j := range cr {
				o1[j] = float32(x1[j]*cr[j]) - float32(x2[j]*sr[j])
				o2[j] = float32(x2[j]*cr[j]) + float32(x1[j]*sr[j])
			}
			copy(or[2*h:], xr[2*h:])
		}
	})
	return out, nil
}
