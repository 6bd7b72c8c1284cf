package olmoe

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// FlexOlmoForCausalLM (AllenAI's FlexOlmo: FlexOlmo-7x7B-1T and its RT
// build, 7 experts of which 5 are chosen), following transformers'
// models/flex_olmo/modular_flex_olmo.py: OLMoE's sparse block in OLMo 2's
// layer. No norm before the attention or the block; each one's output is
// RMS-normed (post_attention_layernorm, post_feedforward_layernorm,
// scaled in float32 as Olmo2RMSNorm does: llama.PostNorms and NormF32)
// before it joins the residual; q_norm and k_norm over the whole
// projections; the rotary in float32 (RopeF32, RopeTablesF32); no
// clip_qkv (the attention is Olmo2Attention's). The
// router is OLMoE's: the softmax of the logits, the top
// num_experts_per_tok, renormalized only with norm_topk_prob.
//
// post_feedforward_layernorm norms the experts' weighted sum, so the
// experts run only in the layer's graph (lm.InGraphExperts).

func init() {
	lm.Register("FlexOlmoForCausalLM", NewFlex)
}

// FlexDefaults are FlexOlmoConfig's (FlexOlmo-7x7B-1T's sizes): the
// attention heads as KV heads, eos 100257, no bos.
var FlexDefaults = llama.Defaults{
	VocabSize: 100352, Hidden: 4096, Intermediate: 11008, Layers: 32, Heads: 32,
	MaxPositions: 4096, Eps: 1e-6, RopeTheta: 500000, Tie: false, Act: "silu",
	EOS: []int{100257},
}

// FlexOlmoConfig's expert defaults.
const (
	flexExperts = 7
	flexTopK    = 5
)

// ResolveFlex reads a FlexOlmoForCausalLM config.json into the options of
// qwen3moe's decoder, every layer sparse.
func ResolveFlex(cfg *config.File) (qwen3moe.Options, error) {
	where := lm.ConfigName(cfg)
	var c struct {
		Config
		NumLocalExperts *int `json:"num_local_experts"` // FlexOlmoConfig's alias of num_experts
	}
	if err := cfg.Decode(&c); err != nil {
		return qwen3moe.Options{}, err
	}
	base, err := c.Resolve(cfg, FlexDefaults)
	if err != nil {
		return qwen3moe.Options{}, err
	}
	for _, k := range base.Spec.LayerKinds {
		if k != lm.KindFull {
			return qwen3moe.Options{}, errs.Unsupportedf("%s: layer_types names %q layers; FlexOlmo's layers all attend in full", where, k)
		}
	}
	base.OBias, base.MLPBias = base.QKVBias, false // attention_bias covers q, k, v and o; the experts have none
	base.Norms = llama.PostNorms
	base.QKNorm, base.QKNormAcross, base.NormF32 = true, true, true
	base.RopeF32, base.RopeTablesF32 = true, true // Olmo2Attention's rotary: float32 tables, q·cos in float32
	o := qwen3moe.Options{
		Options:         base,
		Experts:         lm.Or(c.NumExperts, lm.Or(c.NumLocalExperts, flexExperts)),
		TopK:            lm.Or(c.NumExpertsPerTok, flexTopK),
		MoEIntermediate: base.Spec.Intermediate,
		NormTopK:        lm.Or(c.NormTopKProb, false),
		Sparse:          make([]bool, base.Spec.Layers),
	}
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return qwen3moe.Options{}, fmt.Errorf("%s: num_experts %d must be positive and num_experts_per_tok %d in [1, num_experts]", where, o.Experts, o.TopK)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, base.Spec.Layers); err != nil {
		return qwen3moe.Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = true
	}
	return o, nil
}

// NewFlex builds a FlexOlmoForCausalLM from its config.json.
func NewFlex(cfg *config.File) (lm.Model, error) {
	o, err := ResolveFlex(cfg)
	if err != nil {
		return nil, err
	}
	return &FlexModel{qwen3moe.NewModel(o)}, nil
}

// FlexModel is the FlexOlmo decoder: qwen3moe's weights, attention and
// router, its sparse layers ending in post_feedforward_layernorm. It
// keeps qwen3moe's lm.Routed methods, whose Route would add the experts
// to the residual un-normed: InGraphExperts makes compile refuse every
// formulation that calls them (TestFlexHostRefused).
type FlexModel struct{ *qwen3moe.Model }

// Layer implements lm.Model: FlexOlmoDecoderLayer. x plus the normed
// attention (llama.Model.Attend with PostNorms), then plus
// post_feedforward_layernorm of the routed experts' weighted sum
// (nn.RoutedExperts over the stacks) on that un-normed x.
func (m *FlexModel) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	o := m.Options()
	x, h, kv := m.Attend(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d.mlp", i))
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	flat := Reshape(h, b*t, hd)
	ids, weights := nn.TopKRouter(nn.Linear(flat, p.Get("gate.weight"), nil), o.TopK, o.NormTopK)
	ep := p.Scope("experts")
	y := nn.RoutedExperts(flat, ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), o.Act, step.GatherExperts) // [N, H]
	return Add(x, m.PostMLP(i, w, Reshape(y, b, t, hd))), kv
}

// InGraphExperts implements lm.InGraphExperts.
func (m *FlexModel) InGraphExperts() string {
	return "post_feedforward_layernorm norms the routed experts' sum before it joins the residual"
}

var _ lm.InGraphExperts = (*FlexModel)(nil)
