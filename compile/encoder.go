package compile

import (
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
)

// EncoderOptions configure an Encoder.
type EncoderOptions struct {
	// Pooling is how Embed pools an input's final hidden states.
	Pooling Pooling
	// MaxContext is the longest input, in tokens; 0 means the model's max
	// positions.
	MaxContext int
	// Scores makes Embed give a cross-encoder's scores (Runner.Score: its
	// classifier's logits, Labels of them) instead of pooled hidden
	// states: the engine of a reranking server.
	Scores bool
}

// Encoder is the server's engine (serve.Engine, through serve.Adapt) for
// a model that generates nothing: an encoder (lm.Spec.Encoder: BERT,
// XLM-RoBERTa), which gives embeddings, or a causal classifier
// (lm.Spec.Classifier: Qwen3ForSequenceClassification and the other
// decoders' cross-encoders), which gives scores. Embed runs inputs
// through Runner.Embed (a cross-encoder's, with EncoderOptions.Scores,
// through Runner.Score), and the engine has one row that never holds a
// sequence. Its prefills and kept caches would be a Batch's types, but
// it makes none: StartPrefill, Insert, Decode, Keep and StartPrefillFrom
// are GenerateError (the server refuses generating requests before they
// reach it: serve.ServerOptions.EmbeddingsOnly). It owns its Runner:
// nothing else may run on it. It is used from one goroutine (the
// server's engine loop).
type Encoder struct {
	r *Runner
	o EncoderOptions
}

// NewEncoder prepares serving embeddings of r, an encoder's Runner, which
// it then owns (or, with o.Scores, its scores), or the scores of a causal
// classifier's Runner (lm.Spec.Classifier, with o.Scores: its inputs run
// as Runner.Embed runs a decoder's, in pieces through KV caches it drops
// after each call). A Runner of a model that generates is refused
// (NewBatch serves it), and so is a classifier's without Scores, one
// sharded over several devices, and Scores for a model without a
// classification head (lm.Scorer with Labels; errs.ErrUnsupported).
func NewEncoder(r *Runner, o EncoderOptions) (*Encoder, error) {
	if r.spec.Generates() {
		return nil, fmt.Errorf("NewEncoder: %s is not an encoder nor a causal classifier (lm.Spec.Encoder, lm.Spec.Classifier): want the Runner of a model that generates nothing (a causal LM is served by NewBatch): %w", r.spec.Architecture, errs.ErrUsage)
	}
	if r.spec.Classifier && !o.Scores {
		return nil, fmt.Errorf("NewEncoder: %s is a causal sequence classifier: it is served for its scores (EncoderOptions.Scores), not embeddings: %w", r.spec.Architecture, errs.ErrUsage)
	}
	if err := r.oneDevice("embeddings run on one device: run one device per server"); err != nil {
		return nil, err
	}
	if o.MaxContext == 0 {
		o.MaxContext = r.spec.MaxPositions
	}
	if sc, ok := r.model.(lm.Scorer); o.Scores && (!ok || sc.Labels() == 0) {
		return nil, fmt.Errorf("NewEncoder: %s has no classification head to score with (a cross-encoder is a *ForSequenceClassification): %w", r.spec.Architecture, errs.ErrUnsupported)
	}
	if o.MaxContext < 1 || o.MaxContext > r.spec.MaxPositions {
		return nil, &OptionError{Owner: "EncoderOptions", Option: "MaxContext", Value: o.MaxContext,
			Want: fmt.Sprintf("1 to the model's %d positions (max_position_embeddings)", r.spec.MaxPositions)}
	}
	return &Encoder{r: r, o: o}, nil
}

// Slots is 1: the engine's one row, which never holds a sequence.
func (e *Encoder) Slots() int { return 1 }

// MaxContext is the longest input, in tokens.
func (e *Encoder) MaxContext() int { return e.o.MaxContext }

// Rows is 1.
func (e *Encoder) Rows() int { return 1 }

// RowBucket is 1, whatever k.
func (e *Encoder) RowBucket(int) int { return 1 }

// Relayout accepts the one-row layout, from = [-1] or [0], and changes
// nothing; any other is an error.
func (e *Encoder) Relayout(from []int) error {
	if len(from) == 1 && (from[0] == -1 || from[0] == 0) {
		return nil
	}
	return fmt.Errorf("encoder: relayout to %v: want the one row, [-1] or [0]", from)
}

// MaxPrefill is the most inputs Embed runs together: 8, as a Batch
// prefills and `tputool embed` groups them.
func (e *Encoder) MaxPrefill() int { return maxPrefillRows }

// PrefillGroup puts any inputs together: one key, MaxPrefill of them.
func (e *Encoder) PrefillGroup([]int) (key, most int) { return 0, e.MaxPrefill() }

// StartPrefill is GenerateError: the model generates nothing.
func (e *Encoder) StartPrefill([][]int) (*BatchPrefill, error) { return nil, GenerateError(e.r.spec) }

// Insert is GenerateError: the model generates nothing.
func (e *Encoder) Insert(*BatchPrefill, int, int) error { return GenerateError(e.r.spec) }

// Decode is GenerateError: the model generates nothing.
func (e *Encoder) Decode([]int, []int) ([][]float32, error) { return nil, GenerateError(e.r.spec) }

// Free does nothing: no row holds a sequence.
func (e *Encoder) Free(int) {}

// KeepsPrefixes is false: there are no prompt caches to keep.
func (e *Encoder) KeepsPrefixes() bool { return false }

// Keep is GenerateError: the model generates nothing.
func (e *Encoder) Keep(*BatchPrefill, int) (*Kept, error) { return nil, GenerateError(e.r.spec) }

// Saving is 0: no prefill starts from a kept cache.
func (e *Encoder) Saving(int, int) int { return 0 }

// StartPrefillFrom is GenerateError: the model generates nothing.
func (e *Encoder) StartPrefillFrom([]int, *Kept) (*BatchPrefill, error) {
	return nil, GenerateError(e.r.spec)
}

// Embed runs prompts (at least one, each of 1 to MaxContext tokens)
// through the encoder together and returns each one's final hidden states
// pooled by EncoderOptions.Pooling (Runner.Embed), not normalized, or
// with EncoderOptions.Scores its scores (Runner.Score). Its executables
// compile at first use of each shape.
func (e *Encoder) Embed(prompts [][]int) ([][]float32, error) {
	if len(prompts) == 0 {
		return nil, fmt.Errorf("embed: no inputs, want at least one")
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, errs.Usagef("input %d is empty", i)
		}
		if len(p) > e.o.MaxContext {
			return nil, errs.Usagef("input %d of %d tokens is beyond the context of %d tokens", i, len(p), e.o.MaxContext)
		}
	}
	if e.o.Scores {
		return e.r.Score(prompts)
	}
	return e.r.Embed(prompts, e.o.Pooling)
}
