// Package ernie implements Ernie4_5_MoeForCausalLM and (dense.go) the
// dense Ernie4_5ForCausalLM. The MoE model follows
// transformers' models/ernie4_5_moe (Baidu's ERNIE 4.5 MoE:
// ERNIE-4.5-21B-A3B, 21B parameters of which 3B active, and
// ERNIE-4.5-300B-A47B; "ERNIE 4.5 Technical Report", Baidu, 2025).
//
// Each layer is Llama's grouped-query attention with the rotary embedding
// on adjacent pairs of each head's dims (transformers' Ernie 4.5
// apply_rotary_pos_emb rotates (x[2j], x[2j+1]) with repeat-interleaved
// cos and sin), followed by a dense SwiGLU MLP of intermediate_size or a
// sparse block: a layer i is sparse when (i+1) is a multiple of
// moe_layer_interval and moe_layer_start_index ≤ i ≤ moe_layer_end_index
// (-1: the last layer). The sparse block's router takes the softmax of
// its f32 logits; the scores plus moe_statics.e_score_correction_bias
// (stored [1, experts]) choose the moe_k experts, whose unbiased scores,
// divided by max(their sum, moe_norm_min), weigh them; each expert is a
// SwiGLU of moe_intermediate_size under Qwen's names, and
// moe_num_shared_experts always-on experts (one SwiGLU of
// moe_intermediate_size × n) join. That router is DeepSeek-V3's with one
// group, softmax scores and no routed scale, so the decoder is
// pipeline/deepseek's (its GQA attention, llama.Options.RopePairs).
//
// The multi-token-prediction tensors the releases ship (mtp_*) are
// skipped, as transformers skips them.
//
// ERNIE 4.5 VL (vl.go) runs as its text model: this decoder over the
// text half of each modality-isolated sparse block.
package ernie

import (
	"fmt"
	"regexp"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("Ernie4_5_MoeForCausalLM", New)
}

// Config is an Ernie4_5_MoeForCausalLM config.json: the Llama fields plus
// use_bias and the moe_* fields (num_experts and num_experts_per_tok are
// Ernie4_5_MoeConfig's aliases of moe_num_experts and moe_k).
type Config struct {
	llama.Config
	UseBias             bool     `json:"use_bias"`
	MoENumExperts       *int     `json:"moe_num_experts"`
	NumExperts          *int     `json:"num_experts"`
	MoEK                *int     `json:"moe_k"`
	NumExpertsPerTok    *int     `json:"num_experts_per_tok"`
	MoEIntermediateSize *int     `json:"moe_intermediate_size"`
	MoENumSharedExperts *int     `json:"moe_num_shared_experts"`
	MoELayerStartIndex  *int     `json:"moe_layer_start_index"`
	MoELayerEndIndex    *int     `json:"moe_layer_end_index"`
	MoELayerInterval    *int     `json:"moe_layer_interval"`
	MoENormMin          *float64 `json:"moe_norm_min"`
}

// Defaults are Ernie4_5_MoeConfig's (ERNIE-4.5-21B-A3B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 103424, Hidden: 2560, Intermediate: 12288, Layers: 28, Heads: 20,
	MaxPositions: 131072, Eps: 1e-5, RopeTheta: 500000, Tie: true, Act: "silu",
}

// Ernie4_5_MoeConfig's other defaults.
const (
	defaultKVHeads         = 4
	defaultExperts         = 64
	defaultTopK            = 6
	defaultMoEIntermediate = 1536
	defaultShared          = 2
	defaultStart           = 1
	defaultInterval        = 1
	defaultNormMin         = 1e-12
	defaultBOS             = 1
	defaultEOS             = 2
)

// Layout is the releases' sparse block: mlp, the correction bias in
// moe_statics as one row, Qwen's expert names.
var Layout = deepseek.Layout{Block: "mlp", Bias: "moe_statics.e_score_correction_bias", BiasRows: true, Experts: lm.QwenExperts}

// Resolve reads an ERNIE 4.5 MoE config.json into pipeline/deepseek's
// options.
func Resolve(cfg *config.File) (deepseek.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return deepseek.Options{}, err
	}
	if c.UseBias { // attention_bias and mlp_bias are not read: use_bias builds every projection
		return deepseek.Options{}, errs.Unsupportedf("%s: use_bias is true; ERNIE 4.5's releases have no biases", where)
	}
	c.AttentionBias, c.MLPBias = false, false
	if c.NumKeyValueHeads == nil {
		kv := defaultKVHeads
		c.NumKeyValueHeads = &kv
	}
	if len(c.BOSTokenID) == 0 && !cfg.Has("bos_token_id") {
		c.BOSTokenID = config.IDList{defaultBOS}
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return deepseek.Options{}, err
	}
	if len(c.EOSTokenID) == 0 && !cfg.Has("eos_token_id") {
		base.Spec.EOS = []int{defaultEOS}
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return deepseek.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; ERNIE 4.5's layers all attend in full", where, k)
		}
	}
	if base.Rope.RotaryDim != base.Spec.HeadDim {
		return deepseek.Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; ERNIE 4.5 rotates whole heads", where, base.Rope.RotaryDim, base.Spec.HeadDim)
	}
	// transformers' Ernie 4.5 apply_rotary_pos_emb turns in float32 by
	// the tables as rounded to the dtype, and rounds once.
	base.RopePairs, base.RopeF32 = true, true
	layers := base.Spec.Layers
	o := deepseek.Options{
		Options:         base,
		GQA:             true,
		Experts:         lm.Or(c.MoENumExperts, lm.Or(c.NumExperts, defaultExperts)),
		TopK:            lm.Or(c.MoEK, lm.Or(c.NumExpertsPerTok, defaultTopK)),
		MoEIntermediate: lm.Or(c.MoEIntermediateSize, defaultMoEIntermediate),
		Shared:          lm.Or(c.MoENumSharedExperts, defaultShared),
		Groups:          1,
		TopKGroup:       1,
		NormTopK:        true,
		NormMin:         lm.Or(c.MoENormMin, defaultNormMin),
		RoutedScale:     1,
		SoftmaxScores:   true,
	}
	switch {
	case o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts:
		return deepseek.Options{}, fmt.Errorf("%s: moe_num_experts %d must be positive and moe_k %d in [1, moe_num_experts]", where, o.Experts, o.TopK)
	case o.MoEIntermediate <= 0:
		return deepseek.Options{}, fmt.Errorf("%s: moe_intermediate_size must be positive, got %d", where, o.MoEIntermediate)
	case o.Shared < 0:
		return deepseek.Options{}, fmt.Errorf("%s: moe_num_shared_experts must not be negative, got %d", where, o.Shared)
	case !(o.NormMin >= 0):
		return deepseek.Options{}, fmt.Errorf("%s: moe_norm_min must not be negative, got %g", where, o.NormMin)
	}
	if err := lm.CheckExperts(where, "moe_num_experts", o.Experts, layers); err != nil {
		return deepseek.Options{}, err
	}
	start, end, every := lm.Or(c.MoELayerStartIndex, defaultStart), lm.Or(c.MoELayerEndIndex, -1), lm.Or(c.MoELayerInterval, defaultInterval)
	if end == -1 {
		end = layers - 1 // Ernie4_5_MoeConfig's
	}
	if start < 0 || every < 1 || end < -1 {
		return deepseek.Options{}, fmt.Errorf("%s: moe_layer_start_index %d must not be negative, moe_layer_interval %d must be positive and moe_layer_end_index %d at least -1", where, start, every, end)
	}
	o.Sparse = make([]bool, layers)
	for i := range o.Sparse {
		o.Sparse[i] = (i+1)%every == 0 && i >= start && i <= end
	}
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{deepseek.NewModelIn(o, Layout)}, nil
}

// Model is an ERNIE 4.5 MoE decoder: pipeline/deepseek's in ERNIE's
// layout. It implements lm.Routed and lm.Skipper.
type Model struct{ *deepseek.Model }

// mtpTensor matches the multi-token-prediction tensors (model.mtp_block,
// mtp_emb_norm, mtp_hidden_norm, mtp_linear_proj), which transformers
// does not load.
var mtpTensor = regexp.MustCompile(`(^|\.)mtp_`)

// SkipWeight implements lm.Skipper: the multi-token-prediction tensors.
func (m *Model) SkipWeight(name string) (string, bool) {
	if mtpTensor.MatchString(name) {
		return "multi-token-prediction tensors (num_nextn_predict_layers): not used", true
	}
	return m.Model.SkipWeight(name)
}

// MTPLayers implements lm.MultiToken: none that tputool reads (ERNIE's
// mtp_* tensors are not DeepSeek-V3's layer).
func (m *Model) MTPLayers() int { return 0 }

// WithMTP implements lm.MultiToken: refused.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	return nil, errs.Unsupportedf("ERNIE 4.5's multi-token-prediction tensors (mtp_*) are not read")
}

var (
	_ lm.Routed     = (*Model)(nil)
	_ lm.Skipper    = (*Model)(nil)
	_ lm.MultiToken = (*Model)(nil)
)
