package ernie

import (
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// Ernie4_5ForCausalLM (Baidu's dense ERNIE 4.5: ERNIE-4.5-0.3B-PT and
// -Base-PT), following transformers' models/ernie4_5/modular_ernie4_5.py:
// Llama's decoder with the rotary on adjacent pairs of each head's dims
// (llama.Options.RopePairs), turned in float32 and cast back (RopeF32),
// and use_bias putting a bias on every projection, the attention's four
// and the MLP's three (attention_bias and mlp_bias are not read).

func init() {
	lm.Register("Ernie4_5ForCausalLM", NewDense)
}

// DenseDefaults are Ernie4_5Config's (ERNIE-4.5-0.3B's sizes): 2 KV heads
// and head_dim 128 when absent (an explicit null: the heads, and
// hidden_size / heads), tied, rope_theta 500000, bos 1 and eos 2.
var DenseDefaults = llama.Defaults{
	VocabSize: 103424, Hidden: 1024, Intermediate: 3072, Layers: 18, Heads: 16,
	MaxPositions: 131072, Eps: 1e-5, RopeTheta: 500000, Tie: true, Act: "silu",
	KVHeads: 2, HeadDim: 128, BOS: []int{defaultBOS}, EOS: []int{defaultEOS},
}

// ResolveDense reads an Ernie4_5ForCausalLM config.json into the options
// of pipeline/llama's decoder.
func ResolveDense(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		llama.Config
		UseBias bool `json:"use_bias"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.AttentionBias, c.MLPBias = false, false
	o, err := c.Resolve(cfg, DenseDefaults)
	if err != nil {
		return llama.Options{}, err
	}
	for _, k := range o.Spec.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; ERNIE 4.5's layers all attend in full", where, k)
		}
	}
	if o.Rope.RotaryDim != o.Spec.HeadDim {
		return llama.Options{}, errs.Unsupportedf("%s: a partial rotary embedding (%d of %d dims) is not supported; ERNIE 4.5 rotates whole heads", where, o.Rope.RotaryDim, o.Spec.HeadDim)
	}
	o.RopePairs, o.RopeF32 = true, true
	o.QKVBias, o.OBias, o.MLPBias = c.UseBias, c.UseBias, c.UseBias
	return o, nil
}

// NewDense builds an Ernie4_5ForCausalLM from its config.json.
func NewDense(cfg *config.File) (lm.Model, error) {
	o, err := ResolveDense(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
