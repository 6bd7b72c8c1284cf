// Package olmo2 implements AI2's OLMo 2 (Olmo2ForCausalLM: OLMo 2 1B, 7B,
// 13B and 32B, and their Instruct builds), following transformers'
// models/olmo2/modular_olmo2.py ("2 OLMo 2 Furious", OLMo et al., 2024,
// arXiv:2501.00656), and OLMo 3 (Olmo3ForCausalLM: OLMo 3 7B and 32B,
// Base, Instruct and Think), following models/olmo3/modular_olmo3.py.
//
// OLMo 2 is Llama's decoder (pipeline/llama) with its norms moved: no
// norm before the attention or the MLP, each sublayer's output normed
// before it joins the residual (post_attention_layernorm,
// post_feedforward_layernorm: llama.PostNorms), and the queries and keys
// RMSNormed over their whole projections (q_norm [heads·head_dim],
// k_norm [KV heads·head_dim]) before the rotary embedding. Olmo2RMSNorm
// scales by its weight before the cast back to the input's dtype
// (llama.Options.NormF32); its rotary embedding returns float32 tables,
// so a 16-bit query turns in float32 and is cast back once (RopeF32,
// RopeTablesF32).
//
// OLMo 3 is OLMo 2 with sliding-window layers (layer_types; by default
// three layers within sliding_window, 4096, then one attending in full)
// whose rotary embedding is the plain one, the config's rope scaling
// (the releases' YaRN) turning the full-attention layers only
// (llama.Options.SlidingRope).
package olmo2

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Olmo2ForCausalLM", New)
	lm.Register("Olmo3ForCausalLM", New)
}

// Defaults are Olmo2Config's (OLMo-2-1124-7B's sizes). Olmo3Config takes
// them too, in the transformers versions read here; some later ones set
// rope_theta's default to 500000, which the releases' configs give
// anyway.
var Defaults = llama.Defaults{
	VocabSize: 50304, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
}

// Olmo3Window is Olmo3Config's sliding_window.
const Olmo3Window = 4096

// Resolve reads an OLMo 2 or OLMo 3 config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		llama.Config
		SlidingWindow *int `json:"sliding_window"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	olmo3 := cfg.Architecture() == "Olmo3ForCausalLM"
	full, sliding := cfg, cfg
	if olmo3 {
		var err error
		if full, sliding, err = ropeConfigs(cfg); err != nil {
			return llama.Options{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	o, err := c.Resolve(full, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.MLPBias = false // Olmo2Config has no mlp_bias
	o.Norms = llama.PostNorms
	o.QKNorm, o.QKNormAcross, o.NormF32 = true, true, true
	o.RopeF32, o.RopeTablesF32 = true, true // Olmo2RotaryEmbedding's float32 tables; q·cos in float32, cast back
	if !olmo3 {
		return o, nil
	}
	s := &o.Spec
	if len(c.LayerTypes) == 0 { // Olmo3Config: three sliding layers, then a full one
		lm.SlidingPattern(s.LayerKinds, 4)
	}
	if slices.Contains(s.LayerKinds, lm.KindSliding) {
		s.SlidingWindow = Olmo3Window
		if cfg.Has("sliding_window") {
			if c.SlidingWindow == nil || *c.SlidingWindow <= 0 {
				return llama.Options{}, fmt.Errorf("%s: sliding_window must be a positive number of positions where layers slide, got %s", where, cfg.Raw["sliding_window"])
			}
			s.SlidingWindow = *c.SlidingWindow
		}
	}
	if o.SlidingRope, err = nn.ConfigRope(sliding.Raw, Defaults.RopeTheta, s.HeadDim, s.MaxPositions); err != nil {
		return llama.Options{}, fmt.Errorf("%s: the sliding layers' %w", where, err)
	}
	return o, nil
}

// ropeConfigs returns cfg as the full-attention layers read their rotary
// embedding (rope_scaling, or rope_parameters: transformers v5's, whole
// or for "full_attention" of a map by layer type) and as the sliding
// layers do (the plain rotary of the same rope_theta, or the map's
// "sliding_attention" entry). cfg is not changed.
func ropeConfigs(cfg *config.File) (full, sliding *config.File, err error) {
	full, sliding = &config.File{}, &config.File{}
	*full, *sliding = *cfg, *cfg
	full.Raw, sliding.Raw = maps.Clone(cfg.Raw), maps.Clone(cfg.Raw)
	delete(sliding.Raw, "rope_scaling")
	params, err := nn.ParseRopeScaling(cfg.Raw["rope_parameters"])
	if err != nil || params == nil {
		return full, sliding, err
	}
	byType := func(key string) (json.RawMessage, bool) {
		v, ok := params[key]
		if !ok {
			return nil, false
		}
		b, err := json.Marshal(v)
		return b, err == nil
	}
	if f, ok := byType(lm.KindFull); ok {
		full.Raw["rope_parameters"] = f
		if sl, ok := byType(lm.KindSliding); ok {
			sliding.Raw["rope_parameters"] = sl
		} else {
			delete(sliding.Raw, "rope_parameters")
		}
		return full, sliding, nil
	}
	plain := map[string]any{"rope_type": "default"}
	if t, ok := params["rope_theta"]; ok {
		plain["rope_theta"] = t
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return nil, nil, err
	}
	sliding.Raw["rope_parameters"] = b
	return full, sliding, nil
}

// New builds an Olmo2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
