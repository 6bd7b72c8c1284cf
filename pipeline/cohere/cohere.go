// Package cohere implements Cohere's decoders, following transformers'
// models/cohere (CohereForCausalLM: Command R, Command R 08-2024, Aya 23,
// Aya Expanse) and models/cohere2 (Cohere2ForCausalLM: Command R7B,
// Command A, Command A Reasoning and Translate).
//
// Cohere's layer is Llama's (pipeline/llama) run in parallel: one norm,
// input_layernorm, feeds both the attention and the MLP, and both join
// the residual (x + attn(norm(x)) + mlp(norm(x)): llama.Options.Parallel).
// Its norms are LayerNorms without a bias (CohereLayerNorm: the mean
// subtracted, in float32, weighted before the cast back), its rotary
// turns adjacent pairs of each head's dims (rotate_half over interleaved
// pairs: llama.Options.RopePairs), and its logits are multiplied by
// logit_scale (0.0625 by default). The embeddings are tied by default.
//
// Cohere2 adds Gemma 2's layout: layer_types (by default three layers of
// four) attend within sliding_window (4096 by default) and turn by the
// rotary; the others attend in full without it (NoPE). Its head_dim is
// always hidden_size / num_attention_heads, whatever config.json says
// (Cohere's takes config.json's head_dim when there is one).
//
// Cohere turns queries and keys in float32 (apply_rotary_pos_emb casts
// them up, the tables as rounded to the compute dtype), rounding once
// after: llama.Options.RopeF32.
//
// The rotary base without rope_theta is CohereConfig's default_theta,
// 500000 (transformers v5; v4's CohereConfig had 10000), and Cohere2Config's
// 10000.
//
// Command R+'s use_qk_norm (CohereForCausalLM only) adds a LayerNorm
// without bias over each query and key head, a weight per head, before
// the rotary (llama.Options.QKLayerNorm); Cohere2Config has none.
package cohere

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// The architectures this package registers.
const (
	Cohere  = "CohereForCausalLM"
	Cohere2 = "Cohere2ForCausalLM"
)

func init() {
	lm.Register(Cohere, New)
	lm.Register(Cohere2, New)
}

// Defaults are Cohere2Config's, and CohereConfig's but for its rotary
// base (cohereTheta).
var Defaults = llama.Defaults{
	VocabSize: 256000, Hidden: 8192, Intermediate: 22528, Layers: 40, Heads: 64,
	MaxPositions: 8192, Eps: 1e-5, RopeTheta: 10000, Tie: true, Act: "silu",
	BOS: []int{5}, EOS: []int{255001},
}

// cohereTheta is CohereConfig's default_theta.
const cohereTheta = 500000

// The configuration classes' defaults llama.Defaults does not carry.
const (
	defaultLogitScale = 0.0625
	defaultWindow     = 4096
	defaultPattern    = 4
)

// Resolve reads a CohereForCausalLM or Cohere2ForCausalLM config.json
// into the options of pipeline/llama's decoder.
func Resolve(cfg *config.File) (llama.Options, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		llama.Config
		LayerNormEps  *float64 `json:"layer_norm_eps"`
		LogitScale    *float64 `json:"logit_scale"`
		UseQKNorm     bool     `json:"use_qk_norm"`
		SlidingWindow *int     `json:"sliding_window"`
		Pattern       *int     `json:"sliding_window_pattern"`
	}
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, err
	}
	// rms_norm_eps is layer_norm_eps; Cohere2Config sets head_dim to the
	// hidden size over the heads.
	c.RMSNormEps = c.LayerNormEps
	c2 := cfg.Architecture() == Cohere2
	d := Defaults
	if c2 {
		c.HeadDim = nil
	} else {
		c.LayerTypes, d.RopeTheta = nil, cohereTheta
	}
	o, err := c.Resolve(cfg, d)
	if err != nil {
		return llama.Options{}, err
	}
	o.OBias = o.QKVBias // attention_bias: every projection, o_proj too
	o.MLPBias = false
	o.LayerNorm, o.NormNoBias, o.Parallel, o.RopePairs, o.RopeF32 = true, true, true, true, true
	o.Norms = llama.Norms{PreAttn: "input_layernorm"}
	o.LogitScale = lm.Or(c.LogitScale, defaultLogitScale)
	s := &o.Spec
	if !c2 {
		o.QKLayerNorm = c.UseQKNorm // Command R+: a LayerNorm over each head, a weight per head
		return o, nil
	}
	if len(c.LayerTypes) == 0 {
		p := lm.Or(c.Pattern, defaultPattern)
		if p <= 0 {
			return llama.Options{}, fmt.Errorf("%s: sliding_window_pattern must be positive, got %d", where, p)
		}
		lm.SlidingPattern(s.LayerKinds, p)
	}
	window := defaultWindow
	if cfg.Has("sliding_window") {
		window = 0
		if c.SlidingWindow != nil {
			window = *c.SlidingWindow
		}
	}
	// Cohere2Attention turns a layer only where it slides, which takes a
	// window: a null one would leave every layer unrotated and unwindowed.
	if window <= 0 {
		return llama.Options{}, fmt.Errorf("%s: sliding_window must be a positive number of positions, got %s", where, cfg.Raw["sliding_window"])
	}
	s.SlidingWindow = window
	o.NoRope = lm.NoRopeUnlessSliding(s.LayerKinds)
	return o, nil
}

// New builds a CohereForCausalLM or Cohere2ForCausalLM from its
// config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return llama.NewModel(o), nil
}
