// Package arctic implements ArcticForCausalLM, Snowflake's Arctic
// (snowflake-arctic-base and -instruct: 480B parameters, 17B active, a
// "dense-MoE hybrid"), following the modeling code the checkpoints ship
// as remote code (modeling_arctic.py, read through a published copy of
// it) and, where that code leans on DeepSpeed, vLLM's models/arctic.py.
// transformers has no class for it. For the releases' settings (two
// experts a token, parallel_attn_mlp_res) the three — that code, vLLM
// and llama.cpp's "arctic" graph — compute the same layer; with one
// expert a token vLLM keeps its softmax weight where the remote code and
// llama.cpp divide it by itself (1), which tputool does too.
//
// A layer is Llama's attention (grouped-query, no biases, RMSNorms, the
// rotary over whole heads) and a sparse block on the layers i with
// (i + 1) % moe_layer_frequency == 0, a dense SwiGLU
// (block_sparse_moe.mlp) on the others:
//   - the router block_sparse_moe.gate takes the softmax's
//     num_experts_per_tok largest of num_local_experts, divided by their
//     sum (ArcticMoE's _moe_foreward); the experts are Mixtral's
//     (block_sparse_moe.experts.E.w1/w3/w2: gate, up, down);
//   - with parallel_attn_mlp_res (the releases'), the block runs beside
//     the attention, on post_attention_layernorm of the layer's input, and
//     a dense SwiGLU of the hidden width, residual_mlp (w1, w3, w2), runs
//     on residual_layernorm of the stream after the attention:
//     x' = x + attn(x) + residual_mlp(·) + moe(·). Without it the block
//     follows the attention as Mixtral's does. vLLM reads use_residual
//     for the same switch (ArcticConfig has no such field); a config
//     that sets it otherwise than parallel_attn_mlp_res is refused.
//
// The attention is Mistral's as ArcticAttention copies it: no biases,
// heads of hidden_size / num_attention_heads, no rope scaling (refused);
// attention_bias, mlp_bias, head_dim and layer_types are not read.
//
// It runs on pipeline/qwen3moe's decoder (Layout.MoEOnInput,
// Layout.ResidualMLP), where every experts formulation and held form
// applies; the dense layers' block_sparse_moe.mlp is read as Llama's mlp
// (lm.Renamer).
package arctic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Architecture is the class this package registers.
const Architecture = "ArcticForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is an ArcticForCausalLM config.json: Llama's fields and
// ArcticConfig's.
type Config struct {
	llama.Config
	Experts       *int            `json:"num_local_experts"`
	TopK          *int            `json:"num_experts_per_tok"`
	MoEFrequency  *int            `json:"moe_layer_frequency"`
	Parallel      *bool           `json:"parallel_attn_mlp_res"`
	UseResidual   *bool           `json:"use_residual"`
	SlidingWindow *int            `json:"sliding_window"`
	Quantization  json.RawMessage `json:"quantization"`
}

// Defaults are ArcticConfig's.
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 4096, Eps: 1e-5, RopeTheta: 1e6, Tie: false, Act: "silu",
	BOS: []int{1}, EOS: []int{2},
}

// ArcticConfig's MoE defaults.
const (
	defaultExperts   = 8
	defaultTopK      = 1
	defaultFrequency = 2
)

// parallelLayout is the releases' block: the experts on the layer's
// normed input beside the attention, and the residual MLP.
var parallelLayout = qwen3moe.Layout{Block: "block_sparse_moe", Experts: lm.MixtralExperts, MoEOnInput: true,
	ResidualMLP: "residual_mlp", ResidualNorm: "residual_layernorm", ResidualNames: lm.MixtralExperts}

// sequentialLayout is the block without them: Mixtral's.
var sequentialLayout = qwen3moe.Layout{Block: "block_sparse_moe", Experts: lm.MixtralExperts}

// Resolve reads an ArcticForCausalLM config.json into the options of
// pipeline/qwen3moe's decoder and whether its sparse blocks run beside
// the attention with the residual MLP.
func Resolve(cfg *config.File) (o qwen3moe.Options, parallel bool, err error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return o, false, err
	}
	switch {
	case c.SlidingWindow != nil:
		return o, false, errs.Unsupportedf("%s: sliding_window %d is not supported for %s", where, *c.SlidingWindow, Architecture)
	case len(c.Quantization) > 0 && string(c.Quantization) != "null":
		return o, false, errs.Unsupportedf("%s: quantization (DeepSpeed's FP quantization) is not supported for %s; use a checkpoint of float weights", where, Architecture)
	case c.UseResidual != nil && *c.UseResidual != lm.Or(c.Parallel, false):
		return o, false, errs.Unsupportedf("%s: parallel_attn_mlp_res %v with use_residual %v is not supported for %s (the modeling code reads the first, vLLM the second; the releases set both)", where, lm.Or(c.Parallel, false), *c.UseResidual, Architecture)
	case len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null":
		return o, false, errs.Unsupportedf("%s: rope_scaling is not supported for %s (its attention has no scaling)", where, Architecture)
	}
	// ArcticAttention and ArcticMLP read neither biases nor head_dim, and
	// every layer is a full-attention one.
	c.AttentionBias, c.MLPBias, c.HeadDim, c.LayerTypes = false, false, nil, nil
	base, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return o, false, err
	}
	s := &base.Spec
	o = qwen3moe.Options{Options: base, MoEIntermediate: s.Intermediate, Experts: lm.Or(c.Experts, defaultExperts), TopK: lm.Or(c.TopK, defaultTopK)}
	freq := lm.Or(c.MoEFrequency, defaultFrequency)
	switch {
	case o.Experts <= 0:
		return o, false, fmt.Errorf("%s: num_local_experts must be positive, got %d", where, o.Experts)
	case o.TopK <= 0 || o.TopK > o.Experts:
		return o, false, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_local_experts %d]", where, o.TopK, o.Experts)
	case freq <= 0:
		return o, false, fmt.Errorf("%s: moe_layer_frequency must be positive, got %d", where, freq)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, s.Layers); err != nil {
		return o, false, err
	}
	o.NormTopK = true // _moe_foreward divides the top weights by their sum, one expert's by itself
	o.Sparse = make([]bool, s.Layers)
	for i := range o.Sparse {
		o.Sparse[i] = (i+1)%freq == 0
	}
	return o, lm.Or(c.Parallel, false), nil
}

// New builds an ArcticForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, parallel, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	l := sequentialLayout
	if parallel {
		l = parallelLayout
	}
	return &Model{Model: qwen3moe.NewModelIn(o, l), Parallel: parallel}, nil
}

// Model is Arctic's decoder: a dense layer's block_sparse_moe.mlp is
// read as Llama's mlp (lm.Renamer).
type Model struct {
	*qwen3moe.Model
	// Parallel: the sparse blocks run beside the attention with the
	// residual MLP (parallel_attn_mlp_res, use_residual).
	Parallel bool
}

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Routed  = (*Model)(nil)
)

// dense maps a dense layer's ArcticMLP to Llama's names.
var dense = strings.NewReplacer(".block_sparse_moe.mlp.w1.", ".mlp.gate_proj.", ".block_sparse_moe.mlp.w3.", ".mlp.up_proj.",
	".block_sparse_moe.mlp.w2.", ".mlp.down_proj.")

// RenameWeight implements lm.Renamer: a dense layer's
// block_sparse_moe.mlp.{w1,w3,w2} is Llama's mlp.{gate,up,down}_proj.
func (m *Model) RenameWeight(stored string) string {
	if strings.Contains(stored, ".block_sparse_moe.mlp.") {
		return dense.Replace(stored)
	}
	return stored
}
