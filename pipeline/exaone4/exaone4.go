// Package exaone4 implements LG AI Research's EXAONE 4.0
// (Exaone4ForCausalLM: EXAONE 4.0 1.2B and 32B, and EXAONE 4.0.1),
// following transformers' models/exaone4/modular_exaone4.py.
//
// EXAONE 4.0 is Llama's decoder (pipeline/llama) with OLMo 2's layer
// (pipeline/olmo2): no norm before the attention or the MLP, each
// sublayer's output normed before it joins the residual
// (post_attention_layernorm, post_feedforward_layernorm:
// llama.PostNorms), the norms Llama's (the weight applied after the cast
// back, unlike OLMo 2's). Its queries and keys are RMSNormed per head
// (q_norm, k_norm [head_dim]) before the rotary embedding. The hybrid
// models (sliding_window set: the 32B) attend within the window on their
// sliding layers and in full on the others, which take no rotary (NoPE);
// without a window every layer attends in full and turns.
//
// The layers' kinds are layer_types, or else sliding_window_pattern: a
// number p, layer i sliding unless (i+1) is a multiple of p (4 by
// default), or a string of L (local) and G (global) repeated over the
// layers, the last layer global whatever it says. transformers'
// Exaone4Config divides by a zero pattern when sliding_window is null and
// layer_types absent; tputool reads every layer as full attention there.
//
// K-EXAONE (ExaoneMoeForCausalLM, moe.go) is this attention in OLMoE's
// pre-norm layer over DeepSeek-V3's mixture of experts.
package exaone4

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("Exaone4ForCausalLM", New)
}

// Defaults are Exaone4Config's.
var Defaults = llama.Defaults{
	VocabSize: 102400, Hidden: 4096, Intermediate: 16384, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 32, BOS: []int{0}, EOS: []int{2},
}

// Exaone4Config's defaults llama.Defaults does not carry.
const (
	defaultWindow  = 4096
	defaultPattern = 4
)

// Resolve reads an EXAONE 4.0 config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		llama.Config
		SlidingWindow *int            `json:"sliding_window"`
		Pattern       json.RawMessage `json:"sliding_window_pattern"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	window := defaultWindow
	if cfg.Has("sliding_window") {
		window = 0
		if c.SlidingWindow != nil {
			window = *c.SlidingWindow
		}
	}
	if window < 0 {
		return llama.Options{}, fmt.Errorf("%s: sliding_window must not be negative, got %d", where, window)
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	o.Norms = llama.PostNorms
	o.QKNorm = true
	s := &o.Spec
	if len(c.LayerTypes) == 0 {
		if err := patternKinds(where, c.Pattern, window, s.LayerKinds); err != nil {
			return llama.Options{}, err
		}
	}
	if window == 0 {
		for _, k := range s.LayerKinds {
			if k == lm.KindSliding {
				return llama.Options{}, fmt.Errorf("%s: sliding layers (layer_types) need a sliding_window", where)
			}
		}
		return o, nil
	}
	// The hybrid models: a window on the sliding layers, no rotary on
	// the others (transformers rotates a layer when sliding_window is
	// null or the layer slides).
	s.SlidingWindow = window
	o.NoRope = lm.NoRopeUnlessSliding(s.LayerKinds)
	return o, nil
}

// patternKinds sets kinds from sliding_window_pattern (a number or a
// string of L and G) when the config has no layer_types; every layer
// full when window is 0.
func patternKinds(where string, raw json.RawMessage, window int, kinds []string) error {
	for i := range kinds {
		kinds[i] = lm.KindFull
	}
	if window == 0 {
		return nil
	}
	p := defaultPattern
	var text string
	switch s := strings.TrimSpace(string(raw)); {
	case s == "" || s == "null":
	case json.Unmarshal(raw, &text) == nil:
		if text == "" || strings.Trim(text, "LG") != "" {
			return fmt.Errorf("%s: sliding_window_pattern %q: want L (local) and G (global) letters", where, text)
		}
		for i := range kinds {
			if text[i%len(text)] == 'L' && i < len(kinds)-1 {
				kinds[i] = lm.KindSliding
			}
		}
		return nil
	case json.Unmarshal(raw, &p) != nil || p <= 0:
		return fmt.Errorf("%s: sliding_window_pattern %s: want a positive number of layers or a string of L and G", where, s)
	}
	lm.SlidingPattern(kinds, p)
	return nil
}

// New builds an Exaone4ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
