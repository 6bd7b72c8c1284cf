// Package lfm2 implements Liquid AI's LFM2 (Lfm2ForCausalLM: LFM2-350M,
// 700M, 1.2B, 2.6B) and LFM2-MoE (Lfm2MoeForCausalLM: LFM2-8B-A1B,
// LFM2-24B-A2B) of "LFM2 Technical Report" (Liquid AI, 2025,
// arXiv:2511.23404), following transformers' models/lfm2 and
// models/lfm2_moe, and LFM2-VL's text model (vl.go):
//
//   - layer_types names each layer "conv" or "full_attention" (LFM2's
//     older configs list the attention layers in full_attn_idxs; with
//     neither, every layer attends). A conv layer's mixer is the gated
//     short convolution (nn.ShortConv: in_proj to B, C and x, C·conv(B·x)
//     with a kernel of conv_L_cache, out_proj); its state is the
//     convolution's last conv_L_cache-1 inputs. An attention layer is
//     Qwen3's: per-head RMSNorms of the queries and keys (q_layernorm,
//     k_layernorm) before the rotary embedding, no biases, out_proj.
//   - Each layer is operator_norm → mixer → residual, ffn_norm →
//     feed_forward → residual; the final norm is model.embedding_norm
//     (applied after the last layer, whatever its name says), the head
//     tied to the embeddings unless tie_embedding (or
//     tie_word_embeddings) says otherwise.
//   - LFM2's feed_forward is a SwiGLU MLP (w1 the gate, w3 the up, w2 the
//     down projection) whose width derives from intermediate_size (or
//     block_ff_dim) as Lfm2MLP does with block_auto_adjust_ff_dim: 2/3 of
//     it, times block_ffn_dim_multiplier, rounded up to
//     block_multiple_of.
//   - LFM2-MoE's first num_dense_layers layers have that MLP at
//     intermediate_size; the others a mixture of num_experts SwiGLU
//     experts: sigmoid scores of the router (feed_forward.gate), the top
//     num_experts_per_tok chosen by the scores plus expert_bias
//     (use_expert_bias) and weighed by the scores, divided by their sum
//     plus 1e-6 (norm_topk_prob), times routed_scaling_factor. The
//     releases hold the experts one by one (feed_forward.experts.E.w1);
//     transformers v5 saves stack them (gate_up_proj, down_proj); both
//     are read.
package lfm2

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() {
	lm.Register("Lfm2ForCausalLM", New)
	lm.Register("Lfm2MoeForCausalLM", New)
}

// Config is an Lfm2ForCausalLM or Lfm2MoeForCausalLM config.json.
type Config struct {
	ModelType             string          `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	BlockFFDim            *int            `json:"block_ff_dim"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	NormEps               *float64        `json:"norm_eps"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	TieEmbedding          *bool           `json:"tie_embedding"`
	HeadDim               *int            `json:"head_dim"`
	HiddenAct             string          `json:"hidden_act"`
	ConvBias              *bool           `json:"conv_bias"`
	ConvLCache            *int            `json:"conv_L_cache"`
	BlockMultipleOf       *int            `json:"block_multiple_of"`
	BlockFFNDimMultiplier json.RawMessage `json:"block_ffn_dim_multiplier"`
	BlockAutoAdjustFFDim  *bool           `json:"block_auto_adjust_ff_dim"`
	FullAttnIdxs          []int           `json:"full_attn_idxs"`
	LayerTypes            []string        `json:"layer_types"`
	MoEIntermediateSize   *int            `json:"moe_intermediate_size"`
	NumDenseLayers        *int            `json:"num_dense_layers"`
	NumExperts            *int            `json:"num_experts"`
	NumExpertsPerTok      *int            `json:"num_experts_per_tok"`
	UseExpertBias         *bool           `json:"use_expert_bias"`
	RoutedScalingFactor   *float64        `json:"routed_scaling_factor"`
	NormTopKProb          *bool           `json:"norm_topk_prob"`
	BOSTokenID            config.IDList   `json:"bos_token_id"`
	EOSTokenID            config.IDList   `json:"eos_token_id"`
}

// Options are an LFM2's resolved hyperparameters.
type Options struct {
	Spec lm.Spec
	// MoE marks Lfm2MoeForCausalLM.
	MoE bool
	// Eps is norm_eps.
	Eps float64
	// ConvBias gives the short convolutions' in_proj, conv and out_proj
	// biases; Kernel is conv_L_cache.
	ConvBias bool
	Kernel   int
	// Dense is the number of leading layers with the dense MLP (every
	// layer for LFM2; num_dense_layers for LFM2-MoE), of Spec.Intermediate.
	Dense int
	// Experts, TopK and MoEIntermediate are the mixture's num_experts,
	// num_experts_per_tok and moe_intermediate_size.
	Experts, TopK, MoEIntermediate int
	// ExpertBias is use_expert_bias, NormTopK norm_topk_prob and Scale
	// routed_scaling_factor.
	ExpertBias, NormTopK bool
	Scale                float64
	// Act is the experts' activation (hidden_act; the dense MLPs are
	// SiLU whatever it says, as Lfm2MLP is).
	Act func(*Node) *Node
	// Rope is the attention layers' rotary embedding.
	Rope *nn.Rope
}

// The configuration classes' defaults (Lfm2Config, Lfm2MoeConfig).
const (
	defaultVocab     = 65536
	defaultLayers    = 32
	defaultHeads     = 32
	defaultKVHeads   = 8
	defaultMaxPos    = 128000
	defaultEps       = 1e-5
	defaultTheta     = 1e6
	defaultKernel    = 3
	defaultMultiple  = 256
	denseHidden      = 2560
	denseInter       = 12288
	moeHidden        = 2048
	moeInter         = 7168
	moeExpertInter   = 1792
	moeDenseLayers   = 2
	moeExperts       = 32
	moeTopK          = 4
	routerNormEps    = 1e-6 // Lfm2MoeSparseMoeBlock's
	moeArchitecture  = "Lfm2MoeForCausalLM"
	moeModelType     = "lfm2_moe"
	layerTypeConv    = "conv"
	layerTypeAttends = "full_attention"
)

// Resolve reads an LFM2 or LFM2-MoE config.json.
func Resolve(cfg *config.File) (Options, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return Options{}, err
	}
	moe := cfg.Architecture() == moeArchitecture || c.ModelType == moeModelType
	hidden, inter := denseHidden, denseInter
	if moe {
		hidden, inter = moeHidden, moeInter
	}
	s := lm.Spec{
		Architecture:  cfg.Architecture(),
		ModelType:     c.ModelType,
		VocabSize:     lm.Or(c.VocabSize, defaultVocab),
		Hidden:        lm.Or(c.HiddenSize, hidden),
		Layers:        lm.Or(c.NumHiddenLayers, defaultLayers),
		Heads:         lm.Or(c.NumAttentionHeads, defaultHeads),
		MaxPositions:  lm.Or(c.MaxPositionEmbeddings, defaultMaxPos),
		EOS:           c.EOSTokenID,
		BOS:           1,
		TieEmbeddings: lm.Or(c.TieEmbedding, lm.Or(c.TieWordEmbeddings, true)),
	}
	if len(c.BOSTokenID) > 0 {
		s.BOS = c.BOSTokenID[0]
	} else if cfg.Has("bos_token_id") {
		s.BOS = -1
	}
	if len(s.EOS) == 0 && !cfg.Has("eos_token_id") {
		s.EOS = []int{2}
	}
	s.KVHeads = lm.Or(c.NumKeyValueHeads, defaultKVHeads)
	if c.HeadDim != nil && *c.HeadDim > 0 { // Lfm2Attention's getattr(config, "head_dim", hidden/heads)
		s.HeadDim = *c.HeadDim
	} else if s.Hidden > 0 && s.Heads > 0 {
		if s.Hidden%s.Heads != 0 {
			return Options{}, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d (and head_dim is not set)", where, s.Hidden, s.Heads)
		}
		s.HeadDim = s.Hidden / s.Heads
	}
	o := Options{MoE: moe, Eps: lm.Or(c.NormEps, defaultEps), ConvBias: lm.Or(c.ConvBias, false), Kernel: lm.Or(c.ConvLCache, defaultKernel)}
	var err error
	if s.Intermediate, err = c.denseWidth(where, moe, inter); err != nil {
		return Options{}, err
	}
	if err := s.CheckSizes(where); err != nil {
		return Options{}, err
	}
	if o.Kernel < 2 {
		return Options{}, fmt.Errorf("%s: conv_L_cache %d must be at least 2", where, o.Kernel)
	}
	if s.LayerKinds, err = c.kinds(where, moe, s.Layers); err != nil {
		return Options{}, err
	}
	o.Act = nn.Activation("silu")
	o.Dense = s.Layers
	if moe {
		// The experts' activation is hidden_act (Lfm2MoeExperts); the
		// dense MLPs apply SiLU whatever it says, and LFM2 never reads it.
		if act := c.HiddenAct; act != "" {
			if o.Act = nn.Activation(act); o.Act == nil {
				return Options{}, errs.Unsupportedf("%s: hidden_act %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
			}
		}
		o.Dense = lm.Or(c.NumDenseLayers, moeDenseLayers)
		o.Experts, o.TopK = lm.Or(c.NumExperts, moeExperts), lm.Or(c.NumExpertsPerTok, moeTopK)
		o.MoEIntermediate = lm.Or(c.MoEIntermediateSize, moeExpertInter)
		o.ExpertBias, o.NormTopK = lm.Or(c.UseExpertBias, true), lm.Or(c.NormTopKProb, true)
		o.Scale = lm.Or(c.RoutedScalingFactor, 1.0)
		switch {
		case o.Dense < 0 || o.Dense > s.Layers:
			return Options{}, fmt.Errorf("%s: num_dense_layers %d must be in [0, num_hidden_layers %d]", where, o.Dense, s.Layers)
		case o.Dense < s.Layers && (o.Experts <= 0 || o.TopK <= 0 || o.TopK > o.Experts):
			return Options{}, fmt.Errorf("%s: num_experts %d must be positive and num_experts_per_tok %d in [1, num_experts]", where, o.Experts, o.TopK)
		case o.Dense < s.Layers && o.MoEIntermediate <= 0:
			return Options{}, fmt.Errorf("%s: moe_intermediate_size %d must be positive", where, o.MoEIntermediate)
		case math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0):
			return Options{}, fmt.Errorf("%s: routed_scaling_factor %v must be finite", where, o.Scale)
		}
		if err := lm.CheckExperts(where, "num_experts", o.Experts, s.Layers-o.Dense); err != nil {
			return Options{}, err
		}
	}
	o.Spec = s
	if o.Rope, err = nn.ConfigRope(ropeFields(cfg.Raw), defaultTheta, s.HeadDim, s.MaxPositions); err != nil {
		return Options{}, fmt.Errorf("%s: %w", where, err)
	}
	return o, nil
}

// denseWidth is the dense MLPs' width: LFM2-MoE's intermediate_size as it
// stands; LFM2's intermediate_size (block_ff_dim in the original configs)
// adjusted as Lfm2MLP adjusts it when block_auto_adjust_ff_dim: int(2/3
// of it), then, when block_ffn_dim_multiplier is not null, int(that times
// the multiplier) rounded up to a multiple of block_multiple_of.
func (c *Config) denseWidth(where string, moe bool, def int) (int, error) {
	inter := lm.Or(c.IntermediateSize, def)
	if moe {
		return inter, nil
	}
	if c.BlockFFDim != nil {
		inter = *c.BlockFFDim
	}
	if !lm.Or(c.BlockAutoAdjustFFDim, true) {
		return inter, nil
	}
	inter = 2 * inter / 3
	mult := 1.0
	if raw := strings.TrimSpace(string(c.BlockFFNDimMultiplier)); raw == "null" {
		return inter, nil
	} else if raw != "" {
		if err := json.Unmarshal(c.BlockFFNDimMultiplier, &mult); err != nil || mult <= 0 || math.IsInf(mult, 0) {
			return 0, fmt.Errorf("%s: block_ffn_dim_multiplier is %s; want a positive number or null", where, raw)
		}
	}
	of := lm.Or(c.BlockMultipleOf, defaultMultiple)
	if of <= 0 {
		return 0, fmt.Errorf("%s: block_multiple_of %d must be positive", where, of)
	}
	scaled := mult * float64(inter)
	if scaled > float64(math.MaxInt32) {
		return 0, fmt.Errorf("%s: block_ffn_dim_multiplier %v makes the MLP %g wide", where, mult, scaled)
	}
	inter = int(scaled)
	return of * ((inter + of - 1) / of), nil
}

// kinds reads layer_types ("conv", "full_attention"), or LFM2's
// full_attn_idxs, as the layers' kinds (nn.KindConv, lm.KindFull).
// Without either LFM2 attends in every layer; LFM2-MoE needs layer_types,
// as transformers does.
func (c *Config) kinds(where string, moe bool, layers int) ([]string, error) {
	types, err := lm.LayerTypes(where, c.LayerTypes, layers, layerTypeConv, layerTypeAttends)
	if err != nil {
		return nil, err
	}
	if types == nil && moe {
		return nil, fmt.Errorf("%s: %s needs layer_types (\"conv\" or \"full_attention\" per layer)", where, moeArchitecture)
	}
	if types == nil {
		types = make([]string, layers)
		attends := make([]bool, layers)
		for _, i := range c.FullAttnIdxs {
			if i < 0 || i >= layers {
				return nil, fmt.Errorf("%s: full_attn_idxs holds %d, outside the %d layers", where, i, layers)
			}
			attends[i] = true
		}
		for i := range types {
			types[i] = layerTypeConv
			if attends[i] || c.FullAttnIdxs == nil {
				types[i] = layerTypeAttends
			}
		}
	}
	for i, t := range types {
		if t == layerTypeConv {
			types[i] = nn.KindConv
		} else {
			types[i] = lm.KindFull
		}
	}
	return types, nil
}

// ropeFields are the config's fields as nn.ConfigRope reads them: the
// original configs' theta in place of rope_theta (Lfm2Config reads theta
// first), and a rope_parameters keyed by layer type (Lfm2Config's
// standardized {"full_attention": {...}, "conv": null}) replaced by the
// attention layers' entry.
func ropeFields(raw map[string]json.RawMessage) map[string]json.RawMessage {
	out := raw
	if theta, ok := raw["theta"]; ok && string(theta) != "null" {
		out = maps.Clone(raw)
		out["rope_theta"] = theta
	}
	var byType map[string]json.RawMessage
	if json.Unmarshal(raw["rope_parameters"], &byType) != nil {
		return out
	}
	if full, ok := byType[layerTypeAttends]; ok {
		out = maps.Clone(out)
		out["rope_parameters"] = full
	}
	return out
}

// New builds an Lfm2ForCausalLM or Lfm2MoeForCausalLM from its
// config.json.
func New(cfg *config.File) (lm.Model, error) {
	o, err := Resolve(cfg)
	if err != nil {
		return nil, err
	}
	return NewModel(o), nil
}

// Model is an LFM2 decoder. It implements lm.Model and, with experts,
// lm.Routed.
type Model struct{ o Options }

// NewModel returns the decoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved options.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: nn.KindConv or lm.KindFull.
func (m *Model) LayerKind(i int) string { return m.o.Spec.LayerKinds[i] }

// sparse reports that layer i's feed-forward is the mixture of experts.
func (m *Model) sparse(i int) bool { return m.o.MoE && i >= m.o.Dense }

// LayerState implements lm.Model: the short convolution's last inputs
// for a conv layer, a KV cache for an attention layer.
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec {
	s := &m.o.Spec
	if m.LayerKind(i) == nn.KindConv {
		return nn.ShortConvState(s.Hidden, m.o.Kernel, batch)
	}
	return nn.KVCacheState(batch, s.KVHeads, cacheLen, s.HeadDim)
}

// EmbedWeights implements lm.Model.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	return []lm.WeightSpec{{Name: "model.embed_tokens.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
}

// FinalWeights implements lm.FinalWeighter: model.embedding_norm.
func (m *Model) FinalWeights() []lm.WeightSpec {
	return []lm.WeightSpec{{Name: "model.embedding_norm.weight", Shape: []int{m.o.Spec.Hidden}}}
}

// HeadWeights implements lm.Model.
func (m *Model) HeadWeights() []lm.WeightSpec {
	s := &m.o.Spec
	head, tp := "lm_head.weight", lm.Vocab
	if s.TieEmbeddings {
		head, tp = "model.embed_tokens.weight", lm.Replicated
	}
	return append(m.FinalWeights(), lm.WeightSpec{Name: head, Shape: []int{s.VocabSize, s.Hidden}, Matmul: true, TP: tp})
}

func layer(i int) string { return fmt.Sprintf("model.layers.%d", i) }

// LayerWeights implements lm.Model, with the releases' names.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	p := layer(i) + "."
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: p + name, Shape: shape, Matmul: matmul, TP: tp})
	}
	add("operator_norm.weight", false, lm.Replicated, s.Hidden)
	if m.LayerKind(i) == nn.KindConv {
		ws = append(ws, nn.ShortConvWeights(p+"conv.", s.Hidden, m.o.Kernel, m.o.ConvBias)...)
	} else {
		q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
		add("self_attn.q_proj.weight", true, lm.Column, q, s.Hidden)
		add("self_attn.k_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("self_attn.v_proj.weight", true, lm.KVColumn, kv, s.Hidden)
		add("self_attn.q_layernorm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.k_layernorm.weight", false, lm.Replicated, s.HeadDim)
		add("self_attn.out_proj.weight", true, lm.Row, s.Hidden, q)
	}
	add("ffn_norm.weight", false, lm.Replicated, s.Hidden)
	if !m.sparse(i) {
		add("feed_forward.w1.weight", true, lm.Column, s.Intermediate, s.Hidden)
		add("feed_forward.w3.weight", true, lm.Column, s.Intermediate, s.Hidden)
		add("feed_forward.w2.weight", true, lm.Row, s.Hidden, s.Intermediate)
		return ws
	}
	add("feed_forward.gate.weight", true, lm.Replicated, m.o.Experts, s.Hidden)
	ws[len(ws)-1].Router = true
	if m.o.ExpertBias {
		ws = append(ws, lm.WeightSpec{Name: p + "feed_forward.expert_bias", Shape: []int{m.o.Experts}, F32: true})
	}
	return append(ws, lm.MixtralExperts.Stacked(p+"feed_forward.experts", m.o.Experts, m.o.MoEIntermediate, s.Hidden)...)
}

// Embed implements lm.Model.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	return nn.Embedding(w.Get("model.embed_tokens.weight"), tokens)
}

// Layer implements lm.Model: Lfm2DecoderLayer (Lfm2MoeDecoderLayer).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	p := w.Scope(layer(i) + ".feed_forward")
	if !m.sparse(i) {
		return Add(x, m.mlp(p, h)), out
	}
	ids, weights := m.route(p, h)
	dims := h.Shape().Dimensions
	b, t, hd := dims[0], dims[1], dims[2]
	ep := p.Scope("experts")
	y := nn.RoutedExperts(Reshape(h, b*t, hd), ids, weights, ep.Get("gate_up_proj"), nil, ep.Get("down_proj"), m.o.Act, step.GatherExperts)
	return Add(x, Reshape(y, b, t, hd)), out
}

// mix is layer i up to its feed-forward: x plus the mixer (the short
// convolution or the attention) of its operator_norm; the ffn_norm of
// that sum (the feed-forward's input h); and the mixer's new state.
func (m *Model) mix(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (_, h *Node, out []*Node) {
	p := w.Scope(layer(i))
	h = nn.RMSNorm(x, p.Get("operator_norm.weight"), m.o.Eps, false)
	if m.LayerKind(i) == nn.KindConv {
		var conv *Node
		h, conv = nn.ShortConv(nn.ShortConvParamsOf(p.Scope("conv"), m.o.ConvBias), h, state[0], step)
		out = []*Node{conv}
	} else {
		var c nn.KV
		h, c = m.attention(p.Scope("self_attn"), h, nn.KVOf(state), step)
		out = c.State()
	}
	x = Add(x, h)
	return x, nn.RMSNorm(x, p.Get("ffn_norm.weight"), m.o.Eps, false), out
}

// attention is Lfm2Attention: q/k/v projections, per-head q_layernorm
// and k_layernorm, the rotary embedding, the cache write, causal
// grouped-query attention and out_proj.
func (m *Model) attention(p *lm.Params, x *Node, c nn.KV, step *lm.Step) (*Node, nn.KV) {
	s := &m.o.Spec
	q := nn.SplitHeads(nn.Linear(x, p.Get("q_proj.weight"), nil), s.Heads) // [B, T, H, D]
	k := nn.SplitHeads(nn.Linear(x, p.Get("k_proj.weight"), nil), s.KVHeads)
	v := nn.SplitHeads(nn.Linear(x, p.Get("v_proj.weight"), nil), s.KVHeads)
	q = nn.RMSNorm(q, p.Get("q_layernorm.weight"), m.o.Eps, false)
	k = nn.RMSNorm(k, p.Get("k_layernorm.weight"), m.o.Eps, false)
	cos, sin := m.o.Rope.CosSin(step, x.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	c = nn.WriteKV(c, k, v, step)
	out := nn.Attention(q, c, nn.AttentionBias(step, 0), 0, 0)
	return nn.Linear(out, p.Get("out_proj.weight"), nil), c
}

// mlp is Lfm2MLP on x: w2(silu(w1·x) · w3·x).
func (m *Model) mlp(p *lm.Params, x *Node) *Node {
	return nn.GatedMLP(x, p.Get("w1.weight"), nil, p.Get("w3.weight"), nil, p.Get("w2.weight"), nil, nn.Activation("silu"))
}

// route is Lfm2MoeSparseMoeBlock.route_tokens_to_experts on h [B, T, H]:
// ids and weights [B·T, k].
func (m *Model) route(p *lm.Params, h *Node) (ids, weights *Node) {
	dims := h.Shape().Dimensions
	logits := nn.Linear(Reshape(h, dims[0]*dims[1], dims[2]), p.Get("gate.weight"), nil) // [N, E]
	var bias *Node
	if m.o.ExpertBias {
		bias = p.Get("expert_bias")
	}
	r := nn.GroupRouter{Experts: m.o.Experts, TopK: m.o.TopK, NormTopK: m.o.NormTopK, NormEps: routerNormEps, Scale: m.o.Scale}
	return r.Route(Sigmoid(ConvertDType(logits, dtypes.Float32)), bias)
}

// Experts implements lm.Routed: expert e reads its parts of the stacks;
// nil for a dense layer.
func (m *Model) Experts(i int) *lm.Experts {
	if !m.sparse(i) {
		return nil
	}
	prefix := layer(i) + ".feed_forward.experts"
	return &lm.Experts{Num: m.o.Experts, TopK: m.o.TopK, Weights: func(e int) []lm.WeightSpec {
		return lm.MixtralExperts.Weights(prefix, e, m.o.MoEIntermediate, m.o.Spec.Hidden)
	}}
}

// Expert implements lm.Routed: a SwiGLU MLP of moe_intermediate_size.
func (m *Model) Expert(i, e int, w *lm.Params, x *Node) *Node {
	p := w.Scope(fmt.Sprintf("%s.feed_forward.experts.%d", layer(i), e))
	return nn.GatedMLP(x, p.Get("w1.weight"), nil, p.Get("w3.weight"), nil, p.Get("w2.weight"), nil, m.o.Act)
}

// Route implements lm.Routed: the mixer with its residual, and the
// router's choice on the ffn_norm of that.
func (m *Model) Route(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*lm.Routing, []*Node) {
	x, h, out := m.mix(i, w, x, state, step)
	ids, weights := m.route(w.Scope(layer(i)+".feed_forward"), h)
	dims := h.Shape().Dimensions
	b, t := dims[0], dims[1]
	return &lm.Routing{Residual: x, Input: h, Experts: Reshape(ids, b, t, m.o.TopK), Weights: Reshape(weights, b, t, m.o.TopK)}, out
}

// Final implements lm.Finisher: model.embedding_norm.
func (m *Model) Final(w *lm.Params, x *Node) *Node {
	return nn.RMSNorm(x, w.Get("model.embedding_norm.weight"), m.o.Eps, false)
}

// Head implements lm.Model: the final norm and lm_head (the embeddings
// when tied).
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	name := "lm_head.weight"
	if m.o.Spec.TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	return nn.Linear(m.Final(w, x), w.Get(name), nil)
}

var (
	_ lm.Routed        = (*Model)(nil)
	_ lm.Finisher      = (*Model)(nil)
	_ lm.FinalWeighter = (*Model)(nil)
)
