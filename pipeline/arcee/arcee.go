// Package arcee implements Arcee AI's AFM (ArceeForCausalLM: AFM-4.5B and
// its Base), following transformers' models/arcee/modular_arcee.py.
//
// AFM is Llama's decoder (pipeline/llama) with Nemotron's MLP: no gate,
// down_proj(act(up_proj(x))) (llama.Options.UngatedMLP), the activation
// relu2 (ReLU squared) by default.
package arcee

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("ArceeForCausalLM", New)
}

// Defaults are ArceeConfig's.
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 2560, Intermediate: 18432, Layers: 32, Heads: 32,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "relu2",
	BOS: []int{128000}, EOS: []int{128001},
}

// Resolve reads an ArceeForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c llama.Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.UngatedMLP = true
	return o, nil
}

// New builds an ArceeForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
