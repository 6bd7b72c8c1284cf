package mistral

import (
	"fmt"
	"slices"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Ministral is Ministral-8B-Instruct-2410's class (models/ministral):
// Mistral's decoder (no biases) whose layers each attend in full or
// within sliding_window as layer_types says; without layer_types every
// layer slides when sliding_window is set (4096 by default), and none
// when it is null.
const Ministral = "MinistralForCausalLM"

func init() {
	lm.Register(Ministral, NewMinistral)
}

// MinistralDefaults are MinistralConfig's.
var MinistralDefaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 4096 * 32, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// NewMinistral builds a MinistralForCausalLM from its config.json.
func NewMinistral(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	if c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") {
		kv := 8 // MinistralConfig's default
		c.NumKeyValueHeads = &kv
	}
	o, err := c.Resolve(cfg, MinistralDefaults)
	if err != nil {
		return nil, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	w := 4096
	if cfg.Has("sliding_window") {
		w = 0
		if c.SlidingWindow != nil {
			w = *c.SlidingWindow
		}
	}
	s := &o.Spec
	if len(c.LayerTypes) == 0 && w > 0 {
		for i := range s.LayerKinds {
			s.LayerKinds[i] = lm.KindSliding
		}
	}
	if slices.Contains(s.LayerKinds, lm.KindSliding) {
		if w <= 0 {
			return nil, fmt.Errorf("%s: sliding layers (layer_types) need a positive sliding_window, got %s", where, cfg.Raw["sliding_window"])
		}
		s.SlidingWindow = w
	}
	return llama.NewModel(o), nil
}
