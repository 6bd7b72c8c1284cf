// Package deepseekv1 implements DeepseekForCausalLM, DeepSeek's first
// mixture of experts (deepseek-moe-16b-base and -chat: 16.4B parameters,
// 2.8B active), following the modeling code the checkpoints ship as
// remote code (modeling_deepseek.py, read here through published copies
// of its MoEGate) and vLLM's models/deepseek.py for the rest of the
// layer. llama.cpp's "deepseek" graph runs the releases' settings alike
// (it never divides the top weights and puts the experts on every layer
// after the dense ones). transformers has no class for it; its
// successors, DeepSeek-V2 and V3, are pipeline/deepseek's.
//
// A layer is Llama's (grouped-query attention without biases, RMSNorms,
// the rotary over whole heads), its MLP a sparse block on the layers
// from first_k_dense_replace on that moe_layer_freq divides, a dense
// SwiGLU of intermediate_size on the others:
//   - the router mlp.gate [n_routed_experts, hidden] takes the softmax's
//     num_experts_per_tok largest (scoring_func softmax, the only one),
//     divided by their sum when norm_topk_prob and more than one is
//     taken, as MoEGate does (vLLM divides with one too; deepseek-moe-16b
//     does not divide);
//   - n_routed_experts SwiGLU experts of moe_intermediate_size,
//     mlp.experts.E.{gate,up,down}_proj;
//   - n_shared_experts always-on experts, one SwiGLU MLP of
//     moe_intermediate_size × n_shared_experts (mlp.shared_experts), added
//     without a gate.
//
// It runs on pipeline/qwen3moe's decoder (Layout.SharedMLP), where every
// experts formulation and held form applies. A config without
// n_routed_experts is a dense Llama.
package deepseekv1

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Architecture is the class this package registers.
const Architecture = "DeepseekForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a DeepseekForCausalLM config.json: Llama's fields and
// DeepseekConfig's.
type Config struct {
	llama.Config
	RoutedExperts *int   `json:"n_routed_experts"`
	SharedExperts *int   `json:"n_shared_experts"`
	TopK          *int   `json:"num_experts_per_tok"`
	MoEWidth      *int   `json:"moe_intermediate_size"`
	MoELayerFreq  *int   `json:"moe_layer_freq"`
	FirstKDense   *int   `json:"first_k_dense_replace"`
	NormTopKProb  *bool  `json:"norm_topk_prob"`
	ScoringFunc   string `json:"scoring_func"`
}

// Defaults are DeepseekConfig's.
var Defaults = llama.Defaults{
	VocabSize: 102400, Hidden: 4096, Intermediate: 11008, Layers: 30, Heads: 32,
	MaxPositions: 2048, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	BOS: []int{100000}, EOS: []int{100001},
}

// DeepseekConfig's moe_intermediate_size default.
const defaultMoEWidth = 1407

// Layout names DeepSeek's sparse blocks: mlp.gate, mlp.experts.E.*,
// the ungated mlp.shared_experts.
var Layout = qwen3moe.Layout{Block: "mlp", Experts: lm.QwenExperts, SharedMLP: "shared_experts"}

// Resolve reads a DeepseekForCausalLM config.json into the options of
// pipeline/qwen3moe's decoder.
func Resolve(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	base, err := c.Config.Resolve(cfg, Defaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	s := &base.Spec
	o := qwen3moe.Options{Options: base, Sparse: make([]bool, s.Layers)}
	if c.RoutedExperts == nil { // a dense model
		return o, nil
	}
	if f := c.ScoringFunc; f != "" && f != "softmax" {
		return qwen3moe.Options{}, errs.Unsupportedf("%s: scoring_func %q is not supported for %s (softmax is)", where, f, Architecture)
	}
	o.Experts, o.TopK = *c.RoutedExperts, lm.Or(c.TopK, 0)
	o.MoEIntermediate = lm.Or(c.MoEWidth, defaultMoEWidth)
	freq, first := lm.Or(c.MoELayerFreq, 1), lm.Or(c.FirstKDense, 0)
	switch {
	case o.Experts <= 0:
		return qwen3moe.Options{}, fmt.Errorf("%s: n_routed_experts must be positive, got %d", where, o.Experts)
	case o.TopK <= 0 || o.TopK > o.Experts:
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, n_routed_experts %d]", where, o.TopK, o.Experts)
	case o.MoEIntermediate <= 0:
		return qwen3moe.Options{}, fmt.Errorf("%s: moe_intermediate_size must be positive, got %d", where, o.MoEIntermediate)
	case freq <= 0:
		return qwen3moe.Options{}, fmt.Errorf("%s: moe_layer_freq must be positive, got %d", where, freq)
	case first < 0:
		return qwen3moe.Options{}, fmt.Errorf("%s: first_k_dense_replace must not be negative, got %d", where, first)
	}
	if err := lm.CheckExperts(where, "n_routed_experts", o.Experts, s.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	// MoEGate divides the top weights only when it takes more than one.
	o.NormTopK = lm.Or(c.NormTopKProb, false) && o.TopK > 1
	if n := lm.Or(c.SharedExperts, 0); n > 0 {
		o.SharedIntermediate = o.MoEIntermediate * n
	} else if n < 0 {
		return qwen3moe.Options{}, fmt.Errorf("%s: n_shared_experts must not be negative, got %d", where, n)
	}
	for i := range o.Sparse {
		o.Sparse[i] = i >= first && i%freq == 0
	}
	return o, nil
}

// New builds a DeepseekForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return qwen3moe.NewModelIn(o, Layout), nil
}
