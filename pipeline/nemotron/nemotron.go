// Package nemotron implements NVIDIA's dense Nemotron decoder
// (NemotronForCausalLM: Nemotron-4 15B, Nemotron-Mini-4B-Instruct,
// Minitron-4B and 8B), following transformers' models/nemotron.
//
// Nemotron is Llama's decoder (pipeline/llama) with LayerNorm1P norms (a
// LayerNorm with a bias whose weight is stored minus one: (1 + w);
// llama.Options.LayerNorm with NormPlusOne), Nemotron's ungated MLP,
// down_proj(relu2(up_proj(x))) (UngatedMLP), and the rotary over the
// first partial_rotary_factor of each head (0.5 by default).
package nemotron

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("NemotronForCausalLM", New)
}

// Defaults are NemotronConfig's (Nemotron-4 15B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 256000, Hidden: 6144, Intermediate: 24576, Layers: 32, Heads: 48,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "relu2",
	BOS: []int{2}, EOS: []int{3},
}

// defaultPartial is NemotronConfig's partial_rotary_factor.
const defaultPartial = 0.5

// Resolve reads a NemotronForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		NormEps *float64 `json:"norm_eps"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.RMSNormEps = c.NormEps
	withRope := *cfg
	withRope.Raw = nn.DefaultPartialRotary(cfg.Raw, defaultPartial)
	o, err := c.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.LayerNorm, o.NormPlusOne, o.UngatedMLP = true, true, true
	return o, nil
}

// New builds a NemotronForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
