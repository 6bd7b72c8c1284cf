// Package starcoder2 implements BigCode's StarCoder2
// (Starcoder2ForCausalLM: StarCoder2-3B, 7B and 15B), following
// transformers' models/starcoder2.
//
// StarCoder2 is Llama's decoder (pipeline/llama) with LayerNorms that have
// a bias (norm_epsilon), biases on every projection when use_bias (the
// default), an MLP without a gate, c_fc then gelu_pytorch_tanh then
// c_proj (read as up_proj and down_proj: lm.Renamer;
// llama.Options.UngatedMLP), sliding_window on every layer when set, and
// tied embeddings by default.
package starcoder2

import (
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral"
)

func init() {
	lm.Register("Starcoder2ForCausalLM", New)
}

// Defaults are Starcoder2Config's.
var Defaults = llama.Defaults{
	VocabSize: 49152, Hidden: 3072, Intermediate: 12288, Layers: 30, Heads: 24,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "gelu_pytorch_tanh",
	KVHeads: 2, BOS: []int{50256}, EOS: []int{50256},
}

// Resolve reads a Starcoder2ForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		NormEpsilon   *float64 `json:"norm_epsilon"`
		UseBias       *bool    `json:"use_bias"`
		SlidingWindow *int     `json:"sliding_window"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.RMSNormEps, c.LayerTypes = c.NormEpsilon, nil
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	bias := lm.Or(c.UseBias, true)
	o.QKVBias, o.OBias, o.MLPBias = bias, bias, bias
	o.LayerNorm, o.UngatedMLP = true, true
	if err := mistral.Window(cfg, c.SlidingWindow, 0, nil, &o.Spec); err != nil {
		return llama.Options{}, err
	}
	return o, nil
}

// New builds a Starcoder2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{llama.NewModel(o)}, nil
}

// Model is StarCoder2's decoder in its checkpoints' names.
type Model struct{ *llama.Model }

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: mlp.c_fc and mlp.c_proj are up_proj
// and down_proj.
func (m *Model) RenameWeight(stored string) string {
	for _, r := range [][2]string{{".mlp.c_fc.", ".mlp.up_proj."}, {".mlp.c_proj.", ".mlp.down_proj."}} {
		if before, after, ok := strings.Cut(stored, r[0]); ok && strings.HasPrefix(stored, "model.layers.") {
			return before + r[1] + after
		}
	}
	return stored
}
