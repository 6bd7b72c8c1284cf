package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/pipeline/lm"
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
// one when normalize (norm_topk_prob). Returns ids [N, k] int32 and
// weights [N, k] float32.
func TopKRouter(logits *Node, k int, normalize bool) (ids, weights *Node) {
	probs := Softmax(ConvertDType(logits, dtypes.Float32), -1) // [N, E]
	ids, weights = TopKBy(probs, probs, k)
	if normalize {
		weights = Div(weights, ReduceAndKeep(weights, ReduceSum, -1))
	}
	return ids, weights
}

// SigmoidTopKRouter is SmallThinker's router without
// moe_primary_router_apply_softmax on logits [N, E]: the k largest
// logits (ties to the lower index), weighed by their sigmoids over the
// sigmoids' sum. It chooses by the logits themselves, as the modeling
// code does (torch.topk before the sigmoid), not by their sigmoids, which
// float32 rounds alike to 1 above about 17. Returns ids [N, k] int32 and
// weights [N, k] float32.
func SigmoidTopKRouter(logits *Node, k int) (ids, weights *Node) {
	l := ConvertDType(logits, dtypes.Float32)
	ids, weights = TopKBy(l, Sigmoid(l), k)
	return ids, Div(weights, ReduceAndKeep(weights, ReduceSum, -1))
}

// TopKBy picks for each row of choice [N, E] (float32) the k largest
// entries (ties to the lower index, as torch.topk keeps them) and returns
// their indices [N, k] int32 and the entries of values [N, E] at those
// indices [N, k], exactly (a router may choose by biased scores and weigh
// by the unbiased ones). GoMLX has no TopK, so it takes k rounds of
// ArgMax, masking each winner (the experts' iota and the mask value built
// once, so that a round is five ops). A winner is masked with
// −MaxFloat32, so a row must hold k entries above that: a router that
// closes experts with −∞ (GroupRouter.MaskInf) keeps k of them open.
func TopKBy(choice, values *Node, k int) (ids, picked *Node) {
	dims := choice.Shape().Dimensions
	n, e := dims[0], dims[1]
	if k <= 0 || k > e {
		panic(fmt.Errorf("TopKBy: top %d of %d", k, e))
	}
	g := choice.Graph()
	experts := Iota(g, shapes.Make(dtypes.Int32, n, e), 1) // [N, E]: each column's index
	zeros := ZerosLike(values)
	gone := AddScalar(ZerosLike(choice), -math.MaxFloat32) // below any choice
	masked := choice
	idList := make([]*Node, k)
	wList := make([]*Node, k)
	for j := 0; j < k; j++ {
		id := ArgMax(masked, -1, dtypes.Int32)                           // [N]
		hot := Equal(experts, BroadcastToDims(InsertAxes(id, -1), n, e)) // [N, E] bool
		wList[j] = ReduceSum(Where(hot, values, zeros), -1)              // [N]: the winner's value, exactly
		masked = Where(hot, gone, masked)
		idList[j] = id
	}
	return Stack(idList, 1), Stack(wList, 1) // [N, k]
}

// SparseMixerRouter is Phi-3.5-MoE's router as transformers' sparsemixer
// computes it at inference (PhimoeTopKRouter, not training: no Gumbel
// sampling, no jitter): two rounds over logits [N, E] in float32. A round
// picks the largest logit m (the first expert not yet chosen; ties to the
// lower index) and weighs it by its softmax among the logits s close to it,
// those with (m − s)/max(|s|, m) ≤ 2·jitterEps (router_jitter_noise): 1
// over the sum of exp(s − m) of those. The second round leaves the first
// winner out. The weights are not renormalized: each is 1 when no other
// logit is near its winner. Returns ids [N, 2] int32 and weights [N, 2]
// float32.
func SparseMixerRouter(logits *Node, jitterEps float64) (ids, weights *Node) {
	s := ConvertDType(logits, dtypes.Float32) // [N, E]
	dims := s.Shape().Dimensions
	n, e := dims[0], dims[1]
	g := s.Graph()
	experts := Iota(g, shapes.Make(dtypes.Int32, n, e), 1)
	zeros := ZerosLike(s)
	abs := Abs(s)
	round := func(scores, out *Node) (id, w *Node) {
		id = ArgMax(scores, -1, dtypes.Int32) // [N]
		m := ReduceAndKeep(scores, ReduceMax, -1)
		// Close: not ((m − s)/max(|s|, m) > 2ε); a 0/0 is NaN, which
		// compares false, so a zero logit beside a zero maximum stays in.
		far := GreaterThan(Div(Sub(m, s), Max(abs, m)), Scalar(g, dtypes.Float32, 2*jitterEps))
		kept := LogicalAnd(LogicalNot(far), LogicalNot(out))
		sum := ReduceSum(Where(kept, Exp(Sub(s, m)), zeros), -1) // [N]
		return id, Reciprocal(sum)
	}
	none := Equal(experts, Scalar(g, dtypes.Int32, -1)) // [N, E] false
	id1, w1 := round(s, none)
	first := Equal(experts, BroadcastToDims(InsertAxes(id1, -1), n, e))
	id2, w2 := round(Where(first, AddScalar(zeros, math.Inf(-1)), s), first)
	return Stack([]*Node{id1, id2}, 1), Stack([]*Node{w1, w2}, 1)
}

// GroupRouter is DeepSeek-V3's router after its scores (DeepseekV3MoE's
// route_tokens_to_experts, topk_method noaux_tc): a correction bias added
// to the scores chooses and the unbiased scores weigh; under a group
// limit (Groups > 1, TopKGroup < Groups) only the TopKGroup groups whose
// two best choices sum highest stay open (the others' choices set to 0,
// as transformers' DeepSeek-V3 masks them; with MaskInf −∞, as Ling
// 2.0's BailingMoeV2Gate does: the two choose alike unless fewer than
// TopK kept experts have a biased score of 0 or more); the
// weights renormalized (NormTopK: by sum + NormEps, 1e-20 when NormEps is
// 0, or by max(sum, NormMin) when NormMin > 0) and times Scale. With
// MaskInf, TopK must not exceed the open experts, TopKGroup ×
// Experts/Groups (TopKBy).
// DeepSeek-V3, GLM-4.5, MiniMax-M2, dots.llm1, ERNIE 4.5 and NemotronH
// route this way; LFM2-MoE too, with NormEps 1e-6 and no groups.
type GroupRouter struct {
	Experts, TopK, Groups, TopKGroup int
	NormTopK, MaskInf                bool
	NormMin, NormEps, Scale          float64
}

// Route routes by scores [N, E] float32 (sigmoids or softmax of the
// logits) with the correction bias [E] (nil: none); returns ids [N, K]
// int32 and weights [N, K] float32.
func (r GroupRouter) Route(scores, bias *Node) (ids, weights *Node) {
	n := scores.Shape().Dimensions[0]
	choice := scores
	if bias != nil {
		choice = Add(scores, ExpandLeftToRank(Reshape(ConvertDType(bias, dtypes.Float32), r.Experts), 2))
	}
	if r.Groups > 1 && r.TopKGroup < r.Groups {
		per := r.Experts / r.Groups
		grouped := Reshape(choice, n*r.Groups, per)
		_, best2 := TopKBy(grouped, grouped, 2)                     // [N·G, 2]
		groupScore := Reshape(ReduceSum(best2, -1), n, r.Groups)    // [N, G]
		kept, _ := TopKBy(groupScore, groupScore, r.TopKGroup)      // [N, TopKGroup] group ids
		hot := ReduceMax(OneHot(kept, r.Groups, dtypes.Float32), 1) // [N, G]: 1 for a kept group
		mask := Reshape(BroadcastToDims(InsertAxes(hot, -1), n, r.Groups, per), n, r.Experts)
		if r.MaskInf {
			choice = Where(GreaterThan(mask, ZerosLike(mask)), choice, AddScalar(ZerosLike(choice), math.Inf(-1)))
		} else {
			choice = Mul(choice, mask)
		}
	}
	ids, weights = TopKBy(choice, scores, r.TopK)
	switch sum := ReduceAndKeep(weights, ReduceSum, -1); {
	case r.NormTopK && r.NormMin > 0:
		weights = Div(weights, MaxScalar(sum, r.NormMin))
	case r.NormTopK:
		eps := r.NormEps
		if eps == 0 {
			eps = 1e-20
		}
		weights = Div(weights, AddScalar(sum, eps))
	}
	return ids, MulScalar(weights, r.Scale)
}

// SharedExpert is the shared expert of a Qwen MoE block
// (Qwen2MoeSparseMoeBlock, Qwen3_5MoeSparseMoeBlock): the SwiGLU MLP of x
// [..., H] scaled per token by sigmoid(x·gateᵀ), gate [1, H].
func SharedExpert(x, gateProj, upProj, downProj, gate *Node, act func(*Node) *Node) *Node {
	y := GatedMLP(x, gateProj, nil, upProj, nil, downProj, nil, act)
	return Mul(y, Sigmoid(Linear(x, gate, nil)))
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

// ExpertStack is a layer's routed experts held stacked, each expert's
// matrices in the Linear layout [out, in]: Gate and Up [E, I, H] and
// Down [E, H, I]. Up nil means Gate is the fused gate_up [E, 2I, H]
// (transformers v5's experts.gate_up_proj).
type ExpertStack struct {
	Gate, Up, Down *Node
	// GateBias [E, 2I] (the fused gate_up's) and DownBias [E, H] are
	// per-expert biases (GPT-OSS), nil for none. They need Up nil.
	GateBias, DownBias *Node
	// Act is the gate's activation: an expert's hidden is act(gate)·up,
	// with gate the first I outputs of the fused projection and up the
	// next I.
	Act func(*Node) *Node
	// GLU, when set, replaces that: it maps the fused projection's
	// output [..., 2I] (bias added) to the hidden [..., I] along the last
	// axis (GPT-OSS interleaves gate and up and clamps them: its
	// ClampedSwiGLU). It needs Up nil.
	GLU func(gateUp *Node) *Node
	// Ungated makes each expert an MLP without a gate: its hidden is
	// act(x·Gateᵀ), Gate [E, I, H] being the up projection (NemotronH's
	// relu² experts). It needs Up nil and no GLU.
	Ungated bool
	// WeighInputs applies each (token, choice) pair's routing weight to
	// the expert's input instead of its output: a token's result is
	// Σⱼ expert_{ids[n, j]}(weights[n, j]·x_n) (Llama 4's
	// Llama4TextMoe, whose router scores scale the routed input; the
	// experts are not linear, so the two differ).
	WeighInputs bool
}

// check panics on a stack whose fields do not fit together.
func (s ExpertStack) check() {
	if s.Up != nil && (s.GateBias != nil || s.DownBias != nil || s.GLU != nil) {
		panic(fmt.Errorf("ExpertStack: biases and GLU need the fused gate_up (Up nil)"))
	}
	if s.GLU == nil && s.Act == nil {
		panic(fmt.Errorf("ExpertStack: neither Act nor GLU is set"))
	}
	if s.Ungated && (s.Up != nil || s.GLU != nil) {
		panic(fmt.Errorf("ExpertStack: ungated experts take one up projection (Gate) and no GLU"))
	}
}

// hidden is the experts' hidden activations from the gate (fused
// gate_up when up is nil) and up projections, whose last axis is the
// output one: the GLU, or act(gate)·up.
func (s ExpertStack) hidden(g, u *Node) *Node {
	axis := g.Rank() - 1
	if s.GLU != nil {
		return s.GLU(g)
	}
	if s.Ungated {
		return s.Act(g)
	}
	if u == nil {
		inter := g.Shape().Dimensions[axis] / 2
		g, u = SliceAxis(g, axis, AxisRange(0, inter)), SliceAxis(g, axis, AxisRange(inter, 2*inter))
	}
	return Mul(s.Act(g), u)
}

// GatheredExperts is the static-shape, in-graph formulation of routed
// experts: for each of the P = N·k (token, choice) pairs it multiplies the
// token by its chosen expert's matrices, as one gathered matmul per
// projection over all pairs. Its shapes depend only on N, k and the
// weights, never on where the tokens went, and it needs no host round
// trip: one executable serves every routing.
//
// x [N, H] are the experts' inputs, ids [N, k] int32 and weights [N, k]
// float32 TopKRouter's choice, gate, up and down an ExpertStack's
// matrices with activation act. Each expert is act(x·gateᵀ)·(x·upᵀ)
// then ·downᵀ, and a token's output is Σⱼ weights[n, j] · expert_{ids[n,
// j]}(x_n), summed in float32. The result has x's dtype.
//
// Written out, every pair gathers its expert's [out, in] matrix, which
// backends without a grouped kernel compute as written (the go backend
// and XLA: a Gather then a batched DotGeneral over the pairs); tputool's
// cpu backend recognises the gathered product (see tpu/cpu).
func GatheredExperts(x, ids, weights, gate, up, down *Node, act func(*Node) *Node) *Node {
	return ExpertStack{Gate: gate, Up: up, Down: down, Act: act}.Gathered(x, ids, weights)
}

// Gathered is GatheredExperts over the stack, biases and GLU included (a
// pair's biases are gathered by its expert id, as its matrices are).
func (s ExpertStack) Gathered(x, ids, weights *Node) *Node {
	s.check()
	xd := x.Shape().Dimensions
	n, h := xd[0], xd[1]
	k := ids.Shape().Dimensions[1]
	p := n * k
	pairIDs := Reshape(ConvertDType(ids, dtypes.Int32), p, 1)          // [P, 1]
	pairs := Reshape(BroadcastToDims(InsertAxes(x, 1), n, k, h), p, h) // [P, H]
	if s.WeighInputs {
		pairs = Mul(pairs, ConvertDType(Reshape(weights, p, 1), pairs.DType()))
		weights = OnesLike(weights)
	}
	gathered := func(v, w, bias *Node) *Node { // [P, out]
		y := PairDot(v, w, pairIDs)
		if bias != nil {
			y = Add(y, ConvertDType(Gather(bias, pairIDs), y.DType()))
		}
		return y
	}
	g := gathered(pairs, s.Gate, s.GateBias)
	var u *Node
	if s.Up != nil {
		u = gathered(pairs, s.Up, nil)
	}
	y := gathered(s.hidden(g, u), s.Down, s.DownBias) // [P, H]
	y = Reshape(ConvertDType(y, dtypes.Float32), n, k, h)
	out := ReduceSum(Mul(y, InsertAxes(ConvertDType(weights, dtypes.Float32), -1)), 1) // [N, H]
	return ConvertDType(out, x.DType())
}

// StackedExperts is the dense formulation over expert stacks, with
// GatheredExperts' arguments and result: every expert runs on every token
// as one matmul per projection over the whole stack (each expert's
// matrices read once, E/k times the useful arithmetic), and each token's
// outputs are weighted by its routing weights, zero for the experts it did
// not choose. It reads less than the gathered formulation once there are
// many more (token, choice) pairs than experts, as in a long prefill,
// where gathering a matrix per pair would copy the stack many times over
// on a backend whose Gather copies (XLA).
func StackedExperts(x, ids, weights, gate, up, down *Node, act func(*Node) *Node) *Node {
	return ExpertStack{Gate: gate, Up: up, Down: down, Act: act}.Stacked(x, ids, weights)
}

// Stacked is StackedExperts over the stack, biases and GLU included.
func (s ExpertStack) Stacked(x, ids, weights *Node) *Node {
	s.check()
	e := s.Gate.Shape().Dimensions[0]
	dt := x.DType()
	stack := func(w *Node) *Node {
		if w.DType() != dt {
			w = ConvertDType(w, dt)
		}
		return w
	}
	proj := func(v, w, bias *Node) *Node { // v [N, E, in] or [N, in], w [E, out, in] -> [N, E, out]
		var y *Node
		if v.Rank() == 2 {
			y = DotGeneral(v, []int{1}, nil, stack(w), []int{2}, nil) // [N, E, out]
		} else {
			y = TransposeAllDims(DotGeneral(v, []int{2}, []int{1}, stack(w), []int{2}, []int{0}), 1, 0, 2) // [E, N, out] -> [N, E, out]
		}
		if bias != nil {
			y = Add(y, InsertAxes(stack(bias), 0)) // [1, E, out]
		}
		return y
	}
	combine := ReduceSum(Mul(OneHot(ids, e, dtypes.Float32), InsertAxes(ConvertDType(weights, dtypes.Float32), -1)), 1) // [N, E]
	in := x
	if s.WeighInputs { // each expert's own input, its token scaled by its weight (0 where not chosen), and no weight after
		in = Mul(InsertAxes(x, 1), InsertAxes(ConvertDType(combine, dt), -1)) // [N, E, H]
		combine = ReduceSum(OneHot(ids, e, dtypes.Float32), 1)
	}
	g := proj(in, s.Gate, s.GateBias)
	var u *Node
	if s.Up != nil {
		u = proj(in, s.Up, nil)
	}
	y := ConvertDType(proj(s.hidden(g, u), s.Down, s.DownBias), dtypes.Float32) // [N, E, H]
	out := ReduceSum(Mul(y, InsertAxes(combine, -1)), 1)                        // [N, H]
	return ConvertDType(out, dt)
}

// FinishRouted completes a sparse layer from its routing (lm.Routed's
// Route): r.Residual plus the experts of the stacks gateUp [E, 2I, H] (each
// expert's gate rows, then its up rows) and down [E, H, I] that r chose
// for r.Input, weighed (RoutedExperts). Returns [B, T, H].
func FinishRouted(r *lm.Routing, gateUp, down *Node, act func(*Node) *Node, gather bool) *Node {
	dims := r.Input.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	n, k := b*t, r.Experts.Shape().Dimensions[2]
	out := RoutedExperts(Reshape(r.Input, n, hd), Reshape(r.Experts, n, k), Reshape(r.Weights, n, k), gateUp, nil, down, act, gather) // [N, H]
	return Add(r.Residual, Reshape(out, b, t, hd))
}

// RoutedExperts applies routed experts in the static-shape formulation
// that suits the backend, with GatheredExperts' arguments and result (see
// ExpertStack.Routed).
func RoutedExperts(x, ids, weights, gate, up, down *Node, act func(*Node) *Node, gather bool) *Node {
	return ExpertStack{Gate: gate, Up: up, Down: down, Act: act}.Routed(x, ids, weights, gather)
}

// Routed applies the stack in the formulation that suits the backend.
// gather reports a backend computing in host memory (lm.Step.GatherExperts):
// Gathered always (tputool's cpu backend runs it as a grouped kernel
// that copies nothing). On an accelerator a Gather of matrices is a copy
// in device memory, and Gathered copies one matrix per (token, choice)
// pair (written, then read again) where Stacked reads each expert once:
// Gathered while the pairs are at most a third of the experts (decode at
// small batches: only the chosen experts are read), Stacked beyond
// (prefill, large batches), where gathering would copy the stack several
// times over. Both are one executable per shape, whatever the routing.
func (s ExpertStack) Routed(x, ids, weights *Node, gather bool) *Node {
	pairs := x.Shape().Dimensions[0] * ids.Shape().Dimensions[1]
	if gather || 3*pairs <= s.Gate.Shape().Dimensions[0] {
		return s.Gathered(x, ids, weights)
	}
	return s.Stacked(x, ids, weights)
}

// PairDot multiplies each row v[p] [in] by the matrix w[ids[p]] [out, in]
// of a stack w [E, out, in]: ids [P, 1] int32, v [P, in], result [P, out]
// in v's dtype. It is the gathered ("ragged") matmul of GatheredExperts,
// written as a Gather of the matrices and a DotGeneral batched over the
// pairs. Only the chosen matrices are converted: a stack held narrow
// (ConvertDType of a bf16/f16 stack) is gathered narrow, and an int8
// stack (DequantizeInt8's form) gathers its int8 matrices and their
// scales, then dequantises them, as an int4 stack (DequantizeInt4's form:
// one scale table for the stack) does its packed values and codes, an
// MXFP4 stack (DequantizeMXFP4's form) its blocks and scales, and an
// NVFP4 stack (DequantizeNVFP4Tables' form) its codes, scale bytes and
// tables.
func PairDot(v, w, ids *Node) *Node {
	if w.Type() == NodeTypeConvertDType && w.Rank() == 3 {
		w = w.Inputs()[0] // a stack held narrow: convert only the chosen matrices
	}
	var gw *Node // [P, out, in]
	if q, scales, ok := dequantizeInt8Parts(w); ok {
		gw = DequantizeInt8(Gather(q, ids), Gather(scales, ids), dtypes.Float32) // int8: gather the chosen matrices and scales
	} else if packed, codes, table, ok := dequantizeInt4Parts(w); ok {
		gw = DequantizeInt4(Gather(packed, ids), Gather(codes, ids), table, dtypes.Float32) // int4: the chosen packed values and codes, the stack's table
	} else if blocks, scales, ok := dequantizeMXFP4Parts(w); ok {
		gw = DequantizeMXFP4(Gather(blocks, ids), Gather(scales, ids), dtypes.Float32) // MXFP4: the chosen blocks and scales
	} else if bytes, scales, b0, b1, ok := dequantizeFP8Parts(w); ok && w.Rank() == 3 {
		gw = DequantizeFP8(Gather(bytes, ids), Gather(scales, ids), b0, b1, dtypes.Float32) // FP8: the chosen bytes and block scales
	} else if packed, codes, halves, ok := dequantizeNVFP4TablesParts(w); ok {
		gw = DequantizeNVFP4Tables(Gather(packed, ids), Gather(codes, ids), Gather(halves, ids), dtypes.Float32) // NVFP4: the chosen codes, scale bytes and tables
	} else if packed, scales, mins, pairs, ok := dequantizeInt4GroupsParts(w); ok {
		var gm *Node
		if mins != nil {
			gm = Gather(mins, ids)
		}
		// Grouped int4 or FP4 (its pairs table): the chosen values, scales and mins.
		gw = dequantizeNibbleGroups("PairDot", pairs, Gather(packed, ids), Gather(scales, ids), gm, dtypes.Float32)
	} else {
		gw = Gather(w, ids)
	}
	if gw.DType() != v.DType() {
		gw = ConvertDType(gw, v.DType())
	}
	return DotGeneral(v, []int{1}, []int{0}, gw, []int{2}, []int{0})
}
