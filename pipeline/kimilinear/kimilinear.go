// Package kimilinear implements KimiLinearForCausalLM, Moonshot AI's
// Kimi Linear ("Kimi Linear: An Expressive, Efficient Attention
// Architecture", Kimi Team, 2025, arXiv:2510.26692; Kimi-Linear-48B-A3B,
// 48B parameters of which 3B active), following the releases'
// modeling_kimi.py (remote code; transformers has no class for it) and
// flash-linear-attention's KDA operators it calls.
//
// The decoder is hybrid, three layers of Kimi Delta Attention to one of
// multi-head latent attention (linear_attn_config's kda_layers and
// full_attn_layers, 1-based). Every layer then has DeepSeek-V3's MLP: a
// dense SwiGLU on the first first_k_dense_replace layers, else a sparse
// block (block_sparse_moe: the router gate.weight with
// gate.e_score_correction_bias, experts in Mixtral's names w1/w3/w2,
// num_shared_experts shared experts). The sparse block and the MLA are
// pipeline/deepseek's, with two differences: the MLA has no rotary
// embedding (mla_use_nope: its qk_rope_head_dim dims pass unrotated, and
// the attention's scale is qk_head_dim^-0.5), and the router divides its
// weights only when more than one expert is chosen. The weights are the
// unbiased scores, as vLLM's kimi_linear.py has them; the release's
// modeling_kimi.py adds the correction bias into the scores in place,
// and so weighs by the biased ones (docs/moe.md).
//
// Kimi Delta Attention (KimiDeltaAttention) is Gated DeltaNet with a
// decay a key channel instead of a head. Per head, from the normed input
// x:
//
//	q, k, v = silu(causal_conv(q_proj x)), … (each its own short
//	          convolution, short_conv_kernel_size taps, no bias)
//	g       = -exp(A_log_h) · softplus(f_b_proj(f_a_proj x) + dt_bias)   [head_dim a head]
//	β       = sigmoid(b_proj x)
//	S       = diag(exp(g)) S;  S += k ⊗ β (v − Sᵀk);  o = Sᵀq
//
// with q and k L2-normalized and q scaled by head_dim^-0.5 (fla's
// chunk_kda and fused_recurrent_kda with use_qk_l2norm_in_kernel), then
// o = RMSNorm(o)·w · sigmoid(g_b_proj(g_a_proj x)) (FusedRMSNormGated,
// activation sigmoid) and o_proj. The state is fixed-size: the three
// convolutions' last inputs and the [heads, head_dim, head_dim] matrix in
// float32 (nn.DeltaNetState). Prefill runs the chunked rule
// (nn.ChunkGatedDeltaRule with per-channel decays), decode the
// recurrent one.
//
// Kimi K3's text config (the same model_type under a kimi_k3 wrapper)
// adds gated MLA, attention residuals, latent experts and a bounded
// full-rank KDA gate; those fields are refused by name.
package kimilinear

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Architecture is the class the releases' config.json names.
const Architecture = "KimiLinearForCausalLM"

func init() { lm.Register(Architecture, New) }

// Layout is the releases' sparse block: block_sparse_moe, the correction
// bias a parameter of the gate, Mixtral's expert names.
var Layout = deepseek.Layout{Block: "block_sparse_moe", Bias: "gate.e_score_correction_bias", Experts: lm.MixtralExperts}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is a Kimi Linear decoder: pipeline/deepseek's (embedding, head,
// MLA layers, MLPs and sparse blocks) with Kimi Delta Attention in the
// linear layers. It implements lm.Routed and lm.Skipper.
type Model struct {
	*deepseek.Model
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model {
	return &Model{Model: deepseek.NewModelIn(o.Options, Layout), o: o}
}

// KimiOptions returns the resolved options.
func (m *Model) KimiOptions() Options { return m.o }

func (m *Model) linear(i int) bool { return m.LayerKind(i) == nn.KindLinearAttention }

// LayerState implements lm.Model: the KDA's fixed state for its layers,
// the latent cache for MLA's.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	if m.linear(i) {
		return nn.DeltaNetState(m.o.KDA, batch)
	}
	return m.Model.LayerState(i, batch, cacheLen)
}

// LayerWeights implements lm.Model, with the releases' names.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	if !m.linear(i) {
		return m.Model.LayerWeights(i)
	}
	s, d := m.Spec(), m.o.KDA
	p := fmt.Sprintf("model.layers.%d.", i)
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, shape ...int) {
		// Replicated under --tp, as Gated DeltaNet: the recurrent state
		// is not split by head.
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: lm.Replicated})
	}
	hd := d.KeyDim()
	add("input_layernorm.weight", false, s.Hidden)
	for _, n := range []string{"q", "k", "v"} {
		add("self_attn."+n+"_proj.weight", true, hd, s.Hidden)
		add("self_attn."+n+"_conv1d.weight", false, hd, 1, d.ConvKernel)
	}
	add("self_attn.f_a_proj.weight", true, d.KDim, s.Hidden)
	add("self_attn.f_b_proj.weight", true, hd, d.KDim)
	add("self_attn.b_proj.weight", true, d.KHeads, s.Hidden)
	add("self_attn.g_a_proj.weight", true, d.KDim, s.Hidden)
	add("self_attn.g_b_proj.weight", true, hd, d.KDim)
	add("self_attn.o_norm.weight", false, d.VDim)
	add("self_attn.o_proj.weight", true, s.Hidden, hd)
	// The decay's parameters stay float32, as the kernels read them.
	ws = append(ws, lm.WeightSpec{Name: p + "self_attn.A_log", Shape: []int{1, 1, d.KHeads, 1}, F32: true, TP: lm.Replicated},
		lm.WeightSpec{Name: p + "self_attn.dt_bias", Shape: []int{hd}, F32: true, TP: lm.Replicated})
	add("post_attention_layernorm.weight", false, s.Hidden)
	return m.MLPWeights(i, ws)
}

// SkipWeight implements lm.Skipper: deepseek's (layers past
// num_hidden_layers), and the empty shared experts KimiSparseMoeBlock
// builds when num_shared_experts is 0 (a width of 0).
func (m *Model) SkipWeight(name string) (string, bool) {
	if m.o.Shared == 0 && strings.Contains(name, ".block_sparse_moe.shared_experts.") {
		return "shared experts of width 0 (num_shared_experts 0): they add nothing", true
	}
	return m.Model.SkipWeight(name)
}

// Layer implements lm.Model: KimiDecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, st := m.mix(i, w, x, state, step)
	return m.FinishLayer(i, w, x, h, step), st
}

// Route implements lm.Routed: the token mixer with its residual, the
// post-attention norm, the router's choice and the shared experts.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	x, h, st := m.mix(i, w, x, state, step)
	return m.Routing(i, w, x, h), st
}

// mix is layer i up to its MLP: x plus the token mixer (KDA or MLA) of
// its input norm, the post-attention norm of the sum, and the mixer's
// new state.
func (m *Model) mix(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (residual, h *Node, st []*Node) {
	if !m.linear(i) {
		return m.Mix(i, w, x, state, step)
	}
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	h = nn.RMSNorm(x, p.Get("input_layernorm.weight"), m.o.Eps, false)
	h, conv, rec := m.kda(p.Scope("self_attn"), h, state[0], state[1], step)
	x = Add(x, h)
	return x, nn.RMSNorm(x, p.Get("post_attention_layernorm.weight"), m.o.Eps, false), []*Node{conv, rec}
}

// kda is KimiDeltaAttention on x [B, T, H] from the convolutions' state
// conv [B, K-1, 3·heads·head_dim] (q's channels, then k's, then v's) and
// the recurrent state rec [B, heads, head_dim, head_dim] float32.
// Padding positions are zeroed first, so that left padding leaves both
// states at zero (the release unpads instead; a zero input changes
// neither state: k and v are zero, and a decayed zero state is zero).
func (m *Model) kda(p *lm.Params, x, conv, rec *Node, step *lm.Step) (out, _, _ *Node) {
	d := m.o.KDA
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	heads, dk, hd := d.KHeads, d.KDim, d.KeyDim()
	dtype := x.DType()
	f32 := dtypes.Float32
	x = Mul(x, nn.RealTokens(step, dtype))
	lin := func(name string, in *Node) *Node { return nn.Linear(in, p.Get(name+".weight"), nil) }

	qkv := Concatenate([]*Node{lin("q_proj", x), lin("k_proj", x), lin("v_proj", x)}, -1) // [B, T, 3·hd]
	taps := Concatenate([]*Node{p.Get("q_conv1d.weight"), p.Get("k_conv1d.weight"), p.Get("v_conv1d.weight")}, 0)
	qkv, conv = nn.CausalConv1D(qkv, conv, taps)
	qkv = nn.SiLU(qkv) // ShortConvolution's activation
	part := func(j int) *Node { return Reshape(SliceAxis(qkv, 2, AxisRange(j*hd, (j+1)*hd)), b, t, heads, dk) }
	q, k, v := part(0), part(1), part(2) // [B, T, heads, head_dim]

	// fused_kda_gate: -exp(A_log) · softplus(f + dt_bias), in float32.
	f := Add(ConvertDType(lin("f_b_proj", lin("f_a_proj", x)), f32), ExpandLeftToRank(p.Get("dt_bias"), 3))
	aLog := Reshape(p.Get("A_log"), 1, 1, heads, 1)
	g := Mul(Neg(Exp(aLog)), nn.SoftplusTorch(Reshape(f, b, t, heads, dk))) // [B, T, heads, head_dim], <= 0
	beta := Sigmoid(ConvertDType(lin("b_proj", x), f32))                    // [B, T, heads]

	q, k = nn.DeltaRuleInputs(q, k, heads)
	var core *Node
	if t == 1 {
		core, rec = nn.RecurrentGatedDeltaRule(q, k, v, g, beta, rec)
	} else {
		core, rec = nn.ChunkGatedDeltaRule(q, k, v, g, beta, rec, m.o.ChunkSize)
	}
	core = ConvertDType(core, dtype) // chunk_kda returns v's dtype
	gate := Reshape(lin("g_b_proj", lin("g_a_proj", x)), b, t, heads, dk)
	core = nn.SigmoidGatedRMSNorm(core, gate, p.Get("o_norm.weight"), m.o.Eps)
	return lin("o_proj", Reshape(core, b, t, hd)), conv, rec
}

var (
	_ lm.Routed  = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)
