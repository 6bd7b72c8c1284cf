// Package dsref is a plain-Go float64 forward pass of DeepseekV3ForCausalLM
// written from transformers' models/deepseek_v3/modeling_deepseek_v3.py
// (eager path) and the YaRN rotary parameters of modeling_rope_utils.py
// (_compute_yarn_parameters): multi-head latent attention (MLA) with its
// optional q LoRA, the interleaved or rotate-half rotary on the decoupled
// rope dims, and the sigmoid, group-limited, bias-corrected top-k router
// (DeepseekV3TopkRouter, topk_method "noaux_tc") with shared experts. It
// follows the style of pipeline/testkit/qwenref: straight loops over one
// sequence, no caches, no padding, no absorbed MLA matrices, and no code
// shared with pipeline/nn or the architecture packages it checks.
//
// It also writes the tiny checkpoints the tests use: a config.json in the
// layout of deepseek-ai/DeepSeek-V3's and a float32 model.safetensors with
// the exact tensor names of the real checkpoints and deterministic
// pseudo-random weights.
//
// GLM (GLMModel) is the same for Glm4MoeForCausalLM, from
// models/glm4_moe/modeling_glm4_moe.py (GLM-4.5, GLM-4.5-Air, GLM-4.6,
// GLM-4.7): grouped-query attention with optional q/k/v biases and
// per-head q/k RMSNorm, a partial rotate-half rotary on the first
// head_dim·partial_rotary_factor dims of each head, and DeepSeek-V3's
// router and MoE block (Glm4MoeTopkRouter is DeepseekV3TopkRouter), which
// it computes with the code above.
//
// MiniMax (MiniMaxModel) is the same for MiniMaxM2ForCausalLM, from
// models/minimax_m2/modeling_minimax_m2.py (MiniMax-M2, M2.1, M2.5):
// Mixtral's decoder layer with every MLP a sparse MoE block (no dense
// layers, no shared experts), grouped-query attention whose q_norm and
// k_norm are RMSNorms over the whole q and k projections (all heads at
// once, not per head) ahead of a partial rotate-half rotary on the first
// rotary_dim dims of each head, and a sigmoid top-k router with a
// selection-only correction bias (DeepSeek's router with one group and
// no scale, computed with the code above).
//
// DeepseekV2ForCausalLM (DeepSeek-V2, V2-Lite, V2.5, DeepSeek-Coder-V2)
// is the same description with V2 set, from
// models/deepseek_v2/modular_deepseek_v2.py and DeepSeek's own released
// modeling_deepseek.py: the same MLA, dense first layers, shared experts
// and tensor names, the rotary on adjacent pairs (computed as the
// interleaved path above), and the softmax router of DeepseekV2Moe
// (topk_method "greedy" or "group_limited_greedy", groups scored by their
// best expert, no correction bias, no renormalisation): see DeepSeek.V2
// and DeepSeek.RouteV2.
//
// For DeepSeek-V3 and GLM-4.5 it also computes the multi-token-prediction
// (MTP) head as vLLM runs it for speculative decoding
// (models/deepseek_mtp.py, glm4_moe_mtp.py and the proposer that drives
// them): see DeepSeek.MTP and Model.MTPLogits.
package dsref

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// loraEps is the epsilon of q_a_layernorm and kv_a_layernorm:
// DeepseekV3Attention builds them as DeepseekV3RMSNorm(rank) without
// passing rms_norm_eps, so they keep the class default 1e-6 whatever the
// config says.
const loraEps = 1e-6

// DeepSeek describes a DeepseekV3ForCausalLM, or with V2 a
// DeepseekV2ForCausalLM, by the fields of its config.json.
type DeepSeek struct {
	// V2 makes it a DeepseekV2ForCausalLM ("model_type": "deepseek_v2"):
	// the router is DeepseekV2Moe's (RouteV2: softmax scores, TopKMethod,
	// no e_score_correction_bias tensor, never renormalised, whatever
	// NormTopK says), the rotary turns adjacent pairs (as RopeInterleave,
	// whatever it says), and there is no multi-token-prediction head.
	// Everything else is as DeepSeek-V3's.
	V2 bool
	// TopKMethod is topk_method with V2: "greedy" (the TopK best of all
	// experts) or "group_limited_greedy" (only from the TopKGroup groups
	// of Groups whose best expert scores highest). Unused without V2
	// (DeepSeek-V3's "noaux_tc").
	TopKMethod string
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers; Intermediate is the dense MLP width
	// (intermediate_size) and MoEIntermediate each routed expert's
	// (moe_intermediate_size).
	Vocab, Hidden, Intermediate, MoEIntermediate, Layers int
	// Heads is num_attention_heads (num_key_value_heads is the same).
	Heads int
	// QLoraRank is q_lora_rank: 0 projects the query with
	// self_attn.q_proj, otherwise with q_a_proj, q_a_layernorm and
	// q_b_proj through a rank of QLoraRank.
	QLoraRank int
	// KVLoraRank is kv_lora_rank, the width of the compressed key/value.
	KVLoraRank int
	// QKNope, QKRope and VHead are qk_nope_head_dim, qk_rope_head_dim and
	// v_head_dim: a query or key head is QKNope dims without position
	// then QKRope rotated dims; a value head is VHead dims.
	QKNope, QKRope, VHead int
	// Experts, TopK and Shared are n_routed_experts, num_experts_per_tok
	// and n_shared_experts; the shared experts are one SwiGLU MLP of width
	// MoEIntermediate*Shared.
	Experts, TopK, Shared int
	// Groups and TopKGroup are n_group and topk_group: the router only
	// takes experts from the TopKGroup best of Groups equal groups (with
	// V2 only under "group_limited_greedy").
	Groups, TopKGroup int
	// FirstDense is first_k_dense_replace: layers below it have the dense
	// MLP, the others the MoE block.
	FirstDense int
	// NormTopK (norm_topk_prob) divides the chosen experts' weights by
	// their sum; RoutedScale (routed_scaling_factor) multiplies them.
	// With V2 NormTopK is ignored and written false: DeepseekV2Moe never
	// renormalises (transformers ignores norm_topk_prob, and every V2
	// release has it false).
	NormTopK    bool
	RoutedScale float64
	// Theta is rope_theta; Eps is rms_norm_eps.
	Theta, Eps float64
	// RopeInterleave is rope_interleave: the rope dims of q and k hold
	// interleaved pairs (2j, 2j+1) that transformers regroups into halves
	// before rotating (apply_rotary_pos_emb_interleave); false rotates the
	// halves as they come (apply_rotary_pos_emb). V2 has no such field:
	// its apply_rotary_emb turns the adjacent pairs (2j, 2j+1) as complex
	// numbers and keeps them in place, which differs from the interleaved
	// path only in the order of the rotated dims within q and k (the same
	// in both, so every q·k is the same); V2 therefore always takes the
	// interleaved path and never writes rope_interleave.
	RopeInterleave bool
	// Factor > 0 turns on YaRN rope_scaling ("type": "yarn") with factor
	// Factor, original_max_position_embeddings OrigMax, beta_fast,
	// beta_slow, mscale and mscale_all_dim; max_position_embeddings is
	// then Factor*OrigMax. Factor 0: no rope scaling.
	Factor                                   float64
	OrigMax                                  int
	BetaFast, BetaSlow, MScale, MScaleAllDim float64
	// Tied reuses model.embed_tokens.weight as the output head.
	Tied bool
	// MaskInf closes the groups Route does not keep with −∞ instead of 0
	// (masked_fill(~score_mask, -inf): Ling 2.0's BailingMoeV2Gate).
	MaskInf bool
	// MTP writes the multi-token-prediction head as the releases hold
	// it, one more layer N = Layers (num_nextn_predict_layers 1): enorm,
	// hnorm, eh_proj [H, 2H], shared_head.norm, the copies
	// shared_head.head (of lm_head, or of the embedding when Tied) and
	// embed_tokens (of model.embed_tokens), and a decoder layer of the
	// model's own kind with the MoE block. It is drawn after everything
	// else, so the rest of the checkpoint keeps its values. See
	// Model.MTPLogits. V2 has no such head: Write and Load refuse MTP
	// with V2.
	MTP bool
	// IndexTopK > 0 makes it a DeepseekV32ForCausalLM ("model_type":
	// "deepseek_v32", DeepSeek-V3.2): each attention layer has the
	// lightning indexer of IndexHeads heads of IndexDim
	// (self_attn.indexer.*), and each query attends to the IndexTopK
	// tokens it scores best among those it may see (see indexed). The
	// MLA's rotary is then always interleaved, as DeepseekV32Attention's.
	IndexHeads, IndexDim, IndexTopK int
	// IndexInterleave makes it a GlmMoeDsaForCausalLM ("model_type":
	// "glm_moe_dsa", GLM-5): the indexer's rope dims turn as interleaved
	// pairs (GlmMoeDsaIndexer's apply_rotary_pos_emb_interleave), not
	// rotate-half.
	IndexInterleave bool
	// PostMoENorm makes it an AXK1ForCausalLM ("model_type": "axk1",
	// SK Telecom's A.X K1): each sparse layer's MoE output, the shared
	// and routed experts' sum, is normed by the layer's
	// post_mlp_layernorm before it joins the residual
	// (AXK1DecoderLayer); dense layers have no such norm.
	PostMoENorm bool
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyAXK1 is TinyDeepSeek as an A.X K1: its two sparse layers' MoE
// outputs normed before the residual.
func TinyAXK1() DeepSeek {
	c := TinyDeepSeek()
	c.PostMoENorm, c.Seed = true, 61
	return c
}

// TinyDeepSeekV32 is TinyDeepSeek as a DeepSeek-V3.2: an indexer of 8
// heads of 12 (its first 8 dims rotated) keeping the best 4 tokens, so
// that every query past the fourth attends to a chosen few. Its seed
// keeps the fourth and fifth best scores of every query at least 0.0017
// apart on the tests' sequences, where a float32 rounding cannot swap
// them (with 4 heads, keys whose every head's product is negative score
// exactly 0 and tie; which of equals the top k keeps is left open by
// torch.topk, and nn.TopKMask keeps them all).
func TinyDeepSeekV32() DeepSeek {
	c := TinyDeepSeek()
	c.IndexHeads, c.IndexDim, c.IndexTopK, c.Seed = 8, 12, 4, 47
	return c
}

// TinyGLM5 is TinyDeepSeekV32 as a GLM-5: the indexer's rope dims turned
// as interleaved pairs, one expert group (GLM-5's), and a seed that keeps
// the fourth and fifth best index scores of every query at least 0.0049
// apart on the tests' sequences.
func TinyGLM5() DeepSeek {
	c := TinyDeepSeekV32()
	c.IndexInterleave, c.Groups, c.TopKGroup, c.Seed = true, 1, 1, 60
	return c
}

// TinyDeepSeek is a small DeepSeek-V3: q LoRA, interleaved rotary, a
// dense first layer and two MoE layers of 8 experts in 4 groups, of which
// the 2 best groups are open to the top-2 choice, plus a shared expert.
func TinyDeepSeek() DeepSeek {
	return DeepSeek{
		Vocab: 96, Hidden: 32, Intermediate: 48, MoEIntermediate: 16, Layers: 3, FirstDense: 1,
		Heads: 4, QLoraRank: 24, KVLoraRank: 16, QKNope: 8, QKRope: 8, VHead: 12,
		Experts: 8, TopK: 2, Shared: 1, Groups: 4, TopKGroup: 2, NormTopK: true, RoutedScale: 2.5,
		Theta: 10000, Eps: 1e-6, RopeInterleave: true, Seed: 40,
	}
}

// TinyDeepSeekLite is TinyDeepSeek on the other paths of the
// architecture: no q LoRA (self_attn.q_proj, as in the Lite models), one
// expert group (plain top-k over the biased scores), rotate-half rotary
// (rope_interleave false), and YaRN (factor 4 over 16 positions,
// mscale and mscale_all_dim 1, so the softmax scale grows by
// (1 + 0.1 ln 4)² and cos and sin keep attention factor 1).
func TinyDeepSeekLite() DeepSeek {
	c := TinyDeepSeek()
	c.QLoraRank, c.Groups, c.TopKGroup, c.RopeInterleave = 0, 1, 1, false
	c.Factor, c.OrigMax, c.BetaFast, c.BetaSlow, c.MScale, c.MScaleAllDim = 4, 16, 32, 1, 1, 1
	c.Seed = 41
	return c
}

// TinyDeepSeekV2 is a small DeepSeek-V2 shaped like V2-Lite: no q LoRA
// (self_attn.q_proj), a dense first layer and two MoE layers of 8
// experts routed by "group_limited_greedy" from the 2 best of 4 groups
// (top 3, routed_scaling_factor 1.5, not renormalised), 2 shared
// experts, and YaRN as V2-Lite's (factor 4 over 16 positions, mscale and
// mscale_all_dim 0.707: the attention factor of cos and sin is 1, the
// softmax scale grows by (1 + 0.0707 ln 4)²). It takes 3 experts, more
// than the open groups, as DeepSeek-V2 does (6 from 3 of 8 groups):
// groups scored by their best expert always keep the top TopKGroup
// experts' groups open, so with TopK ≤ TopKGroup the group limit would
// never change a choice.
func TinyDeepSeekV2() DeepSeek {
	return DeepSeek{
		V2: true, TopKMethod: "group_limited_greedy",
		Vocab: 96, Hidden: 32, Intermediate: 48, MoEIntermediate: 16, Layers: 3, FirstDense: 1,
		Heads: 4, QLoraRank: 0, KVLoraRank: 16, QKNope: 8, QKRope: 8, VHead: 12,
		Experts: 8, TopK: 3, Shared: 2, Groups: 4, TopKGroup: 2, NormTopK: false, RoutedScale: 1.5,
		Theta: 10000, Eps: 1e-6, RopeInterleave: true,
		Factor: 4, OrigMax: 16, BetaFast: 32, BetaSlow: 1, MScale: 0.707, MScaleAllDim: 0.707,
		Seed: 42,
	}
}

// TinyDeepSeekV2Greedy is TinyDeepSeekV2 on the other paths: q LoRA (as
// DeepSeek-V2 and V2.5), "greedy" routing of the top 2 over all 8
// experts (one group, as V2-Lite's config writes it), and no rope
// scaling.
func TinyDeepSeekV2Greedy() DeepSeek {
	c := TinyDeepSeekV2()
	c.TopKMethod, c.Groups, c.TopKGroup, c.TopK = "greedy", 1, 1, 2
	c.QLoraRank = 24
	c.Factor, c.OrigMax, c.BetaFast, c.BetaSlow, c.MScale, c.MScaleAllDim = 0, 0, 0, 0, 0, 0
	c.Seed = 43
	return c
}

// Dense reports whether layer l has the dense MLP (DeepseekV3DecoderLayer:
// layer_idx < first_k_dense_replace) rather than the MoE block.
func (c DeepSeek) Dense(l int) bool { return l < c.FirstDense }

// MaxPositions is max_position_embeddings: Factor*OrigMax with YaRN (so
// that transformers versions that derive the factor from
// max_position_embeddings / original_max_position_embeddings and those
// that read rope_scaling's factor agree), else 256.
func (c DeepSeek) MaxPositions() int {
	if c.Factor > 0 {
		return int(math.Round(c.Factor * float64(c.OrigMax)))
	}
	return 256
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	// Init decides the values, see fill; "=name" copies the values of
	// the earlier tensor name and draws nothing.
	Init string
}

// Tensors lists the checkpoint tensors with the names of the real
// DeepSeek-V3 (or with V2 DeepSeek-V2) checkpoints, in the order Write
// draws them: with MTP the head's layer N = Layers last (mtpTensors).
func (c DeepSeek) Tensors() []Tensor {
	H := c.Hidden
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		out = append(out, c.layerTensors(l)...)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.MTP {
		out = append(out, mtpTensors(c.Layers, c.Vocab, H, c.Tied, c.layerTensors(c.Layers))...)
	}
	return out
}

// layerTensors lists decoder layer l's tensors (model.layers.l.*).
func (c DeepSeek) layerTensors(l int) []Tensor {
	H := c.Hidden
	qk := c.QKNope + c.QKRope
	var out []Tensor
	p := fmt.Sprintf("model.layers.%d.", l)
	add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
	add("input_layernorm.weight", "norm", H)
	if c.QLoraRank > 0 {
		add("self_attn.q_a_proj.weight", "linear", c.QLoraRank, H)
		add("self_attn.q_a_layernorm.weight", "norm", c.QLoraRank)
		add("self_attn.q_b_proj.weight", "linear", c.Heads*qk, c.QLoraRank)
	} else {
		add("self_attn.q_proj.weight", "linear", c.Heads*qk, H)
	}
	add("self_attn.kv_a_proj_with_mqa.weight", "linear", c.KVLoraRank+c.QKRope, H)
	add("self_attn.kv_a_layernorm.weight", "norm", c.KVLoraRank)
	add("self_attn.kv_b_proj.weight", "linear", c.Heads*(c.QKNope+c.VHead), c.KVLoraRank)
	add("self_attn.o_proj.weight", "linear", H, c.Heads*c.VHead)
	if c.IndexTopK > 0 {
		add("self_attn.indexer.wq_b.weight", "linear", c.IndexHeads*c.IndexDim, c.QLoraRank)
		add("self_attn.indexer.wk.weight", "linear", c.IndexDim, H)
		add("self_attn.indexer.k_norm.weight", "norm", c.IndexDim)
		add("self_attn.indexer.k_norm.bias", "bias", c.IndexDim)
		add("self_attn.indexer.weights_proj.weight", "linear", c.IndexHeads, H)
	}
	add("post_attention_layernorm.weight", "norm", H)
	c.mlpTensors(l, add)
	return out
}

// mtpTensors lists the multi-token-prediction layer n = num_hidden_layers
// of a model of hidden size H and vocab V, as DeepSeek-V3's and GLM-4.5's
// releases hold it: its decoder layer (layer, the model's own layout
// under model.layers.n.), then enorm, hnorm, eh_proj [H, 2H],
// shared_head.norm, and the copies shared_head.head (of lm_head, or of
// the embedding when tied) and embed_tokens (of model.embed_tokens).
func mtpTensors(n, V, H int, tied bool, layer []Tensor) []Tensor {
	p := fmt.Sprintf("model.layers.%d.", n)
	head := "=lm_head.weight"
	if tied {
		head = "=model.embed_tokens.weight"
	}
	return append(layer,
		Tensor{p + "enorm.weight", []int{H}, "norm"},
		Tensor{p + "hnorm.weight", []int{H}, "norm"},
		Tensor{p + "eh_proj.weight", []int{H, 2 * H}, "linear"},
		Tensor{p + "shared_head.norm.weight", []int{H}, "norm"},
		Tensor{p + "shared_head.head.weight", []int{V, H}, head},
		Tensor{p + "embed_tokens.weight", []int{V, H}, "=model.embed_tokens.weight"})
}

// checkMTP reports a head whose layer would be dense: vLLM builds it
// with the MoE block (DeepseekV2DecoderLayer's is_nextn; Glm4MoeDecoderLayer
// because its index N is not below first_k_dense_replace), which this
// package computes only where Dense(N) is false, as in every release.
func checkMTP(mtp, dense bool, n, firstDense int) error {
	if mtp && dense {
		return fmt.Errorf("dsref: the multi-token-prediction layer %d would be dense (first_k_dense_replace %d)", n, firstDense)
	}
	return nil
}

// mlpTensors lists layer l's MLP tensors through add (names relative to
// the layer): the dense SwiGLU below FirstDense, else the router, its
// correction bias (not with V2, whose router has none), the routed
// experts and the shared experts.
func (c DeepSeek) mlpTensors(l int, add func(name, init string, shape ...int)) {
	H := c.Hidden
	if c.Dense(l) {
		add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
		add("mlp.up_proj.weight", "linear", c.Intermediate, H)
		add("mlp.down_proj.weight", "linear", H, c.Intermediate)
		return
	}
	add("mlp.gate.weight", "router", c.Experts, H)
	if !c.V2 {
		add("mlp.gate.e_score_correction_bias", "ebias", c.Experts)
	}
	for e := 0; e < c.Experts; e++ {
		q := fmt.Sprintf("mlp.experts.%d.", e)
		add(q+"gate_proj.weight", "linear", c.MoEIntermediate, H)
		add(q+"up_proj.weight", "linear", c.MoEIntermediate, H)
		add(q+"down_proj.weight", "linear", H, c.MoEIntermediate)
	}
	if c.Shared > 0 {
		w := c.MoEIntermediate * c.Shared
		add("mlp.shared_experts.gate_proj.weight", "linear", w, H)
		add("mlp.shared_experts.up_proj.weight", "linear", w, H)
		add("mlp.shared_experts.down_proj.weight", "linear", H, w)
	}
	if c.PostMoENorm {
		add("post_mlp_layernorm.weight", "norm", H)
	}
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in)     (activations stay O(1))
//	embed   uniform
//	norm    1 ± 0.2
//	router  uniform · sqrt(3/fan-in)   (logits of standard deviation about 1 on a
//	                                    normed input: sigmoid scores spread by about 0.2)
//	ebias   ± 0.25                     (comparable to that spread, so the bias moves
//	                                    some tokens' choices; the TinyDeepSeek test
//	                                    sequence keeps top-k gaps above 1e-3)
//	ebiasneg −1.5 ± 0.25               (Ling's NegativeBias: every choice value, a sigmoid
//	                                    plus it, below −0.25)
//	bias    ± 0.5                      (a Linear's bias, GLM's q_proj, k_proj and
//	                                    v_proj: about the spread of the outputs it
//	                                    is added to, so it shifts them visibly)
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
			v[i] = float32(u * math.Sqrt(3/float64(fan)))
		case "ebias":
			v[i] = float32(0.25 * u)
		case "ebiasneg":
			v[i] = float32(-1.5 + 0.25*u)
		case "bias":
			v[i] = float32(0.5 * u)
		default:
			panic("dsref: unknown init " + t.Init)
		}
	}
	return v
}

// ConfigJSON returns the config.json, with the fields of
// deepseek-ai/DeepSeek-V3's less its quantization_config, and
// num_nextn_predict_layers 1 with MTP, else 0. With V2 it has the
// fields of deepseek-ai/DeepSeek-V2(-Lite)'s instead: DeepseekV2ForCausalLM,
// model_type deepseek_v2, scoring_func softmax, topk_method TopKMethod,
// norm_topk_prob false, and no rope_interleave or
// num_nextn_predict_layers.
func (c DeepSeek) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures":            []string{"DeepseekV3ForCausalLM"},
		"model_type":               "deepseek_v3",
		"vocab_size":               c.Vocab,
		"hidden_size":              c.Hidden,
		"intermediate_size":        c.Intermediate,
		"moe_intermediate_size":    c.MoEIntermediate,
		"num_hidden_layers":        c.Layers,
		"num_attention_heads":      c.Heads,
		"num_key_value_heads":      c.Heads,
		"q_lora_rank":              nil,
		"kv_lora_rank":             c.KVLoraRank,
		"qk_nope_head_dim":         c.QKNope,
		"qk_rope_head_dim":         c.QKRope,
		"v_head_dim":               c.VHead,
		"n_routed_experts":         c.Experts,
		"num_experts_per_tok":      c.TopK,
		"n_shared_experts":         c.Shared,
		"n_group":                  c.Groups,
		"topk_group":               c.TopKGroup,
		"first_k_dense_replace":    c.FirstDense,
		"norm_topk_prob":           c.NormTopK,
		"routed_scaling_factor":    c.RoutedScale,
		"num_nextn_predict_layers": mtpLayers(c.MTP),
		"scoring_func":             "sigmoid",
		"topk_method":              "noaux_tc",
		"rope_theta":               c.Theta,
		"rope_scaling":             nil,
		"rope_interleave":          c.RopeInterleave,
		"rms_norm_eps":             c.Eps,
		"max_position_embeddings":  c.MaxPositions(),
		"tie_word_embeddings":      c.Tied,
		"hidden_act":               "silu",
		"attention_bias":           false,
		"bos_token_id":             0,
		"eos_token_id":             1,
		"torch_dtype":              "float32",
	}
	if c.QLoraRank > 0 {
		j["q_lora_rank"] = c.QLoraRank
	}
	if c.V2 {
		j["architectures"] = []string{"DeepseekV2ForCausalLM"}
		j["model_type"] = "deepseek_v2"
		j["scoring_func"] = "softmax"
		j["topk_method"] = c.TopKMethod
		j["norm_topk_prob"] = false
		delete(j, "rope_interleave")
		delete(j, "num_nextn_predict_layers")
	}
	if c.IndexTopK > 0 {
		j["architectures"] = []string{"DeepseekV32ForCausalLM"}
		j["model_type"] = "deepseek_v32"
		j["index_n_heads"], j["index_head_dim"], j["index_topk"] = c.IndexHeads, c.IndexDim, c.IndexTopK
		delete(j, "rope_interleave") // DeepseekV32Config has none: always interleaved
		if c.IndexInterleave {
			j["architectures"] = []string{"GlmMoeDsaForCausalLM"}
			j["model_type"] = "glm_moe_dsa"
			j["indexer_types"] = slices.Repeat([]string{"full"}, c.Layers)
		}
	}
	if c.PostMoENorm {
		j["architectures"] = []string{"AXK1ForCausalLM"}
		j["model_type"] = "axk1"
	}
	if c.Factor > 0 {
		j["rope_scaling"] = map[string]any{
			"type":                             "yarn",
			"factor":                           c.Factor,
			"original_max_position_embeddings": c.OrigMax,
			"beta_fast":                        c.BetaFast,
			"beta_slow":                        c.BetaSlow,
			"mscale":                           c.MScale,
			"mscale_all_dim":                   c.MScaleAllDim,
		}
	}
	return j
}

// mtpLayers is num_nextn_predict_layers: 1 with the head, else 0.
func mtpLayers(mtp bool) int {
	if mtp {
		return 1
	}
	return 0
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1,
// as config.json says) and dir/model.safetensors in float32, with values
// drawn from lmckpt.NewRand(Seed) in the order of Tensors. It refuses a
// description that check refuses.
func (c DeepSeek) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	return writeCheckpoint(dir, c.Seed, c.Tensors(), c.ConfigJSON())
}

// check refuses what this package does not compute: a dense
// multi-token-prediction layer (checkMTP), and with V2 a head at all, a
// topk_method other than "greedy" and "group_limited_greedy", or (with
// "group_limited_greedy") groups that do not split the experts evenly or
// fewer open groups than 1 or more than there are.
func (c DeepSeek) check() error {
	if err := checkMTP(c.MTP, c.Dense(c.Layers), c.Layers, c.FirstDense); err != nil {
		return err
	}
	if c.PostMoENorm && (c.MTP || c.V2 || c.IndexTopK > 0) {
		return fmt.Errorf("dsref: an A.X K1 (PostMoENorm) is DeepSeek-V3's model without a multi-token-prediction head")
	}
	if c.IndexTopK > 0 && (c.V2 || c.QLoraRank == 0 || !c.RopeInterleave || c.IndexDim < c.QKRope || c.IndexHeads < 1) {
		return fmt.Errorf("dsref: a DeepSeek-V3.2 indexer needs V3, q LoRA, the interleaved rotary and index_head_dim >= qk_rope_head_dim")
	}
	if !c.V2 {
		return nil
	}
	if c.MTP {
		return fmt.Errorf("dsref: DeepSeek-V2 has no multi-token-prediction head")
	}
	switch c.TopKMethod {
	case "greedy":
	case "group_limited_greedy":
		if c.Groups < 1 || c.Experts%c.Groups != 0 || c.TopKGroup < 1 || c.TopKGroup > c.Groups {
			return fmt.Errorf("dsref: group_limited_greedy over %d experts in %d groups, %d open", c.Experts, c.Groups, c.TopKGroup)
		}
	default:
		return fmt.Errorf("dsref: DeepSeek-V2 topk_method %q, want greedy or group_limited_greedy", c.TopKMethod)
	}
	return nil
}

// draw returns t's values: a copy of the earlier tensor's values when
// t.Init is "=name" (drawing nothing), else fill's from r. drawn holds
// the values returned so far by name, and gets t's.
func draw(r *lmckpt.Rand, t Tensor, drawn map[string][]float32) []float32 {
	var v []float32
	if from, ok := strings.CutPrefix(t.Init, "="); ok {
		src, ok := drawn[from]
		if !ok {
			panic(fmt.Sprintf("dsref: %s copies %s, not drawn before it", t.Name, from))
		}
		v = slices.Clone(src)
	} else {
		v = fill(r, t)
	}
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	if len(v) != n {
		panic(fmt.Sprintf("dsref: %s has %d values, its shape %v %d", t.Name, len(v), t.Shape, n))
	}
	drawn[t.Name] = v
	return v
}

// writeCheckpoint writes config and, as model.safetensors in float32, the
// tensors ts with values drawn by draw from lmckpt.NewRand(seed) in
// their order, plus a generation_config.json with bos 0 and eos 1.
func writeCheckpoint(dir string, seed uint64, ts []Tensor, config map[string]any) error {
	r := lmckpt.NewRand(seed)
	drawn := map[string][]float32{}
	var st []safetensors.Tensor
	for _, t := range ts {
		v, err := safetensors.Float32Tensor(t.Name, safetensors.F32, t.Shape, draw(r, t, drawn))
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		st = append(st, v)
	}
	if err := lmckpt.WriteCheckpoint(dir, config, st); err != nil {
		return err
	}
	gen, err := json.Marshal(map[string]any{"bos_token_id": 0, "eos_token_id": 1})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "generation_config.json"), gen, 0o644)
}

// ----------------------------------------------------------------------------
// Rotary embedding and attention scale

// RopeFreqs returns the inverse frequencies [QKRope/2] of the rotary and
// the attention factor that multiplies its cos and sin
// (DeepseekV3RotaryEmbedding): rope_theta^(-2i/QKRope) without scaling
// (factor 1), and with YaRN what _compute_yarn_parameters computes over
// dim = qk_rope_head_dim (the config's head_dim): the interpolated
// frequencies (divided by Factor) blended into the extrapolated ones by
// a linear ramp between the correction dims of BetaFast and BetaSlow
// rotations over OrigMax positions (floored and ceiled, clamped to
// [0, dim-1]), and the factor
// get_mscale(Factor, MScale)/get_mscale(Factor, MScaleAllDim) when both
// are set, else get_mscale(Factor).
func (c DeepSeek) RopeFreqs() (inv []float64, attnFactor float64) {
	dim := float64(c.QKRope)
	inv = make([]float64, c.QKRope/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/dim)
	}
	if c.Factor <= 0 {
		return inv, 1
	}
	f := c.Factor
	if c.MScale != 0 && c.MScaleAllDim != 0 {
		attnFactor = yarnMScale(f, c.MScale) / yarnMScale(f, c.MScaleAllDim)
	} else {
		attnFactor = yarnMScale(f, 1)
	}
	betaFast, betaSlow := c.BetaFast, c.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corr := func(rot float64) float64 {
		return dim * math.Log(float64(c.OrigMax)/(rot*2*math.Pi)) / (2 * math.Log(c.Theta))
	}
	low := math.Max(math.Floor(corr(betaFast)), 0)
	high := math.Min(math.Ceil(corr(betaSlow)), dim-1)
	if low == high {
		high += 0.001
	}
	for i := range inv {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extrapolation := 1 - ramp
		inv[i] = inv[i]/f*(1-extrapolation) + inv[i]*extrapolation
	}
	return inv, attnFactor
}

// yarnMScale is yarn_get_mscale.
func yarnMScale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

// SoftmaxScale is DeepseekV3Attention's scaling: (QKNope+QKRope)^-0.5,
// multiplied with YaRN by mscale² where mscale = yarn_get_mscale(Factor,
// MScaleAllDim), when MScaleAllDim is not 0.
//
// V2 gets the same. There the reference follows DeepSeek's released
// modeling_deepseek.py (DeepseekV2Attention.__init__ multiplies
// softmax_scale by mscale² from rope_scaling's mscale_all_dim), which
// vLLM and llama.cpp also do, rather than transformers'
// DeepseekV2Attention, whose scaling is (QKNope+QKRope)^-0.5 alone: the
// released weights were trained and are served with the factor, and a
// model without YaRN (or with mscale_all_dim 0) is the same either way.
func (c DeepSeek) SoftmaxScale() float64 {
	s := 1 / math.Sqrt(float64(c.QKNope+c.QKRope))
	if c.Factor > 0 && c.MScaleAllDim != 0 {
		m := yarnMScale(c.Factor, c.MScaleAllDim)
		s *= m * m
	}
	return s
}

// rotate returns the rope dims v [QKRope] of a query or key head at
// position pos: with RopeInterleave (or V2) first regrouped as transformers'
// apply_rotary_pos_emb_interleave does (view [d/2, 2], transpose, so the
// even entries come first, then the odd ones), then rotated by
// rotate-half (x·cos + rotate_half(x)·sin, cos and sin being
// cat(freqs, freqs) times the attention factor). The result stays in the
// regrouped order, as in transformers.
func (c DeepSeek) rotate(v []float64, pos int, inv []float64, attnFactor float64) []float64 {
	half := len(v) / 2
	x := append([]float64(nil), v...)
	if c.RopeInterleave || c.V2 {
		for j := 0; j < half; j++ {
			x[j], x[half+j] = v[2*j], v[2*j+1]
		}
	}
	return rotateHalf(x, pos, inv, attnFactor)
}

// rotateHalf is transformers' x·cos + rotate_half(x)·sin at position pos
// on all of x [2·len(inv)], cos and sin being cat(freqs, freqs) times
// attnFactor: entry j pairs with entry len(x)/2+j and the pair turns as
// the complex number x[j] + i·x[len/2+j] times attnFactor·e^{i·pos·inv_j}.
func rotateHalf(x []float64, pos int, inv []float64, attnFactor float64) []float64 {
	half := len(x) / 2
	out := make([]float64, len(x))
	for j := 0; j < half; j++ {
		a := float64(pos) * inv[j]
		cs, sn := math.Cos(a)*attnFactor, math.Sin(a)*attnFactor
		out[j] = x[j]*cs - x[half+j]*sn
		out[half+j] = x[half+j]*cs + x[j]*sn
	}
	return out
}

// ----------------------------------------------------------------------------
// Router

// Route is DeepseekV3TopkRouter on one token's router logits (gate(x),
// [Experts]) with e_score_correction_bias bias: scores = sigmoid(logits);
// the choice values scores + bias; each of Groups equal groups scores the
// sum of its two largest choice values, and the TopKGroup best groups
// stay open (the others' choice values are set to 0, as transformers'
// masked_fill(~score_mask, 0.0) does, so a closed expert can still beat
// an open one whose choice value is negative; −∞ with MaskInf); the TopK largest choice
// values win (the lower index on ties). The weights are the winners'
// scores, without the bias, divided by their sum + 1e-20 when NormTopK,
// times RoutedScale. ids come in decreasing order of choice value. A nil
// bias is a zero one.
//
// With V2 it is RouteV2, and bias must be nil (V2's router has none).
func (c DeepSeek) Route(logits, bias []float64) (ids []int, weights []float64) {
	if c.V2 {
		if bias != nil {
			panic("dsref: DeepSeek-V2's router has no correction bias")
		}
		return c.RouteV2(logits)
	}
	E := c.Experts
	scores := make([]float64, E)
	choice := make([]float64, E)
	for e := range scores {
		scores[e] = sigmoid(logits[e])
		choice[e] = scores[e]
		if bias != nil {
			choice[e] += bias[e]
		}
	}
	groups := max(c.Groups, 1)
	per := E / groups
	groupScore := make([]float64, groups)
	for g := range groupScore {
		top := topIndices(choice[g*per:(g+1)*per], min(2, per))
		for _, i := range top {
			groupScore[g] += choice[g*per+i]
		}
	}
	open := make([]bool, groups)
	for _, g := range topIndices(groupScore, max(c.TopKGroup, 1)) {
		open[g] = true
	}
	masked := make([]float64, E)
	for e := range masked {
		switch {
		case open[e/per]:
			masked[e] = choice[e]
		case c.MaskInf:
			masked[e] = math.Inf(-1)
		}
	}
	ids = topIndices(masked, c.TopK)
	weights = make([]float64, len(ids))
	sum := 0.0
	for j, e := range ids {
		weights[j] = scores[e]
		sum += scores[e]
	}
	for j := range weights {
		if c.NormTopK {
			weights[j] /= sum + 1e-20
		}
		weights[j] *= c.RoutedScale
	}
	return ids, weights
}

// RouteV2 is DeepseekV2Moe.route_tokens_to_experts on one token's router
// logits (gate(x) in float32, [Experts]), whatever V2 says: scores =
// softmax(logits) over all experts. TopKMethod "greedy" takes the TopK
// largest scores. "group_limited_greedy" splits the experts into Groups
// equal groups, scores each group by its largest score (not by the sum
// of its two largest, as DeepSeek-V3), keeps the TopKGroup best groups
// open, sets the closed groups' scores to 0 (masked_fill 0.0), and takes
// the TopK largest of those. Ties go to the lower index. The weights are
// the taken (masked) scores times RoutedScale, never renormalised
// (NormTopK is ignored); an open expert's masked score is its score,
// and the scores are positive, so a closed expert is taken, with weight
// 0, only when the open groups hold fewer than TopK experts. ids come in
// decreasing order of score.
func (c DeepSeek) RouteV2(logits []float64) (ids []int, weights []float64) {
	E := c.Experts
	scores := lmckpt.Softmax64(logits[:E])
	masked := scores
	switch c.TopKMethod {
	case "greedy":
	case "group_limited_greedy":
		groups := max(c.Groups, 1)
		per := E / groups
		best := make([]float64, groups)
		for g := range best {
			best[g] = slices.Max(scores[g*per : (g+1)*per])
		}
		open := make([]bool, groups)
		for _, g := range topIndices(best, max(c.TopKGroup, 1)) {
			open[g] = true
		}
		masked = make([]float64, E)
		for e := range masked {
			if open[e/per] {
				masked[e] = scores[e]
			}
		}
	default:
		panic(fmt.Sprintf("dsref: DeepSeek-V2 topk_method %q", c.TopKMethod))
	}
	ids = topIndices(masked, c.TopK)
	weights = make([]float64, len(ids))
	for j, e := range ids {
		weights[j] = masked[e] * c.RoutedScale
	}
	return ids, weights
}

// topIndices returns the indices of the k largest values of v, largest
// first, the lower index first among equal values.
func topIndices(v []float64, k int) []int {
	taken := make([]bool, len(v))
	out := make([]int, 0, k)
	for len(out) < k {
		best := -1
		for i, x := range v {
			if !taken[i] && (best < 0 || x > v[best]) {
				best = i
			}
		}
		taken[best] = true
		out = append(out, best)
	}
	return out
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C DeepSeek
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64

	// moeInput, when set, sees each MoE block's input (layer, h); the
	// package's tests read the routing of real activations through it.
	moeInput func(layer int, h []float64)
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c DeepSeek) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := readWeights(dir, c.Tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

// readWeights reads dir's checkpoint as float64, checking that every
// tensor of ts is there with its size.
func readWeights(dir string, ts []Tensor) (map[string][]float64, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "dsref"}
	for _, t := range ts {
		chk.Shaped(t.Name, t.Shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return w, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("dsref: checkpoint has no tensor %q", name))
	}
	return v
}

// Experts returns the ids of the routed experts that the MoE block of
// layer l chooses for its input h (the post_attention_layernorm output,
// [Hidden]), in decreasing order of choice value, as Route chooses them
// from the layer's mlp.gate.weight and mlp.gate.e_score_correction_bias
// (with V2 from mlp.gate.weight alone). It panics on a dense layer.
func (m *Model) Experts(l int, h []float64) []int {
	ids, _ := m.route(l, h)
	return ids
}

// route is Route on the router logits of layer l for input h, with the
// layer's correction bias (none with V2).
func (m *Model) route(l int, h []float64) ([]int, []float64) {
	if m.C.Dense(l) {
		panic(fmt.Sprintf("dsref: layer %d is dense", l))
	}
	p := fmt.Sprintf("model.layers.%d.mlp.gate.", l)
	logits := lmckpt.Linear64(h, m.get(p+"weight"), nil)
	if m.C.V2 {
		return m.C.Route(logits, nil)
	}
	return m.C.Route(logits, m.get(p+"e_score_correction_bias"))
}

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token.
func (m *Model) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, ….
func (m *Model) logits(tokens []int, start int) [][]float64 { return m.stack().logits(tokens, start) }

// Final runs the whole sequence and returns the model's final hidden
// state [len(tokens)][Hidden] at every position after model.norm: what
// the head multiplies, and the hidden state the MTP head reads.
func (m *Model) Final(tokens []int) [][]float64 { return m.stack().final(tokens, 0) }

// MTPLogits runs the multi-token-prediction head of a checkpoint written
// with MTP over the text and returns its logits at MTP positions
// i = 0..T-2, each predicting token i+2, as vLLM's proposer runs
// DeepSeekMTP (models/deepseek_mtp.py): position i reads the embedding of
// token i+1 (zero at position 0, as vLLM masks it) and the model's final
// hidden state at i (Final), RMSNormed by enorm and hnorm, concatenated
// in that order and projected by eh_proj; then the decoder layer
// model.layers.N (MLA with the model's rotary at position i, causal over
// MTP positions 0..i, and the MoE block) with its residuals;
// shared_head.norm; and the head. The embedding and head are the model's
// own, model.embed_tokens and lm_head (the embedding when Tied): vLLM's
// proposer shares them into the head in place of the layer's copies
// embed_tokens and shared_head.head (DeepSeekMTP by itself would read
// the copies), which hold the same values in the releases and in what
// Write writes. The text's last token is the one the main model just
// sampled.
func (m *Model) MTPLogits(tokens []int) [][]float64 { return m.mtpStack().mtpLogits(tokens, 0) }

// MTPLogitsFrom is MTPLogits of a head that begins at position from: its
// own attention sees MTP positions from there on (the model's hidden
// states still come from the whole text, and the positions stay the
// text's, so the embedding is masked only where from is 0). Its rows are
// positions from to T-2.
func (m *Model) MTPLogitsFrom(tokens []int, from int) [][]float64 {
	return m.mtpStack().mtpLogits(tokens, from)
}

// MTPDraft returns k greedy draft tokens after the text, chained as vLLM's
// proposer drafts: the last MTP position (T-2) gives the first, argmax of
// its logits (the lowest id on ties); each further position (T-1, T, …)
// takes the previous draft's embedding and the head's own previous
// output, after the layer and before shared_head.norm, in place of the
// model's hidden state.
func (m *Model) MTPDraft(tokens []int, k int) []int {
	return argmaxes(m.mtpStack().mtpDraft(tokens, k))
}

// mtpStack is stack, checking that the checkpoint has the head.
func (m *Model) mtpStack() stack {
	if !m.C.MTP {
		panic("dsref: the multi-token-prediction head needs a description with MTP")
	}
	return m.stack()
}

// stack is the decoder around m's attention and MLP.
func (m *Model) stack() stack {
	c := m.C
	return stack{get: m.get, hidden: c.Hidden, layers: c.Layers, eps: c.Eps, tied: c.Tied, attention: m.attention,
		mlp: func(l int, p string, h []float64) []float64 {
			if c.Dense(l) {
				return m.swiglu(p+"mlp.", h)
			}
			if m.moeInput != nil {
				m.moeInput(l, h)
			}
			if c.PostMoENorm {
				return lmckpt.RMSNorm64(m.moe(l, p+"mlp.", h), m.get(p+"post_mlp_layernorm.weight"), c.Eps)
			}
			return m.moe(l, p+"mlp.", h)
		}}
}

// stack is what the references' decoders share around their attention
// and MLP: the embedding, each layer's o_proj and post_attention_layernorm
// with the two residual sums, the final norm and the head (lm_head, or
// the embedding when tied); and DeepSeek-V3's and GLM-4.5's
// multi-token-prediction head around its layer.
type stack struct {
	get            func(name string) []float64
	hidden, layers int
	eps            float64
	tied           bool
	// oBias adds self_attn.o_proj.bias after o_proj (Ling 2.0's use_bias).
	oBias bool
	// lingMTP runs the multi-token-prediction head as Ling 2.0's
	// BailingMoeV2MTPLayer does: no embedding zeroed at position 0, the
	// layer's output normed by its final_layernorm (what a chained draft
	// reads as its hidden state), the head the model's alone.
	lingMTP bool
	// attention is layer prefix p's attention (input_layernorm included)
	// on the residual stream x at positions start, start+1, …: every
	// position's per-head outputs concatenated, before o_proj.
	attention func(p string, x [][]float64, start int) [][]float64
	// mlp is layer l's MLP (prefix p) on its post-attention norm h.
	mlp func(l int, p string, h []float64) []float64
}

// logits runs tokens at positions start, start+1, … and returns the
// logits after every token.
func (s stack) logits(tokens []int, start int) [][]float64 {
	out := s.final(tokens, start)
	for t := range out {
		out[t] = s.head(out[t])
	}
	return out
}

// final runs tokens at positions start, start+1, … and returns the
// hidden state after every token, after model.norm.
func (s stack) final(tokens []int, start int) [][]float64 {
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = s.embed(id)
	}
	for l := 0; l < s.layers; l++ {
		s.layer(l, x, start)
	}
	for t := range x {
		x[t] = lmckpt.RMSNorm64(x[t], s.get("model.norm.weight"), s.eps)
	}
	return x
}

// embed returns a copy of token id's row of model.embed_tokens.
func (s stack) embed(id int) []float64 {
	H := s.hidden
	return append([]float64(nil), s.get("model.embed_tokens.weight")[id*H:(id+1)*H]...)
}

// head is the output head on a normed hidden state: lm_head, or the
// embedding when tied.
func (s stack) head(h []float64) []float64 {
	name := "lm_head.weight"
	if s.tied {
		name = "model.embed_tokens.weight"
	}
	return lmckpt.Linear64(h, s.get(name), nil)
}

// layer runs decoder layer l (model.layers.l.*) on the residual stream x
// at positions start, start+1, …, in place: x += o_proj(attention(x)),
// then x += mlp(post_attention_layernorm(x)).
func (s stack) layer(l int, x [][]float64, start int) {
	p := fmt.Sprintf("model.layers.%d.", l)
	att := s.attention(p, x, start)
	for t := range x {
		var bias []float64
		if s.oBias {
			bias = s.get(p + "self_attn.o_proj.bias")
		}
		o := lmckpt.Linear64(att[t], s.get(p+"self_attn.o_proj.weight"), bias)
		for i := range o {
			x[t][i] += o[i]
		}
		mlp := s.mlp(l, p, lmckpt.RMSNorm64(x[t], s.get(p+"post_attention_layernorm.weight"), s.eps))
		for i := range mlp {
			x[t][i] += mlp[i]
		}
	}
}

// mtpPrefix names the multi-token-prediction layer, model.layers.N. with
// N = num_hidden_layers.
func (s stack) mtpPrefix() string { return fmt.Sprintf("model.layers.%d.", s.layers) }

// mtpInput is DeepSeekMultiTokenPredictorLayer (and
// Glm4MoeMultiTokenPredictorLayer) up to its decoder layer, at MTP
// positions start, start+1, …: position start+i reads token ids[i] and
// hidden state hidden[i] and gets
// eh_proj(cat(enorm(embedding), hnorm(hidden))), the embedding first.
func (s stack) mtpInput(ids []int, hidden [][]float64, start int) [][]float64 {
	p := s.mtpPrefix()
	x := make([][]float64, len(ids))
	for i, id := range ids {
		e := s.embed(id)
		if start+i == 0 && !s.lingMTP {
			// vLLM zeroes the embedding at position 0 ("masking inputs
			// at position 0, as not needed by MTP": inputs_embeds set to
			// 0 where positions == 0), so enorm's output is 0 there too.
			clear(e)
		}
		e = lmckpt.RMSNorm64(e, s.get(p+"enorm.weight"), s.eps)
		h := lmckpt.RMSNorm64(hidden[i], s.get(p+"hnorm.weight"), s.eps)
		x[i] = lmckpt.Linear64(append(e, h...), s.get(p+"eh_proj.weight"), nil)
	}
	return x
}

// mtp runs the multi-token-prediction head on MTP positions start,
// start+1, … (mtpInput, then the decoder layer N at those positions,
// causal over them alone, with its residuals) and returns its outputs
// before shared_head.norm: what a chained draft step reads as its hidden
// state.
func (s stack) mtp(ids []int, hidden [][]float64, start int) [][]float64 {
	x := s.mtpInput(ids, hidden, start)
	s.layer(s.layers, x, start)
	if s.lingMTP {
		for i := range x {
			x[i] = lmckpt.RMSNorm64(x[i], s.get(s.mtpPrefix()+"final_layernorm.weight"), s.eps)
		}
	}
	return x
}

// mtpHead is the head's logits of one of its outputs:
// head(shared_head.norm(x)), head being the model's (see
// Model.MTPLogits).
func (s stack) mtpHead(x []float64) []float64 {
	if s.lingMTP {
		return s.head(x)
	}
	return s.head(lmckpt.RMSNorm64(x, s.get(s.mtpPrefix()+"shared_head.norm.weight"), s.eps))
}

// mtpLogits is MTPLogitsFrom: the head over MTP positions from..T-2,
// position i reading token i+1 and the model's final hidden state at i.
func (s stack) mtpLogits(tokens []int, from int) [][]float64 {
	T := len(tokens)
	if from < 0 || T-from < 2 {
		panic("dsref: the multi-token-prediction head needs two tokens from its first position on")
	}
	out := s.mtp(tokens[from+1:], s.final(tokens[:T-1], 0)[from:], from)
	for i := range out {
		out[i] = s.mtpHead(out[i])
	}
	return out
}

// mtpDraft returns the logits of MTPDraft's k chained steps.
func (s stack) mtpDraft(tokens []int, k int) [][]float64 {
	T := len(tokens)
	if T < 2 {
		panic("dsref: the multi-token-prediction head needs at least two tokens")
	}
	ids := slices.Clone(tokens[1:])
	hidden := s.final(tokens[:T-1], 0)
	var out [][]float64
	for len(out) < k {
		// No cache: the whole head reruns; its earlier positions are
		// causal and do not change.
		x := s.mtp(ids, hidden, 0)
		last := x[len(x)-1]
		logits := s.mtpHead(last)
		out = append(out, logits)
		ids = append(ids, argmax(logits))
		hidden = append(hidden, last)
	}
	return out
}

// argmax is the index of the largest value, the lowest on ties.
func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// argmaxes is argmax of every row.
func argmaxes(rows [][]float64) []int {
	out := make([]int, len(rows))
	for i, r := range rows {
		out[i] = argmax(r)
	}
	return out
}

// causalGQA is grouped-query attention with a causal mask, scale
// d^-0.5: query[t] [heads][d] over key[s] and value[s] [kvHeads][d] for
// s ≤ t, query head h reading key/value head h/(heads/kvHeads). It
// returns every position's head outputs concatenated, [T][heads·d].
func causalGQA(query, key, value [][][]float64, heads, kvHeads, d int) [][]float64 {
	group := heads / kvHeads
	scale := 1 / math.Sqrt(float64(d))
	out := make([][]float64, len(query))
	for t := range out {
		out[t] = make([]float64, heads*d)
		for hd := 0; hd < heads; hd++ {
			kv := hd / group
			scores := make([]float64, t+1)
			for s := 0; s <= t; s++ {
				dot := 0.0
				for i, qi := range query[t][hd] {
					dot += qi * key[s][kv][i]
				}
				scores[s] = dot * scale
			}
			probs := lmckpt.Softmax64(scores)
			o := out[t][hd*d : (hd+1)*d]
			for s, w := range probs {
				for i, vi := range value[s][kv] {
					o[i] += w * vi
				}
			}
		}
	}
	return out
}

// attention is DeepseekV3Attention (input_layernorm included) on the
// residual stream x [T][Hidden] at positions start, start+1, …: it
// returns every position's per-head outputs concatenated,
// [T][Heads*VHead], before o_proj.
func (m *Model) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	T := len(x)
	N, R, V, K := c.QKNope, c.QKRope, c.VHead, c.KVLoraRank
	inv, attnFactor := c.RopeFreqs()
	scale := c.SoftmaxScale()
	// query[t][h], key[t][h]: [N+R], value[t][h]: [V]
	query, key, value := make([][][]float64, T), make([][][]float64, T), make([][][]float64, T)
	normed, latents := make([][]float64, T), make([][]float64, T) // the indexer's inputs
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		normed[t] = h
		var q []float64
		if c.QLoraRank > 0 {
			qa := lmckpt.Linear64(h, m.get(p+"self_attn.q_a_proj.weight"), nil)
			qa = lmckpt.RMSNorm64(qa, m.get(p+"self_attn.q_a_layernorm.weight"), loraEps)
			latents[t] = qa
			q = lmckpt.Linear64(qa, m.get(p+"self_attn.q_b_proj.weight"), nil)
		} else {
			q = lmckpt.Linear64(h, m.get(p+"self_attn.q_proj.weight"), nil)
		}
		ckv := lmckpt.Linear64(h, m.get(p+"self_attn.kv_a_proj_with_mqa.weight"), nil)
		kPE := c.rotate(ckv[K:K+R], start+t, inv, attnFactor) // one rope head shared by all heads
		kv := lmckpt.Linear64(lmckpt.RMSNorm64(ckv[:K], m.get(p+"self_attn.kv_a_layernorm.weight"), loraEps),
			m.get(p+"self_attn.kv_b_proj.weight"), nil)
		query[t], key[t], value[t] = make([][]float64, c.Heads), make([][]float64, c.Heads), make([][]float64, c.Heads)
		for hd := 0; hd < c.Heads; hd++ {
			qh := q[hd*(N+R) : (hd+1)*(N+R)]
			query[t][hd] = append(append([]float64(nil), qh[:N]...), c.rotate(qh[N:], start+t, inv, attnFactor)...)
			kvh := kv[hd*(N+V) : (hd+1)*(N+V)]
			key[t][hd] = append(append([]float64(nil), kvh[:N]...), kPE...)
			value[t][hd] = kvh[N:]
		}
	}
	seen := func(t int) []int { return seq(t + 1) }
	if c.IndexTopK > 0 {
		chosen := m.indexed(p+"self_attn.indexer.", normed, latents, start)
		seen = func(t int) []int { return chosen[t] }
	}
	out := make([][]float64, T)
	for t := range out {
		out[t] = make([]float64, c.Heads*V)
		keys := seen(t)
		for hd := 0; hd < c.Heads; hd++ {
			scores := make([]float64, len(keys))
			for j, s := range keys {
				dot := 0.0
				for i, qi := range query[t][hd] {
					dot += qi * key[s][hd][i]
				}
				scores[j] = dot * scale
			}
			probs := lmckpt.Softmax64(scores)
			o := out[t][hd*V : (hd+1)*V]
			for j, w := range probs {
				for i, vi := range value[keys[j]][hd] {
					o[i] += w * vi
				}
			}
		}
	}
	return out
}

// seq is 0, 1, ..., n-1.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// indexed is DeepseekV32Indexer on a sequence at positions start, start+1,
// …: x the attention's normed inputs, qa the query's normed latents
// (q_a_layernorm's output). Its keys are k_norm(wk x) (a LayerNorm) and
// its queries wq_b qa split into IndexHeads heads, each rotated
// rotate-half on its first QKRope dims with the model's frequencies
// (transformers' apply_rotary_pos_emb, not the MLA's interleaved form);
// query t scores key s <= t by Σ_h w_th relu(q_th·k_s) / sqrt(IndexDim),
// w_t = weights_proj(x_t) / sqrt(IndexHeads), and keeps the IndexTopK
// best (every key when it sees fewer; the earlier key first among
// equals, as a stable sort keeps them). It returns each query's keys in
// increasing order.
func (m *Model) indexed(p string, x, qa [][]float64, start int) [][]int {
	c := m.C
	D, R, H := c.IndexDim, c.QKRope, c.IndexHeads
	inv, attnFactor := c.RopeFreqs()
	rot := func(v []float64, pos int) []float64 {
		if c.IndexInterleave {
			return append(c.rotate(v[:R], pos, inv, attnFactor), v[R:]...) // regrouped pairs, as the MLA's
		}
		return append(rotateHalf(v[:R], pos, inv, attnFactor), v[R:]...)
	}
	keys := make([][]float64, len(x))
	for s := range x {
		k := lmckpt.LayerNorm64(lmckpt.Linear64(x[s], m.get(p+"wk.weight"), nil), m.get(p+"k_norm.weight"), m.get(p+"k_norm.bias"), 1e-6)
		keys[s] = rot(k, start+s)
	}
	out := make([][]int, len(x))
	for t := range x {
		q := lmckpt.Linear64(qa[t], m.get(p+"wq_b.weight"), nil)
		w := lmckpt.Linear64(x[t], m.get(p+"weights_proj.weight"), nil)
		score := make([]float64, t+1)
		for h := 0; h < H; h++ {
			qh := rot(q[h*D:(h+1)*D], start+t)
			for s := 0; s <= t; s++ {
				dot := 0.0
				for i := range qh {
					dot += qh[i] * keys[s][i]
				}
				score[s] += w[h] / math.Sqrt(float64(H)) * math.Max(dot, 0) / math.Sqrt(float64(D))
			}
		}
		keep := seq(t + 1)
		if len(keep) > c.IndexTopK {
			slices.SortStableFunc(keep, func(a, b int) int { return cmp.Compare(score[b], score[a]) })
			keep = keep[:c.IndexTopK]
			slices.Sort(keep)
		}
		out[t] = keep
	}
	return out
}

// moe is DeepseekV3MoE on one token: Σ_j w_j expert_{e_j}(h) over the
// routed experts Route picks, plus shared_experts(h).
func (m *Model) moe(l int, p string, h []float64) []float64 {
	ids, ws := m.route(l, h)
	out := make([]float64, len(h))
	for j, e := range ids {
		y := m.swiglu(fmt.Sprintf("%sexperts.%d.", p, e), h)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	if m.C.Shared > 0 {
		y := m.swiglu(p+"shared_experts.", h)
		for i := range out {
			out[i] += y[i]
		}
	}
	return out
}

// swiglu is DeepseekV3MLP: down(silu(gate(x)) * up(x)); the width comes
// from the weights.
func (m *Model) swiglu(prefix string, x []float64) []float64 {
	return swigluOf(x, m.get(prefix+"gate_proj.weight"), m.get(prefix+"up_proj.weight"), m.get(prefix+"down_proj.weight"))
}

// swigluOf is down·(silu(gate·x) * up·x) with the row-major weights gate
// and up [width, len(x)] and down [out, width].
func swigluOf(x, gate, up, down []float64) []float64 {
	g := lmckpt.Linear64(x, gate, nil)
	u := lmckpt.Linear64(x, up, nil)
	for i := range g {
		g[i] = g[i] * sigmoid(g[i]) * u[i]
	}
	return lmckpt.Linear64(g, down, nil)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// ----------------------------------------------------------------------------
// Glm4MoeForCausalLM

// GLM describes a Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air, GLM-4.6,
// GLM-4.7) by the fields of its config.json.
type GLM struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers; Intermediate is the dense MLP width
	// (intermediate_size) and MoEIntermediate each routed expert's
	// (moe_intermediate_size).
	Vocab, Hidden, Intermediate, MoEIntermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads:
	// query head h reads key/value head h/(Heads/KVHeads).
	Heads, KVHeads int
	// HeadDim is head_dim, the width of every query, key and value head;
	// 0 leaves it out of config.json, and Glm4MoeAttention then takes
	// Hidden/Heads. The GLM releases set it (128, not Hidden/Heads).
	HeadDim int
	// PartialRotary is partial_rotary_factor: the first
	// int(head dim·PartialRotary) dims of each query and key head rotate,
	// the others pass through. GLM-4.5 has 0.5; 0 here is no rotary at all
	// (Glm4MoeConfig's own default, 0.5, applies only to a config.json
	// without the key, which Write never writes).
	PartialRotary float64
	// AttentionBias is attention_bias: q_proj, k_proj and v_proj have
	// biases (o_proj never has one).
	AttentionBias bool
	// QKNorm is use_qk_norm: self_attn.q_norm and k_norm, RMSNorms of the
	// head dim with eps Eps, apply to every query and key head before the
	// rotary.
	QKNorm bool
	// Experts, TopK and Shared are n_routed_experts, num_experts_per_tok
	// and n_shared_experts; the shared experts are one SwiGLU MLP of width
	// MoEIntermediate*Shared.
	Experts, TopK, Shared int
	// Groups and TopKGroup are n_group and topk_group, as DeepSeek's.
	Groups, TopKGroup int
	// FirstDense is first_k_dense_replace: layers below it have the dense
	// MLP, the others the MoE block.
	FirstDense int
	// NormTopK and RoutedScale are norm_topk_prob and
	// routed_scaling_factor, as DeepSeek's.
	NormTopK    bool
	RoutedScale float64
	// Theta is rope_theta; Eps is rms_norm_eps, the eps of every RMSNorm
	// of the model (q_norm and k_norm included).
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head.
	Tied bool
	// MTP writes the multi-token-prediction head, as DeepSeek's MTP
	// does: layer N = Layers with GLM's attention and the MoE block. See
	// GLMModel.MTPLogits.
	MTP bool
	// OBias gives o_proj a bias and MaskInf closes the router's groups
	// with −∞ instead of 0: neither is GLM-4.5's (Write refuses them);
	// Ling 2.0 (Ling) reads its checkpoint as a GLM with both.
	OBias, MaskInf bool
	// lingMTP: see stack.lingMTP (set by Ling).
	lingMTP bool
	// Exaone makes it an ExaoneMoeForCausalLM (LG's K-EXAONE, from
	// transformers' models/exaone_moe: EXAONE 4.0's attention in OLMoE's
	// pre-norm layer over DeepSeek-V3's MoE): the config under
	// ExaoneMoeConfig's names, the router's correction bias stored as
	// mlp.e_score_correction_bias, and with Window > 0 the layers sliding
	// within the last Window tokens but every Pattern-th, which attends
	// in full without the rotary (Exaone4Attention). It needs QKNorm, the
	// whole head rotating and no biases.
	Exaone          bool
	Window, Pattern int
	// GlobalRope turns the global layers too: a mistake the tests check
	// the model does not make.
	GlobalRope bool
	// Solar makes it a SolarOpenForCausalLM (Upstage's Solar Open, from
	// transformers' models/solar_open): GLM-4.5's MoE on every layer
	// after Llama's attention, the config without intermediate_size,
	// first_k_dense_replace, use_qk_norm or partial_rotary_factor (the
	// whole head turns). It needs FirstDense 0, no q/k norms and
	// PartialRotary 1.
	Solar bool
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyExaoneMoE is a small K-EXAONE: TinyGLMQKNorm's router (the 2 best
// of 4 groups, scale 2.5; the others closed with −∞, as transformers'
// ExaoneMoe router masks them) and q/k norms, the whole head rotating on
// the sliding layers, 4 layers of which the first dense and the fourth
// global (no rotary), a window of 5 tokens, an untied head.
func TinyExaoneMoE() GLM {
	c := TinyGLMQKNorm()
	c.Exaone, c.PartialRotary, c.Layers, c.Window, c.Pattern, c.Tied, c.MaskInf, c.Seed = true, 1, 4, 5, 4, false, true, 64
	return c
}

// TinySolar is a small Solar Open: TinyGLM's attention (q/k/v biases,
// head dim 16) turning the whole head, every one of its 3 layers sparse.
func TinySolar() GLM {
	c := TinyGLM()
	c.Solar, c.FirstDense, c.PartialRotary, c.Seed = true, 0, 1, 66
	return c
}

// sliding reports that layer l attends within the window.
func (c GLM) sliding(l int) bool { return c.Window > 0 && (l+1)%c.Pattern != 0 }

// storedName is a tensor's name in the checkpoint: K-EXAONE keeps the
// correction bias beside the router, not in it.
func (c GLM) storedName(n string) string {
	if c.Exaone {
		return strings.Replace(n, ".mlp.gate.e_score_correction_bias", ".mlp.e_score_correction_bias", 1)
	}
	return n
}

// TinyGLM is a small GLM-4.5-Air: q/k/v biases, no q/k norm, head dim 16
// (twice Hidden/Heads) of which the first 8 rotate, 4 query heads on 2
// key/value heads, a dense first layer and two MoE layers of 8 experts
// (top 2, one group, renormalised, scale 1) plus a shared expert.
func TinyGLM() GLM {
	return GLM{
		Vocab: 96, Hidden: 32, Intermediate: 48, MoEIntermediate: 16, Layers: 3, FirstDense: 1,
		Heads: 4, KVHeads: 2, HeadDim: 16, PartialRotary: 0.5, AttentionBias: true,
		Experts: 8, TopK: 2, Shared: 1, Groups: 1, TopKGroup: 1, NormTopK: true, RoutedScale: 1,
		Theta: 10000, Eps: 1e-5, Seed: 50,
	}
}

// TinyGLMQKNorm is TinyGLM on the other paths: q_norm and k_norm, no
// attention biases, the router limited to the 2 best of 4 expert groups
// with routed_scaling_factor 2.5 (GLM-4.5's), and a tied output head.
func TinyGLMQKNorm() GLM {
	c := TinyGLM()
	c.QKNorm, c.AttentionBias = true, false
	c.Groups, c.TopKGroup, c.RoutedScale = 4, 2, 2.5
	c.Tied, c.Seed = true, 51
	return c
}

// Dense reports whether layer l has the dense MLP (Glm4MoeDecoderLayer:
// layer_idx < first_k_dense_replace) rather than the MoE block.
func (c GLM) Dense(l int) bool { return l < c.FirstDense }

// HeadSize is the head dim Glm4MoeAttention uses: getattr(config,
// "head_dim", hidden_size // num_attention_heads).
func (c GLM) HeadSize() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.Hidden / c.Heads
}

// RotaryDim is the rotary's dim, _compute_default_rope_parameters'
// int(head_dim · partial_rotary_factor) (head_dim as HeadSize): the
// number of leading dims of each query and key head that rotate.
func (c GLM) RotaryDim() int { return int(float64(c.HeadSize()) * c.PartialRotary) }

// RopeFreqs returns the inverse frequencies [RotaryDim/2],
// rope_theta^(-2i/RotaryDim) (default rope, attention factor 1).
func (c GLM) RopeFreqs() []float64 {
	d := c.RotaryDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotate returns a query or key head v [HeadSize] at position pos:
// apply_rotary_pos_emb with cos and sin RotaryDim wide, so the first
// RotaryDim dims turn by rotate-half (dim j with dim RotaryDim/2+j) and
// the rest pass through unchanged.
func (c GLM) rotate(v []float64, pos int, inv []float64) []float64 {
	d := 2 * len(inv)
	return append(rotateHalf(v[:d], pos, inv, 1), v[d:]...)
}

// router is the DeepSeek description whose Route and MoE block are
// Glm4MoeTopkRouter's and Glm4MoeMoE's.
func (c GLM) router() DeepSeek {
	return DeepSeek{
		Hidden: c.Hidden, Intermediate: c.Intermediate, MoEIntermediate: c.MoEIntermediate, Layers: c.Layers,
		Experts: c.Experts, TopK: c.TopK, Shared: c.Shared, Groups: c.Groups, TopKGroup: c.TopKGroup,
		FirstDense: c.FirstDense, NormTopK: c.NormTopK, RoutedScale: c.RoutedScale, MaskInf: c.MaskInf,
	}
}

// Route is Glm4MoeTopkRouter, the same as DeepSeek.Route.
func (c GLM) Route(logits, bias []float64) (ids []int, weights []float64) {
	return c.router().Route(logits, bias)
}

// check reports a description transformers could not build.
func (c GLM) check() error {
	d := c.RotaryDim()
	switch {
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("dsref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case d%2 != 0 || d < 0 || d > c.HeadSize():
		return fmt.Errorf("dsref: rotary dim %d of head dim %d", d, c.HeadSize())
	case c.Experts%max(c.Groups, 1) != 0:
		return fmt.Errorf("dsref: %d experts in %d groups", c.Experts, c.Groups)
	case c.Solar && (c.FirstDense != 0 || c.QKNorm || c.PartialRotary != 1 || c.MTP || c.Exaone):
		return fmt.Errorf("dsref: a Solar Open has every layer sparse, no q/k norms, the whole head rotating and no MTP head")
	case c.Exaone && (!c.QKNorm || c.PartialRotary != 1 || c.AttentionBias || c.OBias || c.MTP || (c.Window > 0 && c.Pattern <= 0)):
		return fmt.Errorf("dsref: a K-EXAONE needs q/k norms, the whole head rotating, no biases, no MTP head and a positive pattern")
	}
	return checkMTP(c.MTP, c.Dense(c.Layers), c.Layers, c.FirstDense)
}

// Tensors lists the checkpoint tensors with the names of the real
// GLM-4.5 checkpoints, in the order Write draws them: with MTP the
// head's layer N = Layers last (as DeepSeek's).
func (c GLM) Tensors() []Tensor {
	H := c.Hidden
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		out = append(out, c.layerTensors(l)...)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.MTP {
		out = append(out, mtpTensors(c.Layers, c.Vocab, H, c.Tied, c.layerTensors(c.Layers))...)
	}
	return out
}

// layerTensors lists decoder layer l's tensors (model.layers.l.*).
func (c GLM) layerTensors(l int) []Tensor {
	H, D := c.Hidden, c.HeadSize()
	var out []Tensor
	p := fmt.Sprintf("model.layers.%d.", l)
	add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
	add("input_layernorm.weight", "norm", H)
	for _, proj := range []struct {
		name  string
		heads int
	}{{"q_proj", c.Heads}, {"k_proj", c.KVHeads}, {"v_proj", c.KVHeads}} {
		add("self_attn."+proj.name+".weight", "linear", proj.heads*D, H)
		if c.AttentionBias {
			add("self_attn."+proj.name+".bias", "bias", proj.heads*D)
		}
	}
	if c.QKNorm {
		add("self_attn.q_norm.weight", "norm", D)
		add("self_attn.k_norm.weight", "norm", D)
	}
	add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
	if c.OBias {
		add("self_attn.o_proj.bias", "bias", H)
	}
	add("post_attention_layernorm.weight", "norm", H)
	c.router().mlpTensors(l, add)
	return out
}

// ConfigJSON returns the config.json, with the fields of
// zai-org/GLM-4.5-Air's, but bos 0 and eos 1 (as the tiny DeepSeek's),
// max_position_embeddings 256, float32 and num_nextn_predict_layers 1
// with MTP, else 0.
func (c GLM) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures":            []string{"Glm4MoeForCausalLM"},
		"model_type":               "glm4_moe",
		"vocab_size":               c.Vocab,
		"hidden_size":              c.Hidden,
		"intermediate_size":        c.Intermediate,
		"moe_intermediate_size":    c.MoEIntermediate,
		"num_hidden_layers":        c.Layers,
		"num_attention_heads":      c.Heads,
		"num_key_value_heads":      c.KVHeads,
		"partial_rotary_factor":    c.PartialRotary,
		"attention_bias":           c.AttentionBias,
		"attention_dropout":        0.0,
		"use_qk_norm":              c.QKNorm,
		"n_routed_experts":         c.Experts,
		"num_experts_per_tok":      c.TopK,
		"n_shared_experts":         c.Shared,
		"n_group":                  c.Groups,
		"topk_group":               c.TopKGroup,
		"first_k_dense_replace":    c.FirstDense,
		"norm_topk_prob":           c.NormTopK,
		"routed_scaling_factor":    c.RoutedScale,
		"rope_theta":               c.Theta,
		"rope_scaling":             nil,
		"rms_norm_eps":             c.Eps,
		"max_position_embeddings":  256,
		"tie_word_embeddings":      c.Tied,
		"hidden_act":               "silu",
		"bos_token_id":             0,
		"eos_token_id":             1,
		"num_nextn_predict_layers": mtpLayers(c.MTP),
		"torch_dtype":              "float32",
	}
	if c.HeadDim > 0 {
		j["head_dim"] = c.HeadDim
	}
	if c.Solar {
		j["architectures"], j["model_type"] = []string{"SolarOpenForCausalLM"}, "solar_open"
		for _, k := range []string{"intermediate_size", "first_k_dense_replace", "use_qk_norm", "partial_rotary_factor", "num_nextn_predict_layers"} {
			delete(j, k)
		}
	}
	if c.Exaone {
		j["architectures"], j["model_type"] = []string{"ExaoneMoeForCausalLM"}, "exaone_moe"
		j["num_experts"], j["num_shared_experts"] = c.Experts, c.Shared
		for _, k := range []string{"n_routed_experts", "n_shared_experts", "use_qk_norm", "partial_rotary_factor", "attention_bias", "num_nextn_predict_layers"} {
			delete(j, k)
		}
		j["sliding_window"], j["sliding_window_pattern"] = nil, nil
		if c.Window > 0 {
			j["sliding_window"], j["sliding_window_pattern"] = c.Window, c.Pattern
		}
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1)
// and dir/model.safetensors in float32, with values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors.
func (c GLM) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	if c.OBias || (c.MaskInf && !c.Exaone) {
		return fmt.Errorf("dsref: GLM-4.5 has neither an o_proj bias nor a router closing groups with −∞")
	}
	ts := c.Tensors()
	for i := range ts {
		ts[i].Name = c.storedName(ts[i].Name)
	}
	return writeCheckpoint(dir, c.Seed, ts, c.ConfigJSON())
}

// GLMModel is a GLM description plus its weights in float64.
type GLMModel struct {
	C GLM
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64

	// moeInput, when set, sees each MoE block's input (layer, h).
	moeInput func(layer int, h []float64)
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c GLM) Load(dir string) (*GLMModel, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ts := c.Tensors()
	for i := range ts {
		ts[i].Name = c.storedName(ts[i].Name)
	}
	w, err := readWeights(dir, ts)
	if err != nil {
		return nil, err
	}
	for _, t := range c.Tensors() { // the names the reference reads
		if n := c.storedName(t.Name); n != t.Name {
			w[t.Name] = w[n]
		}
	}
	return &GLMModel{C: c, W: w}, nil
}

// ds is m's MoE part as a DeepSeek Model over the same weights.
func (m *GLMModel) ds() *Model { return &Model{C: m.C.router(), W: m.W} }

func (m *GLMModel) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("dsref: checkpoint has no tensor %q", name))
	}
	return v
}

// Experts returns the ids of the routed experts that the MoE block of
// layer l chooses for its input h (the post_attention_layernorm output),
// as DeepSeek's Model.Experts does. It panics on a dense layer.
func (m *GLMModel) Experts(l int, h []float64) []int { return m.ds().Experts(l, h) }

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token.
func (m *GLMModel) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, ….
func (m *GLMModel) logits(tokens []int, start int) [][]float64 {
	return m.stack().logits(tokens, start)
}

// Final runs the whole sequence and returns the model's final hidden
// state at every position after model.norm, as Model.Final.
func (m *GLMModel) Final(tokens []int) [][]float64 { return m.stack().final(tokens, 0) }

// MTPLogits is Model.MTPLogits for GLM-4.5's head, as vLLM's proposer
// runs Glm4MoeMTP (models/glm4_moe_mtp.py, the same head as
// DeepSeekMTP's): its decoder layer model.layers.N has GLM's
// grouped-query attention (biases, q/k norms and partial rotary at
// position i as the model's) and the MoE block.
func (m *GLMModel) MTPLogits(tokens []int) [][]float64 { return m.mtpStack().mtpLogits(tokens, 0) }

// MTPLogitsFrom is Model.MTPLogitsFrom for GLM-4.5's head.
func (m *GLMModel) MTPLogitsFrom(tokens []int, from int) [][]float64 {
	return m.mtpStack().mtpLogits(tokens, from)
}

// MTPDraft is Model.MTPDraft for GLM-4.5's head.
func (m *GLMModel) MTPDraft(tokens []int, k int) []int {
	return argmaxes(m.mtpStack().mtpDraft(tokens, k))
}

// mtpStack is stack, checking that the checkpoint has the head.
func (m *GLMModel) mtpStack() stack {
	if !m.C.MTP {
		panic("dsref: the multi-token-prediction head needs a description with MTP")
	}
	return m.stack()
}

// stack is the decoder around m's attention and MLP.
func (m *GLMModel) stack() stack {
	c := m.C
	ds := m.ds()
	return stack{get: m.get, hidden: c.Hidden, layers: c.Layers, eps: c.Eps, tied: c.Tied, oBias: c.OBias, lingMTP: c.lingMTP, attention: m.attention,
		mlp: func(l int, p string, h []float64) []float64 {
			if c.Dense(l) {
				return ds.swiglu(p+"mlp.", h)
			}
			if m.moeInput != nil {
				m.moeInput(l, h)
			}
			return ds.moe(l, p+"mlp.", h)
		}}
}

// project is Glm4MoeAttention up to the rotary on one input h (the
// input_layernorm output) at position pos: it returns the query heads
// [Heads][HeadSize] and the key and value heads [KVHeads][HeadSize],
// each query and key head normed by q_norm / k_norm when QKNorm and then
// rotated.
func (m *GLMModel) project(p string, h []float64, pos int, inv []float64) (q, k, v [][]float64) {
	c := m.C
	D := c.HeadSize()
	bias := func(name string) []float64 {
		if !c.AttentionBias {
			return nil
		}
		return m.get(p + "self_attn." + name + ".bias")
	}
	heads := func(name string, n int, norm string) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+"self_attn."+name+".weight"), bias(name))
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if norm != "" {
				if c.QKNorm {
					out[i] = lmckpt.RMSNorm64(out[i], m.get(p+"self_attn."+norm+".weight"), c.Eps)
				}
				out[i] = c.rotate(out[i], pos, inv)
			}
		}
		return out
	}
	return heads("q_proj", c.Heads, "q_norm"), heads("k_proj", c.KVHeads, "k_norm"), heads("v_proj", c.KVHeads, "")
}

// attention is Glm4MoeAttention (input_layernorm included) on the
// residual stream x [T][Hidden] at positions start, start+1, …: it
// returns every position's per-head outputs concatenated,
// [T][Heads*HeadSize], before o_proj.
func (m *GLMModel) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	inv := c.RopeFreqs()
	var l int
	fmt.Sscanf(p, "model.layers.%d.", &l)
	if c.Window > 0 && !c.sliding(l) && !c.GlobalRope {
		inv = nil // K-EXAONE's global layers: no rotary
	}
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		query[t], key[t], value[t] = m.project(p, h, start+t, inv)
	}
	if c.sliding(l) { // the last Window tokens, itself included
		return lmckpt.Attention64(query, key, value, 1/math.Sqrt(float64(c.HeadSize())), func(t, s int) bool { return t-s < c.Window })
	}
	return causalGQA(query, key, value, c.Heads, c.KVHeads, c.HeadSize())
}

// ----------------------------------------------------------------------------
// MiniMaxM2ForCausalLM

// MiniMax describes a MiniMaxM2ForCausalLM (MiniMax-M2, M2.1, M2.5) by the
// fields of its config.json.
type MiniMax struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers; Intermediate (intermediate_size) is the width of
	// every expert: there is no dense MLP and no moe_intermediate_size.
	Vocab, Hidden, Intermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads:
	// query head h reads key/value head h/(Heads/KVHeads).
	Heads, KVHeads int
	// HeadDim is head_dim, the width of every query, key and value head
	// (MiniMaxM2Config always has one; the releases' 128 is not
	// Hidden/Heads).
	HeadDim int
	// RotaryDim is rotary_dim: the first RopeDim() ≈ RotaryDim dims of each
	// query and key head rotate, the others pass through.
	RotaryDim int
	// Experts and TopK are num_local_experts and num_experts_per_tok.
	Experts, TopK int
	// Theta is rope_theta; Eps is rms_norm_eps, the eps of every RMSNorm
	// of the model, q_norm and k_norm included.
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head.
	Tied bool
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyMiniMax is a small MiniMax-M2: 2 layers, 4 query heads of 16 dims
// on 2 key/value heads (head dim twice Hidden/Heads), the first 8 dims of
// each head rotating (rotary_dim = head_dim/2, as in the releases: 64 of
// 128), 8 experts of width 16 of which 2 are chosen, and an untied head.
func TinyMiniMax() MiniMax {
	return MiniMax{
		Vocab: 96, Hidden: 32, Intermediate: 16, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, RotaryDim: 8,
		Experts: 8, TopK: 2, Theta: 10000, Eps: 1e-6, Seed: 60,
	}
}

// TinyMiniMaxWholeRotary is TinyMiniMax on the other paths: the rotary
// turns the whole head (rotary_dim 16), 3 experts are chosen, the output
// head is tied, and rope_theta is the releases' 5e6, MiniMaxM2Config's
// default_theta. That makes it the flavour transformers itself reads
// as written: configuration_minimax_m2.py at 3e108993 takes rope_theta
// from rope_parameters or that default and ignores a top-level
// rope_theta (TinyMiniMax's 1e4 would become 5e6), and the later
// modular_minimax_m2.py (ea9df1d) drops the rotary_dim conversion, so
// partial_rotary_factor falls back to 1 (TinyMiniMax's half rotary would
// become whole). This package follows config.json as written
// (rope_theta, rotary_dim).
func TinyMiniMaxWholeRotary() MiniMax {
	c := TinyMiniMax()
	c.RotaryDim, c.TopK, c.Tied, c.Theta, c.Seed = 16, 3, true, 5e6, 61
	return c
}

// RopeDim is the rotary's dim as transformers derives it: the config's
// rotary_dim becomes partial_rotary_factor = rotary_dim/head_dim
// (convert_rope_params_to_dict), and the default rope takes
// int(head_dim·partial_rotary_factor) dims; in float64, as Python, so it
// is RotaryDim except where the quotient rounds below it.
func (c MiniMax) RopeDim() int {
	return int(float64(c.HeadDim) * (float64(c.RotaryDim) / float64(c.HeadDim)))
}

// RopeFreqs returns the inverse frequencies [RopeDim/2],
// rope_theta^(-2i/RopeDim) (default rope, attention factor 1).
func (c MiniMax) RopeFreqs() []float64 {
	d := c.RopeDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotate returns a query or key head v [HeadDim] at position pos:
// apply_rotary_pos_emb with cos and sin RopeDim wide, so the first
// RopeDim dims turn by rotate-half (dim j with dim RopeDim/2+j) and the
// rest pass through unchanged.
func (c MiniMax) rotate(v []float64, pos int, inv []float64) []float64 {
	d := 2 * len(inv)
	return append(rotateHalf(v[:d], pos, inv, 1), v[d:]...)
}

// router is the DeepSeek description whose Route is MiniMaxM2TopKRouter:
// one group, no shared experts, the weights always renormalised and not
// scaled.
func (c MiniMax) router() DeepSeek {
	return DeepSeek{Hidden: c.Hidden, Experts: c.Experts, TopK: c.TopK, Groups: 1, TopKGroup: 1, NormTopK: true, RoutedScale: 1}
}

// Route is MiniMaxM2TopKRouter on one token's router logits
// (block_sparse_moe.gate(h), [Experts]) with the block's
// e_score_correction_bias bias: scores = sigmoid(logits); the TopK
// largest scores + bias win (the lower index on ties); their weights are
// their scores without the bias divided by their sum. ids come in
// decreasing order of choice value. It is DeepSeek.Route with one group
// (whose +1e-20 on the sum is below float64's resolution for any sum of
// TopK sigmoids above 1e-4). A nil bias is a zero one.
func (c MiniMax) Route(logits, bias []float64) (ids []int, weights []float64) {
	return c.router().Route(logits, bias)
}

// check reports a description transformers could not build.
func (c MiniMax) check() error {
	d := c.RopeDim()
	switch {
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("dsref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0:
		return fmt.Errorf("dsref: head dim %d", c.HeadDim)
	case d%2 != 0 || d < 0 || d > c.HeadDim:
		return fmt.Errorf("dsref: rotary dim %d of head dim %d", d, c.HeadDim)
	case c.TopK <= 0 || c.TopK > c.Experts:
		return fmt.Errorf("dsref: top %d of %d experts", c.TopK, c.Experts)
	}
	return nil
}

// Tensors lists the checkpoint tensors with the names of the Hub release
// (MiniMaxAI/MiniMax-M2; transformers renames block_sparse_moe to mlp and
// fuses the experts' w1/w3 into gate_up_proj and w2 into down_proj when
// it loads them), in the order Write draws them. q_norm and k_norm are
// as wide as the whole q and k projections.
func (c MiniMax) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("self_attn.q_norm.weight", "norm", c.Heads*D)
		add("self_attn.k_norm.weight", "norm", c.KVHeads*D)
		add("post_attention_layernorm.weight", "norm", H)
		add("block_sparse_moe.gate.weight", "router", c.Experts, H)
		add("block_sparse_moe.e_score_correction_bias", "ebias", c.Experts)
		for e := 0; e < c.Experts; e++ {
			q := fmt.Sprintf("block_sparse_moe.experts.%d.", e)
			add(q+"w1.weight", "linear", c.Intermediate, H)
			add(q+"w3.weight", "linear", c.Intermediate, H)
			add(q+"w2.weight", "linear", H, c.Intermediate)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON returns the config.json, with the fields of
// MiniMaxAI/MiniMax-M2's that the model reads or that say which variant
// it is (sigmoid scoring with the routing bias, per-layer q/k norm, no
// shared expert), but bos 0 and eos 1 (as the tiny DeepSeek's),
// max_position_embeddings 256 and float32.
func (c MiniMax) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures":            []string{"MiniMaxM2ForCausalLM"},
		"model_type":               "minimax_m2",
		"vocab_size":               c.Vocab,
		"hidden_size":              c.Hidden,
		"intermediate_size":        c.Intermediate,
		"num_hidden_layers":        c.Layers,
		"num_attention_heads":      c.Heads,
		"num_key_value_heads":      c.KVHeads,
		"head_dim":                 c.HeadDim,
		"rotary_dim":               c.RotaryDim,
		"rope_theta":               c.Theta,
		"rms_norm_eps":             c.Eps,
		"max_position_embeddings":  256,
		"num_local_experts":        c.Experts,
		"num_experts_per_tok":      c.TopK,
		"scoring_func":             "sigmoid",
		"use_routing_bias":         true,
		"use_qk_norm":              true,
		"qk_norm_type":             "per_layer",
		"shared_intermediate_size": 0,
		"tie_word_embeddings":      c.Tied,
		"hidden_act":               "silu",
		"bos_token_id":             0,
		"eos_token_id":             1,
		"torch_dtype":              "float32",
	}
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1)
// and dir/model.safetensors in float32, with values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors.
func (c MiniMax) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	return writeCheckpoint(dir, c.Seed, c.Tensors(), c.ConfigJSON())
}

// MiniMaxModel is a MiniMax description plus its weights in float64.
type MiniMaxModel struct {
	C MiniMax
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64

	// moeInput, when set, sees each MoE block's input (layer, h).
	moeInput func(layer int, h []float64)
	// perHeadNorm, for the tests, norms each query and key head on its
	// own (with its slice of q_norm / k_norm) instead of the whole
	// projection: the mistake the tests must tell apart.
	perHeadNorm bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c MiniMax) Load(dir string) (*MiniMaxModel, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := readWeights(dir, c.Tensors())
	if err != nil {
		return nil, err
	}
	return &MiniMaxModel{C: c, W: w}, nil
}

func (m *MiniMaxModel) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("dsref: checkpoint has no tensor %q", name))
	}
	return v
}

// Experts returns the ids of the experts that the MoE block of layer l
// chooses for its input h (the post_attention_layernorm output,
// [Hidden]), in decreasing order of choice value, as Route chooses them
// from block_sparse_moe.gate.weight and the block's
// block_sparse_moe.e_score_correction_bias.
func (m *MiniMaxModel) Experts(l int, h []float64) []int {
	ids, _ := m.route(l, h)
	return ids
}

// route is Route on the router logits of layer l for input h.
func (m *MiniMaxModel) route(l int, h []float64) ([]int, []float64) {
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	logits := lmckpt.Linear64(h, m.get(p+"gate.weight"), nil)
	return m.C.Route(logits, m.get(p+"e_score_correction_bias"))
}

// moe is MiniMaxM2SparseMoeBlock on one token h: Σ_j w_j expert_{e_j}(h)
// over the experts Route picks, expert e being
// w2·(silu(w1·h) * w3·h) (MiniMaxM2Experts: gate_up_proj is w1 then w3).
func (m *MiniMaxModel) moe(l int, h []float64) []float64 {
	ids, ws := m.route(l, h)
	out := make([]float64, len(h))
	for j, e := range ids {
		q := fmt.Sprintf("model.layers.%d.block_sparse_moe.experts.%d.", l, e)
		y := swigluOf(h, m.get(q+"w1.weight"), m.get(q+"w3.weight"), m.get(q+"w2.weight"))
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	return out
}

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token.
func (m *MiniMaxModel) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, ….
func (m *MiniMaxModel) logits(tokens []int, start int) [][]float64 {
	c := m.C
	return stack{get: m.get, hidden: c.Hidden, layers: c.Layers, eps: c.Eps, tied: c.Tied, attention: m.attention,
		mlp: func(l int, _ string, h []float64) []float64 {
			if m.moeInput != nil {
				m.moeInput(l, h)
			}
			return m.moe(l, h)
		}}.logits(tokens, start)
}

// project is MiniMaxM2Attention up to the rotary on one input h (the
// input_layernorm output) at position pos: q = q_norm(q_proj(h)) and
// k = k_norm(k_proj(h)), each RMS-normed over the whole projection
// (Heads·HeadDim and KVHeads·HeadDim wide, eps rms_norm_eps), then cut
// into heads and rotated; v = v_proj(h) cut into heads. It returns the
// query heads [Heads][HeadDim] and the key and value heads
// [KVHeads][HeadDim].
func (m *MiniMaxModel) project(p string, h []float64, pos int, inv []float64) (q, k, v [][]float64) {
	c := m.C
	D := c.HeadDim
	heads := func(name string, n int, norm string) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+"self_attn."+name+".weight"), nil)
		var w []float64
		if norm != "" {
			w = m.get(p + "self_attn." + norm + ".weight")
			if !m.perHeadNorm {
				all = lmckpt.RMSNorm64(all, w, c.Eps)
			}
		}
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if norm != "" {
				if m.perHeadNorm {
					out[i] = lmckpt.RMSNorm64(out[i], w[i*D:(i+1)*D], c.Eps)
				}
				out[i] = c.rotate(out[i], pos, inv)
			}
		}
		return out
	}
	return heads("q_proj", c.Heads, "q_norm"), heads("k_proj", c.KVHeads, "k_norm"), heads("v_proj", c.KVHeads, "")
}

// attention is MiniMaxM2Attention (input_layernorm included) on the
// residual stream x [T][Hidden] at positions start, start+1, …: it
// returns every position's per-head outputs concatenated,
// [T][Heads*HeadDim], before o_proj. Scale head_dim^-0.5, causal.
func (m *MiniMaxModel) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	inv := c.RopeFreqs()
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		query[t], key[t], value[t] = m.project(p, h, start+t, inv)
	}
	return causalGQA(query, key, value, c.Heads, c.KVHeads, c.HeadDim)
}
