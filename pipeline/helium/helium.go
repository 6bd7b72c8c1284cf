// Package helium implements Kyutai's Helium (HeliumForCausalLM:
// helium-1-preview-2b, helium-1-2b), following transformers'
// models/helium/modular_helium.py.
//
// Helium is Llama's decoder (pipeline/llama) with the rotary on adjacent
// pairs of each head's dims (its rotate_half is stack(-x[1::2], x[0::2])
// with repeat-interleaved cos and sin: llama.Options.RopePairs) and
// RMSNorms whose weight scales in float32 before the cast back
// (HeliumRMSNorm: NormF32). attention_bias puts biases on q, k and v but
// not on o_proj, which maps hidden_size to hidden_size: heads × head_dim
// must be hidden_size.
package helium

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("HeliumForCausalLM", New)
}

// Defaults are HeliumConfig's (helium-1-preview-2b's sizes): 20 KV heads
// and head_dim 128 when absent, rms_norm_eps 1e-8, rope_theta 100000,
// bos 1 and eos 2.
var Defaults = llama.Defaults{
	VocabSize: 48000, Hidden: 2560, Intermediate: 7040, Layers: 24, Heads: 20,
	MaxPositions: 4096, Eps: 1e-8, RopeTheta: 100000, Tie: false, Act: "silu",
	KVHeads: 20, HeadDim: 128, BOS: []int{1}, EOS: []int{2},
}

// Resolve reads a HeliumForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c llama.Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	s := &o.Spec
	for _, k := range s.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; Helium's layers all attend in full", where, k)
		}
	}
	if s.Heads*s.HeadDim != s.Hidden {
		return llama.Options{}, fmt.Errorf("%s: num_attention_heads %d × head_dim %d must be hidden_size %d (Helium's o_proj maps hidden_size to hidden_size)", where, s.Heads, s.HeadDim, s.Hidden)
	}
	if o.Rope.RotaryDim != s.HeadDim {
		return llama.Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; Helium rotates whole heads", where, o.Rope.RotaryDim, s.HeadDim)
	}
	o.OBias = false // HeliumAttention's o_proj has none
	o.RopePairs, o.NormF32 = true, true
	return o, nil
}

// New builds a HeliumForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
