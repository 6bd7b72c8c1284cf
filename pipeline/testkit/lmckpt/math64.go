package lmckpt

import (
	"fmt"
	"math"
)

// The float64 arithmetic the references share (the encoders' bertref,
// modernbertref, nomicbertref; the decoders' ernieref, olmoeref,
// graniteref, llama4ref): each reference keeps its own reading of its
// model; these are only torch's primitives.

// Linear64 is nn.Linear on one vector: W [out, len(x)] row-major, b
// [out] or nil (bias=False).
func Linear64(x, W, b []float64) []float64 {
	in := len(x)
	out := make([]float64, len(W)/in)
	for o := range out {
		s := 0.0
		if b != nil {
			s = b[o]
		}
		row := W[o*in : (o+1)*in]
		for i, xi := range x {
			s += row[i] * xi
		}
		out[o] = s
	}
	return out
}

// LayerNorm64 is nn.LayerNorm on one vector: biased variance, eps inside
// the square root; b nil means bias=False.
func LayerNorm64(x, g, b []float64, eps float64) []float64 {
	n := float64(len(x))
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= n
	variance := 0.0
	for _, v := range x {
		variance += (v - mean) * (v - mean)
	}
	variance /= n
	inv := 1 / math.Sqrt(variance+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = (v - mean) * inv * g[i]
		if b != nil {
			out[i] += b[i]
		}
	}
	return out
}

// Softmax64 is a numerically stable softmax; -Inf entries get 0.
func Softmax64(s []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range s {
		m = math.Max(m, v)
	}
	out := make([]float64, len(s))
	sum := 0.0
	for i, v := range s {
		out[i] = math.Exp(v - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// GELU64 is the exact GELU (torch.nn.functional.gelu).
func GELU64(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// Weights64 looks tensors up in a map from ReadFloat64, checking their
// sizes; the first failure sticks in Err (named by Kit, the reference's
// name) and later lookups return nil.
type Weights64 struct {
	M   map[string][]float64
	Kit string
	Err error
}

// Get returns tensor name, which must hold n values.
func (w *Weights64) Get(name string, n int) []float64 {
	if w.Err != nil {
		return nil
	}
	v, ok := w.M[name]
	switch {
	case !ok:
		w.Err = fmt.Errorf("%s: checkpoint has no tensor %q", w.Kit, name)
	case len(v) != n:
		w.Err = fmt.Errorf("%s: tensor %q has %d values, want %d", w.Kit, name, len(v), n)
	}
	return v
}

// Shaped is Get of a tensor that must hold shape's elements.
func (w *Weights64) Shaped(name string, shape []int) []float64 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return w.Get(name, n)
}

// Opt is Get when present, else nil (an absent bias).
func (w *Weights64) Opt(present bool, name string, n int) []float64 {
	if !present {
		return nil
	}
	return w.Get(name, n)
}

// RMSNorm64 is an RMSNorm over x: x / sqrt(mean(x²) + eps), times w, or
// with w nil by nothing (an L2 norm without a weight, Llama 4's q/k norm).
func RMSNorm64(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * inv
		if w != nil {
			out[i] *= w[i]
		}
	}
	return out
}

// RotateHalf64 is the rotary embedding of transformers' rotate_half
// (GPT-NeoX's convention) on one head x at position pos: its first rot
// dims (even) turn, pair j being (x[j], x[j+rot/2]) at angle
// pos·theta^(−2j/rot); the dims from rot on pass through. It returns a
// new slice.
func RotateHalf64(x []float64, pos int, theta float64, rot int) []float64 {
	out := append([]float64(nil), x...)
	for j := 0; j < rot/2; j++ {
		a := float64(pos) / math.Pow(theta, float64(2*j)/float64(rot))
		cs, sn := math.Cos(a), math.Sin(a)
		out[j] = x[j]*cs - x[j+rot/2]*sn
		out[j+rot/2] = x[j+rot/2]*cs + x[j]*sn
	}
	return out
}

// TopK64 returns the indices of the k largest values of v in decreasing
// order, the lower index first among equal ones (torch.topk's choice for
// a router's scores).
func TopK64(v []float64, k int) []int {
	taken := make([]bool, len(v))
	var ids []int
	for range k {
		best := -1
		for i, x := range v {
			if !taken[i] && (best < 0 || x > v[best]) {
				best = i
			}
		}
		taken[best] = true
		ids = append(ids, best)
	}
	return ids
}

// SiLU64 is x·sigmoid(x).
func SiLU64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// SwiGLU64 is the gated MLP down·(silu(gate·x) · up·x) with the row-major
// weights gate and up [width, len(x)] and down [out, width].
func SwiGLU64(x, gate, up, down []float64) []float64 {
	g, u := Linear64(x, gate, nil), Linear64(x, up, nil)
	for i := range g {
		g[i] = SiLU64(g[i]) * u[i]
	}
	return Linear64(g, down, nil)
}

// RopeAttention64 is Llama's attention over one sequence h [T][hidden]
// at positions 0..T-1: the projections prefix+"q_proj.weight", "k_proj",
// "v_proj" and "o_proj" (from get), heads query and kvHeads key/value
// heads of D, the first rot dims of each query and key rotated
// rotate-half (base theta), causal, scaled by 1/√D.
func RopeAttention64(h [][]float64, get func(string) []float64, prefix string, heads, kvHeads, D, rot int, theta float64) [][]float64 {
	split := func(x []float64, name string, n, pos int, turn bool) [][]float64 {
		all := Linear64(x, get(prefix+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if turn {
				out[i] = RotateHalf64(out[i], pos, theta, rot)
			}
		}
		return out
	}
	q, k, v := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		q[t], k[t], v[t] = split(h[t], "q_proj", heads, t, true), split(h[t], "k_proj", kvHeads, t, true), split(h[t], "v_proj", kvHeads, t, false)
	}
	att := Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = Linear64(att[t], get(prefix+"o_proj.weight"), nil)
	}
	return out
}

// Attention64 is grouped-query scaled dot-product attention over one
// sequence: query and key [T][heads or kvHeads][D], value
// [T][kvHeads][Dv] (Dv may differ from D, as in MLA), query head h
// reading key/value head h/(heads/kvHeads) (repeat_kv). Query t attends
// to the keys s <= t that sees(t, s) allows (every one when sees is nil:
// causal), by the softmax of q·k·scale. It returns [T][heads·Dv].
func Attention64(query, key, value [][][]float64, scale float64, sees func(t, s int) bool) [][]float64 {
	out := make([][]float64, len(query))
	for t := range out {
		heads := len(query[t])
		group := heads / len(key[t])
		var seen []int
		for s := 0; s <= t; s++ {
			if sees == nil || sees(t, s) {
				seen = append(seen, s)
			}
		}
		D := len(value[0][0])
		out[t] = make([]float64, heads*D)
		for hd := 0; hd < heads; hd++ {
			kv := hd / group
			scores := make([]float64, len(seen))
			for j, s := range seen {
				dot := 0.0
				for i, qi := range query[t][hd] {
					dot += qi * key[s][kv][i]
				}
				scores[j] = dot * scale
			}
			o := out[t][hd*D : (hd+1)*D]
			for j, w := range Softmax64(scores) {
				for i, vi := range value[seen[j]][kv] {
					o[i] += w * vi
				}
			}
		}
	}
	return out
}
