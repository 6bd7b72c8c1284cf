// Package seedoss implements ByteDance Seed's Seed-OSS (SeedOssForCausalLM:
// Seed-OSS-36B Base and Instruct), following transformers'
// models/seed_oss/modular_seed_oss.py.
//
// Seed-OSS is Llama's decoder (pipeline/llama) with its biases named
// apart: attention_bias on the query, key and value projections (true by
// default), attention_out_bias on the output projection (false), and
// mlp_bias on the MLP (false). Its dropouts are training-time only.
package seedoss

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func init() {
	lm.Register("SeedOssForCausalLM", New)
}

// Defaults are SeedOssConfig's.
var Defaults = llama.Defaults{
	VocabSize: 155136, Hidden: 4096, Intermediate: 27648, Layers: 64, Heads: 80,
	MaxPositions: 524288, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 8, HeadDim: 128,
}

// Resolve reads a SeedOssForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		AttentionBias    *bool `json:"attention_bias"`
		AttentionOutBias bool  `json:"attention_out_bias"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	o, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias = lm.Or(c.AttentionBias, true), c.AttentionOutBias
	return o, nil
}

// New builds a SeedOssForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
