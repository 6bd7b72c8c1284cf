package cpu

import (
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Softmax. GoMLX's graph.Softmax over the last axis reaches the backend as
//
//	m = Reshape(ReduceMax(x, last))   (maybe through an Identity)
//	e = Exp(Sub(x, m))
//	y = Div(e, Reshape(ReduceSum(e, last)))
//
// five passes over the scores and three full-size temporaries. rewriteSoftmax
// finds that form (f32, intermediates read by nothing else) and turns the
// Div into one node that runs kernels.SoftmaxRows on a copy of x, or on x
// itself when x is dead afterwards. The one difference: a row that is
// entirely -Inf (fully masked) gives zeros instead of NaN.
//
// Only e and x−m must have no other reader (they are the temporaries the
// rewrite removes); the max and the sum may be read elsewhere, and then
// simply stay live and are computed as before.

// softmaxRewrites counts rewritten softmax forms (read by tests).
var softmaxRewrites atomic.Int64

// opTypeSoftmax marks a rewritten softmax node (not a GoMLX op).
const opTypeSoftmax = backends.OpTypeLast + 101

// skipIdentity follows Identity nodes.
func skipIdentity(n *node) *node {
	for n.op == backends.OpTypeIdentity {
		n = n.inputs[0]
	}
	return n
}

// keptLastReduce matches Reshape(op(x, last axis)) keeping the reduced
// axis as size 1, and returns x and the reduce node.
func keptLastReduce(n *node, op backends.OpType) (x, red *node, ok bool) {
	n = skipIdentity(n)
	if n.op != backends.OpTypeReshape {
		return nil, nil, false
	}
	red = skipIdentity(n.inputs[0])
	if red.op != op {
		return nil, nil, false
	}
	x = red.inputs[0]
	r := x.shape.Rank()
	if r == 0 || !slices.Equal(red.aux.([]int), []int{r - 1}) {
		return nil, nil, false
	}
	want := slices.Clone(x.shape.Dimensions)
	want[r-1] = 1
	if !slices.Equal(n.shape.Dimensions, want) {
		return nil, nil, false
	}
	return x, red, true
}

// rewriteSoftmax rewrites every softmax form in nodes; users counts each
// node's readers (outputs count as readers too). The Div node itself
// becomes the softmax node, so its readers need no change; its one input
// is x.
func rewriteSoftmax(nodes []*node, users []int) {
	for _, n := range nodes {
		if n.op != backends.OpTypeDiv || n.shape.DType != dtypes.Float32 {
			continue
		}
		e, sr := n.inputs[0], n.inputs[1]
		if e.op != backends.OpTypeExp || !e.shape.Equal(n.shape) || users[e.idx] != 2 {
			continue
		}
		se, _, ok := keptLastReduce(sr, backends.OpTypeReduceSum)
		if !ok || se != e {
			continue
		}
		d := e.inputs[0]
		if d.op != backends.OpTypeSub || users[d.idx] != 1 {
			continue
		}
		x, mr := d.inputs[0], d.inputs[1]
		mx, _, ok := keptLastReduce(mr, backends.OpTypeReduceMax)
		if !ok || mx != x || !x.shape.Equal(n.shape) {
			continue
		}
		softmaxRewrites.Add(1)
		n.op = opTypeSoftmax
		n.inputs = []*node{x}
		n.fn = execSoftmax
		n.aux = nil
		if s, bias, scale, ok := scaledBiasedScores(x, users); ok {
			softmaxFolds.Add(1)
			n.inputs = []*node{s, bias}
			n.fn = execSoftmaxScaleBias
			n.aux = scale
		}
	}
}

// softmaxFolds counts softmax nodes that took in their scores' scale and
// bias (read by tests).
var softmaxFolds atomic.Int64

// scaledBiasedScores matches attention's scores before the softmax,
// x = Add(Mul(s, c), bias) in either order of each: c a scalar f32
// constant, s of x's shape, bias of x's rank and last axis, its other
// axes x's or 1 (the mask [B, 1, T, 1, S] against scores [B, KV, T, G,
// S]). x must be read only by the softmax form's max and difference, and
// the Mul only by x; the softmax node then reads s and bias, and the two
// full passes over the scores go.
func scaledBiasedScores(x *node, users []int) (s, bias *node, scale float32, ok bool) {
	if x.op != backends.OpTypeAdd || x.aliasesInput || users[x.idx] != 2 || len(x.inputs) != 2 {
		return nil, nil, 0, false
	}
	m, bias := x.inputs[0], x.inputs[1]
	if m.op != backends.OpTypeMul {
		m, bias = bias, m
	}
	if m.op != backends.OpTypeMul || m.aliasesInput || users[m.idx] != 1 || !m.shape.Equal(x.shape) {
		return nil, nil, 0, false
	}
	s, c := m.inputs[0], m.inputs[1]
	if c.op != backends.OpTypeConstant {
		s, c = c, s
	}
	if c.op != backends.OpTypeConstant || c.shape.DType != dtypes.Float32 || c.shape.Rank() != 0 || !s.shape.Equal(x.shape) {
		return nil, nil, 0, false
	}
	xd, bd := x.shape.Dimensions, bias.shape.Dimensions
	if bias.shape.DType != dtypes.Float32 || len(bd) != len(xd) || len(xd) == 0 || bd[len(bd)-1] != xd[len(xd)-1] {
		return nil, nil, 0, false
	}
	for a, d := range bd {
		if d != xd[a] && d != 1 {
			return nil, nil, 0, false
		}
	}
	return s, bias, c.constant.([]float32)[0], true
}

// execSoftmaxScaleBias is execSoftmax of s·scale + bias, bias broadcast
// over s's rows (kernels.SoftmaxScaleBiasRows): on s's own memory when s
// dies here.
func execSoftmaxScaleBias(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.reuse(n, 0)
	if out == nil {
		out = st.alloc(n.shape)
	}
	dims := n.shape.Dimensions
	rank := len(dims)
	cols := dims[rank-1]
	rows := 0
	if cols > 0 {
		rows = n.shape.Size() / cols
	}
	offs := biasOffsets(n.inputs[1].shape, n.shape)
	kernels.SoftmaxScaleBiasRows(out.data.([]float32), in[0].data.([]float32), rows, cols, n.aux.(float32), in[1].data.([]float32), offs)
	return out, nil
}

// biasOffsets returns, for each row of rows (its last axis a row), the
// offset of the row of bias (broadcast to rows) it reads: the sum, over
// the leading axes, of its index times the bias's stride (0 where the
// bias has 1).
func biasOffsets(bias, rows shapes.Shape) []int {
	dims := rows.Dimensions
	rank := len(dims)
	n := 0
	if rank > 0 && dims[rank-1] > 0 {
		n = rows.Size() / dims[rank-1]
	}
	bs := bcastStrides(bias, rows)
	offs := make([]int, n)
	idx := make([]int, max(rank-1, 0))
	off := 0
	for r := range offs {
		offs[r] = off
		for a := rank - 2; a >= 0; a-- {
			idx[a]++
			off += bs[a]
			if idx[a] < dims[a] {
				break
			}
			off -= idx[a] * bs[a]
			idx[a] = 0
		}
	}
	return offs
}

// execSoftmax runs kernels.SoftmaxRows in place over [rows, cols], cols
// the last axis: on x's own memory when x dies here, else on a copy.
func execSoftmax(st *execState, n *node, in []*slot) (*slot, error) {
	out := st.reuse(n, 0)
	if out == nil {
		out = st.alloc(n.shape)
		copy(out.data.([]float32), in[0].data.([]float32))
	}
	dims := n.shape.Dimensions
	cols := dims[len(dims)-1]
	rows := 0
	if cols > 0 {
		rows = n.shape.Size() / cols
	}
	kernels.SoftmaxRows(out.data.([]float32), rows, cols)
	return out, nil
}
