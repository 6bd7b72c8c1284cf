package granite

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// GraniteMoeHybridForCausalLM (IBM Granite 4.0: granite-4.0-h-small,
// h-tiny, h-micro, and the attention-only granite-4.0-micro), following
// transformers' models/granitemoehybrid (its Mamba-2 mixer is
// models/bamba's BambaMixer):
//
//   - layer_types names each layer "mamba" or "attention" (all "mamba"
//     when absent). An attention layer is Granite's (attention_multiplier
//     as the score scale, no biases), with the rotary embedding only when
//     position_embedding_type is "rope": the Granite 4.0-H releases say
//     "nope" and their attention layers have no positional embedding; the
//     Mamba-2 layers carry the order.
//   - A Mamba-2 layer (nn.Mamba2): in_proj to the gate, the causal
//     convolution's x, B and C (mamba_n_groups groups of mamba_d_state)
//     and a step per head (mamba_n_heads of mamba_d_head; mamba_expand ×
//     hidden_size wide), the convolution with its bias, the selective
//     state space recurrence with dt_bias, A_log and D, the gated RMSNorm
//     (the gate before the norm) and out_proj. Its state is the
//     convolution's last inputs and a [heads, d_head, d_state] float32
//     matrix, whatever the sequence length.
//   - Each layer's MLP is shared_mlp (input_linear [2·S, H], its first
//     half the gate, output_linear [H, S]) plus, when num_local_experts >
//     0, GraniteMoe's block_sparse_moe (top num_experts_per_tok logits,
//     softmaxed among themselves; input_linear and output_linear stacks),
//     their sum times residual_multiplier joining the residual.
//   - The four multipliers are Granite's (Resolve).
//
// The experts' stacks are read under qwen3moe's names (the renaming of
// GraniteMoe); shared_mlp keeps its own. mamba_chunk_size is not read:
// the chunked recurrence gives the same result for any chunk, and
// HybridOptions.Chunk is the one this engine runs.

func init() {
	lm.Register("GraniteMoeHybridForCausalLM", NewHybrid)
}

// HybridConfig is a GraniteMoeHybridForCausalLM config.json.
type HybridConfig struct {
	Config
	SharedIntermediateSize *int            `json:"shared_intermediate_size"`
	PositionEmbeddingType  *string         `json:"position_embedding_type"`
	MambaNHeads            *int            `json:"mamba_n_heads"`
	MambaNGroups           *int            `json:"mamba_n_groups"`
	MambaDState            *int            `json:"mamba_d_state"`
	MambaDHead             json.RawMessage `json:"mamba_d_head"`
	MambaDConv             *int            `json:"mamba_d_conv"`
	MambaExpand            *int            `json:"mamba_expand"`
	MambaConvBias          *bool           `json:"mamba_conv_bias"`
	MambaProjBias          *bool           `json:"mamba_proj_bias"`
}

// GraniteMoeHybridConfig's defaults beyond GraniteConfig's.
const (
	hybridShared     = 1024
	hybridMambaHeads = 128
	hybridMambaState = 256
	hybridMambaConv  = 4
	hybridExpand     = 2
	// HybridChunk is the chunk of the chunked recurrence in several-token
	// steps: the in-chunk products grow with its square, the chunks
	// passed one to the next with its inverse.
	HybridChunk = 64
)

// HybridOptions are a GraniteMoeHybrid's resolved options: llama's (the
// attention layers, the multipliers, the embeddings and the head) and
// the Mamba-2 mixers and MLPs'.
type HybridOptions struct {
	llama.Options
	Mamba              nn.Mamba2Dims
	ConvBias, ProjBias bool
	// Experts and TopK are num_local_experts (0: shared_mlp alone) and
	// num_experts_per_tok; Spec.Intermediate is the experts' width (with
	// no experts, the shared MLP's).
	Experts, TopK int
	// Shared is shared_intermediate_size (0, GraniteMoeShared only: no
	// shared_mlp).
	Shared int
	// Chunk is the chunk of the chunked recurrence (HybridChunk).
	Chunk int
}

// ResolveHybrid reads a GraniteMoeHybridForCausalLM config.json.
func ResolveHybrid(cfg *config.File) (HybridOptions, error) {
	where := lm.ConfigName(cfg)
	var c HybridConfig
	if err := cfg.Decode(&c); err != nil {
		return HybridOptions{}, err
	}
	types := c.LayerTypes
	c.LayerTypes = nil // "mamba" and "attention", read below
	o, err := c.Config.Config.Resolve(cfg, Defaults)
	if err != nil {
		return HybridOptions{}, err
	}
	if err := c.multipliers(where, &o); err != nil {
		return HybridOptions{}, err
	}
	if c.MLPBias {
		return HybridOptions{}, errs.Unsupportedf("%s: mlp_bias is true; GraniteMoeHybrid's MLPs have no biases", where)
	}
	s := &o.Spec
	if len(types) == 0 {
		types = make([]string, s.Layers)
		for i := range types {
			types[i] = "mamba"
		}
	}
	kinds, err := lm.LayerTypes(where, types, s.Layers, "mamba", "attention")
	if err != nil {
		return HybridOptions{}, err
	}
	for i, k := range kinds {
		kinds[i] = map[string]string{"mamba": nn.KindMamba, "attention": lm.KindFull}[k]
	}
	s.LayerKinds = kinds
	if act := c.HiddenAct; slices.Contains(kinds, nn.KindMamba) && act != "" && act != "silu" && act != "swish" {
		// The mixers' activation is hidden_act too in transformers; the
		// engine's Mamba-2 mixer applies SiLU.
		return HybridOptions{}, errs.Unsupportedf("%s: hidden_act %q with mamba layers: the Mamba-2 mixer runs SiLU only", where, act)
	}
	switch pe := lm.Or(c.PositionEmbeddingType, ""); pe {
	case "rope":
	case "", "nope":
		o.NoRotary()
	default:
		return HybridOptions{}, errs.Unsupportedf("%s: position_embedding_type %q is not supported (supported: rope, nope, null)", where, pe)
	}

	h := HybridOptions{Options: o, Shared: lm.Or(c.SharedIntermediateSize, hybridShared), Chunk: HybridChunk,
		Experts: lm.Or(c.NumLocalExperts, defaultExperts), TopK: lm.Or(c.NumExpertsPerTok, defaultTopK),
		ConvBias: lm.Or(c.MambaConvBias, true), ProjBias: lm.Or(c.MambaProjBias, false)}
	inner := lm.Or(c.MambaExpand, hybridExpand) * s.Hidden
	h.Mamba = nn.Mamba2Dims{Heads: lm.Or(c.MambaNHeads, hybridMambaHeads), Groups: lm.Or(c.MambaNGroups, 1),
		State: lm.Or(c.MambaDState, hybridMambaState), ConvKernel: lm.Or(c.MambaDConv, hybridMambaConv)}
	if h.Mamba.Heads <= 0 || inner <= 0 || inner%h.Mamba.Heads != 0 {
		return HybridOptions{}, fmt.Errorf("%s: mamba_n_heads %d must be positive and divide mamba_expand × hidden_size = %d", where, h.Mamba.Heads, inner)
	}
	h.Mamba.HeadDim = inner / h.Mamba.Heads
	if raw := strings.TrimSpace(string(c.MambaDHead)); raw != "" && raw != "null" && raw != `"auto"` {
		var d int
		if err := json.Unmarshal(c.MambaDHead, &d); err != nil || d <= 0 {
			return HybridOptions{}, fmt.Errorf("%s: mamba_d_head is %s; want \"auto\" or a positive integer", where, raw)
		}
		if d*h.Mamba.Heads != inner {
			return HybridOptions{}, fmt.Errorf("%s: mamba_d_head %d × mamba_n_heads %d must be mamba_expand × hidden_size = %d", where, d, h.Mamba.Heads, inner)
		}
	}
	if err := h.Mamba.Validate(where, hybridMambaNames); err != nil {
		return HybridOptions{}, err
	}
	if h.Shared <= 0 {
		return HybridOptions{}, fmt.Errorf("%s: shared_intermediate_size %d must be positive", where, h.Shared)
	}
	if h.Experts < 0 || (h.Experts > 0 && (h.TopK <= 0 || h.TopK > h.Experts)) {
		return HybridOptions{}, fmt.Errorf("%s: num_local_experts %d must be 0 or more and num_experts_per_tok %d in [1, num_local_experts]", where, h.Experts, h.TopK)
	}
	if err := lm.CheckExperts(where, "num_local_experts", h.Experts, s.Layers); err != nil {
		return HybridOptions{}, err
	}
	if h.Experts == 0 { // the shared MLP is the only one: its width is what --tp splits
		h.Spec.Intermediate = h.Shared
	}
	return h, nil
}

// hybridMambaNames are GraniteMoeHybridConfig's names of the Mamba-2 sizes.
var hybridMambaNames = nn.Mamba2Names{Heads: "mamba_n_heads", HeadDim: "mamba_d_head", State: "mamba_d_state", Groups: "mamba_n_groups", ConvKernel: "mamba_d_conv"}

// NewHybrid builds a GraniteMoeHybridForCausalLM from its config.json.
func NewHybrid(cfg *config.File) (lm.Model, error) {
	o, err := ResolveHybrid(cfg)
	if err != nil {
		return nil, err
	}
	return NewHybridModel(o), nil
}

// HybridModel is a GraniteMoeHybrid decoder: llama's embeddings, head and
// attention layers (Attend) and its own Mamba-2 layers and MLPs. It
// implements lm.Model, lm.Routed and lm.Renamer.
type HybridModel struct {
	*llama.Model
	o HybridOptions
}

// NewHybridModel returns the decoder for resolved options.
func NewHybridModel(o HybridOptions) *HybridModel {
	return &HybridModel{Model: llama.NewModel(o.Options), o: o}
}

// HybridOptions returns the resolved options.
func (m *HybridModel) HybridOptions() HybridOptions { return m.o }

// LayerState implements lm.Model: a KV cache for an attention layer, the
// fixed Mamba-2 state (nn.Mamba2State) for a Mamba layer.
func (m *HybridModel) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.LayerKind(i) == nn.KindMamba {
		return nn.Mamba2State(m.o.Mamba, batch)
	}
	return m.Model.LayerState(i, batch, cacheLen)
}

// LayerWeights implements lm.Model, with the releases' names (the
// experts' as RenameWeight reads them).
func (m *HybridModel) LayerWeights(i int) []lm.WeightSpec {
	s, d := &m.o.Spec, m.o.Mamba
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	if m.LayerKind(i) == nn.KindMamba {
		add("input_layernorm.weight", false, lm.Replicated, s.Hidden)
		ws = append(ws, nn.Mamba2Weights(p+"mamba.", d, s.Hidden, m.o.ConvBias, m.o.ProjBias)...)
		add("post_attention_layernorm.weight", false, lm.Replicated, s.Hidden)
	} else {
		ws = m.AttentionWeights(i)
	}
	if m.o.Shared > 0 {
		add("shared_mlp.input_linear.weight", true, lm.Column, 2*m.o.Shared, s.Hidden)
		add("shared_mlp.output_linear.weight", true, lm.Row, s.Hidden, m.o.Shared)
	}
	if m.o.Experts > 0 {
		add("block_sparse_moe.gate.weight", true, lm.Replicated, m.o.Experts, s.Hidden)
		ws[len(ws)-1].Router = true
		ws = append(ws, lm.StackedExperts(p+"block_sparse_moe.experts", m.o.Experts, s.Intermediate, s.Hidden)...)
	}
	return ws
}

// RenameWeight implements lm.Renamer: GraniteMoe's names of the experts
// (renameMoE).
func (m *HybridModel) RenameWeight(stored string) string { return renameMoE(stored) }

// Layer implements lm.Model: GraniteMoeHybridDecoderLayer.
func (m *HybridModel) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	y := m.sharedMLP(p, h) // nil without one (GraniteMoeShared's shared_intermediate_size 0)
	if m.o.Experts > 0 {
		ids, weights := m.route(p, h)
		dims := h.Shape().Dimensions
		b, t, hd := dims[0], dims[1], dims[2]
		ep := p.Scope("block_sparse_moe.experts")
		routed := Reshape(nn.RoutedExperts(Reshape(h, b*t, hd), ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), m.o.Act, step.GatherExperts), b, t, hd)
		if y == nil {
			y = routed
		} else {
			y = Add(y, routed)
		}
	}
	return Add(x, m.Residual(y)), out
}

// mix is layer i up to its MLP: x plus the token mixer (Mamba-2 or
// attention) of its input_layernorm, times residual_multiplier; the
// post_attention_layernorm of that sum (the MLP's input h); and the
// mixer's new state.
func (m *HybridModel) mix(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (_, h *Node, out []*Node) {
	if m.LayerKind(i) != nn.KindMamba {
		return m.Attend(i, w, x, state, step)
	}
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	params := nn.Mamba2ParamsOf(p.Scope("mamba"), m.o.ConvBias, m.o.ProjBias)
	h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), m.o.Eps, false)
	h, conv, ssm := nn.Mamba2(m.o.Mamba, params, h, state[0], state[1], step, m.o.Eps, 1, m.o.Chunk)
	x = Add(x, m.Residual(h))
	return x, nn.RMSNorm(x, p.Get("post_attention_layernorm.weight"), m.o.Eps, false), []*Node{conv, ssm}
}

// sharedMLP is GraniteMoeHybridMLP on h [B, T, H]: input_linear's first
// half the gate, its second the up projection; nil when the model has
// none.
func (m *HybridModel) sharedMLP(p *lm.Params, h *Node) *Node {
	if m.o.Shared == 0 {
		return nil
	}
	sp := p.Scope("shared_mlp")
	gu := nn.Linear(h, sp.Get("input_linear.weight"), nil) // [B, T, 2S]
	s := m.o.Shared
	act := Mul(m.o.Act(SliceAxis(gu, -1, AxisRange(0, s))), SliceAxis(gu, -1, AxisRange(s, 2*s)))
	return nn.Linear(act, sp.Get("output_linear.weight"), nil)
}

// route is the router's choice on h [B, T, H] (GraniteMoeHybridTopKGating:
// the top k logits, softmaxed among themselves): ids and weights [B·T, k].
func (m *HybridModel) route(p *lm.Params, h *Node) (ids, weights *Node) {
	dims := h.Shape().Dimensions
	logits := nn.Linear(Reshape(h, dims[0]*dims[1], dims[2]), p.Get("block_sparse_moe.gate.weight"), nil) // [N, E]
	return nn.TopKRouter(logits, m.o.TopK, true)
}

// Experts implements lm.Routed: expert e reads its parts of the stacks;
// nil where the model has no experts.
func (m *HybridModel) Experts(i int) *lm.Experts {
	if m.o.Experts == 0 {
		return nil
	}
	prefix := fmt.Sprintf("model.layers.%d.block_sparse_moe.experts", i)
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return lm.ExpertWeights(prefix, e, m.o.Spec.Intermediate, m.o.Spec.Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of intermediate_size.
func (m *HybridModel) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p := w.Scope(fmt.Sprintf("model.layers.%d.block_sparse_moe.experts.%d", i, e))
	return nn.GatedMLP(x, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, m.o.Act)
}

// Route implements lm.Routed: the mixer with its residual, the shared
// MLP if any (times residual_multiplier) added to the residual, and the
// router's choice, its weights times residual_multiplier so that the
// experts' weighted sum joins the residual scaled as Layer scales it.
func (m *HybridModel) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	if y := m.sharedMLP(p, h); y != nil {
		x = Add(x, m.Residual(y))
	}
	ids, weights := m.route(p, h)
	if s := m.o.ResidualScale; s != 0 && s != 1 {
		weights = MulScalar(weights, s)
	}
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	return &lm.Routing{Residual: x, Input: h, Experts: Reshape(ids, b, t, m.o.TopK), Weights: Reshape(weights, b, t, m.o.TopK)}, out
}

var (
	_ lm.Routed  = (*HybridModel)(nil)
	_ lm.Renamer = (*HybridModel)(nil)
)
