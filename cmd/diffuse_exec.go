package cmd

import (
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
)

// programExecutor runs the diffusion models' graphs on compile.Program:
// one Program per executable key (a whole model in compiled mode, a block
// kind in eager mode), each caching executables by input shapes. It
// implements blocks.Executor and blocks.Precompiler, and sums the
// programs' statistics for the pipeline's timings.
type programExecutor struct {
	backend     backends.Backend
	onRecompile func(program, shapes string)

	mu       sync.Mutex
	programs map[string]*compile.Program
}

// debugRecompile is the OnRecompile hook of compile.Options and
// compile.Program: a --verbose line per executable compiled again.
func debugRecompile(rep *ui.Reporter) func(program, shapes string) {
	return func(program, shapes string) {
		rep.Debugf("compile: %s compiles again for new input shapes %s", program, shapes)
	}
}

func newProgramExecutor(backend backends.Backend, onRecompile func(program, shapes string)) *programExecutor {
	return &programExecutor{backend: backend, onRecompile: onRecompile, programs: map[string]*compile.Program{}}
}

func (x *programExecutor) program(key string, fn func([]*graph.Node) []*graph.Node) (*compile.Program, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.programs[key]; ok {
		return p, nil
	}
	p, err := compile.NewProgram(x.backend, key, fn)
	if err != nil {
		return nil, err
	}
	p.OnRecompile = x.onRecompile
	x.programs[key] = p
	return p, nil
}

func asArgs(ts []*tensors.Tensor) []compile.Arg {
	args := make([]compile.Arg, len(ts))
	for i, t := range ts {
		args[i] = compile.Arg{T: t}
	}
	return args
}

// Call implements blocks.Executor.
func (x *programExecutor) Call(key string, fn func([]*graph.Node) []*graph.Node, args []*tensors.Tensor) ([]*tensors.Tensor, error) {
	p, err := x.program(key, fn)
	if err != nil {
		return nil, err
	}
	return p.Call(asArgs(args)...)
}

// Precompile implements blocks.Precompiler.
func (x *programExecutor) Precompile(key string, fn func([]*graph.Node) []*graph.Node, args []*tensors.Tensor) (bool, error) {
	p, err := x.program(key, fn)
	if err != nil {
		return false, err
	}
	return p.Precompile(asArgs(args)...)
}

// Stats sums the programs' statistics.
func (x *programExecutor) Stats() blocks.ExecStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	var s blocks.ExecStats
	for _, p := range x.programs {
		ps := p.Stats()
		s.Hits += ps.Hits
		s.Misses += ps.Misses
		s.CompileTime += ps.Compile
		s.RunTime += ps.Run
	}
	return s
}

// Finalize frees every program.
func (x *programExecutor) Finalize() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.programs {
		p.Finalize()
	}
	x.programs = map[string]*compile.Program{}
}
