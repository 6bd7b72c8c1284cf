// Package stablelm implements Stability AI's StableLM
// (StableLmForCausalLM: StableLM-3B-4E1T, StableLM 2 1.6B and 12B, Stable
// Zephyr, Stable Code 3B), following transformers' models/stablelm.
//
// StableLM is Llama's decoder (pipeline/llama) with LayerNorms that have a
// bias (layer_norm_eps), biases on q, k and v when use_qkv_bias (none on
// o), the rotary over the first partial_rotary_factor of each head (0.25
// by default), and, with use_parallel_residual, the attention and the MLP
// side by side on input_layernorm (no post_attention_layernorm then;
// llama.Options.Parallel). qk_layernorm (StableLM 2 12B) adds a
// LayerNorm without bias over each query and key head before the rotary,
// each head's weight its own tensor (self_attn.q_layernorm.norms.H.weight:
// llama.Options.QKLayerNorm, QKLayerNormPerHead).
package stablelm

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("StableLmForCausalLM", New)
}

// Defaults are StableLmConfig's (StableLM-3B-4E1T's sizes).
var Defaults = llama.Defaults{
	VocabSize: 50304, Hidden: 2560, Intermediate: 6912, Layers: 32, Heads: 32,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 32, BOS: []int{0}, EOS: []int{0},
}

// defaultPartial is StableLmConfig's partial_rotary_factor.
const defaultPartial = 0.25

// Resolve reads a StableLmForCausalLM config.json into the options of
// pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	var c struct {
		llama.Config
		LayerNormEps *float64 `json:"layer_norm_eps"`
		UseQKVBias   bool     `json:"use_qkv_bias"`
		QKLayerNorm  bool     `json:"qk_layernorm"`
		Parallel     bool     `json:"use_parallel_residual"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	c.RMSNormEps, c.HeadDim = c.LayerNormEps, nil // head_dim is hidden_size / num_attention_heads
	withRope := *cfg
	withRope.Raw = nn.DefaultPartialRotary(cfg.Raw, defaultPartial)
	o, err := c.Resolve(&withRope, Defaults)
	if err != nil {
		return llama.Options{}, err
	}
	o.QKVBias, o.OBias, o.MLPBias = c.UseQKVBias, false, false
	o.LayerNorm = true
	o.QKLayerNorm, o.QKLayerNormPerHead = c.QKLayerNorm, c.QKLayerNorm // StableLM 2 12B: a bias-free LayerNorm over each head, its own weight
	if c.Parallel {
		o.Parallel, o.Norms = true, llama.Norms{PreAttn: "input_layernorm"}
	}
	return o, nil
}

// New builds a StableLmForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
