package cpu

import (
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Elementwise fusion. A chain (or tree) of f32 elementwise ops over
// operands of one shape (or scalars), where each inner op's only reader is
// the next, is compiled into one node that evaluates the whole tree chunk
// by chunk: intermediates stay in small per-thread scratch buffers that
// live in cache, and only the final result is written to memory. SiLU(g)·u
// (Logistic, Mul, Mul), scale-and-shift chains and the like become one pass
// instead of one per op. The arithmetic per element is the same as
// unfused, so results are identical.
//
// What fuses (fusable): an f32 node computed by an fn (not an alias) that
// is a unary op other than LogicalNot, an op of fusableBinary, or an
// already fused node, whose operands are all f32 and each either of the
// node's shape or a single value. Comparisons, Where, Clamp, ConvertDType
// and operands broadcast along some axes only (RMSNorm's x·r[rows, 1]) do
// not. An operand is absorbed into its reader when it is fusable, has the
// reader's shape and has no other reader; every other operand, scalars
// included, becomes a leaf of the tree. Outputs are never absorbed.
//
// Why the results are identical: each step of the tree runs the same loop
// the unfused op runs on f32 (unaryFloat, or binaryLoop with a
// one-element slice for a scalar) on the same values; only where the
// intermediates live changes.

// opTypeFused marks a fused elementwise node (not a GoMLX op).
const opTypeFused = backends.OpTypeLast + 100

// opName names an op in errors.
func opName(op backends.OpType) string {
	switch op {
	case opTypeFused:
		return "fused elementwise ops"
	case opTypeSoftmax:
		return "softmax"
	case opTypeGrouped:
		return "grouped expert product"
	case opTypeRope:
		return "rotary embedding"
	case opTypeRemap:
		return "slot remap"
	case opTypeQuantizeKV:
		return "int8 KV quantisation"
	}
	return op.String()
}

// fuseChunk is the number of elements evaluated per step of a fused tree:
// 4 KiB of f32 per intermediate, so a tree's scratch stays in cache.
const fuseChunk = 1024

// fusedStep is one op of a fused tree. args index the tree's leaves when
// >= 0 and earlier steps as -(step+1) when < 0. A step's operands always
// come from leaves or earlier steps, and the last step is the root.
type fusedStep struct {
	op   backends.OpType
	args []int
}

// fusedProgram is a fused node's tree in evaluation order (its aux); the
// node's inputs are the leaves args refer to.
type fusedProgram struct {
	steps []fusedStep
}

var fusableBinary = map[backends.OpType]bool{
	backends.OpTypeAdd: true, backends.OpTypeSub: true, backends.OpTypeMul: true,
	backends.OpTypeDiv: true, backends.OpTypeMax: true, backends.OpTypeMin: true,
	backends.OpTypePow: true,
}

// fusable reports whether n may be part of a fused tree (see above).
func fusable(n *node) bool {
	if n.shape.DType != dtypes.Float32 || n.fn == nil || n.aliasesInput {
		return false
	}
	switch {
	case fusableBinary[n.op]:
	case n.op != backends.OpTypeLogicalNot && isUnary(n.op):
	case n.op == opTypeFused:
	default:
		return false
	}
	for _, in := range n.inputs {
		if in.shape.DType != dtypes.Float32 {
			return false
		}
		if in.shape.Size() != 1 && !in.shape.Equal(n.shape) {
			return false
		}
	}
	return true
}

func isUnary(op backends.OpType) bool {
	for _, u := range unaryOps {
		if u == op {
			return true
		}
	}
	return false
}

// fuse rewrites nodes in place: roots of fused trees become opTypeFused
// nodes whose inputs are the tree's leaves; the absorbed nodes are left
// unreferenced (liveness then skips them).
//
// Softmax forms are matched first, on the op-by-op graph, then attention's
// products around them (rewriteVisible), and the readers recounted after
// each, since those rewrites change who reads what. Nodes are
// then visited in creation order, so a chain grows one op at a time: the
// fused node made at an inner op is inlined whole into its reader's tree
// when the reader absorbs it, and is then dead.
func fuse(nodes []*node, outputs []*node) {
	users := countUsers(nodes, outputs)
	rewriteSoftmax(nodes, users)
	users = countUsers(nodes, outputs)
	rewriteVisible(nodes, outputs)
	users = countUsers(nodes, outputs)
	for _, n := range nodes {
		if !fusable(n) {
			continue
		}
		absorb := false
		for _, in := range n.inputs {
			if users[in.idx] == 1 && fusable(in) && in.shape.Equal(n.shape) {
				absorb = true
			}
		}
		if !absorb {
			continue
		}
		var (
			prog   fusedProgram
			leaves []*node
		)
		leafIndex := func(x *node) int {
			for i, l := range leaves {
				if l == x {
					return i
				}
			}
			leaves = append(leaves, x)
			return len(leaves) - 1
		}
		// emit appends x's computation, inlining absorbed inputs, and
		// returns its argument reference.
		var emit func(x *node, top bool) int
		emit = func(x *node, top bool) int {
			if !top && !(users[x.idx] == 1 && fusable(x) && x.shape.Equal(n.shape)) {
				return leafIndex(x)
			}
			if x.op == opTypeFused {
				// Inline an already fused tree: remap its leaves and steps.
				sub := x.aux.(*fusedProgram)
				refs := make([]int, len(x.inputs))
				for i, l := range x.inputs {
					refs[i] = emit(l, false)
				}
				base := len(prog.steps)
				for _, s := range sub.steps {
					args := make([]int, len(s.args))
					for k, a := range s.args {
						if a >= 0 {
							args[k] = refs[a]
						} else {
							args[k] = -(base + (-a - 1) + 1)
						}
					}
					prog.steps = append(prog.steps, fusedStep{op: s.op, args: args})
				}
				return -len(prog.steps)
			}
			args := make([]int, len(x.inputs))
			for k, in := range x.inputs {
				args[k] = emit(in, false)
			}
			prog.steps = append(prog.steps, fusedStep{op: x.op, args: args})
			return -len(prog.steps)
		}
		emit(n, true)
		n.op = opTypeFused
		n.inputs = leaves
		n.fn = execFused
		n.aux = &prog
	}
}

// countUsers counts each node's readers; an output counts as two, so that
// it is never absorbed into another node.
func countUsers(nodes, outputs []*node) []int {
	users := make([]int, len(nodes))
	for _, n := range nodes {
		for _, in := range n.inputs {
			users[in.idx]++
		}
	}
	for _, o := range outputs {
		users[o.idx] += 2
	}
	return users
}

// execFused evaluates a fused tree over chunks of fuseChunk elements.
// Each piece of parallel work has its own scratch, one fuseChunk segment
// per step but the last, which writes the output directly. The output may
// be a dying full-size leaf's memory (st.reuse): the last step writes a
// chunk only after every step has read that chunk of the leaves.
// fuseScratch holds execFused's scratch between pieces of work (a fused
// step runs every few microseconds in a decode; its scratch would
// otherwise be garbage each time).
var fuseScratch = sync.Pool{New: func() any { return new([]float32) }}

func execFused(st *execState, n *node, in []*slot) (*slot, error) {
	prog := n.aux.(*fusedProgram)
	var cands []int
	for k, x := range n.inputs {
		if x.shape.Size() == n.shape.Size() {
			cands = append(cands, k)
		}
	}
	out := st.allocOrReuse(n, cands...)
	dst := out.data.([]float32)
	leaves := make([][]float32, len(in))
	for k, s := range in {
		leaves[k] = s.data.([]float32)
	}
	size := len(dst)
	ns := len(prog.steps)
	kernels.Parallel(size, max(fuseChunk, elemGrain/4), func(lo, hi int) {
		sp := fuseScratch.Get().(*[]float32)
		defer fuseScratch.Put(sp)
		if need := (ns - 1) * fuseChunk; cap(*sp) < need {
			*sp = make([]float32, need)
		}
		scratch := *sp
		args := make([][]float32, 2)
		for c0 := lo; c0 < hi; c0 += fuseChunk {
			c1 := min(c0+fuseChunk, hi)
			m := c1 - c0
			for si, s := range prog.steps {
				args = args[:0]
				for _, a := range s.args {
					var v []float32
					switch {
					case a >= 0 && len(leaves[a]) == 1:
						v = leaves[a]
					case a >= 0:
						v = leaves[a][c0:c1]
					default:
						j := -a - 1
						v = scratch[j*fuseChunk : j*fuseChunk+m]
					}
					args = append(args, v)
				}
				var d []float32
				if si == ns-1 {
					d = dst[c0:c1]
				} else {
					d = scratch[si*fuseChunk : si*fuseChunk+m]
				}
				if len(args) == 1 {
					unaryFloat(s.op, d, args[0])
				} else {
					binaryLoop(s.op, d, args[0], args[1])
				}
			}
		}
	})
	return out, nil
}
