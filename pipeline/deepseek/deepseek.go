// Package deepseek implements DeepseekV3ForCausalLM, following
// transformers' models/deepseek_v3/modeling_deepseek_v3.py: "DeepSeek-V3
// Technical Report" (DeepSeek-AI, 2024, arXiv:2412.19437), the layout of
// DeepSeek-V3 and R1, Kimi K2 and Moonlight; and Glm4MoeLiteForCausalLM
// (models/glm4_moe_lite: GLM-4.7-Flash), which is DeepSeek-V3's attention
// with GLM-4.5's mixture of experts, the same router, its sparse layers
// placed by mlp_layer_types. Glm4MoeForCausalLM (models/glm4_moe: GLM-4.5,
// GLM-4.5-Air, GLM-4.6, GLM-4.7) has the same mixture of experts after
// grouped-query attention (see GQA below).
//
// Attention is multi-head latent attention (MLA). Queries come through a
// low-rank projection (q_a_proj, q_a_layernorm, q_b_proj; q_proj when
// q_lora_rank is null), each head's split into qk_nope_head_dim dims
// without position and qk_rope_head_dim rotated ones. Keys and values come
// from one latent a token: kv_a_proj_with_mqa gives kv_lora_rank latent
// dims and one rotated key of qk_rope_head_dim shared by every head, and
// kv_b_proj expands the normed latent into each head's unrotated key and
// value (v_head_dim). Here the expansion is absorbed into the query and
// the output, as DeepSeek's own inference code does: the cache holds the
// latent and the shared rotated key (kv_lora_rank + qk_rope_head_dim a
// token and layer, one "KV head"), each head's query becomes
// [q_nope·W_UK, q_pe] over it, and the attention's output latent goes
// through W_UV to the head's values. That equals transformers' expanded
// form (the float64 reference in pipeline/testkit/dsref computes it so)
// and caches 576 numbers a token and layer for DeepSeek-V3 instead of
// 128 heads × (192 + 128): one cache a layer (nn.Latent), the keys of
// every head and, in its first kv_lora_rank dims, their values
// (nn.LatentAttention).
//
// The MLP is a dense SwiGLU on the first first_k_dense_replace layers and
// a sparse block on the others: the router's sigmoid scores plus
// e_score_correction_bias choose (n_group groups ranked by the sum of
// their two best, the topk_group best kept, then the num_experts_per_tok
// best experts), the unbiased scores of the chosen weigh them
// (renormalized when norm_topk_prob, times routed_scaling_factor), and
// n_shared_experts always-on experts join (DeepseekV3MoE,
// DeepseekV3TopkRouter, topk_method "noaux_tc").
//
// GLM-4.5's attention (Glm4MoeAttention) is Llama's grouped-query
// attention (llama.Model's Attend and key/value cache) with an explicit
// head_dim, biases on q_proj, k_proj and v_proj (attention_bias; o_proj
// never has one), optional per-head q/k norms (use_qk_norm), and the
// rotary embedding on the first half of each head's dims
// (partial_rotary_factor, 0.5 by default) in the rotate-half convention.
//
// Dots1ForCausalLM (models/dots1: rednote-hilab's dots.llm1, 142B of
// which 14B active) is the same mixture of experts after Qwen3's
// attention: per-head q/k norms, the rotary over whole heads, biases on
// q/k/v/o only with attention_bias, and sliding-window layers from
// max_window_layers on where sliding_window is set.
//
// DeepseekV32ForCausalLM (models/deepseek_v32: DeepSeek-V3.2, V3.2-Exp
// and V3.2-Speciale) is DeepSeek-V3 with DeepSeek Sparse Attention: a
// lightning indexer in each attention layer (self_attn.indexer: wq_b
// from the q LoRA's latent, wk with a LayerNorm, weights_proj) keeps a
// key of index_head_dim a token beside the latent, scores every visible
// key for each query, and the attention reads only the index_topk best
// (nn.IndexerKeep: a decode step gathers those latent rows,
// nn.SparseLatentAttention; a prefill window masks the others). Until a
// query can see more than index_topk keys it
// is DeepSeek-V3's attention exactly. The MLA's rotary is always
// interleaved; the indexer's is rotate-half. GlmMoeDsaForCausalLM
// (models/glm_moe_dsa: Z.ai's GLM-5) is the same design with GLM's
// sizes and an indexer whose rope dims turn as interleaved pairs; its
// layers that reuse another layer's choice ("shared" indexer_types) are
// refused.
//
// SolarOpenForCausalLM (models/solar_open: Upstage's Solar Open 100B) is
// GLM-4.5's mixture of experts on every layer after Llama's attention
// (q/k/v biases with attention_bias, the whole head turning, no q/k
// norms).
//
// AXK1ForCausalLM (models/axk1: SK Telecom's A.X K1) is DeepSeek-V3 whose
// sparse layers norm their MoE output by post_mlp_layernorm before the
// residual (Options.PostMoENorm); its experts run in the graph only.
//
// DeepseekV2ForCausalLM (models/deepseek_v2: DeepSeek-V2, V2-Lite, V2.5,
// DeepSeek-Coder-V2; "DeepSeek-V2" arXiv:2405.04434) is the same MLA with
// the rotary always on adjacent pairs, and an older router: softmax
// scores without a correction bias, the num_experts_per_tok best
// (topk_method "greedy") or the best within the topk_group groups whose
// best expert scores highest ("group_limited_greedy"), weighed by their
// scores times routed_scaling_factor, never renormalized. Its softmax
// scale follows DeepSeek's released modeling code (and vLLM's and
// llama.cpp's): times mscale² under YaRN with mscale_all_dim, as for
// DeepSeek-V3. transformers' DeepseekV2Attention leaves that factor out,
// so on a YaRN config (every V2 release has one) its attention logits are
// mscale² times smaller (its attention flatter) than the ones the
// checkpoints were trained with.
package deepseek

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("DeepseekV3ForCausalLM", New)
	lm.Register("DeepseekV32ForCausalLM", New)
	lm.Register("GlmMoeDsaForCausalLM", New)
	lm.Register("DeepseekV2ForCausalLM", New)
	lm.Register("Glm4MoeLiteForCausalLM", New)
	lm.Register("Glm4MoeForCausalLM", New)
	lm.Register("Dots1ForCausalLM", New)
	lm.Register("AXK1ForCausalLM", New)
	lm.Register("SolarOpenForCausalLM", New)
}

// Config is a DeepseekV3ForCausalLM, DeepseekV32ForCausalLM,
// DeepseekV2ForCausalLM or Glm4MoeLiteForCausalLM config.json.
type Config struct {
	Architectures         []string      `json:"architectures"`
	ModelType             string        `json:"model_type"`
	VocabSize             *int          `json:"vocab_size"`
	HiddenSize            *int          `json:"hidden_size"`
	IntermediateSize      *int          `json:"intermediate_size"`
	NumHiddenLayers       *int          `json:"num_hidden_layers"`
	NumAttentionHeads     *int          `json:"num_attention_heads"`
	QLoraRank             *int          `json:"q_lora_rank"`
	KVLoraRank            *int          `json:"kv_lora_rank"`
	QKNopeHeadDim         *int          `json:"qk_nope_head_dim"`
	QKRopeHeadDim         *int          `json:"qk_rope_head_dim"`
	VHeadDim              *int          `json:"v_head_dim"`
	RopeInterleave        *bool         `json:"rope_interleave"`
	HiddenAct             string        `json:"hidden_act"`
	MaxPositionEmbeddings *int          `json:"max_position_embeddings"`
	RMSNormEps            *float64      `json:"rms_norm_eps"`
	AttentionBias         bool          `json:"attention_bias"`
	TieWordEmbeddings     *bool         `json:"tie_word_embeddings"`
	BOSTokenID            config.IDList `json:"bos_token_id"`
	EOSTokenID            config.IDList `json:"eos_token_id"`
	// DeepSeek-V3.2's lightning indexer (DeepseekV32Config).
	IndexNHeads  *int `json:"index_n_heads"`
	IndexHeadDim *int `json:"index_head_dim"`
	IndexTopK    *int `json:"index_topk"`
	// GLM-5's cross-layer sharing of the indexer's choice
	// (GlmMoeDsaConfig): refused unless every layer runs its own.
	IndexerTypes        []string        `json:"indexer_types"`
	IndexTopKPattern    json.RawMessage `json:"index_topk_pattern"`
	IndexTopKFreq       *int            `json:"index_topk_freq"`
	IndexSkipTopKOffset *int            `json:"index_skip_topk_offset"`
	MoEConfig
}

// MoEConfig holds the mixture-of-experts fields of DeepseekV3Config,
// which Glm4MoeConfig and Glm4MoeLiteConfig share.
type MoEConfig struct {
	MoEIntermediateSize *int     `json:"moe_intermediate_size"`
	NRoutedExperts      *int     `json:"n_routed_experts"`
	NumExpertsPerTok    *int     `json:"num_experts_per_tok"`
	NSharedExperts      *int     `json:"n_shared_experts"`
	NGroup              *int     `json:"n_group"`
	TopKGroup           *int     `json:"topk_group"`
	FirstKDenseReplace  *int     `json:"first_k_dense_replace"`
	MLPLayerTypes       []string `json:"mlp_layer_types"`
	MoELayerFreq        *int     `json:"moe_layer_freq"`
	NormTopKProb        *bool    `json:"norm_topk_prob"`
	RoutedScalingFactor *float64 `json:"routed_scaling_factor"`
	ScoringFunc         string   `json:"scoring_func"`
	TopKMethod          string   `json:"topk_method"`
	// NumNextNPredictLayers is the multi-token-prediction layers the
	// checkpoint holds past num_hidden_layers.
	NumNextNPredictLayers *int `json:"num_nextn_predict_layers"`
}

// GLMConfig is a Glm4MoeForCausalLM config.json: Llama's attention
// fields (head_dim, num_key_value_heads, partial_rotary_factor,
// attention_bias) with use_qk_norm, and the mixture-of-experts fields.
type GLMConfig struct {
	llama.Config
	MoEConfig
	UseQKNorm bool `json:"use_qk_norm"`
}

// Defaults are a configuration class's defaults.
type Defaults struct {
	Vocab, Hidden, Intermediate, MoEIntermediate, Layers, Heads int
	QLora, KVLora, QKNope, QKRope, VHead                        int
	Experts, TopK, Shared, Groups, TopKGroup, FirstDense        int
	RoutedScale, Theta, Eps                                     float64
	MaxPositions                                                int
	// KVHeads and PartialRotary are num_key_value_heads and
	// partial_rotary_factor (GLM-4.5's attention; MLA has neither).
	KVHeads       int
	PartialRotary float64
	// BOS and EOS are the class's bos_token_id and eos_token_id.
	BOS, EOS int
	// V2 selects DeepSeek-V2's router (Options.V2).
	V2 bool
	// NormTopK is norm_topk_prob's default.
	NormTopK bool
	// IndexHeads, IndexDim and IndexTopK are index_n_heads,
	// index_head_dim and index_topk (DeepSeek-V3.2; 0 elsewhere).
	IndexHeads, IndexDim, IndexTopK int
	// LayerTypes reads mlp_layer_types, first_k_dense_replace placing
	// the dense layers without it (DeepseekV32Config).
	LayerTypes bool
	// IndexInterleave rotates the indexer's rope dims as interleaved
	// pairs (GLM-5's GlmMoeDsaIndexer) instead of rotate-half.
	IndexInterleave bool
}

var (
	// V3Defaults are DeepseekV3Config's defaults (DeepSeek-V3's sizes).
	V3Defaults = Defaults{
		Vocab: 129280, Hidden: 7168, Intermediate: 18432, MoEIntermediate: 2048, Layers: 61, Heads: 128,
		QLora: 1536, KVLora: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 256, TopK: 8, Shared: 1, Groups: 8, TopKGroup: 4, FirstDense: 3,
		RoutedScale: 2.5, Theta: 10000, Eps: 1e-6, MaxPositions: 4096, BOS: 0, EOS: 1, NormTopK: true,
	}
	// V32Defaults are DeepseekV32Config's: DeepSeek-V3's sizes with its
	// indexer's (64 heads of 128, the top 2048 tokens) and a context of
	// 163840.
	V32Defaults = Defaults{
		Vocab: 129280, Hidden: 7168, Intermediate: 18432, MoEIntermediate: 2048, Layers: 61, Heads: 128,
		QLora: 1536, KVLora: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 256, TopK: 8, Shared: 1, Groups: 8, TopKGroup: 4, FirstDense: 3,
		RoutedScale: 2.5, Theta: 10000, Eps: 1e-6, MaxPositions: 163840, BOS: 0, EOS: 1, NormTopK: true,
		IndexHeads: 64, IndexDim: 128, IndexTopK: 2048, LayerTypes: true,
	}
	// GLMDsaDefaults are GlmMoeDsaConfig's (GLM-5's sizes): DeepSeek-V3.2's
	// design with GLM's widths, one expert group and an indexer of 32
	// heads whose rope dims turn as interleaved pairs.
	GLMDsaDefaults = Defaults{
		Vocab: 154880, Hidden: 6144, Intermediate: 12288, MoEIntermediate: 2048, Layers: 78, Heads: 64,
		QLora: 2048, KVLora: 512, QKNope: 192, QKRope: 64, VHead: 256,
		Experts: 256, TopK: 8, Shared: 1, Groups: 1, TopKGroup: 1, FirstDense: 3,
		RoutedScale: 2.5, Theta: 10000, Eps: 1e-5, MaxPositions: 202752, BOS: 0, EOS: 1, NormTopK: true,
		IndexHeads: 32, IndexDim: 128, IndexTopK: 2048, LayerTypes: true, IndexInterleave: true,
	}
	// AXK1Defaults are AXK1Config's (SK Telecom's A.X K1): DeepSeek-V3's
	// design with 64 heads, 192 experts, one dense first layer, a
	// vocabulary of 163840 and a context of 32768.
	AXK1Defaults = Defaults{
		Vocab: 163840, Hidden: 7168, Intermediate: 18432, MoEIntermediate: 2048, Layers: 61, Heads: 64,
		QLora: 1536, KVLora: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 192, TopK: 8, Shared: 1, Groups: 8, TopKGroup: 4, FirstDense: 1,
		RoutedScale: 2.5, Theta: 10000, Eps: 1e-6, MaxPositions: 32768, BOS: 163691, EOS: 163691, NormTopK: true,
	}
	// V2Defaults are DeepseekV2Config's, which inherits LlamaConfig's
	// sizes. num_experts_per_tok has no default (0: the config must say),
	// nor have n_group and topk_group (read only by
	// group_limited_greedy).
	V2Defaults = Defaults{
		Vocab: 32000, Hidden: 4096, Intermediate: 11008, MoEIntermediate: 1407, Layers: 32, Heads: 32,
		QLora: 1536, KVLora: 512, QKNope: 128, QKRope: 64, VHead: 128,
		Experts: 64, Shared: 2, Groups: 1, TopKGroup: 1,
		RoutedScale: 1, Theta: 10000, Eps: 1e-6, MaxPositions: 2048, BOS: 1, EOS: 2, V2: true,
	}
	// GLMLiteDefaults are Glm4MoeLiteConfig's (GLM-4.7-Flash's sizes);
	// FirstDense is its mlp_layer_types default, one dense layer first.
	GLMLiteDefaults = Defaults{
		Vocab: 154880, Hidden: 2048, Intermediate: 10240, MoEIntermediate: 1536, Layers: 47, Heads: 20,
		QLora: 768, KVLora: 512, QKNope: 192, QKRope: 64, VHead: 256,
		Experts: 64, TopK: 4, Shared: 1, Groups: 1, TopKGroup: 1, FirstDense: 1,
		RoutedScale: 1.8, Theta: 10000, Eps: 1e-5, MaxPositions: 202752, BOS: 0, EOS: 1, NormTopK: true,
	}
	// GLMDefaults are Glm4MoeConfig's (the sizes of GLM-4.5-Air, with one
	// dense layer first and one expert group).
	GLMDefaults = Defaults{
		Vocab: 151552, Hidden: 4096, Intermediate: 10944, MoEIntermediate: 1408, Layers: 46, Heads: 96, KVHeads: 8,
		Experts: 128, TopK: 8, Shared: 1, Groups: 1, TopKGroup: 1, FirstDense: 1,
		RoutedScale: 1, Theta: 10000, Eps: 1e-5, MaxPositions: 131072, PartialRotary: 0.5, NormTopK: true,
	}
	// SolarDefaults are SolarOpenConfig's (Upstage's Solar Open 100B):
	// Glm4MoeConfig's with Solar's sizes, the whole head rotating, every
	// layer sparse (no intermediate_size, first_k_dense_replace or
	// use_qk_norm) and rope_theta 1e6.
	SolarDefaults = Defaults{
		Vocab: 196608, Hidden: 4096, Intermediate: 10944 /* unused: no dense layer */, MoEIntermediate: 1280, Layers: 48, Heads: 64, KVHeads: 8,
		Experts: 128, TopK: 8, Shared: 1, Groups: 1, TopKGroup: 1,
		RoutedScale: 1, Theta: 1e6, Eps: 1e-5, MaxPositions: 131072, PartialRotary: 1, NormTopK: true,
	}
	// DotsDefaults are Dots1Config's: n_routed_experts,
	// num_experts_per_tok and n_shared_experts have no default (0: the
	// config must say).
	DotsDefaults = Defaults{
		Vocab: 152064, Hidden: 4608, Intermediate: 10944, MoEIntermediate: 1408, Layers: 62, Heads: 32,
		Groups: 1, TopKGroup: 1, RoutedScale: 1, Theta: 10000, Eps: 1e-6, MaxPositions: 2048,
	}
)

// Dots1Config's sliding-window defaults.
const (
	dotsWindow     = 4096
	dotsWindowFrom = 62
)

// Options are the resolved hyperparameters. Under MLA, Spec's KVHeads is
// 1 and its HeadDim KVLoraRank + QKRope: the cache a token and layer.
type Options struct {
	llama.Options
	// GQA selects GLM-4.5's grouped-query attention (llama.Options's
	// heads, biases, q/k norms and rotary embedding) instead of MLA; the
	// MLA fields below are then unused.
	GQA bool
	// QLoraRank is q_lora_rank, 0 for a plain q_proj.
	QLoraRank                         int
	KVLoraRank, QKNope, QKRope, VHead int
	// Interleave is rope_interleave: the rotated dims come as adjacent
	// pairs, regrouped into halves before the rotation.
	Interleave bool
	// NoPE leaves the qk_rope_head_dim dims unrotated (Kimi Linear's
	// mla_use_nope: its MLA layers have no position embedding).
	NoPE bool
	// QLoraScale and KVLoraScale, when neither 0 nor 1, scale the MLA's
	// query (both its parts) and its normed latent (so the keys and the
	// values it expands to) before the rotary and the cache (LongCat-
	// Flash's mla_scale_q_lora, √(hidden/q_lora_rank), and
	// mla_scale_kv_lora, √(hidden/kv_lora_rank)).
	QLoraScale, KVLoraScale float64
	// PostMoENorm norms a sparse layer's MoE output (the shared and routed
	// experts' sum) by its post_mlp_layernorm before the residual (A.X
	// K1's AXK1DecoderLayer); the experts then run in the graph only.
	PostMoENorm bool
	// IndexTopK > 0 adds DeepSeek-V3.2's lightning indexer (DSA: see
	// nn.IndexerKeep) of IndexHeads heads of IndexDim: each query attends
	// to the IndexTopK visible tokens it scores best. IndexInterleave
	// turns its rope dims as interleaved pairs (GLM-5) instead of
	// rotate-half (DeepSeek-V3.2).
	IndexHeads, IndexDim, IndexTopK int
	IndexInterleave                 bool
	// SparseRows is the most queries a step (decode steps, speculative
	// verification) for which the attention gathers each query's
	// IndexTopK chosen latent rows (nn.SparseLatentAttention) instead of
	// scoring every visible row and masking the others: a gather of
	// T·IndexTopK rows against T·S products. 0 always masks.
	SparseRows int
	// Scale multiplies the query·key products: qk_head_dim^-0.5, times
	// mscale² under YaRN with mscale_all_dim.
	Scale float64
	// Experts is n_routed_experts, TopK num_experts_per_tok,
	// MoEIntermediate moe_intermediate_size, Shared n_shared_experts,
	// Groups n_group, TopKGroup topk_group, NormTopK norm_topk_prob,
	// RoutedScale routed_scaling_factor.
	Experts, TopK, MoEIntermediate, Shared, Groups, TopKGroup int
	NormTopK                                                  bool
	RoutedScale                                               float64
	// V2 is DeepSeek-V2's router: softmax scores and no correction bias;
	// with Groups > 1 (group_limited_greedy) each group ranked by its best
	// expert's score; the weights never renormalized (NormTopK false).
	V2 bool
	// SoftmaxScores scores the experts by the softmax of the router's
	// logits instead of their sigmoid, the correction bias still choosing
	// and the unbiased scores weighing (ERNIE 4.5's router).
	SoftmaxScores bool
	// NormMin > 0 renormalizes the chosen weights by max(sum, NormMin)
	// (ERNIE 4.5's moe_norm_min) instead of sum + 1e-20.
	NormMin float64
	// MaskInf closes the groups the router does not keep with −∞ instead
	// of 0 (Ling 2.0's BailingMoeV2Gate; nn.GroupRouter.MaskInf).
	MaskInf bool
	// Sparse[i] reports that layer i has the MoE block (else the dense
	// MLP): from first_k_dense_replace on (DeepSeek-V3), or where
	// mlp_layer_types says "sparse" (GLM-4.7-Flash; without the field its
	// first layer dense).
	Sparse []bool
	// MTPLayers is num_nextn_predict_layers: the multi-token-prediction
	// layers past the model's (mtp.go).
	MTPLayers int
}

// Resolve reads a DeepSeek-V3, DeepSeek-V2, GLM-4.7-Flash or GLM-4.5
// config.json, with its class's defaults.
func Resolve(cfg *config.File) (Options, error) {
	switch cfg.Architecture() {
	case "Glm4MoeForCausalLM", "SolarOpenForCausalLM":
		return resolveGLM(cfg)
	case "Dots1ForCausalLM":
		return resolveDots(cfg)
	}
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	d, lite := V3Defaults, cfg.Architecture() == "Glm4MoeLiteForCausalLM"
	switch {
	case lite:
		d = GLMLiteDefaults
	case cfg.Architecture() == "DeepseekV2ForCausalLM":
		d = V2Defaults
	case cfg.Architecture() == "DeepseekV32ForCausalLM":
		d = V32Defaults
	case cfg.Architecture() == "GlmMoeDsaForCausalLM":
		d = GLMDsaDefaults
	case cfg.Architecture() == "AXK1ForCausalLM":
		d = AXK1Defaults
	}
	if c.AttentionBias {
		return Options{}, errs.Unsupportedf("%s: attention_bias is true; DeepSeek's projections have no biases", where)
	}
	o := Options{
		QLoraRank:  lm.Or(c.QLoraRank, d.QLora),
		KVLoraRank: lm.Or(c.KVLoraRank, d.KVLora),
		QKNope:     lm.Or(c.QKNopeHeadDim, d.QKNope),
		QKRope:     lm.Or(c.QKRopeHeadDim, d.QKRope),
		VHead:      lm.Or(c.VHeadDim, d.VHead),
		Interleave: lm.Or(c.RopeInterleave, true),
	}
	if d.V2 || d.IndexTopK > 0 {
		// DeepseekV2's apply_rotary_emb: complex pairs; DeepseekV32Attention
		// always interleaves (DeepseekV32Config has no rope_interleave).
		o.Interleave = true
	}
	if c.QLoraRank == nil && cfg.Has("q_lora_rank") {
		o.QLoraRank = 0 // null: q_proj
	}
	o.PostMoENorm = cfg.Architecture() == "AXK1ForCausalLM"
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, d.Vocab),
		Hidden:       lm.Or(c.HiddenSize, d.Hidden),
		Intermediate: lm.Or(c.IntermediateSize, d.Intermediate),
		Layers:       lm.Or(c.NumHiddenLayers, d.Layers),
		Heads:        lm.Or(c.NumAttentionHeads, d.Heads),
		KVHeads:      1,
		HeadDim:      o.KVLoraRank + o.QKRope,
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, d.MaxPositions),
		EOS:          c.EOSTokenID,
		BOS:          d.BOS,
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if cfg.Has("bos_token_id") {
		s.BOS = -1 // null
	}
	if len(c.EOSTokenID) == 0 && !cfg.Has("eos_token_id") {
		s.EOS = []int{d.EOS}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"kv_lora_rank", o.KVLoraRank}, {"qk_nope_head_dim", o.QKNope}, {"qk_rope_head_dim", o.QKRope}, {"v_head_dim", o.VHead}} {
		if f.v <= 0 {
			return Options{}, fmt.Errorf("%s: %s must be positive, got %d", where, f.name, f.v)
		}
	}
	if o.QLoraRank < 0 {
		return Options{}, fmt.Errorf("%s: q_lora_rank must not be negative, got %d", where, o.QLoraRank)
	}
	if d.IndexTopK > 0 {
		if err := resolveIndexer(where, c, d, &o, s.Layers); err != nil {
			return Options{}, err
		}
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	s.TieEmbeddings = lm.Or(c.TieWordEmbeddings, false)
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = lm.KindFull
	}
	o.Spec = s
	if err := c.MoEConfig.resolve(where, d, lite, &o); err != nil {
		return Options{}, err
	}
	o.Eps = lm.Or(c.RMSNormEps, d.Eps)
	act := c.HiddenAct
	if act == "" {
		act = "silu"
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q is not supported", where, act)
	}
	var err error
	if o.Rope, err = nn.ConfigRope(cfg.Raw, d.Theta, o.QKRope, s.MaxPositions); err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	ms, err := mscaleAllDim(cfg)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	o.Scale = ms * ms / math.Sqrt(float64(o.QKNope+o.QKRope))
	return o, nil
}

// resolveIndexer reads DeepSeek-V3.2's indexer into o: index_n_heads,
// index_head_dim (at least qk_rope_head_dim, its rotated dims) and
// index_topk, all positive; its queries come from the q LoRA's latent,
// so q_lora_rank must be set.
func resolveIndexer(where string, c Config, d Defaults, o *Options, layers int) error {
	o.IndexHeads = lm.Or(c.IndexNHeads, d.IndexHeads)
	o.IndexDim = lm.Or(c.IndexHeadDim, d.IndexDim)
	o.IndexTopK = lm.Or(c.IndexTopK, d.IndexTopK)
	o.IndexInterleave = d.IndexInterleave
	o.SparseRows = sparseRows
	if err := c.fullIndexers(where, layers); err != nil {
		return err
	}
	if o.IndexHeads <= 0 || o.IndexHeads > 1<<16 || o.IndexDim < o.QKRope || o.IndexDim > 1<<16 || o.IndexTopK <= 0 {
		return fmt.Errorf("%s: index_n_heads %d (1 to 65536), index_head_dim %d (qk_rope_head_dim %d to 65536) and index_topk %d must be positive",
			where, o.IndexHeads, o.IndexDim, o.QKRope, o.IndexTopK)
	}
	if o.QLoraRank == 0 {
		return errs.Unsupportedf("%s: q_lora_rank is null; DeepSeek-V3.2's indexer reads the query's low-rank latent (every release has one)", where)
	}
	return nil
}

// fullIndexers refuses GLM-5's cross-layer sharing of the indexer's
// choice (GlmMoeDsaConfig: a "shared" layer reuses the previous "full"
// layer's top k and has no indexer of its own), read as the config class
// reads it: indexer_types when set (one entry a layer), else
// index_topk_pattern (a string of F and S, or a list taken as it is),
// else index_topk_freq (above 1, every layer from
// index_skip_topk_offset on but every freq-th shares). Every layer
// running its own indexer, the default, is read.
func (c Config) fullIndexers(where string, layers int) error {
	if c.IndexerTypes != nil {
		if len(c.IndexerTypes) != layers {
			return fmt.Errorf("%s: indexer_types has %d entries for %d layers", where, len(c.IndexerTypes), layers)
		}
		for i, t := range c.IndexerTypes {
			if t == "shared" {
				return errs.Unsupportedf("%s: indexer_types[%d] is \"shared\": layers that reuse another layer's indexer choice are not supported", where, i)
			}
		}
		return nil
	}
	if len(c.IndexTopKPattern) > 0 && string(c.IndexTopKPattern) != "null" {
		var pattern string
		var list []string
		switch {
		case json.Unmarshal(c.IndexTopKPattern, &pattern) == nil:
			for i, r := range pattern {
				switch r {
				case 'F':
				case 'S':
					return errs.Unsupportedf("%s: index_topk_pattern %q shares indexer choices between layers (at %d; only F, every layer its own, is supported)", where, pattern, i)
				default:
					return fmt.Errorf("%s: index_topk_pattern %q holds %q; want F and S", where, pattern, r)
				}
			}
		case json.Unmarshal(c.IndexTopKPattern, &list) == nil:
			for i, t := range list {
				if t == "shared" {
					return errs.Unsupportedf("%s: index_topk_pattern[%d] is \"shared\": shared indexer choices are not supported", where, i)
				}
			}
		default:
			return fmt.Errorf("%s: index_topk_pattern is %s; want a string of F and S or a list", where, c.IndexTopKPattern)
		}
		return nil
	}
	if lm.Or(c.IndexTopKFreq, 1) > 1 {
		return errs.Unsupportedf("%s: index_topk_freq %d shares indexer choices between layers (only 1 is supported)", where, *c.IndexTopKFreq)
	}
	return nil
}

// resolveGLM reads a Glm4MoeForCausalLM config.json: Llama's attention
// (pipeline/llama resolves the heads, head_dim, rotary embedding and
// activation) with Glm4MoeConfig's defaults, then the mixture of experts.
func resolveGLM(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c GLMConfig
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	d, solar := GLMDefaults, cfg.Architecture() == "SolarOpenForCausalLM"
	headDim := 0
	if solar {
		// SolarOpenConfig removes use_qk_norm, intermediate_size and
		// first_k_dense_replace: no q/k norms, every layer sparse.
		d, headDim = SolarDefaults, 128
		c.UseQKNorm, c.FirstKDenseReplace = false, nil
	}
	if c.NumKeyValueHeads == nil {
		c.NumKeyValueHeads = &d.KVHeads
	}
	base, err := c.Config.Resolve(cfg, llama.Defaults{
		VocabSize: d.Vocab, Hidden: d.Hidden, Intermediate: d.Intermediate, Layers: d.Layers, Heads: d.Heads,
		MaxPositions: d.MaxPositions, Eps: d.Eps, RopeTheta: d.Theta, Act: "silu", HeadDim: headDim,
	})
	if err != nil {
		return Options{}, err
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return Options{}, errs.Unsupportedf("%s: layer_types names %q layers; GLM-4.5's layers all attend in full", where, k)
		}
	}
	// Glm4MoeConfig defaults partial_rotary_factor to 0.5.
	if base.Rope, err = nn.ConfigRope(nn.DefaultPartialRotary(cfg.Raw, d.PartialRotary), d.Theta, base.Spec.HeadDim, base.Spec.MaxPositions); err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	base.OBias, base.MLPBias = false, false // Glm4MoeAttention's o_proj and the MLPs have no biases
	base.QKNorm = c.UseQKNorm
	o := Options{Options: base, GQA: true}
	if err := c.MoEConfig.resolve(where, d, false, &o); err != nil {
		return Options{}, err
	}
	if solar {
		for i := range o.Sparse {
			o.Sparse[i] = true
		}
		o.MTPLayers = 0 // SolarOpen reads no MTP layer
	}
	return o, nil
}

// DotsConfig is a Dots1ForCausalLM config.json: Llama's attention fields
// (head_dim, num_key_value_heads, attention_bias), the sliding-window
// ones and the mixture-of-experts fields.
type DotsConfig struct {
	llama.Config
	MoEConfig
	SlidingWindow   *int `json:"sliding_window"`
	MaxWindowLayers *int `json:"max_window_layers"`
}

// resolveDots reads a Dots1ForCausalLM config.json: Qwen3's attention
// (pipeline/llama's, with per-head q/k norms and attention_bias on q, k,
// v and o), layers from max_window_layers on sliding where
// sliding_window is set and layer_types absent, then the mixture of
// experts, whose n_routed_experts, num_experts_per_tok and
// n_shared_experts must be present.
func resolveDots(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c DotsConfig
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"n_routed_experts", c.NRoutedExperts}, {"num_experts_per_tok", c.NumExpertsPerTok}, {"n_shared_experts", c.NSharedExperts}} {
		if f.v == nil {
			return Options{}, fmt.Errorf("%s: %s is missing; Dots1Config has no default for it", where, f.name)
		}
	}
	d := DotsDefaults
	base, err := c.Config.Resolve(cfg, llama.Defaults{
		VocabSize: d.Vocab, Hidden: d.Hidden, Intermediate: d.Intermediate, Layers: d.Layers, Heads: d.Heads,
		MaxPositions: d.MaxPositions, Eps: d.Eps, RopeTheta: d.Theta, Act: "silu",
	})
	if err != nil {
		return Options{}, err
	}
	if base.Rope.RotaryDim != base.Spec.HeadDim {
		return Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; dots.llm1 rotates whole heads", where, base.Rope.RotaryDim, base.Spec.HeadDim)
	}
	base.MLPBias, base.QKNorm = false, true // Qwen3Attention's q_norm and k_norm; DeepseekV3MLP has no biases
	s := &base.Spec
	window := dotsWindow
	if c.SlidingWindow != nil {
		window = *c.SlidingWindow
	} else if cfg.Has("sliding_window") {
		window = 0 // null
	}
	if len(c.LayerTypes) == 0 && window > 0 {
		for i := lm.Or(c.MaxWindowLayers, dotsWindowFrom); i < s.Layers; i++ {
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	for i, k := range s.LayerKinds {
		if k == lm.KindSliding {
			if window <= 0 {
				return Options{}, fmt.Errorf("%s: layer %d is %s but no sliding_window is configured", where, i, k)
			}
			s.SlidingWindow = window
		}
	}
	o := Options{Options: base, GQA: true}
	// Dots1MoE is DeepseekV3MoE, which reads neither: the release writes
	// scoring_func "noaux_tc" (a topk_method's name) and routes by sigmoid.
	c.ScoringFunc, c.TopKMethod = "", ""
	if err := c.MoEConfig.resolve(where, d, false, &o); err != nil {
		return Options{}, err
	}
	return o, nil
}

// resolve reads the router and the experts into o, whose Spec is
// resolved: DeepseekV3MoE's fields with d's defaults, the sparse layers
// placed by mlp_layer_types when lite (GLM-4.7-Flash) or else by
// first_k_dense_replace.
func (c MoEConfig) resolve(where string, d Defaults, lite bool, o *Options) error {
	if d.V2 {
		if err := c.resolveV2(where, o); err != nil {
			return err
		}
	} else if c.ScoringFunc != "" && c.ScoringFunc != "sigmoid" {
		return errs.Unsupportedf("%s: scoring_func %q is not supported (DeepSeek-V3's router scores by sigmoid)", where, c.ScoringFunc)
	}
	if !d.V2 && c.TopKMethod != "" && c.TopKMethod != "noaux_tc" {
		return errs.Unsupportedf("%s: topk_method %q is not supported (DeepSeek-V3's is noaux_tc)", where, c.TopKMethod)
	}
	if c.MoELayerFreq != nil && *c.MoELayerFreq != 1 {
		// DeepSeek's own modeling code places the sparse layers every
		// moe_layer_freq; transformers ignores the field. Every release
		// has 1.
		return errs.Unsupportedf("%s: moe_layer_freq %d is not supported (only 1: every layer from first_k_dense_replace on is sparse)", where, *c.MoELayerFreq)
	}
	o.Experts = lm.Or(c.NRoutedExperts, d.Experts)
	o.TopK = lm.Or(c.NumExpertsPerTok, d.TopK)
	o.MoEIntermediate = lm.Or(c.MoEIntermediateSize, d.MoEIntermediate)
	o.Shared = lm.Or(c.NSharedExperts, d.Shared)
	o.RoutedScale = lm.Or(c.RoutedScalingFactor, d.RoutedScale)
	if !d.V2 {
		o.Groups = lm.Or(c.NGroup, d.Groups)
		o.TopKGroup = lm.Or(c.TopKGroup, d.TopKGroup)
		o.NormTopK = lm.Or(c.NormTopKProb, d.NormTopK)
		o.MTPLayers = lm.Or(c.NumNextNPredictLayers, 0)
	}
	if o.MTPLayers < 0 {
		return fmt.Errorf("%s: num_nextn_predict_layers must not be negative, got %d", where, o.MTPLayers)
	}
	if o.MoEIntermediate <= 0 {
		return fmt.Errorf("%s: moe_intermediate_size must be positive, got %d", where, o.MoEIntermediate)
	}
	if o.Shared < 0 {
		return fmt.Errorf("%s: n_shared_experts must not be negative, got %d", where, o.Shared)
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return fmt.Errorf("%s: n_routed_experts %d must be positive and num_experts_per_tok %d in [1, n_routed_experts]", where, o.Experts, o.TopK)
	}
	if o.V2 && (o.Groups <= 0 || o.Experts%o.Groups != 0 || o.TopKGroup <= 0 || o.TopKGroup > o.Groups || o.TopK > o.TopKGroup*(o.Experts/o.Groups)) {
		return fmt.Errorf("%s: n_group %d must divide n_routed_experts %d, topk_group %d be in [1, n_group], and the kept groups hold num_experts_per_tok %d",
			where, o.Groups, o.Experts, o.TopKGroup, o.TopK)
	}
	if o.Groups <= 0 || o.Experts%o.Groups != 0 || o.TopKGroup <= 0 || o.TopKGroup > o.Groups ||
		(!o.V2 && o.Groups > 1 && o.Experts/o.Groups < 2) || o.TopK > o.TopKGroup*(o.Experts/o.Groups) {
		return fmt.Errorf("%s: n_group %d must divide n_routed_experts %d into groups of two or more (one group of any size), topk_group %d be in [1, n_group], and the kept groups hold num_experts_per_tok %d",
			where, o.Groups, o.Experts, o.TopKGroup, o.TopK)
	}
	layers := o.Spec.Layers
	if err := lm.CheckExperts(where, "n_routed_experts", o.Experts, layers); err != nil {
		return err
	}
	var err error
	o.Sparse, err = c.sparseLayers(where, d, lite || d.LayerTypes, !lite, layers)
	return err
}

// resolveV2 reads DeepseekV2Moe's router into o: softmax scores
// (scoring_func), "greedy" (one group) or "group_limited_greedy" (n_group
// and topk_group, which DeepseekV2Config leaves unset), no
// renormalization, and num_experts_per_tok, which has no default. V2 has
// no multi-token-prediction layers.
func (c MoEConfig) resolveV2(where string, o *Options) error {
	o.V2 = true
	if c.ScoringFunc != "" && c.ScoringFunc != "softmax" {
		return errs.Unsupportedf("%s: scoring_func %q is not supported (DeepSeek-V2's router scores by softmax)", where, c.ScoringFunc)
	}
	if c.NumExpertsPerTok == nil {
		return fmt.Errorf("%s: num_experts_per_tok is missing; DeepseekV2Config has no default for it", where)
	}
	if lm.Or(c.NormTopKProb, false) {
		// transformers' DeepseekV2Moe ignores the flag and DeepSeek's own
		// code renormalizes instead of scaling: the two disagree, and no
		// release sets it.
		return errs.Unsupportedf("%s: norm_topk_prob true is not supported for DeepSeek-V2 (transformers ignores it, DeepSeek's code renormalizes in place of routed_scaling_factor; no release sets it)", where)
	}
	switch c.TopKMethod {
	case "", "greedy":
		o.Groups, o.TopKGroup = 1, 1
	case "group_limited_greedy":
		if c.NGroup == nil || c.TopKGroup == nil {
			return fmt.Errorf("%s: topk_method group_limited_greedy needs n_group and topk_group", where)
		}
		o.Groups, o.TopKGroup = *c.NGroup, *c.TopKGroup
	default:
		return errs.Unsupportedf("%s: topk_method %q is not supported (DeepSeek-V2's are greedy and group_limited_greedy)", where, c.TopKMethod)
	}
	return nil
}

// sparseLayers places the sparse blocks: mlp_layer_types ("dense" or
// "sparse" a layer) where the class reads it (types: GLM-4.7-Flash,
// DeepSeek-V3.2), else the first first_k_dense_replace layers dense
// (firstK: DeepSeek-V3, V3.2, GLM-4.5) or d.FirstDense (GLM-4.7-Flash's
// one, as Glm4MoeLiteConfig defaults it whatever first_k_dense_replace
// says).
func (c MoEConfig) sparseLayers(where string, d Defaults, types, firstK bool, layers int) ([]bool, error) {
	sparse := make([]bool, layers)
	if types && c.MLPLayerTypes != nil {
		if len(c.MLPLayerTypes) != layers {
			return nil, fmt.Errorf("%s: mlp_layer_types has %d entries for %d layers", where, len(c.MLPLayerTypes), layers)
		}
		for i, t := range c.MLPLayerTypes {
			switch t {
			case "sparse":
				sparse[i] = true
			case "dense":
			default:
				return nil, fmt.Errorf("%s: mlp_layer_types[%d] is %q, want \"dense\" or \"sparse\"", where, i, t)
			}
		}
		return sparse, nil
	}
	first := d.FirstDense
	if firstK {
		first = lm.Or(c.FirstKDenseReplace, d.FirstDense)
	}
	if first < 0 {
		return nil, fmt.Errorf("%s: first_k_dense_replace must not be negative, got %d", where, first)
	}
	for i := range sparse {
		sparse[i] = i >= first
	}
	return sparse, nil
}

// mscaleAllDim is DeepseekV3Attention's softmax scale correction under
// v5's rope_parameters or the older rope_scaling (the one the rotary
// embedding reads, nn.ConfigRope): yarn_get_mscale(factor,
// mscale_all_dim) when mscale_all_dim is set and not 0, else 1.
func mscaleAllDim(cfg *config.File) (float64, error) {
	for _, key := range []string{"rope_parameters", "rope_scaling"} { // nn.ConfigRope's precedence
		sc, err := nn.ParseRopeScaling(cfg.Raw[key])
		if err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		all, ok := sc["mscale_all_dim"].(float64)
		if !ok || all == 0 {
			continue
		}
		factor, _ := sc["factor"].(float64)
		if factor <= 1 {
			return 1, nil
		}
		return 0.1*all*math.Log(factor) + 1, nil
	}
	return 1, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	if o.PostMoENorm {
		return postNormed{NewModel(o)}, nil
	}
	return NewModel(o), nil
}

// postNormed is a decoder whose MoE output is normed before the residual
// (A.X K1): a norm of the experts' sum, which the one-by-one formulations
// (Routing's residual plus weighed experts) cannot express.
type postNormed struct{ *Model }

// InGraphExperts implements lm.InGraphExperts.
func (postNormed) InGraphExperts() string {
	return "post_mlp_layernorm norms the sum of the shared and routed experts before it joins the residual"
}

// MTPLayers implements lm.MultiToken: none that tputool reads.
func (postNormed) MTPLayers() int { return 0 }

// WithMTP implements lm.MultiToken: refused (transformers' AXK1 does not
// read a multi-token-prediction layer either).
func (postNormed) WithMTP() (lm.MTPModel, error) {
	return nil, errs.Unsupportedf("A.X K1's multi-token-prediction layers are not read")
}

// Model is a DeepSeek-V3 (GLM-4.5) decoder. The embedding, final norm
// and head are llama.Model's; the layers are MLA (llama.Model's
// attention) and the dense or sparse MLP. It implements lm.Routed and
// lm.Skipper.
type Model struct {
	*llama.Model
	o Options
	l Layout
}

// Layout names a sparse block's tensors within a decoder layer.
type Layout struct {
	// Block is the MoE block's module: "mlp" (DeepSeek-V3, GLM),
	// "block_sparse_moe" (MiniMax-M2). The router is BLOCK.gate.weight,
	// the experts BLOCK.experts.*, the shared experts
	// BLOCK.shared_experts.*.
	Block string
	// Bias is the router's correction bias within the block:
	// "gate.e_score_correction_bias" (DeepseekV3TopkRouter's buffer) or
	// "e_score_correction_bias" (MiniMaxM2SparseMoeBlock's).
	Bias string
	// BiasRows reports the bias stored as [1, experts] (ERNIE 4.5's
	// moe_statics, a row per modality) rather than [experts].
	BiasRows bool
	// Experts names each expert's matrices in checkpoints that hold them
	// one by one.
	Experts lm.ExpertNames
}

// DeepSeekLayout is DeepSeek-V3's and GLM's.
var DeepSeekLayout = Layout{Block: "mlp", Bias: "gate.e_score_correction_bias", Experts: lm.QwenExperts}

// NewModel returns the decoder for resolved options in DeepSeek's layout.
func NewModel(o Options) *Model { return NewModelIn(o, DeepSeekLayout) }

// NewModelIn returns the decoder for resolved options reading the sparse
// blocks in layout l.
func NewModelIn(o Options, l Layout) *Model {
	return &Model{Model: llama.NewModel(o.Options), o: o, l: l}
}

// block is layer i's sparse block's name prefix, "model.layers.I.mlp".
func (m *Model) block(i int) string { return fmt.Sprintf("model.layers.%d.%s", i, m.l.Block) }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Layout returns the names the sparse blocks are read under.
func (m *Model) Layout() Layout { return m.l }

// sparse reports whether layer i has the MoE block; a layer past the
// model's (the multi-token-prediction head's) has it, as in every
// release.
func (m *Model) sparse(i int) bool { return i >= len(m.o.Sparse) || m.o.Sparse[i] }

// LayerState implements lm.Model: the latent cache of kv_lora_rank +
// qk_rope_head_dim a token, keys and values at once; under GQA a key and
// a value cache.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.o.GQA {
		return m.Model.LayerState(i, batch, cacheLen)
	}
	st := nn.LatentCacheState(batch, cacheLen, m.o.KVLoraRank+m.o.QKRope)
	if m.o.IndexTopK > 0 {
		st = append(st, nn.IndexerCacheState(batch, cacheLen, m.o.IndexDim))
	}
	return st
}

// latentState reads layer i's state in lm.HeldState's order: the latent
// cache, the indexer's keys (DeepSeek-V3.2; nil elsewhere), then the
// latent's scales when it is int8 (held after every declared state).
func (m *Model) latentState(state []*Node) (nn.Latent, *Node) {
	if m.o.IndexTopK == 0 {
		return nn.LatentOf(state), nil
	}
	c := nn.Latent{Cache: state[0]}
	if c.Cache.DType() == dtypes.Int8 {
		c.Scales = state[2]
	}
	return c, state[1]
}

// heldState is latentState's inverse.
func heldState(c nn.Latent, index *Node) []*Node {
	if index == nil {
		return c.State()
	}
	st := []*Node{c.Cache, index}
	if c.Scales != nil {
		st = append(st, c.Scales)
	}
	return st
}

// LayerWeights implements lm.Model: the norms and the attention's
// projections, then the dense MLP or the router, the routed experts'
// stacks and the shared experts.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	if m.o.GQA {
		return m.MLPWeights(i, m.AttentionWeights(i))
	}
	return m.MLPWeights(i, m.LatentWeights(i))
}

// MLPWeights appends to ws layer i's dense MLP, or its router, routed
// experts' stacks and shared experts.
func (m *Model) MLPWeights(i int, ws []lm.WeightSpec) []lm.WeightSpec {
	s, o := m.Spec(), m.o
	p := fmt.Sprintf("model.layers.%d.", i)
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	if !m.sparse(i) {
		add("mlp.gate_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
		add("mlp.up_proj.weight", true, lm.Column, s.Intermediate, s.Hidden)
		add("mlp.down_proj.weight", true, lm.Row, s.Hidden, s.Intermediate)
		return ws
	}
	b := m.block(i) + "."
	ws = append(ws, lm.WeightSpec{Name: b + "gate.weight", Shape: []int{o.Experts, s.Hidden}, Matmul: true, Router: true})
	if !o.V2 {
		shape := []int{o.Experts}
		if m.l.BiasRows {
			shape = []int{1, o.Experts}
		}
		ws = append(ws, lm.WeightSpec{Name: b + m.l.Bias, Shape: shape, F32: true})
	}
	ws = append(ws, m.l.Experts.Stacked(b+"experts", o.Experts, o.MoEIntermediate, s.Hidden)...)
	if sh := o.Shared * o.MoEIntermediate; sh > 0 {
		ws = append(ws, lm.SwiGLUWeights(b+"shared_experts", sh, s.Hidden)...)
	}
	if o.PostMoENorm {
		add("post_mlp_layernorm.weight", false, lm.Replicated, s.Hidden)
	}
	return ws
}

// LatentWeights lists layer i's norms and MLA's projections.
func (m *Model) LatentWeights(i int) []lm.WeightSpec {
	s, o := m.Spec(), m.o
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	qk := o.QKNope + o.QKRope
	add("input_layernorm.weight", false, lm.Replicated, s.Hidden)
	if o.QLoraRank > 0 {
		add("self_attn.q_a_proj.weight", true, lm.Replicated, o.QLoraRank, s.Hidden)
		add("self_attn.q_a_layernorm.weight", false, lm.Replicated, o.QLoraRank)
		add("self_attn.q_b_proj.weight", true, lm.Column, s.Heads*qk, o.QLoraRank)
	} else {
		add("self_attn.q_proj.weight", true, lm.Column, s.Heads*qk, s.Hidden)
	}
	add("self_attn.kv_a_proj_with_mqa.weight", true, lm.Replicated, o.KVLoraRank+o.QKRope, s.Hidden)
	add("self_attn.kv_a_layernorm.weight", false, lm.Replicated, o.KVLoraRank)
	// Absorbed into the query and the output (read whole, not through
	// nn.Linear; decoded at load where a quantized checkpoint stores it
	// encoded): split by heads under --tp, as q_b_proj's rows are.
	ws = append(ws, lm.WeightSpec{Name: p + "self_attn.kv_b_proj.weight", Shape: []int{s.Heads * (o.QKNope + o.VHead), o.KVLoraRank},
		Absorbed: true, TP: lm.Column})
	add("self_attn.o_proj.weight", true, lm.Row, s.Hidden, s.Heads*o.VHead)
	if o.IndexTopK > 0 {
		// The indexer stays whole on every device under --tp: it scores
		// every key for every head at once.
		add("self_attn.indexer.wq_b.weight", true, lm.Replicated, o.IndexHeads*o.IndexDim, o.QLoraRank)
		add("self_attn.indexer.wk.weight", true, lm.Replicated, o.IndexDim, s.Hidden)
		add("self_attn.indexer.k_norm.weight", false, lm.Replicated, o.IndexDim)
		add("self_attn.indexer.k_norm.bias", false, lm.Replicated, o.IndexDim)
		// Read into float32, as DeepseekV32PreTrainedModel keeps it
		// (the releases store it unquantized, in bf16).
		ws = append(ws, lm.WeightSpec{Name: p + "self_attn.indexer.weights_proj.weight", Shape: []int{o.IndexHeads, s.Hidden}, F32: true, TP: lm.Replicated})
	}
	add("post_attention_layernorm.weight", false, lm.Replicated, s.Hidden)
	return ws
}

// extraLayer matches the tensors of layers past num_hidden_layers: the
// multi-token-prediction module DeepSeek-V3 ships as layer 61
// (num_nextn_predict_layers), which transformers does not load.
var extraLayer = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// SkipWeight implements lm.Skipper: the layers past num_hidden_layers.
func (m *Model) SkipWeight(name string) (string, bool) {
	sub := extraLayer.FindStringSubmatch(name)
	if sub == nil {
		return "", false
	}
	if l, err := strconv.Atoi(sub[1]); err == nil && l >= m.Spec().Layers {
		return "multi-token-prediction layers past num_hidden_layers (num_nextn_predict_layers): not used", true
	}
	return "", false
}

// Layer implements lm.Model: DeepseekV3DecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, st := m.Mix(i, w, x, state, step)
	return m.FinishLayer(i, w, x, h, step), st
}

// FinishLayer is layer i after its token mixer: the residual x plus the
// dense MLP, or the sparse block with its experts in the graph, of the
// post-attention norm's output h.
func (m *Model) FinishLayer(i int, w *lm.Params, x, h *Node, step *lm.Step) *Node {
	if !m.sparse(i) {
		p := w.Scope(fmt.Sprintf("model.layers.%d.mlp", i))
		return Add(x, nn.GatedMLP(h, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, m.o.Act))
	}
	p := w.Scope(m.block(i) + ".experts")
	if m.o.PostMoENorm { // x + post_mlp_layernorm(shared + routed)
		moe := nn.FinishRouted(m.Routing(i, w, ZerosLike(x), h), p.Get("gate_up_proj"), p.Get("down_proj"), m.o.Act, step.GatherExperts)
		return Add(x, nn.RMSNorm(moe, w.Get(fmt.Sprintf("model.layers.%d.post_mlp_layernorm.weight", i)), m.o.Eps, false))
	}
	return nn.FinishRouted(m.Routing(i, w, x, h), p.Get("gate_up_proj"), p.Get("down_proj"), m.o.Act, step.GatherExperts)
}

// Experts implements lm.Routed.
func (m *Model) Experts(i int) *lm.Experts {
	if !m.sparse(i) {
		return nil
	}
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return m.l.Experts.Weights(m.block(i)+".experts", e, m.o.MoEIntermediate, m.Spec().Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of moe_intermediate_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p, n := w.Scope(fmt.Sprintf("%s.experts.%d", m.block(i), e)), m.l.Experts
	return nn.GatedMLP(x, p.Get(n.Gate), nil, p.Get(n.Up), nil, p.Get(n.Down), nil, m.o.Act)
}

// Route implements lm.Routed: attention with its residual, the
// post-attention norm, the router's choice and the shared experts, which
// join the residual.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	x, h, st := m.Mix(i, w, x, state, step)
	return m.Routing(i, w, x, h), st
}

// Routing is layer i's sparse block before the routed experts, given the
// residual x and the post-attention norm's output h: the router's
// choice, and the shared experts added to the residual.
func (m *Model) Routing(i int, w *lm.Params, x, h *Node) *lm.Routing {
	p := w.Scope(m.block(i))
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	ids, weights := m.route(p, Reshape(h, b*t, m.Spec().Hidden))
	if m.o.Shared > 0 {
		x = Add(x, nn.GatedMLP(h, p.Get("shared_experts.gate_proj.weight"), nil, p.Get("shared_experts.up_proj.weight"), nil,
			p.Get("shared_experts.down_proj.weight"), nil, m.o.Act))
	}
	return &lm.Routing{
		Residual: x,
		Input:    h,
		Experts:  Reshape(ids, b, t, m.o.TopK),
		Weights:  Reshape(weights, b, t, m.o.TopK),
	}
}

// route is DeepseekV3TopkRouter and DeepseekV3MoE.route_tokens_to_experts
// on tokens h [N, H]: sigmoid (SoftmaxScores: softmax) scores of the f32
// router logits, or with V2 routeV2's; the choice
// is the scores plus the correction bias, limited to the topk_group
// groups whose two best choices sum highest (the others' choices set to
// 0, as transformers masks them, or to −∞ with MaskInf); the top k
// experts by choice, weighed by
// their unbiased scores, renormalized (norm_topk_prob) and scaled by
// routed_scaling_factor (by max(sum, NormMin) with NormMin, as ERNIE 4.5
// divides): nn.GroupRouter. Returns ids [N, K] int32 and weights [N, K]
// f32.
func (m *Model) route(p *lm.Params, h *Node) (ids, weights *Node) {
	o := m.o
	logits := nn.Linear(ConvertDType(h, dtypes.Float32), ConvertDType(p.Get("gate.weight"), dtypes.Float32), nil) // [N, E]
	if o.V2 {
		return m.routeV2(Softmax(logits, -1))
	}
	var scores *Node
	if o.SoftmaxScores {
		scores = Softmax(logits, -1)
	} else {
		scores = Sigmoid(logits)
	}
	r := nn.GroupRouter{Experts: o.Experts, TopK: o.TopK, Groups: o.Groups, TopKGroup: o.TopKGroup,
		NormTopK: o.NormTopK, NormMin: o.NormMin, MaskInf: o.MaskInf, Scale: o.RoutedScale}
	return r.Route(scores, p.Get(m.l.Bias))
}

// routeV2 is DeepseekV2Moe.route_tokens_to_experts on the softmax scores
// [N, E]: under group_limited_greedy the topk_group groups whose best
// expert scores highest stay open (the others' scores set to 0); the top
// k scores win, times routed_scaling_factor. Returns ids [N, K] int32 and
// weights [N, K] f32.
func (m *Model) routeV2(scores *Node) (ids, weights *Node) {
	o := m.o
	choice := scores
	if o.Groups > 1 && o.TopKGroup < o.Groups {
		n, per := scores.Shape().Dimensions[0], o.Experts/o.Groups
		groupScore := ReduceMax(Reshape(scores, n, o.Groups, per), -1) // [N, G]
		kept, _ := nn.TopKBy(groupScore, groupScore, o.TopKGroup)      // [N, TopKGroup] group ids
		hot := ReduceMax(OneHot(kept, o.Groups, dtypes.Float32), 1)    // [N, G]: 1 for a kept group
		choice = Mul(scores, Reshape(BroadcastToDims(InsertAxes(hot, -1), n, o.Groups, per), n, o.Experts))
	}
	ids, weights = nn.TopKBy(choice, scores, o.TopK)
	return ids, MulScalar(weights, o.RoutedScale)
}

// Mix is the attention half of layer i: x plus the MLA (GQA) of its
// input_layernorm, the post_attention_layernorm of that sum, and the
// attention's new cache.
func (m *Model) Mix(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (residual, h *Node, st []*Node) {
	if m.o.GQA {
		return m.Attend(i, w, x, state, step)
	}
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), m.o.Eps, false)
	c, index := m.latentState(state)
	h, c, index = m.attention(p.Scope("self_attn"), h, c, index, step)
	x = Add(x, h)
	return x, nn.RMSNorm(x, p.Get("post_attention_layernorm.weight"), m.o.Eps, false), heldState(c, index)
}

// LatentSelfAttention is the MLA (self_attn, scope p) on h, a layer's
// normed input, continued from its latent cache state (LayerState's, as
// held), returning the output after o_proj and the new state: for
// decoders that run the MLA in layers of their own (LongCat-Flash's two
// a layer).
func (m *Model) LatentSelfAttention(p *lm.Params, h *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	c, index := m.latentState(state)
	out, c, index := m.attention(p, h, c, index, step)
	return out, heldState(c, index)
}

// attention is DeepseekV3Attention with kv_b_proj absorbed (see the
// package comment): the latent and the shared rotated key are cached, the
// heads attend over them, and each head's output latent is expanded to
// its values before o_proj.
func (m *Model) attention(p *lm.Params, x *Node, c nn.Latent, index *Node, step *lm.Step) (*Node, nn.Latent, *Node) {
	s, o := m.Spec(), m.o
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	heads, dn, dr, dv, r := s.Heads, o.QKNope, o.QKRope, o.VHead, o.KVLoraRank
	var q, qa *Node
	if o.QLoraRank > 0 {
		qa = nn.RMSNorm(nn.Linear(x, p.Get("q_a_proj.weight"), nil), p.Get("q_a_layernorm.weight"), loraEps, false)
		q = nn.Linear(qa, p.Get("q_b_proj.weight"), nil)
	} else {
		q = nn.Linear(x, p.Get("q_proj.weight"), nil)
	}
	if s := o.QLoraScale; s != 0 && s != 1 {
		q = MulScalar(q, s)
	}
	q = nn.SplitHeads(q, heads) // [B, T, H, dn+dr]
	qNope := SliceAxis(q, 3, AxisRange(0, dn))
	qPe := SliceAxis(q, 3, AxisRange(dn, dn+dr))
	kv := nn.Linear(x, p.Get("kv_a_proj_with_mqa.weight"), nil) // [B, T, r+dr]
	latent := nn.RMSNorm(SliceAxis(kv, 2, AxisRange(0, r)), p.Get("kv_a_layernorm.weight"), loraEps, false)
	if s := o.KVLoraScale; s != 0 && s != 1 {
		latent = MulScalar(latent, s)
	}
	kPe := InsertAxes(SliceAxis(kv, 2, AxisRange(r, r+dr)), 2) // [B, T, 1, dr]
	if !o.NoPE {
		if o.Interleave {
			qPe, kPe = nn.PairsToHalves(qPe), nn.PairsToHalves(kPe)
		}
		cos, sin := o.Rope.CosSin(step, x.DType())
		qPe, kPe = nn.ApplyRope(qPe, cos, sin), nn.ApplyRope(kPe, cos, sin)
	}

	wkv := Reshape(ConvertDType(p.Get("kv_b_proj.weight"), x.DType()), heads, dn+dv, r)
	wk := SliceAxis(wkv, 1, AxisRange(0, dn))                                     // [H, dn, r]
	wv := SliceAxis(wkv, 1, AxisRange(dn, dn+dv))                                 // [H, dv, r]
	qLat := DotGeneral(qNope, []int{3}, []int{2}, wk, []int{1}, []int{0})         // [H, B, T, r]
	query := Concatenate([]*Node{TransposeAllDims(qLat, 1, 2, 0, 3), qPe}, 3)     // [B, T, H, r+dr]
	c = nn.WriteLatent(c, Concatenate([]*Node{latent, Squeeze(kPe, 2)}, 2), step) // [B, T, r+dr]
	bias := nn.AttentionBias(step, 0)
	var keep, sure *Node
	if o.IndexTopK > 0 {
		keep, sure, index = m.indexer(p.Scope("indexer"), x, qa, index, bias, step)
	}
	var out *Node // [B, T, H, r]: the latent values
	switch {
	case keep != nil && t <= o.SparseRows:
		out = nn.SparseLatentAttention(query, c, keep, sure, o.IndexTopK, o.Scale, r)
	case keep != nil:
		out = nn.LatentAttention(query, c, nn.KeepBias(keep), o.Scale, r)
	default:
		out = nn.LatentAttention(query, c, bias, o.Scale, r)
	}
	values := DotGeneral(out, []int{3}, []int{2}, wv, []int{2}, []int{0}) // [H, B, T, dv]
	values = Reshape(TransposeAllDims(values, 1, 2, 0, 3), b, t, heads*dv)
	return nn.Linear(values, p.Get("o_proj.weight"), nil), c, index
}

// indexer is DeepseekV32Indexer: its keys LayerNorm(wk x), rotated on
// their first qk_rope_head_dim dims (rotate-half, unlike the MLA's
// interleaved pairs; GLM-5's GlmMoeDsaIndexer turns pairs), go into its
// cache; once a query can see more than
// index_topk keys, its queries wq_b(qa) (rotated alike) and head weights
// weights_proj(x)·index_n_heads^-0.5 (float32) score them, and keep
// [B, T, S] holds each query's best index_topk of the keys bias lets it
// see, sure those above the k-th's band (nn.IndexerKeep; both nil while
// every visible key is among the best).
func (m *Model) indexer(p *lm.Params, x, qa, cache, bias *Node, step *lm.Step) (keep, sure, _ *Node) {
	o := m.o
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	cos, sin := o.Rope.CosSin(step, x.DType())
	rotate := func(v *Node) *Node { // [B, T, H, IndexDim]
		pe := SliceAxis(v, 3, AxisRange(0, o.QKRope))
		if o.IndexInterleave {
			pe = nn.PairsToHalves(pe)
		}
		rot := nn.ApplyRope(pe, cos, sin)
		return Concatenate([]*Node{rot, SliceAxis(v, 3, AxisRange(o.QKRope, o.IndexDim))}, 3)
	}
	k := nn.LayerNorm(nn.Linear(x, p.Get("wk.weight"), nil), p.Get("k_norm.weight"), p.Get("k_norm.bias"), indexerEps)
	cache = nn.WriteIndexerKeys(cache, Squeeze(rotate(InsertAxes(k, 2)), 2), step)
	if step.Visible() <= o.IndexTopK {
		return nil, nil, cache // every visible key is among the best
	}
	q := rotate(Reshape(nn.Linear(qa, p.Get("wq_b.weight"), nil), b, t, o.IndexHeads, o.IndexDim))
	f32 := dtypes.Float32
	w := MulScalar(nn.Linear(ConvertDType(x, f32), p.Get("weights_proj.weight"), nil), 1/math.Sqrt(float64(o.IndexHeads))) // [B, T, IndexHeads]
	keep, sure = nn.IndexerKeep(q, cache, w, bias, o.IndexTopK)
	return keep, sure, cache
}

// sparseRows is Options.SparseRows's default: a decode step, or a
// speculative step of up to 16 tokens, gathers; a prefill window masks
// (T·index_topk rows of the latent would outgrow the cache itself).
const sparseRows = 16

// indexerEps is the epsilon of the indexer's k_norm, a LayerNorm
// DeepseekV32Indexer builds with 1e-6.
const indexerEps = 1e-6

// loraEps is the epsilon of q_a_layernorm and kv_a_layernorm:
// DeepseekV3Attention builds them without rms_norm_eps, so they keep
// DeepseekV3RMSNorm's default.
const loraEps = 1e-6

var (
	_ lm.Routed  = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)
