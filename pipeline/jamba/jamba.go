// Package jamba implements AI21's Jamba (JambaForCausalLM: Jamba-v0.1,
// Jamba-1.5 and 1.6 Mini and Large, Jamba Reasoning 3B), following
// transformers' models/jamba/modular_jamba.py.
//
// Jamba interleaves Mamba-1 layers with attention layers (one in
// attn_layer_period, at attn_layer_offset) and dense MLPs with sparse
// mixture-of-experts blocks (one in expert_layer_period, at
// expert_layer_offset). Every layer is input_layernorm, its mixer and the
// residual, then pre_ff_layernorm, its feed_forward and the residual:
//
//   - attention: Llama's grouped-query attention without biases and
//     without any position embedding (no rotary);
//   - Mamba: the Mamba-1 mixer (nn.Mamba1) with RMSNorms, with weights,
//     over dt's low-rank input, B and C (dt_layernorm, b_layernorm,
//     c_layernorm; rms_norm_eps);
//   - feed_forward: a SwiGLU MLP, or the router's softmax top
//     num_experts_per_tok experts of num_experts, weighted by their
//     probabilities without renormalizing (JambaSparseMoeBlock), each a
//     SwiGLU of intermediate_size.
//
// The final norm is model.final_layernorm. The model implements
// lm.Routed, so the experts run in the graph, host-routed or dense.
package jamba

import (
	"encoding/json"
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("JambaForCausalLM", New)
}

// Config is a JambaForCausalLM config.json.
type Config struct {
	llama.Config
	NumExperts        *int            `json:"num_experts"`
	NumExpertsPerTok  *int            `json:"num_experts_per_tok"`
	ExpertLayerPeriod *int            `json:"expert_layer_period"`
	ExpertLayerOffset *int            `json:"expert_layer_offset"`
	AttnLayerPeriod   *int            `json:"attn_layer_period"`
	AttnLayerOffset   *int            `json:"attn_layer_offset"`
	MambaDState       *int            `json:"mamba_d_state"`
	MambaDConv        *int            `json:"mamba_d_conv"`
	MambaExpand       *int            `json:"mamba_expand"`
	MambaDtRank       json.RawMessage `json:"mamba_dt_rank"` // an int or "auto"
	MambaConvBias     *bool           `json:"mamba_conv_bias"`
	MambaProjBias     *bool           `json:"mamba_proj_bias"`
}

// Defaults are JambaConfig's (Jamba-v0.1's sizes): a vocabulary of 65536,
// hidden 4096, MLP 14336, 32 layers of 32 heads over 8 KV heads,
// rms_norm_eps 1e-6, 262144 positions, untied, bos 1 and eos 2.
var Defaults = llama.Defaults{
	VocabSize: 65536, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32,
	MaxPositions: 262144, Eps: 1e-6, RopeTheta: 10000, Tie: false, Act: "silu",
	KVHeads: 8, BOS: []int{1}, EOS: []int{2},
}

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	Mamba              nn.Mamba1Dims
	ConvBias, ProjBias bool
	// Experts and TopK are num_experts and num_experts_per_tok; Sparse[i]
	// reports that layer i's feed_forward is the experts' block.
	Experts, TopK int
	Sparse        []bool
}

// Resolve reads a JambaForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return Options{}, err
	}
	s := &base.Spec
	o := Options{Options: base, Experts: lm.Or(c.NumExperts, 16), TopK: lm.Or(c.NumExpertsPerTok, 2), Sparse: make([]bool, s.Layers)}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false // JambaAttention and JambaMLP have none
	o.Norms = llama.Norms{PreAttn: "input_layernorm", PreMLP: "pre_ff_layernorm"}
	o.FinalNorm = "model.final_layernorm"
	attnPeriod, attnOffset := lm.Or(c.AttnLayerPeriod, 8), lm.Or(c.AttnLayerOffset, 4)
	expPeriod, expOffset := lm.Or(c.ExpertLayerPeriod, 2), lm.Or(c.ExpertLayerOffset, 1)
	if attnPeriod <= 0 || attnOffset < 0 || attnOffset >= attnPeriod || expPeriod <= 0 || expOffset < 0 || expOffset >= expPeriod {
		return Options{}, fmt.Errorf("%s: attn_layer_period %d / offset %d and expert_layer_period %d / offset %d: want periods positive and offsets in [0, period)", where, attnPeriod, attnOffset, expPeriod, expOffset)
	}
	o.NoRope = make([]bool, s.Layers)
	for i := range s.Layers {
		o.NoRope[i] = true // no position embedding anywhere
		s.LayerKinds[i] = nn.KindMamba1
		if i%attnPeriod == attnOffset {
			s.LayerKinds[i] = lm.KindFull
		}
		o.Sparse[i] = o.Experts > 1 && i%expPeriod == expOffset
	}
	if o.Experts > 1 {
		if o.TopK <= 0 || o.TopK > o.Experts {
			return Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_experts %d]", where, o.TopK, o.Experts)
		}
		if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
			return Options{}, err
		}
	}
	hidden := s.Hidden
	d := nn.Mamba1Dims{Inner: lm.Or(c.MambaExpand, 2) * hidden, State: lm.Or(c.MambaDState, 16), ConvKernel: lm.Or(c.MambaDConv, 4), Rank: int(math.Ceil(float64(hidden) / 16))}
	var rank int
	switch err := json.Unmarshal(c.MambaDtRank, &rank); {
	case len(c.MambaDtRank) == 0 || string(c.MambaDtRank) == `"auto"` || string(c.MambaDtRank) == "null":
	case err != nil:
		return Options{}, fmt.Errorf("%s: mamba_dt_rank: expected an integer or \"auto\": %w", where, err)
	default:
		d.Rank = rank
	}
	if d.Inner <= 0 || d.State <= 0 || d.Rank <= 0 || d.ConvKernel < 2 {
		return Options{}, fmt.Errorf("%s: mamba_expand × hidden_size %d, mamba_d_state %d and mamba_dt_rank %d must be positive and mamba_d_conv %d at least 2", where, d.Inner, d.State, d.Rank, d.ConvKernel)
	}
	if act := c.HiddenAct; act != "" && act != "silu" && act != "swish" {
		// The mixer's convolution and gate take hidden_act as the MLPs do;
		// every release is SiLU.
		return Options{}, errs.Unsupportedf("%s: hidden_act %q; Jamba runs SiLU", where, act)
	}
	o.Mamba = d
	o.ConvBias, o.ProjBias = lm.Or(c.MambaConvBias, true), lm.Or(c.MambaProjBias, false)
	return o, nil
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return &Model{Model: llama.NewModel(o.Options), o: o}, nil
}

// Model is a Jamba decoder: llama's embedding, head and attention layers
// (without rotary) beside Mamba-1 layers, dense or sparse feed-forwards.
// It implements lm.Routed.
type Model struct {
	*llama.Model
	o Options
}

// JambaOptions returns the resolved options.
func (m *Model) JambaOptions() Options { return m.o }

func (m *Model) mamba(i int) bool { return m.o.Spec.LayerKinds[i] == nn.KindMamba1 }

// LayerState implements lm.Model: a KV cache for an attention layer, the
// Mamba-1 state for a Mamba layer.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.mamba(i) {
		return nn.Mamba1State(m.o.Mamba, batch)
	}
	return m.Model.LayerState(i, batch, cacheLen)
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s, d := &m.o.Spec, m.o.Mamba
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	norm := func(name string, n int) lm.WeightSpec { return lm.WeightSpec{Name: p + name, Shape: []int{n}} }
	if m.mamba(i) {
		ws = append(ws, norm("input_layernorm.weight", s.Hidden))
		ws = append(ws, nn.Mamba1Weights(p+"mamba.", d, s.Hidden, m.o.ConvBias, m.o.ProjBias)...)
		ws = append(ws, norm("mamba.dt_layernorm.weight", d.Rank), norm("mamba.b_layernorm.weight", d.State), norm("mamba.c_layernorm.weight", d.State))
		ws = append(ws, norm("pre_ff_layernorm.weight", s.Hidden))
	} else {
		ws = m.AttentionWeights(i) // input_layernorm, the projections, pre_ff_layernorm
	}
	f := p + "feed_forward."
	if m.o.Sparse[i] {
		ws = append(ws, lm.WeightSpec{Name: f + "router.weight", Shape: []int{m.o.Experts, s.Hidden}, Matmul: true, TP: lm.Replicated, Router: true})
		return append(ws, lm.StackedExperts(f+"experts", m.o.Experts, s.Intermediate, s.Hidden)...)
	}
	return append(ws,
		lm.WeightSpec{Name: f + "gate_proj.weight", Shape: []int{s.Intermediate, s.Hidden}, Matmul: true, TP: lm.Column},
		lm.WeightSpec{Name: f + "up_proj.weight", Shape: []int{s.Intermediate, s.Hidden}, Matmul: true, TP: lm.Column},
		lm.WeightSpec{Name: f + "down_proj.weight", Shape: []int{s.Hidden, s.Intermediate}, Matmul: true, TP: lm.Row})
}

// mix is layer i up to its feed_forward: x plus its mixer on its
// input_layernorm, the pre_ff_layernorm of that sum (the feed_forward's
// input) and the mixer's new state.
func (m *Model) mix(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (_, h *Node, out []*Node) {
	if !m.mamba(i) {
		return m.Attend(i, w, x, state, step)
	}
	o := &m.o
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	mp := p.Scope("mamba")
	h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), o.Eps, false)
	h, conv, ssm := nn.Mamba1(o.Mamba, nn.Mamba1ParamsOf(mp, o.ConvBias, o.ProjBias), h, state[0], state[1], step, nn.Mamba1Options{
		Act: o.Act, Chunk: nn.Mamba1Chunk, NormEps: o.Eps,
		DtNorm: mp.Get("dt_layernorm.weight"), BNorm: mp.Get("b_layernorm.weight"), CNorm: mp.Get("c_layernorm.weight"),
	})
	x = Add(x, h)
	return x, nn.RMSNorm(x, p.Get("pre_ff_layernorm.weight"), o.Eps, false), []*Node{conv, ssm}
}

// route is the router's choice on h [B, T, H]: the softmax's top k, not
// renormalized (JambaSparseMoeBlock): ids and weights [B·T, k].
func (m *Model) route(p *lm.Params, h *Node) (ids, weights *Node) {
	dims := h.Shape().Dimensions
	logits := nn.Linear(Reshape(h, dims[0]*dims[1], dims[2]), p.Get("feed_forward.router.weight"), nil)
	return nn.TopKRouter(logits, m.o.TopK, false)
}

// Layer implements lm.Model: JambaAttentionDecoderLayer or
// JambaMambaDecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	if !m.o.Sparse[i] {
		f := p.Scope("feed_forward")
		return Add(x, nn.GatedMLP(h, f.Get("gate_proj.weight"), nil, f.Get("up_proj.weight"), nil, f.Get("down_proj.weight"), nil, m.o.Act)), out
	}
	ids, weights := m.route(p, h)
	dims := h.Shape().Dimensions
	ep := p.Scope("feed_forward.experts")
	y := nn.RoutedExperts(Reshape(h, dims[0]*dims[1], dims[2]), ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), m.o.Act, step.GatherExperts)
	return Add(x, Reshape(y, dims...)), out
}

// Experts implements lm.Routed: the sparse layers' experts, each reading
// its parts of the stacks; nil for a dense layer.
func (m *Model) Experts(i int) *lm.Experts {
	if !m.o.Sparse[i] {
		return nil
	}
	prefix := fmt.Sprintf("model.layers.%d.feed_forward.experts", i)
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return lm.ExpertWeights(prefix, e, m.o.Spec.Intermediate, m.o.Spec.Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of intermediate_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p := w.Scope(fmt.Sprintf("model.layers.%d.feed_forward.experts.%d", i, e))
	return nn.GatedMLP(x, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, m.o.Act)
}

// Route implements lm.Routed: the mixer with its residual, and the
// router's choice.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	ids, weights := m.route(w.Scope(fmt.Sprintf("model.layers.%d", i)), h)
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	return &lm.Routing{Residual: x, Input: h, Experts: Reshape(ids, b, t, m.o.TopK), Weights: Reshape(weights, b, t, m.o.TopK)}, out
}

var _ lm.Routed = (*Model)(nil)
