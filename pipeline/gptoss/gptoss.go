// Package gptoss implements GptOssForCausalLM (OpenAI's gpt-oss-20b and
// gpt-oss-120b, "gpt-oss-120b & gpt-oss-20b Model Card", OpenAI, 2025,
// arXiv:2508.10925), following transformers'
// models/gpt_oss/modeling_gpt_oss.py.
//
// Each decoder layer is pre-norm attention then a pre-norm mixture of
// experts, each with a residual:
//
//   - Attention: grouped-query attention with q/k/v/o biases, YaRN rotary
//     embeddings (factor 32 over 4096 positions, theta 150000, with YaRN's
//     attention scaling of cos and sin), a 128-token sliding window on the
//     sliding_attention layers (every other layer), and attention sinks:
//     a learned logit per head (self_attn.sinks) joins each softmax and
//     its share is dropped (nn.AttentionSinks).
//   - Router (mlp.router): a linear layer with bias; the top
//     num_experts_per_tok logits, softmaxed among themselves.
//   - Experts (mlp.experts): one fused gate_up projection with a bias whose
//     outputs interleave gate (even) and up (odd), the clamped SwiGLU
//     (gate ≤ limit, |up| ≤ limit, (up+1)·gate·σ(alpha·gate)), and a down
//     projection with a bias; a token's output is the routing-weighted sum
//     of its experts' outputs, biases included.
//
// The experts are held stacked in the Linear layout, gate_up [E, 2I, H]
// and down [E, H, I]. Checkpoints store them either in MXFP4 (the
// official releases: gate_up_proj_blocks/_scales, already [E, out, in])
// or as transformers' parameters (a bf16 re-save: gate_up_proj [E, H, 2I]
// and down_proj [E, I, H], input-major), which the loader transposes
// (lm.WeightSpec.MXFP4, lm.WeightSpec.Transposed). The experts run in the
// graph (nn.ExpertStack), one executable per shape whatever the routing.
package gptoss

import (
	"encoding/json"
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("GptOssForCausalLM", New)
}

// Config is a GptOssForCausalLM config.json: the Llama fields plus GPT-OSS's.
type Config struct {
	llama.Config
	AttentionBias      *bool               `json:"attention_bias"`
	NumLocalExperts    *int                `json:"num_local_experts"`
	NumExperts         *int                `json:"num_experts"`
	NumExpertsPerTok   *int                `json:"num_experts_per_tok"`
	ExpertsPerToken    *int                `json:"experts_per_token"`
	SlidingWindow      *int                `json:"sliding_window"`
	SwiGLULimit        *float64            `json:"swiglu_limit"`
	SwiGLUAlpha        *float64            `json:"swiglu_alpha"`
	QuantizationConfig *QuantizationConfig `json:"quantization_config"`
}

// QuantizationConfig is config.json's quantization_config as GPT-OSS
// releases carry it.
type QuantizationConfig struct {
	QuantMethod         string   `json:"quant_method"`
	ModulesToNotConvert []string `json:"modules_to_not_convert"`
}

// Defaults are GptOssConfig's defaults (the 120b's sizes).
var Defaults = llama.Defaults{
	VocabSize: 201088, Hidden: 2880, Intermediate: 2880, Layers: 36, Heads: 64,
	MaxPositions: 131072, Eps: 1e-5, RopeTheta: 150000, Act: "silu",
}

// Defaults of the MoE and attention fields.
const (
	defaultExperts = 128
	defaultTopK    = 4
	defaultKV      = 8
	defaultHeadDim = 64
	defaultWindow  = 128
	defaultLimit   = 7.0
	defaultAlpha   = 1.702
)

// defaultRope is GptOssConfig's rope_parameters when the config names
// none: YaRN, factor 32 over 4096 positions, not truncated.
var defaultRope = map[string]any{
	"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
	"truncate": false, "original_max_position_embeddings": 4096.0,
}

// Options are the resolved hyperparameters.
type Options struct {
	llama.Options
	// Experts and TopK are num_local_experts and num_experts_per_tok.
	Experts, TopK int
	// Limit and Alpha are the clamped SwiGLU's swiglu_limit and
	// swiglu_alpha.
	Limit, Alpha float64
	// MXFP4 reports a quantization_config of method mxfp4 (the experts
	// are stored so; a checkpoint may hold them either way).
	MXFP4 bool
}

// Resolve reads a GptOssForCausalLM config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	if c.NumKeyValueHeads == nil {
		kv := defaultKV
		c.NumKeyValueHeads = &kv
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
	bias := lm.Or(c.AttentionBias, true)
	o.QKVBias, o.OBias, o.MLPBias = bias, bias, false
	if c.LayerTypes == nil { // GptOssConfig: sliding first, then alternating
		for i := range s.LayerKinds {
			s.LayerKinds[i] = lm.KindFull
			if i%2 == 0 {
				s.LayerKinds[i] = lm.KindSliding
			}
		}
	}
	s.SlidingWindow = lm.Or(c.SlidingWindow, defaultWindow)
	if s.SlidingWindow <= 0 {
		for _, k := range s.LayerKinds {
			if k == lm.KindSliding {
				return Options{}, fmt.Errorf("%s: sliding_window must be positive for sliding_attention layers, got %d", where, s.SlidingWindow)
			}
		}
	}
	if !hasRope(cfg.Raw) {
		p := nn.RopeParams{Theta: Defaults.RopeTheta, HeadDim: s.HeadDim, MaxPositions: s.MaxPositions, Scaling: defaultRope}
		if v, ok := cfg.Raw["rope_theta"]; ok && string(v) != "null" {
			if err := json.Unmarshal(v, &p.Theta); err != nil {
				return Options{}, fmt.Errorf("%s: rope_theta: %w", where, err)
			}
		}
		if o.Rope, err = nn.NewRope(p); err != nil {
			return Options{}, fmt.Errorf("%s: rotary embedding: %w", where, err)
		}
	}
	o.Experts = lm.Or(c.NumLocalExperts, lm.Or(c.NumExperts, defaultExperts))
	o.TopK = lm.Or(c.NumExpertsPerTok, lm.Or(c.ExpertsPerToken, defaultTopK))
	if o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts {
		return Options{}, fmt.Errorf("%s: num_experts_per_tok %d must be in [1, num_local_experts %d]", where, o.TopK, o.Experts)
	}
	if err := lm.CheckExperts(where, "num_local_experts", o.Experts, s.Layers); err != nil {
		return Options{}, err
	}
	o.Limit = lm.Or(c.SwiGLULimit, defaultLimit)
	o.Alpha = lm.Or(c.SwiGLUAlpha, defaultAlpha)
	if o.Limit <= 0 {
		return Options{}, fmt.Errorf("%s: swiglu_limit must be positive, got %g", where, o.Limit)
	}
	if q := c.QuantizationConfig; q != nil {
		if q.QuantMethod != "mxfp4" {
			return Options{}, errs.Unsupportedf("%s: quantization_config.quant_method %q is not supported for %s (supported: mxfp4)", where, q.QuantMethod, cfg.Architecture())
		}
		o.MXFP4 = true
	}
	if o.MXFP4 && (s.Intermediate%32 != 0 || s.Hidden%32 != 0) {
		return Options{}, fmt.Errorf("%s: MXFP4 experts need hidden_size and intermediate_size multiples of 32, got %d and %d", where, s.Hidden, s.Intermediate)
	}
	return o, nil
}

// hasRope reports whether a config.json sets its rotary embedding.
func hasRope(raw map[string]json.RawMessage) bool {
	for _, k := range []string{"rope_scaling", "rope_parameters"} {
		if v, ok := raw[k]; ok && string(v) != "null" {
			return true
		}
	}
	return false
}

// New builds the model from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is the GPT-OSS decoder. Embedding, head and layer state are
// llama.Model's; the attention adds sinks, the MLP is the mixture of
// experts, and the norms scale in float32 (GptOssRMSNorm).
type Model struct {
	*llama.Model
	o Options
}

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{Model: llama.NewModel(o.Options), o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// LayerWeights implements lm.Model: llama's attention weights plus the
// sinks, the router and the expert stacks with their biases.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := m.Spec()
	ws := m.AttentionWeights(i)
	p := fmt.Sprintf("model.layers.%d.", i)
	e, in, h := m.o.Experts, s.Intermediate, s.Hidden
	add := func(w lm.WeightSpec) { w.Name = p + w.Name; ws = append(ws, w) }
	add(lm.WeightSpec{Name: "self_attn.sinks", Shape: []int{s.Heads}, TP: lm.Replicated})
	add(lm.WeightSpec{Name: "mlp.router.weight", Shape: []int{e, h}, Matmul: true, Router: true})
	add(lm.WeightSpec{Name: "mlp.router.bias", Shape: []int{e}})
	add(lm.WeightSpec{Name: "mlp.experts.gate_up_proj", Shape: []int{e, 2 * in, h}, Matmul: true, TP: lm.Column, Transposed: true, MXFP4: true})
	add(lm.WeightSpec{Name: "mlp.experts.gate_up_proj_bias", Shape: []int{e, 2 * in}})
	add(lm.WeightSpec{Name: "mlp.experts.down_proj", Shape: []int{e, h, in}, Matmul: true, TP: lm.Row, Transposed: true, MXFP4: true})
	add(lm.WeightSpec{Name: "mlp.experts.down_proj_bias", Shape: []int{e, h}})
	return ws
}

// InGraphExperts implements lm.InGraphExperts.
func (m *Model) InGraphExperts() string {
	return "biased experts with the clamped SwiGLU, held stacked, MXFP4 or transposed in the checkpoint"
}

var _ lm.InGraphExperts = (*Model)(nil)

var _ lm.Finisher = (*Model)(nil)

// Final implements lm.Finisher: the final norm.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return m.norm(x, w.Get("model.norm.weight"))
}

// Head implements lm.Model: the final norm and lm_head.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	x = m.Final(w, x)
	name := "lm_head.weight"
	if m.Spec().TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	return nn.Linear(x, w.Get(name), nil) // [B, V]
}

// norm is GptOssRMSNorm: llama's RMSNorm, but scaled by w in float32
// before the result is cast back to x's dtype.
func (m *Model) norm(x, w *Node) *Node { return nn.RMSNormF32Scale(x, w, m.o.Eps) }

// Layer implements lm.Model: GptOssDecoderLayer.
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	p := w.Scope(fmt.Sprintf("model.layers.%d", i))
	h := m.norm(x, p.Get("input_layernorm.weight"))
	h, c := m.attention(p.Scope("self_attn"), h, nn.KVOf(state), step, m.LayerKind(i))
	x = Add(x, h)
	h = m.norm(x, p.Get("post_attention_layernorm.weight"))
	x = Add(x, m.experts(p.Scope("mlp"), h, step))
	return x, c.State()
}

// attention is GptOssAttention: biased projections, rotary embedding,
// cache write, grouped-query attention with sinks (windowed on sliding
// layers), o_proj.
func (m *Model) attention(p *lm.Params, x *Node, c nn.KV, step *lm.Step, kind string) (*Node, nn.KV) {
	s := m.Spec()
	bias := func(name string) *Node {
		if !m.o.QKVBias {
			return nil
		}
		return p.Get(name)
	}
	q := nn.SplitHeads(nn.Linear(x, p.Get("q_proj.weight"), bias("q_proj.bias")), s.Heads)   // [B, T, H, D]
	k := nn.SplitHeads(nn.Linear(x, p.Get("k_proj.weight"), bias("k_proj.bias")), s.KVHeads) // [B, T, KV, D]
	v := nn.SplitHeads(nn.Linear(x, p.Get("v_proj.weight"), bias("v_proj.bias")), s.KVHeads) // [B, T, KV, D]
	cos, sin := m.o.Rope.CosSin(step, x.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	c = nn.WriteKV(c, k, v, step)
	window := 0
	if kind == lm.KindSliding {
		window = s.SlidingWindow
	}
	out := nn.AttentionSinks(q, c, nn.AttentionBias(step, window), p.Get("sinks"), 0) // [B, T, H*D]
	var ob *Node
	if m.o.OBias {
		ob = p.Get("o_proj.bias")
	}
	return nn.Linear(out, p.Get("o_proj.weight"), ob), c
}

// experts is GptOssMLP on h [B, T, H]: the router's top-k, then the
// routed experts.
func (m *Model) experts(p *lm.Params, h *Node, step *lm.Step) *Node {
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	x := Reshape(h, b*t, hd)
	logits := nn.Linear(x, p.Get("router.weight"), p.Get("router.bias")) // [N, E]
	// Softmax over the top-k logits equals the top-k softmax
	// probabilities renormalised.
	ids, weights := nn.TopKRouter(logits, m.o.TopK, true) // [N, K]
	e := p.Scope("experts")
	stack := nn.ExpertStack{
		Gate: e.Get("gate_up_proj"), GateBias: e.Get("gate_up_proj_bias"),
		Down: e.Get("down_proj"), DownBias: e.Get("down_proj_bias"),
		GLU: func(gu *Node) *Node { return ClampedSwiGLU(gu, m.o.Limit, m.o.Alpha) },
	}
	return Reshape(stack.Routed(x, ids, weights, step.GatherExperts), b, t, hd)
}

// ClampedSwiGLU is GptOssExperts' activation on the fused projection gu
// [..., 2I] whose last axis interleaves gate (even) and up (odd):
// gate clamped above at limit, up to [-limit, limit], then
// (up + 1) · gate · σ(alpha · gate) [..., I].
func ClampedSwiGLU(gu *Node, limit, alpha float64) *Node {
	axis := gu.Rank() - 1
	gate := SliceAxis(gu, axis, AxisRange().Stride(2))
	up := SliceAxis(gu, axis, AxisRange(1).Stride(2))
	gate = MinScalar(gate, limit)
	up = MaxScalar(MinScalar(up, limit), -limit)
	glu := Mul(gate, Sigmoid(MulScalar(gate, alpha)))
	return Mul(OnePlus(up), glu)
}
