// Package compile runs graph-building functions on a GoMLX backend and owns
// the executable caches: Program compiles a graph function once per input
// shapes, keeps the backend's executables (not the graphs) with shape-keyed
// statistics and compile timing; Runner runs a pipeline/lm model in one of
// two execution modes (one executable per step, or one per layer kind
// dispatched op-by-op); GraphExecutor runs the diffusion models' keyed
// graphs (whole models or blocks) on one Program per key. See
// docs/compile.md.
package compile

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// MaxExecutables is the executable cache size of each Program (GoMLX's
// default is 32).
const MaxExecutables = 256

// Arg is one input of a Program call.
type Arg struct {
	T *tensors.Tensor
	// Donate hands the tensor's device buffer to the execution, which may
	// reuse it for an output (KV caches are updated in place). The tensor
	// is invalid afterwards.
	Donate bool
}

// ProgramStats counts a Program's calls and executables.
type ProgramStats struct {
	Name string `json:"name"`
	// Calls = Hits + Misses; a miss compiled a new executable.
	Calls  int `json:"calls"`
	Hits   int `json:"hits"`
	Misses int `json:"misses"`
	// Compile is the time spent building and compiling executables
	// (measured with Exec.PreCompile, separately from execution).
	Compile time.Duration `json:"compile_ns"`
	// Run is the time spent in calls, compilation excluded.
	Run time.Duration `json:"run_ns"`
}

// Program is a graph function compiled once per distinct input shapes and
// dtypes, like graph.Exec, with statistics: hits and misses of its
// executable cache, compile time measured apart from execution, and a
// warning (OnRecompile) when a call after the first one brings new shapes.
// Panics while building a graph become errors naming the program.
//
// On one device a Program keeps only the backend's executables, by shape
// key: the graph each was compiled from (GoMLX's nodes, a few hundred
// bytes each and a hundred thousand in a serve warm-up) is dropped once
// compiled, so the Go collector does not mark it on every cycle for as
// long as the program lives (docs/compile.md, "Executables"). Sharded
// programs run through graph.Exec, which sets up the distributed graph
// and keeps it. Either way a shape beyond MaxExecutables is an error,
// unless unboundedCache lifts the cap. Every call first compiles what it
// needs (timed apart), then executes, so Run never includes compilation.
type Program struct {
	name    string
	backend backends.Backend
	fn      func([]*graph.Node) []*graph.Node
	// exec runs a sharded program (newShardedProgram); nil on one device.
	exec *graph.Exec
	// OnRecompile, when set, is called when a call after the first one
	// needs a new executable (its input shapes are new).
	OnRecompile func(program, shapes string)

	// building serializes compiles, so two calls with the same new
	// shapes compile them once.
	building sync.Mutex
	mu       sync.Mutex
	// exes holds the compiled shape keys and, on one device, their
	// executables (nil for a sharded program's, which exec keeps).
	exes     map[string]backends.Executable
	maxCache int
	stats    ProgramStats
	// last is the last call's shapes and their key (keyOf).
	last atomic.Pointer[lastKey]
}

// lastKey is a call's input shapes and their shapeKey.
type lastKey struct {
	shapes []shapes.Shape
	key    string
}

// NewProgram wraps fn, which takes the inputs in call order and returns
// the outputs.
func NewProgram(backend backends.Backend, name string, fn func(inputs []*graph.Node) []*graph.Node) (*Program, error) {
	if backend == nil || fn == nil {
		return nil, fmt.Errorf("program %q: no backend or no graph function", name)
	}
	return &Program{name: name, backend: backend, fn: fn, exes: map[string]backends.Executable{},
		maxCache: MaxExecutables, stats: ProgramStats{Name: name}}, nil
}

// sharded makes p run through graph.Exec, configured by setup (the mesh
// and the sharding specs).
func (p *Program) sharded(setup func(*graph.Exec)) error {
	e, err := graph.NewExec(p.backend, p.fn)
	if err != nil {
		return fmt.Errorf("program %q: %w", p.name, err)
	}
	e.WithName(p.name).SetMaxCache(p.maxCache)
	setup(e)
	p.exec = e
	return nil
}

// Name returns the program's name.
func (p *Program) Name() string { return p.name }

// unboundedCache lifts the MaxExecutables cap, for a program whose callers
// bound its shapes themselves (compile.Batch's).
func (p *Program) unboundedCache() {
	p.mu.Lock()
	p.maxCache = -1
	p.mu.Unlock()
	if p.exec != nil {
		p.exec.SetMaxCache(-1)
	}
}

// Stats returns a snapshot of the statistics.
func (p *Program) Stats() ProgramStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// shapeKey identifies an executable: the dtype and dimensions of each input.
func shapeKey(args []Arg) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a.T.Shape().String())
	}
	return b.String()
}

// keyOf is shapeKey(args), reused from the last call when the shapes are
// the same: a decode loop calls with the same shapes step after step, and
// the key of a small model's 150 inputs takes 49 µs and 610 allocations
// to build, where comparing the shapes takes a few.
func (p *Program) keyOf(args []Arg) string {
	if l := p.last.Load(); l != nil && len(l.shapes) == len(args) {
		same := true
		for i, a := range args {
			if !a.T.Shape().Equal(l.shapes[i]) {
				same = false
				break
			}
		}
		if same {
			return l.key
		}
	}
	l := &lastKey{shapes: make([]shapes.Shape, len(args)), key: shapeKey(args)}
	for i, a := range args {
		l.shapes[i] = a.T.Shape().Clone()
	}
	p.last.Store(l)
	return l.key
}

// Call runs the program, compiling an executable first when the input
// shapes are new.
func (p *Program) Call(args ...Arg) (outs []*tensors.Tensor, err error) {
	defer p.recoverInto(&err)
	key := p.keyOf(args)
	if _, err := p.compileFor(key, func() error { return p.build(key, args) }); err != nil {
		return nil, err
	}
	p.mu.Lock()
	exe := p.exes[key]
	p.mu.Unlock()
	bufs := make([]backends.Buffer, len(args))
	donate := make([]bool, len(args))
	for i, a := range args {
		// On the device first: a host tensor moves into a buffer the
		// backend shares with it (the CPU engine's: no copy kept), which
		// is then handed over. Donating a host tensor outright would copy
		// it and keep the host copy alive with the tensor (a serve
		// warm-up's caches, twice over).
		bufs[i], err = a.T.Buffer(p.backend, 0)
		if err == nil && a.Donate {
			bufs[i], err = a.T.DonateBuffer(p.backend, 0)
			donate[i] = true
		}
		if err != nil {
			return nil, fmt.Errorf("program %q: input #%d: %w", p.name, i, err)
		}
	}
	start := time.Now()
	res, err := exe.Execute(bufs, donate, 0)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", p.name, err)
	}
	outs = make([]*tensors.Tensor, len(res))
	for i, b := range res {
		if outs[i], err = tensors.FromBuffer(p.backend, b); err != nil {
			return nil, fmt.Errorf("program %q: output #%d: %w", p.name, i, err)
		}
	}
	p.mu.Lock()
	p.stats.Run += time.Since(start)
	p.mu.Unlock()
	return outs, nil
}

// Precompile builds the executable for the arguments' shapes without
// running it, and reports whether it had to (false when the shapes were
// already compiled). It counts as a call: a miss when it compiles, a hit
// otherwise, and the next Call with those shapes is a hit. Diffusion
// pipelines use it to show compilation apart from the first denoising step.
func (p *Program) Precompile(args ...Arg) (compiled bool, err error) {
	defer p.recoverInto(&err)
	return p.compile(args)
}

// compile counts a call and, when the input shapes are new, compiles
// their executable, timed apart from execution.
func (p *Program) compile(args []Arg) (compiled bool, err error) {
	key := p.keyOf(args)
	return p.compileFor(key, func() error { return p.build(key, args) })
}

// build compiles the executable for args' shapes on one device and keeps
// only the backend's executable: capture hands it over from the graph's
// builder, and the graph itself becomes garbage.
func (p *Program) build(key string, args []Arg) error {
	if p.exec != nil {
		return fmt.Errorf("a sharded program takes its inputs per device")
	}
	c := &capture{Backend: p.backend}
	g := graph.NewGraph(c, p.name)
	params := make([]*graph.Node, len(args))
	for i, a := range args {
		params[i] = graph.Parameter(g, fmt.Sprintf("arg%d", i), a.T.Shape())
	}
	outs := p.fn(params)
	for i, o := range outs {
		if o.Type() == graph.NodeTypeParameter && len(params) > 1 {
			// The go backend cannot run a program whose output is one
			// of its parameters while it has others (an encoder's
			// head-final: its input as it is, beside a cross-encoder's
			// head weights it does not read).
			outs[i] = graph.Identity(o)
		}
	}
	g.Compile(outs...)
	if n := g.NumParameters(); n != len(args) {
		return fmt.Errorf("the graph has %d parameters for %d inputs", n, len(args))
	}
	if c.exe == nil {
		return fmt.Errorf("the backend compiled no executable")
	}
	p.mu.Lock()
	p.exes[key] = c.exe
	p.mu.Unlock()
	return nil
}

// compileFor counts a call of the inputs identified by key and, when key
// is new, compiles them with build, timed, and reports a recompilation
// after the first call. The key counts as compiled only once build has
// succeeded, so a failed compile is tried again (another miss) by the
// next call with those shapes.
func (p *Program) compileFor(key string, build func() error) (compiled bool, err error) {
	p.mu.Lock()
	_, done := p.exes[key]
	first := p.stats.Calls == 0
	p.stats.Calls++
	if done {
		p.stats.Hits++
		p.mu.Unlock()
		return false, nil
	}
	p.stats.Misses++
	full := p.maxCache > 0 && len(p.exes) >= p.maxCache
	p.mu.Unlock()
	if full {
		return false, fmt.Errorf("program %q: inputs %s would be executable #%d, over the cap of %d",
			p.name, key, p.maxCache+1, p.maxCache)
	}
	if !first && p.OnRecompile != nil {
		p.OnRecompile(p.name, key)
	}
	p.building.Lock()
	defer p.building.Unlock()
	p.mu.Lock()
	_, done = p.exes[key]
	p.mu.Unlock()
	if done { // compiled by a concurrent call while this one waited
		return false, nil
	}
	start := time.Now()
	if err := build(); err != nil {
		return false, fmt.Errorf("program %q: compiling for inputs %s: %w", p.name, key, err)
	}
	p.mu.Lock()
	p.stats.Compile += time.Since(start)
	p.mu.Unlock()
	return true, nil
}

// capture is a backend whose builders hand over the executable they
// compile, so a Program can keep it without the graph.
type capture struct {
	backends.Backend
	exe backends.Executable
}

// Builder implements backends.Backend.
func (c *capture) Builder(name string) backends.Builder {
	return &captureBuilder{Builder: c.Backend.Builder(name), c: c}
}

type captureBuilder struct {
	backends.Builder
	c *capture
}

// Compile implements backends.Builder.
func (b *captureBuilder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	exe, err := b.Builder.Compile(outputs, shardings)
	if err == nil {
		b.c.exe = exe
	}
	return exe, err
}

// recoverInto turns a panic into an error naming the program.
func (p *Program) recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("program %q: %v", p.name, r)
	}
}

// Finalize frees the executables.
func (p *Program) Finalize() {
	if p.exec != nil {
		p.exec.Finalize()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.exes {
		if e != nil {
			e.Finalize()
		}
		delete(p.exes, k)
	}
}

// recycler is a backend that takes back the memory of an execution's
// output once it has been read (tpu/cpu's Recycle), for the next
// executions' values.
type recycler interface {
	Recycle(backends.Buffer) error
}

// deviceBuffer is t's buffer on device 0 of its own backend, when it has
// one.
func deviceBuffer(t *tensors.Tensor) (backends.Backend, backends.Buffer, bool) {
	if !t.IsOnDevice(0) {
		return nil, nil, false
	}
	be, err := t.Backend()
	if err != nil {
		return nil, nil, false
	}
	buf, err := t.Buffer(be, 0)
	return be, buf, err == nil
}

// recycle finalizes t, an execution's output that has been read and of
// which no view is kept, its memory going back to a recycler backend.
func recycle(t *tensors.Tensor) {
	if be, buf, ok := deviceBuffer(t); ok {
		if rc, ok := be.(recycler); ok {
			_ = rc.Recycle(buf) // the buffer is finalized whatever it returns
		}
	}
	t.FinalizeAll()
}

// readInto copies t's float32 values into flat (t's size): from its
// device buffer directly when it has one, where ConstFlatData would
// first make a host copy of its own on a backend without shared buffers
// (XLA's: a [B, vocab] allocation and a second copy every step).
func readInto(t *tensors.Tensor, flat []float32) error {
	if be, buf, ok := deviceBuffer(t); ok {
		return be.BufferToFlatData(buf, flat)
	}
	return tensors.ConstFlatData(t, func(v []float32) { copy(flat, v) })
}
