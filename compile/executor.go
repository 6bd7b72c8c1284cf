package compile

import (
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// ExecutorOptions configure a GraphExecutor.
type ExecutorOptions struct {
	// OnRecompile is every program's OnRecompile: called when a key that
	// already ran needs a new executable (a new image size or batch).
	OnRecompile func(program, shapes string)
}

// GraphExecutor runs graph functions by key on Programs: one Program per
// key (a whole model in compiled mode, a block kind with its weight
// shapes in eager mode), each caching executables by input shapes, timing
// compilation apart from execution, and turning panics into errors that
// name the key.
//
// It is the executor of the diffusion models: it implements
// pipeline/diffusion/blocks' Executor, Precompiler and CompileCounter
// interfaces by their method sets, so neither package imports the other
// and the model packages stay free of compile/.
type GraphExecutor struct {
	backend backends.Backend
	opts    ExecutorOptions

	mu       sync.Mutex
	programs map[string]*Program
	order    []*Program // in creation order, for Stats
}

// NewGraphExecutor returns an executor on backend. Finalize frees its
// executables.
func NewGraphExecutor(backend backends.Backend, opts ExecutorOptions) *GraphExecutor {
	return &GraphExecutor{backend: backend, opts: opts, programs: map[string]*Program{}}
}

// program returns key's Program, creating it with fn on first use.
func (x *GraphExecutor) program(key string, fn func([]*graph.Node) []*graph.Node) (*Program, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.programs[key]; ok {
		return p, nil
	}
	p, err := NewProgram(x.backend, key, fn)
	if err != nil {
		return nil, err
	}
	p.OnRecompile = x.opts.OnRecompile
	x.programs[key] = p
	x.order = append(x.order, p)
	return p, nil
}

func asArgs(ts []*tensors.Tensor) []Arg {
	args := make([]Arg, len(ts))
	for i, t := range ts {
		args[i] = Arg{T: t}
	}
	return args
}

// Call runs fn under key on args, compiling an executable first when the
// key is new or args' shapes are. Two calls with the same key must pass
// functions that build the same graph: only the first call's fn is kept,
// in the key's Program.
func (x *GraphExecutor) Call(key string, fn func([]*graph.Node) []*graph.Node, args []*tensors.Tensor) ([]*tensors.Tensor, error) {
	p, err := x.program(key, fn)
	if err != nil {
		return nil, err
	}
	return p.Call(asArgs(args)...)
}

// Precompile builds what Call would run, without running it, and reports
// whether it had to (see Program.Precompile).
func (x *GraphExecutor) Precompile(key string, fn func([]*graph.Node) []*graph.Node, args []*tensors.Tensor) (bool, error) {
	p, err := x.program(key, fn)
	if err != nil {
		return false, err
	}
	return p.Precompile(asArgs(args)...)
}

// Stats returns every program's statistics, in the order the keys were
// first used. Mode is empty: callers choose the mode per call.
func (x *GraphExecutor) Stats() Stats {
	x.mu.Lock()
	order := append([]*Program(nil), x.order...)
	x.mu.Unlock()
	var s Stats
	for _, p := range order {
		ps := p.Stats()
		s.Programs = append(s.Programs, ps)
		s.Compile += ps.Compile
		s.Executables += ps.Misses
	}
	return s
}

// CompileStats returns the number of executables compiled so far and the
// time that took; the diffusion pipeline reports each phase's share.
func (x *GraphExecutor) CompileStats() (compiles int, took time.Duration) {
	s := x.Stats()
	return s.Executables, s.Compile
}

// Finalize frees every program's executables; the executor starts empty
// afterwards.
func (x *GraphExecutor) Finalize() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.order {
		p.Finalize()
	}
	x.programs = map[string]*Program{}
	x.order = nil
}
