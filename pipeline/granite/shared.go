package granite

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// GraniteMoeSharedForCausalLM (IBM's GraniteMoe with shared experts:
// ibm-research/moe-7b-1b-active-shared-experts), following transformers'
// models/granitemoeshared: GraniteMoe's layer (Granite's attention with
// the rotary, the four multipliers, block_sparse_moe) with shared_mlp,
// GraniteMoeHybrid's unrouted SwiGLU of shared_intermediate_size, beside
// the experts; their sum times residual_multiplier joins the residual.
// shared_intermediate_size 0 (GraniteMoeSharedConfig's default) builds
// no shared_mlp: GraniteMoe's layer. It runs on HybridModel, every layer
// an attention layer.

func init() {
	lm.Register("GraniteMoeSharedForCausalLM", NewShared)
}

// ResolveShared reads a GraniteMoeSharedForCausalLM config.json into
// HybridModel's options: every layer attention with the rotary (the
// class hard-codes position_embedding_type "rope"), no Mamba-2 mixer.
func ResolveShared(cfg *config.File) (HybridOptions, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		Config
		SharedIntermediateSize *int `json:"shared_intermediate_size"`
	}
	if err := cfg.Decode(&c); err != nil {
		return HybridOptions{}, err
	}
	o, err := c.Config.Config.Resolve(cfg, Defaults)
	if err != nil {
		return HybridOptions{}, err
	}
	for _, k := range o.Spec.LayerKinds {
		if k != lm.KindFull {
			return HybridOptions{}, errs.Unsupportedf("%s: layer_types names %q layers; GraniteMoeShared's layers all attend in full", where, k)
		}
	}
	if err := c.multipliers(where, &o); err != nil {
		return HybridOptions{}, err
	}
	if c.MLPBias {
		return HybridOptions{}, errs.Unsupportedf("%s: mlp_bias is true; GraniteMoeShared's experts and shared MLP have no biases", where)
	}
	h := HybridOptions{Options: o, Shared: lm.Or(c.SharedIntermediateSize, 0),
		Experts: lm.Or(c.NumLocalExperts, defaultExperts), TopK: lm.Or(c.NumExpertsPerTok, defaultTopK)}
	switch {
	case h.Shared < 0:
		return HybridOptions{}, fmt.Errorf("%s: shared_intermediate_size must not be negative, got %d", where, h.Shared)
	case h.Experts <= 0 || h.TopK <= 0 || h.TopK > h.Experts:
		return HybridOptions{}, fmt.Errorf("%s: num_local_experts %d must be positive and num_experts_per_tok %d in [1, num_local_experts]", where, h.Experts, h.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", h.Experts, o.Spec.Layers); err != nil {
		return HybridOptions{}, err
	}
	return h, nil
}

// NewShared builds a GraniteMoeSharedForCausalLM from its config.json.
func NewShared(cfg *config.File) (lm.Model, error) {
	o, err := ResolveShared(cfg)
	if err != nil {
		return nil, err
	}
	return NewHybridModel(o), nil
}
