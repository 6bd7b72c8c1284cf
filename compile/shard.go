package compile

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/tpu"
)

// Tensor and data parallelism over the devices of one backend (one host),
// with GoMLX's AutoSharding strategy (XLA Shardy): every program is the
// same single-device graph, its inputs and outputs carry sharding specs
// over a 2-D device mesh ["data", "model"] of DP x TP devices, and XLA
// partitions the computation and inserts the collectives.
//
// Layout (Megatron-style, on the Hugging Face [out, in] weights): each
// architecture declares the split of every weight (lm.WeightSpec.TP) and
// compile/ follows it without reading weight names:
//
//	lm.Column      [out, in] or [out]  split on axis 0 (heads, MLP columns)
//	               [E, out, in]        split on axis 1 (every expert's columns)
//	lm.Row         [out, in]           split on axis 1 (the partial sums are all-reduced)
//	               [E, out, in]        split on axis 2
//	lm.Vocab       [V, H]              split on axis 0 when V % TP == 0, else replicated
//	lm.KVColumn    [KV·D, in] or [KV·D] as Column when TP divides the KV heads; replicated
//	               when TP is a multiple of them (each device computes every KV head)
//	lm.Replicated  anything            whole on every device (also a Vocab weight Embed reads)
//	KV caches [B, KV, S, D], [B, KV, D, S] split on axis 1 (KV heads) when TP divides
//	                                      them, else whole; batch axis on "data"
//	other layer state                     batch axis on "data", otherwise replicated
//	tokens, pads, hidden, logits          batch axis on "data", otherwise replicated
//
// A replicated tensor is always correct (Shardy only moves data); the
// splits above are what make TP save memory and time.

// Mesh axis names.
const (
	MeshData  = "data"
	MeshModel = "model"
)

// ShardPlan is how a Runner's weights and state are laid out on a DP x TP
// device mesh.
type ShardPlan struct {
	TP, DP int
	Mesh   *distributed.DeviceMesh
	// Weights holds the spec of every weight of the model, by name.
	Weights map[string]*distributed.ShardingSpec
	// Split lists the weights that are split over "model", in weight
	// order; every other weight is replicated.
	Split []string

	spec *lm.Spec
}

// Parallel names the --tp and --dp flags in errors.
func parallelFlags(tp, dp int) string {
	if dp > 1 {
		return fmt.Sprintf("{TP} %d {DP} %d", tp, dp)
	}
	return fmt.Sprintf("{TP} %d", tp)
}

// CheckParallel validates a TP degree against a model: the attention heads,
// the KV heads and the MLP width must all split evenly. Errors wrap
// errs.ErrUsage and name the figures that do not divide.
func CheckParallel(spec *lm.Spec, tp, dp int) error {
	if tp < 1 {
		return &OptionError{Owner: "Options", Option: "TP", Value: tp, Want: "1 or more devices"}
	}
	if dp < 1 {
		return &OptionError{Owner: "Options", Option: "DP", Value: dp, Want: "1 or more devices"}
	}
	if tp == 1 {
		return nil
	}
	var bad []string
	if spec.Heads%tp != 0 {
		bad = append(bad, fmt.Sprintf("num_attention_heads %d", spec.Heads))
	}
	if spec.Intermediate > 0 && spec.Intermediate%tp != 0 {
		bad = append(bad, fmt.Sprintf("intermediate_size %d", spec.Intermediate))
	}
	if !kvSplits(spec.KVHeads, tp) && tp%spec.KVHeads != 0 {
		what := fmt.Sprintf("num_key_value_heads %d", spec.KVHeads)
		if len(bad) == 0 {
			return &OptionError{Owner: "Options", Option: "TP", Value: tp,
				Reason: fmt.Sprintf("%s must divide the TP degree or be a multiple of it (try %s)", what, suggestTP(spec, tp))}
		}
		bad = append(bad, what+" (or divide it)")
	}
	if len(bad) > 0 {
		return &OptionError{Owner: "Options", Option: "TP", Value: tp,
			Reason: fmt.Sprintf("%s must be multiples of the TP degree (try %s)", strings.Join(bad, ", "), suggestTP(spec, tp))}
	}
	return nil
}

// kvSplits reports whether TP degree tp splits kvHeads KV heads, whole
// heads per device; where it does not (tp a multiple of kvHeads, checked
// by CheckParallel), the KV projections (lm.KVColumn) and the KV caches
// are replicated.
func kvSplits(kvHeads, tp int) bool { return kvHeads%tp == 0 }

// suggestTP names the TP degrees below tp that the model allows.
func suggestTP(spec *lm.Spec, tp int) string {
	var ok []string
	for d := 1; d < tp; d *= 2 {
		if tpu.TPAllowed(d, spec.Heads, spec.KVHeads) && (spec.Intermediate == 0 || spec.Intermediate%d == 0) {
			ok = append(ok, fmt.Sprintf("{TP} %d", d))
		}
	}
	return strings.Join(ok, " or ")
}

// CheckDevices reports an errs.ErrDeviceUnavailable error when a backend
// with have devices cannot hold a DP x TP mesh.
func CheckDevices(backendName string, have, tp, dp int) error {
	if need := tp * dp; need > have {
		field, v, with := "TP", tp, ""
		switch {
		case dp > 1 && tp > 1:
			with = fmt.Sprintf("with {DP} %d, ", dp)
		case dp > 1:
			field, v = "DP", dp
		}
		return &OptionError{Owner: "Options", Option: field, Value: v, Kind: errs.ErrDeviceUnavailable,
			Reason: fmt.Sprintf("%sneeds %d devices, but the %s backend has %d (on a TPU VM every chip of the host is one device; the go backend has 1)",
				with, need, backendName, have)}
	}
	return nil
}

// splitAxis is the axis of w split over "model" at TP degree tp, or -1
// when w stays replicated. embed reports that Embed also reads w (a tied
// head stays replicated with the embeddings); kvWhole that the KV heads
// are replicated (lm.KVColumn weights with them).
func splitAxis(w lm.WeightSpec, tp int, embed, kvWhole bool) int {
	if w.TP == lm.KVColumn {
		if kvWhole {
			return -1
		}
		w.TP = lm.Column
	}
	switch {
	case tp == 1:
	case w.TP == lm.Column && len(w.Shape) == 3: // an expert stack [E, out, in]
		return 1
	case w.TP == lm.Column && len(w.Shape) >= 1:
		return 0
	case w.TP == lm.Row && (len(w.Shape) == 2 || len(w.Shape) == 3):
		return len(w.Shape) - 1
	case w.TP == lm.Vocab && !embed && len(w.Shape) == 2 && w.Shape[0]%tp == 0:
		return 0
	}
	return -1
}

// PlanShards builds the sharding specs of a model's weights for a DP x TP
// mesh from the split each weight declares (lm.WeightSpec.TP). It checks
// the model's head counts and MLP width (CheckParallel) and that every
// weight it splits has a multiple of TP on that axis.
func PlanShards(m lm.Model, tp, dp int) (*ShardPlan, error) {
	spec := m.Spec()
	if err := CheckParallel(spec, tp, dp); err != nil {
		return nil, err
	}
	mesh, err := distributed.NewDeviceMesh([]int{dp, tp}, []string{MeshData, MeshModel})
	if err != nil {
		return nil, fmt.Errorf("device mesh %dx%d: %w", dp, tp, err)
	}
	p := &ShardPlan{TP: tp, DP: dp, Mesh: mesh, Weights: map[string]*distributed.ShardingSpec{}, spec: spec}
	embed := map[string]bool{}
	for _, w := range m.EmbedWeights() {
		embed[w.Name] = true
	}
	var ws []lm.WeightSpec
	for _, w := range lm.Weights(m) {
		// A weight assembled from parts (an expert stack) may be held as
		// its parts (--experts dense or host): they carry their own split.
		ws = append(append(ws, w), w.Parts...)
	}
	for _, w := range ws {
		axis := splitAxis(w, tp, embed[w.Name], !kvSplits(spec.KVHeads, tp))
		if axis < 0 {
			p.Weights[w.Name] = distributed.NewReplicatedShardingSpec(mesh)
			continue
		}
		if w.Shape[axis]%tp != 0 {
			return nil, &OptionError{Owner: "Options", Option: "TP", Value: tp,
				Reason: fmt.Sprintf("tensor %s has shape %v; its axis %d (%d) is not a multiple of %d", w.Name, w.Shape, axis, w.Shape[axis], tp)}
		}
		axes := make([]distributed.AxisSpec, axis+1)
		axes[axis] = distributed.AxisSpec{MeshModel}
		s, err := distributed.NewShardingSpec(mesh, axes...)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		p.Weights[w.Name] = s
		p.Split = append(p.Split, w.Name)
	}
	return p, nil
}

// NumDevices is DP x TP.
func (p *ShardPlan) NumDevices() int { return p.TP * p.DP }

// Weight returns the spec of a weight (replicated for a name the plan does
// not know).
func (p *ShardPlan) Weight(name string) *distributed.ShardingSpec {
	if s, ok := p.Weights[name]; ok {
		return s
	}
	return p.Replicated()
}

// Replicated is the spec of a tensor every device holds whole.
func (p *ShardPlan) Replicated() *distributed.ShardingSpec {
	return distributed.NewReplicatedShardingSpec(p.Mesh)
}

// Batch is the spec of a batch-first tensor (tokens, pads, hidden states,
// logits): axis 0 over "data", the rest replicated.
func (p *ShardPlan) Batch() *distributed.ShardingSpec {
	if p.DP == 1 {
		return p.Replicated()
	}
	return &distributed.ShardingSpec{Mesh: p.Mesh, Axes: []distributed.AxisSpec{{MeshData}}}
}

// State returns the spec of a layer state tensor: KV caches ("key" and
// "value" of rank 4 with the KV heads on axis 1) and their int8 scales
// ("key_scale", "value_scale", rank 3) are split by KV head over "model"
// where TP divides the KV heads (else whole on every device, as their
// projections are); every state's batch axis (0) goes over "data".
func (p *ShardPlan) State(s lm.StateSpec) *distributed.ShardingSpec {
	var axes []distributed.AxisSpec
	if p.DP > 1 && len(s.Shape) >= 1 {
		axes = []distributed.AxisSpec{{MeshData}}
	}
	if p.TP > 1 && kvSplits(p.spec.KVHeads, p.TP) && s.ByKVHead(p.spec.KVHeads) {
		if len(axes) == 0 {
			axes = []distributed.AxisSpec{distributed.ReplicatedAxis}
		}
		axes = append(axes, distributed.AxisSpec{MeshModel})
	}
	return &distributed.ShardingSpec{Mesh: p.Mesh, Axes: axes}
}

// HostStateBytes is the host memory m's layer state takes while a runner
// with TP and DP devices allocates it (batch sequences, cacheLen
// positions): every device's shard is built on the host before its
// upload, so a tensor split over the devices counts once and one they
// all hold whole (recurrent state; KV caches above the KV heads) counts
// once a device. With one device, or a plan the runner would refuse,
// it is lm.StateBytes.
func HostStateBytes(m lm.Model, tp, dp, batch, cacheLen int, dtype, kv dtypes.DType) (int64, bool) {
	if tp*dp <= 1 {
		return lm.StateBytes(m, batch, cacheLen, dtype, kv)
	}
	p, err := PlanShards(m, tp, dp)
	if err != nil {
		return lm.StateBytes(m, batch, cacheLen, dtype, kv)
	}
	var shards []lm.StateSpec // one device's
	for i := 0; i < m.Spec().Layers; i++ {
		for _, s := range lm.HeldState(m, i, batch, cacheLen, kv) {
			dims, err := ShardShape(p.State(s), s.Shape)
			if err != nil {
				return lm.StateBytes(m, batch, cacheLen, dtype, kv)
			}
			s.Shape = dims
			shards = append(shards, s)
		}
	}
	n, ok := lm.SpecsBytes(shards, dtype, kv)
	if devices := int64(tp * dp); !ok || n > math.MaxInt64/devices {
		return 0, false
	}
	return n * int64(tp*dp), true
}

// ShardShape is the shape one device holds of a tensor of logical shape
// dims under spec (axes beyond the spec are replicated). It fails when an
// axis does not divide.
func ShardShape(spec *distributed.ShardingSpec, dims []int) ([]int, error) {
	out := append([]int(nil), dims...)
	if len(spec.Axes) > len(dims) {
		return nil, fmt.Errorf("sharding %s has more axes than the tensor's shape %v", spec, dims)
	}
	for i := range spec.Axes {
		n := spec.NumDevicesShardingAxis(i)
		if dims[i]%n != 0 {
			return nil, fmt.Errorf("shape %v: axis %d (%d) does not split over %d devices", dims, i, dims[i], n)
		}
		out[i] = dims[i] / n
	}
	return out, nil
}

// ---- sharded programs

// shardedArg is one input of a sharded program: one tensor per device, in
// mesh order (device d = data index * TP + model index).
type shardedArg struct {
	shards []*tensors.Tensor
	donate bool
}

// newShardedProgram is NewProgram for an AutoSharding executable over
// plan's mesh with the given input and output specs (one per input and
// output of fn).
func newShardedProgram(backend backends.Backend, name string, plan *ShardPlan, in, out []*distributed.ShardingSpec,
	fn func([]*graph.Node) []*graph.Node) (*Program, error) {
	checked := func(nodes []*graph.Node) []*graph.Node {
		// graph.Exec reuses the last spec for inputs and outputs beyond the
		// lists, so a miscount would silently shard the wrong tensors.
		if len(nodes) != len(in) {
			panic(fmt.Errorf("sharded program %q: %d inputs but %d input specs", name, len(nodes), len(in)))
		}
		outs := fn(nodes)
		if len(outs) != len(out) {
			panic(fmt.Errorf("sharded program %q: %d outputs but %d output specs", name, len(outs), len(out)))
		}
		return outs
	}
	p, err := NewProgram(backend, name, checked)
	if err != nil {
		return nil, err
	}
	if err := p.sharded(func(e *graph.Exec) {
		e.AutoSharding(plan.Mesh).WithInputShardingSpecs(in...).WithOutputShardingSpecs(out...)
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// flattenArgs orders per-device inputs as graph.Exec wants them for a
// distributed executable: every input of device 0, then of device 1, ...
// pick chooses the value handed over for (input, device).
func flattenArgs(args []shardedArg, nDev int, pick func(a shardedArg, d int) (any, error)) ([]any, error) {
	out := make([]any, 0, nDev*len(args))
	for d := 0; d < nDev; d++ {
		for i, a := range args {
			if len(a.shards) != nDev {
				return nil, fmt.Errorf("input #%d has %d shards for %d devices", i, len(a.shards), nDev)
			}
			v, err := pick(a, d)
			if err != nil {
				return nil, fmt.Errorf("input #%d on device %d: %w", i, d, err)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// regroupOutputs turns graph.Exec's device-major outputs into one list of
// shards (one per device) per output.
func regroupOutputs(flat []*tensors.Tensor, nDev int) ([][]*tensors.Tensor, error) {
	if nDev < 1 || len(flat)%nDev != 0 {
		return nil, fmt.Errorf("%d outputs do not split over %d devices", len(flat), nDev)
	}
	n := len(flat) / nDev
	out := make([][]*tensors.Tensor, n)
	for j := range out {
		out[j] = make([]*tensors.Tensor, nDev)
		for d := 0; d < nDev; d++ {
			out[j][d] = flat[d*n+j]
		}
	}
	return out, nil
}

// shardKey identifies an executable of a sharded program: the shapes of
// device 0's inputs (every device's are the same).
func shardKey(args []shardedArg) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a.shards[0].Shape().String())
	}
	return b.String()
}

// callSharded runs a sharded program, compiling it first for new shapes,
// and returns each output's shards.
func (p *Program) callSharded(nDev int, args []shardedArg) (outs [][]*tensors.Tensor, err error) {
	defer p.recoverInto(&err)
	plain, err := flattenArgs(args, nDev, func(a shardedArg, d int) (any, error) { return a.shards[d], nil })
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", p.name, err)
	}
	key := shardKey(args)
	if _, err := p.compileFor(key, func() error {
		if err := p.exec.PreCompile(plain...); err != nil {
			return err
		}
		p.mu.Lock()
		p.exes[key] = nil
		p.mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	in, err := flattenArgs(args, nDev, func(a shardedArg, d int) (any, error) {
		if !a.donate {
			return a.shards[d], nil
		}
		return graph.DonateTensorBuffer(a.shards[d], p.backend, backends.DeviceNum(d))
	})
	if err != nil {
		return nil, fmt.Errorf("program %q: donating: %w", p.name, err)
	}
	start := time.Now()
	flat, err := p.exec.Exec(in...)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", p.name, err)
	}
	p.mu.Lock()
	p.stats.Run += time.Since(start)
	p.mu.Unlock()
	return regroupOutputs(flat, nDev)
}

// ---- the Runner on a mesh

// tpRun is the state of a Runner that runs on several devices.
type tpRun struct {
	plan *ShardPlan
	nDev int
	// weights holds each weight's shards, by name.
	weights map[string][]*tensors.Tensor
	// specs holds each program's input and output specs, by name.
	specs map[string]programSpecs
}

type programSpecs struct{ in, out []*distributed.ShardingSpec }

// setupParallel prepares DP x TP execution when Options ask for more than
// one device: it plans the shards (usage errors for sizes that do not
// split), checks the backend's device count (device errors) and keeps
// every weight in the [out, in] layout the specs describe.
func (r *Runner) setupParallel() error {
	tp, dp := max(r.opts.TP, 1), max(r.opts.DP, 1)
	if r.opts.TP < 0 || r.opts.DP < 0 {
		return CheckParallel(r.spec, r.opts.TP, r.opts.DP)
	}
	if tp*dp == 1 {
		return nil
	}
	if _, ok := r.expertModel(); ok && r.opts.Experts == ExpertsHost {
		return &OptionError{Owner: "Options", Option: "Experts", Value: r.opts.Experts, Kind: errs.ErrUnsupported,
			Reason: fmt.Sprintf("%s cannot run its host-routed experts with %s (its tokens are grouped on the host between pieces that are not split over devices); use {Experts} graph or dense",
				r.spec.Architecture, parallelFlags(tp, dp))}
	}
	plan, err := PlanShards(r.model, tp, dp)
	if err != nil {
		return err
	}
	if err := CheckDevices(r.backend.Name(), r.backend.NumDevices(), tp, dp); err != nil {
		return err
	}
	r.tp = &tpRun{plan: plan, nDev: tp * dp, weights: map[string][]*tensors.Tensor{}, specs: map[string]programSpecs{}}
	r.opts.SplitMatmul, r.opts.BlockCols = 1, -1
	return nil
}

// makeShardedPrograms creates the programs of the chosen mode as
// AutoSharding executables, then splits the weights into per-device
// shards.
func (r *Runner) makeShardedPrograms() error {
	p := r.tp.plan
	specsOf := func(names []string) []*distributed.ShardingSpec {
		out := make([]*distributed.ShardingSpec, len(names))
		for i, n := range names {
			out[i] = p.Weight(n)
		}
		return out
	}
	stateSpecs := func(i int) []*distributed.ShardingSpec {
		var out []*distributed.ShardingSpec
		for _, s := range lm.HeldState(r.model, i, p.DP, 1, r.opts.KVDType) {
			out = append(out, p.State(s))
		}
		return out
	}
	batch, repl := p.Batch(), p.Replicated()
	add := func(name string, in, out []*distributed.ShardingSpec, fn func([]*graph.Node) []*graph.Node) (*Program, error) {
		prog, err := newShardedProgram(r.backend, name, p, in, out, fn)
		if err != nil {
			return nil, err
		}
		r.addProgram(prog)
		r.tp.specs[name] = programSpecs{in, out}
		return prog, nil
	}
	var err error
	if r.opts.Mode == Compiled {
		in := []*distributed.ShardingSpec{batch, batch, repl}
		out := []*distributed.ShardingSpec{batch}
		for i := 0; i < r.spec.Layers; i++ {
			in = append(in, stateSpecs(i)...)
			out = append(out, stateSpecs(i)...)
		}
		in = append(in, specsOf(r.all)...)
		if r.prefill, err = add("prefill", in, out, r.stepGraph); err != nil {
			return err
		}
		if r.decode, err = add("decode", in, out, r.stepGraph); err != nil {
			return err
		}
	} else {
		if r.embed, err = add("embed", append([]*distributed.ShardingSpec{batch}, specsOf(r.embedW)...),
			[]*distributed.ShardingSpec{batch}, r.embedGraph); err != nil {
			return err
		}
		bySig := map[string]*Program{}
		r.layerProg = make([]*Program, r.spec.Layers)
		for i := 0; i < r.spec.Layers; i++ {
			sig := r.signature(i, r.layerW[i])
			prog, ok := bySig[sig]
			if !ok {
				rep := i
				in := append([]*distributed.ShardingSpec{batch, batch, repl}, stateSpecs(r.stateSrc[i])...)
				in = append(in, specsOf(r.layerW[i])...)
				out := append([]*distributed.ShardingSpec{batch}, stateSpecs(i)...)
				name := fmt.Sprintf("layer/%s#%d", r.model.LayerKind(i), len(bySig))
				if prog, err = add(name, in, out, func(n []*graph.Node) []*graph.Node { return r.layerGraph(rep, n) }); err != nil {
					return err
				}
				bySig[sig] = prog
			}
			r.layerProg[i] = prog
		}
		if r.head, err = add("head", append([]*distributed.ShardingSpec{batch}, specsOf(r.headW)...),
			[]*distributed.ShardingSpec{batch}, r.headGraph); err != nil {
			return err
		}
	}
	return r.shardWeights()
}

// shardWeights splits every weight on the host by its spec; each shard is
// uploaded to its device at the first call and stays there.
func (r *Runner) shardWeights() error {
	for _, name := range r.all {
		t := r.weights[name]
		st, err := distributed.ShardTensor(r.tp.plan.Weight(name), t)
		if err != nil {
			return fmt.Errorf("sharding %s: %w", name, err)
		}
		r.tp.weights[name] = st.Shards()
		t.FinalizeAll()
		delete(r.weights, name)
	}
	return nil
}

// shardHost splits a host tensor by spec (replicated axes are copied).
func (r *Runner) shardHost(spec *distributed.ShardingSpec, t *tensors.Tensor) (shardedArg, error) {
	st, err := distributed.ShardTensor(spec, t)
	if err != nil {
		return shardedArg{}, err
	}
	return shardedArg{shards: st.Shards()}, nil
}

// allocShardedState allocates zero-filled layer state directly as shards:
// layer i's tensors hold state k on device d at k*nDev+d.
func (r *Runner) allocShardedState(batch, cacheLen int) ([][]*tensors.Tensor, error) {
	p := r.tp.plan
	if batch%p.DP != 0 {
		return nil, &OptionError{Owner: "Options", Option: "DP", Value: p.DP, Reason: fmt.Sprintf("a batch of %d prompts does not split evenly over %d devices", batch, p.DP)}
	}
	out := make([][]*tensors.Tensor, r.spec.Layers)
	for i := range out {
		for _, s := range lm.HeldState(r.model, i, batch, cacheLen, r.opts.KVDType) {
			dims, err := ShardShape(p.State(s), s.Shape)
			if err != nil {
				return nil, fmt.Errorf("layer %d state %s: %w", i, s.Name, err)
			}
			for d := 0; d < r.tp.nDev; d++ {
				out[i] = append(out[i], tensors.FromShape(shapes.Make(r.stateDType(s), dims...)))
			}
		}
	}
	return out, nil
}

// runSharded is run's body on a mesh: it shards the step inputs, calls the
// compiled step (or the eager pieces) on st and returns the logits [B, V]
// on the host.
func (r *Runner) runSharded(st *State, compiled *Program, tokens, start *tensors.Tensor) (*tensors.Tensor, error) {
	p := r.tp.plan
	nDev := r.tp.nDev
	tok, err := r.shardHost(p.Batch(), tokens)
	if err != nil {
		return nil, err
	}
	pd, err := r.shardHost(p.Batch(), st.padsT)
	if err != nil {
		return nil, err
	}
	at, err := r.shardHost(p.Replicated(), start)
	if err != nil {
		return nil, err
	}
	defer finalizeShards(pd.shards)
	defer finalizeShards(at.shards)
	weights := func(names []string) []shardedArg {
		out := make([]shardedArg, len(names))
		for i, n := range names {
			out[i] = shardedArg{shards: r.tp.weights[n]}
		}
		return out
	}
	// state is layer i's own state, donated, or with read the state layer i
	// reads: the state of the layer it shares (lm.StateSharer), not
	// donated.
	state := func(i int, read bool) []shardedArg {
		src := i
		if read {
			src = r.stateSrc[i]
		}
		n := len(st.tensors[src]) / nDev
		out := make([]shardedArg, n)
		for k := range out {
			out[k] = shardedArg{shards: st.tensors[src][k*nDev : (k+1)*nDev], donate: src == i}
		}
		return out
	}
	keep := func(i int, outs [][]*tensors.Tensor) {
		for k, sh := range outs {
			copy(st.tensors[i][k*nDev:(k+1)*nDev], sh)
		}
	}
	if r.opts.Mode == Compiled {
		args := []shardedArg{tok, pd, at}
		for i := range st.tensors {
			args = append(args, state(i, false)...)
		}
		args = append(args, weights(r.all)...)
		outs, err := compiled.callSharded(nDev, args)
		finalizeShards(tok.shards)
		if err != nil {
			return nil, err
		}
		off := 1
		for i := range st.tensors {
			n := len(st.tensors[i]) / nDev
			keep(i, outs[off:off+n])
			off += n
		}
		return r.gatherRows(outs[0])
	}
	outs, err := r.embed.callSharded(nDev, append([]shardedArg{tok}, weights(r.embedW)...))
	finalizeShards(tok.shards)
	if err != nil {
		return nil, err
	}
	x := outs[0]
	for i := 0; i < r.spec.Layers; i++ {
		args := append([]shardedArg{{shards: x, donate: true}, pd, at}, state(i, true)...)
		outs, err := r.layerProg[i].callSharded(nDev, append(args, weights(r.layerW[i])...))
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		x = outs[0]
		keep(i, outs[1:])
	}
	outs, err = r.head.callSharded(nDev, append([]shardedArg{{shards: x, donate: true}}, weights(r.headW)...))
	if err != nil {
		return nil, err
	}
	return r.gatherRows(outs[0])
}

// gatherRows assembles batch-first [B, ...] float32 logits from their
// shards: with DP the rows of data index i are on device i*TP; the other
// devices hold copies.
func (r *Runner) gatherRows(shards []*tensors.Tensor) (*tensors.Tensor, error) {
	p := r.tp.plan
	defer finalizeShards(shards)
	var rows []float32
	dims := append([]int(nil), shards[0].Shape().Dimensions...)
	for i := 0; i < p.DP; i++ {
		flat, err := tensors.CopyFlatData[float32](shards[i*p.TP])
		if err != nil {
			return nil, err
		}
		rows = append(rows, flat...)
	}
	dims[0] *= p.DP
	return tensors.FromFlatDataAndDimensions(rows, dims...), nil
}

func finalizeShards(ts []*tensors.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.FinalizeAll()
		}
	}
}

// closeSharded frees the weight shards.
func (r *Runner) closeSharded() {
	if r.tp == nil {
		return
	}
	for _, sh := range r.tp.weights {
		finalizeShards(sh)
	}
	r.tp.weights = nil
}

// Parallel describes how a Runner is spread over devices, for reports.
type Parallel struct {
	TP      int `json:"tp"`
	DP      int `json:"dp"`
	Devices int `json:"devices"`
	// Split is the number of weights split over the model axis.
	Split int `json:"split_weights"`
}

// Parallel returns the Runner's device layout (TP = DP = 1 on one device).
func (r *Runner) Parallel() Parallel {
	if r.tp == nil {
		return Parallel{TP: 1, DP: 1, Devices: 1}
	}
	return Parallel{TP: r.tp.plan.TP, DP: r.tp.plan.DP, Devices: r.tp.nDev, Split: len(r.tp.plan.Split)}
}
