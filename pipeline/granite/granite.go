// Package granite implements GraniteForCausalLM and GraniteMoeForCausalLM,
// following transformers' models/granite and models/granitemoe (IBM's
// Granite 3.x: granite-3.x-2b/8b, and the MoE granite-3.x-1b-a400m and
// 3b-a800m), GraniteMoeHybridForCausalLM (hybrid.go: Granite 4.0) and
// GraniteMoeSharedForCausalLM (shared.go, on the hybrid's decoder).
//
// Granite is Llama's decoder with four multipliers: the input embeddings
// times embedding_multiplier, the attention's scores scaled by
// attention_multiplier (in place of 1/sqrt(head_dim)), each attention and
// MLP output times residual_multiplier before its residual add, and the
// logits divided by logits_scaling (llama.Options' EmbedScale, AttnScale,
// ResidualScale and LogitsDivisor).
//
// GraniteMoe replaces every layer's MLP by block_sparse_moe: the router
// (router.layer, no bias) keeps the top num_experts_per_tok logits and
// weighs them by their softmax, which is the softmax over all experts
// renormalized over the chosen (Mixtral's router); the experts are two
// stacks, input_linear [experts, 2·intermediate_size, hidden] whose first
// half is the gate and second the up projection, and output_linear
// [experts, hidden, intermediate_size], the layout of pipeline/qwen3moe's
// stacks, so the decoder is qwen3moe's, the stacks read under its names
// (lm.Renamer), with residual_multiplier folded into the routing weights.
package granite

import (
	"fmt"
	"regexp"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

func init() {
	lm.Register("GraniteForCausalLM", New)
	lm.Register("GraniteMoeForCausalLM", New)
}

// Config is a GraniteForCausalLM or GraniteMoeForCausalLM config.json:
// Llama's fields, the multipliers and GraniteMoe's experts.
type Config struct {
	llama.Config
	EmbeddingMultiplier *float64 `json:"embedding_multiplier"`
	AttentionMultiplier *float64 `json:"attention_multiplier"`
	ResidualMultiplier  *float64 `json:"residual_multiplier"`
	LogitsScaling       *float64 `json:"logits_scaling"`
	NumLocalExperts     *int     `json:"num_local_experts"`
	NumExpertsPerTok    *int     `json:"num_experts_per_tok"`
}

// Defaults are GraniteConfig's and GraniteMoeConfig's (LlamaConfig's
// sizes; every multiplier 1; bos 1 and eos 2), which the hybrid and
// shared classes share.
var Defaults = llama.Defaults{
	VocabSize: 32000, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 2048, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	BOS: []int{1}, EOS: []int{2},
}

// GraniteMoeConfig's expert defaults.
const (
	defaultExperts = 8
	defaultTopK    = 2
)

// Resolve reads a Granite config.json into llama's options (with the
// multipliers); for GraniteMoe, moe is the experts' options.
func Resolve(cfg *config.File) (o llama.Options, moe *qwen3moe.Options, err error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return llama.Options{}, nil, err
	}
	if o, err = c.Config.Resolve(cfg, Defaults); err != nil {
		return llama.Options{}, nil, err
	}
	for _, k := range o.Spec.LayerKinds {
		if k != lm.KindFull {
			return llama.Options{}, nil, errs.Unsupportedf("%s: layer_types names %q layers; Granite's layers all attend in full", where, k)
		}
	}
	if err := c.multipliers(where, &o); err != nil {
		return llama.Options{}, nil, err
	}
	if cfg.Architecture() != "GraniteMoeForCausalLM" {
		return o, nil, nil
	}
	if c.MLPBias {
		return llama.Options{}, nil, errs.Unsupportedf("%s: mlp_bias is true; GraniteMoe's experts have no biases", where)
	}
	mo := qwen3moe.Options{
		Options:         o,
		Experts:         lm.Or(c.NumLocalExperts, defaultExperts),
		TopK:            lm.Or(c.NumExpertsPerTok, defaultTopK),
		MoEIntermediate: o.Spec.Intermediate,
		NormTopK:        true, // the softmax over the top k logits
		Sparse:          make([]bool, o.Spec.Layers),
	}
	if mo.Experts <= 0 || mo.TopK <= 0 || mo.TopK > mo.Experts {
		return llama.Options{}, nil, fmt.Errorf("%s: num_local_experts %d must be positive and num_experts_per_tok %d in [1, num_local_experts]", where, mo.Experts, mo.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", mo.Experts, o.Spec.Layers); err != nil {
		return llama.Options{}, nil, err
	}
	for i := range mo.Sparse {
		mo.Sparse[i] = true
	}
	return o, &mo, nil
}

// multipliers sets o's four multipliers from c (1 where absent),
// each checked positive.
func (c *Config) multipliers(where string, o *llama.Options) error {
	for _, m := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"embedding_multiplier", c.EmbeddingMultiplier, &o.EmbedScale}, {"attention_multiplier", c.AttentionMultiplier, &o.AttnScale},
		{"residual_multiplier", c.ResidualMultiplier, &o.ResidualScale}, {"logits_scaling", c.LogitsScaling, &o.LogitsDivisor}} {
		*m.dst = lm.Or(m.v, 1)
		if !(*m.dst > 0) {
			return fmt.Errorf("%s: %s must be positive, got %g", where, m.name, *m.dst)
		}
	}
	return nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, moe, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	if moe == nil {
		return llama.NewModel(o), nil
	}
	return &MoEModel{qwen3moe.NewModelIn(*moe, Layout)}, nil
}

// Layout is qwen3moe's layout under GraniteMoe's module name; the
// checkpoints' own names are renamed to it (MoEModel.RenameWeight).
var Layout = qwen3moe.Layout{Block: "block_sparse_moe", Experts: lm.QwenExperts}

// MoEModel is a GraniteMoe decoder: qwen3moe's, reading GraniteMoe's
// names. It implements lm.Routed and lm.Renamer.
type MoEModel struct{ *qwen3moe.Model }

// graniteMoE matches GraniteMoe's sparse-block tensors.
var graniteMoE = regexp.MustCompile(`^(model\.layers\.\d+\.block_sparse_moe\.)(router\.layer|input_linear|output_linear)\.weight$`)

// RenameWeight implements lm.Renamer (renameMoE).
func (m *MoEModel) RenameWeight(stored string) string { return renameMoE(stored) }

// renameMoE reads GraniteMoe's sparse-block names under qwen3moe's:
// router.layer.weight as gate.weight, input_linear.weight as the experts'
// gate_up_proj stack and output_linear.weight as their down_proj stack.
func renameMoE(stored string) string {
	sub := graniteMoE.FindStringSubmatch(stored)
	if sub == nil {
		return stored
	}
	switch sub[2] {
	case "router.layer":
		return sub[1] + "gate.weight"
	case "input_linear":
		return sub[1] + "experts.gate_up_proj"
	default:
		return sub[1] + "experts.down_proj"
	}
}

var (
	_ lm.Routed  = (*MoEModel)(nil)
	_ lm.Renamer = (*MoEModel)(nil)
)
