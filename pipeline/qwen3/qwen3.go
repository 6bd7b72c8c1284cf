// Package qwen3 implements Qwen3ForCausalLM, following transformers'
// models/qwen3/modeling_qwen3.py (generated from modular_qwen3.py, which
// derives it from Qwen2 and Llama): the dense Qwen3 decoders of the "Qwen3
// Technical Report" (Yang et al., 2025, arXiv:2505.09388). It is the Llama
// decoder (pipeline/llama) with a per-head RMSNorm on queries and keys
// (q_norm, k_norm over head_dim) before the rotary embedding, an explicit
// head_dim, attention biases only when attention_bias is set, and Qwen's
// optional sliding window.
//
// Qwen3ForSequenceClassification is the same decoder with a
// classification head instead of lm_head (lm.Classifier): the
// Qwen3-Reranker models converted to one label
// (tomaarsen/Qwen3-Reranker-0.6B-seq-cls) are cross-encoders of it.
package qwen3

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen2"
)

func init() {
	lm.Register("Qwen3ForCausalLM", New)
	lm.Register("Qwen3ForSequenceClassification", lm.ClassifierOf(New))
}

// Config is a Qwen3ForCausalLM config.json.
type Config struct {
	llama.Config
	qwen2.Sliding
}

// Defaults are Qwen3Config's defaults.
var Defaults = llama.Defaults{
	VocabSize: 151936, Hidden: 4096, Intermediate: 22016, Layers: 32, Heads: 32,
	MaxPositions: 32768, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
}

// New builds a Qwen3ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	if c.HeadDim == nil {
		d := 128 // Qwen3Config's default head_dim
		c.HeadDim = &d
	}
	o, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return nil, err
	}
	o.QKNorm = true
	if err := c.Sliding.Resolve(&o, cfg, len(c.LayerTypes) > 0); err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
