package lm

import "github.com/gomlx/gomlx/pkg/core/graph"

// Routed is implemented by models whose layers may end in a mixture of
// routed experts that executors run grouped: tokens are sorted by expert on
// the host between two graph pieces, and each active expert runs once on
// the group of tokens routed to it (the "ragged dot" idea with static
// shapes), so a step reads only the active experts' weights.
//
// Layer(i, ...) must still build the whole layer in one graph (every expert
// on every token, weighted by the routing mask): executors that do not
// route on the host use it, and it is the dense baseline. Routed layers are
// then built in two pieces instead:
//
//	Route(i)    everything up to the router: attention, the residual, the
//	            shared expert (if any), the router's top-k choice;
//	host        group the tokens by chosen expert (compile/ does it);
//	Expert(i,e) one expert on its group; the executor gathers each token's
//	            K outputs, weights them and adds them to Routing.Residual.
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

// Experts describes the routed experts of one layer.
type Experts struct {
	// Num is the number of experts; TopK the number each token is routed
	// to.
	Num, TopK int
	// Weights lists the tensors of expert e, a subset of the layer's
	// LayerWeights, in the same order and with the same shapes for every e.
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
	// Residual + Σ_j Weights[.., j] · Expert(Experts[.., j], Input).
	Experts, Weights *graph.Node
}
