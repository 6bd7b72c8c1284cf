// Package granitehref is a plain-Go float64 forward pass of
// GraniteMoeHybridForCausalLM, IBM's Granite 4.0 (ibm-granite/granite-4.0-h-tiny,
// h-small, h-micro and the attention-only granite-4.0-micro). It is written
// from transformers' models/granitemoehybrid/modeling_granitemoehybrid.py
// (GraniteMoeHybridMambaLayer.torch_forward, GraniteMoeHybridRMSNormGated,
// GraniteMoeHybridMoE and its TopKGating, GraniteMoeHybridMLP,
// GraniteMoeHybridDecoderLayer, GraniteMoeHybridModel), configuration_granitemoehybrid.py
// and the newer modular_granitemoehybrid.py, which builds block_sparse_moe only
// when num_local_experts > 0.
// With Hybrid.MoeShared it is GraniteMoeSharedForCausalLM's
// (models/granitemoeshared: every layer attention with the rotary, the
// shared MLP beside the experts only when shared_intermediate_size > 0).
//
// The model, as this package reads transformers, on one unpadded sequence
// without a cache:
//
//   - x = embed_tokens(ids) · embedding_multiplier.
//   - Every layer: h = input_layernorm(x); the mixer is a Mamba2 layer
//     (layer_types[i] "mamba") or attention ("attention"); x += mixer(h) ·
//     residual_multiplier; h2 = post_attention_layernorm(x);
//     x += (block_sparse_moe(h2) + shared_mlp(h2)) · residual_multiplier,
//     the MoE term absent when num_local_experts is 0. layer_types null
//     means every layer is "mamba" (config.layers_block_type).
//   - model.norm, lm_head (the embedding when tie_word_embeddings), the
//     logits DIVIDED by logits_scaling.
//   - Attention is Llama's grouped-query attention without biases, head_dim
//     hidden/heads, scores q·k times attention_multiplier (in place of
//     head_dim^-0.5), causal. The rotate-half rotary of rope_theta is applied
//     ONLY when position_embedding_type is "rope": GraniteMoeHybridModel
//     builds no rotary_emb otherwise (null, or the releases' "nope"), and the
//     attention then has no positional signal but the causal mask.
//   - The Mamba2 mixer: in_proj (bias when mamba_proj_bias) gives
//     [gate | xBC | dt] of widths [I, I+2·G·N, H] (I = mamba_expand·hidden,
//     H = mamba_n_heads, G = mamba_n_groups, N = mamba_d_state); xBC goes
//     through the depthwise causal conv1d of kernel mamba_d_conv (bias when
//     mamba_conv_bias) and SiLU (hidden_act), and is cut into x [I] (H heads
//     of P = mamba_d_head, "auto" meaning I/H), B [G·N] and C [G·N]; head h
//     reads group h/(H/G) (repeat_interleave). dt = softplus(dt + dt_bias)
//     (torch's, threshold 20; the clamp to time_step_limit (0, inf) does
//     nothing), A = -exp(A_log). The state S_h [P, N] starts at zero and
//     S_h ← exp(dt_h·A_h)·S_h + dt_h·x_h ⊗ B_g; y_h = S_h·C_g + D_h·x_h.
//     pipeline/testkit/mamba2ref runs that recurrence token by token;
//     transformers' torch_forward computes the same sums in the chunked
//     SSD form of mamba_chunk_size (mamba2ref's tests check the two
//     agree). y is gated and normed by GraniteMoeHybridRMSNormGated:
//     z = y·silu(gate), then z·rsqrt(mean(z²)+eps)·norm.weight with the
//     mean over all I entries and eps rms_norm_eps; then out_proj (bias
//     when mamba_proj_bias).
//   - block_sparse_moe is GraniteMoe's: router.layer [E, hidden] logits, the
//     top num_experts_per_tok kept and softmaxed among themselves; expert e's
//     input_linear [2·intermediate, hidden] output is cut in half,
//     silu(first)·second, then output_linear [hidden, intermediate]; the
//     chosen experts' outputs summed with the k weights. shared_mlp is the
//     same SwiGLU with one unstacked input_linear [2·S, hidden] and
//     output_linear [hidden, S], S = shared_intermediate_size.
//
// Where transformers is ambiguous, or other implementations read it
// differently:
//
//   - GraniteMoeHybridRMSNormGated (and Bamba's and Mamba2's in newer
//     versions) normalizes over the whole intermediate vector whatever
//     mamba_n_groups is. mamba_ssm's Mamba2 module (RMSNormGated with
//     group_size = d_ssm/ngroups), vLLM's Mixer2RMSNormGated and llama.cpp
//     (ssm_norm over a reshape to d_inner/n_group × n_group) normalize each
//     group on its own. The two agree for one group, which every Granite 4.0
//     release has; this package follows transformers, and
//     Mistakes.GroupedNorm is the per-group reading (TinyHybridDense has 2
//     groups so that they differ).
//   - The "rope" test is an exact string comparison: any other value
//     ("nope", null, absent) means no rotary.
//   - transformers computes the SSM in float32 (hidden_states, B, C are cast
//     with .float()), the norms' statistics in float32 and the router in
//     float32; all of it is float64 here. torch.topk does not promise which
//     of two equal logits wins; here the lower index does.
//
// It follows the style of pipeline/testkit/graniteref: straight loops over
// one sequence, no caches, no padding, and no code shared with pipeline/nn
// or the architecture packages it checks. The Mamba2 mixer's arithmetic is
// mamba2ref's, shared with nemotronhref; this package chooses its readings
// (dt unclamped, the norm over the whole width) in Model.Mixer. It also writes the tiny
// checkpoints the tests use: a config.json with GraniteMoeHybridConfig's
// fields and a float32 model.safetensors with the releases' tensor names and
// deterministic pseudo-random weights.
package granitehref

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// Hybrid describes a GraniteMoeHybridForCausalLM by the fields of its
// config.json. attention_bias is always false, as in the releases.
type Hybrid struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers. Intermediate is intermediate_size, the width of
	// every routed expert.
	Vocab, Hidden, Intermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads;
	// every head is Hidden/Heads wide.
	Heads, KVHeads int
	// Experts is num_local_experts (0: no block_sparse_moe, the layer's
	// MLP is shared_mlp alone); TopK is num_experts_per_tok.
	Experts, TopK int
	// SharedIntermediate is shared_intermediate_size, the width of
	// shared_mlp.
	SharedIntermediate int
	// LayerTypes is layer_types, "mamba" or "attention" per layer; nil
	// means every layer is "mamba" (layers_block_type).
	LayerTypes []string
	// MambaHeads, MambaHeadDim, MambaState, MambaGroups, MambaConv,
	// MambaExpand and MambaChunk are mamba_n_heads, mamba_d_head (0 writes
	// "auto": MambaExpand·Hidden/MambaHeads), mamba_d_state,
	// mamba_n_groups, mamba_d_conv, mamba_expand and mamba_chunk_size (the
	// chunk only matters to chunked implementations, not to this one).
	MambaHeads, MambaHeadDim, MambaState, MambaGroups, MambaConv, MambaExpand, MambaChunk int
	// ConvBias and ProjBias are mamba_conv_bias (conv1d.bias) and
	// mamba_proj_bias (in_proj.bias and out_proj.bias).
	ConvBias, ProjBias bool
	// Rope is position_embedding_type "rope"; false writes "nope" (the
	// Granite 4.0-H releases) and means no positional embedding.
	Rope bool
	// EmbeddingMultiplier multiplies the embeddings; AttentionMultiplier
	// scales the attention scores; ResidualMultiplier scales every
	// sublayer's output before the residual add; LogitsScaling divides
	// the logits.
	EmbeddingMultiplier, AttentionMultiplier, ResidualMultiplier, LogitsScaling float64
	// Theta is rope_theta; Eps is rms_norm_eps, the eps of every RMSNorm,
	// the gated one included.
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head.
	Tied bool
	// Seed makes the weights reproducible.
	Seed uint64
	// MoeShared writes a GraniteMoeSharedForCausalLM (transformers'
	// models/granitemoeshared): GraniteMoe's layer, every one attention
	// with the rotary (LayerTypes all "attention", Rope set, Experts > 0),
	// with shared_mlp beside the experts; SharedIntermediate 0 (the
	// class's default) means no shared_mlp. Its config.json has no
	// mamba_*, layer_types or position_embedding_type fields.
	MoeShared bool
}

// TinyHybrid is a small granite-4.0-h-tiny: hidden 32, 4 layers (mamba,
// attention, mamba, mamba), attention of 4 query heads on 2 key/value heads
// (head_dim 8) without positional embedding ("nope"), 4 experts of width 16
// of which 2 are chosen plus a shared MLP of width 24, Mamba2 mixers of 8
// heads of 8 (expand 2, intermediate 64), state 16, 1 group, kernel 4,
// chunk 4, conv bias but no projection biases, vocabulary 96,
// embedding_multiplier 12, attention_multiplier 0.25, residual_multiplier
// 0.22, logits_scaling 6, rms_norm_eps 1e-5, tied embeddings.
func TinyHybrid() Hybrid {
	return Hybrid{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 4,
		Heads: 4, KVHeads: 2, Experts: 4, TopK: 2, SharedIntermediate: 24,
		LayerTypes: []string{"mamba", "attention", "mamba", "mamba"},
		MambaHeads: 8, MambaHeadDim: 8, MambaState: 16, MambaGroups: 1, MambaConv: 4, MambaExpand: 2, MambaChunk: 4,
		ConvBias: true, ProjBias: false, Rope: false,
		EmbeddingMultiplier: 12, AttentionMultiplier: 0.25, ResidualMultiplier: 0.22, LogitsScaling: 6,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 4000,
	}
}

// TinyHybridDense is a small dense hybrid in the manner of
// granite-4.0-h-micro but on the other paths: no experts (the MLP is
// shared_mlp alone, width 48), 4 layers (mamba, mamba, attention, mamba),
// the attention layer with the rotary of rope_theta 10000
// (position_embedding_type "rope"), 4 query heads on 1 key/value head,
// Mamba2 mixers of 8 heads with mamba_d_head "auto" (8), state 8, 2 groups
// (heads 0-3 read group 0, heads 4-7 group 1), kernel 4, chunk 4, conv and
// projection biases, vocabulary 96, embedding_multiplier 8,
// attention_multiplier 0.0625, residual_multiplier 0.3, logits_scaling 4,
// rms_norm_eps 1e-6, an untied lm_head.
func TinyHybridDense() Hybrid {
	return Hybrid{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 4,
		Heads: 4, KVHeads: 1, Experts: 0, TopK: 0, SharedIntermediate: 48,
		LayerTypes: []string{"mamba", "mamba", "attention", "mamba"},
		MambaHeads: 8, MambaHeadDim: 0, MambaState: 8, MambaGroups: 2, MambaConv: 4, MambaExpand: 2, MambaChunk: 4,
		ConvBias: true, ProjBias: true, Rope: true,
		EmbeddingMultiplier: 8, AttentionMultiplier: 0.0625, ResidualMultiplier: 0.3, LogitsScaling: 4,
		Theta: 10000, Eps: 1e-6, Tied: false, Seed: 4001,
	}
}

// TinyMicro is a small granite-4.0-micro: every layer attention (2
// layers), the rotary of rope_theta 10000, no experts (shared_mlp of width
// 40), 4 query heads on 2 key/value heads, vocabulary 96,
// embedding_multiplier 10, attention_multiplier 0.03, residual_multiplier
// 0.25, logits_scaling 5, rms_norm_eps 1e-5, tied embeddings. Its mamba_*
// fields are written (the release's config has them) but unused.
func TinyMicro() Hybrid {
	return Hybrid{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 2,
		Heads: 4, KVHeads: 2, Experts: 0, TopK: 0, SharedIntermediate: 40,
		LayerTypes: []string{"attention", "attention"},
		MambaHeads: 8, MambaHeadDim: 8, MambaState: 16, MambaGroups: 1, MambaConv: 4, MambaExpand: 2, MambaChunk: 4,
		ConvBias: true, ProjBias: false, Rope: true,
		EmbeddingMultiplier: 10, AttentionMultiplier: 0.03, ResidualMultiplier: 0.25, LogitsScaling: 5,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 4002,
	}
}

// TinyMoeShared is a small GraniteMoeShared: 3 attention layers with the
// rotary of rope_theta 10000, 4 query heads on 2 key/value heads, 4
// experts of width 16 of which 2 are chosen beside a shared MLP of width
// 24, vocabulary 96, embedding_multiplier 12, attention_multiplier 0.25,
// residual_multiplier 0.22, logits_scaling 6, rms_norm_eps 1e-6, an
// untied lm_head. Its mamba_* fields are unused.
func TinyMoeShared() Hybrid {
	return Hybrid{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 3,
		Heads: 4, KVHeads: 2, Experts: 4, TopK: 2, SharedIntermediate: 24,
		LayerTypes: []string{"attention", "attention", "attention"},
		MambaHeads: 8, MambaHeadDim: 8, MambaState: 16, MambaGroups: 1, MambaConv: 4, MambaExpand: 2, MambaChunk: 4,
		Rope: true, EmbeddingMultiplier: 12, AttentionMultiplier: 0.25, ResidualMultiplier: 0.22, LogitsScaling: 6,
		Theta: 10000, Eps: 1e-6, Tied: false, Seed: 4003, MoeShared: true,
	}
}

// MoE reports whether the layers have block_sparse_moe.
func (c Hybrid) MoE() bool { return c.Experts > 0 }

// LayerType is layer l's mixer, "mamba" or "attention" (every layer
// "mamba" when LayerTypes is nil).
func (c Hybrid) LayerType(l int) string {
	if c.LayerTypes == nil {
		return "mamba"
	}
	return c.LayerTypes[l]
}

// layerTypes is the resolved layer_types list.
func (c Hybrid) layerTypes() []string {
	out := make([]string, c.Layers)
	for l := range out {
		out[l] = c.LayerType(l)
	}
	return out
}

// headDim is Hidden/Heads, the attention head width.
func (c Hybrid) headDim() int { return c.Hidden / c.Heads }

// MambaInner is the mixer's intermediate size, mamba_expand·hidden_size.
func (c Hybrid) MambaInner() int { return c.MambaExpand * c.Hidden }

// MambaP is the mixer's head dim: mamba_d_head, or for "auto" (0)
// MambaInner/MambaHeads.
func (c Hybrid) MambaP() int {
	if c.MambaHeadDim == 0 {
		return c.MambaInner() / c.MambaHeads
	}
	return c.MambaHeadDim
}

// ConvDim is the conv1d's channel count, MambaInner + 2·groups·state.
func (c Hybrid) ConvDim() int { return c.MambaInner() + 2*c.MambaGroups*c.MambaState }

// check reports a description transformers could not build (or this
// package could not compute).
func (c Hybrid) check() error {
	switch {
	case c.Layers <= 0 || c.Hidden <= 0 || c.Vocab <= 0:
		return fmt.Errorf("granitehref: %d layers, hidden %d, vocabulary %d", c.Layers, c.Hidden, c.Vocab)
	case c.LayerTypes != nil && len(c.LayerTypes) != c.Layers:
		return fmt.Errorf("granitehref: %d layer types for %d layers", len(c.LayerTypes), c.Layers)
	case c.Heads <= 0 || c.Hidden%c.Heads != 0:
		return fmt.Errorf("granitehref: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("granitehref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.headDim()%2 != 0:
		return fmt.Errorf("granitehref: head dim %d is odd", c.headDim())
	case c.Experts < 0 || (c.Experts > 0 && (c.TopK <= 0 || c.TopK > c.Experts)):
		return fmt.Errorf("granitehref: top %d of %d experts", c.TopK, c.Experts)
	case c.SharedIntermediate < 0 || c.SharedIntermediate == 0 && !c.MoeShared:
		return fmt.Errorf("granitehref: shared_intermediate_size %d", c.SharedIntermediate)
	case c.MoeShared && (!c.Rope || c.Experts == 0 || slices.Contains(c.layerTypes(), "mamba")):
		return fmt.Errorf("granitehref: a GraniteMoeShared has experts and attention layers with the rotary only")
	case c.MambaHeads <= 0 || c.MambaExpand <= 0 || c.MambaInner()%c.MambaHeads != 0:
		return fmt.Errorf("granitehref: mamba_n_heads %d does not divide %d", c.MambaHeads, c.MambaInner())
	case c.MambaP()*c.MambaHeads != c.MambaInner():
		return fmt.Errorf("granitehref: %d mamba heads of %d do not make %d", c.MambaHeads, c.MambaP(), c.MambaInner())
	case c.MambaGroups <= 0 || c.MambaHeads%c.MambaGroups != 0:
		return fmt.Errorf("granitehref: %d mamba heads in %d groups", c.MambaHeads, c.MambaGroups)
	case c.MambaState <= 0 || c.MambaConv <= 0:
		return fmt.Errorf("granitehref: mamba_d_state %d, mamba_d_conv %d", c.MambaState, c.MambaConv)
	case c.LogitsScaling == 0:
		return fmt.Errorf("granitehref: logits_scaling 0")
	case c.Theta <= 0:
		return fmt.Errorf("granitehref: rope_theta %g", c.Theta)
	}
	for l, t := range c.LayerTypes {
		if t != "mamba" && t != "attention" {
			return fmt.Errorf("granitehref: layer %d has type %q", l, t)
		}
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

// Tensors lists the checkpoint tensors with the releases' names, in the
// order Write draws them: model.embed_tokens.weight; per layer
// input_layernorm.weight, then the mixer — mamba.in_proj.weight [I +
// ConvDim + heads, hidden] (and mamba.in_proj.bias with ProjBias),
// mamba.conv1d.weight [ConvDim, 1, kernel] (and mamba.conv1d.bias with
// ConvBias), mamba.dt_bias, mamba.A_log, mamba.D [heads],
// mamba.norm.weight [I], mamba.out_proj.weight [hidden, I] (and
// mamba.out_proj.bias), or self_attn.{q,k,v,o}_proj.weight —
// post_attention_layernorm.weight, block_sparse_moe.router.layer.weight
// [E, hidden], block_sparse_moe.input_linear.weight [E, 2·intermediate,
// hidden] and block_sparse_moe.output_linear.weight [E, hidden,
// intermediate] (Experts > 0 only), shared_mlp.input_linear.weight [2·S,
// hidden] and shared_mlp.output_linear.weight [hidden, S];
// model.norm.weight; lm_head.weight only when untied.
func (c Hybrid) Tensors() []Tensor {
	H, D := c.Hidden, c.headDim()
	I, nh, conv := c.MambaInner(), c.MambaHeads, c.ConvDim()
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		if c.LayerType(l) == "mamba" {
			add("mamba.in_proj.weight", "linear", I+conv+nh, H)
			if c.ProjBias {
				add("mamba.in_proj.bias", "bias", I+conv+nh)
			}
			add("mamba.conv1d.weight", "linear", conv, 1, c.MambaConv)
			if c.ConvBias {
				add("mamba.conv1d.bias", "bias", conv)
			}
			add("mamba.dt_bias", "dt_bias", nh)
			add("mamba.A_log", "A_log", nh)
			add("mamba.D", "D", nh)
			add("mamba.norm.weight", "norm", I)
			add("mamba.out_proj.weight", "linear", H, I)
			if c.ProjBias {
				add("mamba.out_proj.bias", "bias", H)
			}
		} else {
			add("self_attn.q_proj.weight", "qk", c.Heads*D, H)
			add("self_attn.k_proj.weight", "qk", c.KVHeads*D, H)
			add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
			add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		}
		add("post_attention_layernorm.weight", "norm", H)
		if c.MoE() {
			add("block_sparse_moe.router.layer.weight", "router", c.Experts, H)
			add("block_sparse_moe.input_linear.weight", "expert", c.Experts, 2*c.Intermediate, H)
			add("block_sparse_moe.output_linear.weight", "expert", c.Experts, H, c.Intermediate)
		}
		if c.SharedIntermediate > 0 {
			add("shared_mlp.input_linear.weight", "linear", 2*c.SharedIntermediate, H)
			add("shared_mlp.output_linear.weight", "linear", H, c.SharedIntermediate)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor, u uniform in [-1, 1):
//
//	linear   u / sqrt(fan-in)          (conv1d: fan-in the kernel width)
//	qk       2u / sqrt(fan-in)         (q_proj, k_proj: scores of a few
//	                                    units after attention_multiplier,
//	                                    so the attention is not uniform)
//	expert   u / sqrt(last dim)        (one expert's fan-in)
//	embed    0.25·u                    (times embedding_multiplier 8-12
//	                                    the stream is O(1))
//	norm     1 + 0.2·u                 (every norm's weights matter)
//	router   u · sqrt(6/fan-in)        (the chosen experts vary by token)
//	bias     0.2·u                     (in_proj, out_proj, conv1d biases)
//	dt_bias  -4.5 + 3·f + 0.25·u       (f = h/(heads-1) for head h, so
//	                                    softplus(dt + dt_bias) runs from
//	                                    about 0.01 on head 0 to a few
//	                                    tenths on the last head)
//	A_log    log(1 + 3·f + 0.25·u)     (A from about -1 on head 0 to -4 on
//	                                    the last: on the tiny models'
//	                                    activations the decay exp(dt·A)
//	                                    spans about 0.995 (a memory of
//	                                    dozens of tokens) down to under 0.2)
//	D        1 + 0.3·u
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
		var x float64
		switch t.Init {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "expert":
			x = u / math.Sqrt(float64(last))
		case "embed":
			x = 0.25 * u
		case "norm":
			x = 1 + 0.2*u
		case "router":
			x = u * math.Sqrt(6/float64(fan))
		case "bias":
			x = 0.2 * u
		case "dt_bias":
			x = -4.5 + 3*spread(i, n) + 0.25*u
		case "A_log":
			x = math.Log(1 + 3*spread(i, n) + 0.25*u)
		case "D":
			x = 1 + 0.3*u
		default:
			panic("granitehref: unknown init " + t.Init)
		}
		v[i] = float32(x)
	}
	return v
}

// spread is i/(n-1), 0 for n = 1.
func spread(i, n int) float64 {
	if n <= 1 {
		return 0
	}
	return float64(i) / float64(n-1)
}

// ConfigJSON returns the config.json with GraniteMoeHybridConfig's field
// names, as the Granite 4.0 releases write them: architectures
// [GraniteMoeHybridForCausalLM], model_type granitemoehybrid, the sizes,
// the four multipliers, num_local_experts, num_experts_per_tok,
// shared_intermediate_size, position_embedding_type ("rope" or "nope"),
// the resolved layer_types, the mamba_* fields (mamba_d_head "auto" when
// MambaHeadDim is 0), rope_theta, rms_norm_eps, attention_bias false,
// tie_word_embeddings, bos, eos and pad 0, silu, max_position_embeddings
// 256 and float32.
func (c Hybrid) ConfigJSON() map[string]any {
	pos := "nope"
	if c.Rope {
		pos = "rope"
	}
	var dHead any = c.MambaHeadDim
	if c.MambaHeadDim == 0 {
		dHead = "auto"
	}
	j := map[string]any{
		"architectures":            []string{"GraniteMoeHybridForCausalLM"},
		"model_type":               "granitemoehybrid",
		"vocab_size":               c.Vocab,
		"hidden_size":              c.Hidden,
		"intermediate_size":        c.Intermediate,
		"num_hidden_layers":        c.Layers,
		"num_attention_heads":      c.Heads,
		"num_key_value_heads":      c.KVHeads,
		"hidden_act":               "silu",
		"max_position_embeddings":  256,
		"rms_norm_eps":             c.Eps,
		"rope_theta":               c.Theta,
		"rope_scaling":             nil,
		"tie_word_embeddings":      c.Tied,
		"attention_bias":           false,
		"attention_dropout":        0.0,
		"embedding_multiplier":     c.EmbeddingMultiplier,
		"logits_scaling":           c.LogitsScaling,
		"residual_multiplier":      c.ResidualMultiplier,
		"attention_multiplier":     c.AttentionMultiplier,
		"num_local_experts":        c.Experts,
		"num_experts_per_tok":      c.TopK,
		"output_router_logits":     false,
		"router_aux_loss_coef":     0.0,
		"shared_intermediate_size": c.SharedIntermediate,
		"position_embedding_type":  pos,
		"layer_types":              c.layerTypes(),
		"mamba_n_heads":            c.MambaHeads,
		"mamba_n_groups":           c.MambaGroups,
		"mamba_d_state":            c.MambaState,
		"mamba_d_head":             dHead,
		"mamba_d_conv":             c.MambaConv,
		"mamba_expand":             c.MambaExpand,
		"mamba_chunk_size":         c.MambaChunk,
		"mamba_conv_bias":          c.ConvBias,
		"mamba_proj_bias":          c.ProjBias,
		"initializer_range":        0.02,
		"use_cache":                true,
		"bos_token_id":             0,
		"eos_token_id":             0,
		"pad_token_id":             0,
		"torch_dtype":              "float32",
	}
	if c.MoeShared {
		j["architectures"], j["model_type"] = []string{"GraniteMoeSharedForCausalLM"}, "granitemoeshared"
		for k := range j {
			if strings.HasPrefix(k, "mamba_") || k == "layer_types" || k == "position_embedding_type" {
				delete(j, k)
			}
		}
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json (bos, eos and
// pad 0) and dir/model.safetensors in float32, with values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors.
func (c Hybrid) Write(dir string) error {
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
	C Hybrid
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64
	// Mistakes switches on mistakes the tests (this package's and the
	// model's) must tell apart; the zero value is none.
	Mistakes Mistakes
}

// Mistakes are deliberate departures from GraniteMoeHybrid, one switch
// each, which a comparison against this package must detect:
//
//   - NormBeforeGate normalizes y first and then multiplies by silu(gate)
//     (rmsnorm(y)·w·silu(gate), mamba_ssm's norm_before_gate=True, Qwen3.5's
//     order) instead of rmsnorm(y·silu(gate))·w.
//   - GroupedNorm normalizes each of the mamba_n_groups slices of y·silu(gate)
//     on its own (vLLM's and llama.cpp's reading); no change with one group.
//   - NoD drops the D skip term D_h·x_h.
//   - NoDtBias leaves dt_bias out of softplus(dt + dt_bias).
//   - NoConvBias leaves conv1d.bias out (no change without mamba_conv_bias).
//   - GateLast cuts in_proj's output as [xBC | dt | gate] instead of
//     [gate | xBC | dt].
//   - NoResidualMultiplier adds every sublayer's output unscaled.
//   - RopeOnNoPE applies the rotary of rope_theta on the attention layers
//     even when position_embedding_type is not "rope" (no change with
//     "rope").
//   - NoSharedMLP leaves shared_mlp's output out of every layer's MLP.
type Mistakes struct {
	NormBeforeGate, GroupedNorm, NoD, NoDtBias, NoConvBias, GateLast, NoResidualMultiplier, RopeOnNoPE, NoSharedMLP bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c Hybrid) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "granitehref"}
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
		panic(fmt.Sprintf("granitehref: checkpoint has no tensor %q", name))
	}
	return v
}

// opt is get when present is true, else nil.
func (m *Model) opt(present bool, name string) []float64 {
	if !present {
		return nil
	}
	return m.get(name)
}

// ----------------------------------------------------------------------------
// Mamba2 mixer

// Mixer is layer l's GraniteMoeHybridMambaLayer as a mamba2ref.Mixer: its
// mamba.* tensors (the biases as ConvBias and ProjBias say), dt unclamped
// (DtMin 0) and the gated norm over the whole intermediate vector
// (NormGroups 1), with the mixer's Mistakes applied: GateLast reads
// in_proj's rows as [xBC | dt | gate], NoConvBias, NoDtBias and NoD leave
// those tensors out, GroupedNorm takes MambaGroups norm groups,
// NormBeforeGate passes through.
func (m *Model) Mixer(l int) mamba2ref.Mixer {
	c, mk := m.C, m.Mistakes
	p := fmt.Sprintf("model.layers.%d.mamba.", l)
	mx := mamba2ref.Mixer{
		Heads: c.MambaHeads, HeadDim: c.MambaP(), Groups: c.MambaGroups, State: c.MambaState, Kernel: c.MambaConv,
		InProj: m.get(p + "in_proj.weight"), InBias: m.opt(c.ProjBias, p+"in_proj.bias"),
		Conv: m.get(p + "conv1d.weight"), ConvBias: m.opt(c.ConvBias && !mk.NoConvBias, p+"conv1d.bias"),
		DtBias: m.opt(!mk.NoDtBias, p+"dt_bias"), ALog: m.get(p + "A_log"), D: m.opt(!mk.NoD, p+"D"),
		Norm: m.get(p + "norm.weight"), OutProj: m.get(p + "out_proj.weight"), OutBias: m.opt(c.ProjBias, p+"out_proj.bias"),
		NormGroups: 1, NormBeforeGate: mk.NormBeforeGate, Eps: c.Eps,
	}
	if mk.GroupedNorm {
		mx.NormGroups = c.MambaGroups
	}
	if mk.GateLast {
		// Read as [xBC | dt | gate], the gate is in_proj's last I rows:
		// moving the first ConvDim+heads rows behind them gives the
		// [gate | xBC | dt] order mamba2ref cuts.
		k := c.ConvDim() + c.MambaHeads
		mx.InProj = rotateRows(mx.InProj, k*c.Hidden)
		mx.InBias = rotateRows(mx.InBias, k)
	}
	return mx
}

// rotateRows is v[k:] followed by v[:k] (nil for nil).
func rotateRows(v []float64, k int) []float64 {
	if v == nil {
		return nil
	}
	return append(slices.Clone(v[k:]), v[:k]...)
}

// Mamba is layer l's GraniteMoeHybridMambaLayer on h, the input_layernorm
// output [T][hidden]: Mixer(l).Forward. It returns [T][hidden], before the
// residual multiplier.
func (m *Model) Mamba(l int, h [][]float64) [][]float64 { return m.Mixer(l).Forward(h) }

// ----------------------------------------------------------------------------
// Attention

// RopeFreqs returns the inverse frequencies [head_dim/2],
// rope_theta^(-2i/head_dim) (the default rope, attention factor 1).
func (c Hybrid) RopeFreqs() []float64 {
	d := c.headDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotateHalf is Llama's apply_rotary_pos_emb on one head x [2·len(inv)]
// at position pos: entry j turns with entry j+D/2 by the angle pos·inv_j.
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

// Attention is layer l's GraniteMoeHybridAttention on h, the
// input_layernorm output [T][hidden], at positions start, start+1, …:
// q_proj, k_proj, v_proj (no biases) cut into heads, q and k turned by
// rotateHalf only when position_embedding_type is "rope" (or with the
// RopeOnNoPE mistake), scores q·k times attention_multiplier, causal
// softmax, grouped-query heads, o_proj. It returns [T][hidden], before the
// residual multiplier.
func (m *Model) Attention(l int, h [][]float64, start int) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.headDim()
	inv := c.RopeFreqs()
	turn := c.Rope || m.Mistakes.RopeOnNoPE
	heads := func(x []float64, name string, n, pos int, rot bool) [][]float64 {
		all := lmckpt.Linear64(x, m.get(p+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if rot {
				out[i] = rotateHalf(out[i], pos, inv)
			}
		}
		return out
	}
	query, key, value := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		query[t] = heads(h[t], "q_proj", c.Heads, start+t, turn)
		key[t] = heads(h[t], "k_proj", c.KVHeads, start+t, turn)
		value[t] = heads(h[t], "v_proj", c.KVHeads, start+t, false)
	}
	att := lmckpt.Attention64(query, key, value, c.AttentionMultiplier, nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), nil)
	}
	return out
}

// ----------------------------------------------------------------------------
// Router, experts and shared MLP

// Route is GraniteMoeHybridTopKGating on one token's router logits
// [Experts]: the TopK largest (in decreasing order, the lower index on
// ties), weighed by the softmax of those TopK logits alone.
func (c Hybrid) Route(logits []float64) (ids []int, weights []float64) {
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

// Experts returns the ids and weights of the experts layer l's
// block_sparse_moe chooses for h (the post_attention_layernorm output).
func (m *Model) Experts(l int, h []float64) (ids []int, weights []float64) {
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	return m.C.Route(lmckpt.Linear64(h, m.get(p+"router.layer.weight"), nil))
}

// swiglu is output(silu(a)·b) where (a, b) = input(h) cut in half along
// its last dimension, no biases: GraniteMoeHybridMLP and each expert.
func swiglu(h, input, output []float64) []float64 {
	y := lmckpt.Linear64(h, input, nil)
	half := len(y) / 2
	a := make([]float64, half)
	for i := range a {
		a[i] = lmckpt.SiLU64(y[i]) * y[half+i]
	}
	return lmckpt.Linear64(a, output, nil)
}

// MoE is layer l's block_sparse_moe on one token h: Σ_j w_j expert_{e_j}(h)
// over the experts Experts picks.
func (m *Model) MoE(l int, h []float64) []float64 {
	c := m.C
	H, I := c.Hidden, c.Intermediate
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	inW, outW := m.get(p+"input_linear.weight"), m.get(p+"output_linear.weight")
	ids, ws := m.Experts(l, h)
	out := make([]float64, H)
	for j, e := range ids {
		y := swiglu(h, inW[e*2*I*H:(e+1)*2*I*H], outW[e*H*I:(e+1)*H*I])
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	return out
}

// SharedMLP is layer l's shared_mlp on one token h.
func (m *Model) SharedMLP(l int, h []float64) []float64 {
	p := fmt.Sprintf("model.layers.%d.shared_mlp.", l)
	return swiglu(h, m.get(p+"input_linear.weight"), m.get(p+"output_linear.weight"))
}

// ----------------------------------------------------------------------------
// Decoder

// Logits runs the whole sequence (positions 0..len-1) and returns the
// logits [len(tokens)][Vocab] after every token, already divided by
// logits_scaling.
func (m *Model) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the attention's positions start, start+1, … (the
// mixers' states start at zero whatever start is).
func (m *Model) logits(tokens []int, start int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	res := c.ResidualMultiplier
	if m.Mistakes.NoResidualMultiplier {
		res = 1
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("granitehref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = make([]float64, H)
		for i, v := range emb[id*H : (id+1)*H] {
			x[t][i] = v * c.EmbeddingMultiplier
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		}
		var mix [][]float64
		if c.LayerType(l) == "mamba" {
			mix = m.Mamba(l, h)
		} else {
			mix = m.Attention(l, h, start)
		}
		for t := range x {
			for i, v := range mix[t] {
				x[t][i] += res * v
			}
			h2 := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			y := make([]float64, H)
			if c.MoE() {
				y = m.MoE(l, h2)
			}
			if !m.Mistakes.NoSharedMLP && c.SharedIntermediate > 0 {
				for i, v := range m.SharedMLP(l, h2) {
					y[i] += v
				}
			}
			for i, v := range y {
				x[t][i] += res * v
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
		for i := range out[t] {
			out[t][i] /= c.LogitsScaling
		}
	}
	return out
}
