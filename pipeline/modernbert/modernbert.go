// Package modernbert implements ModernBERT, the encoder of "Smarter,
// Better, Faster, Longer: A Modern Bidirectional Encoder for Fast, Memory
// Efficient, and Long Context Finetuning and Inference" (Warner et al.,
// 2024, arXiv:2412.13663), following transformers'
// models/modernbert/modeling_modernbert.py: answerdotai/ModernBERT-base
// and -large, and the embedding and reranking models built on it
// (Alibaba-NLP/gte-modernbert-base, nomic-ai/modernbert-embed-base,
// ibm-granite/granite-embedding-english-r2, gte-reranker-modernbert-base).
//
// The encoder differs from BERT's (pipeline/bert) in every layer:
// rotary positions instead of a position table, pre-norm layers with
// LayerNorms that may have no bias, one fused QKV projection, a gated
// MLP (act(input) · gate, both halves of one Wi), no biases by default,
// a final LayerNorm, and attention that alternates between global layers
// (every global_attn_every_n_layers-th, from layer 0) and local ones,
// whose tokens see only the keys within local_attention/2 positions on
// either side, each kind with its own rotary base. No token types.
//
// Like pipeline/bert it is an lm.Model without state (lm.Spec.Encoder:
// an input runs in one step, its attention over the step's own keys and
// values), an lm.Finisher (the final norm), and for
// ModernBertForSequenceClassification an lm.Scorer: the final hidden
// states pooled as classifier_pooling says (the first token or the mean),
// then the prediction head (dense, activation, LayerNorm) and the
// classifier. ModernBertForMaskedLM loads as its encoder.
package modernbert

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// The architectures this package builds.
var (
	encoderArchs = []string{"ModernBertModel", "ModernBertForMaskedLM"}
	scorerArchs  = []string{"ModernBertForSequenceClassification"}
)

func init() {
	for _, a := range append(slices.Clone(encoderArchs), scorerArchs...) {
		lm.Register(a, New)
	}
}

// Layer kinds: layer 0 (without an attention norm; global unless
// layer_types makes it local), the other global layers, and the local
// ones.
const (
	KindFirst      = "modernbert_first"
	KindFirstLocal = "modernbert_first_local"
	KindGlobal     = "modernbert_global"
	KindLocal      = "modernbert_local"
)

// Config is a ModernBertConfig config.json: the keys transformers 4.48
// writes (global_rope_theta, local_rope_theta, global_attn_every_n_layers)
// and those of later versions (layer_types, rope_parameters per layer
// type).
type Config struct {
	ModelType             string   `json:"model_type"`
	VocabSize             *int     `json:"vocab_size"`
	HiddenSize            *int     `json:"hidden_size"`
	IntermediateSize      *int     `json:"intermediate_size"`
	NumHiddenLayers       *int     `json:"num_hidden_layers"`
	NumAttentionHeads     *int     `json:"num_attention_heads"`
	HiddenActivation      string   `json:"hidden_activation"`
	MaxPositionEmbeddings *int     `json:"max_position_embeddings"`
	NormEps               *float64 `json:"norm_eps"`
	NormBias              *bool    `json:"norm_bias"`
	AttentionBias         *bool    `json:"attention_bias"`
	MLPBias               *bool    `json:"mlp_bias"`
	PadTokenID            *int     `json:"pad_token_id"`
	GlobalRopeTheta       *float64 `json:"global_rope_theta"`
	LocalRopeTheta        *float64 `json:"local_rope_theta"`
	GlobalAttnEveryN      *int     `json:"global_attn_every_n_layers"`
	LocalAttention        *int     `json:"local_attention"`
	LayerTypes            []string `json:"layer_types"`
	// RopeParameters is transformers 5's rope_parameters: an object per
	// layer type ("full_attention", "sliding_attention"), each with its
	// rope_theta.
	RopeParameters    map[string]json.RawMessage `json:"rope_parameters"`
	ClassifierPooling string                     `json:"classifier_pooling"`
	ClassifierAct     string                     `json:"classifier_activation"`
	ClassifierBias    *bool                      `json:"classifier_bias"`
	RopeScaling       json.RawMessage            `json:"rope_scaling"`
	PartialRotary     *float64                   `json:"partial_rotary_factor"`
}

// Options are a resolved ModernBERT's hyperparameters.
type Options struct {
	Spec lm.Spec
	Eps  float64
	// NormBias, AttentionBias, MLPBias: which modules have biases.
	NormBias, AttentionBias, MLPBias bool
	Act                              func(*Node) *Node
	// Global[i] says layer i attends globally; a local layer's tokens
	// see the keys within Window positions on either side
	// (local_attention / 2).
	Global []bool
	Window int
	// GlobalRope and LocalRope are the two kinds' rotary embeddings.
	GlobalRope, LocalRope *nn.Rope
	// Scorer: ModernBertForSequenceClassification's head of Labels
	// scores, on the final hidden states pooled by Pool (lm.PoolFirst or
	// lm.PoolMean); ClassifierAct and ClassifierBias shape its dense.
	Scorer         bool
	Labels         int
	Pool           string
	ClassifierAct  func(*Node) *Node
	ClassifierBias bool
}

// New builds a ModernBERT from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	arch := cfg.Architecture()
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		return nil, errs.Unsupportedf("%s: rope_scaling is not supported for ModernBERT", where)
	}
	if c.PartialRotary != nil && *c.PartialRotary != 1 {
		return nil, errs.Unsupportedf("%s: partial_rotary_factor %v is not supported for ModernBERT", where, *c.PartialRotary)
	}
	s := lm.Spec{
		Architecture: arch,
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 50368),
		Hidden:       lm.Or(c.HiddenSize, 768),
		Intermediate: lm.Or(c.IntermediateSize, 1152),
		Layers:       lm.Or(c.NumHiddenLayers, 22),
		Heads:        lm.Or(c.NumAttentionHeads, 12),
		MaxPositions: lm.Or(c.MaxPositionEmbeddings, 8192),
		BOS:          -1,
		Encoder:      true,
	}
	s.KVHeads = s.Heads
	if s.Hidden > 0 && s.Heads > 0 {
		if s.Hidden%s.Heads != 0 {
			return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d", where, s.Hidden, s.Heads)
		}
		s.HeadDim = s.Hidden / s.Heads
	}
	if err := s.CheckSizes(where); err != nil {
		return nil, err
	}
	o := Options{
		Eps:           lm.Or(c.NormEps, 1e-5),
		NormBias:      lm.Or(c.NormBias, false),
		AttentionBias: lm.Or(c.AttentionBias, false),
		MLPBias:       lm.Or(c.MLPBias, false),
	}
	act := c.HiddenActivation
	if act == "" {
		act = "gelu"
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return nil, errs.Unsupportedf("%s: hidden_activation %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	if err := o.resolveLayers(where, &c, s.Layers); err != nil {
		return nil, err
	}
	global, local, err := ropeThetas(where, &c, cfg.Has("local_rope_theta"))
	if err != nil {
		return nil, err
	}
	if o.GlobalRope, err = nn.NewRope(nn.RopeParams{Theta: global, HeadDim: s.HeadDim, MaxPositions: s.MaxPositions}); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if o.LocalRope, err = nn.NewRope(nn.RopeParams{Theta: local, HeadDim: s.HeadDim, MaxPositions: s.MaxPositions}); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if o.Scorer = slices.Contains(scorerArchs, arch); o.Scorer {
		if err := o.resolveHead(cfg, &c); err != nil {
			return nil, err
		}
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		switch {
		case i == 0 && o.Global[0]:
			s.LayerKinds[i] = KindFirst
		case i == 0:
			s.LayerKinds[i] = KindFirstLocal
		case o.Global[i]:
			s.LayerKinds[i] = KindGlobal
		default:
			s.LayerKinds[i] = KindLocal
		}
	}
	o.Spec = s
	return NewModel(o), nil
}

// resolveLayers sets which layers attend globally and the local window:
// layer_types when the config lists them, else every
// global_attn_every_n_layers-th layer from layer 0, as
// ModernBertAttention decides.
func (o *Options) resolveLayers(where string, c *Config, layers int) error {
	o.Global = make([]bool, layers)
	if len(c.LayerTypes) > 0 {
		if len(c.LayerTypes) != layers {
			return fmt.Errorf("%s: layer_types lists %d layers, num_hidden_layers is %d", where, len(c.LayerTypes), layers)
		}
		for i, t := range c.LayerTypes {
			switch t {
			case "full_attention":
				o.Global[i] = true
			case "sliding_attention":
			default:
				return errs.Unsupportedf("%s: layer_types[%d] is %q (supported: full_attention, sliding_attention)", where, i, t)
			}
		}
	} else {
		every := lm.Or(c.GlobalAttnEveryN, 3)
		if every < 1 {
			return fmt.Errorf("%s: global_attn_every_n_layers must be positive, got %d", where, every)
		}
		for i := range o.Global {
			o.Global[i] = i%every == 0
		}
	}
	local := lm.Or(c.LocalAttention, 128)
	if local < 2 && slices.Contains(o.Global, false) {
		return fmt.Errorf("%s: local_attention %d: a local layer needs a window of at least 2", where, local)
	}
	o.Window = local / 2
	return nil
}

// ropeThetas are the global and local layers' rotary bases: from
// rope_parameters' full_attention and sliding_attention entries when the
// config has them, else global_rope_theta (160000) and local_rope_theta
// (10000 when absent). A local_rope_theta written as null (localNull: the
// key present, its value null) is the global base, as transformers 4.x's
// ModernBertAttention falls back (5.x would carry the null into
// rope_parameters).
func ropeThetas(where string, c *Config, localNull bool) (global, local float64, err error) {
	global = lm.Or(c.GlobalRopeTheta, 160000)
	localSet := c.LocalRopeTheta
	if localSet == nil && !localNull {
		ten := 10000.0 // ModernBertConfig's default
		localSet = &ten
	}
	read := func(kind string, into **float64) error {
		raw, ok := c.RopeParameters[kind]
		if !ok || string(raw) == "null" {
			return nil
		}
		var p struct {
			Type  string   `json:"rope_type"`
			Theta *float64 `json:"rope_theta"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%s: rope_parameters.%s: %w", where, kind, err)
		}
		if p.Type != "" && p.Type != "default" {
			return errs.Unsupportedf("%s: rope_parameters.%s.rope_type %q is not supported for ModernBERT (supported: default)", where, kind, p.Type)
		}
		if p.Theta != nil {
			*into = p.Theta
		}
		return nil
	}
	globalSet := &global
	if err := read("full_attention", &globalSet); err != nil {
		return 0, 0, err
	}
	if err := read("sliding_attention", &localSet); err != nil {
		return 0, 0, err
	}
	global, local = *globalSet, *globalSet
	if localSet != nil {
		local = *localSet
	}
	return global, local, nil
}

// resolveHead reads the sequence-classification head's config.
func (o *Options) resolveHead(cfg *config.File, c *Config) error {
	where := lm.ConfigName(cfg)
	labels, err := lm.ConfigLabels(cfg)
	if err != nil {
		return err
	}
	o.Labels = labels
	switch c.ClassifierPooling {
	case "", "cls": // ModernBertConfig's default
		o.Pool = lm.PoolFirst
	case "mean":
		o.Pool = lm.PoolMean
	default:
		return errs.Unsupportedf("%s: classifier_pooling %q is not supported (supported: cls, mean)", where, c.ClassifierPooling)
	}
	act := c.ClassifierAct
	if act == "" {
		act = "gelu"
	}
	if o.ClassifierAct = nn.Activation(act); o.ClassifierAct == nil {
		return errs.Unsupportedf("%s: classifier_activation %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	o.ClassifierBias = lm.Or(c.ClassifierBias, false)
	return nil
}

// Model is a ModernBERT encoder; it implements lm.Model, lm.Finisher
// and lm.Scorer.
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
func (m *Model) LayerKind(i int) string { return m.o.Spec.LayerKinds[i] }

// LayerState implements lm.Model: none (an input runs in one step).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec { return nil }

// norm is the WeightSpecs of a LayerNorm at name: its weight, and its
// bias when norm_bias is set.
func (m *Model) norm(name string) []lm.WeightSpec {
	H := m.o.Spec.Hidden
	ws := []lm.WeightSpec{{Name: name + ".weight", Shape: []int{H}}}
	if m.o.NormBias {
		ws = append(ws, lm.WeightSpec{Name: name + ".bias", Shape: []int{H}})
	}
	return ws
}

// layerNorm applies the LayerNorm at name (p's scope).
func (m *Model) layerNorm(p *lm.Params, name string, x *Node) *Node {
	var b *Node
	if m.o.NormBias {
		b = p.Get(name + ".bias")
	}
	return nn.LayerNorm(x, p.Get(name+".weight"), b, m.o.Eps)
}

// linear applies the Linear at name, with its bias when it has one.
func linear(p *lm.Params, name string, x *Node, bias bool) *Node {
	var b *Node
	if bias {
		b = p.Get(name + ".bias")
	}
	return nn.Linear(x, p.Get(name+".weight"), b)
}

// EmbedWeights implements lm.Model: the token embeddings and their norm.
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	ws := []lm.WeightSpec{{Name: "embeddings.tok_embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
	return append(ws, m.norm("embeddings.norm")...)
}

// Embed implements lm.Model: ModernBertEmbeddings, the LayerNorm of the
// token embeddings (no positions: the layers rotate their queries and
// keys).
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	x := nn.Embedding(w.Get("embeddings.tok_embeddings.weight"), tokens) // [B, T, H]
	return m.layerNorm(w.Scope("embeddings"), "norm", x)
}

// LayerWeights implements lm.Model.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	H, I := s.Hidden, s.Intermediate
	p := fmt.Sprintf("layers.%d.", i)
	var ws []lm.WeightSpec
	if i > 0 { // layer 0's attn_norm is the identity
		ws = append(ws, m.norm(p+"attn_norm")...)
	}
	// The fused projections are split along their rows in the graph, so
	// they are never split across devices (an encoder runs on one).
	add := func(name string, bias bool, out, in int) {
		ws = append(ws, lm.WeightSpec{Name: name + ".weight", Shape: []int{out, in}, Matmul: true, TP: lm.Replicated})
		if bias {
			ws = append(ws, lm.WeightSpec{Name: name + ".bias", Shape: []int{out}, TP: lm.Replicated})
		}
	}
	add(p+"attn.Wqkv", m.o.AttentionBias, 3*H, H)
	add(p+"attn.Wo", m.o.AttentionBias, H, H)
	ws = append(ws, m.norm(p+"mlp_norm")...)
	add(p+"mlp.Wi", m.o.MLPBias, 2*I, H)
	add(p+"mlp.Wo", m.o.MLPBias, H, I)
	return ws
}

// Layer implements lm.Model: ModernBertEncoderLayer, pre-norm:
// x + attention(attn_norm(x)), then that + mlp(mlp_norm(that)).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	H := s.Hidden
	p := w.Scope(fmt.Sprintf("layers.%d", i))
	h := x
	if i > 0 {
		h = m.layerNorm(p, "attn_norm", x)
	}
	qkv := linear(p, "attn.Wqkv", h, m.o.AttentionBias) // [B, T, 3H]: q, k, v
	part := func(j int) *Node {
		return nn.SplitHeads(SliceAxis(qkv, -1, AxisRange(j*H, (j+1)*H)), s.Heads) // [B, T, Heads, D]
	}
	q, k, v := part(0), part(1), part(2)
	rope, half := m.o.GlobalRope, 0
	if !m.o.Global[i] {
		rope, half = m.o.LocalRope, m.o.Window
	}
	cos, sin := rope.CosSin(step, q.DType())
	q, k = nn.ApplyRope(q, cos, sin), nn.ApplyRope(k, cos, sin)
	ctx := nn.EncoderAttention(q, k, v, step, half) // [B, T, H]
	x = Add(x, linear(p, "attn.Wo", ctx, m.o.AttentionBias))
	g := linear(p, "mlp.Wi", m.layerNorm(p, "mlp_norm", x), m.o.MLPBias) // [B, T, 2I]: input, gate
	I := s.Intermediate
	in, gate := SliceAxis(g, -1, AxisRange(0, I)), SliceAxis(g, -1, AxisRange(I, 2*I))
	x = Add(x, linear(p, "mlp.Wo", Mul(m.o.Act(in), gate), m.o.MLPBias))
	return x, nil
}

// HeadWeights implements lm.Model: the final norm, and a scorer's head
// (not Matmul: it stays as stored, never quantized, for Score to read in
// f32).
func (m *Model) HeadWeights() []lm.WeightSpec {
	ws := m.norm("final_norm")
	if !m.o.Scorer {
		return ws
	}
	H, L := m.o.Spec.Hidden, m.o.Labels
	ws = append(ws, lm.WeightSpec{Name: "head.dense.weight", Shape: []int{H, H}})
	if m.o.ClassifierBias {
		ws = append(ws, lm.WeightSpec{Name: "head.dense.bias", Shape: []int{H}})
	}
	ws = append(ws, m.norm("head.norm")...)
	return append(ws,
		lm.WeightSpec{Name: "classifier.weight", Shape: []int{L, H}},
		lm.WeightSpec{Name: "classifier.bias", Shape: []int{L}})
}

var _ lm.Finisher = (*Model)(nil)

// Final implements lm.Finisher: the final LayerNorm.
func (m *Model) Final(w *lm.Params, x *Node) *Node { return m.layerNorm(w, "final_norm", x) }

// Head implements lm.Model. An encoder has no language-model head, and
// runners never ask for one (lm.Spec.Encoder): reaching it is a
// programming error, which the executor reports.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	panic(fmt.Errorf("%s is an encoder: it has no language-model head (it gives embeddings, not logits): %w", m.o.Spec.Architecture, errs.ErrUnsupported))
}

var _ lm.Scorer = (*Model)(nil)

// Labels implements lm.Scorer (0 without a classification head).
func (m *Model) Labels() int { return m.o.Labels }

// ScorePool implements lm.Scorer: classifier_pooling's first token or
// mean.
func (m *Model) ScorePool() string { return m.o.Pool }

// Score implements lm.Scorer: ModernBertPredictionHead (dense,
// classifier_activation, LayerNorm) and the classifier, in f32 whatever
// the compute dtype, on the pooled final hidden states [B, Hidden].
func (m *Model) Score(w *lm.Params, pooled *Node) *Node {
	f32 := func(name string) *Node { return ConvertDType(w.Get(name), dtypes.Float32) }
	var bias *Node
	if m.o.ClassifierBias {
		bias = f32("head.dense.bias")
	}
	x := m.o.ClassifierAct(nn.Linear(ConvertDType(pooled, dtypes.Float32), f32("head.dense.weight"), bias))
	var nb *Node
	if m.o.NormBias {
		nb = f32("head.norm.bias")
	}
	x = nn.LayerNorm(x, f32("head.norm.weight"), nb, m.o.Eps)
	return nn.Linear(x, f32("classifier.weight"), f32("classifier.bias")) // [B, Labels]
}

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: the encoder of a
// ModernBertForMaskedLM or ModernBertForSequenceClassification
// checkpoint is stored under model.
func (m *Model) RenameWeight(stored string) string {
	if rest, ok := strings.CutPrefix(stored, "model."); ok {
		return rest
	}
	return stored
}

var _ lm.Skipper = (*Model)(nil)

// SkipWeight implements lm.Skipper: the masked-LM head (head.* and
// decoder.* of ModernBertForMaskedLM; a scorer reads head.*).
func (m *Model) SkipWeight(name string) (string, bool) {
	if strings.HasPrefix(name, "decoder.") || (!m.o.Scorer && strings.HasPrefix(name, "head.")) {
		return "masked-LM head (head.*, decoder.*): tputool runs the encoder", true
	}
	return "", false
}
