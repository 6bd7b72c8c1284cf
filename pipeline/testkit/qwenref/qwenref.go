// Package qwenref is a plain-Go float64 forward pass of the Qwen
// architectures with state beyond a KV cache or with routed experts: the
// Qwen3.5 hybrid decoder (Gated DeltaNet and gated full attention,
// qwen35.go) and the Qwen3-MoE / Qwen2-MoE decoders (moe.go). It follows the
// style of pipeline/testkit/lmref: straight loops over one sequence, no
// graph, no caches, no padding, no chunking (the DeltaNet runs its
// recurrent form token by token), and it shares no code with pipeline/nn or
// the architecture packages it checks.
//
// It also writes the checkpoints the tests and benchmarks use: a
// config.json in the layout of the real checkpoints and a model.safetensors
// with their exact tensor names and deterministic pseudo-random weights.
package qwenref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	// Init decides the values, see fill.
	Init string
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in) (fan-in = product of all but the first dim)
//	embed   uniform
//	router  uniform (decisive routing: top-k gaps far above float32 noise)
//	norm    1 ± 0.2          (a plain RMSNorm weight)
//	norm1p  ± 0.2            (a (1+w) RMSNorm weight, zero-centred)
//	bias    ± 0.1
//	alog    log of a decay rate in [0.0045, 0.6] (slow and fast heads)
//	dtbias  ± 0.5
//	skip    small values for tensors the model must not read
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	n, fan := 1, 1
	for i, d := range t.Shape {
		n *= d
		if i > 0 {
			fan *= d
		}
	}
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch t.Init {
		case "linear":
			v[i] = float32(u / math.Sqrt(float64(fan)))
		case "embed", "router":
			v[i] = float32(u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "norm1p":
			v[i] = float32(0.2 * u)
		case "bias":
			v[i] = float32(0.1 * u)
		case "alog":
			v[i] = float32(1.25*u - 1.75)
		case "dtbias":
			v[i] = float32(0.5 * u)
		default:
			v[i] = float32(0.01 * u)
		}
	}
	return v
}

// writeCheckpoint writes dir/config.json, dir/generation_config.json and
// dir/model.safetensors (F32 or the given dtype) with values drawn from seed.
func writeCheckpoint(dir string, config map[string]any, tensors []Tensor, seed uint64, dtype safetensors.DType) error {
	if dtype == "" {
		dtype = safetensors.F32
	}
	r := lmckpt.NewRand(seed)
	var ts []safetensors.Tensor
	for _, t := range tensors {
		st, err := safetensors.Float32Tensor(t.Name, dtype, t.Shape, fill(r, t))
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		ts = append(ts, st)
	}
	return lmckpt.WriteCheckpoint(dir, config, ts)
}

// Weights are every tensor of a checkpoint in float64.
type Weights map[string][]float64

// LoadWeights reads a checkpoint directory (or file) as float64.
func LoadWeights(path string) (Weights, error) {
	return lmckpt.ReadFloat64(path)
}

func (w Weights) get(name string) []float64 {
	v, ok := w[name]
	if !ok {
		panic(fmt.Sprintf("qwenref: checkpoint has no tensor %q", name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Math

// rmsnorm returns x / rms(x) scaled by w, or by 1+w with onePlus.
func rmsnorm(x, w []float64, eps float64, onePlus bool) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		g := w[i]
		if onePlus {
			g++
		}
		out[i] = v * inv * g
	}
	return out
}

// linear returns W x (+ b) for W [len(out), len(x)] in row-major order.
func linear(x, w, b []float64, out int) []float64 {
	n := len(x)
	if len(w) != out*n {
		panic(fmt.Sprintf("qwenref: weight of %d values for a %dx%d matrix", len(w), out, n))
	}
	y := make([]float64, out)
	for o := range y {
		s := 0.0
		row := w[o*n : (o+1)*n]
		for i, v := range x {
			s += row[i] * v
		}
		if b != nil {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

func softmax(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	sum := 0.0
	for i, v := range x {
		x[i] = math.Exp(v - mx)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

func silu(x float64) float64    { return x / (1 + math.Exp(-x)) }
func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// softplus is torch's, with threshold 20.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// ropeHead rotates the first rot dims of one head vector at position pos
// (rotate-half pairing inside the rotated dims: i with i + rot/2); the
// other dims pass through.
func ropeHead(v []float64, pos int, theta float64, rot int) {
	for i := 0; i < rot/2; i++ {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(rot))
		a := float64(pos) * freq
		c, s := math.Cos(a), math.Sin(a)
		x1, x2 := v[i], v[i+rot/2]
		v[i] = x1*c - x2*s
		v[i+rot/2] = x2*c + x1*s
	}
}

// attend is causal softmax attention of every position over positions
// 0..t with grouped KV heads: q [T][H*D], k, v [T][KV*D] -> [T][H*D].
func attend(q, k, v [][]float64, heads, kvHeads, d int) [][]float64 {
	group := heads / kvHeads
	scale := 1 / math.Sqrt(float64(d))
	out := make([][]float64, len(q))
	for t := range q {
		out[t] = make([]float64, heads*d)
		for h := 0; h < heads; h++ {
			kv := h / group
			qh := q[t][h*d : (h+1)*d]
			scores := make([]float64, t+1)
			for s := 0; s <= t; s++ {
				dot := 0.0
				for i := 0; i < d; i++ {
					dot += qh[i] * k[s][kv*d+i]
				}
				scores[s] = dot * scale
			}
			softmax(scores)
			o := out[t][h*d : (h+1)*d]
			for s := 0; s <= t; s++ {
				for i := 0; i < d; i++ {
					o[i] += scores[s] * v[s][kv*d+i]
				}
			}
		}
	}
	return out
}

// swiglu is the gated MLP down(silu(gate(x)) * up(x)).
func swiglu(w Weights, prefix string, x []float64, inter int) []float64 {
	g := linear(x, w.get(prefix+"gate_proj.weight"), nil, inter)
	u := linear(x, w.get(prefix+"up_proj.weight"), nil, inter)
	for i := range g {
		g[i] = silu(g[i]) * u[i]
	}
	return linear(g, w.get(prefix+"down_proj.weight"), nil, len(x))
}
