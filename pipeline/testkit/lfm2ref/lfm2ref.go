// Package lfm2ref is a plain-Go float64 forward pass of Liquid AI's LFM2
// (Lfm2ForCausalLM) and LFM2-MoE (Lfm2MoeForCausalLM), written from
// transformers' models/lfm2/modeling_lfm2.py and
// models/lfm2_moe/modeling_lfm2_moe.py apart from pipeline/lfm2, plus a
// writer of tiny checkpoints under the releases' tensor names.
//
// The model, as this package reads transformers, on one unpadded sequence
// of tokens:
//
//	x = embed_tokens[token]
//	per layer:  h = rmsnorm(x)·operator_norm
//	            x += conv(h) or attention(h)
//	            x += feed_forward(rmsnorm(x)·ffn_norm)
//	logits = (rmsnorm(x)·embedding_norm) · lm_head (embed_tokens when tied)
//
// where
//
//   - conv (Lfm2ShortConv.slow_forward): B, C, x = the thirds of in_proj(h)
//     in that order; u = B·x; y_t = C_t · (Σ_j conv[:, 0, j]·u_{t-K+1+j} +
//     conv.bias), the inputs before the first token zero; out_proj(y).
//     in_proj, conv and out_proj have biases when conv_bias.
//   - attention (Lfm2Attention): q_proj, k_proj, v_proj cut into heads of
//     hidden/heads, each query and key head RMS-normed with q_layernorm and
//     k_layernorm, the rotary embedding (rotate_half, base rope_theta, the
//     whole head), causal softmax of q·k/sqrt(head_dim), grouped-query
//     heads, out_proj; no biases.
//   - LFM2's feed_forward (Lfm2MLP): w2(silu(w1·h) · w3·h), its width
//     intermediate_size adjusted when block_auto_adjust_ff_dim (Width).
//   - LFM2-MoE's: the first num_dense_layers layers Lfm2MoeMLP at
//     intermediate_size; the others Lfm2MoeSparseMoeBlock: scores =
//     sigmoid(gate·h); the top k of scores + expert_bias (use_expert_bias)
//     weighed by their scores, divided by (their sum + 1e-6) when
//     norm_topk_prob, times routed_scaling_factor; Σ w_j·w2_j(silu(w1_j·h)
//     · w3_j·h).
//
// transformers' slow_forward writes a decode step's input into its conv
// cache at min(cache_position, L-1), which misplaces it after a one-token
// prompt; this reference (like the CUDA kernels, llama.cpp and the
// model's own prefill) convolves the true last inputs.
package lfm2ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Layer types, as layer_types spells them.
const (
	Conv      = "conv"
	Attention = "full_attention"
)

// LFM2 describes an Lfm2ForCausalLM (MoE false) or Lfm2MoeForCausalLM by
// the fields of its config.json.
type LFM2 struct {
	MoE                  bool
	Vocab, Hidden        int
	Heads, KVHeads       int
	Layers               []string // Conv or Attention per layer
	Intermediate         int      // intermediate_size (LFM2: before adjustment)
	AutoAdjust           bool     // block_auto_adjust_ff_dim (LFM2)
	Multiplier           float64  // block_ffn_dim_multiplier (LFM2; 0 writes null)
	MultipleOf           int      // block_multiple_of (LFM2)
	Kernel               int      // conv_L_cache
	ConvBias             bool
	Dense                int // num_dense_layers (LFM2-MoE)
	Experts, TopK        int
	MoEIntermediate      int
	ExpertBias, NormTopK bool
	RoutedScale          float64
	Tied                 bool
	Eps, Theta           float64
	// FullAttnIdxs writes LFM2's original full_attn_idxs instead of
	// layer_types; Stacked writes the experts as transformers v5 saves
	// them (gate_up_proj, down_proj) instead of one by one.
	FullAttnIdxs, Stacked bool
	Seed                  uint64
}

// TinyLFM2 is a small LFM2-1.2B: vocabulary 96, hidden 32, 4 heads of 8
// (2 KV heads), 6 layers (conv, conv, attention, conv, attention, conv),
// intermediate_size 96 adjusted to 64 (2/3, multiplier 1, multiple of
// 16), kernel 3, tied, as full_attn_idxs.
func TinyLFM2() LFM2 {
	return LFM2{Vocab: 96, Hidden: 32, Heads: 4, KVHeads: 2,
		Layers:       []string{Conv, Conv, Attention, Conv, Attention, Conv},
		Intermediate: 96, AutoAdjust: true, Multiplier: 1, MultipleOf: 16, Kernel: 3,
		Tied: true, Eps: 1e-5, Theta: 1e6, FullAttnIdxs: true, Seed: 11}
}

// TinyMoE is a small LFM2-8B-A1B: vocabulary 96, hidden 32, 4 heads of
// 8 (2 KV heads), 6 layers (conv, conv, attention, conv, conv,
// attention), the first 2 dense (intermediate_size 48), then 8 experts
// of 24, the top 3 chosen with an expert bias, renormalized, scaled by
// 1.5; conv biases; an untied head.
func TinyMoE() LFM2 {
	return LFM2{MoE: true, Vocab: 96, Hidden: 32, Heads: 4, KVHeads: 2,
		Layers:       []string{Conv, Conv, Attention, Conv, Conv, Attention},
		Intermediate: 48, Kernel: 3, ConvBias: true, Dense: 2, Experts: 8, TopK: 3, MoEIntermediate: 24,
		ExpertBias: true, NormTopK: true, RoutedScale: 1.5, Eps: 1e-5, Theta: 1e6, Seed: 12}
}

// HeadDim is hidden/heads.
func (c LFM2) HeadDim() int { return c.Hidden / c.Heads }

// Width is the dense MLPs' width: LFM2-MoE's intermediate_size; LFM2's as
// Lfm2MLP derives it: with block_auto_adjust_ff_dim int(2·I/3), then with
// a multiplier int(multiplier·that) rounded up to block_multiple_of.
func (c LFM2) Width() int {
	w := c.Intermediate
	if c.MoE || !c.AutoAdjust {
		return w
	}
	w = int(float64(2*w) / 3)
	if c.Multiplier == 0 {
		return w
	}
	w = int(c.Multiplier * float64(w))
	return c.MultipleOf * ((w + c.MultipleOf - 1) / c.MultipleOf)
}

// sparse reports that layer l's feed-forward is the mixture of experts.
func (c LFM2) sparse(l int) bool { return c.MoE && l >= c.Dense }

func (c LFM2) check() error {
	if c.Hidden%c.Heads != 0 || c.Heads%c.KVHeads != 0 || c.Kernel < 2 || len(c.Layers) == 0 {
		return fmt.Errorf("lfm2ref: inconsistent sizes %+v", c)
	}
	for l, t := range c.Layers {
		if t != Conv && t != Attention {
			return fmt.Errorf("lfm2ref: layer %d has type %q", l, t)
		}
	}
	if c.MoE && c.Dense < len(c.Layers) && (c.TopK <= 0 || c.TopK > c.Experts) {
		return fmt.Errorf("lfm2ref: top %d of %d experts", c.TopK, c.Experts)
	}
	return nil
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	Init  string
}

// Tensors lists the checkpoint tensors with the releases' names, in the
// order Write draws them: model.embed_tokens.weight; per layer
// operator_norm.weight, then conv.in_proj.weight [3H, H], conv.conv.weight
// [H, 1, K], conv.out_proj.weight [H, H] (and their biases with
// ConvBias), or self_attn.{q,k,v}_proj.weight, q_layernorm.weight and
// k_layernorm.weight [head_dim], out_proj.weight; ffn_norm.weight; then
// feed_forward.w1, w3 and w2 or feed_forward.gate.weight [E, H],
// feed_forward.expert_bias [E] (ExpertBias) and each expert's
// feed_forward.experts.e.w1, w3 and w2; model.embedding_norm.weight;
// lm_head.weight unless Tied. Write stacks the experts when Stacked.
func (c LFM2) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim()
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l, typ := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("operator_norm.weight", "norm", H)
		if typ == Conv {
			add("conv.in_proj.weight", "in_proj", 3*H, H)
			if c.ConvBias {
				add("conv.in_proj.bias", "bias", 3*H)
			}
			add("conv.conv.weight", "conv", H, 1, c.Kernel)
			if c.ConvBias {
				add("conv.conv.bias", "bias", H)
			}
			add("conv.out_proj.weight", "linear", H, H)
			if c.ConvBias {
				add("conv.out_proj.bias", "bias", H)
			}
		} else {
			add("self_attn.q_proj.weight", "qk", c.Heads*D, H)
			add("self_attn.k_proj.weight", "qk", c.KVHeads*D, H)
			add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
			add("self_attn.q_layernorm.weight", "norm", D)
			add("self_attn.k_layernorm.weight", "norm", D)
			add("self_attn.out_proj.weight", "linear", H, c.Heads*D)
		}
		add("ffn_norm.weight", "norm", H)
		if !c.sparse(l) {
			add("feed_forward.w1.weight", "linear", c.Width(), H)
			add("feed_forward.w3.weight", "linear", c.Width(), H)
			add("feed_forward.w2.weight", "linear", H, c.Width())
			continue
		}
		add("feed_forward.gate.weight", "router", c.Experts, H)
		if c.ExpertBias {
			add("feed_forward.expert_bias", "expert_bias", c.Experts)
		}
		for e := 0; e < c.Experts; e++ {
			add(fmt.Sprintf("feed_forward.experts.%d.w1.weight", e), "linear", c.MoEIntermediate, H)
			add(fmt.Sprintf("feed_forward.experts.%d.w3.weight", e), "linear", c.MoEIntermediate, H)
			add(fmt.Sprintf("feed_forward.experts.%d.w2.weight", e), "linear", H, c.MoEIntermediate)
		}
	}
	out = append(out, Tensor{"model.embedding_norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor, u uniform in [-1, 1)
// and fan-in the product of the dimensions after the first:
//
//	linear       u / sqrt(fan-in)
//	in_proj      2u / sqrt(fan-in)     (B, C and x of rms about 1.2, so
//	                                    that B·x and C·conv(B·x) are of
//	                                    the order of the stream)
//	conv         u                     (three taps of weight up to 1:
//	                                    each matters)
//	qk           2u / sqrt(fan-in)     (scores that are not uniform)
//	embed        u
//	norm         1 + 0.2u
//	router       u · sqrt(6/fan-in)    (sigmoid scores over 0.1-0.9)
//	expert_bias  0.3u                  (enough to change the choices)
//	bias         0.2u
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	return lmckpt.Fill(r, t.Shape, func(u float64, fan int) float64 {
		var x float64
		switch t.Init {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "in_proj", "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "conv", "embed":
			x = u
		case "norm":
			x = 1 + 0.2*u
		case "router":
			x = u * math.Sqrt(6/float64(fan))
		case "expert_bias":
			x = 0.3 * u
		case "bias":
			x = 0.2 * u
		default:
			panic("lfm2ref: unknown init " + t.Init)
		}
		return x
	})
}

// ConfigJSON returns the config.json: architectures and model_type of
// the family, the sizes, norm_eps, rope_theta, conv_bias and
// conv_L_cache, layer_types (or full_attn_idxs), tie_embedding, LFM2's
// block_* fields or LFM2-MoE's num_dense_layers and expert fields, bos 1,
// eos 7 (not the default 2, so a reader that ignores it is caught), pad
// 0, float32.
func (c LFM2) ConfigJSON() map[string]any {
	cfg := map[string]any{
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       len(c.Layers),
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"max_position_embeddings": 512,
		"norm_eps":                c.Eps,
		"rope_theta":              c.Theta,
		"conv_bias":               c.ConvBias,
		"conv_L_cache":            c.Kernel,
		"tie_embedding":           c.Tied,
		"bos_token_id":            1,
		"eos_token_id":            7,
		"pad_token_id":            0,
		"use_cache":               true,
		"torch_dtype":             "float32",
	}
	if c.MoE {
		cfg["architectures"] = []string{"Lfm2MoeForCausalLM"}
		cfg["model_type"] = "lfm2_moe"
		cfg["num_dense_layers"] = c.Dense
		cfg["num_experts"] = c.Experts
		cfg["num_experts_per_tok"] = c.TopK
		cfg["moe_intermediate_size"] = c.MoEIntermediate
		cfg["use_expert_bias"] = c.ExpertBias
		cfg["norm_topk_prob"] = c.NormTopK
		cfg["routed_scaling_factor"] = c.RoutedScale
	} else {
		cfg["architectures"] = []string{"Lfm2ForCausalLM"}
		cfg["model_type"] = "lfm2"
		cfg["block_auto_adjust_ff_dim"] = c.AutoAdjust
		cfg["block_multiple_of"] = c.MultipleOf
		if c.Multiplier != 0 {
			cfg["block_ffn_dim_multiplier"] = c.Multiplier
		} else {
			cfg["block_ffn_dim_multiplier"] = nil
		}
	}
	if c.FullAttnIdxs {
		var idx []int
		for l, t := range c.Layers {
			if t == Attention {
				idx = append(idx, l)
			}
		}
		cfg["full_attn_idxs"] = idx
	} else {
		cfg["layer_types"] = c.Layers
	}
	return cfg
}

// Write writes dir/config.json, dir/generation_config.json (bos 1, eos 7,
// pad 0) and dir/model.safetensors in float32, values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors; with Stacked each MoE
// layer's experts are written as feed_forward.experts.gate_up_proj [E,
// 2I, H] (each expert's w1 rows, then its w3 rows) and down_proj [E, H,
// I], the same values.
func (c LFM2) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	for l := range c.Layers {
		if c.Stacked && c.sparse(l) {
			p := fmt.Sprintf("model.layers.%d.feed_forward.experts.", l)
			ts = lmckpt.StackExperts(ts, p, p, lm.MixtralExperts, c.Experts, c.MoEIntermediate, c.Hidden)
		}
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 7, "pad_token_id": 0}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C LFM2
	// W holds every tensor by its per-expert Hugging Face name (stacks
	// split back into their experts).
	W        map[string][]float64
	Mistakes Mistakes
}

// Mistakes are deliberate departures from LFM2, one switch each, which a
// comparison against this package must detect:
//
//   - NoCGate leaves out the output gate C (y = conv(B·x)).
//   - ThirdsXBC reads in_proj's thirds as x, B, C instead of B, C, x.
//   - ConvNoState convolves each step's inputs alone, forgetting the
//     previous ones (no state across steps: every sequence starts anew
//     for each token).
//   - NoQKNorm leaves out q_layernorm and k_layernorm.
//   - SoftmaxRouter scores the experts by a softmax of the router's
//     logits instead of sigmoids.
//   - NoExpertBias chooses by the scores alone.
//   - BiasedWeights weighs the chosen experts by score + expert_bias.
//   - NoRoutedScale leaves out routed_scaling_factor.
//   - SwapW1W3 reads w3 as the gate and w1 as the up projection.
type Mistakes struct {
	NoCGate, ThirdsXBC, ConvNoState, NoQKNorm, SoftmaxRouter, NoExpertBias, BiasedWeights, NoRoutedScale, SwapW1W3 bool
}

// Load reads a checkpoint written by Write as float64, checking that
// every tensor of Tensors is there (or its stack) with its size.
func (c LFM2) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	for l := range c.Layers {
		if c.sparse(l) {
			p := fmt.Sprintf("model.layers.%d.feed_forward.experts.", l)
			lmckpt.Unstack(w, p, p, lm.MixtralExperts, c.Experts, c.MoEIntermediate, c.Hidden)
		}
	}
	chk := lmckpt.Weights64{M: w, Kit: "lfm2ref"}
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
		panic(fmt.Sprintf("lfm2ref: checkpoint has no tensor %q", name))
	}
	return v
}

func (m *Model) opt(present bool, name string) []float64 {
	if !present {
		return nil
	}
	return m.get(name)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// ShortConv is layer l's Lfm2ShortConv on h [T][hidden].
func (m *Model) ShortConv(l int, h [][]float64) [][]float64 {
	c, mk := m.C, m.Mistakes
	p := fmt.Sprintf("model.layers.%d.conv.", l)
	H, K := c.Hidden, c.Kernel
	inW, inB := m.get(p+"in_proj.weight"), m.opt(c.ConvBias, p+"in_proj.bias")
	conv, convB := m.get(p+"conv.weight"), m.opt(c.ConvBias, p+"conv.bias")
	u := make([][]float64, len(h)) // B·x
	gate := make([][]float64, len(h))
	for t := range h {
		bcx := lmckpt.Linear64(h[t], inW, inB)
		b, cc, x := bcx[:H], bcx[H:2*H], bcx[2*H:]
		if mk.ThirdsXBC {
			x, b, cc = bcx[:H], bcx[H:2*H], bcx[2*H:]
		}
		u[t] = make([]float64, H)
		for i := range u[t] {
			u[t][i] = b[i] * x[i]
		}
		gate[t] = cc
	}
	out := make([][]float64, len(h))
	for t := range h {
		y := make([]float64, H)
		for ch := 0; ch < H; ch++ {
			s := 0.0
			for j := 0; j < K; j++ {
				src := t - K + 1 + j
				if src < 0 || (mk.ConvNoState && src != t) {
					continue
				}
				s += conv[ch*K+j] * u[src][ch]
			}
			if convB != nil {
				s += convB[ch]
			}
			y[ch] = s
			if !mk.NoCGate {
				y[ch] *= gate[t][ch]
			}
		}
		out[t] = lmckpt.Linear64(y, m.get(p+"out_proj.weight"), m.opt(c.ConvBias, p+"out_proj.bias"))
	}
	return out
}

// rope rotates v [head_dim] at position pos by rotate_half with base
// Theta over the whole head.
func (m *Model) rope(v []float64, pos int) []float64 {
	D := len(v)
	out := make([]float64, D)
	for i := 0; i < D/2; i++ {
		ang := float64(pos) * math.Pow(m.C.Theta, -float64(2*i)/float64(D))
		cs, sn := math.Cos(ang), math.Sin(ang)
		out[i] = v[i]*cs - v[i+D/2]*sn
		out[i+D/2] = v[i+D/2]*cs + v[i]*sn
	}
	return out
}

// Attention is layer l's Lfm2Attention on h [T][hidden].
func (m *Model) Attention(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.HeadDim()
	heads := func(x []float64, name, norm string, n, pos int) [][]float64 {
		all := lmckpt.Linear64(x, m.get(p+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if norm != "" {
				if !m.Mistakes.NoQKNorm {
					out[i] = lmckpt.RMSNorm64(out[i], m.get(p+norm+".weight"), c.Eps)
				}
				out[i] = m.rope(out[i], pos)
			}
		}
		return out
	}
	query, key, value := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		query[t] = heads(h[t], "q_proj", "q_layernorm", c.Heads, t)
		key[t] = heads(h[t], "k_proj", "k_layernorm", c.KVHeads, t)
		value[t] = heads(h[t], "v_proj", "", c.KVHeads, t)
	}
	att := lmckpt.Attention64(query, key, value, 1/math.Sqrt(float64(D)), nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"out_proj.weight"), nil)
	}
	return out
}

// swiglu is w2(silu(w1·x) · w3·x) under prefix (…w1.weight), w1 and w3
// swapped with SwapW1W3.
func (m *Model) swiglu(p string, x []float64) []float64 {
	gate, up := m.get(p+"w1.weight"), m.get(p+"w3.weight")
	if m.Mistakes.SwapW1W3 {
		gate, up = up, gate
	}
	return lmckpt.SwiGLU64(x, gate, up, m.get(p+"w2.weight"))
}

// Route is Lfm2MoeSparseMoeBlock.route_tokens_to_experts on one token's
// router logits and expert bias (nil without ExpertBias): the chosen
// experts, best first (the lower index on ties), and their weights.
func (m *Model) Route(logits, bias []float64) (ids []int, weights []float64) {
	c, mk := m.C, m.Mistakes
	scores := make([]float64, len(logits))
	if mk.SoftmaxRouter {
		scores = lmckpt.Softmax64(logits)
	} else {
		for e, v := range logits {
			scores[e] = sigmoid(v)
		}
	}
	choice := append([]float64(nil), scores...)
	if bias != nil && !mk.NoExpertBias {
		for e := range choice {
			choice[e] += bias[e]
		}
	}
	taken := make([]bool, len(choice))
	sum := 0.0
	for range c.TopK {
		best := -1
		for e, v := range choice {
			if !taken[e] && (best < 0 || v > choice[best]) {
				best = e
			}
		}
		taken[best] = true
		w := scores[best]
		if mk.BiasedWeights {
			w = choice[best]
		}
		ids, weights = append(ids, best), append(weights, w)
		sum += w
	}
	scale := c.RoutedScale
	if mk.NoRoutedScale {
		scale = 1
	}
	for j := range weights {
		if c.NormTopK {
			weights[j] /= sum + 1e-6
		}
		weights[j] *= scale
	}
	return ids, weights
}

// FeedForward is layer l's feed_forward on one token h.
func (m *Model) FeedForward(l int, h []float64) []float64 {
	p := fmt.Sprintf("model.layers.%d.feed_forward.", l)
	if !m.C.sparse(l) {
		return m.swiglu(p, h)
	}
	ids, ws := m.Route(lmckpt.Linear64(h, m.get(p+"gate.weight"), nil), m.opt(m.C.ExpertBias, p+"expert_bias"))
	out := make([]float64, len(h))
	for j, e := range ids {
		for i, y := range m.swiglu(fmt.Sprintf("%sexperts.%d.", p, e), h) {
			out[i] += ws[j] * y
		}
	}
	return out
}

// Logits runs the whole sequence and returns the logits [T][Vocab].
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("lfm2ref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l, typ := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"operator_norm.weight"), c.Eps)
		}
		var out [][]float64
		if typ == Conv {
			out = m.ShortConv(l, h)
		} else {
			out = m.Attention(l, h)
		}
		for t := range x {
			for i, v := range out[t] {
				x[t][i] += v
			}
			f := m.FeedForward(l, lmckpt.RMSNorm64(x[t], m.get(p+"ffn_norm.weight"), c.Eps))
			for i, v := range f {
				x[t][i] += v
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	norm, W := m.get("model.embedding_norm.weight"), m.get(head)
	logits := make([][]float64, len(x))
	for t := range x {
		logits[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], norm, c.Eps), W, nil)
	}
	return logits
}
