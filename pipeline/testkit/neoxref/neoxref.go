// Package neoxref is a plain-Go float64 forward pass of GPTNeoXForCausalLM,
// written from transformers' models/gpt_neox (GPTNeoXLayer,
// GPTNeoXAttention with the fused query_key_value viewed as [heads, 3 ·
// head_size] and the rotary over the first rotary_pct of each head,
// GPTNeoXMLP), and the tiny checkpoints its tests run, under the
// checkpoints' own tensor names. It shares no code with pipeline/llama or
// pipeline/gptneox.
package neoxref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// NeoX describes a tiny GPT-NeoX by the fields of its config.json.
type NeoX struct {
	Vocab, Hidden, Intermediate, Layers, Heads int
	// RotaryPct is rotary_pct: the first int(head_size·RotaryPct) dims of
	// each query and key head rotate (rotate-half), base Theta.
	RotaryPct, Theta, Eps float64
	// Parallel is use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x));
	// without, x += attn(ln1(x)), then x += mlp(ln2(x)).
	Parallel bool
	// NoBias is attention_bias false: query_key_value and dense without
	// biases (the MLP keeps its own).
	NoBias bool
	// Tied reuses gpt_neox.embed_in as the head (no embed_out).
	Tied bool
	// Buffers writes tensors under the names of the causal-mask and
	// rotary buffers old Pythia checkpoints hold (attention.bias,
	// attention.masked_bias, attention.rotary_emb.inv_freq), which
	// transformers ignores; in float32, where Pythia's mask is BOOL.
	Buffers bool
	Seed    uint64
}

// Tiny is a small Pythia: 3 layers, hidden 32, 4 heads of 8 of which the
// first 2 dims rotate (rotary_pct 0.25), the parallel residual, an
// untied head, and the old buffers.
func Tiny() NeoX {
	return NeoX{Vocab: 64, Hidden: 32, Intermediate: 128, Layers: 3, Heads: 4, RotaryPct: 0.25, Theta: 10000, Eps: 1e-5,
		Parallel: true, Buffers: true, Seed: 100}
}

// TinySequential is Tiny on the other paths: the sequential residual, half
// of each head rotated, no attention biases, a tied head.
func TinySequential() NeoX {
	c := Tiny()
	c.Parallel, c.RotaryPct, c.NoBias, c.Tied, c.Buffers, c.Seed = false, 0.5, true, true, false, 101
	return c
}

func (c NeoX) headSize() int { return c.Hidden / c.Heads }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c NeoX) tensors() []tensor {
	H := c.Hidden
	out := []tensor{{"gpt_neox.embed_in.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("gpt_neox.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("input_layernorm.bias", "bias", H)
		add("post_attention_layernorm.weight", "norm", H)
		add("post_attention_layernorm.bias", "bias", H)
		add("attention.query_key_value.weight", "linear", 3*H, H)
		if !c.NoBias {
			add("attention.query_key_value.bias", "bias", 3*H)
		}
		add("attention.dense.weight", "linear", H, H)
		if !c.NoBias {
			add("attention.dense.bias", "bias", H)
		}
		add("mlp.dense_h_to_4h.weight", "linear", c.Intermediate, H)
		add("mlp.dense_h_to_4h.bias", "bias", c.Intermediate)
		add("mlp.dense_4h_to_h.weight", "linear", H, c.Intermediate)
		add("mlp.dense_4h_to_h.bias", "bias", H)
		if c.Buffers {
			add("attention.bias", "mask", 1, 1, 8, 8)
			add("attention.masked_bias", "bias", 1)
			add("attention.rotary_emb.inv_freq", "bias", int(float64(c.headSize())*c.RotaryPct)/2)
		}
	}
	out = append(out, tensor{"gpt_neox.final_layer_norm.weight", []int{H}, "norm"}, tensor{"gpt_neox.final_layer_norm.bias", []int{H}, "bias"})
	if !c.Tied {
		out = append(out, tensor{"embed_out.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with GPTNeoXConfig's names (the older
// rotary_pct and rotary_emb_base, as the Pythia releases write them).
func (c NeoX) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"GPTNeoXForCausalLM"}, "model_type": "gpt_neox",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "rotary_pct": c.RotaryPct, "rotary_emb_base": c.Theta, "layer_norm_eps": c.Eps,
		"use_parallel_residual": c.Parallel, "attention_bias": !c.NoBias, "tie_word_embeddings": c.Tied, "hidden_act": "gelu",
		"max_position_embeddings": 256, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c NeoX) Write(dir string) error {
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
			case "mask": // the lower triangle, as the buffer holds it; never read
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
	C NeoX
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c NeoX) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "neoxref"}
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
		panic(fmt.Sprintf("neoxref: no tensor %q", name))
	}
	return v
}

// bias is name's values, nil under NoBias for the attention's.
func (m *Model) bias(name string, attention bool) []float64 {
	if attention && m.C.NoBias {
		return nil
	}
	return m.get(name)
}

// attention is layer l's GPTNeoXAttention (dense included) on the normed
// inputs h [T][Hidden]: the fused projection viewed as [heads, 3, D].
func (m *Model) attention(p string, h [][]float64) [][]float64 {
	c := m.C
	D := c.headSize()
	rot := int(float64(D) * c.RotaryPct)
	q, k, v := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t, x := range h {
		qkv := lmckpt.Linear64(x, m.get(p+"attention.query_key_value.weight"), m.bias(p+"attention.query_key_value.bias", true))
		for hd := 0; hd < c.Heads; hd++ {
			base := hd * 3 * D
			q[t] = append(q[t], lmckpt.RotateHalf64(qkv[base:base+D], t, c.Theta, rot))
			k[t] = append(k[t], lmckpt.RotateHalf64(qkv[base+D:base+2*D], t, c.Theta, rot))
			v[t] = append(v[t], qkv[base+2*D:base+3*D])
		}
	}
	att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
	for t := range att {
		att[t] = lmckpt.Linear64(att[t], m.get(p+"attention.dense.weight"), m.bias(p+"attention.dense.bias", true))
	}
	return att
}

// mlp is GPTNeoXMLP: dense_4h_to_h(gelu(dense_h_to_4h(x))).
func (m *Model) mlp(p string, x []float64) []float64 {
	f := lmckpt.Linear64(x, m.get(p+"mlp.dense_h_to_4h.weight"), m.get(p+"mlp.dense_h_to_4h.bias"))
	for i := range f {
		f[i] = lmckpt.GELU64(f[i])
	}
	return lmckpt.Linear64(f, m.get(p+"mlp.dense_4h_to_h.weight"), m.get(p+"mlp.dense_4h_to_h.bias"))
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("gpt_neox.embed_in.weight")[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("gpt_neox.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = ln(x[t], p+"input_layernorm")
		}
		att := m.attention(p, h)
		for t := range x {
			if c.Parallel { // x + attn(ln1(x)) + mlp(ln2(x))
				y := m.mlp(p, ln(x[t], p+"post_attention_layernorm"))
				for i := range x[t] {
					x[t][i] += att[t][i] + y[i]
				}
				continue
			}
			for i := range x[t] {
				x[t][i] += att[t][i]
			}
			y := m.mlp(p, ln(x[t], p+"post_attention_layernorm"))
			for i := range x[t] {
				x[t][i] += y[i]
			}
		}
	}
	head := "embed_out.weight"
	if c.Tied {
		head = "gpt_neox.embed_in.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "gpt_neox.final_layer_norm"), m.get(head), nil)
	}
	return out
}
