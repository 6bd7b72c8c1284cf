package qwen35

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// TextConfig is the text model's config (transformers' Qwen3_5TextConfig):
// config.json's text_config for Qwen3_5ForConditionalGeneration, or the
// whole config.json for Qwen3_5ForCausalLM. Optional fields are pointers so
// that resolve can tell "absent" (the transformers default applies) from a
// value.
type TextConfig struct {
	ModelType             string        `json:"model_type"`
	VocabSize             *int          `json:"vocab_size"`
	HiddenSize            *int          `json:"hidden_size"`
	IntermediateSize      *int          `json:"intermediate_size"`
	NumHiddenLayers       *int          `json:"num_hidden_layers"`
	NumAttentionHeads     *int          `json:"num_attention_heads"`
	NumKeyValueHeads      *int          `json:"num_key_value_heads"`
	HeadDim               *int          `json:"head_dim"`
	HiddenAct             string        `json:"hidden_act"`
	MaxPositionEmbeddings *int          `json:"max_position_embeddings"`
	RMSNormEps            *float64      `json:"rms_norm_eps"`
	AttentionBias         bool          `json:"attention_bias"`
	TieWordEmbeddings     *bool         `json:"tie_word_embeddings"`
	LayerTypes            []string      `json:"layer_types"`
	FullAttentionInterval *int          `json:"full_attention_interval"`
	LinearConvKernelDim   *int          `json:"linear_conv_kernel_dim"`
	LinearKeyHeadDim      *int          `json:"linear_key_head_dim"`
	LinearValueHeadDim    *int          `json:"linear_value_head_dim"`
	LinearNumKeyHeads     *int          `json:"linear_num_key_heads"`
	LinearNumValueHeads   *int          `json:"linear_num_value_heads"`
	BOSTokenID            config.IDList `json:"bos_token_id"`
	EOSTokenID            config.IDList `json:"eos_token_id"`
	// The mixture-of-experts variant (Qwen3_5MoeTextConfig, model_type
	// qwen3_5_moe_text): every layer's MLP is a sparse block of num_experts
	// experts of moe_intermediate_size, num_experts_per_tok of them per
	// token, plus a shared expert of shared_expert_intermediate_size.
	NumExperts                   *int `json:"num_experts"`
	NumExpertsPerTok             *int `json:"num_experts_per_tok"`
	MoEIntermediateSize          *int `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize *int `json:"shared_expert_intermediate_size"`
	// MTPNumHiddenLayers is the decoder layers of the
	// multi-token-prediction head (mtp.*; 1 in every release, absent in
	// transformers' config class, which does not read the head).
	MTPNumHiddenLayers *int `json:"mtp_num_hidden_layers"`

	// Qwen3-Next's (Qwen3NextConfig) besides: which layers are sparse
	// (decoder_sparse_step, mlp_only_layers: the others have a dense MLP
	// of intermediate_size), whether the router renormalises its top k
	// (norm_topk_prob), and its MTP head's layers as vLLM reads them
	// (num_nextn_predict_layers; mtp_num_hidden_layers or 1 when absent).
	DecoderSparseStep    *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers        []int `json:"mlp_only_layers"`
	NormTopKProb         *bool `json:"norm_topk_prob"`
	NumNextNPredictLayer *int  `json:"num_nextn_predict_layers"`
}

// Defaults are Qwen3_5TextConfig's defaults (the Qwen3.5-9B sizes).
var Defaults = struct {
	VocabSize, Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, MaxPositions int
	ConvKernel, KDim, VDim, KHeads, VHeads, FullAttentionInterval                  int
	Eps, RopeTheta, PartialRotaryFactor                                            float64
}{
	VocabSize: 248320, Hidden: 4096, Intermediate: 12288, Layers: 32, Heads: 16, KVHeads: 4, HeadDim: 256,
	MaxPositions: 32768, ConvKernel: 4, KDim: 128, VDim: 128, KHeads: 16, VHeads: 32, FullAttentionInterval: 4,
	Eps: 1e-6, RopeTheta: 10000, PartialRotaryFactor: 0.25,
}

// MoEDefaults are Qwen3_5MoeTextConfig's defaults where they differ from
// Qwen3_5TextConfig's (it derives from Qwen3NextConfig, with the
// Qwen3.5-35B-A3B sizes).
var MoEDefaults = struct {
	Hidden, Layers, KVHeads, Experts, TopK, MoEIntermediate, SharedIntermediate int
}{Hidden: 2048, Layers: 40, KVHeads: 2, Experts: 256, TopK: 8, MoEIntermediate: 512, SharedIntermediate: 512}

// NextDefaults are Qwen3NextConfig's defaults where they differ from
// Qwen3_5TextConfig's (the Qwen3-Next-80B-A3B sizes).
var NextDefaults = struct {
	VocabSize, Hidden, Intermediate, Layers, KVHeads, Experts, TopK, MoEIntermediate, SharedIntermediate int
}{VocabSize: 151936, Hidden: 2048, Intermediate: 5632, Layers: 48, KVHeads: 2, Experts: 512, TopK: 10, MoEIntermediate: 512, SharedIntermediate: 512}

// Options are the resolved hyperparameters of a Qwen3.5 text model.
type Options struct {
	Spec lm.Spec
	// Prefix is the text model's tensor prefix: "model.language_model."
	// for Qwen3_5ForConditionalGeneration, "model." for Qwen3_5ForCausalLM.
	Prefix string
	Eps    float64
	// QKVBias and OBias mirror attention_bias (false in every released
	// checkpoint).
	AttentionBias bool
	Rope          *nn.Rope
	DeltaNet      nn.DeltaNetDims
	// ChunkSize is the chunk length of the chunked delta rule in prefill
	// (transformers and fla use 64).
	ChunkSize int
	// Experts > 0 makes it Qwen3.5-MoE: every layer's MLP is the sparse
	// block, TopK of Experts experts of MoEIntermediate (softmax router,
	// renormalised unless KeepTopK) plus a shared expert of
	// SharedIntermediate scaled by sigmoid(shared_expert_gate).
	Experts, TopK, MoEIntermediate, SharedIntermediate int
	// Dense[i] (Qwen3-Next: decoder_sparse_step, mlp_only_layers) gives
	// layer i of a model with experts a dense MLP of DenseIntermediate
	// instead of the sparse block; nil, none does. An MTP head's layer
	// is sparse as layer 0 is (vLLM numbers it 0).
	Dense             []bool
	DenseIntermediate int
	// KeepTopK: the router's top-k probabilities are not renormalised
	// (Qwen3-Next's norm_topk_prob false).
	KeepTopK bool
	// Fused is Qwen3-Next's layout of the DeltaNet projections:
	// in_proj_qkvz and in_proj_ba, grouped by key head
	// (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering), where
	// Qwen3.5 has in_proj_qkv, in_proj_z, in_proj_b and in_proj_a.
	Fused bool
	// MTPLayers is mtp_num_hidden_layers (Qwen3-Next:
	// num_nextn_predict_layers as vLLM reads it, else
	// mtp_num_hidden_layers as mlx-lm does, else 1): the decoder layers of
	// the checkpoint's multi-token-prediction head (0: none).
	MTPLayers int
}

// Resolve reads a Qwen3.5 config.json (nested or flat) into Options.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	text := cfg
	prefix := "model."
	if cfg.Text != nil {
		text = cfg.Text
		prefix = "model.language_model."
		where += " text_config"
	} else if strings.HasSuffix(cfg.Architecture(), "ForConditionalGeneration") {
		return Options{}, fmt.Errorf("%s: %s needs a text_config object", where, cfg.Architecture())
	}
	var c TextConfig
	if err := text.Decode(&c); err != nil {
		return Options{}, err
	}
	d := Defaults
	moe := strings.HasPrefix(cfg.Architecture(), "Qwen3_5Moe") || c.ModelType == "qwen3_5_moe_text"
	next := cfg.Architecture() == "Qwen3NextForCausalLM" || c.ModelType == "qwen3_next"
	if next {
		nd := NextDefaults
		d.VocabSize, d.Hidden, d.Intermediate, d.Layers, d.KVHeads = nd.VocabSize, nd.Hidden, nd.Intermediate, nd.Layers, nd.KVHeads
		moe = lm.Or(c.NumExperts, nd.Experts) > 0
	} else if !moe && c.NumExperts != nil && *c.NumExperts > 0 {
		moeArch := strings.Replace(cfg.Architecture(), "Qwen3_5", "Qwen3_5Moe", 1)
		return Options{}, fmt.Errorf("%s: num_experts %d in a %s config: the mixture-of-experts variant is %s (model_type qwen3_5_moe_text)",
			where, *c.NumExperts, cfg.Architecture(), moeArch)
	}
	if moe && !next {
		md := MoEDefaults
		d.Hidden, d.Layers, d.KVHeads = md.Hidden, md.Layers, md.KVHeads
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, d.VocabSize),
		Hidden:       lm.Or(c.HiddenSize, d.Hidden),
		Intermediate: lm.Or(c.IntermediateSize, d.Intermediate),
		Layers:       lm.Or(c.NumHiddenLayers, d.Layers),
		Heads:        lm.Or(c.NumAttentionHeads, d.Heads),
		KVHeads:      lm.Or(c.NumKeyValueHeads, d.KVHeads),
		HeadDim:      lm.Or(c.HeadDim, d.HeadDim),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, d.MaxPositions),
		EOS:          c.EOSTokenID,
		BOS:          -1,
	}
	if len(s.EOS) == 0 {
		s.EOS = cfg.ModelEOS()
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	}
	dn := nn.DeltaNetDims{
		KHeads: lm.Or(c.LinearNumKeyHeads, d.KHeads), VHeads: lm.Or(c.LinearNumValueHeads, d.VHeads),
		KDim: lm.Or(c.LinearKeyHeadDim, d.KDim), VDim: lm.Or(c.LinearValueHeadDim, d.VDim),
		ConvKernel: lm.Or(c.LinearConvKernelDim, d.ConvKernel),
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	if err := dn.Validate(where); err != nil {
		return Options{}, err
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return Options{}, errs.Unsupportedf("%s: hidden_act %q is not supported (Qwen3.5 uses silu)", where, c.HiddenAct)
	}
	// The wrapper's tie_word_embeddings decides for the multimodal class.
	if cfg.Text != nil {
		var top struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&top); err != nil {
			return Options{}, err
		}
		if top.Tie != nil {
			s.TieEmbeddings = *top.Tie
		} else if c.TieWordEmbeddings != nil {
			s.TieEmbeddings = *c.TieWordEmbeddings
		}
	} else if c.TieWordEmbeddings != nil {
		s.TieEmbeddings = *c.TieWordEmbeddings
	}
	// layer_types, or every full_attention_interval-th layer full.
	var err error
	if s.LayerKinds, err = lm.LayerTypes(where, c.LayerTypes, s.Layers, nn.KindLinearAttention, lm.KindFull); err != nil {
		return Options{}, err
	}
	if s.LayerKinds == nil {
		interval := lm.Or(c.FullAttentionInterval, d.FullAttentionInterval)
		if interval <= 0 {
			return Options{}, fmt.Errorf("%s: full_attention_interval must be positive, got %d", where, interval)
		}
		s.LayerKinds = make([]string, s.Layers)
		for i := range s.LayerKinds {
			s.LayerKinds[i] = nn.KindLinearAttention
			if (i+1)%interval == 0 {
				s.LayerKinds[i] = lm.KindFull
			}
		}
	}
	o := Options{Spec: s, Prefix: prefix, Eps: lm.Or(c.RMSNormEps, d.Eps), AttentionBias: c.AttentionBias, DeltaNet: dn, ChunkSize: 64,
		MTPLayers: lm.Or(c.MTPNumHiddenLayers, 0), Fused: next}
	mtpField := "mtp_num_hidden_layers"
	if next && c.NumNextNPredictLayer != nil {
		o.MTPLayers, mtpField = *c.NumNextNPredictLayer, "num_nextn_predict_layers"
	} else if next {
		o.MTPLayers = lm.Or(c.MTPNumHiddenLayers, 1)
	}
	if o.MTPLayers < 0 {
		return Options{}, fmt.Errorf("%s: %s %d must not be negative", where, mtpField, o.MTPLayers)
	}
	if moe {
		md := MoEDefaults
		if next {
			nd := NextDefaults
			md.Experts, md.TopK, md.MoEIntermediate, md.SharedIntermediate = nd.Experts, nd.TopK, nd.MoEIntermediate, nd.SharedIntermediate
		}
		o.Experts = lm.Or(c.NumExperts, md.Experts)
		o.TopK = lm.Or(c.NumExpertsPerTok, md.TopK)
		o.MoEIntermediate = lm.Or(c.MoEIntermediateSize, md.MoEIntermediate)
		o.SharedIntermediate = lm.Or(c.SharedExpertIntermediateSize, md.SharedIntermediate)
		if o.Experts <= 0 || o.MoEIntermediate <= 0 || o.SharedIntermediate < 0 {
			return Options{}, fmt.Errorf("%s: num_experts %d and moe_intermediate_size %d must be positive, shared_expert_intermediate_size %d not negative",
				where, o.Experts, o.MoEIntermediate, o.SharedIntermediate)
		}
		if o.TopK <= 0 || o.TopK > o.Experts {
			return Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_experts %d]", where, o.TopK, o.Experts)
		}
		if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
			return Options{}, err
		}
		if next {
			if o.Dense, err = denseLayers(where, c, s.Layers); err != nil {
				return Options{}, err
			}
			o.DenseIntermediate = s.Intermediate
			o.KeepTopK = c.NormTopKProb != nil && !*c.NormTopKProb
		}
		// No dense MLP: the experts' width is what --tp checks (with a
		// dense layer, that layer's width; the shard plan checks every
		// weight it splits, the experts' too).
		if !slices.Contains(o.Dense, true) {
			o.Spec.Intermediate = o.MoEIntermediate
		}
	}
	// Qwen3_5TextConfig defaults partial_rotary_factor to 0.25 when neither
	// the config nor its rope_parameters set it.
	o.Rope, err = nn.ConfigRope(nn.DefaultPartialRotary(text.Raw, d.PartialRotaryFactor), d.RopeTheta, s.HeadDim, s.MaxPositions)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	return o, nil
}

// denseLayers reads Qwen3-Next's decoder_sparse_step and mlp_only_layers:
// layer i is sparse where i is not in mlp_only_layers and i+1 is a
// multiple of the step (Qwen3NextDecoderLayer); nil when every layer is.
func denseLayers(where string, c TextConfig, layers int) ([]bool, error) {
	step := lm.Or(c.DecoderSparseStep, 1)
	if step <= 0 {
		return nil, fmt.Errorf("%s: decoder_sparse_step must be positive, got %d", where, step)
	}
	sparse, err := lm.SparseLayers(where, step, c.MLPOnlyLayers, layers)
	if err != nil || !slices.Contains(sparse, false) {
		return nil, err
	}
	dense := make([]bool, layers)
	for i, s := range sparse {
		dense[i] = !s
	}
	return dense, nil
}
