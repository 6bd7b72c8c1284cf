// Package gptjref is a plain-Go float64 forward pass of GPTJForCausalLM,
// written from transformers' models/gptj (GPTJBlock, GPTJAttention with
// rotate_every_two over the first rotary_dim dims of each head, GPTJMLP),
// and the tiny checkpoints its tests run, under the checkpoints' own
// tensor names. It shares no code with pipeline/llama or pipeline/gptj.
package gptjref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// GPTJ describes a tiny GPT-J by the fields of its config.json.
type GPTJ struct {
	Vocab, Hidden, Inner, Layers, Heads int
	// RotaryDim is rotary_dim: the first RotaryDim dims of each query and
	// key head turn as adjacent pairs; 0 writes null, the whole head.
	RotaryDim int
	Eps       float64
	// Buffers writes the causal-mask buffers old checkpoints hold
	// (attn.bias, attn.masked_bias), which transformers ignores.
	Buffers bool
	Seed    uint64
}

// Tiny is a small GPT-J: 3 layers, hidden 32, 4 heads of 8 of which the
// first 4 dims rotate, n_inner 4 × hidden, the old buffers.
func Tiny() GPTJ {
	return GPTJ{Vocab: 64, Hidden: 32, Inner: 128, Layers: 3, Heads: 4, RotaryDim: 4, Eps: 1e-5, Buffers: true, Seed: 110}
}

func (c GPTJ) headSize() int { return c.Hidden / c.Heads }

// rot is the number of rotated dims of a head.
func (c GPTJ) rot() int {
	if c.RotaryDim == 0 {
		return c.headSize()
	}
	return c.RotaryDim
}

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c GPTJ) tensors() []tensor {
	H := c.Hidden
	out := []tensor{{"transformer.wte.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.h.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("ln_1.weight", "norm", H)
		add("ln_1.bias", "bias", H)
		for _, proj := range []string{"q_proj", "k_proj", "v_proj", "out_proj"} {
			add("attn."+proj+".weight", "linear", H, H)
		}
		add("mlp.fc_in.weight", "linear", c.Inner, H)
		add("mlp.fc_in.bias", "bias", c.Inner)
		add("mlp.fc_out.weight", "linear", H, c.Inner)
		add("mlp.fc_out.bias", "bias", H)
		if c.Buffers {
			add("attn.bias", "mask", 1, 1, 8, 8)
			add("attn.masked_bias", "bias", 1)
		}
	}
	return append(out,
		tensor{"transformer.ln_f.weight", []int{H}, "norm"}, tensor{"transformer.ln_f.bias", []int{H}, "bias"},
		tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"}, tensor{"lm_head.bias", []int{c.Vocab}, "bias"})
}

// ConfigJSON is the config.json with GPTJConfig's names.
func (c GPTJ) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"GPTJForCausalLM"}, "model_type": "gptj",
		"vocab_size": c.Vocab, "n_embd": c.Hidden, "n_inner": c.Inner, "n_layer": c.Layers, "n_head": c.Heads,
		"rotary_dim": c.RotaryDim, "layer_norm_epsilon": c.Eps, "activation_function": "gelu_new",
		"n_positions": 256, "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
	if c.RotaryDim == 0 {
		j["rotary_dim"] = nil
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c GPTJ) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		v := lmckpt.Fill(r, t.shape, func(u float64, fan int) float64 {
			switch t.init {
			case "embed":
				return u
			case "norm":
				return 1 + 0.2*u
			case "bias":
				return 0.3 * u
			case "mask": // never read
				return 1
			}
			return u / math.Sqrt(float64(fan))
		})
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: v})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C GPTJ
	W map[string][]float64
	// Halves is a mutant for the tests: the rotary turns the rotated
	// dims' halves (rotate_half) instead of their adjacent pairs.
	Halves bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c GPTJ) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "gptjref"}
	for _, t := range c.tensors() {
		chk.Shaped(t.name, t.shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("gptjref: no tensor %q", name))
	}
	return v
}

// rotate turns the first rot dims of one head at position pos:
// rotate_every_two, dims 2i and 2i+1 by the angle pos / 10000^(2i/rot)
// (the sin and cos tables repeat_interleave'd), or with halves dims i and
// i+rot/2.
func (m *Model) rotate(x []float64, pos, rot int) []float64 {
	out := append([]float64(nil), x...)
	for i := 0; i < rot/2; i++ {
		a := float64(pos) / math.Pow(10000, float64(2*i)/float64(rot))
		cs, sn := math.Cos(a), math.Sin(a)
		j, k := 2*i, 2*i+1
		if m.Halves {
			j, k = i, i+rot/2
		}
		out[j] = x[j]*cs - x[k]*sn
		out[k] = x[k]*cs + x[j]*sn
	}
	return out
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token: each block x + attn(ln_1(x)) + mlp(ln_1(x)), then ln_f and
// the biased lm_head.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.headSize()
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("transformer.wte.weight")[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.h.%d.", l)
		h := make([][]float64, len(x))
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h[t] = ln(x[t], p+"ln_1")
			qa := lmckpt.Linear64(h[t], m.get(p+"attn.q_proj.weight"), nil)
			ka := lmckpt.Linear64(h[t], m.get(p+"attn.k_proj.weight"), nil)
			va := lmckpt.Linear64(h[t], m.get(p+"attn.v_proj.weight"), nil)
			for hd := 0; hd < c.Heads; hd++ {
				q[t] = append(q[t], m.rotate(qa[hd*D:(hd+1)*D], t, c.rot()))
				k[t] = append(k[t], m.rotate(ka[hd*D:(hd+1)*D], t, c.rot()))
				v[t] = append(v[t], va[hd*D:(hd+1)*D])
			}
		}
		att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
		for t := range x {
			a := lmckpt.Linear64(att[t], m.get(p+"attn.out_proj.weight"), nil)
			f := lmckpt.Linear64(h[t], m.get(p+"mlp.fc_in.weight"), m.get(p+"mlp.fc_in.bias"))
			for i := range f {
				f[i] = geluNew(f[i])
			}
			y := lmckpt.Linear64(f, m.get(p+"mlp.fc_out.weight"), m.get(p+"mlp.fc_out.bias"))
			for i := range x[t] {
				x[t][i] += a[i] + y[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "transformer.ln_f"), m.get("lm_head.weight"), m.get("lm_head.bias"))
	}
	return out
}

// geluNew is transformers' NewGELUActivation: the tanh approximation.
func geluNew(v float64) float64 {
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
}
