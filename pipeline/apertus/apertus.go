// Package apertus implements the Swiss AI Initiative's Apertus
// (ApertusForCausalLM: Apertus-8B and 70B, Base and Instruct), following
// transformers' models/apertus/modular_apertus.py.
//
// Apertus is Llama's decoder (pipeline/llama) with:
//   - its two norms named attention_layernorm and feedforward_layernorm;
//   - q/k RMSNorms per head before the rotary (q_norm, k_norm [head_dim]);
//   - Nemotron's MLP, down_proj(act(up_proj(x))) without a gate, its
//     activation xIELU by default (hidden_act "xielu": nn.XIELU of each
//     layer's learned mlp.act_fn.alpha_p, alpha_n, beta and eps;
//     llama.Options.XIELU), another hidden_act applied as named;
//   - the Llama 3 rope scaling by default (rope_theta 12e6, factor 8 over
//     8192 original positions).
package apertus

import (
	"encoding/json"
	"maps"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("ApertusForCausalLM", New)
}

// Defaults are ApertusConfig's; RopeTheta is its default_theta, for a
// rope_parameters without rope_theta.
var Defaults = llama.Defaults{
	VocabSize: 131072, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 65536, Eps: 1e-5, RopeTheta: 12e6, Tie: false, Act: "xielu",
	BOS: []int{1}, EOS: []int{2},
}

// Norms are Apertus's two norms.
var Norms = llama.Norms{PreAttn: "attention_layernorm", PreMLP: "feedforward_layernorm"}

// defaultRope is ApertusConfig's rope_parameters when a config has none.
var defaultRope = map[string]any{
	"rope_type": "llama3", "rope_theta": 12e6, "factor": 8.0, "original_max_position_embeddings": 8192,
	"low_freq_factor": 1.0, "high_freq_factor": 4.0,
}

// Resolve reads an ApertusForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c llama.Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	xielu := c.HiddenAct == "" || c.HiddenAct == "xielu"
	if xielu {
		c.HiddenAct = "silu" // unread: the MLP runs nn.XIELU
	}
	// Without rope_scaling or rope_parameters the Llama 3 scaling applies,
	// of the config's rope_theta when it has one (ApertusConfig's two
	// defaults are apart).
	resolved := *cfg
	if !cfg.Has("rope_parameters") && !cfg.Has("rope_scaling") {
		rope := maps.Clone(defaultRope)
		if raw, ok := cfg.Raw["rope_theta"]; ok {
			var theta *float64
			if err := json.Unmarshal(raw, &theta); err == nil && theta != nil {
				rope["rope_theta"] = *theta
			}
		}
		resolved.Raw = maps.Clone(cfg.Raw)
		resolved.Raw["rope_parameters"], _ = json.Marshal(rope)
	}
	o, err := c.Resolve(&resolved, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.Norms = Norms
	o.QKNorm, o.UngatedMLP, o.XIELU = true, true, xielu
	o.MLPBias = false
	return o, nil
}

// New builds an ApertusForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
