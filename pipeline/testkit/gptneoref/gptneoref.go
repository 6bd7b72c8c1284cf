// Package gptneoref is a plain-Go float64 forward pass of
// GPTNeoForCausalLM, written from transformers' models/gpt_neo
// (GPTNeoModel's wte + wpe, GPTNeoBlock with ln_1 and ln_2,
// GPTNeoSelfAttention's unscaled q·k, its bias tril(1) xor
// tril(-window_size) on the local layers, GPTNeoMLP, ln_f and the tied
// head), and the tiny checkpoints its tests run, under the checkpoints'
// own tensor names. It shares no code with pipeline/llama or
// pipeline/gptneo.
package gptneoref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// GPTNeo describes a tiny GPT-Neo by the fields of its config.json.
type GPTNeo struct {
	Vocab, Hidden, Layers, Heads, Positions, Window int
	// Eps is layer_norm_epsilon.
	Eps float64
	// Types is attention_types' one entry: the kinds ("global",
	// "local") repeated to Layers.
	Types []string
	// Buffers writes the causal-mask buffers (attn.attention.bias,
	// masked_bias) old checkpoints hold.
	Buffers bool
	Seed    uint64
}

// Tiny is a small GPT-Neo: 4 layers alternating global and local with a
// window of 4 tokens (shorter than the test prompts), hidden 32, 4
// heads, a table of 40 positions, an eps of 0.02 (large enough that a
// misread one shows), the buffers.
func Tiny() GPTNeo {
	return GPTNeo{Vocab: 64, Hidden: 32, Layers: 4, Heads: 4, Positions: 40, Window: 4, Eps: 0.02, Types: []string{"global", "local"}, Buffers: true, Seed: 160}
}

func (c GPTNeo) kind(l int) string { return c.Types[l%len(c.Types)] }

func (c GPTNeo) tensors() []lmckpt.Spec {
	H := c.Hidden
	out := []lmckpt.Spec{lmckpt.NewSpec("transformer.wte.weight", []int{c.Vocab, H}, "embed"), lmckpt.NewSpec("transformer.wpe.weight", []int{c.Positions, H}, "embed")}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.h.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, lmckpt.NewSpec(p+name, shape, init)) }
		add("ln_1.weight", "norm", H)
		add("ln_1.bias", "bias", H)
		for _, proj := range []string{"k_proj", "v_proj", "q_proj"} {
			add("attn.attention."+proj+".weight", "linear", H, H)
		}
		add("attn.attention.out_proj.weight", "linear", H, H)
		add("attn.attention.out_proj.bias", "bias", H)
		if c.Buffers {
			add("attn.attention.bias", "mask", 1, 1, c.Positions, c.Positions)
			add("attn.attention.masked_bias", "mask")
		}
		add("ln_2.weight", "norm", H)
		add("ln_2.bias", "bias", H)
		add("mlp.c_fc.weight", "linear", 4*H, H)
		add("mlp.c_fc.bias", "bias", 4*H)
		add("mlp.c_proj.weight", "linear", H, 4*H)
		add("mlp.c_proj.bias", "bias", H)
	}
	return append(out, lmckpt.NewSpec("transformer.ln_f.weight", []int{H}, "norm"), lmckpt.NewSpec("transformer.ln_f.bias", []int{H}, "bias"))
}

// ConfigJSON is the config.json with GPTNeoConfig's names.
func (c GPTNeo) ConfigJSON() map[string]any {
	layers := make([]string, c.Layers)
	for l := range layers {
		layers[l] = c.kind(l)
	}
	return map[string]any{
		"architectures": []string{"GPTNeoForCausalLM"}, "model_type": "gpt_neo", "activation_function": "gelu_new",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "num_layers": c.Layers, "num_heads": c.Heads,
		"intermediate_size": nil, "max_position_embeddings": c.Positions, "window_size": c.Window,
		"attention_types": []any{[]any{c.Types, c.Layers / len(c.Types)}}, "attention_layers": layers,
		"layer_norm_epsilon": c.Eps, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c GPTNeo) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		if t.Init == "mask" { // never read
			n := 1
			for _, d := range t.Shape {
				n *= d
			}
			ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: make([]float32, n)})
			continue
		}
		v := lmckpt.Fill(r, t.Shape, func(u float64, fan int) float64 {
			switch t.Init {
			case "embed":
				return u
			case "norm":
				return 1 + 0.2*u
			case "bias":
				return 0.3 * u
			}
			return u / math.Sqrt(float64(fan)) // small enough that the unscaled scores stay near a real model's
		})
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: v})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C GPTNeo
	W map[string][]float64
	// Global is a mutant for the tests: every layer attends in full.
	Global bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c GPTNeo) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "gptneoref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W["transformer."+name]
	if !ok {
		panic(fmt.Sprintf("gptneoref: no tensor %q", "transformer."+name))
	}
	return v
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token: wte + wpe, each block x + attn(ln_1(x)), then +
// mlp(ln_2(x)), then ln_f and the head tied to wte. A local layer's query
// t sees the keys s with t - window < s <= t.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.Hidden/c.Heads
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	wte, wpe := m.get("wte.weight"), m.get("wpe.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = make([]float64, H)
		for i := range x[t] {
			x[t][i] = wte[id*H+i] + wpe[t*H+i]
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("h.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h := ln(x[t], p+"ln_1")
			qa := lmckpt.Linear64(h, m.get(p+"attn.attention.q_proj.weight"), nil)
			ka := lmckpt.Linear64(h, m.get(p+"attn.attention.k_proj.weight"), nil)
			va := lmckpt.Linear64(h, m.get(p+"attn.attention.v_proj.weight"), nil)
			for hd := 0; hd < c.Heads; hd++ {
				q[t] = append(q[t], qa[hd*D:(hd+1)*D])
				k[t] = append(k[t], ka[hd*D:(hd+1)*D])
				v[t] = append(v[t], va[hd*D:(hd+1)*D])
			}
		}
		var sees func(t, s int) bool
		if c.kind(l) == "local" && !m.Global {
			sees = func(t, s int) bool { return t-s < c.Window }
		}
		att := lmckpt.Attention64(q, k, v, 1, sees) // GPTNeoSelfAttention: q·k, not scaled
		for t := range x {
			a := lmckpt.Linear64(att[t], m.get(p+"attn.attention.out_proj.weight"), m.get(p+"attn.attention.out_proj.bias"))
			for i := range x[t] {
				x[t][i] += a[i]
			}
			f := lmckpt.Linear64(ln(x[t], p+"ln_2"), m.get(p+"mlp.c_fc.weight"), m.get(p+"mlp.c_fc.bias"))
			for i := range f {
				f[i] = 0.5 * f[i] * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(f[i]+0.044715*f[i]*f[i]*f[i])))
			}
			y := lmckpt.Linear64(f, m.get(p+"mlp.c_proj.weight"), m.get(p+"mlp.c_proj.bias"))
			for i := range x[t] {
				x[t][i] += y[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "ln_f"), wte, nil)
	}
	return out
}
