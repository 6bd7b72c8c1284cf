package blocks

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// CompileEvent describes one compilation: a key seen with new argument
// shapes.
type CompileEvent struct {
	Key      string
	Shapes   string
	Duration time.Duration
	// Recompile is true when the key had already been compiled for other
	// shapes (a new image size, say).
	Recompile bool
}

// ExecStats counts executable-cache use.
type ExecStats struct {
	Hits, Misses int
	CompileTime  time.Duration
	RunTime      time.Duration
}

// GraphExecutor is the default Executor: one graph.Exec per key, each
// caching up to MaxShapes executables by argument shapes. Compilation is
// timed apart from execution (PreCompile before the first run).
type GraphExecutor struct {
	backend   backends.Backend
	maxShapes int
	onCompile func(CompileEvent)

	mu     sync.Mutex
	execs  map[string]*Exec
	seen   map[string]map[string]bool // key -> shape signatures compiled
	stats  ExecStats
	byName map[string]*ExecStats
}

// NewGraphExecutor returns an executor on backend. onCompile, if not nil,
// is called after each compilation.
func NewGraphExecutor(backend backends.Backend, onCompile func(CompileEvent)) *GraphExecutor {
	return &GraphExecutor{backend: backend, maxShapes: 64, onCompile: onCompile,
		execs: map[string]*Exec{}, seen: map[string]map[string]bool{}, byName: map[string]*ExecStats{}}
}

// Backend returns the backend.
func (x *GraphExecutor) Backend() backends.Backend { return x.backend }

// SetOnCompile replaces the compile callback.
func (x *GraphExecutor) SetOnCompile(fn func(CompileEvent)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.onCompile = fn
}

// Stats returns the totals so far.
func (x *GraphExecutor) Stats() ExecStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stats
}

// StatsByPrefix sums the stats of keys starting with prefix (e.g. "unet/").
func (x *GraphExecutor) StatsByPrefix(prefix string) ExecStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	var s ExecStats
	for k, v := range x.byName {
		if strings.HasPrefix(k, prefix) {
			s.Hits += v.Hits
			s.Misses += v.Misses
			s.CompileTime += v.CompileTime
			s.RunTime += v.RunTime
		}
	}
	return s
}

// NumExecutables returns how many (key, shapes) executables were compiled.
func (x *GraphExecutor) NumExecutables() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, s := range x.seen {
		n += len(s)
	}
	return n
}

// shortSignature names the argument count and the last (activation)
// shapes, for error messages.
func shortSignature(args []*tensors.Tensor) string {
	const last = 5
	if len(args) <= last {
		return "arguments (" + shapeSignature(args) + ")"
	}
	return fmt.Sprintf("%d arguments (..., %s)", len(args), shapeSignature(args[len(args)-last:]))
}

func shapeSignature(args []*tensors.Tensor) string {
	var sb strings.Builder
	for i, a := range args {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(a.Shape().String())
	}
	return sb.String()
}

// Call implements Executor.
func (x *GraphExecutor) Call(key string, fn func(in []*Node) []*Node, args []*tensors.Tensor) (out []*tensors.Tensor, err error) {
	e, anyArgs, err := x.prepare(key, fn, args)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out, err = execute(e, anyArgs)
	if err != nil {
		return nil, fmt.Errorf("running %s: %w", key, err)
	}
	d := time.Since(start)
	x.mu.Lock()
	x.stats.RunTime += d
	x.byName[key].RunTime += d
	x.mu.Unlock()
	return out, nil
}

// Precompile implements Precompiler.
func (x *GraphExecutor) Precompile(key string, fn func(in []*Node) []*Node, args []*tensors.Tensor) (bool, error) {
	x.mu.Lock()
	before := x.stats.Misses
	x.mu.Unlock()
	if _, _, err := x.prepare(key, fn, args); err != nil {
		return false, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stats.Misses > before, nil
}

// prepare finds or creates the key's Exec and compiles it for args' shapes
// when they are new, counting a hit or a miss.
func (x *GraphExecutor) prepare(key string, fn func(in []*Node) []*Node, args []*tensors.Tensor) (*Exec, []any, error) {
	x.mu.Lock()
	e, ok := x.execs[key]
	if !ok {
		var err error
		e, err = NewExec(x.backend, fn)
		if err != nil {
			x.mu.Unlock()
			return nil, nil, err
		}
		e.SetMaxCache(x.maxShapes)
		e.WithName(sanitizeName(key))
		x.execs[key] = e
		x.seen[key] = map[string]bool{}
	}
	sig := shapeSignature(args)
	compiled := x.seen[key][sig]
	recompile := len(x.seen[key]) > 0
	st := x.byName[key]
	if st == nil {
		st = &ExecStats{}
		x.byName[key] = st
	}
	onCompile := x.onCompile
	x.mu.Unlock()

	anyArgs := make([]any, len(args))
	for i, a := range args {
		anyArgs[i] = a
	}
	if compiled {
		x.mu.Lock()
		x.stats.Hits++
		st.Hits++
		x.mu.Unlock()
		return e, anyArgs, nil
	}
	start := time.Now()
	if err := precompile(e, anyArgs); err != nil {
		return nil, nil, fmt.Errorf("compiling %s for %s: %w", key, shortSignature(args), err)
	}
	d := time.Since(start)
	x.mu.Lock()
	x.seen[key][sig] = true
	x.stats.Misses++
	x.stats.CompileTime += d
	st.Misses++
	st.CompileTime += d
	x.mu.Unlock()
	if onCompile != nil {
		onCompile(CompileEvent{Key: key, Shapes: sig, Duration: d, Recompile: recompile})
	}
	return e, anyArgs, nil
}

// precompile and execute turn panics from graph building or the backend
// into errors.
func precompile(e *Exec, args []any) (err error) {
	defer Recover(&err)
	return e.PreCompile(args...)
}

func execute(e *Exec, args []any) (out []*tensors.Tensor, err error) {
	defer Recover(&err)
	return e.Exec(args...)
}

// Finalize frees every executable.
func (x *GraphExecutor) Finalize() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range x.execs {
		e.Finalize()
	}
	x.execs = map[string]*Exec{}
	x.seen = map[string]map[string]bool{}
}

func sanitizeName(key string) string {
	var sb strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '/', r == '.':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
		if sb.Len() > 120 {
			break
		}
	}
	return sb.String()
}
