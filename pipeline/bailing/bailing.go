// Package bailing implements BailingMoeV2ForCausalLM, inclusionAI's Ling
// 2.0 family (Ling-mini-2.0: 16B parameters of which 1.4B active;
// Ling-flash-2.0, Ling-1T, and the Ring-2.0 reasoning builds), following
// the modeling code the checkpoints ship (modeling_bailing_moe_v2.py,
// trust_remote_code; transformers has no class of its own for it) and
// its configuration class, BailingMoeV2Config.
//
// A Ling 2.0 decoder is GLM-4.5's (pipeline/deepseek's grouped-query
// mode) under other tensor names:
//   - grouped-query attention with the query, key and value projections
//     in one matrix, attention.query_key_value [(H + 2·KV)·D, hidden]
//     (a bias with use_qkv_bias), per-head RMSNorms over the queries and
//     keys before the rotary (use_qk_norm: attention.query_layernorm,
//     key_layernorm), the rotary on the first partial_rotary_factor (0.5)
//     of each head in the rotate-half convention, and attention.dense
//     (a bias with use_bias) after it;
//   - a dense SwiGLU MLP on the first first_k_dense_replace layers and a
//     sparse block on the others: the router mlp.gate (logits in float32,
//     sigmoid scores, mlp.gate.expert_bias added to choose), n_group
//     groups ranked by the sum of their two best choices of which the
//     topk_group best stay open — the others closed with −∞ (where
//     DeepSeek-V3 in transformers uses 0) —, the num_experts_per_tok best
//     experts weighed by their unbiased scores, renormalized (always with
//     more than one expert: the gate does not read norm_topk_prob) and
//     times routed_scaling_factor; and num_shared_experts always-on
//     experts, one SwiGLU MLP of moe_intermediate_size ×
//     num_shared_experts, whose output joins the routed experts' (a
//     config whose moe_shared_expert_intermediate_size, which llama.cpp
//     reads instead, differs is refused);
//   - model.word_embeddings, model.norm, an untied lm_head.
//
// The checkpoint's tensors are renamed to GLM-4.5's names as they are
// read (lm.Renamer). The multi-token-prediction layer a release holds
// past num_hidden_layers (num_nextn_predict_layers) is skipped, or read
// by --mtp for speculative decoding (MTP).
package bailing

import (
	"fmt"
	"regexp"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Architecture is the class this package registers.
const Architecture = "BailingMoeV2ForCausalLM"

func init() { lm.Register(Architecture, New) }

// Config is a BailingMoeV2ForCausalLM config.json: Llama's fields
// (hidden sizes, heads, head_dim, rope) and Ling's.
type Config struct {
	llama.Config
	UseQKVBias          *bool    `json:"use_qkv_bias"`
	UseQKNorm           *bool    `json:"use_qk_norm"`
	UseBias             *bool    `json:"use_bias"`
	NumExperts          *int     `json:"num_experts"`
	NumSharedExperts    *int     `json:"num_shared_experts"`
	NumExpertsPerTok    *int     `json:"num_experts_per_tok"`
	NGroup              *int     `json:"n_group"`
	TopKGroup           *int     `json:"topk_group"`
	RoutedScalingFactor *float64 `json:"routed_scaling_factor"`
	MoEIntermediateSize *int     `json:"moe_intermediate_size"`
	SharedIntermediate  *int     `json:"moe_shared_expert_intermediate_size"`
	FirstKDenseReplace  *int     `json:"first_k_dense_replace"`
	ScoreFunction       string   `json:"score_function"`
	NumNextNLayers      *int     `json:"num_nextn_predict_layers"`
	NormHead            *bool    `json:"norm_head"`
	UseRMSNorm          *bool    `json:"use_rmsnorm"`
}

// Defaults are BailingMoeV2Config's.
var Defaults = llama.Defaults{
	VocabSize: 30592, Hidden: 1024, Layers: 24, Heads: 16,
	MaxPositions: 16384, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
}

// The configuration class's other defaults.
const (
	defaultPartial     = 0.5
	defaultExperts     = 16
	defaultTopK        = 2
	defaultGroups      = 8
	defaultTopKGroup   = 4
	defaultRoutedScale = 2.5
	defaultUseBias     = true // the class's; every release sets false
)

// Resolve reads a BailingMoeV2ForCausalLM config.json into the options of
// pipeline/deepseek's grouped-query decoder.
func Resolve(cfg *config.File) (deepseek.Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return deepseek.Options{}, err
	}
	if f := c.ScoreFunction; f != "" && f != "sigmoid" {
		return deepseek.Options{}, errs.Unsupportedf("%s: score_function %q is not supported (BailingMoeV2Gate scores by sigmoid)", where, f)
	}
	// Neither is read by the modeling code; vLLM's loader normalizes
	// lm_head's columns under norm_head. Every release sets them false
	// and true.
	if lm.Or(c.NormHead, false) {
		return deepseek.Options{}, errs.Unsupportedf("%s: norm_head true (lm_head normalized, as vLLM's loader reads it) is not supported; every Ling 2.0 release sets it false", where)
	}
	if !lm.Or(c.UseRMSNorm, true) {
		return deepseek.Options{}, errs.Unsupportedf("%s: use_rmsnorm false is not supported; Ling 2.0's norms are RMSNorms", where)
	}
	if c.NumKeyValueHeads == nil {
		// BailingMoeV2Config defaults it to 0, which its attention cannot
		// divide by: every release states it.
		return deepseek.Options{}, fmt.Errorf("%s: num_key_value_heads is missing (BailingMoeV2Config's default, 0, builds no attention)", where)
	}
	withRope := *cfg
	withRope.Raw = nn.DefaultPartialRotary(cfg.Raw, defaultPartial)
	base, err := c.Config.Resolve(&withRope, Defaults)
	if err != nil {
		return deepseek.Options{}, err
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return deepseek.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; Ling 2.0's layers all attend in full", where, k)
		}
	}
	base.FusedQKV = true
	base.QKVBias = lm.Or(c.UseQKVBias, false)
	base.OBias = lm.Or(c.UseBias, defaultUseBias)
	base.MLPBias = false
	base.QKNorm = lm.Or(c.UseQKNorm, false)
	o := deepseek.Options{Options: base, GQA: true, MaskInf: true}
	if err := c.resolveMoE(where, &o); err != nil {
		return deepseek.Options{}, err
	}
	return o, nil
}

// resolveMoE reads the router and the experts into o, whose Spec is
// resolved.
func (c Config) resolveMoE(where string, o *deepseek.Options) error {
	s := &o.Spec
	o.Experts = lm.Or(c.NumExperts, defaultExperts)
	o.TopK = lm.Or(c.NumExpertsPerTok, defaultTopK)
	o.Groups = lm.Or(c.NGroup, defaultGroups)
	o.TopKGroup = lm.Or(c.TopKGroup, defaultTopKGroup)
	o.RoutedScale = lm.Or(c.RoutedScalingFactor, defaultRoutedScale)
	o.NormTopK = o.TopK > 1 // BailingMoeV2Gate renormalizes whenever top_k > 1
	first := lm.Or(c.FirstKDenseReplace, 0)
	shared := lm.Or(c.NumSharedExperts, 0)
	// The multi-token-prediction layers, read by Model.WithMTP (deepseek's
	// own MTP methods are not: Model's take their place).
	if o.MTPLayers = lm.Or(c.NumNextNLayers, 0); o.MTPLayers < 0 {
		return fmt.Errorf("%s: num_nextn_predict_layers must not be negative, got %d", where, o.MTPLayers)
	}
	switch {
	case o.Experts <= 0:
		return fmt.Errorf("%s: num_experts must be positive, got %d", where, o.Experts)
	case o.TopK <= 0 || o.TopK > o.Experts:
		return fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_experts %d]", where, o.TopK, o.Experts)
	case first < 0:
		return fmt.Errorf("%s: first_k_dense_replace must not be negative, got %d", where, first)
	case shared < 0:
		return fmt.Errorf("%s: num_shared_experts must not be negative, got %d", where, shared)
	}
	if o.Groups <= 0 || o.Experts%o.Groups != 0 || o.TopKGroup <= 0 || o.TopKGroup > o.Groups ||
		(o.Groups > 1 && o.Experts/o.Groups < 2) || o.TopK > o.TopKGroup*(o.Experts/o.Groups) {
		return fmt.Errorf("%s: n_group %d must divide num_experts %d into groups of two or more (one group of any size), topk_group %d be in [1, n_group], and the kept groups hold num_experts_per_tok %d",
			where, o.Groups, o.Experts, o.TopKGroup, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
		return err
	}
	o.Sparse = make([]bool, s.Layers)
	anySparse := false
	for i := range o.Sparse {
		o.Sparse[i] = i >= first
		anySparse = anySparse || o.Sparse[i]
	}
	if anySparse {
		if c.MoEIntermediateSize == nil || *c.MoEIntermediateSize <= 0 {
			return fmt.Errorf("%s: moe_intermediate_size must be set and positive (BailingMoeV2Config has no default for it)", where)
		}
		o.MoEIntermediate = *c.MoEIntermediateSize
		o.Shared = shared
		// The modeling code builds the shared experts moe_intermediate_size
		// × num_shared_experts wide and never reads
		// moe_shared_expert_intermediate_size; llama.cpp reads it in
		// moe_intermediate_size's place. The releases set both alike.
		if si := c.SharedIntermediate; si != nil && shared > 0 && *si != o.MoEIntermediate {
			return errs.Unsupportedf("%s: moe_shared_expert_intermediate_size %d differs from moe_intermediate_size %d, which is not supported: the modeling code builds the shared experts from the latter, llama.cpp from the former, and no release has them differ",
				where, *si, o.MoEIntermediate)
		}
	}
	return nil
}

// New builds a BailingMoeV2ForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{deepseek.NewModelIn(o, Layout)}, nil
}

// Layout names Ling 2.0's sparse blocks: the router's correction bias is
// mlp.gate.expert_bias, the experts and shared experts are named as
// DeepSeek-V3's.
var Layout = deepseek.Layout{Block: "mlp", Bias: "gate.expert_bias", Experts: lm.QwenExperts}

// Model is a Ling 2.0 decoder: deepseek's, reading the checkpoint under
// GLM-4.5's names. It implements lm.Renamer and lm.MultiToken.
type Model struct{ *deepseek.Model }

var _ lm.Renamer = (*Model)(nil)

// attentionName matches a layer's attention tensors as Ling names them.
var attentionName = regexp.MustCompile(`^(model\.layers\.\d+\.)attention\.(query_key_value|dense|query_layernorm|key_layernorm)\.(weight|bias)$`)

// renamedAttention maps Ling's attention modules to Llama's.
var renamedAttention = map[string]string{
	"query_key_value": "qkv_proj",
	"dense":           "o_proj",
	"query_layernorm": "q_norm",
	"key_layernorm":   "k_norm",
}

// RenameWeight implements lm.Renamer: model.word_embeddings is
// model.embed_tokens, attention.query_key_value self_attn.qkv_proj,
// attention.dense self_attn.o_proj, attention.query_layernorm and
// key_layernorm self_attn.q_norm and k_norm.
func (m *Model) RenameWeight(stored string) string {
	if stored == "model.word_embeddings.weight" {
		return "model.embed_tokens.weight"
	}
	if sub := attentionName.FindStringSubmatch(stored); sub != nil {
		return sub[1] + "self_attn." + renamedAttention[sub[2]] + "." + sub[3]
	}
	return stored
}

// MTPLayers implements lm.MultiToken: num_nextn_predict_layers.
func (m *Model) MTPLayers() int { return m.Options().MTPLayers }

// WithMTP implements lm.MultiToken: the model reading its head too. A
// head of several layers is refused: every release has one.
func (m *Model) WithMTP() (lm.MTPModel, error) {
	if n := m.MTPLayers(); n != 1 {
		return nil, errs.Unsupportedf("a multi-token-prediction head of %d layers (num_nextn_predict_layers): tputool runs a head of one layer, as every Ling 2.0 release has", n)
	}
	return &MTP{Model: m}, nil
}

// MTP is the model with its multi-token-prediction head,
// BailingMoeV2MTPLayer: the checkpoint's layer N = num_hidden_layers. At a
// position it reads the embedding of the next token and the model's final
// (normed) hidden state, each RMSNormed (enorm, hnorm), concatenated in
// that order and projected back to the hidden size by eh_proj, runs a
// decoder layer of the model's kind (grouped-query attention with a cache
// of its own, the sparse block) with its residuals, and norms the result
// by final_layernorm: that is what the model's lm_head makes logits of
// and what a chained draft step reads as its hidden state. Unlike
// DeepSeek's head (vLLM's), no embedding is zeroed at position 0: the
// modeling code's head reads every position's next token. It implements
// lm.MTPModel.
type MTP struct{ *Model }

var _ lm.MTPModel = (*MTP)(nil)

// prefix is the head's layer's tensor prefix, "model.layers.N.".
func (m *MTP) prefix() string { return fmt.Sprintf("model.layers.%d.", m.Spec().Layers) }

// SkipWeight implements lm.Skipper: the layers past the head's.
func (m *MTP) SkipWeight(name string) (string, bool) {
	if strings.HasPrefix(name, m.prefix()) {
		return "", false
	}
	return m.Model.SkipWeight(name)
}

// MTPWeights implements lm.MTPModel.
func (m *MTP) MTPWeights() []lm.WeightSpec {
	p, h := m.prefix(), m.Spec().Hidden
	ws := []lm.WeightSpec{
		{Name: p + "enorm.weight", Shape: []int{h}},
		{Name: p + "hnorm.weight", Shape: []int{h}},
		{Name: p + "eh_proj.weight", Shape: []int{h, 2 * h}, Matmul: true},
	}
	ws = append(ws, m.LayerWeights(m.Spec().Layers)...)
	return append(ws, lm.WeightSpec{Name: p + "final_layernorm.weight", Shape: []int{h}})
}

// MTPState implements lm.MTPModel: the head's layer's cache.
func (m *MTP) MTPState(batch, cacheLen int) []lm.StateSpec {
	return m.LayerState(m.Spec().Layers, batch, cacheLen)
}

// MTP implements lm.MTPModel.
func (m *MTP) MTP(w *lm.Params, tokens, hidden *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	n, eps := m.Spec().Layers, m.Options().Eps
	p := w.Scope(fmt.Sprintf("model.layers.%d", n))
	e := nn.RMSNorm(m.Embed(w, tokens), p.Get("enorm.weight"), eps, false)
	h := nn.RMSNorm(hidden, p.Get("hnorm.weight"), eps, false)
	x := nn.Linear(Concatenate([]*Node{e, h}, -1), p.Get("eh_proj.weight"), nil) // [B, T, H]
	x, st := m.Layer(n, w, x, state, step)
	return nn.RMSNorm(x, p.Get("final_layernorm.weight"), eps, false), st
}

// MTPHead implements lm.MTPModel: lm_head (or the tied embedding) on the
// head's normed output.
func (m *MTP) MTPHead(w *lm.Params, x *Node) *Node {
	head := "lm_head.weight"
	if m.Spec().TieEmbeddings {
		head = "model.embed_tokens.weight"
	}
	return nn.Linear(x, w.Get(head), nil)
}
