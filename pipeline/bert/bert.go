// Package bert implements the BERT-family encoders that sentence
// embedding models are built on, following transformers'
// models/bert/modeling_bert.py (BertModel: "BERT: Pre-training of Deep
// Bidirectional Transformers for Language Understanding", Devlin et al.,
// 2019, arXiv:1810.04805), models/xlm_roberta/modeling_xlm_roberta.py
// (XLMRobertaModel and RobertaModel, the same encoder with positions
// counted from pad_token_id + 1) and models/mpnet/modeling_mpnet.py
// (MPNetModel: "MPNet: Masked and Permuted Pre-training for Language
// Understanding", Song et al., 2020, arXiv:2004.09297; RoBERTa's
// positions, no token types, and a T5-style relative position bias per
// head shared by the layers): sentence-transformers/all-MiniLM-L6-v2 and
// all-mpnet-base-v2, BAAI/bge-*-en-v1.5, intfloat/e5-*, BAAI/bge-m3 and
// the like.
//
// The encoder has absolute position embeddings and a token-type
// embedding, post-norm layers (LayerNorm after each residual sum) with
// biased projections, a GELU MLP, and attention in both directions. It
// has no language-model head: Spec().Encoder is set, so tputool runs it
// for embeddings (compile.Runner.Embed, which runs an input in one step)
// and the generating commands refuse it (serve serves its embeddings
// alone, through compile.Encoder). The *ForMaskedLM classes load as
// their encoder, the prediction head skipped, as their checkpoints are
// how bert-base-uncased and xlm-roberta-base are published; the
// *ForSequenceClassification classes (cross-encoder rerankers) add their
// classification head on the first token (lm.Scorer, Runner.Score).
//
// The model fits lm.Model as an encoder without state: each layer's
// tokens attend to every token of the step, its own keys and values, kept
// nowhere (nn.StepKV, nn.EncoderBias). Embed adds the word and token-type
// embeddings (an id carries its type as id + type·VocabSize); the
// positional half needs the step's positions, which Embed does not get,
// so layer 0 (its own kind, "encoder_first") adds the position
// embeddings and applies the embedding LayerNorm before its attention.
package bert

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// The architectures this package builds: the bare encoders, and the
// masked-LM classes read as their encoders.
var (
	bertArchs    = []string{"BertModel", "BertForMaskedLM", "BertForPreTraining"}
	robertaArchs = []string{"RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel", "XLMRobertaForMaskedLM"}
	mpnetArchs   = []string{"MPNetModel", "MPNetForMaskedLM"}
	// The cross-encoders (rerankers): the encoder and a classification
	// head on its first token (lm.Scorer).
	bertScorers    = []string{"BertForSequenceClassification"}
	robertaScorers = []string{"XLMRobertaForSequenceClassification", "RobertaForSequenceClassification"}
)

func init() {
	for _, a := range bertArchs {
		lm.Register(a, New)
	}
	for _, a := range robertaArchs {
		lm.Register(a, New)
	}
	for _, a := range mpnetArchs {
		lm.Register(a, New)
	}
	for _, a := range append(slices.Clone(bertScorers), robertaScorers...) {
		lm.Register(a, New)
	}
}

// Layer kinds: layer 0 also finishes the embedding.
const (
	KindFirst = "encoder_first"
	KindLayer = "encoder"
)

// Config is a BertConfig, RobertaConfig or XLMRobertaConfig config.json.
type Config struct {
	ModelType             string   `json:"model_type"`
	VocabSize             *int     `json:"vocab_size"`
	HiddenSize            *int     `json:"hidden_size"`
	IntermediateSize      *int     `json:"intermediate_size"`
	NumHiddenLayers       *int     `json:"num_hidden_layers"`
	NumAttentionHeads     *int     `json:"num_attention_heads"`
	HiddenAct             string   `json:"hidden_act"`
	MaxPositionEmbeddings *int     `json:"max_position_embeddings"`
	TypeVocabSize         *int     `json:"type_vocab_size"`
	LayerNormEps          *float64 `json:"layer_norm_eps"`
	PadTokenID            *int     `json:"pad_token_id"`
	PositionEmbeddingType string   `json:"position_embedding_type"`
	IsDecoder             bool     `json:"is_decoder"`
	// RelativeBuckets is MPNet's relative_attention_num_buckets: the rows
	// of its bias table.
	RelativeBuckets *int `json:"relative_attention_num_buckets"`
}

// Options are a resolved encoder's hyperparameters.
type Options struct {
	Spec lm.Spec
	// Positions is max_position_embeddings as stored (the position
	// table's rows); TypeVocab is type_vocab_size.
	Positions, TypeVocab int
	// PositionOffset is the position of an input's first token: 0 for
	// BERT, pad_token_id + 1 for RoBERTa (create_position_ids_from_input_ids
	// on an input without padding).
	PositionOffset int
	Eps            float64
	Act            func(*Node) *Node
	// MPNet: no token types, and a relative position bias per head
	// (encoder.relative_attention_bias.weight, RelativeBuckets rows)
	// added to every layer's attention scores.
	MPNet           bool
	RelativeBuckets int
	// Scorer: a sequence-classification head of Labels scores on the
	// first token, BERT's (the pooler's dense and tanh, then classifier)
	// or RoBERTa's (classifier.dense and tanh, then classifier.out_proj).
	Scorer, RobertaHead bool
	Labels              int
}

// New builds an encoder from its config.json.
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	arch := cfg.Architecture()
	var c Config
	if err := cfg.Decode(&c); err != nil {
		return nil, err
	}
	robertaScorer := slices.Contains(robertaScorers, arch)
	roberta := slices.Contains(robertaArchs, arch) || robertaScorer
	mpnet := slices.Contains(mpnetArchs, arch)
	pad := 0
	if roberta {
		pad = 1 // RobertaConfig's and XLMRobertaConfig's pad_token_id
	}
	pad = lm.Or(c.PadTokenID, pad)
	if mpnet {
		pad = 1 // MPNetEmbeddings' padding_idx, whatever pad_token_id says
	}
	if c.IsDecoder {
		return nil, errs.Unsupportedf("%s: is_decoder is set: tputool runs %s as an encoder only", where, arch)
	}
	if t := c.PositionEmbeddingType; t != "" && t != "absolute" {
		return nil, errs.Unsupportedf("%s: position_embedding_type %q is not supported (supported: absolute)", where, t)
	}
	o := Options{
		Positions: lm.Or(c.MaxPositionEmbeddings, 512),
		TypeVocab: lm.Or(c.TypeVocabSize, 2),
		Eps:       lm.Or(c.LayerNormEps, 1e-12),
		MPNet:     mpnet,
	}
	if roberta || mpnet {
		o.PositionOffset = pad + 1
	}
	if o.Scorer = robertaScorer || slices.Contains(bertScorers, arch); o.Scorer {
		o.RobertaHead = robertaScorer
		var err error
		if o.Labels, err = lm.ConfigLabels(cfg); err != nil {
			return nil, err
		}
	}
	if mpnet {
		o.TypeVocab = 0 // MPNet has no token types
		// compute_position_bias buckets distances into 32 whatever the
		// table's size; a smaller table could not be indexed.
		if o.RelativeBuckets = lm.Or(c.RelativeBuckets, 32); o.RelativeBuckets < mpnetBuckets {
			return nil, fmt.Errorf("%s: relative_attention_num_buckets %d: MPNet's position bias reads %d buckets", where, o.RelativeBuckets, mpnetBuckets)
		}
	}
	s := lm.Spec{
		Architecture: arch,
		ModelType:    c.ModelType,
		VocabSize:    lm.Or(c.VocabSize, 30522),
		Hidden:       lm.Or(c.HiddenSize, 768),
		Intermediate: lm.Or(c.IntermediateSize, 3072),
		Layers:       lm.Or(c.NumHiddenLayers, 12),
		Heads:        lm.Or(c.NumAttentionHeads, 12),
		MaxPositions: o.Positions - o.PositionOffset,
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
		if o.PositionOffset > 0 && s.MaxPositions <= 0 {
			return nil, fmt.Errorf("%s: max_position_embeddings %d leaves no position after the first %d (pad_token_id %d + 1)", where, o.Positions, o.PositionOffset, pad)
		}
		return nil, err
	}
	if o.TypeVocab < 1 && !mpnet {
		return nil, fmt.Errorf("%s: type_vocab_size must be positive, got %d", where, o.TypeVocab)
	}
	if pad < 0 {
		return nil, fmt.Errorf("%s: pad_token_id %d: want a token id", where, pad)
	}
	act := c.HiddenAct
	if act == "" {
		act = "gelu"
	}
	if o.Act = nn.Activation(act); o.Act == nil {
		return nil, errs.Unsupportedf("%s: hidden_act %q is not supported (supported: %s)", where, act, strings.Join(nn.ActivationNames(), ", "))
	}
	if !mpnet {
		s.TokenTypes = o.TypeVocab
	}
	s.LayerKinds = make([]string, s.Layers)
	for i := range s.LayerKinds {
		s.LayerKinds[i] = KindLayer
	}
	s.LayerKinds[0] = KindFirst
	o.Spec = s
	return NewModel(o), nil
}

// Model is a BERT-family encoder; it implements lm.Model and lm.Finisher.
type Model struct {
	o Options
}

// NewModel returns the encoder for resolved options.
func NewModel(o Options) *Model { return &Model{o: o} }

// Options returns the resolved hyperparameters.
func (m *Model) Options() Options { return m.o }

// Spec implements lm.Model.
func (m *Model) Spec() *lm.Spec { return &m.o.Spec }

// LayerKind implements lm.Model: layer 0 is KindFirst, the others
// KindLayer.
func (m *Model) LayerKind(i int) string { return m.o.Spec.LayerKinds[i] }

// LayerState implements lm.Model: none (an input runs in one step, whose
// keys and values its attention reads as they are).
func (m *Model) LayerState(i int, batch, cacheLen int) []lm.StateSpec { return nil }

// EmbedWeights implements lm.Model: the word embeddings, and the
// token-type embeddings (not MPNet's: it has none).
func (m *Model) EmbedWeights() []lm.WeightSpec {
	s := &m.o.Spec
	ws := []lm.WeightSpec{{Name: "embeddings.word_embeddings.weight", Shape: []int{s.VocabSize, s.Hidden}, Matmul: true}}
	if !m.o.MPNet {
		ws = append(ws, lm.WeightSpec{Name: "embeddings.token_type_embeddings.weight", Shape: []int{m.o.TypeVocab, s.Hidden}})
	}
	return ws
}

// HeadWeights implements lm.Model: a cross-encoder's classification
// head (Score), else none (the encoder has no head; the last layer's
// output is normed already).
func (m *Model) HeadWeights() []lm.WeightSpec {
	if !m.o.Scorer {
		return nil
	}
	H, L := m.o.Spec.Hidden, m.o.Labels
	dense, out := m.headNames()
	// Not Matmul: the head stays as stored (never quantized or blocked),
	// for Score to read in f32.
	return []lm.WeightSpec{
		{Name: dense + ".weight", Shape: []int{H, H}},
		{Name: dense + ".bias", Shape: []int{H}},
		{Name: out + ".weight", Shape: []int{L, H}},
		{Name: out + ".bias", Shape: []int{L}},
	}
}

// headNames are the classification head's two linear layers: BERT's
// pooler and classifier, or RobertaClassificationHead's dense and
// out_proj.
func (m *Model) headNames() (dense, out string) {
	if m.o.RobertaHead {
		return "classifier.dense", "classifier.out_proj"
	}
	return "pooler.dense", "classifier"
}

var _ lm.Scorer = (*Model)(nil)

// Labels implements lm.Scorer: the classifier's scores per input (0 for
// a model without one).
func (m *Model) Labels() int { return m.o.Labels }

// ScorePool implements lm.Scorer: both heads read the first token.
func (m *Model) ScorePool() string { return lm.PoolFirst }

// Score implements lm.Scorer: BertForSequenceClassification's pooler
// (dense, tanh) and classifier, or RobertaClassificationHead's dense,
// tanh and out_proj, on the first token's hidden states [B, Hidden], in
// f32 whatever the compute dtype: a bf16 logit would be rounded to steps
// of 1/16 around the ms-marco models' 8 to 16, tying documents that
// sentence-transformers orders (the head is two small products).
func (m *Model) Score(w *lm.Params, first *Node) *Node {
	dense, out := m.headNames()
	f32 := func(name string) *Node { return ConvertDType(w.Get(name), dtypes.Float32) }
	x := Tanh(nn.Linear(ConvertDType(first, dtypes.Float32), f32(dense+".weight"), f32(dense+".bias")))
	return nn.Linear(x, f32(out+".weight"), f32(out+".bias")) // [B, Labels]
}

// LayerWeights implements lm.Model: layer 0 also reads the embedding's
// positional half and its LayerNorm.
func (m *Model) LayerWeights(i int) []lm.WeightSpec {
	s := &m.o.Spec
	H, I := s.Hidden, s.Intermediate
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, tp lm.TPSplit, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: name, Shape: shape, Matmul: matmul, TP: tp})
	}
	if i == 0 {
		add("embeddings.position_embeddings.weight", false, lm.Replicated, m.o.Positions, H)
		add("embeddings.LayerNorm.weight", false, lm.Replicated, H)
		add("embeddings.LayerNorm.bias", false, lm.Replicated, H)
	}
	p := fmt.Sprintf("encoder.layer.%d.", i)
	if m.o.MPNet { // every layer reads the shared bias table
		add("encoder.relative_attention_bias.weight", false, lm.Replicated, m.o.RelativeBuckets, s.Heads)
	}
	a := m.attentionNames()
	for _, n := range a.qkv {
		add(p+a.self+"."+n+".weight", true, lm.Column, H, H)
		add(p+a.self+"."+n+".bias", false, lm.Column, H)
	}
	add(p+a.out+".weight", true, lm.Row, H, H)
	add(p+a.out+".bias", false, lm.Replicated, H)
	add(p+a.norm+".weight", false, lm.Replicated, H)
	add(p+a.norm+".bias", false, lm.Replicated, H)
	add(p+"intermediate.dense.weight", true, lm.Column, I, H)
	add(p+"intermediate.dense.bias", false, lm.Column, I)
	add(p+"output.dense.weight", true, lm.Row, H, I)
	add(p+"output.dense.bias", false, lm.Replicated, H)
	add(p+"output.LayerNorm.weight", false, lm.Replicated, H)
	add(p+"output.LayerNorm.bias", false, lm.Replicated, H)
	return ws
}

// attentionNames are a layer's attention modules under its prefix:
// BERT's attention.self.{query,key,value}, attention.output.dense and
// attention.output.LayerNorm, or MPNet's attention.attn.{q,k,v},
// attention.attn.o and attention.LayerNorm.
type attentionNames struct {
	self      string
	qkv       [3]string
	out, norm string
}

func (m *Model) attentionNames() attentionNames {
	if m.o.MPNet {
		return attentionNames{"attention.attn", [3]string{"q", "k", "v"}, "attention.attn.o", "attention.LayerNorm"}
	}
	return attentionNames{"attention.self", [3]string{"query", "key", "value"}, "attention.output.dense", "attention.output.LayerNorm"}
}

// Embed implements lm.Model: the word embeddings, and the token-type
// embeddings, each id carrying its type as id + type·VocabSize
// (lm.Spec.Encoder: a pair's second text is type 1 for BERT); layer 0
// adds the positions. MPNet has no token types.
func (m *Model) Embed(w *lm.Params, tokens *Node) *Node {
	if m.o.MPNet {
		return nn.Embedding(w.Get("embeddings.word_embeddings.weight"), tokens) // [B, T, H]
	}
	v := Scalar(tokens.Graph(), tokens.DType(), m.o.Spec.VocabSize)
	types := Div(tokens, v)
	x := nn.Embedding(w.Get("embeddings.word_embeddings.weight"), Sub(tokens, Mul(types, v))) // [B, T, H]
	// A type beyond the table (an id beyond the vocabulary, refused
	// before it gets here) reads the last row rather than out of range.
	types = Min(types, Scalar(tokens.Graph(), tokens.DType(), m.o.TypeVocab-1))
	tt := nn.Embedding(w.Get("embeddings.token_type_embeddings.weight"), types)
	return Add(x, ConvertDType(tt, x.DType()))
}

// embeddings is the rest of BertEmbeddings: the position embedding of
// each token (padding slots, whose positions are negative, read the
// first row: they are masked) and the LayerNorm.
func (m *Model) embeddings(p *lm.Params, x *Node, step *lm.Step) *Node {
	g := x.Graph()
	pos := Max(step.Positions, ScalarZero(g, dtypes.Int32)) // [B, T]
	if m.o.PositionOffset > 0 {
		pos = AddScalar(pos, float64(m.o.PositionOffset))
	}
	pe := nn.Embedding(p.Get("position_embeddings.weight"), pos) // [B, T, H]
	x = Add(x, ConvertDType(pe, x.DType()))
	return nn.LayerNorm(x, p.Get("LayerNorm.weight"), p.Get("LayerNorm.bias"), m.o.Eps)
}

// Layer implements lm.Model: BertLayer (layer 0 first finishes the
// embedding): self-attention over the whole input, then
// LayerNorm(attention + x); the GELU MLP, then LayerNorm(mlp + that).
func (m *Model) Layer(i int, w *lm.Params, x *Node, state []*Node, step *lm.Step) (*Node, []*Node) {
	s := &m.o.Spec
	if i == 0 {
		x = m.embeddings(w.Scope("embeddings"), x, step)
	}
	p := w.Scope(fmt.Sprintf("encoder.layer.%d", i))
	a := m.attentionNames()
	proj := func(name string) *Node {
		return nn.SplitHeads(nn.Linear(x, p.Get(a.self+"."+name+".weight"), p.Get(a.self+"."+name+".bias")), s.Heads) // [B, T, H, D]
	}
	q, k, v := proj(a.qkv[0]), proj(a.qkv[1]), proj(a.qkv[2])
	var ctx *Node // [B, T, Hidden]
	if m.o.MPNet {
		// MPNet's position bias is per head over the whole input (of at
		// most 512 tokens: not pieced, nn.EncoderBlock).
		bias := Add(nn.EncoderBias(step), m.positionBias(w, step)) // [B, Heads, T, 1, T]
		ctx = nn.Attention(q, nn.StepKV(k, v), bias, 0, 0)
	} else {
		ctx = nn.EncoderAttention(q, k, v, step, 0)
	}
	x = nn.LayerNorm(Add(nn.Linear(ctx, p.Get(a.out+".weight"), p.Get(a.out+".bias")), x), p.Get(a.norm+".weight"), p.Get(a.norm+".bias"), m.o.Eps)
	h := m.o.Act(nn.Linear(x, p.Get("intermediate.dense.weight"), p.Get("intermediate.dense.bias")))
	out := p.Scope("output")
	x = nn.LayerNorm(Add(nn.Linear(h, out.Get("dense.weight"), out.Get("dense.bias")), x), out.Get("LayerNorm.weight"), out.Get("LayerNorm.bias"), m.o.Eps)
	return x, nil
}

// mpnetBuckets and mpnetMaxDistance are MPNetEncoder.compute_position_bias's
// bucketing: 32 buckets (its default, whatever relative_attention_num_buckets
// says) up to a distance of 128.
const (
	mpnetBuckets     = 32
	mpnetMaxDistance = 128
)

// RelativeBucket is MPNet's relative_position_bucket (T5's, both
// directions) of the distance rel = key position - query position: half
// the buckets for keys before or at the query, half (offset by 16) for
// keys after it; exact below 8, logarithmic up to 128, the last bucket
// of each half beyond. The logarithm is float32's, as torch computes it
// on a float tensor.
func RelativeBucket(rel int) int {
	half := mpnetBuckets / 2
	exact := half / 2
	n := -rel
	ret := 0
	if n < 0 {
		ret, n = half, -n
	}
	if n < exact {
		return ret + n
	}
	large := exact + int(float32(math.Log(float64(float32(n)/float32(exact))))/float32(math.Log(float64(mpnetMaxDistance)/float64(exact)))*float32(half-exact))
	return ret + min(large, half-1)
}

// positionBias is MPNetEncoder.compute_position_bias for the step: for
// query t and key j of the step, the bias table's row of
// RelativeBucket(j - t), one value per head, as [1, Heads, T, 1, T] to
// add to the scores (the step's distances are the positions' whatever
// the padding before them). Shared by the layers of a graph.
func (m *Model) positionBias(w *lm.Params, step *lm.Step) *Node {
	return step.Memo("mpnet-position-bias", func() *Node {
		g := step.Pads.Graph()
		t, h := step.Len, m.o.Spec.Heads
		s := t
		table := make([]int32, 2*s-1) // the bucket of each distance from -(s-1) to s-1
		for i := range table {
			table[i] = int32(RelativeBucket(i - (s - 1)))
		}
		key := Iota(g, shapes.Make(dtypes.Int32, t, s), 1)
		query := Iota(g, shapes.Make(dtypes.Int32, t, s), 0)
		dist := AddScalar(Sub(key, query), float64(s-1))                                          // [T, S]: the table's index
		bucket := Reshape(Gather(Reshape(Const(g, table), 2*s-1, 1), InsertAxes(dist, -1)), t, s) // [T, S]
		vals := nn.Embedding(w.Get("encoder.relative_attention_bias.weight"), bucket)             // [T, S, Heads]
		vals = TransposeAllDims(ConvertDType(vals, dtypes.Float32), 2, 0, 1)                      // [Heads, T, S]
		return Reshape(vals, 1, h, t, 1, s)
	})
}

var _ lm.Finisher = (*Model)(nil)

// Final implements lm.Finisher: the last layer's output as it is (each
// layer ends in its LayerNorm).
func (m *Model) Final(w *lm.Params, x *Node) *Node { return x }

// Head implements lm.Model. An encoder has no language-model head, and
// runners never ask for one (lm.Spec.Encoder): reaching it is a
// programming error, which the executor reports.
func (m *Model) Head(w *lm.Params, x *Node) *Node {
	panic(fmt.Errorf("%s is an encoder: it has no language-model head (it gives embeddings, not logits): %w", m.o.Spec.Architecture, errs.ErrUnsupported))
}

var _ lm.Renamer = (*Model)(nil)

// RenameWeight implements lm.Renamer: a *ForMaskedLM checkpoint's
// encoder under bert., roberta. or mpnet. is read without the prefix, and the
// LayerNorm.gamma and .beta of older saves as .weight and .bias, as
// transformers renames them at load.
func (m *Model) RenameWeight(stored string) string {
	name := stored
	for _, p := range []string{"bert.", "roberta.", "mpnet."} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			name = rest
			break
		}
	}
	if rest, ok := strings.CutSuffix(name, "LayerNorm.gamma"); ok {
		name = rest + "LayerNorm.weight"
	} else if rest, ok := strings.CutSuffix(name, "LayerNorm.beta"); ok {
		name = rest + "LayerNorm.bias"
	}
	return name
}

var _ lm.Skipper = (*Model)(nil)

// SkipWeight implements lm.Skipper: the pooler (BertModel's dense and
// tanh over the first token, which sentence-transformers does not use),
// the masked-LM head, and the position and token-type id buffers older
// saves hold.
func (m *Model) SkipWeight(name string) (string, bool) {
	switch {
	case strings.HasPrefix(name, "pooler.") && !(m.o.Scorer && !m.o.RobertaHead): // BERT's classifier reads it
		return "pooler (pooler.*): embeddings pool the last hidden states", true
	case strings.HasPrefix(name, "cls.") || strings.HasPrefix(name, "lm_head."):
		return "masked-LM head (cls.*, lm_head.*): tputool runs the encoder", true
	case name == "embeddings.position_ids" || name == "embeddings.token_type_ids":
		return "id buffers (embeddings.position_ids, embeddings.token_type_ids)", true
	}
	return "", false
}
