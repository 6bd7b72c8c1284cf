// Package olmoeref is a plain-Go float64 forward pass of OlmoeForCausalLM
// (AllenAI's OLMoE-1B-7B and its instruct tunes) written from
// transformers' models/olmoe/modeling_olmoe.py and configuration_olmoe.py
// (eager path): grouped-query attention whose q_norm and k_norm are
// RMSNorms over the whole q and k projections (all heads at once, not per
// head), the optional clip_qkv clamp of q, k and v after those norms, a
// rotate-half rotary over the whole head, and in every layer a sparse MoE
// block (OlmoeSparseMoeBlock) whose router takes the softmax of its
// logits, keeps the top num_experts_per_tok probabilities and
// renormalises them only when norm_topk_prob is set. There is no shared
// expert and no dense layer. It follows the style of
// pipeline/testkit/dsref: straight loops over one sequence, no caches, no
// padding, and no code shared with pipeline/nn or the architecture
// packages it checks.
//
// With Olmoe.Flex it is FlexOlmoForCausalLM (models/flex_olmo/
// modular_flex_olmo.py: allenai/FlexOlmo-7x7B-1T): OLMoE's attention and
// sparse block in OLMo 2's layer, no norm before the attention or the
// block, each one's output RMS-normed (post_attention_layernorm,
// post_feedforward_layernorm) before it joins the residual, and no
// clip_qkv (its attention is Olmo2Attention).
//
// It also writes the tiny checkpoints the tests use: a config.json in the
// layout of allenai/OLMoE-1B-7B-0924's and a float32 model.safetensors
// with the exact tensor names of the release and deterministic
// pseudo-random weights.
//
// Where the implementations disagree, this package follows transformers:
//
//   - clip_qkv clamps the outputs of q_norm and k_norm (and v_proj's),
//     before the heads are cut and rotated. AllenAI's own OLMo training
//     code clamps the fused att_proj output before its q/k norms, and
//     vLLM's olmoe.py does not clamp at all; the release has clip_qkv
//     null, so neither difference shows there.
//   - norm_topk_prob is read. vLLM's olmoe.py always passes
//     renormalize=False (the release's value), and builds every RMSNorm
//     with eps 1e-5 whatever rms_norm_eps says (the release's value too).
package olmoeref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Olmoe describes an OlmoeForCausalLM by the fields of its config.json.
type Olmoe struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers; Intermediate (intermediate_size) is the width of
	// every expert: OLMoE has no dense MLP.
	Vocab, Hidden, Intermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads:
	// every head is Hidden/Heads wide (OlmoeConfig has no head_dim), and
	// query head h reads key/value head h/(Heads/KVHeads). The release is
	// multi-head (KVHeads = Heads).
	Heads, KVHeads int
	// Experts and TopK are num_experts and num_experts_per_tok.
	Experts, TopK int
	// NormTopK is norm_topk_prob: the chosen experts' probabilities are
	// divided by their sum. The release has false.
	NormTopK bool
	// ClipQKV is clip_qkv: q, k and v are clamped to [-ClipQKV, ClipQKV]
	// after q_norm and k_norm. 0 writes null: no clamp.
	ClipQKV float64
	// Theta is rope_theta; Eps is rms_norm_eps, the eps of every RMSNorm
	// of the model, q_norm and k_norm included.
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head
	// (tie_word_embeddings); the release is untied.
	Tied bool
	// Seed makes the weights reproducible.
	Seed uint64
	// Flex writes a FlexOlmoForCausalLM (see the package comment):
	// ClipQKV must be 0.
	Flex bool
}

// TinyOlmoe is a small OLMoE-1B-7B: multi-head attention (4 heads of 8
// dims), 2 layers of 8 experts of width 16 of which 2 are chosen, their
// probabilities not renormalised, no clip_qkv, an untied head.
func TinyOlmoe() Olmoe {
	return Olmoe{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 2,
		Heads: 4, KVHeads: 4, Experts: 8, TopK: 2,
		Theta: 10000, Eps: 1e-5, Seed: 70,
	}
}

// TinyOlmoeGQA is TinyOlmoe on the other paths: 2 key/value heads
// (k_norm 16 wide, q_norm 32), the chosen probabilities renormalised,
// clip_qkv 0.5 (small enough that it clamps a good share of the normed q
// and k and of v), and a tied head.
func TinyOlmoeGQA() Olmoe {
	c := TinyOlmoe()
	c.KVHeads, c.NormTopK, c.ClipQKV, c.Tied, c.Seed = 2, true, 0.5, true, 71
	return c
}

// TinyFlexOlmo is a small FlexOlmo: OLMo 2's post norms around OLMoE's
// attention (4 heads of 8 on 2 key/value heads) and sparse block (8
// experts of width 16, the top 2 not renormalised), 2 layers, rms_norm_eps
// 1e-6, an untied head.
func TinyFlexOlmo() Olmoe {
	c := TinyOlmoe()
	c.KVHeads, c.Eps, c.Flex, c.Seed = 2, 1e-6, true, 72
	return c
}

// HeadDim is the width of every query, key and value head:
// hidden_size // num_attention_heads.
func (c Olmoe) HeadDim() int { return c.Hidden / c.Heads }

// check reports a description transformers could not build (or this
// package could not compute).
func (c Olmoe) check() error {
	switch {
	case c.Heads <= 0 || c.Hidden%c.Heads != 0:
		return fmt.Errorf("olmoeref: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("olmoeref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("olmoeref: odd head dim %d", c.HeadDim())
	case c.TopK <= 0 || c.TopK > c.Experts:
		return fmt.Errorf("olmoeref: top %d of %d experts", c.TopK, c.Experts)
	case c.ClipQKV < 0 || c.Flex && c.ClipQKV != 0:
		return fmt.Errorf("olmoeref: clip_qkv %g", c.ClipQKV)
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

// Tensors lists the checkpoint tensors with the names of the Hub release
// (allenai/OLMoE-1B-7B-0924: one gate_proj, up_proj and down_proj per
// expert, which later transformers fuse into experts.gate_up_proj and
// experts.down_proj when they load them), in the order Write draws them.
// q_norm is as wide as the whole q projection (Hidden) and k_norm as the
// whole k projection (KVHeads·HeadDim).
func (c Olmoe) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim()
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		if !c.Flex {
			add("input_layernorm.weight", "norm", H)
		}
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("self_attn.q_norm.weight", "norm", c.Heads*D)
		add("self_attn.k_norm.weight", "norm", c.KVHeads*D)
		add("post_attention_layernorm.weight", "norm", H)
		add("mlp.gate.weight", "router", c.Experts, H)
		for e := 0; e < c.Experts; e++ {
			q := fmt.Sprintf("mlp.experts.%d.", e)
			add(q+"gate_proj.weight", "linear", c.Intermediate, H)
			add(q+"up_proj.weight", "linear", c.Intermediate, H)
			add(q+"down_proj.weight", "linear", H, c.Intermediate)
		}
		if c.Flex {
			add("post_feedforward_layernorm.weight", "norm", H)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in)     (activations stay O(1))
//	embed   uniform
//	norm    1 ± 0.2                    (so every norm's weights matter)
//	router  uniform · sqrt(6/fan-in)   (logits of standard deviation about 1.4
//	                                    on a normed input: the softmax over 8
//	                                    experts is far from flat and far from
//	                                    one-hot, so the top 2 vary by token)
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
		case "embed":
			v[i] = float32(u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "router":
			v[i] = float32(u * math.Sqrt(6/float64(fan)))
		default:
			panic("olmoeref: unknown init " + t.Init)
		}
	}
	return v
}

// ConfigJSON returns the config.json, with the fields of
// allenai/OLMoE-1B-7B-0924's (every attribute of OlmoeConfig), but bos 0,
// eos 1 and pad 1, max_position_embeddings 256 and float32. clip_qkv is
// null when ClipQKV is 0.
func (c Olmoe) ConfigJSON() map[string]any {
	var clip any
	if c.ClipQKV > 0 {
		clip = c.ClipQKV
	}
	j := map[string]any{
		"architectures":           []string{"OlmoeForCausalLM"},
		"model_type":              "olmoe",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"max_position_embeddings": 256,
		"rope_theta":              c.Theta,
		"rope_scaling":            nil,
		"rms_norm_eps":            c.Eps,
		"num_experts":             c.Experts,
		"num_experts_per_tok":     c.TopK,
		"norm_topk_prob":          c.NormTopK,
		"clip_qkv":                clip,
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"tie_word_embeddings":     c.Tied,
		"hidden_act":              "silu",
		"initializer_range":       0.02,
		"router_aux_loss_coef":    0.01,
		"output_router_logits":    false,
		"use_cache":               true,
		"bos_token_id":            0,
		"eos_token_id":            1,
		"pad_token_id":            1,
		"torch_dtype":             "float32",
	}
	if c.Flex {
		j["architectures"], j["model_type"] = []string{"FlexOlmoForCausalLM"}, "flex_olmo"
		delete(j, "clip_qkv")
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1,
// pad 1, as config.json says) and dir/model.safetensors in float32, with
// values drawn from lmckpt.NewRand(Seed) in the order of Tensors.
func (c Olmoe) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C Olmoe
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64

	// moeInput, when set, sees each MoE block's input (layer, h); the
	// package's tests read the routing of real activations through it.
	moeInput func(layer int, h []float64)
	// perHeadNorm and clipBeforeNorm, for the tests, make the mistakes the
	// tests must tell apart: norming each query and key head on its own
	// (with its slice of q_norm / k_norm) instead of the whole projection,
	// and clamping the raw projections before q_norm and k_norm (the
	// order of AllenAI's training code) instead of after them.
	perHeadNorm, clipBeforeNorm bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c Olmoe) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "olmoeref"}
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
		panic(fmt.Sprintf("olmoeref: checkpoint has no tensor %q", name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Rotary embedding

// RopeFreqs returns the inverse frequencies [HeadDim/2],
// rope_theta^(-2i/HeadDim) (default rope, attention factor 1).
func (c Olmoe) RopeFreqs() []float64 {
	d := c.HeadDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotateHalf is transformers' x·cos + rotate_half(x)·sin at position pos
// on all of x [2·len(inv)], cos and sin being cat(freqs, freqs): entry j
// pairs with entry len(x)/2+j and the pair turns as the complex number
// x[j] + i·x[len/2+j] times e^{i·pos·inv_j}.
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

// Route is OlmoeSparseMoeBlock's routing on one token's router logits
// (mlp.gate(h), [Experts]): the softmax of all the logits (in float32 in
// transformers, whatever the model's dtype; float64 here), the TopK
// largest probabilities (the lower index on ties), and as weights those
// probabilities as they are, or divided by their sum (no epsilon) when
// NormTopK. ids come in decreasing order of probability.
func (c Olmoe) Route(logits []float64) (ids []int, weights []float64) {
	probs := lmckpt.Softmax64(logits)
	taken := make([]bool, len(probs))
	for range c.TopK {
		best := -1
		for e, p := range probs {
			if !taken[e] && (best < 0 || p > probs[best]) {
				best = e
			}
		}
		taken[best] = true
		ids = append(ids, best)
		weights = append(weights, probs[best])
	}
	if c.NormTopK {
		sum := 0.0
		for _, w := range weights {
			sum += w
		}
		for j := range weights {
			weights[j] /= sum
		}
	}
	return ids, weights
}

// route is Route on the router logits of layer l for input h.
func (m *Model) route(l int, h []float64) ([]int, []float64) {
	logits := lmckpt.Linear64(h, m.get(fmt.Sprintf("model.layers.%d.mlp.gate.weight", l)), nil)
	return m.C.Route(logits)
}

// Experts returns the ids of the experts that the MoE block of layer l
// chooses for its input h (the post_attention_layernorm output,
// [Hidden]), in decreasing order of router probability, as Route chooses
// them from the layer's mlp.gate.weight.
func (m *Model) Experts(l int, h []float64) []int {
	ids, _ := m.route(l, h)
	return ids
}

// moe is OlmoeSparseMoeBlock on one token h: Σ_j w_j expert_{e_j}(h) over
// the experts Route picks, expert e being OlmoeMLP,
// down_proj(silu(gate_proj(h)) * up_proj(h)).
func (m *Model) moe(l int, h []float64) []float64 {
	ids, ws := m.route(l, h)
	out := make([]float64, len(h))
	for j, e := range ids {
		q := fmt.Sprintf("model.layers.%d.mlp.experts.%d.", l, e)
		g := lmckpt.Linear64(h, m.get(q+"gate_proj.weight"), nil)
		u := lmckpt.Linear64(h, m.get(q+"up_proj.weight"), nil)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		y := lmckpt.Linear64(g, m.get(q+"down_proj.weight"), nil)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	return out
}

// ----------------------------------------------------------------------------
// Attention

// project is OlmoeAttention up to the rotary on one input h (the
// input_layernorm output) at position pos: q = q_norm(q_proj(h)) and
// k = k_norm(k_proj(h)), each RMS-normed over the whole projection
// (Heads·HeadDim and KVHeads·HeadDim wide, eps rms_norm_eps), and
// v = v_proj(h); with ClipQKV all three are then clamped to
// [-ClipQKV, ClipQKV]; then they are cut into heads and q and k rotated.
// It returns the query heads [Heads][HeadDim] and the key and value
// heads [KVHeads][HeadDim].
func (m *Model) project(p string, h []float64, pos int, inv []float64) (q, k, v [][]float64) {
	c := m.C
	D := c.HeadDim()
	heads := func(name string, n int, norm string) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+"self_attn."+name+".weight"), nil)
		if m.clipBeforeNorm {
			all = clamp(all, c.ClipQKV)
		}
		if norm != "" {
			w := m.get(p + "self_attn." + norm + ".weight")
			if m.perHeadNorm {
				for i := 0; i < n; i++ {
					copy(all[i*D:(i+1)*D], lmckpt.RMSNorm64(all[i*D:(i+1)*D], w[i*D:(i+1)*D], c.Eps))
				}
			} else {
				all = lmckpt.RMSNorm64(all, w, c.Eps)
			}
		}
		if !m.clipBeforeNorm {
			all = clamp(all, c.ClipQKV)
		}
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if norm != "" {
				out[i] = rotateHalf(out[i], pos, inv)
			}
		}
		return out
	}
	return heads("q_proj", c.Heads, "q_norm"), heads("k_proj", c.KVHeads, "k_norm"), heads("v_proj", c.KVHeads, "")
}

// attention is OlmoeAttention (input_layernorm included) on the residual
// stream x [T][Hidden] at positions start, start+1, …: it returns every
// position's per-head outputs concatenated, [T][Hidden], before o_proj.
// Scale HeadDim^-0.5, causal, query head h reading key/value head
// h/(Heads/KVHeads) (repeat_kv).
func (m *Model) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	D := c.HeadDim()
	inv := c.RopeFreqs()
	scale := 1 / math.Sqrt(float64(D))
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		h := x[t] // FlexOlmo: no norm before the attention
		if !c.Flex {
			h = lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		}
		query[t], key[t], value[t] = m.project(p, h, start+t, inv)
	}
	return lmckpt.Attention64(query, key, value, scale, nil)
}

// ----------------------------------------------------------------------------
// Decoder

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token.
func (m *Model) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, …: the
// embedding; per layer x += o_proj(attention(x)), then
// x += moe(post_attention_layernorm(x)) (FlexOlmo: x +=
// post_attention_layernorm(o_proj(attention(x))), then x +=
// post_feedforward_layernorm(moe(x))); model.norm; the head (lm_head, or
// the embedding when tied).
func (m *Model) logits(tokens []int, start int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("olmoeref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		att := m.attention(p, x, start)
		for t := range x {
			o := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			if c.Flex { // the attention's output normed, then added
				o = lmckpt.RMSNorm64(o, m.get(p+"post_attention_layernorm.weight"), c.Eps)
			}
			for i := range o {
				x[t][i] += o[i]
			}
			h := x[t]
			if !c.Flex {
				h = lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			}
			if m.moeInput != nil {
				m.moeInput(l, h)
			}
			y := m.moe(l, h)
			if c.Flex { // the block's output normed, then added
				y = lmckpt.RMSNorm64(y, m.get(p+"post_feedforward_layernorm.weight"), c.Eps)
			}
			for i := range y {
				x[t][i] += y[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.norm.weight"), c.Eps), m.get(head), nil)
	}
	return out
}

// clamp is clamp_(min=-lim, max=lim) in a copy; lim 0 (clip_qkv null)
// returns x itself.
func clamp(x []float64, lim float64) []float64 {
	if lim == 0 {
		return x
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Max(-lim, math.Min(lim, v))
	}
	return out
}
