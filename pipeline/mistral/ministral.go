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
	KVHeads: 8, BOS: []int{1}, EOS: []int{2},
}

// NewMinistral builds a MinistralForCausalLM from its config.json.
func NewMinistral(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	o, err := c.Resolve(cfg, MinistralDefaults)
	if err != nil {
		return nil, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	if err := Window(cfg, c.SlidingWindow, 4096, c.LayerTypes, &o.Spec); err != nil {
		return nil, err
	}
	if s := &o.Spec; slices.Contains(s.LayerKinds, lm.KindSliding) && s.SlidingWindow <= 0 {
		return nil, fmt.Errorf("%s: sliding layers (layer_types) need a positive sliding_window, got %s", where, cfg.Raw["sliding_window"])
	}
	return llama.NewModel(o), nil
}
