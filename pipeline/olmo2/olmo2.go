// Package olmo2 implements AI2's OLMo 2 (Olmo2ForCausalLM: OLMo 2 1B, 7B,
// 13B and 32B, and their Instruct builds), following transformers'
// models/olmo2/modular_olmo2.py ("2 OLMo 2 Furious", OLMo et al., 2024,
// arXiv:2501.00656).
//
// OLMo 2 is Llama's decoder (pipeline/llama) with its norms moved: no
// norm before the attention or the MLP, each sublayer's output normed
// before it joins the residual (post_attention_layernorm,
// post_feedforward_layernorm: llama.PostNorms), and the queries and keys
// RMSNormed over their whole projections (q_norm [heads·head_dim],
// k_norm [KV heads·head_dim]) before the rotary embedding. Olmo2RMSNorm
// scales by its weight before the cast back to the input's dtype
// (llama.Options.NormF32).
package olmo2

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("Olmo2ForCausalLM", New)
}

// Defaults are Olmo2Config's (OLMo-2-1124-7B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50304, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
}

// Resolve reads an OLMo 2 config.json into the options of pipeline/llama's
// decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c llama.Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.MLPBias = false // Olmo2Config has no mlp_bias
	o.Norms = llama.PostNorms
	o.QKNorm, o.QKNormAcross, o.NormF32 = true, true, true
	return o, nil
}

// New builds an Olmo2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
