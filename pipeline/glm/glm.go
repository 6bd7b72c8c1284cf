// Package glm implements Zhipu AI's dense GLM-4 decoders, following
// transformers' models/glm (GlmForCausalLM: glm-4-9b-hf, glm-4-9b-chat-hf
// and their 1M-context builds) and models/glm4 (Glm4ForCausalLM:
// GLM-4-9B-0414, GLM-4-32B-0414, GLM-Z1-9B and -32B, GLM-Z1-Rumination).
//
// GLM is Llama's decoder (pipeline/llama) with:
//   - biases on the query, key and value projections (attention_bias,
//     true by default), none on the output;
//   - a rotary over the first half of each head (partial_rotary_factor,
//     0.5 by default) that turns adjacent pairs of dims, not halves
//     (transformers' GLM apply_rotary_pos_emb repeats each frequency
//     twice and rotates interleaved pairs): llama.Options.RopePairs;
//   - the MLP's gate and up projections in one matrix,
//     mlp.gate_up_proj [2·intermediate, hidden], gate first (Phi-3's MLP):
//     llama.Options.FusedGateUp.
//
// GLM-4-0414 (Glm4ForCausalLM) norms each sublayer's output too:
// input_layernorm before the attention and post_self_attn_layernorm after
// it, post_attention_layernorm before the MLP and post_mlp_layernorm
// after it (Glm4DecoderLayer).
package glm

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// The architectures this package registers.
const (
	Glm  = "GlmForCausalLM"
	Glm4 = "Glm4ForCausalLM"
)

func init() {
	lm.Register(Glm, New)
	lm.Register(Glm4, New)
}

// Defaults are GlmConfig's and Glm4Config's (the same).
var Defaults = llama.Defaults{
	VocabSize: 151552, Hidden: 4096, Intermediate: 13696, Layers: 40, Heads: 32,
	MaxPositions: 131072, Eps: 1.5625e-07, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 2, HeadDim: 128, EOS: []int{151329, 151336, 151338},
}

// defaultPartial is the configuration classes' partial_rotary_factor.
const defaultPartial = 0.5

// Glm4Norms are Glm4DecoderLayer's four norms.
var Glm4Norms = llama.Norms{PreAttn: "input_layernorm", PostAttn: "post_self_attn_layernorm", PreMLP: "post_attention_layernorm", PostMLP: "post_mlp_layernorm"}

// Resolve reads a GlmForCausalLM or Glm4ForCausalLM config.json into the
// options of pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		AttentionBias *bool `json:"attention_bias"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	withRope := *cfg
	withRope.Raw = nn.DefaultPartialRotary(cfg.Raw, defaultPartial)
	o, err := c.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias, o.MLPBias = lm.Or(c.AttentionBias, true), false, false
	o.RopePairs, o.FusedGateUp = true, true
	if cfg.Architecture() == Glm4 {
		o.Norms = Glm4Norms
	}
	return o, nil
}

// New builds a GlmForCausalLM or Glm4ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
