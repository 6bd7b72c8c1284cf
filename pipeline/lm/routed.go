package lm

import "github.com/gomlx/gomlx/pkg/core/graph"

// Routed is implemented by models whose layers may end in a mixture of
// routed experts, so that executors can also run those experts one by one
// (compile.Options.Experts): grouped by the tokens routed to them on the
// host between two graph pieces (each active expert once on its group), or
// densely (every expert on every token, weighted by the routing mask).
//
// Layer(i, ...) builds the whole layer in one graph with the model's own
// formulation (Qwen MoE: the chosen experts' stacked matrices gathered by
// index, nn.GatheredExperts); it is what executors run by default. The
// per-expert formulations build a routed layer from two pieces instead:
//
//	Route(i)    everything up to the router: attention, the residual, the
//	            shared expert (if any), the router's top-k choice;
//	then        the executor applies Expert(i, e) to the tokens routed to
//	            e (grouped on the host, or all tokens, masked), weights
//	            each token's K outputs and adds them to Routing.Residual.
//
// Expert weights that LayerWeights lists stacked (a WeightSpec with Parts)
// are read there as their parts, one per expert (Experts.Weights).
type Routed interface {
	Model
	// Experts describes the routed experts of layer i, or returns nil when
	// layer i has none (a dense layer, run with Layer).
	Experts(i int) *Experts
	// Route builds layer i up to its router (see Routing). It reads the
	// tensors of LayerWeights(i) except the experts' (Experts.Weights), and
	// returns the layer's new state like Layer.
	Route(i int, w *Params, x *graph.Node, state []*graph.Node, step *Step) (*Routing, []*graph.Node)
	// Expert applies expert e of layer i to tokens x [C, Hidden] and returns
	// [C, Hidden] in x's dtype. It may depend on i and e only through the
	// names of the weights it reads (Experts.Weights(e)): executors reuse
	// one graph for every expert and layer with the same weight shapes.
	Expert(i, e int, w *Params, x *graph.Node) *graph.Node
}

// InGraphExperts is implemented by mixture-of-experts models whose
// experts run only in the graph of Layer: models with no Routed form
// (GPT-OSS, whose experts carry biases, a clamped activation and
// checkpoint encodings that the one-by-one formulations do not take), or
// whose checkpoints the one-by-one formulations cannot read expert by
// expert (Qwen3-VL-MoE's transposed stacks). The reason says why, for the
// error that refuses the other formulations.
type InGraphExperts interface {
	Model
	InGraphExperts() (reason string)
}

// Experts describes the routed experts of one layer.
type Experts struct {
	// Num is the number of experts; TopK the number each token is routed
	// to.
	Num, TopK int
	// Weights lists the tensors of expert e, in the same order and with the
	// same shapes for every e: each a weight of the layer's LayerWeights
	// or a part of one (WeightSpec.Parts).
	Weights func(e int) []WeightSpec
}

// Routing is what Route returns for a batch of B rows of T tokens.
type Routing struct {
	// Residual [B, T, Hidden] is the layer's output without the routed
	// experts' contribution (input + attention + shared expert).
	Residual *graph.Node
	// Input [B, T, Hidden] is the routed experts' input (the normalized
	// hidden states).
	Input *graph.Node
	// Experts [B, T, TopK] int32 are the chosen experts, Weights
	// [B, T, TopK] float32 their routing weights. The layer's output is
	// Residual + Σ_j Weights[.., j] · Expert(Experts[.., j], Input). An
	// expert of -1 runs no expert, and its weight must be 0 (LongCat-
	// Flash's zero experts, folded into Residual): the host grouping and
	// tputool's cpu backend skip it, a Gather clamps it to expert 0.
	Experts, Weights *graph.Node
}
