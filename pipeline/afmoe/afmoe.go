// Package afmoe implements Arcee's AFMoE decoder, AfmoeForCausalLM (the
// Trinity models: Trinity Nano, Mini and Large), following transformers'
// models/afmoe/modular_afmoe.py.
//
// Each layer is a sandwich: the attention and the MLP each normed on the
// way in and on the way out (input_layernorm and post_attention_layernorm,
// pre_mlp_layernorm and post_mlp_layernorm), each output joining the
// residual normed. The norms scale in float32 (AfmoeRMSNorm, as
// GptOssRMSNorm). The attention is grouped-query with per-head q/k
// RMSNorms and a sigmoid gate on its output (self_attn.gate_proj, before
// o_proj); layer_types (by default three sliding_window layers, then one
// full-attention layer: global_attn_every_n_layers) decides which layers
// attend within the window, and only those turn by the rotary embedding:
// the full-attention layers have none (NoPE). With mup_enabled the
// embeddings are scaled by sqrt(hidden_size).
//
// The first num_dense_layers layers have a SwiGLU MLP of
// intermediate_size; the others a mixture of experts: sigmoid scores of
// the router's logits (mlp.router.gate, cast to float32), the top
// num_experts_per_tok experts by score plus mlp.expert_bias, weighed by
// their unbiased scores renormalized to sum 1 (plus 1e-20) and scaled by
// route_scale (nn.GroupRouter without groups); each expert a SwiGLU of
// moe_intermediate_size, plus an ungated shared MLP
// (mlp.shared_experts) of num_shared_experts·moe_intermediate_size.
// post_mlp_layernorm norms the sum of both, which is why the experts run
// only in the layer's graph (lm.InGraphExperts): the one-by-one
// formulations add the experts' sum straight to the residual.
//
// Model code is pipeline/llama's decoder with AttnGate, SandwichNorms, NormF32,
// QKNorm and NoRope set; the MoE layers replace its MLP.
package afmoe

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("AfmoeForCausalLM", New)
}

// Config is an AfmoeForCausalLM config.json: the Llama fields plus
// AFMoE's.
type Config struct {
	llama.Config
	MoEIntermediateSize    *int     `json:"moe_intermediate_size"`
	NumDenseLayers         *int     `json:"num_dense_layers"`
	NumExperts             *int     `json:"num_experts"`
	NumExpertsPerTok       *int     `json:"num_experts_per_tok"`
	NumSharedExperts       *int     `json:"num_shared_experts"`
	RouteScale             *float64 `json:"route_scale"`
	GlobalAttnEveryNLayers *int     `json:"global_attn_every_n_layers"`
	SlidingWindow          *int     `json:"sliding_window"`
	MupEnabled             bool     `json:"mup_enabled"`
}

// Defaults are AfmoeConfig's defaults for the Llama fields (head_dim
// defaults to 128, not hidden_size/num_attention_heads; Resolve sets it).
var Defaults = llama.Defaults{
	VocabSize: 200192, Hidden: 2048, Intermediate: 6144, Layers: 32, Heads: 16,
	MaxPositions: 16384, Eps: 1e-5, RopeTheta: 10000, Tie: false, Act: "silu",
}

// AfmoeConfig's defaults for its own fields.
const (
	defaultMoEIntermediate = 1408
	defaultDenseLayers     = 1
	defaultExperts         = 64
	defaultTopK            = 6
	defaultShared          = 2
	defaultRouteScale      = 1.0
	defaultGlobalEvery     = 4
	defaultWindow          = 1024
	defaultHeadDim         = 128
)

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	// Experts, TopK and MoEIntermediate are num_experts,
	// num_experts_per_tok and moe_intermediate_size; SharedExperts is
	// num_shared_experts and Shared the shared MLP's width
	// (SharedExperts·MoEIntermediate, 0 for none); RouteScale is
	// route_scale.
	Experts, TopK, MoEIntermediate, SharedExperts, Shared int
	RouteScale                                            float64
	// Sparse[i] reports that layer i has the experts (i >=
	// num_dense_layers).
	Sparse []bool
}

// Resolve reads an AFMoE config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	if c.HeadDim == nil {
		hd := defaultHeadDim
		c.HeadDim = &hd
	}
	base, err := c.Resolve(cfg, Defaults)
	if err != nil {
		return Options{}, err
	}
	o := Options{Options: base}
	s := &o.Spec
	o.QKVBias, o.OBias, o.MLPBias = false, false, false                        // AfmoeConfig sets attention_bias False; no MLP biases
	o.QKNorm, o.AttnGate, o.NormF32, o.NormWeightsF32 = true, true, true, true // norms and expert_bias in _keep_in_fp32_modules
	o.Norms = llama.SandwichNorms
	if c.MupEnabled {
		o.EmbedScale = math.Sqrt(float64(s.Hidden))
	}
	if len(c.LayerTypes) == 0 { // AfmoeConfig: every global_attn_every_n_layers-th layer attends in full
		every := lm.Or(c.GlobalAttnEveryNLayers, defaultGlobalEvery)
		if every <= 0 {
			return Options{}, fmt.Errorf("%s: global_attn_every_n_layers must be positive, got %d", where, every)
		}
		for i := range s.LayerKinds {
			s.LayerKinds[i] = lm.KindFull
			if (i+1)%every != 0 {
				s.LayerKinds[i] = lm.KindSliding
			}
		}
	}
	o.NoRope = make([]bool, s.Layers)
	sliding := false
	for i, k := range s.LayerKinds {
		o.NoRope[i] = k != lm.KindSliding // only the sliding-window layers turn
		sliding = sliding || k == lm.KindSliding
	}
	if sliding {
		s.SlidingWindow = defaultWindow
		if cfg.Has("sliding_window") {
			if c.SlidingWindow == nil || *c.SlidingWindow <= 0 {
				return Options{}, fmt.Errorf("%s: sliding_window must be a positive number of positions where layers attend within it (layer_types), got %s", where, cfg.Raw["sliding_window"])
			}
			s.SlidingWindow = *c.SlidingWindow
		}
	}
	o.Experts = lm.Or(c.NumExperts, defaultExperts)
	o.TopK = lm.Or(c.NumExpertsPerTok, defaultTopK)
	o.MoEIntermediate = lm.Or(c.MoEIntermediateSize, defaultMoEIntermediate)
	shared := lm.Or(c.NumSharedExperts, defaultShared)
	o.RouteScale = defaultRouteScale
	if c.RouteScale != nil {
		o.RouteScale = *c.RouteScale
	}
	dense := lm.Or(c.NumDenseLayers, defaultDenseLayers)
	switch {
	case dense < 0:
		return Options{}, fmt.Errorf("%s: num_dense_layers must not be negative, got %d", where, dense)
	case shared < 0:
		return Options{}, fmt.Errorf("%s: num_shared_experts must not be negative, got %d", where, shared)
	case dense < s.Layers && (o.Experts <= 0 || o.MoEIntermediate <= 0):
		return Options{}, fmt.Errorf("%s: num_experts %d and moe_intermediate_size %d must be positive (layers %d and up have experts: num_dense_layers %d)",
			where, o.Experts, o.MoEIntermediate, dense, dense)
	case dense < s.Layers && (o.TopK <= 0 || o.TopK > o.Experts):
		return Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_experts %d]", where, o.TopK, o.Experts)
	case math.IsNaN(o.RouteScale) || math.IsInf(o.RouteScale, 0):
		return Options{}, fmt.Errorf("%s: route_scale must be finite, got %v", where, o.RouteScale)
	}
	if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers); err != nil {
		return Options{}, err
	}
	o.SharedExperts, o.Shared = shared, shared*o.MoEIntermediate
	o.Sparse = make([]bool, s.Layers)
	for i := range o.Sparse {
		o.Sparse[i] = i >= dense
	}
	return o, nil
}

// New builds an AfmoeForCausalLM from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the AFMoE decoder: pipeline/llama's (embedding, head, layer
// state, attention and dense layers), whose sparse layers replace the MLP
// by the experts.
type Model struct {
	*llama.Model
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{Model: llama.NewModel(o.Options), o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// block is layer i's MLP module, "model.layers.I.mlp".
func block(i int) string { return fmt.Sprintf("model.layers.%d.mlp", i) }

// LayerWeights implements lm.Model: the attention and the four norms,
// then llama's MLP or the router (mlp.router.gate), its bias
// (mlp.expert_bias), the experts' stacks (each expert's
// mlp.experts.E.{gate,up,down}_proj.weight in the releases) and the
// shared MLP (mlp.shared_experts).
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	if !m.o.Sparse[i] {
		return m.Model.LayerWeights(i)
	}
	s, b := m.Spec(), block(i)
	ws := m.AttentionWeights(i)
	ws = append(ws,
		lm.WeightSpec{Name: b + ".router.gate.weight", Shape: []int{m.o.Experts, s.Hidden}, Matmul: true, TP: lm.Replicated, Router: true},
		lm.WeightSpec{Name: b + ".expert_bias", Shape: []int{m.o.Experts}, F32: true}) // _keep_in_fp32_modules: a rounding could reorder the choice
	ws = append(ws, lm.QwenExperts.Stacked(b+".experts", m.o.Experts, m.o.MoEIntermediate, s.Hidden)...)
	if n := m.o.Shared; n > 0 {
		ws = append(ws, lm.SwiGLUWeights(b+".shared_experts", n, s.Hidden)...)
	}
	return ws
}

// Layer implements lm.Model: AfmoeDecoderLayer. Dense layers are llama's
// (with the sandwich norms); a sparse layer adds to the residual
// post_mlp_layernorm of the shared MLP plus the routed experts
// (nn.RoutedExperts over the stacks).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	if !m.o.Sparse[i] {
		return m.Model.Layer(i, w, x, state, step)
	}
	x, h, kv := m.Attend(i, w, x, state, step)
	p := w.Scope(block(i))
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	flat := Reshape(h, b*t, hd)
	ids, weights := m.route(p, flat)
	ep := p.Scope("experts")
	y := nn.RoutedExperts(flat, ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), m.o.Act, step.GatherExperts) // [N, H]
	if m.o.Shared > 0 {
		y = Add(nn.GatedMLP(flat, p.Get("shared_experts.gate_proj.weight"), nil, p.Get("shared_experts.up_proj.weight"), nil,
			p.Get("shared_experts.down_proj.weight"), nil, m.o.Act), y)
	}
	return Add(x, m.PostMLP(i, w, Reshape(y, b, t, hd))), kv
}

// route is AfmoeTokenChoiceRouter on tokens h [N, H]: the sigmoid of the
// router's logits (computed in h's dtype, then cast to float32, as
// transformers does), the top k by score plus expert_bias, weighed by the
// unbiased scores over their sum plus 1e-20, times route_scale. Returns
// ids [N, K] int32 and weights [N, K] float32.
func (m *Model) route(p *lm.Params, h *Node) (ids, weights *Node) {
	scores := Sigmoid(ConvertDType(nn.Linear(h, p.Get("router.gate.weight"), nil), dtypes.Float32)) // [N, E]
	r := nn.GroupRouter{Experts: m.o.Experts, TopK: m.o.TopK, NormTopK: true, Scale: m.o.RouteScale}
	return r.Route(scores, p.Get("expert_bias"))
}

// InGraphExperts implements lm.InGraphExperts.
func (m *Model) InGraphExperts() string {
	return "post_mlp_layernorm norms the sum of the shared MLP and the routed experts before it joins the residual"
}

var _ lm.InGraphExperts = (*Model)(nil)
