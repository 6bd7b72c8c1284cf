// Package gpt2ref is a plain-Go float64 forward pass of GPT2LMHeadModel,
// written from transformers' models/gpt2 (GPT2Model's wte + wpe, GPT2Block
// with ln_1 and ln_2, GPT2Attention's c_attn split into query, key and
// value, GPT2MLP, ln_f and the tied lm_head, every projection a Conv1D:
// x·W + b with W stored [in, out]), and the tiny checkpoints its tests
// run, under the checkpoints' own tensor names; and, with GPT2.BigCode,
// GPTBigCodeForCausalLM (models/gpt_bigcode: nn.Linear projections, c_attn
// split into the queries and one key and value head with multi_query, or
// by head, each head's query, key and value together, without). It shares
// no code with pipeline/llama or pipeline/gpt2.
package gpt2ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// GPT2 describes a tiny GPT-2 by the fields of its config.json.
type GPT2 struct {
	Vocab, Hidden, Layers, Heads, Positions int
	// Inner is n_inner; 0 writes null, 4 × Hidden.
	Inner int
	Eps   float64
	// Prefix is the tensors' prefix: "transformer." (GPT2LMHeadModel's
	// save_pretrained) or "" (GPT2Model's, openai-community/gpt2's).
	Prefix string
	// Buffers writes the causal-mask buffers (attn.bias, attn.masked_bias).
	Buffers bool
	// StoredHead writes lm_head.weight, a copy of wte (some fine-tunes
	// save the tied head).
	StoredHead bool
	// Unscaled writes scale_attn_weights false: scores not divided by
	// the square root of the head size.
	Unscaled bool
	// InverseLayer writes scale_attn_by_inverse_layer_idx true: layer
	// l's scores also divided by l + 1 (Stanford CRFM's GPT-2s).
	InverseLayer bool
	// BigCode makes it a GPTBigCodeForCausalLM (Linear matrices, [out,
	// in]); MultiQuery (BigCode only) gives it one key and value head.
	BigCode, MultiQuery bool
	Seed                uint64
}

// TinyBigCode is a small GPTBigCode: Tiny's sizes with multi-query
// attention, without the buffers (GPTBigCodeModel's mask is not saved).
func TinyBigCode() GPT2 {
	c := Tiny()
	c.BigCode, c.MultiQuery, c.Buffers, c.Seed = true, true, false, 130
	return c
}

// kvDim is the width of the keys (and of the values): one head's with
// multi_query, all heads' otherwise.
func (c GPT2) kvDim() int {
	if c.BigCode && c.MultiQuery {
		return c.Hidden / c.Heads
	}
	return c.Hidden
}

// matrix is a projection's stored shape: Conv1D's [in, out] for GPT-2,
// Linear's [out, in] for GPTBigCode.
func (c GPT2) matrix(in, out int) []int {
	if c.BigCode {
		return []int{out, in}
	}
	return []int{in, out}
}

// Tiny is a small GPT-2: 3 layers, hidden 32, 4 heads of 8, n_inner
// null, a table of 40 positions, GPT2LMHeadModel's names and the buffers.
func Tiny() GPT2 {
	return GPT2{Vocab: 64, Hidden: 32, Layers: 3, Heads: 4, Positions: 40, Eps: 1e-5, Prefix: "transformer.", Buffers: true, Seed: 120}
}

func (c GPT2) inner() int {
	if c.Inner == 0 {
		return 4 * c.Hidden
	}
	return c.Inner
}

func (c GPT2) tensors() []lmckpt.Spec {
	H, I, p0 := c.Hidden, c.inner(), c.Prefix
	out := []lmckpt.Spec{lmckpt.NewSpec(p0+"wte.weight", []int{c.Vocab, H}, "embed"), lmckpt.NewSpec(p0+"wpe.weight", []int{c.Positions, H}, "embed")}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%sh.%d.", p0, l)
		add := func(name, init string, shape ...int) { out = append(out, lmckpt.NewSpec(p+name, shape, init)) }
		add("ln_1.weight", "norm", H)
		add("ln_1.bias", "bias", H)
		add("attn.c_attn.weight", "matrix", c.matrix(H, H+2*c.kvDim())...)
		add("attn.c_attn.bias", "bias", H+2*c.kvDim())
		add("attn.c_proj.weight", "matrix", c.matrix(H, H)...)
		add("attn.c_proj.bias", "bias", H)
		add("ln_2.weight", "norm", H)
		add("ln_2.bias", "bias", H)
		add("mlp.c_fc.weight", "matrix", c.matrix(H, I)...)
		add("mlp.c_fc.bias", "bias", I)
		add("mlp.c_proj.weight", "matrix", c.matrix(I, H)...)
		add("mlp.c_proj.bias", "bias", H)
		if c.Buffers {
			add("attn.bias", "mask", 1, 1, c.Positions, c.Positions)
			add("attn.masked_bias", "mask")
		}
	}
	return append(out, lmckpt.NewSpec(p0+"ln_f.weight", []int{H}, "norm"), lmckpt.NewSpec(p0+"ln_f.bias", []int{H}, "bias"))
}

// ConfigJSON is the config.json with GPT2Config's names.
func (c GPT2) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2",
		"vocab_size": c.Vocab, "n_embd": c.Hidden, "n_inner": c.Inner, "n_layer": c.Layers, "n_head": c.Heads,
		"n_positions": c.Positions, "n_ctx": c.Positions, "layer_norm_epsilon": c.Eps, "activation_function": "gelu_new",
		"scale_attn_weights": !c.Unscaled, "scale_attn_by_inverse_layer_idx": c.InverseLayer, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
		"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "summary_type": "cls_index",
	}
	if c.Inner == 0 {
		j["n_inner"] = nil
	}
	if c.BigCode {
		j["architectures"], j["model_type"], j["activation_function"] = []string{"GPTBigCodeForCausalLM"}, "gpt_bigcode", "gelu_pytorch_tanh"
		j["multi_query"], j["attention_softmax_in_fp32"], j["scale_attention_softmax_in_fp32"] = c.MultiQuery, true, true
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c GPT2) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	var wte []float32
	for _, t := range c.tensors() {
		if t.Init == "mask" { // never read: ones (a scalar for masked_bias)
			n := 1
			for _, d := range t.Shape {
				n *= d
			}
			ones := make([]float32, n)
			for i := range ones {
				ones[i] = 1
			}
			ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: ones})
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
			if c.BigCode {
				return u / math.Sqrt(float64(t.Shape[1]))
			}
			return u / math.Sqrt(float64(t.Shape[0])) // Conv1D: the fan-in is the first axis
		})
		if t.Name == c.Prefix+"wte.weight" {
			wte = v
		}
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: v})
	}
	if c.StoredHead {
		ts = append(ts, lmckpt.F32Tensor{Name: "lm_head.weight", Shape: []int{c.Vocab, c.Hidden}, Values: wte})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C GPT2
	W map[string][]float64
	// Shift is a mutant for the tests: token t reads position row t +
	// Shift.
	Shift int
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c GPT2) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "gpt2ref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[m.C.Prefix+name]
	if !ok {
		panic(fmt.Sprintf("gpt2ref: no tensor %q", m.C.Prefix+name))
	}
	return v
}

// conv1d is transformers' Conv1D: x·W + b, W [in, out] row-major.
func conv1d(x, w, b []float64) []float64 {
	out := append([]float64(nil), b...)
	for i, xi := range x {
		row := w[i*len(out) : (i+1)*len(out)]
		for j, wij := range row {
			out[j] += xi * wij
		}
	}
	return out
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token: wte + wpe, each block x + attn(ln_1(x)), then + mlp(ln_2(x)),
// then ln_f and the head tied to wte.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.Hidden/c.Heads
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	x := make([][]float64, len(tokens))
	wte, wpe := m.get("wte.weight"), m.get("wpe.weight")
	for t, id := range tokens {
		x[t] = make([]float64, H)
		pos := t + m.Shift
		for i := range x[t] {
			x[t][i] = wte[id*H+i] + wpe[pos*H+i]
		}
	}
	scale := 1 / math.Sqrt(float64(D))
	if c.Unscaled {
		scale = 1
	}
	proj := conv1d
	if c.BigCode {
		proj = lmckpt.Linear64
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("h.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			qkv := proj(ln(x[t], p+"ln_1"), m.get(p+"attn.c_attn.weight"), m.get(p+"attn.c_attn.bias"))
			switch {
			case c.BigCode && c.MultiQuery: // the queries, then one key head and one value head
				for hd := 0; hd < c.Heads; hd++ {
					q[t] = append(q[t], qkv[hd*D:(hd+1)*D])
				}
				k[t] = [][]float64{qkv[H : H+D]}
				v[t] = [][]float64{qkv[H+D : H+2*D]}
			case c.BigCode: // view(heads, 3·head_dim): each head's query, key and value together
				for hd := 0; hd < c.Heads; hd++ {
					row := qkv[hd*3*D : (hd+1)*3*D]
					q[t] = append(q[t], row[:D])
					k[t] = append(k[t], row[D:2*D])
					v[t] = append(v[t], row[2*D:])
				}
			default: // split(n_embd): all the queries, all the keys, all the values
				for hd := 0; hd < c.Heads; hd++ {
					q[t] = append(q[t], qkv[hd*D:(hd+1)*D])
					k[t] = append(k[t], qkv[H+hd*D:H+(hd+1)*D])
					v[t] = append(v[t], qkv[2*H+hd*D:2*H+(hd+1)*D])
				}
			}
		}
		layerScale := scale
		if c.InverseLayer { // GPT2Attention: attn_weights / float(layer_idx + 1)
			layerScale /= float64(l + 1)
		}
		att := lmckpt.Attention64(q, k, v, layerScale, nil)
		for t := range x {
			a := proj(att[t], m.get(p+"attn.c_proj.weight"), m.get(p+"attn.c_proj.bias"))
			for i := range x[t] {
				x[t][i] += a[i]
			}
			f := proj(ln(x[t], p+"ln_2"), m.get(p+"mlp.c_fc.weight"), m.get(p+"mlp.c_fc.bias"))
			for i := range f {
				f[i] = geluNew(f[i])
			}
			y := proj(f, m.get(p+"mlp.c_proj.weight"), m.get(p+"mlp.c_proj.bias"))
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

// geluNew is transformers' NewGELUActivation (GPT-2's gelu_new), the tanh
// approximation, which PytorchGELUTanh (GPTBigCode's gelu_pytorch_tanh)
// computes too.
func geluNew(v float64) float64 {
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
}
