// Package graniteref is a plain-Go float64 forward pass of
// GraniteForCausalLM (IBM Granite 3.x dense, e.g.
// ibm-granite/granite-3.1-8b-instruct) and GraniteMoeForCausalLM
// (granite-3.x-1b-a400m and 3b-a800m) written from transformers'
// models/granite/modular_granite.py, configuration_granite.py,
// models/granitemoe/modular_granitemoe.py, configuration_granitemoe.py
// and the JetMoe router and experts GraniteMoe imports (eager path).
//
// Both are a Llama decoder (RMSNorm, grouped-query attention without
// biases, rotate-half rotary of rope_theta, head_dim hidden/heads) with
// four multipliers from config.json:
//
//   - embedding_multiplier: the token embeddings are multiplied by it
//     before the first layer (GraniteModel.forward);
//   - attention_multiplier: the attention scores q·k are multiplied by it
//     INSTEAD of head_dim^-0.5 (GraniteAttention.scaling);
//   - residual_multiplier: each sublayer's output (attention after o_proj,
//     and the MLP or MoE block) is multiplied by it before it is added to
//     the residual stream (GraniteDecoderLayer); the residual itself is
//     not scaled;
//   - logits_scaling: the output head's logits are DIVIDED by it
//     (GraniteForCausalLM.forward), after the final norm and lm_head.
//
// GraniteForCausalLM's MLP is Llama's SwiGLU (mlp.gate_proj, up_proj,
// down_proj). GraniteMoeForCausalLM replaces it in every layer by
// block_sparse_moe: the router block_sparse_moe.router.layer [E, H] (no
// bias) scores the experts, the top num_experts_per_tok logits are kept
// and a softmax is taken over those k logits alone; each expert's
// input_linear [2·I, H] output is cut in two along its last dimension,
// lmckpt.SiLU64(first half) · second half (gate first, up second), and
// output_linear [H, I] maps it back; the chosen experts' outputs are
// summed with the softmax weights. Attention, rotary, norms and the four
// multipliers are the same code in both models.
//
// It follows the style of pipeline/testkit/ernieref: straight loops over
// one sequence, no caches, no padding, and no code shared with
// pipeline/nn or the architecture packages it checks. It also writes the
// tiny checkpoints the tests use: a config.json with the fields of
// ibm-granite/granite-3.1-*-instruct's and a float32 model.safetensors
// with the exact tensor names of the releases and deterministic
// pseudo-random weights.
//
// What transformers computes in float32 whatever the model's dtype (the
// router logits are cast to float32 before the top-k and the softmax, and
// the k weights are cast back to the hidden states' dtype; RMSNorm; the
// attention softmax; cos and sin of the rotary) is float64 here like
// everything else.
package graniteref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Granite describes a GraniteForCausalLM (Experts 0) or a
// GraniteMoeForCausalLM (Experts > 0) by the fields of its config.json.
// attention_bias and mlp_bias are always false: this package refuses
// biases, as the releases have none.
type Granite struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers. Intermediate (intermediate_size) is the width of
	// the dense SwiGLU, or of every expert when Experts > 0.
	Vocab, Hidden, Intermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads:
	// query head h reads key/value head h/(Heads/KVHeads). Every head is
	// Hidden/Heads wide (the configs have no head_dim).
	Heads, KVHeads int
	// Experts is num_local_experts; 0 means the dense
	// GraniteForCausalLM. TopK is num_experts_per_tok.
	Experts, TopK int
	// EmbeddingMultiplier multiplies the token embeddings;
	// AttentionMultiplier is the attention scores' scale (in place of
	// head_dim^-0.5); ResidualMultiplier multiplies each sublayer's output
	// before the residual add; LogitsScaling divides the logits. The
	// config classes default all four to 1.
	EmbeddingMultiplier, AttentionMultiplier, ResidualMultiplier, LogitsScaling float64
	// Theta is rope_theta (the config classes' default 10000); Eps is
	// rms_norm_eps (default 1e-6), the eps of every RMSNorm.
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head
	// (tie_word_embeddings: false by default in both config classes, true
	// in the Granite 3.x releases).
	Tied bool
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyGranite is a small dense Granite 3.x: hidden 32, 2 layers,
// grouped-query attention of 4 query heads on 2 key/value heads (head_dim
// 8), SwiGLU of width 48, vocabulary 96, embedding_multiplier 12,
// attention_multiplier 0.03, residual_multiplier 0.22, logits_scaling 6,
// rope_theta 10000, rms_norm_eps 1e-5, tied embeddings.
func TinyGranite() Granite {
	return Granite{
		Vocab: 96, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2,
		EmbeddingMultiplier: 12, AttentionMultiplier: 0.03, ResidualMultiplier: 0.22, LogitsScaling: 6,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 3100,
	}
}

// TinyGraniteMoe is a small granite-3.x-a400m-style GraniteMoe: hidden 32,
// 2 layers, 4 query heads on 2 key/value heads (head_dim 8), 8 experts of
// width 16 of which 2 are chosen per token, vocabulary 96,
// embedding_multiplier 8, attention_multiplier 0.125 (1/head_dim, not
// 1/sqrt(head_dim)), residual_multiplier 0.3, logits_scaling 4,
// rope_theta 10000, rms_norm_eps 1e-6, an untied lm_head.
func TinyGraniteMoe() Granite {
	return Granite{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 2, Heads: 4, KVHeads: 2,
		Experts: 8, TopK: 2,
		EmbeddingMultiplier: 8, AttentionMultiplier: 0.125, ResidualMultiplier: 0.3, LogitsScaling: 4,
		Theta: 10000, Eps: 1e-6, Tied: false, Seed: 3101,
	}
}

// MoE reports whether the description is a GraniteMoeForCausalLM.
func (c Granite) MoE() bool { return c.Experts > 0 }

// headDim is Hidden/Heads.
func (c Granite) headDim() int { return c.Hidden / c.Heads }

// check reports a description transformers could not build (or this
// package could not compute).
func (c Granite) check() error {
	switch {
	case c.Heads <= 0 || c.Hidden%c.Heads != 0:
		return fmt.Errorf("graniteref: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("graniteref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.headDim()%2 != 0:
		return fmt.Errorf("graniteref: head dim %d is odd", c.headDim())
	case c.Experts < 0 || (c.Experts > 0 && (c.TopK <= 0 || c.TopK > c.Experts)):
		return fmt.Errorf("graniteref: top %d of %d experts", c.TopK, c.Experts)
	case c.LogitsScaling == 0:
		return fmt.Errorf("graniteref: logits_scaling 0")
	case c.Theta <= 0:
		return fmt.Errorf("graniteref: rope_theta %g", c.Theta)
	}
	return nil
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	// Init decides the values, see fill.
	Init string
}

// Tensors lists the checkpoint tensors with the names of the Hub releases,
// in the order Write draws them: model.embed_tokens.weight; per layer
// input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm
// and either mlp.{gate,up,down}_proj (dense, width Intermediate) or
// block_sparse_moe.router.layer.weight [Experts, Hidden],
// block_sparse_moe.input_linear.weight [Experts, 2·Intermediate, Hidden]
// and block_sparse_moe.output_linear.weight [Experts, Hidden,
// Intermediate] (MoE); model.norm.weight; lm_head.weight only when
// untied.
func (c Granite) Tensors() []Tensor {
	H, D := c.Hidden, c.headDim()
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("post_attention_layernorm.weight", "norm", H)
		if !c.MoE() {
			add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
			add("mlp.up_proj.weight", "linear", c.Intermediate, H)
			add("mlp.down_proj.weight", "linear", H, c.Intermediate)
			continue
		}
		add("block_sparse_moe.router.layer.weight", "router", c.Experts, H)
		add("block_sparse_moe.input_linear.weight", "expert", c.Experts, 2*c.Intermediate, H)
		add("block_sparse_moe.output_linear.weight", "expert", c.Experts, H, c.Intermediate)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in)        (activations stay O(1))
//	expert  uniform / sqrt(last dim)      (the fan-in of one expert's
//	                                       matrix, not of the stack)
//	embed   uniform · 0.25                (times embedding_multiplier 8
//	                                       or 12 the stream is O(1))
//	norm    1 ± 0.2                       (so every norm's weights matter)
//	router  uniform · sqrt(6/fan-in)      (logits of standard deviation
//	                                       about 1.4 on a normed input: the
//	                                       top 2 of 8 change from token to
//	                                       token)
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	fan := n / t.Shape[0]
	last := t.Shape[len(t.Shape)-1]
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch t.Init {
		case "linear":
			v[i] = float32(u / math.Sqrt(float64(fan)))
		case "expert":
			v[i] = float32(u / math.Sqrt(float64(last)))
		case "embed":
			v[i] = float32(0.25 * u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "router":
			v[i] = float32(u * math.Sqrt(6/float64(fan)))
		default:
			panic("graniteref: unknown init " + t.Init)
		}
	}
	return v
}

// ConfigJSON returns the config.json, its fields named as in
// ibm-granite/granite-3.1-8b-instruct's (dense: architectures
// GraniteForCausalLM, model_type granite, mlp_bias false) or
// granite-3.1-3b-a800m-instruct's (MoE: GraniteMoeForCausalLM,
// granitemoe, num_local_experts, num_experts_per_tok,
// output_router_logits false, router_aux_loss_coef; GraniteMoeConfig has
// no mlp_bias), with the four multipliers, rope_theta, rms_norm_eps,
// attention_bias false, tie_word_embeddings, bos, eos and pad 0, silu,
// but max_position_embeddings 256 and float32.
func (c Granite) ConfigJSON() map[string]any {
	cfg := map[string]any{
		"architectures":           []string{"GraniteForCausalLM"},
		"model_type":              "granite",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"max_position_embeddings": 256,
		"embedding_multiplier":    c.EmbeddingMultiplier,
		"attention_multiplier":    c.AttentionMultiplier,
		"residual_multiplier":     c.ResidualMultiplier,
		"logits_scaling":          c.LogitsScaling,
		"rope_theta":              c.Theta,
		"rope_scaling":            nil,
		"rms_norm_eps":            c.Eps,
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"tie_word_embeddings":     c.Tied,
		"hidden_act":              "silu",
		"initializer_range":       0.02,
		"use_cache":               true,
		"bos_token_id":            0,
		"eos_token_id":            0,
		"pad_token_id":            0,
		"torch_dtype":             "float32",
	}
	if c.MoE() {
		cfg["architectures"] = []string{"GraniteMoeForCausalLM"}
		cfg["model_type"] = "granitemoe"
		cfg["num_local_experts"] = c.Experts
		cfg["num_experts_per_tok"] = c.TopK
		cfg["output_router_logits"] = false
		cfg["router_aux_loss_coef"] = 0.0
	} else {
		cfg["mlp_bias"] = false
	}
	return cfg
}

// Write writes dir/config.json, dir/generation_config.json (bos, eos and
// pad 0, as config.json says) and dir/model.safetensors in float32, with
// values drawn from lmckpt.NewRand(Seed) in the order of Tensors.
func (c Granite) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C Granite
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64
	// Mistakes switches on mistakes the tests (this package's and the
	// model's) must tell apart; the zero value is none.
	Mistakes Mistakes
}

// Mistakes are deliberate departures from Granite, one switch each:
// NoEmbeddingMultiplier leaves the embeddings unscaled;
// DefaultAttentionScale scales the scores by head_dim^-0.5 (Llama's)
// instead of attention_multiplier; NoResidualMultiplier adds each
// sublayer's output unscaled; NoLogitsScaling leaves the logits undivided;
// UpFirst reads the first half of an expert's input_linear output as up
// and the second as gate (MoE only).
type Mistakes struct {
	NoEmbeddingMultiplier, DefaultAttentionScale, NoResidualMultiplier, NoLogitsScaling, UpFirst bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c Granite) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "graniteref"}
	for _, t := range c.Tensors() {
		chk.Shaped(t.Name, t.Shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("graniteref: checkpoint has no tensor %q", name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Rotary embedding

// RopeFreqs returns the inverse frequencies [head_dim/2],
// rope_theta^(-2i/head_dim) (default rope, attention factor 1).
func (c Granite) RopeFreqs() []float64 {
	d := c.headDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotateHalf is Llama's apply_rotary_pos_emb on one head x [2·len(inv)]
// at position pos: cos and sin of cat(freqs, freqs), rotate_half(x) =
// cat(-x2, x1), so entry j turns with entry j+D/2 by the angle
// pos·inv_j.
func rotateHalf(x []float64, pos int, inv []float64) []float64 {
	half := len(inv)
	out := make([]float64, len(x))
	for j, f := range inv {
		cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[j], x[half+j]
		out[j] = a*cs - b*sn
		out[half+j] = b*cs + a*sn
	}
	return out
}

// ----------------------------------------------------------------------------
// Router and MoE block

// Route is GraniteMoeTopKGating (JetMoe's) on one token: logits are its
// router logits (block_sparse_moe.router.layer(h), [Experts]). The TopK
// largest logits are kept (in decreasing order, the lower index on ties)
// and their weights are the softmax of those TopK logits alone, not of
// all Experts.
func (c Granite) Route(logits []float64) (ids []int, weights []float64) {
	taken := make([]bool, len(logits))
	var top []float64
	for range c.TopK {
		best := -1
		for e, v := range logits {
			if !taken[e] && (best < 0 || v > logits[best]) {
				best = e
			}
		}
		taken[best] = true
		ids = append(ids, best)
		top = append(top, logits[best])
	}
	return ids, lmckpt.Softmax64(top)
}

// Experts returns the ids and weights of the experts that layer l's
// block_sparse_moe chooses for its input h (the post_attention_layernorm
// output, [Hidden]), as Route gives them from the layer's router.
func (m *Model) Experts(l int, h []float64) (ids []int, weights []float64) {
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	return m.C.Route(lmckpt.Linear64(h, m.get(p+"router.layer.weight"), nil))
}

// expert is expert e of layer l's block_sparse_moe on h:
// output_linear[e](lmckpt.SiLU64(g) · u) where (g, u) = input_linear[e](h) cut in
// two along its last dimension, g the first Intermediate entries (the
// second with the UpFirst mistake).
func (m *Model) expert(l, e int, h []float64) []float64 {
	c := m.C
	H, I := c.Hidden, c.Intermediate
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	in := m.get(p + "input_linear.weight")[e*2*I*H : (e+1)*2*I*H]
	outW := m.get(p + "output_linear.weight")[e*H*I : (e+1)*H*I]
	y := lmckpt.Linear64(h, in, nil)
	g, u := y[:I], y[I:]
	if m.Mistakes.UpFirst {
		g, u = u, g
	}
	a := make([]float64, I)
	for i := range a {
		a[i] = lmckpt.SiLU64(g[i]) * u[i]
	}
	return lmckpt.Linear64(a, outW, nil)
}

// moe is GraniteMoeMoE on one token h: Σ_j w_j expert_{e_j}(h) over the
// experts Route picks.
func (m *Model) moe(l int, h []float64) []float64 {
	ids, ws := m.Experts(l, h)
	out := make([]float64, len(h))
	for j, e := range ids {
		y := m.expert(l, e, h)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	return out
}

// mlp is GraniteMLP (LlamaMLP) of layer prefix p on h:
// down_proj(lmckpt.SiLU64(gate_proj(h)) · up_proj(h)), no biases.
func (m *Model) mlp(p string, h []float64) []float64 {
	return lmckpt.SwiGLU64(h, m.get(p+"mlp.gate_proj.weight"), m.get(p+"mlp.up_proj.weight"), m.get(p+"mlp.down_proj.weight"))
}

// ----------------------------------------------------------------------------
// Attention

// attentionScale is attention_multiplier, or head_dim^-0.5 with the
// DefaultAttentionScale mistake.
func (m *Model) attentionScale() float64 {
	if m.Mistakes.DefaultAttentionScale {
		return 1 / math.Sqrt(float64(m.C.headDim()))
	}
	return m.C.AttentionMultiplier
}

// attention is GraniteAttention (input_layernorm included) of layer
// prefix p on the residual stream x [T][Hidden] at positions start,
// start+1, …: q_proj, k_proj, v_proj (no biases) cut into heads, q and k
// turned by rotateHalf, scores q·k times attention_multiplier, causal
// softmax, query head h reading key/value head h/(Heads/KVHeads)
// (repeat_kv). It returns every position's head outputs concatenated,
// [T][Hidden], before o_proj.
func (m *Model) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	D := c.headDim()
	inv := c.RopeFreqs()
	scale := m.attentionScale()
	heads := func(h []float64, name string, n, pos int, turn bool) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+"self_attn."+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if turn {
				out[i] = rotateHalf(out[i], pos, inv)
			}
		}
		return out
	}
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		query[t] = heads(h, "q_proj", c.Heads, start+t, true)
		key[t] = heads(h, "k_proj", c.KVHeads, start+t, true)
		value[t] = heads(h, "v_proj", c.KVHeads, start+t, false)
	}
	return lmckpt.Attention64(query, key, value, scale, nil)
}

// ----------------------------------------------------------------------------
// Decoder

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token, already
// divided by logits_scaling.
func (m *Model) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, …: the
// embedding times embedding_multiplier; per layer
// x += residual_multiplier · o_proj(attention(x)), then
// x += residual_multiplier · mlp(post_attention_layernorm(x)), mlp being
// GraniteMLP or block_sparse_moe; model.norm; the head (lm_head, or the
// embedding when tied) divided by logits_scaling.
func (m *Model) logits(tokens []int, start int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	mult := c.EmbeddingMultiplier
	if m.Mistakes.NoEmbeddingMultiplier {
		mult = 1
	}
	res := c.ResidualMultiplier
	if m.Mistakes.NoResidualMultiplier {
		res = 1
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("graniteref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = make([]float64, H)
		for i, v := range emb[id*H : (id+1)*H] {
			x[t][i] = v * mult
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		att := m.attention(p, x, start)
		for t := range x {
			o := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			for i := range o {
				x[t][i] += res * o[i]
			}
			h := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			var y []float64
			if c.MoE() {
				y = m.moe(l, h)
			} else {
				y = m.mlp(p, h)
			}
			for i := range y {
				x[t][i] += res * y[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	div := c.LogitsScaling
	if m.Mistakes.NoLogitsScaling {
		div = 1
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.norm.weight"), c.Eps), m.get(head), nil)
		for i := range out[t] {
			out[t][i] /= div
		}
	}
	return out
}
