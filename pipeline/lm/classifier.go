package lm

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

// FinalWeighter is a Finisher that lists the tensors its Final reads
// (the final norm): what a classification head on the model (Classifier)
// reads besides its own projection.
type FinalWeighter interface {
	Finisher
	// FinalWeights lists the tensors Final reads, as HeadWeights lists
	// them.
	FinalWeights() []WeightSpec
}

// PadTrimmer is a Scorer that pools at each input's last token that is
// not its pad token, as transformers' GenericForSequenceClassification
// does ((positions · (ids != pad_token_id)).argmax: the first token when
// every one is the pad). Runner.Score drops an input's trailing pad ids
// before running it, which gives the same states in a causal model.
type PadTrimmer interface {
	Scorer
	// TrailingPad is the pad token id, -1 for none.
	TrailingPad() int
}

// ClassifierScore is the tensor of a causal model's classification head:
// GenericForSequenceClassification's score, a Linear(hidden, labels)
// without bias.
const ClassifierScore = "score.weight"

// Classifier is a causal model's *ForSequenceClassification, following
// transformers' GenericForSequenceClassification (modeling_layers.py),
// which Llama, Qwen2, Qwen3, Mistral and Gemma 3's text model use: the
// base model under "model." (the causal model's decoder, every tensor
// named as in its *ForCausalLM), and a score projection (score.weight,
// [Labels, Hidden], no bias) applied to the final normed hidden states
// at the last token of each input. The checkpoint has no lm_head (one it
// keeps is skipped). Spec().Classifier is set: it scores inputs
// (Scorer; compile.Runner.Score), and Head, a language-model head it does
// not have, is never called.
//
// transformers pools at each row's last token that is not pad_token_id,
// which handles left and right padding; tputool's executors left-pad
// (compile.Runner.Embed), so an input's last position is its last token,
// and an input that itself ends in pad_token_id tokens has them dropped
// before it runs (PadTrimmer): in a causal model the hidden state of the
// last other token does not depend on them.
type Classifier struct {
	Model
	final  FinalWeighter
	labels int
	// pad is config.json's pad_token_id, -1 when it has none.
	pad int
}

// NewClassifier wraps base, a causal model built from the classifier's
// config.json, with a classification head of labels scores, and marks
// its Spec (Classifier set; TieEmbeddings cleared: no head reads the
// embedding). A base that does not list its final norm (FinalWeighter),
// or routes experts on the host or shares state between layers (which
// the wrapper would hide), is refused.
func NewClassifier(base Model, labels int) (*Classifier, error) {
	s := base.Spec()
	f, ok := base.(FinalWeighter)
	if !ok {
		return nil, errs.Unsupportedf("%s: the base model does not list its final norm: no classification head on it", s.Architecture)
	}
	if _, routed := base.(Routed); routed {
		return nil, errs.Unsupportedf("%s: a classification head on a model with routed experts is not supported", s.Architecture)
	}
	if _, shares := base.(StateSharer); shares {
		return nil, errs.Unsupportedf("%s: a classification head on a model whose layers share state is not supported", s.Architecture)
	}
	if labels < 1 {
		return nil, fmt.Errorf("%s: %d labels: a classifier needs at least one", s.Architecture, labels)
	}
	s.Classifier, s.TieEmbeddings = true, false
	return &Classifier{Model: base, final: f, labels: labels, pad: -1}, nil
}

// ClassifierOf is the Constructor of the *ForSequenceClassification of
// the causal model base builds: base's model from the same config.json,
// wrapped by NewClassifier with ConfigLabels' labels.
func ClassifierOf(base Constructor) Constructor {
	return func(cfg *config.File) (Model, error) {
		labels, err := ConfigLabels(cfg)
		if err != nil {
			return nil, err
		}
		m, err := base(cfg)
		if err != nil {
			return nil, err
		}
		c, err := NewClassifier(m, labels)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ConfigName(cfg), err)
		}
		var pad struct {
			ID *int `json:"pad_token_id"`
		}
		if err := cfg.Decode(&pad); err != nil {
			return nil, err
		}
		if pad.ID != nil && *pad.ID >= 0 {
			c.pad = *pad.ID
		}
		return c, nil
	}
}

// ConfigLabels is a classifier's number of labels as transformers'
// PretrainedConfig counts them: id2label's entries, else num_labels,
// else 2.
func ConfigLabels(cfg *config.File) (int, error) {
	var c struct {
		ID2Label  map[string]string `json:"id2label"`
		NumLabels *int              `json:"num_labels"`
	}
	if err := cfg.Decode(&c); err != nil {
		return 0, err
	}
	n := 2 // PretrainedConfig's default
	if len(c.ID2Label) > 0 {
		n = len(c.ID2Label)
	} else if c.NumLabels != nil {
		n = *c.NumLabels
	}
	if n < 1 {
		return 0, fmt.Errorf("%s: %d labels: a classifier needs at least one", ConfigName(cfg), n)
	}
	return n, nil
}

var (
	_ Scorer        = (*Classifier)(nil)
	_ FinalWeighter = (*Classifier)(nil)
	_ Skipper       = (*Classifier)(nil)
	_ Renamer       = (*Classifier)(nil)
)

// HeadWeights implements Model: the final norm and score.weight. Not
// Matmul: the head stays as stored (never quantized or blocked), for
// Score to read in f32.
func (c *Classifier) HeadWeights() []WeightSpec {
	s := c.Spec()
	return append(c.final.FinalWeights(), WeightSpec{Name: ClassifierScore, Shape: []int{c.labels, s.Hidden}})
}

// FinalWeights implements FinalWeighter: the base model's.
func (c *Classifier) FinalWeights() []WeightSpec { return c.final.FinalWeights() }

// Final implements Finisher: the base model's final norm.
func (c *Classifier) Final(w *Params, x *graph.Node) *graph.Node { return c.final.Final(w, x) }

// Labels implements Scorer.
func (c *Classifier) Labels() int { return c.labels }

// ScorePool implements Scorer: the last token, the only one a causal
// model's attention lets see the whole input.
func (c *Classifier) ScorePool() string { return PoolLast }

var _ PadTrimmer = (*Classifier)(nil)

// TrailingPad implements PadTrimmer: config.json's pad_token_id (-1 when
// it has none), which transformers' pooling passes over at the end of an
// input.
func (c *Classifier) TrailingPad() int { return c.pad }

// Score implements Scorer: score.weight times the last token's final
// hidden states [B, Hidden], in f32 whatever the compute dtype (a bf16
// logit would round to steps of 1/16 around 8, tying documents).
func (c *Classifier) Score(w *Params, last *graph.Node) *graph.Node {
	x := graph.ConvertDType(last, dtypes.Float32)
	score := graph.ConvertDType(w.Get(ClassifierScore), dtypes.Float32)
	return graph.DotGeneral(x, []int{1}, nil, score, []int{1}, nil) // [B, Labels]
}

// Head implements Model. A classifier has no language-model head, and
// runners never ask for one (Spec.Classifier): reaching it is a
// programming error, which the executor reports.
func (c *Classifier) Head(w *Params, x *graph.Node) *graph.Node {
	panic(fmt.Errorf("%s is a sequence classifier: it has no language-model head (it gives scores, not logits): %w", c.Spec().Architecture, errs.ErrUnsupported))
}

// SkipWeight implements Skipper: the base model's skips, and the
// language-model head a converted checkpoint may keep, which
// transformers' class does not load either.
func (c *Classifier) SkipWeight(name string) (string, bool) {
	if s, ok := c.Model.(Skipper); ok {
		if reason, skip := s.SkipWeight(name); skip {
			return reason, true
		}
	}
	if strings.HasPrefix(name, "lm_head.") {
		return "language-model head (lm_head.*): a sequence classifier scores with score.weight", true
	}
	return "", false
}

// RenameWeight implements Renamer: the base model's renames, if any.
func (c *Classifier) RenameWeight(stored string) string {
	if r, ok := c.Model.(Renamer); ok {
		return r.RenameWeight(stored)
	}
	return stored
}
