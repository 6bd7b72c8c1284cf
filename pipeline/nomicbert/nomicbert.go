// Package nomicbert implements NomicBERT, the encoder of Nomic's embedding
// models (nomic-ai/nomic-embed-text-v1 and -v1.5), as their Hub
// checkpoints store it: config.json's "NomicBertModel" with
// model_type "nomic_bert" (GPT-2-style keys: n_embd, n_head, n_layer,
// n_inner), following nomic-ai/contrastors'
// models/huggingface/modeling_hf_nomic_bert.py, which those checkpoints
// load as remote code.
//
// It is a BERT (pipeline/bert) with rotary positions instead of a
// position table (over the first head_dim·rotary_emb_fraction dims of
// each head, base rotary_emb_base, halves rotated as GPT-NeoX does), one
// fused QKV projection, a gated MLP (fc11's value times the activation of
// fc12's gate: SwiGLU for activation_function "swiglu") or a plain one
// (fc1, gelu, fc2), and biases only where the config asks for them. The
// layers are post-norm, as BERT's: x = norm1(x + attention(x)), then
// norm2(x + mlp(x)); the token and token-type embeddings go through
// emb_ln first. There is no final norm: the last layer's output is what
// sentence-transformers pools (mean, for nomic-embed-text).
//
// nomic-embed-text-v2-moe makes every second layer (i % moe_every_n_layers
// == 1) a mixture of experts, as contrastors trains it with megablocks'
// dMoE: the router mlp.router.layer, the softmax's moe_top_k of
// num_experts, ungated GELU experts whose matrices are stored two to a
// tensor (mlp.experts.mlp.w1 and w2 [experts·n_inner, n_embd], w2 each
// expert's down projection transposed; the loader splits them:
// lm.Splitter) and one bias, mlp.experts.bias, after their weighted sum.
//
// Like pipeline/bert it is an lm.Model without state (lm.Spec.Encoder)
// and an lm.Finisher (the identity).
package nomicbert

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

func init() { lm.Register("NomicBertModel", New) }

// KindLayer is every layer's kind.
const KindLayer = "nomicbert"

// Config is a NomicBertConfig config.json.
type Config struct {
	ModelType         string   `json:"model_type"`
	VocabSize         *int     `json:"vocab_size"`
	PadVocabMultiple  *int     `json:"pad_vocab_size_multiple"`
	NEmbd             *int     `json:"n_embd"`
	NHead             *int     `json:"n_head"`
	NLayer            *int     `json:"n_layer"`
	NInner            *int     `json:"n_inner"`
	NPositions        *int     `json:"n_positions"`
	TypeVocabSize     *int     `json:"type_vocab_size"`
	LayerNormEps      *float64 `json:"layer_norm_epsilon"`
	Activation        string   `json:"activation_function"`
	RotaryFraction    *float64 `json:"rotary_emb_fraction"`
	RotaryBase        *float64 `json:"rotary_emb_base"`
	RotaryInterleaved bool     `json:"rotary_emb_interleaved"`
	RotaryScaleBase   *float64 `json:"rotary_emb_scale_base"`
	// RotaryScalingFactor is dynamic NTK scaling past
	// max_trained_positions.
	RotaryScalingFactor *float64 `json:"rotary_scaling_factor"`
	MaxTrainedPositions *int     `json:"max_trained_positions"`
	QKVProjBias         *bool    `json:"qkv_proj_bias"`
	MLPFc1Bias          *bool    `json:"mlp_fc1_bias"`
	MLPFc2Bias          *bool    `json:"mlp_fc2_bias"`
	Prenorm             bool     `json:"prenorm"`
	Causal              bool     `json:"causal"`
	UseRMSNorm          bool     `json:"use_rms_norm"`
	ParallelBlock       bool     `json:"parallel_block"`
	NumHeadsKV          *int     `json:"num_heads_kv"`
	RotaryHeadDim       bool     `json:"rotary_head_dim"`
	PadTokenID          *int     `json:"pad_token_id"`
	// NumExperts, MoEEveryN, MoETopK and the rest are
	// nomic-embed-text-v2-moe's mixture-of-experts layers, as
	// contrastors trains them with megablocks' dMoE.
	NumExperts         *int            `json:"num_experts"`
	MoEEveryN          *int            `json:"moe_every_n_layers"`
	MoETopK            *int            `json:"moe_top_k"`
	MoENormalize       json.RawMessage `json:"moe_normalize_expert_weights"`
	MoEImpl            string          `json:"moe_impl"`
	NumSharedExperts   *int            `json:"num_shared_experts"`
	ExpertChoiceRouter bool            `json:"expert_choice_router"`
	FFNDiv             *int            `json:"ffn_div"`
	// HiddenSize is native transformers' NomicBertConfig key (refused
	// without n_embd: that layout names everything differently).
	HiddenSize *int `json:"hidden_size"`
}

// Options are a resolved NomicBERT's hyperparameters.
type Options struct {
	Spec lm.Spec
	Eps  float64
	// TypeVocab is type_vocab_size (0: no token-type embeddings).
	TypeVocab int
	// Gated says the MLP is fc2(fc11(x) · Act(fc12(x))); else
	// fc2(Act(fc1(x))).
	Gated bool
	Act   func(*Node) *Node
	// QKVBias, FC1Bias, FC2Bias: which projections have biases.
	QKVBias, FC1Bias, FC2Bias bool
	Rope                      *nn.Rope
	// MaxTrained is max_trained_positions: with a rotary scaling factor
	// set, inputs past it are refused (dynamic NTK is not implemented).
	MaxTrained int
	Scaled     bool
	// Experts > 0: the layers Sparse marks are mixtures of experts
	// (moe_every_n_layers: layer i when i % n == 1), each TopK of
	// Experts experts of width ExpertWidth (n_inner / ffn_div), chosen
	// by the softmax over the router's logits and, with NormTopK
	// (moe_normalize_expert_weights 1), divided by their sum; an expert
	// is gelu(x·w1ᵀ)·w2 or, with the gated activation, (silu(x·w1ᵀ) ·
	// x·v1ᵀ)·w2, and the layer adds one bias to their sum.
	Experts, TopK, ExpertWidth int
	NormTopK                   bool
	Sparse                     []bool
}

// New builds a NomicBERT from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	switch {
	case c.NEmbd == nil && c.HiddenSize != nil:
		return nil, errs.Unsupportedf("%s: a NomicBertConfig in native transformers' layout (hidden_size, no n_embd) is not supported: tputool reads the Hub's remote-code layout (n_embd, n_head, n_layer, n_inner)", where)
	case c.Prenorm:
		return nil, errs.Unsupportedf("%s: prenorm is not supported for NomicBERT (the embedding models are post-norm)", where)
	case c.Causal:
		return nil, errs.Unsupportedf("%s: causal is not supported for NomicBERT (an encoder attends both ways)", where)
	case c.UseRMSNorm:
		return nil, errs.Unsupportedf("%s: use_rms_norm is not supported for NomicBERT", where)
	case c.ParallelBlock:
		return nil, errs.Unsupportedf("%s: parallel_block is not supported for NomicBERT", where)
	case c.RotaryInterleaved:
		return nil, errs.Unsupportedf("%s: rotary_emb_interleaved is not supported for NomicBERT (the embedding models rotate halves)", where)
	case c.RotaryScaleBase != nil:
		return nil, errs.Unsupportedf("%s: rotary_emb_scale_base (xPos) is not supported for NomicBERT", where)
	case c.RotaryHeadDim:
		return nil, errs.Unsupportedf("%s: rotary_head_dim is not supported for NomicBERT", where)
	}
	s := lm.Spec{
		Architecture: cfg.Architecture(),
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 30528),
		Hidden:       lm.Or(c.NEmbd, 768),
		Layers:       lm.Or(c.NLayer, 12),
		Heads:        lm.Or(c.NHead, 12),
		MaxPositions: lm.Or(c.NPositions, 8192),
		BOS:          -1,
		Encoder:      true,
	}
	if m := lm.Or(c.PadVocabMultiple, 1); m > 1 && s.VocabSize%m != 0 {
		s.VocabSize += m - s.VocabSize%m // as NomicBertModel pads its table
	}
	if kv := lm.Or(c.NumHeadsKV, s.Heads); kv != s.Heads {
		return nil, errs.Unsupportedf("%s: num_heads_kv %d is not supported for NomicBERT (it must equal n_head %d)", where, kv, s.Heads)
	}
	s.KVHeads = s.Heads
	if s.Hidden > 0 && s.Heads > 0 {
		if s.Hidden%s.Heads != 0 {
			return nil, fmt.Errorf("%s: n_embd %d is not a multiple of n_head %d", where, s.Hidden, s.Heads)
		}
		s.HeadDim = s.Hidden / s.Heads
	}
	o := Options{
		Eps:        lm.Or(c.LayerNormEps, 1e-5),
		TypeVocab:  lm.Or(c.TypeVocabSize, 2),
		QKVBias:    lm.Or(c.QKVProjBias, true),
		FC1Bias:    lm.Or(c.MLPFc1Bias, true),
		FC2Bias:    lm.Or(c.MLPFc2Bias, true),
		MaxTrained: lm.Or(c.MaxTrainedPositions, 2048),
		Scaled:     c.RotaryScalingFactor != nil && *c.RotaryScalingFactor != 0,
	}
	act := c.Activation
	if act == "" {
		act = "gelu"
	}
	switch act {
	case "swiglu":
		o.Gated, o.Act = true, nn.Activation("silu")
	case "geglu":
		o.Gated, o.Act = true, nn.Activation("gelu")
	case "glu":
		o.Gated, o.Act = true, nn.Activation("sigmoid")
	case "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh":
		// NomicBertBlock hands its MLP torch's exact gelu for each of
		// these names (the tanh form is chosen by a string it never
		// gets).
		o.Act = nn.Activation("gelu")
	default:
		return nil, errs.Unsupportedf("%s: activation_function %q is not supported for NomicBERT (supported: swiglu, geglu, glu, gelu)", where, act)
	}
	if o.Act == nil {
		return nil, errs.Unsupportedf("%s: activation_function %q is not supported", where, act)
	}
	// The MLP's width: n_inner, by default GPT-2's 4·n_embd for a plain
	// MLP and 8/3·n_embd for a gated one, whose width NomciBertGatedMLP
	// then rounds up to a multiple of 256 (n_inner 40 stores fc11 of 256
	// rows).
	if o.Gated {
		s.Intermediate = (lm.Or(c.NInner, 8*s.Hidden/3) + 255) / 256 * 256
	} else {
		s.Intermediate = lm.Or(c.NInner, 4*s.Hidden)
	}
	if err := s.CheckSizes(where); err != nil {
		return nil, err
	}
	if err := o.resolveExperts(where, &c, act, s.Layers, lm.Or(c.NInner, 4*s.Hidden)); err != nil {
		return nil, err
	}
	fraction := lm.Or(c.RotaryFraction, 0.0)
	if fraction <= 0 {
		return nil, errs.Unsupportedf("%s: rotary_emb_fraction %v: NomicBERT with learned positions is not supported", where, fraction)
	}
	var err error
	if o.Rope, err = nn.NewRope(nn.RopeParams{Theta: lm.Or(c.RotaryBase, 10000.0), HeadDim: s.HeadDim, PartialRotaryFactor: fraction, MaxPositions: s.MaxPositions}); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if o.TypeVocab > 0 {
		s.TokenTypes = o.TypeVocab
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = KindLayer
	}
	o.Spec = s
	return NewModel(o), nil
}

// resolveExperts reads nomic-embed-text-v2-moe's mixture-of-experts
// fields into o: contrastors' layers (Block(config, moe=i %
// moe_every_n_layers == 1)) run megablocks' dMoE, whose router takes the
// softmax's moe_top_k and divides them by their p-norm when
// moe_normalize_expert_weights is a p (1: their sum; false or null: not
// at all), and whose experts are ungated MLPs (GLUs for swiglu) of
// n_inner / ffn_div with one bias after them. Shared experts, the
// expert-choice router and other implementations are refused by name.
func (o *Options) resolveExperts(where string, c *Config, act string, layers, inner int) error {
	n := lm.Or(c.NumExperts, 0)
	if n <= 0 {
		return nil
	}
	switch {
	case c.MoEImpl != "" && c.MoEImpl != "megablocks":
		return errs.Unsupportedf("%s: moe_impl %q is not supported for NomicBERT (its releases' experts are megablocks')", where, c.MoEImpl)
	case lm.Or(c.NumSharedExperts, 0) != 0:
		return errs.Unsupportedf("%s: num_shared_experts %d is not supported for NomicBERT", where, *c.NumSharedExperts)
	case c.ExpertChoiceRouter:
		return errs.Unsupportedf("%s: expert_choice_router is not supported for NomicBERT", where)
	case c.MoETopK == nil:
		return fmt.Errorf("%s: num_experts is %d but moe_top_k is missing (contrastors requires it)", where, n)
	case act != "gelu" && act != "gelu_new" && act != "gelu_fast" && act != "gelu_pytorch_tanh" && act != "swiglu":
		return errs.Unsupportedf("%s: activation_function %q with experts is not supported for NomicBERT (gelu and swiglu are)", where, act)
	}
	div := lm.Or(c.FFNDiv, 1)
	o.Experts, o.TopK = n, *c.MoETopK
	switch {
	case o.TopK <= 0 || o.TopK > n:
		return fmt.Errorf("%s: moe_top_k %d must be in [1, num_experts %d]", where, o.TopK, n)
	case div <= 0 || inner/div <= 0:
		return fmt.Errorf("%s: ffn_div %d must be positive and at most n_inner %d", where, div, inner)
	}
	o.ExpertWidth = inner / div
	if err := lm.CheckExperts(where, "num_experts", n, layers); err != nil {
		return err
	}
	switch p := strings.TrimSpace(string(c.MoENormalize)); p {
	case "", "null", "false", "0":
	case "1", "1.0", "true":
		o.NormTopK = true
	default:
		return errs.Unsupportedf("%s: moe_normalize_expert_weights %s is not supported for NomicBERT (1, the weights over their sum, and false are)", where, p)
	}
	every := lm.Or(c.MoEEveryN, 1) // contrastors' default, under which no layer has experts (i % 1 is never 1)
	if every <= 0 {
		return fmt.Errorf("%s: moe_every_n_layers %d must be positive with num_experts", where, every)
	}
	o.Sparse = make([]bool, layers)
	for i := range o.Sparse {
		o.Sparse[i] = i%every == 1
	}
	return nil
}

// Model is a NomicBERT encoder; it implements lm.Model and lm.Finisher.
type Model struct {
	o Options
}

// NewModel returns the encoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved hyperparameters.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model.
func (m *Model) LayerKind(i int) string { return KindLayer }

// LayerState implements lm.Model: none (an input runs in one step).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec { return nil }

// EmbedWeights implements lm.Model: the token and token-type tables and
// emb_ln.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	ws := []lm.WeightSpec{{Name: "embeddings.word_embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
	if m.o.TypeVocab > 0 {
		ws = append(ws, lm.WeightSpec{Name: "embeddings.token_type_embeddings.weight", Shape: []int{m.o.TypeVocab, s.Hidden}})
	}
	return append(ws,
		lm.WeightSpec{Name: "emb_ln.weight", Shape: []int{s.Hidden}},
		lm.WeightSpec{Name: "emb_ln.bias", Shape: []int{s.Hidden}})
}

// Embed implements lm.Model: NomicBertEmbeddings (the token's row plus
// its type's; a token id carries its type as id + type·VocabSize,
// lm.Spec.TokenTypes) and emb_ln.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	var x *Node
	if m.o.TypeVocab > 0 {
		v := Scalar(tokens.Graph(), tokens.DType(), m.o.Spec.VocabSize)
		types := Div(tokens, v)
		x = nn.Embedding(w.Get("embeddings.word_embeddings.weight"), Sub(tokens, Mul(types, v))) // [B, T, H]
		// A type beyond the table (an id beyond the vocabulary, refused
		// before it gets here) reads the last row rather than out of range.
		types = Min(types, Scalar(tokens.Graph(), tokens.DType(), m.o.TypeVocab-1))
		x = Add(x, ConvertDType(nn.Embedding(w.Get("embeddings.token_type_embeddings.weight"), types), x.DType()))
	} else {
		x = nn.Embedding(w.Get("embeddings.word_embeddings.weight"), tokens)
	}
	return nn.LayerNorm(x, w.Get("emb_ln.weight"), w.Get("emb_ln.bias"), m.o.Eps)
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	H, I := s.Hidden, s.Intermediate
	p := fmt.Sprintf("encoder.layers.%d.", i)
	var ws []lm.WeightSpec
	// The fused projection is split along its rows in the graph, so it is
	// never split across devices (an encoder runs on one).
	add := func(name string, bias bool, out, in int) {
		ws = append(ws, lm.WeightSpec{Name: name + ".weight", Shape: []int{out, in}, Matmul: true, TP: lm.Replicated})
		if bias {
			ws = append(ws, lm.WeightSpec{Name: name + ".bias", Shape: []int{out}, TP: lm.Replicated})
		}
	}
	add(p+"attn.Wqkv", m.o.QKVBias, 3*H, H)
	add(p+"attn.out_proj", m.o.QKVBias, H, H)
	if m.sparse(i) {
		ws = append(ws, m.expertWeights(i)...)
	} else if m.o.Gated {
		add(p+"mlp.fc11", m.o.FC1Bias, I, H)
		add(p+"mlp.fc12", m.o.FC1Bias, I, H)
	} else {
		add(p+"mlp.fc1", m.o.FC1Bias, I, H)
	}
	if !m.sparse(i) {
		add(p+"mlp.fc2", m.o.FC2Bias, H, I)
	}
	for _, n := range []string{"norm1", "norm2"} {
		ws = append(ws,
			lm.WeightSpec{Name: p + n + ".weight", Shape: []int{H}},
			lm.WeightSpec{Name: p + n + ".bias", Shape: []int{H}})
	}
	return ws
}

// linear applies the Linear at name, with its bias when it has one.
func linear(p *lm.Params, name string, x *Node, bias bool) *Node {
	var b *Node
	if bias {
		b = p.Get(name + ".bias")
	}
	return nn.Linear(x, p.Get(name+".weight"), b)
}

// Layer implements lm.Model: NomicBertBlock, post-norm:
// x = norm1(x + out_proj(attention)), then norm2(x + mlp(x)).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	H := s.Hidden
	if m.o.Scaled && step.Len > m.o.MaxTrained {
		panic(errs.Unsupportedf("%s: an input of %d tokens is past max_trained_positions %d, where rotary_scaling_factor would rescale the rotary base (dynamic NTK), which is not supported", s.Architecture, step.Len, m.o.MaxTrained))
	}
	p := w.Scope(fmt.Sprintf("encoder.layers.%d", i))
	qkv := linear(p, "attn.Wqkv", x, m.o.QKVBias) // [B, T, 3H]: q, k, v
	part := func(j int) *Node {
		return nn.SplitHeads(SliceAxis(qkv, -1, AxisRange(j*H, (j+1)*H)), s.Heads) // [B, T, Heads, D]
	}
	q, k, v := part(0), part(1), part(2)
	cos, sin := m.o.Rope.CosSin(step, q.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	ctx := nn.EncoderAttention(q, k, v, step, 0) // [B, T, H]
	x = nn.LayerNorm(Add(x, linear(p, "attn.out_proj", ctx, m.o.QKVBias)), p.Get("norm1.weight"), p.Get("norm1.bias"), m.o.Eps)
	var y *Node
	switch {
	case m.sparse(i):
		y = m.experts(p, x, step)
	case m.o.Gated:
		y = linear(p, "mlp.fc2", Mul(linear(p, "mlp.fc11", x, m.o.FC1Bias), m.o.Act(linear(p, "mlp.fc12", x, m.o.FC1Bias))), m.o.FC2Bias)
	default:
		y = linear(p, "mlp.fc2", m.o.Act(linear(p, "mlp.fc1", x, m.o.FC1Bias)), m.o.FC2Bias)
	}
	x = nn.LayerNorm(Add(x, y), p.Get("norm2.weight"), p.Get("norm2.bias"), m.o.Eps)
	return x, nil
}

// HeadWeights implements lm.Model: none (no final norm).
func (m *Model) HeadWeights() []lm.WeightSpec { return nil }

var _ lm.Finisher = (*Model)(nil)

// Final implements lm.Finisher: the last layer's output as it is.
func (m *Model) Final(w *lm.Params, x *Node) *Node { return x }

// Head implements lm.Model. An encoder has no language-model head, and
// runners never ask for one (lm.Spec.Encoder): reaching it is a
// programming error, which the executor reports.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	panic(fmt.Errorf("%s is an encoder: it has no language-model head (it gives embeddings, not logits): %w", m.o.Spec.Architecture, errs.ErrUnsupported))
}

var _ lm.Skipper = (*Model)(nil)

// SkipWeight implements lm.Skipper: the pooler (NomicBertPooler: the
// tanh of a dense over the first token, which sentence-transformers'
// embeddings do not use).
func (m *Model) SkipWeight(name string) (string, bool) {
	if strings.HasPrefix(name, "pooler.") {
		return "pooler: embeddings pool the last hidden states", true
	}
	return "", false
}

// sparse reports layer i a mixture of experts.
func (m *Model) sparse(i int) bool { return i < len(m.o.Sparse) && m.o.Sparse[i] }

// expertNames are the names the loader gives a sparse layer's split
// experts (SplitWeight): Qwen's, the down projections transposed as w2
// stores them.
var expertNames = lm.ExpertNames{Gate: "gate_proj.weight", Up: "up_proj.weight", Down: "down_proj.weight", DownTransposed: true}

// expertWeights are sparse layer i's tensors: the router
// mlp.router.layer [E, H], the experts' stacks (assembled from the
// pieces SplitWeight cuts w1, v1 and w2 into) and mlp.experts.bias [H].
func (m *Model) expertWeights(i int) []lm.WeightSpec {
	H, E, I := m.o.Spec.Hidden, m.o.Experts, m.o.ExpertWidth
	p := fmt.Sprintf("encoder.layers.%d.mlp.", i)
	ws := []lm.WeightSpec{{Name: p + "router.layer.weight", Shape: []int{E, H}, Matmul: true, TP: lm.Replicated, Router: true}}
	if m.o.Gated {
		ws = append(ws, replicated(expertNames.Stacked(p+"experts", E, I, H))...)
	} else { // one up projection an expert: the stack [E, I, H] and the down stack
		up := lm.WeightSpec{Name: p + "experts.up_proj", Shape: []int{E, I, H}, Matmul: true}
		down := lm.WeightSpec{Name: p + "experts.down_proj", Shape: []int{E, H, I}, Matmul: true}
		for e := range E {
			ew := expertNames.Weights(p+"experts", e, I, H)
			up.Parts, down.Parts = append(up.Parts, ew[1]), append(down.Parts, ew[2])
		}
		ws = append(ws, replicated([]lm.WeightSpec{up, down})...)
	}
	return append(ws, lm.WeightSpec{Name: p + "experts.bias", Shape: []int{H}, TP: lm.Replicated})
}

// replicated sets every weight of ws and of its parts to lm.Replicated:
// an encoder runs on one device, as its other weights say.
func replicated(ws []lm.WeightSpec) []lm.WeightSpec {
	for i := range ws {
		ws[i].TP = lm.Replicated
		parts := slices.Clone(ws[i].Parts)
		for j := range parts {
			parts[j].TP = lm.Replicated
		}
		ws[i].Parts = parts
	}
	return ws
}

// experts is a sparse layer's output for x [B, T, H]: the router's top k
// of the softmax (divided by their sum with NormTopK), the chosen
// experts weighed (nn.ExpertStack, in the formulation that suits the
// backend), plus the layer's bias.
func (m *Model) experts(p *lm.Params, x *Node, step *lm.Step) *Node {
	dims := x.Shape().Dimensions
	b, t, h := dims[0], dims[1], dims[2]
	flat := Reshape(x, b*t, h)
	ids, weights := nn.TopKRouter(nn.Linear(flat, p.Get("mlp.router.layer.weight"), nil), m.o.TopK, m.o.NormTopK)
	var stack nn.ExpertStack
	if m.o.Gated {
		stack = nn.ExpertStack{Gate: p.Get("mlp.experts.gate_up_proj"), Down: p.Get("mlp.experts.down_proj"), Act: m.o.Act}
	} else {
		stack = nn.ExpertStack{Gate: p.Get("mlp.experts.up_proj"), Down: p.Get("mlp.experts.down_proj"), Act: m.o.Act, Ungated: true}
	}
	y := stack.Routed(flat, ids, weights, step.GatherExperts) // [N, H]
	y = Add(y, InsertAxes(ConvertDType(p.Get("mlp.experts.bias"), y.DType()), 0))
	return Reshape(y, b, t, h)
}

// storedExperts matches a sparse layer's stored expert matrices.
var storedExperts = regexp.MustCompile(`^encoder\.layers\.(\d+)\.mlp\.experts\.mlp\.(w1|v1|w2)$`)

var _ lm.Splitter = (*Model)(nil)

// SplitWeight implements lm.Splitter: a sparse layer's
// mlp.experts.mlp.w1 (v1 with swiglu) and w2 [E·I, H] hold its experts'
// up (gate) and (transposed, [I, H]) down projections one after another,
// as megablocks stores them; they are shown as
// mlp.experts.E.{gate,up,down}_proj.weight. A shape other than the
// config's is an error naming both.
func (m *Model) SplitWeight(name string, shape []int) ([]safetensors.Piece, error) {
	g := storedExperts.FindStringSubmatch(name)
	if g == nil {
		return nil, nil
	}
	layer, err := strconv.Atoi(g[1])
	if err != nil || !m.sparse(layer) || g[2] == "v1" && !m.o.Gated {
		return nil, nil // not a sparse layer's: reported unused
	}
	H, E, I := m.o.Spec.Hidden, m.o.Experts, m.o.ExpertWidth
	if len(shape) != 2 || shape[0] != E*I || shape[1] != H {
		return nil, fmt.Errorf("tensor %s has shape %v; the config implies [%d, %d] (num_experts %d × n_inner / ffn_div %d, n_embd)", name, shape, E*I, H, E, I)
	}
	proj := map[string]string{"w1": expertNames.Up, "v1": expertNames.Up, "w2": expertNames.Down}[g[2]]
	if m.o.Gated && g[2] == "w1" {
		proj = expertNames.Gate
	}
	pieces := make([]safetensors.Piece, E)
	for e := range pieces {
		pieces[e] = safetensors.Piece{Name: fmt.Sprintf("encoder.layers.%d.mlp.experts.%d.%s", layer, e, proj), Shape: []int{I, H}}
	}
	return pieces, nil
}
