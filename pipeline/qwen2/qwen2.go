// Package qwen2 implements Qwen2ForCausalLM, following transformers'
// models/qwen2/modeling_qwen2.py (generated from modular_qwen2.py, which
// derives it from Llama): the Qwen2 / Qwen2.5 decoders of the "Qwen2
// Technical Report" (Yang et al., 2024, arXiv:2407.10671). It is the Llama
// decoder (pipeline/llama) with biases on the q, k and v projections (none
// on o_proj) and optional sliding-window attention on the layers from
// max_window_layers on.
//
// Qwen2ForSequenceClassification is the same decoder with a
// classification head instead of lm_head (lm.Classifier).
package qwen2

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("Qwen2ForCausalLM", New)
	lm.Register("Qwen2ForSequenceClassification", lm.ClassifierOf(New))
}

// Config is a Qwen2ForCausalLM config.json: Llama's fields plus the
// sliding-window settings.
type Config struct {
	llama.Config
	Sliding
}

// Sliding are the sliding-window fields of Qwen configs (Qwen2, Qwen3).
type Sliding struct {
	UseSlidingWindow bool `json:"use_sliding_window"`
	SlidingWindow    *int `json:"sliding_window"`
	MaxWindowLayers  *int `json:"max_window_layers"`
}

// Defaults are Qwen2Config's defaults.
var Defaults = llama.Defaults{
	VocabSize: 151936, Hidden: 4096, Intermediate: 22016, Layers: 32, Heads: 32,
	MaxPositions: 32768, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// Resolve sets the layer kinds and window of a Qwen config: when
// layer_types is absent, layers from max_window_layers on use the sliding
// window if use_sliding_window is set (transformers' derivation).
func (c Sliding) Resolve(o *llama.Options, cfg *config.File, hasLayerTypes bool) error {
	s := &o.Spec
	w := lm.Or(c.SlidingWindow, 4096)
	if c.SlidingWindow == nil && cfg.Has("sliding_window") {
		w = 0 // an explicit null: no window, whatever use_sliding_window says
	}
	mwl := lm.Or(c.MaxWindowLayers, 28)
	if !c.UseSlidingWindow {
		w = 0
	}
	if !hasLayerTypes && w > 0 {
		for i := mwl; i < s.Layers; i++ {
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	for i, k := range s.LayerKinds {
		if k == lm.KindSliding && w <= 0 {
			return fmt.Errorf("%s: layer %d is %s but no sliding_window is configured", lm.ConfigName(cfg), i, k)
		}
	}
	s.SlidingWindow = w
	return nil
}

// New builds a Qwen2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return nil, err
	}
	o.QKVBias, o.OBias, o.MLPBias = true, false, false
	if err := c.Sliding.Resolve(&o, cfg, len(c.LayerTypes) > 0); err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
