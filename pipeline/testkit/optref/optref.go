// Package optref is a plain-Go float64 forward pass of OPTForCausalLM,
// written from transformers' models/opt (OPTDecoder's embed_tokens plus
// OPTLearnedPositionalEmbedding, whose position p reads row p + 2,
// OPTDecoderLayer with do_layer_norm_before, OPTAttention with its
// queries scaled by head_dim^-0.5, fc1/fc2, the decoder's
// final_layer_norm and the tied head), and the tiny checkpoints its tests
// run, under the checkpoints' own tensor names. It shares no code with
// pipeline/llama or pipeline/opt.
package optref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// OPT describes a tiny OPT by the fields of its config.json.
type OPT struct {
	Vocab, Hidden, FFN, Layers, Heads, Positions int
	// Prefix is "model." (OPTForCausalLM's save_pretrained) or "" (the
	// first uploads', saved from OPTModel: decoder.*).
	Prefix string
	// StoredHead writes lm_head.weight, a copy of embed_tokens.
	StoredHead bool
	// NoBias is enable_bias false; NoAffine layer_norm_elementwise_affine
	// false (LayerNorms without weight and bias).
	NoBias, NoAffine bool
	// PostLN is do_layer_norm_before false (OPT-350M's): each LayerNorm
	// after its residual add, and no final LayerNorm.
	PostLN bool
	// EmbedDim, when not 0, is word_embed_proj_dim (OPT-350M's 512 under
	// a hidden size of 1024): embed_tokens [vocab, EmbedDim], project_in
	// and project_out around the decoder, the tied head EmbedDim wide.
	EmbedDim int
	Seed     uint64
}

// Tiny350M is a small OPT-350M: do_layer_norm_before false and
// embeddings half the hidden size, under OPTForCausalLM's names.
func Tiny350M() OPT {
	return OPT{Vocab: 64, Hidden: 32, FFN: 80, Layers: 3, Heads: 4, Positions: 40, Prefix: "model.", PostLN: true, EmbedDim: 16, Seed: 152}
}

// embedDim is the embeddings' width.
func (c OPT) embedDim() int {
	if c.EmbedDim > 0 {
		return c.EmbedDim
	}
	return c.Hidden
}

// Tiny is a small OPT: 3 layers, hidden 32, 4 heads, ffn_dim 80, a
// table of 40 positions (42 rows), the first uploads' names and a
// stored head.
func Tiny() OPT {
	return OPT{Vocab: 64, Hidden: 32, FFN: 80, Layers: 3, Heads: 4, Positions: 40, StoredHead: true, Seed: 150}
}

func (c OPT) tensors() []lmckpt.Spec {
	H, p0 := c.Hidden, c.Prefix+"decoder."
	out := []lmckpt.Spec{lmckpt.NewSpec(p0+"embed_tokens.weight", []int{c.Vocab, c.embedDim()}, "embed"), lmckpt.NewSpec(p0+"embed_positions.weight", []int{c.Positions + 2, H}, "embed")}
	if c.EmbedDim > 0 { // OPTDecoder's project_in and project_out, without biases
		out = append(out, lmckpt.NewSpec(p0+"project_in.weight", []int{H, c.EmbedDim}, "proj"), lmckpt.NewSpec(p0+"project_out.weight", []int{c.EmbedDim, H}, "proj"))
	}
	norm := func(p, name string) {
		if !c.NoAffine {
			out = append(out, lmckpt.NewSpec(p+name+".weight", []int{H}, "norm"), lmckpt.NewSpec(p+name+".bias", []int{H}, "bias"))
		}
	}
	linear := func(p, name string, o, i int) {
		out = append(out, lmckpt.NewSpec(p+name+".weight", []int{o, i}, "linear"))
		if !c.NoBias {
			out = append(out, lmckpt.NewSpec(p+name+".bias", []int{o}, "bias"))
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", p0, l)
		for _, proj := range []string{"k_proj", "v_proj", "q_proj", "out_proj"} {
			linear(p, "self_attn."+proj, H, H)
		}
		norm(p, "self_attn_layer_norm")
		linear(p, "fc1", c.FFN, H)
		linear(p, "fc2", H, c.FFN)
		norm(p, "final_layer_norm")
	}
	if !c.PostLN { // OPTDecoder builds its final_layer_norm only with do_layer_norm_before
		norm(p0, "final_layer_norm")
	}
	return out
}

// ConfigJSON is the config.json with OPTConfig's names, as
// facebook/opt-125m's has them.
func (c OPT) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"OPTForCausalLM"}, "model_type": "opt", "activation_function": "relu",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "ffn_dim": c.FFN, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "max_position_embeddings": c.Positions, "do_layer_norm_before": !c.PostLN,
		"word_embed_proj_dim": c.embedDim(), "enable_bias": !c.NoBias, "layer_norm_elementwise_affine": !c.NoAffine,
		"dropout": 0.1, "attention_dropout": 0.0, "layerdrop": 0.0, "init_std": 0.02, "prefix": "</s>",
		"bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c OPT) Write(dir string) error {
	ts := lmckpt.DrawSpecs(c.Seed, c.tensors(), func(init string, u float64, fan int) float64 {
		switch init {
		case "embed":
			return u
		case "norm":
			return 1 + 0.2*u
		case "bias":
			return 0.3 * u
		case "proj":
			return u / math.Sqrt(float64(fan))
		}
		return 2 * u / math.Sqrt(float64(fan))
	})
	if c.StoredHead { // a copy of embed_tokens (tensors' first)
		ts = append(ts, lmckpt.F32Tensor{Name: "lm_head.weight", Shape: ts[0].Shape, Values: ts[0].Values})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C OPT
	W map[string][]float64
	// Offset is a mutant for the tests: the row position p reads is p +
	// 2 + Offset. NormsBefore (with PostLN) is another: each LayerNorm
	// before its sublayer, as do_layer_norm_before true has them.
	Offset      int
	NormsBefore bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c OPT) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "optref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	full := m.C.Prefix + "decoder." + name
	v, ok := m.W[full]
	if !ok {
		panic(fmt.Sprintf("optref: no tensor %q", full))
	}
	return v
}

// bias is a projection's bias, or zeros without enable_bias.
func (m *Model) bias(name string, n int) []float64 {
	if m.C.NoBias {
		return make([]float64, n)
	}
	return m.get(name + ".bias")
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token: embed_tokens (through project_in) + embed_positions[p +
// 2], each layer x + out_proj(attn(self_attn_layer_norm(x))), then +
// fc2(relu(fc1(final_layer_norm(x)))) (with PostLN each LayerNorm on the
// sum instead), then the decoder's final_layer_norm (none with PostLN),
// project_out, and the head tied to embed_tokens.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.Hidden/c.Heads
	ln := func(x []float64, name string) []float64 {
		if c.NoAffine {
			ones, zeros := make([]float64, H), make([]float64, H)
			for i := range ones {
				ones[i] = 1
			}
			return lmckpt.LayerNorm64(x, ones, zeros, 1e-5)
		}
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), 1e-5)
	}
	lin := func(x []float64, name string, n int) []float64 {
		return lmckpt.Linear64(x, m.get(name+".weight"), m.bias(name, n))
	}
	emb, pos := m.get("embed_tokens.weight"), m.get("embed_positions.weight")
	E := c.embedDim()
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		row := t + 2 + m.Offset
		e := emb[id*E : (id+1)*E]
		if c.EmbedDim > 0 {
			e = lmckpt.Linear64(e, m.get("project_in.weight"), nil)
		}
		x[t] = make([]float64, H)
		for i := range x[t] {
			x[t][i] = e[i] + pos[row*H+i]
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h := x[t]
			if !c.PostLN || m.NormsBefore {
				h = ln(x[t], p+"self_attn_layer_norm")
			}
			qa := lin(h, p+"self_attn.q_proj", H)
			for i := range qa {
				qa[i] *= math.Pow(float64(D), -0.5) // OPTAttention scales the queries
			}
			ka, va := lin(h, p+"self_attn.k_proj", H), lin(h, p+"self_attn.v_proj", H)
			for hd := 0; hd < c.Heads; hd++ {
				q[t] = append(q[t], qa[hd*D:(hd+1)*D])
				k[t] = append(k[t], ka[hd*D:(hd+1)*D])
				v[t] = append(v[t], va[hd*D:(hd+1)*D])
			}
		}
		att := lmckpt.Attention64(q, k, v, 1, nil)
		for t := range x {
			a := lin(att[t], p+"self_attn.out_proj", H)
			for i := range x[t] {
				x[t][i] += a[i]
			}
			h := x[t]
			if c.PostLN && !m.NormsBefore { // do_layer_norm_before false: the norm after the residual add
				x[t] = ln(x[t], p+"self_attn_layer_norm")
				h = x[t]
			} else {
				h = ln(x[t], p+"final_layer_norm")
			}
			f := lin(h, p+"fc1", c.FFN)
			for i := range f {
				f[i] = math.Max(f[i], 0)
			}
			y := lin(f, p+"fc2", H)
			for i := range x[t] {
				x[t][i] += y[i]
			}
			if c.PostLN && !m.NormsBefore {
				x[t] = ln(x[t], p+"final_layer_norm")
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		h := x[t]
		if !c.PostLN {
			h = ln(h, "final_layer_norm")
		}
		if c.EmbedDim > 0 {
			h = lmckpt.Linear64(h, m.get("project_out.weight"), nil)
		}
		out[t] = lmckpt.Linear64(h, emb, nil)
	}
	return out
}
