package compile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/tpu"
)

// Mode is how a Runner turns the model's graph pieces into executables.
type Mode int

const (
	// Compiled builds the whole prefill step and the whole decode step as
	// one graph each (embedding, every layer, head): one executable call
	// per step.
	Compiled Mode = iota
	// Eager builds one executable per piece (embedding, one per layer kind
	// shared by every layer of that kind with weights passed as inputs,
	// head) and dispatches them one after another, as op-by-op execution
	// does on a TPU.
	Eager
)

func (m Mode) String() string {
	if m == Eager {
		return "eager"
	}
	return "compiled"
}

// ParseMode reads "compiled" or "eager".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "compiled", "":
		return Compiled, nil
	case "eager":
		return Eager, nil
	}
	return 0, &OptionError{Owner: "Options", Option: "Mode", Value: strconv.Quote(s), Want: "compiled or eager"}
}

// Options configure a Runner.
type Options struct {
	Mode Mode
	// DType is the compute dtype: Float32 (the default) or BFloat16.
	// Weights are converted on the host once, except Matmul weights that
	// the backend multiplies in their checkpoint dtype (weights.go).
	DType dtypes.DType
	// Quantize is "" (weights as floats), "int8" or "int4": Matmul weights
	// are held as int8 with per-group scales, or as int4 with coded
	// per-block scales (weights.go).
	Quantize string
	// CacheLen fixes the static cache length; 0 picks it at each Prefill
	// from the prompt bucket plus the tokens to generate (CacheBucket).
	CacheLen int
	// SplitMatmul is the number of row parts of Matmul weights (see
	// lm.WeightSpec.Matmul and nn.Blocked): 1 keeps every weight [out, in];
	// 0 picks automatically (on the pure-Go backend, parts of at most 1024
	// rows and enough blocks for every core; elsewhere [out, in]).
	SplitMatmul int
	// BlockCols is the column block of Matmul weights (nn.Blocked.C): 0
	// picks automatically (64 on the pure-Go backend), -1 keeps whole rows.
	BlockCols int
	// OnRecompile is called when a call after a program's first one needs
	// a new executable (new input shapes); cmd turns it into a warning.
	OnRecompile func(program, shapes string)
	// Experts is how the mixture-of-experts layers of lm.Routed models
	// run: the model's own in-graph formulation by default (see
	// ExpertsMode).
	Experts ExpertsMode
	// KVDType is the dtype the KV caches are held in (lm.StateSpec.KV):
	// InvalidDType holds them in the compute dtype; BFloat16 under f32
	// compute halves their memory and the bytes attention reads, new keys
	// and values rounded to bf16 as they are written; Int8 holds each new
	// key and value as int8 with one f32 scale per slot and KV head (its
	// largest magnitude over 127), about a quarter of f32's bytes, with the
	// scales as state of their own (lm.HeldState).
	KVDType dtypes.DType
	// TP and DP spread the model over TP x DP devices of the backend
	// (tensor parallel over heads and MLP columns, data parallel over the
	// batch) with AutoSharding; 0 and 1 mean one device. See shard.go.
	TP, DP int
	// Caps are the backend's facts as the device decided them when it
	// opened (tpu.Device.Capabilities); nil reads them from the backend.
	Caps *tpu.Capabilities
}

// ExpertsMode is a formulation of the routed experts of lm.Routed models.
type ExpertsMode string

const (
	// ExpertsInGraph builds mixture-of-experts layers with Model.Layer, the
	// model's own formulation in one graph (Qwen MoE: the chosen experts'
	// stacked matrices gathered by index, nn.GatheredExperts): no host
	// round trip, one executable per shape bucket.
	ExpertsInGraph ExpertsMode = ""
	// ExpertsHost groups tokens by expert on the host between two graph
	// pieces and runs each active expert once on its group (moe.go).
	ExpertsHost ExpertsMode = "host"
	// ExpertsDense runs every expert on every token in one graph, weighted
	// by the routing mask (nn.DenseExperts): the naive baseline.
	ExpertsDense ExpertsMode = "dense"
)

// ParseExpertsMode reads an experts formulation by name: "graph" (or
// ""), "host" or "dense".
func ParseExpertsMode(s string) (ExpertsMode, error) {
	switch s {
	case "", "graph":
		return ExpertsInGraph, nil
	case "host", "dense":
		return ExpertsMode(s), nil
	}
	return "", &OptionError{Owner: "Options", Option: "Experts", Value: strconv.Quote(s), Want: "graph, host or dense"}
}

// String is the mode's name as ParseExpertsMode reads it.
func (m ExpertsMode) String() string {
	if m == ExpertsInGraph {
		return "graph"
	}
	return string(m)
}

// PromptBucket rounds a prompt length up so that prefill shapes repeat:
// powers of two up to 64 (at least 8), then multiples of 64.
func PromptBucket(n int) int { return bucket(n, 8, 64, 64) }

// CacheBucket rounds a cache length up: powers of two up to 512 (at least
// 32), then multiples of 256.
func CacheBucket(n int) int { return bucket(n, 32, 512, 256) }

// bucket rounds n up to a power of two (at least lo) while that is at
// most hi, and beyond hi to a multiple of step.
func bucket(n, lo, hi, step int) int {
	if n > hi {
		return roundUp(n, step)
	}
	b := lo
	for b < n {
		b *= 2
	}
	return b
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// Runner is a model compiled for a backend: its weights as held (converted,
// quantised or sharded once, at NewRunner), the programs of its execution
// mode and the facts derived from the model. It is immutable after NewRunner
// (Programs only add executables to their shape-keyed caches, windowed
// prefill adds programs, under a lock, and NewBatch marks a runner it
// takes as reading whole caches), so any
// number of States may run on it, one step at a time: a generation's,
// chat's session, the server's decode batch, its prefills and its prefix
// cache each own their States (state.go).
//
// Every step takes the State it works on: State.Begin / PrefillChunk /
// Decode call Runner.run(st, ...), which hands the state's tensors to the
// step's executable as donated inputs and keeps its outputs as the new
// state, so KV caches are updated in place on the device.
type Runner struct {
	backend backends.Backend
	model   lm.Model
	spec    *lm.Spec
	opts    Options
	dus     bool
	gather  bool // routed experts always gathered: the backend computes in host memory (lm.Step.GatherExperts)

	weights   map[string]*tensors.Tensor
	fp8Blocks map[string][2]int // the block of each weight held as FP8 (holdFP8)
	keepF32   map[string]bool   // weights held and read in float32 (lm.WeightSpec.F32)
	all       []string          // every weight, in lm.Weights order (compiled mode inputs)
	embedW    []string
	headW     []string
	layerW    [][]string
	numStates []int          // per layer: the states it keeps (0 for a layer that shares another's)
	stateSrc  []int          // per layer: the layer whose state it reads (lm.StateSource)
	slotAxes  [][]int        // per layer and state: lm.StateSpec.SlotAxis
	slotted   []slottedState // the states with a slot axis, in layer and state order

	prefill, decode *Program     // compiled mode
	win             windows      // compiled mode: the prefill's windowed programs (window.go)
	wholeCache      bool         // set by NewBatch, which owns the runner: no windows (window.go)
	emb             embedProgs   // Embed's program (embed.go)
	score           scoreProgs   // Score's program (score.go)
	lp              logprobProgs // PromptLogprobs' programs (logprobs.go)
	many            manyProgs    // DecodeMany's program (speculate.go)
	embed, head     *Program     // eager mode
	layerProg       []*Program   // eager mode, per layer (shared per kind)
	grow            *Program     // grow-cache (grow.go)
	argmax          *Program     // each row's argmax of a step's logits (State.DecodeArgmax)
	mu              sync.Mutex   // guards programs: windowed prefill and Embed add to them while States run
	programs        []*Program   // all, for Stats
	warming         atomic.Bool  // a Batch warms up: recompiles are not reported
	moe             *moeRun      // host-routed experts (lm.Routed), nil otherwise
	tp              *tpRun       // several devices (Options.TP/DP), nil otherwise
	mtp             *mtpRun      // the multi-token-prediction head (lm.MTPModel), nil otherwise (mtp.go)
	mtpDropped      bool         // the model had a head the runner cannot draft with (dropUnusableMTP)
}

// NewRunner prepares a model for execution on backend: it validates the
// compute dtype against the backend, converts and uploads the weights
// (once), and creates the programs of the chosen mode. Executables are
// compiled at the first call with each shape.
func NewRunner(backend backends.Backend, l *lm.Loaded, opts Options) (*Runner, error) {
	if opts.DType == dtypes.InvalidDType {
		opts.DType = dtypes.Float32
	}
	if opts.Caps == nil {
		caps := tpu.CapabilitiesOf(backend)
		opts.Caps = &caps
	}
	switch opts.DType {
	case dtypes.Float32:
	case dtypes.BFloat16:
		if !opts.Caps.BFloat16 {
			return nil, &OptionError{Owner: "Options", Option: "DType", Value: opts.DType, Kind: errs.ErrUnsupported, Reason: "not supported by backend " + backend.Name()}
		}
	default:
		return nil, &OptionError{Owner: "Options", Option: "DType", Value: opts.DType, Kind: errs.ErrUnsupported, Reason: "not supported (use float32 or bfloat16)"}
	}
	switch opts.KVDType {
	case dtypes.InvalidDType, dtypes.Float32, dtypes.Int8:
	case dtypes.BFloat16:
		if !opts.Caps.BFloat16 {
			return nil, &OptionError{Owner: "Options", Option: "KVDType", Value: opts.KVDType, Kind: errs.ErrUnsupported, Reason: "a KV cache in it is not supported by backend " + backend.Name()}
		}
	default:
		return nil, &OptionError{Owner: "Options", Option: "KVDType", Value: opts.KVDType, Kind: errs.ErrUnsupported, Reason: "not supported (use float32, bfloat16 or int8)"}
	}
	if ig, ok := l.Model.(lm.InGraphExperts); ok && opts.Experts != ExpertsInGraph {
		return nil, &OptionError{Owner: "Options", Option: "Experts", Value: opts.Experts, Kind: errs.ErrUnsupported,
			Reason: fmt.Sprintf("%s runs its experts only in the graph (%s); use {Experts} graph", l.Model.Spec().Architecture, ig.InGraphExperts())}
	}
	r := &Runner{
		backend: backend, model: l.Model, spec: l.Model.Spec(), opts: opts,
		dus:     opts.Caps.DynamicUpdateSlice,
		gather:  opts.Caps.HostMemory,
		weights: map[string]*tensors.Tensor{},
	}
	if err := r.declareState(); err != nil {
		return nil, err
	}
	if _, routed := r.routedModel(); routed && r.sharesState() {
		return nil, &OptionError{Owner: "Options", Option: "Experts", Value: opts.Experts, Kind: errs.ErrUnsupported,
			Reason: fmt.Sprintf("%s has layers that share another layer's KV cache, which host-routed experts do not run; use {Experts} graph", r.spec.Architecture)}
	}
	if err := r.setupParallel(); err != nil {
		return nil, err
	}
	if err := r.loadWeights(l); err != nil {
		return nil, err
	}
	r.setupMTP()
	if err := r.makePrograms(); err != nil {
		return nil, err
	}
	r.dropUnusableMTP()
	var err error
	if r.argmax, err = r.newProgram("argmax", argmaxGraph); err != nil {
		return nil, err
	}
	return r, nil
}

// declareState reads each layer's state declaration once: how many
// tensors and their slot axes (lm.StateSpec.SlotAxis), checked, and which
// layer's state each layer reads (lm.StateSharer).
func (r *Runner) declareState() error {
	const probe = 64 // a cache length no other dimension is likely to equal
	if err := lm.CheckShared(r.model); err != nil {
		return fmt.Errorf("%s: %w", r.spec.Architecture, err)
	}
	r.numStates = make([]int, r.spec.Layers)
	r.stateSrc = make([]int, r.spec.Layers)
	r.slotAxes = make([][]int, r.spec.Layers)
	for i := range r.slotAxes {
		r.stateSrc[i] = lm.StateSource(r.model, i)
		for _, s := range lm.HeldState(r.model, i, 1, probe, r.opts.KVDType) {
			if err := lm.CheckState(i, s, probe); err != nil {
				return fmt.Errorf("%s: %w", r.spec.Architecture, err)
			}
			if s.SlotAxis != lm.NoSlots {
				r.slotted = append(r.slotted, slottedState{layer: i, k: len(r.slotAxes[i]), axis: s.SlotAxis})
			}
			r.slotAxes[i] = append(r.slotAxes[i], s.SlotAxis)
		}
		r.numStates[i] = len(r.slotAxes[i])
	}
	return nil
}

// sharesState reports a layer that reads another layer's state.
func (r *Runner) sharesState() bool {
	for i, src := range r.stateSrc {
		if src != i {
			return true
		}
	}
	return false
}

// slottedState is state k of a layer, whose slots lie along axis.
type slottedState struct{ layer, k, axis int }

// cacheLenOf is the cache length of a step whose state inputs are states
// (layers' tensors in order, from layer first): the length of the first
// slot axis, 0 when no state has slots (nothing then reads it). Graphs
// take it from their inputs' shapes, so an executable depends only on
// them.
func (r *Runner) cacheLenOf(first int, states []*graph.Node) int {
	k := 0
	for i := first; i < r.spec.Layers; i++ {
		for _, a := range r.slotAxes[i] {
			if k == len(states) {
				return 0
			}
			if a != lm.NoSlots {
				return states[k].Shape().Dimensions[a]
			}
			k++
		}
	}
	return 0
}

func (r *Runner) newProgram(name string, fn func([]*graph.Node) []*graph.Node) (*Program, error) {
	p, err := NewProgram(r.backend, name, fn)
	if err != nil {
		return nil, err
	}
	r.addProgram(p)
	return p, nil
}

// addProgram lists p among the runner's programs (for Stats and Close)
// and hooks it to Options.OnRecompile.
func (r *Runner) addProgram(p *Program) {
	if r.opts.OnRecompile != nil {
		p.OnRecompile = r.recompiled
	}
	r.mu.Lock()
	r.programs = append(r.programs, p)
	r.mu.Unlock()
}

// recompiled passes a program's recompilation on to Options.OnRecompile,
// except while a Batch warms up (every compile then is expected).
func (r *Runner) recompiled(program, shapes string) {
	if !r.warming.Load() {
		r.opts.OnRecompile(program, shapes)
	}
}

// allPrograms is a copy of the runner's programs.
func (r *Runner) allPrograms() []*Program {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.programs)
}

func (r *Runner) makePrograms() error {
	if rm, ok := r.routedModel(); ok {
		return r.makeRoutedPrograms(rm)
	}
	if r.tp != nil {
		return r.makeShardedPrograms()
	}
	var err error
	if r.opts.Mode == Compiled {
		if r.prefill, err = r.newProgram("prefill", r.stepGraph); err != nil {
			return err
		}
		r.decode, err = r.newProgram("decode", r.stepGraph)
		return err
	}
	return r.makeEager()
}

// makeEager creates the eager-mode programs: embed, one program per layer
// signature (layers of one kind with equal weight and state shapes share
// it), for the routed layers of an lm.Routed model one Route and one
// experts program per signature instead, and head.
func (r *Runner) makeEager() error {
	var err error
	if r.embed, err = r.newProgram("embed", r.embedGraph); err != nil {
		return err
	}
	L := r.spec.Layers
	r.layerProg = make([]*Program, L)
	mr := r.moe
	if mr != nil {
		mr.routeProg = make([]*Program, L)
		mr.expertProg = make([]*Program, L)
	}
	bySig := map[string]*Program{}
	get := func(sig, name string, fn func([]*graph.Node) []*graph.Node) (*Program, error) {
		if p, ok := bySig[sig]; ok {
			return p, nil
		}
		if r.hasProgramNamed(name) { // same kind, other shapes
			name = fmt.Sprintf("%s#%d", name, len(bySig))
		}
		p, err := r.newProgram(name, fn)
		if err != nil {
			return nil, err
		}
		bySig[sig] = p
		return p, nil
	}
	for i := 0; i < L; i++ {
		rep := i
		kind := r.model.LayerKind(i)
		if mr == nil || mr.experts[i] == nil {
			if r.layerProg[i], err = get("layer "+r.signature(i, r.layerW[i]), "layer/"+kind,
				func(in []*graph.Node) []*graph.Node { return r.layerGraph(rep, in) }); err != nil {
				return err
			}
			continue
		}
		if mr.routeProg[i], err = get("route "+r.signature(i, mr.routeW[i]), "route/"+kind,
			func(in []*graph.Node) []*graph.Node { return r.routeGraph(rep, in) }); err != nil {
			return err
		}
		if mr.expertProg[i], err = get("experts "+r.expertSignature(i), "experts",
			func(in []*graph.Node) []*graph.Node { return r.expertsGraph(rep, in) }); err != nil {
			return err
		}
	}
	r.head, err = r.newProgram("head", r.headGraph)
	return err
}

func (r *Runner) hasProgramNamed(name string) bool {
	for _, p := range r.allPrograms() {
		if p.Name() == name {
			return true
		}
	}
	return false
}

// signature is layer i's kind and variant (lm.Varianter) plus the shapes
// of the named weights and of the state it reads: layers with equal
// signatures share one eager executable.
func (r *Runner) signature(i int, weights []string) string {
	var b strings.Builder
	b.WriteString(r.model.LayerKind(i))
	if v, ok := r.model.(lm.Varianter); ok {
		if s := v.LayerVariant(i); s != "" {
			b.WriteString("/" + s)
		}
	}
	for _, n := range weights {
		fmt.Fprintf(&b, " %s", r.weights[n].Shape())
	}
	if r.stateSrc[i] != i {
		b.WriteString(" shared")
	}
	for _, s := range lm.HeldState(r.model, r.stateSrc[i], 1, 1, r.opts.KVDType) {
		fmt.Fprintf(&b, " %s%v", s.Name, s.Shape)
	}
	return b.String()
}

// step builds the lm.Step of a graph whose first token input is [B, T].
func (r *Runner) step(tokensShape shapes.Shape, pads, start *graph.Node, cacheLen int) *lm.Step {
	st := lm.NewStep(tokensShape.Dimensions[0], tokensShape.Dimensions[1], cacheLen, pads, start, r.dus)
	st.GatherExperts = r.gather
	return st
}

// lastPosition returns hidden states [B, T, H] at the last position: [B, H].
func lastPosition(x *graph.Node) *graph.Node {
	t := x.Shape().Dimensions[1]
	return graph.Squeeze(graph.SliceAxis(x, 1, graph.AxisElem(t-1)), 1) // [B, H]
}

// stepGraph is the compiled-mode graph of a whole step:
// inputs [tokens, pads, start, state..., weights...] ->
// outputs [logits [B, V] float32, state...].
func (r *Runner) stepGraph(in []*graph.Node) []*graph.Node { return r.stepGraphIn(0, in) }

// stepGraphIn is stepGraph with attention reading only the cache's first
// window slots (lm.Step.Window; 0: all of them), for windowed prefill
// (window.go).
func (r *Runner) stepGraphIn(window int, in []*graph.Node) []*graph.Node {
	x, w, out := r.stepLayers(window, in)
	out[0] = graph.ConvertDType(r.model.Head(w, lastPosition(x)), dtypes.Float32)
	return out
}

// finalGraph is stepGraph with the final hidden states of every position
// (lm.Finisher) for output, [B, T, Hidden] float32, in place of the
// logits: Embed's program.
func (r *Runner) finalGraph(in []*graph.Node) []*graph.Node {
	x, w, out := r.stepLayers(0, in)
	out[0] = graph.ConvertDType(r.model.(lm.Finisher).Final(w, x), dtypes.Float32)
	return out
}

// stepLayers builds a compiled step's embedding and layers, reading the
// cache's first window slots (0: all): the last hidden states [B, T, ...],
// the weights and the outputs with the new state from out[1] (out[0] is
// the caller's).
func (r *Runner) stepLayers(window int, in []*graph.Node) (*graph.Node, *lm.Params, []*graph.Node) {
	tokens, pads, start := in[0], in[1], in[2]
	nStates := 0
	for _, n := range r.numStates {
		nStates += n
	}
	states := in[3 : 3+nStates]
	w := r.params(r.all, in[3+nStates:])
	step := r.step(tokens.Shape(), pads, start, r.cacheLenOf(0, states))
	if window > 0 {
		step.Window = window
	}
	x := r.model.Embed(w, tokens)
	out := []*graph.Node{nil}
	newStates := make([][]*graph.Node, r.spec.Layers)
	off := 0
	for i := 0; i < r.spec.Layers; i++ {
		in := states[off : off+r.numStates[i]]
		off += r.numStates[i]
		if src := r.stateSrc[i]; src != i {
			in = newStates[src] // written by layer src this step
		}
		x, newStates[i] = r.layer(i, w, x, in, step)
		out = append(out, newStates[i]...)
	}
	return x, w, out
}

// embedGraph: [tokens, embed weights...] -> [hidden].
func (r *Runner) embedGraph(in []*graph.Node) []*graph.Node {
	return []*graph.Node{r.model.Embed(r.params(r.embedW, in[1:]), in[0])}
}

// layerGraph: [hidden, pads, start, state..., layer weights...] -> [hidden, state...]
// for the layers that share layer rep's signature. A layer that reads
// another's state (lm.StateSharer) takes that state and returns none.
func (r *Runner) layerGraph(rep int, in []*graph.Node) []*graph.Node {
	x, pads, start := in[0], in[1], in[2]
	src := r.stateSrc[rep]
	n := r.numStates[src]
	states := in[3 : 3+n]
	w := r.params(r.layerW[rep], in[3+n:])
	step := r.step(x.Shape(), pads, start, r.cacheLenOf(src, states))
	x, st := r.layer(rep, w, x, states, step)
	return append([]*graph.Node{x}, st...)
}

// finalHeadGraph: [hidden [B, T, H], head weights...] -> [final hidden
// states [B, T, Hidden] float32] (lm.Finisher), eager mode's head for Embed.
func (r *Runner) finalHeadGraph(in []*graph.Node) []*graph.Node {
	x := r.model.(lm.Finisher).Final(r.params(r.headW, in[1:]), in[0])
	return []*graph.Node{graph.ConvertDType(x, dtypes.Float32)}
}

// headGraph: [hidden [B, T, H], head weights...] -> [logits [B, V] float32].
func (r *Runner) headGraph(in []*graph.Node) []*graph.Node {
	logits := r.model.Head(r.params(r.headW, in[1:]), lastPosition(in[0]))
	return []*graph.Node{graph.ConvertDType(logits, dtypes.Float32)}
}

// weightArgs appends the named weights to args.
func (r *Runner) weightArgs(args []Arg, names []string) []Arg {
	for _, n := range names {
		args = append(args, Arg{T: r.weights[n]})
	}
	return args
}

// runCompiled runs the whole step as one executable on st and returns
// the logits.
func (r *Runner) runCompiled(st *State, compiled *Program, tokens, startT *tensors.Tensor) (*tensors.Tensor, error) {
	args := []Arg{{T: tokens}, {T: st.padsT}, {T: startT}}
	for _, layer := range st.tensors {
		for _, s := range layer {
			args = append(args, Arg{T: s, Donate: true})
		}
	}
	outs, err := compiled.Call(r.weightArgs(args, r.all)...)
	if err != nil {
		return nil, err
	}
	st.keepAll(outs[1:])
	return outs[0], nil
}

// runEager dispatches the embedding, each layer (the routed layers of an
// lm.Routed model as Route, host grouping and experts) and head (the
// logits' r.head, or Embed's final hidden states) as their own
// executables on st and returns head's output.
func (r *Runner) runEager(st *State, tokens, startT *tensors.Tensor, start int, head *Program) (*tensors.Tensor, error) {
	outs, err := r.embed.Call(r.weightArgs([]Arg{{T: tokens}}, r.embedW)...)
	if err != nil {
		return nil, err
	}
	x := outs[0]
	t := tokens.Shape().Dimensions[1]
	for i := 0; i < r.spec.Layers; i++ {
		if r.moe != nil && r.moe.experts[i] != nil {
			if x, err = r.runRoutedLayer(st, i, x, startT, t, start); err != nil {
				return nil, err
			}
			continue
		}
		args := append([]Arg{{T: x, Donate: true}, {T: st.padsT}, {T: startT}}, st.layerArgs(i)...)
		outs, err := r.layerProg[i].Call(r.weightArgs(args, r.layerW[i])...)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		x = outs[0]
		copy(st.tensors[i], outs[1:])
	}
	outs, err = head.Call(r.weightArgs([]Arg{{T: x, Donate: true}}, r.headW)...)
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

// Stats describes the executables and their cost so far.
type Stats struct {
	Mode     string         `json:"mode"`
	Programs []ProgramStats `json:"programs"`
	// Compile is the total compile time of all programs.
	Compile time.Duration `json:"compile_ns"`
	// Executables is the number of distinct executables compiled.
	Executables int `json:"executables"`
}

// Sum adds up the programs' statistics (its Name is empty).
func (s Stats) Sum() ProgramStats {
	var t ProgramStats
	for _, p := range s.Programs {
		t.Calls += p.Calls
		t.Hits += p.Hits
		t.Misses += p.Misses
		t.Compile += p.Compile
		t.Run += p.Run
	}
	return t
}

// Stats returns the statistics of every program.
func (r *Runner) Stats() Stats {
	s := Stats{Mode: r.opts.Mode.String()}
	for _, p := range r.allPrograms() {
		ps := p.Stats()
		s.Programs = append(s.Programs, ps)
		s.Compile += ps.Compile
		s.Executables += ps.Misses
	}
	return s
}

// CompileDuration is the total compile time so far (generate subtracts it
// from the evaluation durations).
func (r *Runner) CompileDuration() time.Duration { return r.Stats().Compile }

// Spec returns the model's spec.
func (r *Runner) Spec() *lm.Spec { return r.spec }

// Close frees the weights' device buffers and the executables. States
// are their owners' to release.
func (r *Runner) Close() {
	r.closeSharded()
	for _, t := range r.weights {
		t.FinalizeAll()
	}
	r.weights = nil
	for _, p := range r.allPrograms() {
		p.Finalize()
	}
}
