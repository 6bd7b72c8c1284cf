// Package qwen35 implements the Qwen3.5 text model, following transformers'
// models/qwen3_5/modeling_qwen3_5.py (Qwen3_5TextModel under
// Qwen3_5ForConditionalGeneration and Qwen3_5ForCausalLM) and the
// Qwen3-Next design it inherits (models/qwen3_next): a hybrid decoder whose
// layers are either Gated DeltaNet linear attention ("Gated Delta Networks:
// Improving Mamba2 with Delta Rule", Yang et al., 2024, arXiv:2412.06464)
// or gated full attention ("Gated Attention for Large Language Models",
// Qiu et al., 2025, arXiv:2505.06708), three to one by default
// (full_attention_interval 4), each followed by a SwiGLU MLP.
//
// Qwen3.5-MoE (models/qwen3_5_moe: Qwen3_5MoeForConditionalGeneration,
// Qwen3_5MoeForCausalLM) is the same backbone whose every MLP is a sparse
// block: a softmax router picking num_experts_per_tok of num_experts
// SwiGLU experts (always renormalised), held as the official checkpoints'
// stacks (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj
// [E, H, I]) or assembled from one tensor per expert, plus a shared expert
// scaled by sigmoid(shared_expert_gate). The experts run in the graph
// (nn.RoutedExperts); the model implements lm.Routed for the host-routed
// and dense references.
//
// Qwen3-Next (models/qwen3_next: Qwen3NextForCausalLM, the design
// Qwen3.5 derives from, as in Qwen3-Next-80B-A3B and Qwen3-Coder-Next)
// is the same model with three differences: the DeltaNet's projections
// are stored fused, in_proj_qkvz and in_proj_ba, with rows grouped by key
// head (deltaNetInputs); decoder_sparse_step and mlp_only_layers may give
// some layers a dense MLP of intermediate_size; norm_topk_prob may leave
// the router's top k unnormalised. Its config is flat, its names
// model.*, and its MTP head (mtp.*) is Qwen3.5's.
//
// Text only: the multimodal checkpoint's vision tower (model.visual.*) and
// its multi-token-prediction head (mtp.*) are skipped explicitly (see
// SkipWeight). With text-only input Qwen3.5's interleaved multimodal RoPE
// (mrope_section) gives the same angles to all three position axes, so it
// is the plain rotary embedding on the first head_dim ×
// partial_rotary_factor dims.
//
// Layer state: a full-attention layer keeps a KV cache; a linear-attention
// layer keeps a fixed-size state (the causal convolution's last inputs and
// the [value heads, key dim, value dim] delta-rule matrix in float32),
// whatever the sequence length. Prefill runs the chunked delta rule, decode
// the recurrent one.
package qwen35

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Qwen3_5ForConditionalGeneration", New)
	lm.Register("Qwen3_5ForCausalLM", New)
	lm.Register("Qwen3_5MoeForConditionalGeneration", New)
	lm.Register("Qwen3_5MoeForCausalLM", New)
	lm.Register("Qwen3NextForCausalLM", New)
}

// New builds the Qwen3.5 text model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the Qwen3.5 text decoder; it implements lm.Model and lm.Skipper.
type Model struct {
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: "linear_attention" or "full_attention".
func (m *Model) LayerKind(i int) string { return m.o.Spec.LayerKinds[i] }

// LayerState implements lm.Model: a KV cache for full-attention layers, the
// fixed DeltaNet state (nn.DeltaNetState) for linear-attention layers.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.LayerKind(i) == nn.KindLinearAttention {
		return nn.DeltaNetState(m.o.DeltaNet, batch)
	}
	s := &m.o.Spec
	return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
}

// SkipWeight implements lm.Skipper: the vision tower and the MTP head of the
// multimodal checkpoints (transformers' Qwen3_5ForCausalLM ignores the same
// prefixes on load).
func (m *Model) SkipWeight(name string) (string, bool) {
	switch {
	case strings.HasPrefix(name, "model.visual."):
		return "vision tower (model.visual.*): tputool runs the text model only", true
	case strings.HasPrefix(name, "mtp."):
		return "multi-token-prediction head (mtp.*): not used for generation", true
	}
	return "", false
}

func (m *Model) name(rel string) string { return m.o.Prefix + rel }

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: m.name("embed_tokens.weight"), Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

func (m *Model) headName() string {
	if m.o.Spec.TieEmbeddings {
		return m.name("embed_tokens.weight")
	}
	return "lm_head.weight"
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	tp := lm.Vocab // an untied head splits by vocabulary; a tied one is the replicated embedding
	if s.TieEmbeddings {
		tp = lm.Replicated
	}
	return []lm.WeightSpec{
		{Name: m.name("norm.weight"), Shape: []int{s.Hidden}},
		{Name: m.headName(), Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp},
	}
}

// LayerWeights implements lm.Model, with the names and shapes of the real
// checkpoints' model.safetensors.index.json.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	return m.layerWeights(m.name(fmt.Sprintf("layers.%d.", i)), m.LayerKind(i), m.sparse(i))
}

// sparse reports whether layer i's MLP is the sparse block.
func (m *Model) sparse(i int) bool {
	return m.o.Experts > 0 && (m.o.Dense == nil || !m.o.Dense[i])
}

// layerWeights are the weights of a decoder layer of kind whose names
// begin with p ("….layers.3."), with the sparse block or a dense MLP.
func (m *Model) layerWeights(p, kind string, sparse bool) []lm.WeightSpec {
	s, dn := &m.o.Spec, m.o.DeltaNet
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	add("input_layernorm.weight", false, lm.Replicated, s.Hidden)
	if kind == nn.KindLinearAttention {
		// Gated DeltaNet stays whole on every device under --tp: its
		// recurrent state is not split by head.
		if m.o.Fused {
			add("linear_attn.in_proj_qkvz.weight", true, lm.Replicated, dn.ConvDim()+dn.ValueDim(), s.Hidden)
			add("linear_attn.in_proj_ba.weight", true, lm.Replicated, 2*dn.VHeads, s.Hidden)
		} else {
			add("linear_attn.in_proj_qkv.weight", true, lm.Replicated, dn.ConvDim(), s.Hidden)
			add("linear_attn.in_proj_z.weight", true, lm.Replicated, dn.ValueDim(), s.Hidden)
			add("linear_attn.in_proj_b.weight", true, lm.Replicated, dn.VHeads, s.Hidden)
			add("linear_attn.in_proj_a.weight", true, lm.Replicated, dn.VHeads, s.Hidden)
		}
		add("linear_attn.conv1d.weight", false, lm.Replicated, dn.ConvDim(), 1, dn.ConvKernel)
		add("linear_attn.dt_bias", false, lm.Replicated, dn.VHeads)
		add("linear_attn.A_log", false, lm.Replicated, dn.VHeads)
		add("linear_attn.norm.weight", false, lm.Replicated, dn.VDim)
		add("linear_attn.out_proj.weight", true, lm.Replicated, s.Hidden, dn.ValueDim())
	} else {
		q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
		add("self_attn.q_proj.weight", true, lm.Column, 2*q, s.Hidden) // query and output gate, per head
		add("self_attn.k_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("self_attn.v_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		if m.o.AttentionBias {
			add("self_attn.q_proj.bias", false, lm.Column, 2*q)
			add("self_attn.k_proj.bias", false, lm.KVColumn, kv)
			add("self_attn.v_proj.bias", false, lm.KVColumn, kv)
		}
		add("self_attn.q_norm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_norm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.o_proj.weight", true, lm.Row, s.Hidden, q)
		if m.o.AttentionBias {
			add("self_attn.o_proj.bias", false, lm.Replicated, s.Hidden)
		}
	}
	add("post_attention_layernorm.weight", false, lm.Replicated, s.Hidden)
	if sparse {
		add("mlp.gate.weight", true, lm.Replicated, m.o.Experts, s.Hidden)
		ws[len(ws)-1].Router = true
		ws = append(ws, lm.StackedExperts(p+"mlp.experts", m.o.Experts, m.o.MoEIntermediate, s.Hidden)...)
		if si := m.o.SharedIntermediate; si > 0 {
			ws = append(ws, lm.SharedExpertWeights(p+"mlp", si, s.Hidden)...)
		}
		return ws
	}
	inter := m.denseIntermediate()
	add("mlp.gate_proj.weight", true, lm.Column, inter, s.Hidden)
	add("mlp.up_proj.weight", true, lm.Column, inter, s.Hidden)
	add("mlp.down_proj.weight", true, lm.Row, s.Hidden, inter)
	return ws
}

// denseIntermediate is a dense MLP's width: intermediate_size (Spec's,
// unless a model with experts has it as their width).
func (m *Model) denseIntermediate() int {
	if m.o.Experts > 0 {
		return m.o.DenseIntermediate
	}
	return m.o.Spec.Intermediate
}

// expertsPrefix is layer i's "….mlp.experts" name prefix.
func (m *Model) expertsPrefix(i int) string { return m.name(fmt.Sprintf("layers.%d.mlp.experts", i)) }

func (m *Model) optional(p *lm.Params, name string) *Node {
	if !m.o.AttentionBias {
		return nil
	}
	return p.Get(name)
}

// Embed implements lm.Model: Qwen3_5TextModel.embed_tokens (no scaling).
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return nn.Embedding(w.Get(m.name("embed_tokens.weight")), tokens) // [B, T, H]
}

// Layer implements lm.Model: Qwen3_5DecoderLayer, a (1+w)-RMSNorm'd token
// mixer (Gated DeltaNet or gated attention) and a (1+w)-RMSNorm'd SwiGLU
// MLP (Qwen3.5-MoE: the sparse block, routed experts in the graph with
// nn.RoutedExperts plus the gated shared expert), each with a residual
// connection.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	return m.layer(w.Scope(m.name(fmt.Sprintf("layers.%d", i))), m.LayerKind(i), m.sparse(i), x, state, step)
}

// layer is a decoder layer of kind whose weights p holds, with the
// sparse block or a dense MLP.
func (m *Model) layer(p *lm.Params, kind string, sparse bool, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, out := m.mix(kind, p, x, state, step)
	mp := p.Scope("mlp")
	if sparse {
		x, ids, weights := m.routeMLP(mp, x, h)
		dims := h.Shape().Dimensions
		b, t, hd := dims[0], dims[1], dims[2]
		ep := mp.Scope("experts")
		y := nn.RoutedExperts(Reshape(h, b*t, hd), ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), nn.SiLU, step.GatherExperts)
		return Add(x, Reshape(y, b, t, hd)), out
	}
	x = Add(x, nn.GatedMLP(h, mp.Get("gate_proj.weight"), nil, mp.Get("up_proj.weight"), nil, mp.Get("down_proj.weight"), nil, nn.SiLU))
	return x, out
}

// mix is a layer up to its MLP: the normed token mixer added to x, and
// the post-attention norm of the sum (the MLP's input h); out is the
// mixer's new state.
func (m *Model) mix(kind string, p *lm.Params, x *Node, state []*Node, step *lm.Step) (_, h *Node, out []*Node) {
	h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), m.o.Eps, true)
	if kind == nn.KindLinearAttention {
		var conv, rec *Node
		h, conv, rec = m.gatedDeltaNet(p.Scope("linear_attn"), h, state[0], state[1], step)
		out = []*Node{conv, rec}
	} else {
		var c nn.KV
		h, c = m.gatedAttention(p.Scope("self_attn"), h, nn.KVOf(state), step)
		out = c.State()
	}
	x = Add(x, h)
	return x, nn.RMSNorm(x, p.Get("post_attention_layernorm.weight"), m.o.Eps, true), out
}

// routeMLP is the sparse block's part before the routed experts
// (Qwen3_5MoeSparseMoeBlock): the router's choice on h [B, T, H] (softmax,
// top k, renormalised: ids and weights [B·T, k]), and the residual x with
// the shared expert, scaled by sigmoid(shared_expert_gate·h), added.
func (m *Model) routeMLP(mp *lm.Params, x, h *Node) (residual, ids, weights *Node) {
	dims := h.Shape().Dimensions
	logits := nn.Linear(Reshape(h, dims[0]*dims[1], dims[2]), mp.Get("gate.weight"), nil) // [N, E]
	ids, weights = nn.TopKRouter(logits, m.o.TopK, !m.o.KeepTopK)
	if m.o.SharedIntermediate > 0 {
		x = Add(x, nn.SharedExpert(h, mp.Get("shared_expert.gate_proj.weight"), mp.Get("shared_expert.up_proj.weight"),
			mp.Get("shared_expert.down_proj.weight"), mp.Get("shared_expert_gate.weight"), nn.SiLU))
	}
	return x, ids, weights
}

// Experts implements lm.Routed (Qwen3.5-MoE): expert e reads its parts of
// the stacks. Nil for the dense model and a dense layer.
func (m *Model) Experts(i int) *lm.Experts {
	if !m.sparse(i) {
		return nil
	}
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return lm.ExpertWeights(m.expertsPrefix(i), e, m.o.MoEIntermediate, m.o.Spec.Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of moe_intermediate_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p := w.Scope(m.name(fmt.Sprintf("layers.%d.mlp.experts.%d", i, e)))
	return nn.GatedMLP(x, p.Get("gate_proj.weight"), nil, p.Get("up_proj.weight"), nil, p.Get("down_proj.weight"), nil, nn.SiLU)
}

// Route implements lm.Routed: the token mixer with its residual, the
// post-attention norm, the router's choice and the gated shared expert
// (added to the residual).
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	p := w.Scope(m.name(fmt.Sprintf("layers.%d", i)))
	x, h, out := m.mix(m.LayerKind(i), p, x, state, step)
	x, ids, weights := m.routeMLP(p.Scope("mlp"), x, h)
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	return &lm.Routing{Residual: x, Input: h, Experts: Reshape(ids, b, t, m.o.TopK), Weights: Reshape(weights, b, t, m.o.TopK)}, out
}

var _ lm.Routed = (*Model)(nil)

// gatedAttention is Qwen3_5Attention: q_proj yields a query and an output
// gate per head; (1+w) q/k norms over head_dim; partial rotary embedding;
// grouped-query attention over the KV cache; the output is multiplied by
// sigmoid(gate) before o_proj.
func (m *Model) gatedAttention(p *lm.Params, x *Node, c nn.KV, step *lm.Step) (*Node, nn.KV) {
	s := &m.o.Spec
	dims := x.Shape().Dimensions
	b, t, d := dims[0], dims[1], s.HeadDim
	qg := nn.Linear(x, p.Get("q_proj.weight"), m.optional(p, "q_proj.bias"))                          // [B, T, H*2D]
	qg = Reshape(qg, b, t, s.Heads, 2*d)                                                              // [B, T, H, 2D]: query, gate
	q := SliceAxis(qg, 3, AxisRange(0, d))                                                            // [B, T, H, D]
	gate := Reshape(SliceAxis(qg, 3, AxisRange(d, 2*d)), b, t, s.Heads*d)                             // [B, T, H*D]
	k := nn.SplitHeads(nn.Linear(x, p.Get("k_proj.weight"), m.optional(p, "k_proj.bias")), s.KVHeads) // [B, T, KV, D]
	v := nn.SplitHeads(nn.Linear(x, p.Get("v_proj.weight"), m.optional(p, "v_proj.bias")), s.KVHeads) // [B, T, KV, D]
	q = nn.RMSNorm(q, p.Get("q_norm.weight"), m.o.Eps, true)
	k = nn.RMSNorm(k, p.Get("k_norm.weight"), m.o.Eps, true)
	cos, sin := m.o.Rope.CosSin(step, x.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	c = nn.WriteKV(c, k, v, step)
	out := nn.Attention(q, c, nn.AttentionBias(step, 0), 0, 0) // [B, T, H*D]
	out = Mul(out, Sigmoid(gate))
	return nn.Linear(out, p.Get("o_proj.weight"), m.optional(p, "o_proj.bias")), c
}

// gatedDeltaNet is Qwen3_5GatedDeltaNet: padding positions are zeroed
// (apply_mask_to_padding_states), q/k/v go through the causal convolution
// (continued from the conv state) and SiLU, β = sigmoid(in_proj_b),
// g = -exp(A_log)·softplus(in_proj_a + dt_bias), the gated delta rule runs
// from the recurrent state (chunked for several tokens, recurrent for one),
// and the output goes through the gated RMSNorm with silu(in_proj_z) and
// out_proj.
func (m *Model) gatedDeltaNet(p *lm.Params, x, conv, rec *Node, step *lm.Step) (*Node, *Node, *Node) {
	dn := m.o.DeltaNet
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	dtype := x.DType()
	// Left padding: zero the inputs so padded slots leave both states at zero.
	x = Mul(x, nn.RealTokens(step, dtype))

	qkv, z, bb, a := m.deltaNetInputs(p, x)
	qkv, conv = nn.CausalConv1D(qkv, conv, p.Get("conv1d.weight"))
	qkv = nn.SiLU(qkv)
	kd := dn.KeyDim()
	q := Reshape(SliceAxis(qkv, 2, AxisRange(0, kd)), b, t, dn.KHeads, dn.KDim)              // [B, T, Hk, Dk]
	k := Reshape(SliceAxis(qkv, 2, AxisRange(kd, 2*kd)), b, t, dn.KHeads, dn.KDim)           // [B, T, Hk, Dk]
	v := Reshape(SliceAxis(qkv, 2, AxisRange(2*kd, dn.ConvDim())), b, t, dn.VHeads, dn.VDim) // [B, T, Hv, Dv]

	f32 := dtypes.Float32
	beta := Sigmoid(ConvertDType(bb, f32))        // [B, T, Hv]
	aLog := ConvertDType(p.Get("A_log"), f32)     // [Hv]
	dtBias := ConvertDType(p.Get("dt_bias"), f32) // [Hv]
	g := Mul(Neg(ExpandLeftToRank(Exp(aLog), 3)), //
		nn.SoftplusTorch(Add(ConvertDType(a, f32), ExpandLeftToRank(dtBias, 3)))) // [B, T, Hv], <= 0

	q, k = nn.DeltaRuleInputs(q, k, dn.VHeads) // [B, T, Hv, Dk] float32
	var core *Node
	if t == 1 {
		core, rec = nn.RecurrentGatedDeltaRule(q, k, v, g, beta, rec)
	} else {
		core, rec = nn.ChunkGatedDeltaRule(q, k, v, g, beta, rec, m.o.ChunkSize)
	}
	core = ConvertDType(core, dtype)                                                    // [B, T, Hv, Dv]
	zh := Reshape(z, b, t, dn.VHeads, dn.VDim)                                          // [B, T, Hv, Dv]
	core = nn.GatedRMSNorm(core, zh, p.Get("norm.weight"), m.o.Eps)                     // [B, T, Hv, Dv]
	out := nn.Linear(Reshape(core, b, t, dn.ValueDim()), p.Get("out_proj.weight"), nil) // [B, T, H]
	return out, conv, rec
}

// deltaNetInputs are the DeltaNet's projections of x [B, T, H]: q, k and
// v [B, T, ConvDim] (every key head's q, then every k, then every value
// head's v: the convolution's channels), z [B, T, ValueDim], b and a
// [B, T, VHeads]. Qwen3-Next (Fused) projects them with two matrices
// whose rows are grouped by key head: in_proj_qkvz's group g holds q and
// k of head g, then v and z of the VHeads/KHeads value heads it serves;
// in_proj_ba's holds their b, then their a
// (Qwen3NextGatedDeltaNet.fix_query_key_value_ordering).
func (m *Model) deltaNetInputs(p *lm.Params, x *Node) (qkv, z, bb, a *Node) {
	if !m.o.Fused {
		return nn.Linear(x, p.Get("in_proj_qkv.weight"), nil), nn.Linear(x, p.Get("in_proj_z.weight"), nil),
			nn.Linear(x, p.Get("in_proj_b.weight"), nil), nn.Linear(x, p.Get("in_proj_a.weight"), nil)
	}
	dn := m.o.DeltaNet
	dims := x.Shape().Dimensions
	b, t, nk := dims[0], dims[1], dn.KHeads
	rv := dn.VHeads / nk * dn.VDim // a group's v (or z) width
	group := func(w *Node, widths ...int) []*Node {
		width := 0
		for _, n := range widths {
			width += n
		}
		y := Reshape(nn.Linear(x, w, nil), b, t, nk, width) // [B, T, Hk, group]
		parts := make([]*Node, len(widths))
		at := 0
		for i, n := range widths {
			parts[i] = Reshape(SliceAxis(y, 3, AxisRange(at, at+n)), b, t, nk*n)
			at += n
		}
		return parts
	}
	qkvz := group(p.Get("in_proj_qkvz.weight"), dn.KDim, dn.KDim, rv, rv)
	ba := group(p.Get("in_proj_ba.weight"), dn.VHeads/nk, dn.VHeads/nk)
	return Concatenate(qkvz[:3], -1), qkvz[3], ba[0], ba[1]
}

var _ lm.Finisher = (*Model)(nil)

// Final implements lm.Finisher: the final (1+w) RMSNorm.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get(m.name("norm.weight")), m.o.Eps, true)
}

// Head implements lm.Model: the final (1+w) RMSNorm and lm_head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	x = m.Final(w, x)
	return nn.Linear(x, w.Get(m.headName()), nil) // [B, V]
}
