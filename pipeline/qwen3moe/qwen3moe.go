// Package qwen3moe implements the Qwen mixture-of-experts decoders,
// following transformers' models/qwen3_moe/modeling_qwen3_moe.py
// (Qwen3MoeForCausalLM, "Qwen3 Technical Report", Yang et al., 2025,
// arXiv:2505.09388) and models/qwen2_moe/modular_qwen2_moe.py
// (Qwen2MoeForCausalLM, the Qwen1.5-MoE / Qwen2-57B-A14B line with a
// shared expert).
//
// Each decoder layer is Qwen3's (Qwen2's) attention followed, on the layers
// that decoder_sparse_step and mlp_only_layers select, by a sparse MoE
// block: a linear router (mlp.gate) whose softmax picks the top
// num_experts_per_tok experts of num_experts (renormalized when
// norm_topk_prob), each expert a SwiGLU MLP of moe_intermediate_size, plus
// for Qwen2-MoE a shared expert scaled by sigmoid(shared_expert_gate).
// Other families reuse it with their Layout (Mixtral's names, HunYuan's
// float32 router and ungated shared MLP).
//
// A layer's experts are held stacked, as transformers v5 stores them
// (Qwen3MoeExperts): experts.gate_up_proj [E, 2I, H], each expert's gate
// rows then its up rows, and experts.down_proj [E, H, I]. Checkpoints in
// the older layout (experts.{e}.{gate,up,down}_proj.weight, which the Hub's
// Qwen MoE repositories hold) are assembled into the stacks at load
// (lm.WeightSpec.Parts). Layer runs the experts in one static-shape graph
// (nn.GatheredExperts: each token's K chosen experts' matrices are
// gathered by index, so a step computes only the chosen experts, with no
// host round trip and one executable per shape bucket). The model also
// implements lm.Routed, for compile/'s host-routed and dense formulations,
// which read the experts one by one.
package qwen3moe

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Qwen3MoeForCausalLM", New)
	lm.Register("Qwen2MoeForCausalLM", New)
}

// Config is a Qwen3MoeForCausalLM or Qwen2MoeForCausalLM config.json: the
// Llama fields plus the MoE ones.
type Config struct {
	llama.Config
	UseSlidingWindow             bool  `json:"use_sliding_window"`
	DecoderSparseStep            *int  `json:"decoder_sparse_step"`
	MoEIntermediateSize          *int  `json:"moe_intermediate_size"`
	NumExpertsPerTok             *int  `json:"num_experts_per_tok"`
	NumExperts                   *int  `json:"num_experts"`
	NumLocalExperts              *int  `json:"num_local_experts"`
	NormTopKProb                 *bool `json:"norm_topk_prob"`
	MLPOnlyLayers                []int `json:"mlp_only_layers"`
	SharedExpertIntermediateSize *int  `json:"shared_expert_intermediate_size"`
	QKVBias                      *bool `json:"qkv_bias"`
}

// moeDefaults are the MoE defaults of Qwen3MoeConfig and Qwen2MoeConfig.
type moeDefaults struct {
	llama.Defaults
	Experts, TopK, MoEIntermediate, SharedIntermediate int
}

var (
	// Qwen3Defaults are Qwen3MoeConfig's defaults.
	Qwen3Defaults = moeDefaults{
		Defaults: llama.Defaults{VocabSize: 151936, Hidden: 2048, Intermediate: 6144, Layers: 24, Heads: 32,
			MaxPositions: 32768, Eps: 1e-6, RopeTheta: 10000, Act: "silu"},
		Experts: 128, TopK: 8, MoEIntermediate: 768,
	}
	// Qwen2Defaults are Qwen2MoeConfig's defaults.
	Qwen2Defaults = moeDefaults{
		Defaults: llama.Defaults{VocabSize: 151936, Hidden: 2048, Intermediate: 5632, Layers: 24, Heads: 16,
			MaxPositions: 32768, Eps: 1e-6, RopeTheta: 10000, Act: "silu"},
		Experts: 60, TopK: 4, MoEIntermediate: 1408, SharedIntermediate: 5632,
	}
)

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	// Experts, TopK and MoEIntermediate are num_experts,
	// num_experts_per_tok and moe_intermediate_size; NormTopK is
	// norm_topk_prob.
	Experts, TopK, MoEIntermediate int
	NormTopK                       bool
	// SharedIntermediate is the shared expert's size (Qwen2-MoE), 0 for
	// none.
	SharedIntermediate int
	// Sparse[i] reports that layer i has the MoE block (otherwise a dense
	// MLP of intermediate_size).
	Sparse []bool
	// SparseMixer routes by Phi-3.5-MoE's sparsemixer
	// (nn.SparseMixerRouter, two experts, JitterEps its
	// router_jitter_noise) instead of the softmax's top k; TopK is 2.
	SparseMixer bool
	JitterEps   float64
	// SigmoidRouter weighs the top k experts by the sigmoids of their
	// logits, renormalized to sum to one (SmallThinker's router without
	// moe_primary_router_apply_softmax), instead of the softmax's.
	SigmoidRouter bool
}

// Resolve reads a Qwen3-MoE or Qwen2-MoE config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	qwen2 := cfg.Architecture() == "Qwen2MoeForCausalLM"
	d := Qwen3Defaults
	if qwen2 {
		d = Qwen2Defaults
	} else if c.NumKeyValueHeads == nil {
		kv := 4 // Qwen3MoeConfig's num_key_value_heads
		c.NumKeyValueHeads = &kv
	}
	if c.UseSlidingWindow {
		return Options{}, errs.Unsupportedf("%s: use_sliding_window is true; sliding-window attention is not supported for %s", where, cfg.Architecture())
	}
	base, err := c.Resolve(cfg, d.Defaults)
	if err != nil {
		return Options{}, err
	}
	o := Options{Options: base}
	o.MLPBias = false // Qwen MoE MLPs and experts have no biases (no mlp_bias field)
	if qwen2 {
		o.QKVBias, o.OBias = true, false
		if c.QKVBias != nil {
			o.QKVBias = *c.QKVBias
		}
	} else {
		o.QKNorm = true
	}
	o.Experts = lm.Or(c.NumExperts, lm.Or(c.NumLocalExperts, d.Experts))
	o.TopK = lm.Or(c.NumExpertsPerTok, d.TopK)
	o.MoEIntermediate = lm.Or(c.MoEIntermediateSize, d.MoEIntermediate)
	if qwen2 {
		o.SharedIntermediate = lm.Or(c.SharedExpertIntermediateSize, d.SharedIntermediate)
	}
	if c.NormTopKProb != nil {
		o.NormTopK = *c.NormTopKProb
	}
	step := lm.Or(c.DecoderSparseStep, 1)
	if step <= 0 {
		return Options{}, fmt.Errorf("%s: decoder_sparse_step must be positive, got %d", where, step)
	}
	if o.Experts < 0 || o.MoEIntermediate <= 0 || o.SharedIntermediate < 0 {
		return Options{}, fmt.Errorf("%s: num_experts %d, moe_intermediate_size %d and shared_expert_intermediate_size %d must not be negative (the sizes positive)",
			where, o.Experts, o.MoEIntermediate, o.SharedIntermediate)
	}
	if o.Experts > 0 && (o.TopK <= 0 || o.TopK > o.Experts) {
		return Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_experts %d]", where, o.TopK, o.Experts)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, o.Spec.Layers); err != nil {
		return Options{}, err
	}
	if o.Sparse, err = lm.SparseLayers(where, step, c.MLPOnlyLayers, o.Spec.Layers); err != nil {
		return Options{}, err
	}
	for i := range o.Sparse {
		o.Sparse[i] = o.Sparse[i] && o.Experts > 0
	}
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is a Qwen MoE decoder; it implements lm.Routed. It is the Llama
// decoder (pipeline/llama, with Qwen3's or Qwen2's options) whose sparse
// layers replace the MLP by the MoE block: embedding, head, layer state and
// the dense layers are llama.Model's, and sparse layers build on its Attend.
type Model struct {
	*llama.Model
	o Options
	l Layout
}

// Layout names a sparse block's tensors within a decoder layer.
type Layout struct {
	// Block is the MoE block's module in the layer: "mlp" (Qwen's
	// checkpoints and every transformers v5 save), "block_sparse_moe"
	// (Mixtral's). The router is BLOCK.gate.weight (or Router), the
	// experts BLOCK.experts.*.
	Block string
	// Experts names each expert's matrices in checkpoints that hold them
	// one by one.
	Experts lm.ExpertNames
	// Router is the router's name within the block, "gate.weight" when
	// empty (HunYuan's "gate.wg.weight").
	Router string
	// RouterF32 holds the router in float32 and computes its logits from
	// the hidden state cast to float32 (HunYuan's wg, made float32). Such
	// a router is read as stored, never as a quantized checkpoint's
	// matrix (vLLM builds HunYuan's gate unquantized too).
	RouterF32 bool
	// SharedMLP names an unrouted, ungated SwiGLU of SharedIntermediate
	// beside the experts (HunYuan's "shared_mlp": BLOCK.SharedMLP.
	// {gate,up,down}_proj.weight); empty: Qwen2-MoE's shared_expert,
	// scaled by sigmoid(shared_expert_gate).
	SharedMLP string
	// RouterOnInput computes the router's logits from the layer's input,
	// the residual stream before input_layernorm, instead of the MLP's
	// normed input (SmallThinker's pre-attention router).
	RouterOnInput bool
	// MoEOnInput runs the whole sparse block, router and experts, on the
	// MLP's norm (Norms.PreMLP: post_attention_layernorm) of the layer's
	// input instead of the stream after the attention: the block runs
	// beside the attention (Arctic's parallel_attn_mlp_res).
	MoEOnInput bool
	// ResidualMLP names a dense SwiGLU of the hidden width beside the
	// experts (Arctic's residual_mlp, its projections named as
	// ResidualNames names them), run on ResidualNorm of the stream after
	// the attention and added to it; "" for none.
	ResidualMLP, ResidualNorm string
	ResidualNames             lm.ExpertNames
}

// router is the router's name within the block.
func (l Layout) router() string {
	if l.Router == "" {
		return "gate.weight"
	}
	return l.Router
}

// QwenLayout is the Qwen MoE checkpoints' layout.
var QwenLayout = Layout{Block: "mlp", Experts: lm.QwenExperts}

// NewModel returns the decoder for resolved options, reading Qwen's
// layout.
func NewModel(o Options) *Model { return NewModelIn(o, QwenLayout) }

// NewModelIn returns the decoder for resolved options reading the sparse
// blocks in layout l.
func NewModelIn(o Options, l Layout) *Model {
	return &Model{Model: llama.NewModel(o.Options), o: o, l: l}
}

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// block is layer i's sparse block's name prefix, "model.layers.I.mlp".
func (m *Model) block(i int) string { return fmt.Sprintf("model.layers.%d.%s", i, m.l.Block) }

// expertsPrefix is layer i's "….mlp.experts" name prefix.
func (m *Model) expertsPrefix(i int) string { return m.block(i) + ".experts" }

// LayerWeights implements lm.Model: attention and norms, then either the
// MoE block (router, expert stacks, shared expert) or a dense MLP.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	if !m.o.Sparse[i] {
		return m.Model.LayerWeights(i)
	}
	s := m.Spec()
	ws := m.AttentionWeights(i)
	router := lm.WeightSpec{Name: m.block(i) + "." + m.l.router(), Shape: []int{m.o.Experts, s.Hidden}, Matmul: true, TP: lm.Replicated, Router: true}
	if m.l.RouterF32 { // held whole in float32: not a matrix the backends may hold otherwise
		router.Matmul, router.F32 = false, true
	}
	ws = append(ws, router)
	ws = append(ws, m.l.Experts.Stacked(m.expertsPrefix(i), m.o.Experts, m.o.MoEIntermediate, s.Hidden)...)
	if m.l.ResidualMLP != "" {
		p, n := fmt.Sprintf("model.layers.%d.%s.", i, m.l.ResidualMLP), m.l.ResidualNames
		ws = append(ws,
			lm.WeightSpec{Name: p + n.Gate, Shape: []int{s.Hidden, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: p + n.Up, Shape: []int{s.Hidden, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: p + n.Down, Shape: []int{s.Hidden, s.Hidden}, Matmul: true, TP: lm.Row})
		ws = append(ws, m.NormWeights(fmt.Sprintf("model.layers.%d.%s", i, m.l.ResidualNorm))...)
	}
	switch si := m.o.SharedIntermediate; {
	case si > 0 && m.l.SharedMLP != "":
		p := m.block(i) + "." + m.l.SharedMLP
		ws = append(ws,
			lm.WeightSpec{Name: p + ".gate_proj.weight", Shape: []int{si, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: p + ".up_proj.weight", Shape: []int{si, s.Hidden}, Matmul: true, TP: lm.Column},
			lm.WeightSpec{Name: p + ".down_proj.weight", Shape: []int{s.Hidden, si}, Matmul: true, TP: lm.Row})
	case si > 0:
		ws = append(ws, lm.SharedExpertWeights(m.block(i), si, s.Hidden)...)
	}
	return ws
}

// Experts implements lm.Routed: expert e reads its parts of the stacks.
func (m *Model) Experts(i int) *lm.Experts {
	if !m.o.Sparse[i] {
		return nil
	}
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return m.l.Experts.Weights(m.expertsPrefix(i), e, m.o.MoEIntermediate, m.Spec().Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of moe_intermediate_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p, n := w.Scope(fmt.Sprintf("%s.%d", m.expertsPrefix(i), e)), m.l.Experts
	return nn.GatedMLP(x, p.Get(n.Gate), nil, p.Get(n.Up), nil, p.Get(n.Down), nil, m.o.Act)
}

// Route implements lm.Routed: pre-norm attention with its residual, the
// post-attention norm (llama.Model.Attend), the router's top-k choice
// (from the hidden state, in float32 with Layout.RouterF32, or from the
// layer's input with Layout.RouterOnInput; softmax, sparsemixer or
// sigmoid weights) and the shared
// expert, Qwen2-MoE's gated or (Layout.SharedMLP) HunYuan's ungated,
// which is added to the residual.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	in := x
	x, h, kv := m.Attend(i, w, x, state, step)
	mp := w.Scope(m.block(i))
	if m.l.ResidualMLP != "" || m.l.MoEOnInput {
		lp := w.Scope(fmt.Sprintf("model.layers.%d", i))
		if m.l.ResidualMLP != "" {
			rp, n := lp.Scope(m.l.ResidualMLP), m.l.ResidualNames
			r := m.Norm(lp, m.l.ResidualNorm, x)
			x = Add(x, m.Residual(nn.GatedMLP(r, rp.Get(n.Gate), nil, rp.Get(n.Up), nil, rp.Get(n.Down), nil, m.o.Act)))
		}
		if m.l.MoEOnInput { // the MLP's norm (Norms.PreMLP) on the layer's input
			pre := m.o.Norms.PreMLP
			if m.o.Norms == (llama.Norms{}) {
				pre = llama.LlamaNorms.PreMLP
			}
			h = m.Norm(lp, pre, in)
		}
	}
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	rin := h
	if m.l.RouterOnInput {
		rin = in
	}
	hr := Reshape(rin, b*t, m.Spec().Hidden)
	if m.l.RouterF32 {
		hr = ConvertDType(hr, dtypes.Float32)
	}
	logits := nn.Linear(hr, mp.Get(m.l.router()), nil) // [N, E]
	var ids, weights *Node                             // [N, K]
	switch {
	case m.o.SparseMixer:
		ids, weights = nn.SparseMixerRouter(logits, m.o.JitterEps)
	case m.o.SigmoidRouter:
		ids, weights = nn.SigmoidTopKRouter(logits, m.o.TopK)
	default:
		ids, weights = nn.TopKRouter(logits, m.o.TopK, m.o.NormTopK)
	}
	if s := m.o.ResidualScale; s != 0 && s != 1 {
		weights = MulScalar(weights, s) // Granite's residual_multiplier on the experts' sum
	}
	switch {
	case m.o.SharedIntermediate > 0 && m.l.SharedMLP != "":
		sp := mp.Scope(m.l.SharedMLP)
		x = Add(x, m.Residual(nn.GatedMLP(h, sp.Get("gate_proj.weight"), nil, sp.Get("up_proj.weight"), nil, sp.Get("down_proj.weight"), nil, m.o.Act)))
	case m.o.SharedIntermediate > 0:
		x = Add(x, m.Residual(nn.SharedExpert(h, mp.Get("shared_expert.gate_proj.weight"), mp.Get("shared_expert.up_proj.weight"),
			mp.Get("shared_expert.down_proj.weight"), mp.Get("shared_expert_gate.weight"), m.o.Act)))
	}
	return &lm.Routing{
		Residual: x,
		Input:    h,
		Experts:  Reshape(ids, b, t, m.o.TopK),
		Weights:  Reshape(weights, b, t, m.o.TopK),
	}, kv
}

// Layer implements lm.Model. Dense layers are llama.Model's (attention plus
// MLP); MoE layers run the experts gathered by the router's choice
// over the stacks (nn.FinishRouted).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	if !m.o.Sparse[i] {
		return m.Model.Layer(i, w, x, state, step)
	}
	r, st := m.Route(i, w, x, state, step)
	p := w.Scope(m.expertsPrefix(i))
	return nn.FinishRouted(r, p.Get("gate_up_proj"), p.Get("down_proj"), m.o.Act, step.GatherExperts), st
}

var _ lm.Routed = (*Model)(nil)
