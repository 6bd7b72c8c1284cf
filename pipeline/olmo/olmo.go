// Package olmo implements AI2's first OLMo (OlmoForCausalLM: OLMo-1B-hf,
// OLMo-7B-hf, OLMo-7B-0424-hf, OLMo-1B-0724-hf, and their Instruct and
// SFT builds), following transformers' models/olmo/modular_olmo.py.
//
// OLMo is Llama's decoder (pipeline/llama) with LayerNorms that have
// neither weight nor bias (OlmoLayerNorm, eps 1e-5 whatever the config
// says; llama.Options.NormNoParams), in the same places as Llama's
// RMSNorms, and the query, key and value projections clamped to
// ±clip_qkv when the config sets it (llama.Options.ClipQKV). OLMo 2 is
// pipeline/olmo2.
package olmo

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("OlmoForCausalLM", New)
}

// Defaults are OlmoConfig's (OLMo-7B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50304, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	EOS: []int{50279},
}

// Resolve reads an OlmoForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		ClipQKV *float64 `json:"clip_qkv"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	where := lm.ConfigName(cfg)
	for _, k := range o.Spec.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; OLMo's layers all attend in full", where, k)
		}
	}
	if o.Rope.RotaryDim != o.Spec.HeadDim {
		return llama.Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; OLMo rotates whole heads", where, o.Rope.RotaryDim, o.Spec.HeadDim)
	}
	o.NormNoParams, o.Eps, o.MLPBias = true, 1e-5, false
	if c.ClipQKV != nil {
		if *c.ClipQKV <= 0 {
			return llama.Options{}, fmt.Errorf("%s: clip_qkv must be positive (or null), got %g", where, *c.ClipQKV)
		}
		o.ClipQKV = *c.ClipQKV
	}
	return o, nil
}

// New builds an OlmoForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
