package compile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Host-routed mixture-of-experts execution (models implementing lm.Routed).
//
// A routed layer is built in two graph pieces with the host in between:
// Route (attention, residual, shared expert, router top-k), then the
// grouped experts. Between them the host reads the chosen expert ids and
// groups the tokens: each active expert gets one group of its tokens,
// padded to a common capacity C (a power of two); the number of groups A is
// rounded up to a multiple of TopK (padding groups repeat an active expert
// and are never read back), so few distinct shapes occur. The experts
// piece takes exactly the A active experts' weights as inputs: one matmul
// chain per group, and only the active experts' weights are read.
//
// Compiled mode fuses everything between two host points into one
// executable ("segments": embed .. Route(r0), experts(r0) .. Route(r1),
// ..., experts(rLast) .. head). Eager mode dispatches embed, one program per
// layer kind, one Route program per routed-layer signature, one experts
// program per expert signature, and head. Both modes build every piece
// from the same graph code and group tokens identically.

// moeRun holds the routed programs and the per-layer facts.
type moeRun struct {
	rm       lm.Routed
	experts  []*lm.Experts // per layer; nil for layers without routed experts
	routeW   [][]string    // per routed layer: LayerWeights minus the experts'
	expertW  [][][]string  // per routed layer, per expert: weight names
	segments []*segment    // compiled mode

	// Eager mode programs, per layer.
	routeProg, expertProg []*Program
}

// segment is a compiled-mode program: optionally the experts of layer
// from, then the full layers, then either Route of layer to or the head.
type segment struct {
	from, to int   // routed layers at the ends, -1 for embed / head
	layers   []int // layers run whole
	weights  []string
	states   []int // layers whose state the segment reads and writes, in order
	prog     *Program
}

// routedModel returns the model as lm.Routed when it has routed layers and
// routing on the host is asked for (Options.Experts).
func (r *Runner) routedModel() (lm.Routed, bool) {
	if r.opts.Experts != ExpertsHost {
		return nil, false
	}
	return r.expertModel()
}

// expertModel returns the model as lm.Routed when it has routed layers.
func (r *Runner) expertModel() (lm.Routed, bool) {
	rm, ok := r.model.(lm.Routed)
	if !ok {
		return nil, false
	}
	for i := 0; i < r.spec.Layers; i++ {
		if rm.Experts(i) != nil {
			return rm, true
		}
	}
	return nil, false
}

// expertsApart reports that the experts run one by one (host-routed or
// dense), reading lm.Experts.Weights: the weights assembled from parts
// (expert stacks) are then held as their parts (heldSpecs).
func (r *Runner) expertsApart() bool {
	_, ok := r.expertModel()
	return ok && r.opts.Experts != ExpertsInGraph
}

// heldSpecs are the weights ws as this Runner holds them: assembled weights
// replaced by their parts when the experts run apart.
func (r *Runner) heldSpecs(ws []lm.WeightSpec) []lm.WeightSpec {
	if !r.expertsApart() {
		return ws
	}
	out := make([]lm.WeightSpec, 0, len(ws))
	for _, w := range ws {
		if len(w.Parts) > 0 {
			out = append(out, w.Parts...)
		} else {
			out = append(out, w)
		}
	}
	return out
}

// layer builds layer i: Model.Layer, or with Options.Experts
// ExpertsDense, a routed layer as Route plus every expert on every token.
func (r *Runner) layer(i int, w *lm.Params, x *graph.Node, state []*graph.Node, step *lm.Step) (*graph.Node, []*graph.Node) {
	if r.opts.Experts == ExpertsDense {
		if rm, ok := r.model.(lm.Routed); ok {
			if ex := rm.Experts(i); ex != nil {
				return denseLayer(rm, ex, i, w, x, state, step)
			}
		}
	}
	return r.model.Layer(i, w, x, state, step)
}

// denseLayer is routed layer i in the dense formulation (nn.DenseExperts).
func denseLayer(rm lm.Routed, ex *lm.Experts, i int, w *lm.Params, x *graph.Node, state []*graph.Node, step *lm.Step) (*graph.Node, []*graph.Node) {
	rt, st := rm.Route(i, w, x, state, step)
	dims := rt.Input.Shape().Dimensions
	b, t, h := dims[0], dims[1], dims[2]
	n := b * t
	out := nn.DenseExperts(graph.Reshape(rt.Input, n, h), graph.Reshape(rt.Experts, n, ex.TopK), graph.Reshape(rt.Weights, n, ex.TopK), ex.Num,
		func(e int, xe *graph.Node) *graph.Node { return rm.Expert(i, e, w, xe) })
	return graph.Add(rt.Residual, graph.Reshape(out, b, t, h)), st
}

func weightNames(ws []lm.WeightSpec) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Name
	}
	return out
}

// makeRoutedPrograms sets up r.moe and its programs.
func (r *Runner) makeRoutedPrograms(rm lm.Routed) error {
	mr := &moeRun{rm: rm}
	L := r.spec.Layers
	mr.experts = make([]*lm.Experts, L)
	mr.routeW = make([][]string, L)
	mr.expertW = make([][][]string, L)
	for i := 0; i < L; i++ {
		ex := rm.Experts(i)
		if ex == nil {
			continue
		}
		if ex.Num <= 0 || ex.TopK <= 0 || ex.TopK > ex.Num {
			return fmt.Errorf("layer %d: %d experts, top %d", i, ex.Num, ex.TopK)
		}
		mr.experts[i] = ex
		isExpert := map[string]bool{}
		mr.expertW[i] = make([][]string, ex.Num)
		for e := 0; e < ex.Num; e++ {
			// Each weight with its companions (scales, codes, tables) where
			// it is held quantised, which r.params decodes it with.
			mr.expertW[i][e] = r.withScales(weightNames(ex.Weights(e)))
			for j, n := range mr.expertW[i][e] {
				t, ok := r.weights[n]
				if !ok {
					return fmt.Errorf("layer %d expert %d: weight %q is not among the model's weights", i, e, n)
				}
				// The experts program takes any A experts' inputs laid end
				// to end: every expert must be held alike.
				if w0 := mr.expertW[i][0]; len(mr.expertW[i][e]) != len(w0) || !t.Shape().Equal(r.weights[w0[j]].Shape()) {
					return fmt.Errorf("layer %d: expert %d is held unlike expert 0 (%d inputs against %d, or %q's shape differs); run the experts in the graph (Options.Experts %q)",
						i, e, len(mr.expertW[i][e]), len(w0), n, ExpertsInGraph)
				}
				isExpert[n] = true
			}
		}
		for _, n := range r.layerW[i] {
			if !isExpert[n] {
				mr.routeW[i] = append(mr.routeW[i], n)
			}
		}
	}
	r.moe = mr
	if r.opts.Mode == Compiled {
		return r.makeSegments()
	}
	return r.makeEager()
}

func (r *Runner) makeSegments() error {
	mr := r.moe
	seg := &segment{from: -1}
	add := func(names []string) {
		seen := map[string]bool{}
		for _, n := range seg.weights {
			seen[n] = true
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				seg.weights = append(seg.weights, n)
			}
		}
	}
	add(r.embedW)
	for i := 0; i < r.spec.Layers; i++ {
		seg.states = append(seg.states, i)
		if mr.experts[i] == nil {
			seg.layers = append(seg.layers, i)
			add(r.layerW[i])
			continue
		}
		seg.to = i
		add(mr.routeW[i])
		mr.segments = append(mr.segments, seg)
		seg = &segment{from: i}
	}
	seg.to = -1
	add(r.headW)
	mr.segments = append(mr.segments, seg)
	for n, s := range mr.segments {
		p, err := r.newProgram(fmt.Sprintf("segment/%d", n), func(in []*graph.Node) []*graph.Node { return r.segmentGraph(s, in) })
		if err != nil {
			return err
		}
		s.prog = p
	}
	return nil
}

// expertSignature: layers with equal signatures share an experts program.
func (r *Runner) expertSignature(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "top%d", r.moe.experts[i].TopK)
	for _, n := range r.moe.expertW[i][0] {
		fmt.Fprintf(&b, " %v", r.weights[n].Shape().Dimensions)
	}
	return b.String()
}

// routeOutputs is Route's result as graph outputs: residual, input,
// experts (int32), weights (float32).
func routeOutputs(rt *lm.Routing) []*graph.Node {
	return []*graph.Node{rt.Residual, rt.Input, graph.ConvertDType(rt.Experts, dtypes.Int32), graph.ConvertDType(rt.Weights, dtypes.Float32)}
}

// routeGraph: [hidden, pads, start, state..., route weights...] ->
// [residual, input, experts, weights, state...].
func (r *Runner) routeGraph(rep int, in []*graph.Node) []*graph.Node {
	x, pads, start := in[0], in[1], in[2]
	n := r.numStates[rep]
	w := r.params(r.moe.routeW[rep], in[3+n:])
	step := r.step(x.Shape(), pads, start, r.cacheLenOf(rep, in[3:3+n]))
	rt, st := r.moe.rm.Route(rep, w, x, in[3:3+n], step)
	return append(routeOutputs(rt), st...)
}

// groupedExperts builds the experts piece of routed layer rep:
// residual + Σ weights · expert(input) with the groups described by perm
// [A, C] and slot [N, K], and ew the A groups' expert weights in order.
func (r *Runner) groupedExperts(rep int, residual, input, weights, perm, slot *graph.Node, ew []*graph.Node) *graph.Node {
	mr := r.moe
	dims := residual.Shape().Dimensions
	b, t, h := dims[0], dims[1], dims[2]
	k := weights.Shape().Dimensions[2]
	nw := len(mr.expertW[rep][0])
	ex := mr.experts[rep]
	out := nn.GroupedExperts(graph.Reshape(input, b*t, h), graph.Reshape(weights, b*t, k), perm, slot,
		func(a int, x *graph.Node) *graph.Node {
			e := a % ex.Num // representative: the graph depends on e only through names
			return mr.rm.Expert(rep, e, r.params(mr.expertW[rep][e], ew[a*nw:(a+1)*nw]), x)
		})
	return graph.Add(residual, graph.Reshape(out, b, t, h))
}

// expertsGraph: [residual, input, weights, perm, slot, expert weights...] -> [hidden].
func (r *Runner) expertsGraph(rep int, in []*graph.Node) []*graph.Node {
	return []*graph.Node{r.groupedExperts(rep, in[0], in[1], in[2], in[3], in[4], in[5:])}
}

// segmentGraph is a compiled-mode segment:
// inputs  [tokens | residual, input, weights, perm, slot, expert weights...],
// pads, start, state..., segment weights...
// outputs [logits | residual, input, experts, weights], state...
func (r *Runner) segmentGraph(s *segment, in []*graph.Node) []*graph.Node {
	mr := r.moe
	var x, tokens *graph.Node
	var ew []*graph.Node
	off := 0
	if s.from < 0 {
		tokens = in[0]
		off = 1
	} else {
		a := in[3].Shape().Dimensions[0]
		nw := len(mr.expertW[s.from][0])
		ew = in[5 : 5+a*nw]
		off = 5 + a*nw
	}
	pads, start := in[off], in[off+1]
	off += 2
	states := map[int][]*graph.Node{}
	first := off
	for _, l := range s.states {
		states[l] = in[off : off+r.numStates[l]]
		off += r.numStates[l]
	}
	cacheLen := 0
	if len(s.states) > 0 {
		cacheLen = r.cacheLenOf(s.states[0], in[first:off])
	}
	w := r.params(s.weights, in[off:])
	var step *lm.Step
	if s.from < 0 {
		x = r.model.Embed(w, tokens)
		step = r.step(tokens.Shape(), pads, start, cacheLen)
	} else {
		x = r.groupedExperts(s.from, in[0], in[1], in[2], in[3], in[4], ew)
		step = r.step(x.Shape(), pads, start, cacheLen)
	}
	newStates := map[int][]*graph.Node{}
	for _, l := range s.layers {
		x, newStates[l] = r.model.Layer(l, w, x, states[l], step)
	}
	var out []*graph.Node
	if s.to >= 0 {
		rt, st := mr.rm.Route(s.to, w, x, states[s.to], step)
		newStates[s.to] = st
		out = routeOutputs(rt)
	} else {
		out = []*graph.Node{graph.ConvertDType(r.model.Head(w, lastPosition(x)), dtypes.Float32)}
	}
	for _, l := range s.states {
		out = append(out, newStates[l]...)
	}
	return out
}

// groups is the host-side grouping of one routed layer's tokens.
type groups struct {
	a, c    int
	experts []int   // [A]: the expert of each group
	perm    []int32 // [A*C]: the token of each slot (0 for padding slots)
	slot    []int32 // [N*K]: each token's choice -> its slot a*C + c
}

// groupTokens sorts the N tokens' K expert choices (ids [N*K]) into groups
// by expert, in ascending expert order, tokens in ascending order within a
// group. Tokens for which skip returns true (left padding) are not
// computed: their slots point at slot 0. Capacity C is the largest group
// rounded up to a power of two; A is rounded up to a multiple of k (at most
// numExperts) with padding groups repeating the first active expert.
func groupTokens(ids []int32, n, k, numExperts int, skip func(token int) bool) (groups, error) {
	members := map[int][]int32{}
	for t := 0; t < n; t++ {
		if skip(t) {
			continue
		}
		for j := 0; j < k; j++ {
			e := int(ids[t*k+j])
			if e == -1 { // no expert (lm.Routing), weighed 0: its slot stays 0
				continue
			}
			if e < 0 || e >= numExperts {
				return groups{}, fmt.Errorf("router chose expert %d of %d", e, numExperts)
			}
			members[e] = append(members[e], int32(t))
		}
	}
	active := make([]int, 0, len(members))
	largest := 0
	for e, ts := range members {
		active = append(active, e)
		largest = max(largest, len(ts))
	}
	sort.Ints(active)
	if len(active) == 0 { // only padding: one idle group
		active, largest = []int{0}, 1
	}
	g := groups{c: 1}
	for g.c < largest {
		g.c *= 2
	}
	g.a = min(numExperts, roundUp(len(active), k))
	g.a = max(g.a, len(active))
	g.experts = make([]int, g.a)
	g.perm = make([]int32, g.a*g.c)
	g.slot = make([]int32, n*k)
	pos := map[[2]int]int32{} // (token, expert) -> slot
	for a := range g.experts {
		if a >= len(active) {
			g.experts[a] = active[0]
			continue
		}
		e := active[a]
		g.experts[a] = e
		for c, t := range members[e] {
			g.perm[a*g.c+c] = t
			pos[[2]int{int(t), e}] = int32(a*g.c + c)
		}
	}
	for t := 0; t < n; t++ {
		if skip(t) {
			continue
		}
		for j := 0; j < k; j++ {
			g.slot[t*k+j] = pos[[2]int{t, int(ids[t*k+j])}]
		}
	}
	return g, nil
}

// group reads a Route result's expert ids and groups the tokens of routed
// layer i for a step on st of t tokens per row starting at cache slot
// start.
func (r *Runner) group(st *State, i int, ids *tensors.Tensor, t, start int) (groups, error) {
	flat, err := tensors.CopyFlatData[int32](ids)
	if err != nil {
		return groups{}, err
	}
	ex := r.moe.experts[i]
	n := st.batch * t
	g, err := groupTokens(flat, n, ex.TopK, ex.Num, func(tok int) bool {
		return start+tok%t < int(st.pads[tok/t]) // left padding
	})
	if err != nil {
		return groups{}, fmt.Errorf("layer %d: %w", i, err)
	}
	return g, nil
}

// expertArgs are the experts piece's inputs after residual, input and
// weights: perm, slot and the A groups' expert weights.
func (r *Runner) expertArgs(i int, g groups, k int) []Arg {
	args := []Arg{
		{T: tensors.FromFlatDataAndDimensions(g.perm, g.a, g.c)},
		{T: tensors.FromFlatDataAndDimensions(g.slot, len(g.slot)/k, k)},
	}
	for _, e := range g.experts {
		for _, n := range r.moe.expertW[i][e] {
			args = append(args, Arg{T: r.weights[n]})
		}
	}
	return args
}

// runSegments runs one compiled-mode step of a routed model on st (its
// segments, grouping tokens on the host between them) and returns the
// logits.
func (r *Runner) runSegments(st *State, tokens, startT *tensors.Tensor, start int) (*tensors.Tensor, error) {
	mr := r.moe
	t := tokens.Shape().Dimensions[1]
	carry := []Arg{{T: tokens}} // the next segment's leading inputs
	for n, s := range mr.segments {
		args := append(carry, Arg{T: st.padsT}, Arg{T: startT})
		for _, l := range s.states {
			args = append(args, st.layerArgs(l)...)
		}
		outs, err := s.prog.Call(r.weightArgs(args, s.weights)...)
		if err != nil {
			return nil, fmt.Errorf("segment %d: %w", n, err)
		}
		lead := 1
		if s.to >= 0 {
			lead = 4
		}
		off := lead
		for _, l := range s.states {
			copy(st.tensors[l], outs[off:off+len(st.tensors[l])])
			off += len(st.tensors[l])
		}
		if s.to < 0 {
			return outs[0], nil
		}
		if carry, err = r.expertsInputs(st, s.to, outs, t, start); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("compiled segments end without a head")
}

// runRoutedLayer runs routed layer i in eager mode: its Route program, the
// host grouping, then its experts program; it returns the new hidden
// states.
func (r *Runner) runRoutedLayer(st *State, i int, x, startT *tensors.Tensor, t, start int) (*tensors.Tensor, error) {
	mr := r.moe
	args := append([]Arg{{T: x, Donate: true}, {T: st.padsT}, {T: startT}}, st.layerArgs(i)...)
	outs, err := mr.routeProg[i].Call(r.weightArgs(args, mr.routeW[i])...)
	if err != nil {
		return nil, fmt.Errorf("layer %d: %w", i, err)
	}
	copy(st.tensors[i], outs[4:])
	eargs, err := r.expertsInputs(st, i, outs, t, start)
	if err != nil {
		return nil, err
	}
	eouts, err := mr.expertProg[i].Call(eargs...)
	if err != nil {
		return nil, fmt.Errorf("layer %d experts: %w", i, err)
	}
	return eouts[0], nil
}

// expertsInputs turns the outputs of routed layer i's Route (residual,
// input, experts, weights, ...) into the experts piece's inputs: it reads
// and frees the expert ids, groups the tokens, and returns residual, input
// and weights (donated) followed by expertArgs.
func (r *Runner) expertsInputs(st *State, i int, route []*tensors.Tensor, t, start int) ([]Arg, error) {
	g, err := r.group(st, i, route[2], t, start)
	route[2].FinalizeAll()
	if err != nil {
		return nil, err
	}
	return append([]Arg{{T: route[0], Donate: true}, {T: route[1], Donate: true}, {T: route[3], Donate: true}},
		r.expertArgs(i, g, r.moe.experts[i].TopK)...), nil
}
