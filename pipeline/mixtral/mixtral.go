// Package mixtral implements MixtralForCausalLM, following transformers'
// models/mixtral/modeling_mixtral.py: "Mixtral of Experts" (Jiang et al.,
// 2024, arXiv:2401.04088), the Mixtral 8x7B and 8x22B releases and the
// models built on their layout.
//
// Each decoder layer is Mistral's attention (pipeline/mistral: no biases,
// an optional sliding window on every layer) followed by a sparse MoE block
// on every layer: a linear router (block_sparse_moe.gate) whose softmax
// over num_local_experts picks the top num_experts_per_tok, renormalized
// to sum to one, each expert a SwiGLU MLP of intermediate_size (w1 the
// gate, w3 the up, w2 the down projection). That is Qwen3-MoE's block with
// norm_topk_prob on and no dense layers, so the model is pipeline/qwen3moe's
// decoder reading Mixtral's names (qwen3moe.Layout): the experts run the
// same in-graph, host-routed and dense formulations, quantized and held
// formats.
//
// The Hub's checkpoints hold the experts one by one
// (model.layers.L.block_sparse_moe.experts.E.w1.weight); transformers v5
// renames the block to mlp and stacks the experts (mlp.experts.gate_up_proj
// [E, 2I, H], mlp.experts.down_proj [E, H, I]) in memory, and a checkpoint
// saved so is read too (lm.Renamer maps its names back).
package mixtral

import (
	"fmt"
	"regexp"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("MixtralForCausalLM", New)
}

// Config is a MixtralForCausalLM config.json: the Llama fields plus
// Mistral's window and the experts'.
type Config struct {
	llama.Config
	SlidingWindow    *int `json:"sliding_window"`
	NumLocalExperts  *int `json:"num_local_experts"`
	NumExperts       *int `json:"num_experts"` // MixtralConfig's attribute_map alias of num_local_experts
	NumExpertsPerTok *int `json:"num_experts_per_tok"`
}

// Defaults are MixtralConfig's defaults (Mixtral 8x7B's sizes).
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 4096 * 32, Eps: 1e-5, RopeTheta: 1e6, Tie: false, Act: "silu",
}

// Default expert counts of MixtralConfig.
const (
	defaultExperts = 8
	defaultTopK    = 2
	defaultKVHeads = 8
)

// Layout is Mixtral's checkpoint layout: the sparse block
// block_sparse_moe, experts w1, w3, w2.
var Layout = qwen3moe.Layout{Block: "block_sparse_moe", Experts: lm.MixtralExperts}

// Resolve reads a Mixtral config.json into the options of qwen3moe's
// decoder: every layer sparse, experts of intermediate_size, the top k
// renormalized.
func Resolve(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	if c.NumKeyValueHeads == nil && !cfg.Has("num_key_value_heads") {
		kv := defaultKVHeads // absent: MixtralConfig's 8; null: num_attention_heads
		c.NumKeyValueHeads = &kv
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	base.QKVBias, base.OBias, base.MLPBias = false, false, false
	if err := mistral.Window(cfg, c.SlidingWindow, 0, c.LayerTypes, &base.Spec); err != nil {
		return qwen3moe.Options{}, err
	}
	o := qwen3moe.Options{
		Options:         base,
		Experts:         lm.Or(c.NumLocalExperts, lm.Or(c.NumExperts, defaultExperts)),
		TopK:            lm.Or(c.NumExpertsPerTok, defaultTopK),
		MoEIntermediate: base.Spec.Intermediate,
		NormTopK:        true,
		Sparse:          make([]bool, base.Spec.Layers),
	}
	if o.Experts <= 0 {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_local_experts must be positive, got %d", where, o.Experts)
	}
	if o.TopK <= 0 || o.TopK > o.Experts {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_local_experts %d]", where, o.TopK, o.Experts)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, base.Spec.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{qwen3moe.NewModelIn(o, Layout)}, nil
}

// Model is a Mixtral decoder: qwen3moe's in Mixtral's layout, reading
// transformers v5's saves too. It implements lm.Routed and lm.Renamer.
type Model struct{ *qwen3moe.Model }

// v5Block matches a transformers v5 save's sparse block, which
// MixtralSparseMoeBlock's weight renaming calls mlp.
var v5Block = regexp.MustCompile(`^(model\.layers\.\d+\.)mlp\.`)

// RenameWeight implements lm.Renamer: a transformers v5 save's
// model.layers.L.mlp.* (the router mlp.gate.weight and the stacks
// mlp.experts.gate_up_proj and mlp.experts.down_proj) is read as
// model.layers.L.block_sparse_moe.* (Mixtral has no dense MLP the name
// could mean).
func (m *Model) RenameWeight(stored string) string {
	return v5Block.ReplaceAllString(stored, "${1}block_sparse_moe.")
}

var (
	_ lm.Routed  = (*Model)(nil)
	_ lm.Renamer = (*Model)(nil)
)
