// Package blocks holds the diffusers modules the diffusion models
// (pipeline/diffusion/unet, vae, clip, mmdit) share, built on the op
// library pipeline/nn (Linear, LayerNorm, GroupNorm, Conv2D, the
// activations, MultiHeadAttention, nearest upsampling): the layers with
// their weights (layers.go: linear, conv, norm and attention layers),
// the modules (modules.go: ResnetBlock2D, Transformer2DModel with
// BasicTransformerBlock, Downsample2D, Upsample2D, the VAE's spatial
// attention), the sinusoidal timestep embedding (timestep.go), the strict
// weight Loader over safetensors.Strict (weights.go), and the two
// execution engines every model is written once against (this file):
// Traced, which builds a whole model into one graph (compiled mode), and
// Eager, which runs each block as its own executable (eager mode), through
// an Executor.
//
// Like pipeline/nn, it never imports tpu/ or compile/: it defines the
// small Executor interfaces (Executor, Precompiler, CompileCounter) and
// compile.GraphExecutor implements them. Graph-building panics become
// errors at the model entry points (Recover).
package blocks

import (
	"fmt"
	"strings"
	"time"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Bind maps a block's parameters to graph nodes.
type Bind func(p *Param) *Node

// Block is one module of a diffusion model (a ResNet block, a transformer
// block, a down- or upsampler, ...) as a pure graph function of its weights
// and its activations. Both execution modes run the same Block code:
// compiled mode calls Apply inside one whole-model graph, eager mode turns
// each Block into its own executable.
type Block interface {
	// Key names the graph the block builds: its kind and every static
	// hyper-parameter (groups, eps, heads, strides, ...), but not the
	// weights. Blocks with equal keys and equal weight shapes share one
	// executable in eager mode.
	Key() string
	// Params lists the weights Apply reads, in a fixed order.
	Params() []*Param
	// Apply builds the block's outputs from its inputs.
	Apply(w Bind, in []*Node) []*Node
}

// Engine runs blocks. V is *graph.Node when a whole model is traced into
// one graph (compiled mode) and *tensors.Tensor when each block is
// dispatched as its own executable (eager mode). Model code is written
// once, generic over V, as a sequence of Run calls.
//
// Run panics with an error on failure; the model entry points recover it
// (see Recover).
type Engine[V any] interface {
	Run(b Block, in ...V) []V
}

// Run1 runs a block with one output.
func Run1[V any](e Engine[V], b Block, in ...V) V { return e.Run(b, in...)[0] }

// Traced is the compiled-mode engine: it applies blocks inside the graph
// being built, binding parameters to the nodes of a whole-model weight list.
type Traced struct {
	Weights []*Node // indexed by Param.Index()
}

// Run implements Engine.
func (g *Traced) Run(b Block, in ...*Node) []*Node {
	return b.Apply(func(p *Param) *Node {
		if n := g.Weights[p.index]; n != nil {
			return n
		}
		panic(fmt.Errorf("tensor %q was not loaded", p.Name))
	}, in)
}

// CallTraced runs a whole-model forward pass as one executable under key:
// the loaded weights (nil entries, not loaded, are left out) followed by
// inputs are the arguments, and fn builds the outputs with a Traced engine.
func CallTraced(x Executor, key string, w *Weights, inputs []*tensors.Tensor,
	fn func(e *Traced, in []*Node) []*Node) ([]*tensors.Tensor, error) {
	graphFn, args := tracedCall(w, inputs, fn)
	return x.Call(key, graphFn, args)
}

// PrecompileTraced compiles what CallTraced would run, without running it,
// when x is a Precompiler. It reports whether a new executable was built;
// with another Executor it does nothing.
func PrecompileTraced(x Executor, key string, w *Weights, inputs []*tensors.Tensor,
	fn func(e *Traced, in []*Node) []*Node) (bool, error) {
	pc, ok := x.(Precompiler)
	if !ok {
		return false, nil
	}
	graphFn, args := tracedCall(w, inputs, fn)
	return pc.Precompile(key, graphFn, args)
}

func tracedCall(w *Weights, inputs []*tensors.Tensor, fn func(e *Traced, in []*Node) []*Node) (func([]*Node) []*Node, []*tensors.Tensor) {
	var args []*tensors.Tensor
	var loaded []int
	for i, t := range w.Tensors {
		if t != nil {
			args = append(args, t)
			loaded = append(loaded, i)
		}
	}
	nw := len(args)
	args = append(args, inputs...)
	graphFn := func(nodes []*Node) []*Node {
		e := &Traced{Weights: make([]*Node, len(w.Tensors))}
		for j, i := range loaded {
			e.Weights[i] = nodes[j]
		}
		return fn(e, nodes[nw:])
	}
	return graphFn, args
}

// Precompiler is an Executor that can compile without running: it builds
// the executable for args' shapes if it is new and reports whether it did.
type Precompiler interface {
	Precompile(key string, fn func(in []*Node) []*Node, args []*tensors.Tensor) (compiled bool, err error)
}

// Executor compiles and runs graph functions whose executables are cached
// by the shapes of their arguments. The key identifies fn: two calls with
// the same key must pass functions that build the same graph.
// compile.GraphExecutor is the implementation tputool uses.
type Executor interface {
	Call(key string, fn func(in []*Node) []*Node, args []*tensors.Tensor) ([]*tensors.Tensor, error)
}

// CompileCounter is an Executor that counts its compilations: the
// executables built so far and the time spent building them, measured
// apart from execution. Pipelines use it to report compile time per
// phase.
type CompileCounter interface {
	CompileStats() (compiles int, took time.Duration)
}

// Eager is the eager-mode engine: each Run call executes the block as its
// own executable, with the block's weights passed as arguments, so blocks of
// identical structure and weight shapes share one executable.
type Eager struct {
	Exec    Executor
	Weights *Weights
	// Prefix is prepended to every executable key (e.g. "unet/").
	Prefix string
}

// Run implements Engine.
func (e *Eager) Run(b Block, in ...*tensors.Tensor) []*tensors.Tensor {
	params := b.Params()
	key := e.Prefix + BlockKey(b)
	args := append(e.Weights.Select(params), in...)
	fn := func(nodes []*Node) []*Node {
		pos := make(map[*Param]int, len(params))
		for i, p := range params {
			pos[p] = i
		}
		bind := func(p *Param) *Node {
			i, ok := pos[p]
			if !ok {
				panic(fmt.Errorf("block %s reads parameter %q it did not list", b.Key(), p.Name))
			}
			return nodes[i]
		}
		return b.Apply(bind, nodes[len(params):])
	}
	out, err := e.Exec.Call(key, fn, args)
	if err != nil {
		panic(fmt.Errorf("%s: %w", key, err))
	}
	return out
}

// BlockKey is a block's executable key: Key() plus its weight shapes.
func BlockKey(b Block) string {
	var sb strings.Builder
	sb.WriteString(b.Key())
	sb.WriteString("|w")
	for _, p := range b.Params() {
		sb.WriteString(fmt.Sprint(p.Shape))
	}
	return sb.String()
}

// Recover turns a panic raised while running an engine into an error; use
// as `defer blocks.Recover(&err)`.
func Recover(err *error) {
	r := recover()
	if r == nil {
		return
	}
	switch v := r.(type) {
	case error:
		*err = v
	default:
		*err = fmt.Errorf("%v", v)
	}
}
