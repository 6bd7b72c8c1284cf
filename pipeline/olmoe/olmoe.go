// Package olmoe implements OlmoeForCausalLM, following transformers'
// models/olmoe/modeling_olmoe.py: AllenAI's OLMoE ("OLMoE: Open
// Mixture-of-Experts Language Models", Muennighoff et al., 2024,
// arXiv:2409.02060; OLMoE-1B-7B, 7B parameters of which 1.3B active).
//
// Each layer is Llama's attention with q_norm and k_norm RMSNorms over the
// whole query and key projections (every head at once, before the split
// into heads, as MiniMax-M2's), optionally clamped to ±clip_qkv, followed
// by a sparse block on every layer: the router's softmax picks the top
// num_experts_per_tok of num_experts (renormalized only with
// norm_topk_prob, which OLMoE-1B-7B leaves off), each expert a SwiGLU of
// intermediate_size under Qwen's names. That is Qwen3-MoE's decoder
// (pipeline/qwen3moe) with OLMoE's attention norms, which this package
// builds. FlexOlmoForCausalLM (flexolmo.go) puts the same attention and
// sparse block in OLMo 2's layer.
package olmoe

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("OlmoeForCausalLM", New)
}

// Config is an OlmoeForCausalLM config.json: the Llama fields plus the
// experts' and clip_qkv.
type Config struct {
	llama.Config
	NumExperts       *int     `json:"num_experts"`
	NumExpertsPerTok *int     `json:"num_experts_per_tok"`
	NormTopKProb     *bool    `json:"norm_topk_prob"`
	ClipQKV          *float64 `json:"clip_qkv"`
}

// Defaults are OlmoeConfig's (OLMoE-1B-7B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50304, Hidden: 2048, Intermediate: 2048, Layers: 16, Heads: 16,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
}

// OlmoeConfig's expert defaults.
const (
	defaultExperts = 64
	defaultTopK    = 8
)

// Resolve reads an OLMoE config.json into the options of qwen3moe's
// decoder.
func Resolve(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return qwen3moe.Options{}, fmt.Errorf("%s: layer_types names %q layers; OLMoE's layers all attend in full", where, k)
		}
	}
	base.OBias, base.MLPBias = base.QKVBias, false // attention_bias covers q, k, v and o; the experts have none
	base.QKNorm, base.QKNormAcross = true, true
	if c.ClipQKV != nil {
		if *c.ClipQKV <= 0 {
			return qwen3moe.Options{}, fmt.Errorf("%s: clip_qkv must be positive or null, got %g", where, *c.ClipQKV)
		}
		base.ClipQKV = *c.ClipQKV
	}
	o := qwen3moe.Options{
		Options:         base,
		Experts:         lm.Or(c.NumExperts, defaultExperts),
		TopK:            lm.Or(c.NumExpertsPerTok, defaultTopK),
		MoEIntermediate: base.Spec.Intermediate,
		NormTopK:        lm.Or(c.NormTopKProb, false),
		Sparse:          make([]bool, base.Spec.Layers),
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts %d must be positive and num_experts_per_tok %d in [1, num_experts]", where, o.Experts, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, base.Spec.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// New builds the model from its config.json: qwen3moe's decoder in Qwen's
// layout.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return qwen3moe.NewModel(o), nil
}
