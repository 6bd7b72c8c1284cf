// Package smollm3 implements Hugging Face's SmolLM3 (SmolLM3ForCausalLM,
// SmolLM3-3B), following transformers' models/smollm3/modular_smollm3.py.
//
// SmolLM3 is Llama's decoder (pipeline/llama) with NoPE layers: each
// layer whose entry in no_rope_layers is 0 attends without the rotary
// embedding (by default every fourth: no_rope_layer_interval 4). With
// use_sliding_window and sliding_window set, the layers layer_types calls
// sliding_attention (by default the NoPE ones) attend within the window;
// without use_sliding_window every layer attends in full. A config whose
// layer_types slide with a sliding_window but without use_sliding_window
// is refused: transformers' eager and sdpa masks window those layers,
// its flash attention (SmolLM3Attention's own window) does not.
package smollm3

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("SmolLM3ForCausalLM", New)
}

// Config is a SmolLM3ForCausalLM config.json: the Llama fields plus
// SmolLM3's.
type Config struct {
	llama.Config
	NoRopeLayers        []int `json:"no_rope_layers"`
	NoRopeLayerInterval *int  `json:"no_rope_layer_interval"`
	UseSlidingWindow    bool  `json:"use_sliding_window"`
	SlidingWindow       *int  `json:"sliding_window"`
}

// Defaults are SmolLM3Config's (SmolLM3-3B's sizes; rope_theta its
// default_theta, 2e6; 4 KV heads; tied embeddings).
var Defaults = llama.Defaults{
	VocabSize: 128256, Hidden: 2048, Intermediate: 11008, Layers: 36, Heads: 16,
	MaxPositions: 32768, Eps: 1e-6, RopeTheta: 2e6, Tie: true, Act: "silu",
}

// defaultKVHeads is SmolLM3Config's num_key_value_heads.
const defaultKVHeads = 4

// Resolve reads a SmolLM3 config.json into the options of pipeline/llama's
// decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	if c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") { // absent: 4; null: the heads, as SmolLM3Config reads None
		kv := defaultKVHeads
		c.NumKeyValueHeads = &kv
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	s := &o.Spec
	o.QKVBias, o.OBias = c.AttentionBias, c.AttentionBias
	if o.NoRope, err = lm.NoRopeLayers(where, c.NoRopeLayers, c.NoRopeLayerInterval, 4, s.Layers); err != nil {
		return llama.Options{}, err
	}
	if !c.UseSlidingWindow && c.SlidingWindow != nil && slices.Contains(c.LayerTypes, lm.KindSliding) {
		// transformers' eager and sdpa masks window these layers, its
		// flash attention does not (SmolLM3Attention drops the window):
		// its implementations disagree, so the config is refused.
		return llama.Options{}, fmt.Errorf("%s: layer_types has sliding_attention layers and sliding_window is %d, but use_sliding_window is false; set use_sliding_window, or make the layers full_attention",
			where, *c.SlidingWindow)
	}
	window := 0
	if c.UseSlidingWindow && c.SlidingWindow != nil {
		if window = *c.SlidingWindow; window <= 0 {
			return llama.Options{}, fmt.Errorf("%s: sliding_window must be positive with use_sliding_window, got %d", where, window)
		}
	}
	for i := range s.LayerKinds {
		switch {
		case window == 0:
			s.LayerKinds[i] = lm.KindFull // no window without use_sliding_window and sliding_window
		case len(c.LayerTypes) == 0 && o.NoRope[i]: // SmolLM3Config: the NoPE layers slide
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	for _, k := range s.LayerKinds {
		if k == lm.KindSliding {
			s.SlidingWindow = window
		}
	}
	return o, nil
}

// New builds a SmolLM3ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
