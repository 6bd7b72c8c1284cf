package nn

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// Mixture-of-experts blocks (transformers' Qwen2Moe/Qwen3Moe
// SparseMoeBlock): a softmax router choosing the top k experts per token
// and two ways to apply them.
//
// DenseExperts is the naive formulation: every expert runs on every token
// and the results are weighted by the routing mask; each step reads every
// expert's weights. GroupedExperts is the "ragged dot" formulation: tokens
// are grouped by expert on the host (see lm.Routed and compile/), each
// active expert runs one matmul chain on its group, and the results are
// gathered back per token; each step reads only the active experts.

// TopKRouter turns router logits [N, E] into the top k experts per token
// and their weights, as Qwen3MoeTopKRouter does: softmax in float32, the k
// largest probabilities (ties to the lower index), renormalized to sum to
// one when normalize (norm_topk_prob). GoMLX has no TopK, so it takes k
// rounds of ArgMax, masking each winner. Returns ids [N, k] int32 and
// weights [N, k] float32.
func TopKRouter(logits *Node, k int, normalize bool) (ids, weights *Node) {
	e := logits.Shape().Dimensions[1]
	if k <= 0 || k > e {
		panic(fmt.Errorf("TopKRouter: top %d of %d experts", k, e))
	}
	probs := Softmax(ConvertDType(logits, dtypes.Float32), -1) // [N, E]
	masked := probs
	idList := make([]*Node, k)
	wList := make([]*Node, k)
	for j := 0; j < k; j++ {
		id := ArgMax(masked, -1, dtypes.Int32)                                                  // [N]
		hot := OneHot(id, e, dtypes.Float32)                                                    // [N, E]
		wList[j] = ReduceSum(Mul(probs, hot), -1)                                               // [N]
		masked = Where(GreaterThan(hot, ZerosLike(hot)), AddScalar(ZerosLike(hot), -1), masked) // probabilities are >= 0
		idList[j] = id
	}
	ids = Stack(idList, 1)    // [N, k]
	weights = Stack(wList, 1) // [N, k]
	if normalize {
		weights = Div(weights, ReduceAndKeep(weights, ReduceSum, -1))
	}
	return ids, weights
}

// ExpertFn applies expert e to tokens x [C, H] and returns [C, H].
type ExpertFn func(e int, x *Node) *Node

// DenseExperts is the naive mixture: every one of the numExperts experts
// runs on all tokens x [N, H] and its output is weighted by the token's
// routing weight for it (zero unless chosen): Σ_e w[n, e] expert_e(x_n).
// ids and weights are TopKRouter's. The result has x's dtype.
func DenseExperts(x, ids, weights *Node, numExperts int, expert ExpertFn) *Node {
	dense := ReduceSum(Mul(OneHot(ids, numExperts, dtypes.Float32), InsertAxes(weights, -1)), 1) // [N, E]
	var out *Node
	for e := 0; e < numExperts; e++ {
		we := SliceAxis(dense, 1, AxisElem(e))                      // [N, 1]
		term := Mul(ConvertDType(expert(e, x), dtypes.Float32), we) // [N, H]
		if out == nil {
			out = term
		} else {
			out = Add(out, term)
		}
	}
	return ConvertDType(out, x.DType())
}

// GroupedExperts applies routed experts by groups (the ragged-dot idea with
// static shapes). Tokens x [N, H] were grouped on the host into A groups of
// capacity C: perm [A, C] int32 holds the token of each slot of each group
// (padding slots hold any valid token and are never read back), and slot
// [N, K] int32 holds, for each token's j-th chosen expert, the flat index
// a*C + c of its slot. Group a runs expert(a, x[perm[a]]) as one batched
// matmul chain over its C tokens; each token's output is the sum over its
// K choices of weights [N, K] times its slot's output. The result has x's
// dtype.
func GroupedExperts(x, weights, perm, slot *Node, expert ExpertFn) *Node {
	dims := perm.Shape().Dimensions
	a, c := dims[0], dims[1]
	h := x.Shape().Dimensions[1]
	outs := make([]*Node, a)
	for i := 0; i < a; i++ {
		idx := Reshape(SliceAxis(perm, 0, AxisElem(i)), c, 1) // [C, 1]
		group := Gather(x, idx)                               // [C, H]
		outs[i] = ConvertDType(expert(i, group), dtypes.Float32)
	}
	all := Reshape(Stack(outs, 0), a*c, h)                    // [A*C, H]
	picked := Gather(all, InsertAxes(slot, -1))               // [N, K, H]
	out := ReduceSum(Mul(picked, InsertAxes(weights, -1)), 1) // [N, H]
	return ConvertDType(out, x.DType())
}
