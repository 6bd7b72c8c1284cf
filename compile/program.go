// Package compile runs graph-building functions on a GoMLX backend and owns
// the executable caches: Program wraps graph.Exec with shape-keyed
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
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
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

// Program is a graph function compiled once per distinct input
// shapes/dtypes, like graph.Exec, with statistics: hits and misses of its
// executable cache, compile time measured apart from execution, and a
// warning (OnRecompile) when a call after the first one brings new shapes.
// Panics while building a graph become errors naming the program.
//
// keys records the shape keys already compiled; the executables
// themselves live in graph.Exec's cache, which never evicts: a shape
// beyond MaxExecutables is an error, unless unboundedCache lifts the cap.
// Every call first compiles what it needs (timed apart), then executes,
// so Run never includes compilation.
type Program struct {
	name    string
	backend backends.Backend
	exec    *graph.Exec
	// OnRecompile, when set, is called when a call after the first one
	// needs a new executable (its input shapes are new).
	OnRecompile func(program, shapes string)

	mu    sync.Mutex
	keys  map[string]bool
	stats ProgramStats
}

// NewProgram wraps fn, which takes the inputs in call order and returns
// the outputs.
func NewProgram(backend backends.Backend, name string, fn func(inputs []*graph.Node) []*graph.Node) (*Program, error) {
	e, err := graph.NewExec(backend, fn)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", name, err)
	}
	e.WithName(name).SetMaxCache(MaxExecutables)
	return &Program{name: name, backend: backend, exec: e, keys: map[string]bool{}, stats: ProgramStats{Name: name}}, nil
}

// Name returns the program's name.
func (p *Program) Name() string { return p.name }

// unboundedCache lifts the MaxExecutables cap, for a program whose callers
// bound its shapes themselves (compile.Batch's).
func (p *Program) unboundedCache() { p.exec.SetMaxCache(-1) }

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

// Call runs the program, compiling an executable first when the input
// shapes are new.
func (p *Program) Call(args ...Arg) (outs []*tensors.Tensor, err error) {
	defer p.recoverInto(&err)
	if _, err := p.compile(args); err != nil {
		return nil, err
	}
	in := make([]any, len(args))
	for i, a := range args {
		if a.Donate {
			d, err := graph.DonateTensorBuffer(a.T, p.backend, 0)
			if err != nil {
				return nil, fmt.Errorf("program %q: donating input #%d: %w", p.name, i, err)
			}
			in[i] = d
		} else {
			in[i] = a.T
		}
	}
	start := time.Now()
	outs, err = p.exec.Exec(in...)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", p.name, err)
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
// their executable with Exec.PreCompile, timed apart from execution, and
// reports a recompilation after the first call.
func (p *Program) compile(args []Arg) (compiled bool, err error) {
	plain := make([]any, len(args))
	for i, a := range args {
		plain[i] = a.T
	}
	return p.compileFor(shapeKey(args), plain)
}

// compileFor is compile for the inputs plain (as graph.Exec takes them)
// identified by key. The key counts as compiled only once PreCompile has
// succeeded, so a failed compile is tried again (another miss) by the
// next call with those shapes.
func (p *Program) compileFor(key string, plain []any) (compiled bool, err error) {
	p.mu.Lock()
	isNew := !p.keys[key]
	first := p.stats.Calls == 0
	p.stats.Calls++
	if isNew {
		p.stats.Misses++
	} else {
		p.stats.Hits++
	}
	p.mu.Unlock()
	if !isNew {
		return false, nil
	}
	if !first && p.OnRecompile != nil {
		p.OnRecompile(p.name, key)
	}
	start := time.Now()
	if err := p.exec.PreCompile(plain...); err != nil {
		return false, fmt.Errorf("program %q: compiling for inputs %s: %w", p.name, key, err)
	}
	p.mu.Lock()
	p.keys[key] = true
	p.stats.Compile += time.Since(start)
	p.mu.Unlock()
	return true, nil
}

// recoverInto turns a panic into an error naming the program.
func (p *Program) recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("program %q: %v", p.name, r)
	}
}

// Finalize frees the executables.
func (p *Program) Finalize() { p.exec.Finalize() }
