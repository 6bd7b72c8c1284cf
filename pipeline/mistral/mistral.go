// Package mistral implements MistralForCausalLM, following transformers'
// models/mistral/modeling_mistral.py (generated from modular_mistral.py,
// which derives it from Llama): "Mistral 7B" (Jiang et al., 2023,
// arXiv:2310.06825). It is the Llama decoder (pipeline/llama) without
// biases, with sliding-window attention on every layer when sliding_window
// is set (Mistral 7B v0.1) and plain causal attention when it is null
// (v0.2, v0.3).
//
// MistralForSequenceClassification is the same decoder with a
// classification head instead of lm_head (lm.Classifier).
package mistral

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("MistralForCausalLM", New)
	lm.Register("MistralForSequenceClassification", lm.ClassifierOf(New))
}

// Config is a MistralForCausalLM config.json.
type Config struct {
	llama.Config
	SlidingWindow *int `json:"sliding_window"`
}

// Defaults are MistralConfig's defaults.
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 4096 * 32, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// New builds a MistralForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	if c.NumKeyValueHeads == nil {
		kv := 8 // MistralConfig's default
		c.NumKeyValueHeads = &kv
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return nil, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	// A config that leaves sliding_window out gets MistralConfig's 4096.
	if err := Window(cfg, c.SlidingWindow, 4096, c.LayerTypes, &o.Spec); err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}

// Window sets s's sliding window from config.json's sliding_window as
// Mistral's family reads it: a positive window on every layer (unless
// layer_types places them), an explicit null or 0 none, and absent the
// configuration class's default (MistralConfig 4096, MixtralConfig none).
func Window(cfg *config.File, window *int, absent int, layerTypes []string, s *lm.Spec) error {
	w := 0
	if window != nil {
		w = *window
	} else if !cfg.Has("sliding_window") {
		w = absent
	}
	if w < 0 {
		return fmt.Errorf("%s: sliding_window must not be negative, got %d", lm.ConfigName(cfg), w)
	}
	if w > 0 && len(layerTypes) == 0 {
		for i := range s.LayerKinds {
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	s.SlidingWindow = w
	return nil
}
