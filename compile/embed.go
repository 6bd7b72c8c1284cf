package compile

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Pooling says how Embed makes one vector of a prompt's final hidden
// states.
type Pooling int

const (
	// PoolLast takes the last token's: in a causal model it is the only
	// one that has seen the whole prompt (Qwen3-Embedding, e5-mistral and
	// gte-Qwen pool so).
	PoolLast Pooling = iota
	// PoolMean averages every token's (sentence-transformers'
	// pooling_mode_mean_tokens).
	PoolMean
	// PoolCLS takes the first token's: a BERT encoder's [CLS]
	// (sentence-transformers' pooling_mode_cls_token: BAAI/bge-*).
	PoolCLS
)

// String returns the pooling's flag value.
func (p Pooling) String() string {
	switch p {
	case PoolMean:
		return "mean"
	case PoolCLS:
		return "cls"
	}
	return "last"
}

// ParsePooling parses "last", "mean" or "cls".
func ParsePooling(s string) (Pooling, error) {
	switch s {
	case "last":
		return PoolLast, nil
	case "mean":
		return PoolMean, nil
	case "cls":
		return PoolCLS, nil
	}
	return 0, fmt.Errorf("pooling %q: want last, mean or cls", s)
}

// embedPiece is the most tokens per row of one of Embed's steps.
const embedPiece = 512

// embedSkip is the granularity of the left padding Embed skips: steps
// start at a multiple of it, so their lengths repeat.
const embedSkip = 16

// embedProgs are Embed's programs, made at its first call: the whole
// step with the final hidden states for output (compiled mode) or the
// head that gives them (eager mode).
type embedProgs struct {
	once sync.Once
	prog *Program
	err  error
}

// Embed runs prompts through the model together, left-padded in one
// batch as Prefill pads them (the padding all rows share skipped, in
// multiples of 16 slots), in steps of at most 512 tokens a row (an
// encoder's, lm.Spec.Encoder, in one step: each token attends to the
// whole input), and returns each prompt's final hidden states (lm.Finisher: the residual
// stream after the final norm, what the head projects) pooled by pool:
// [len(prompts)][Hidden] float32, not normalized. Nothing of it stays in
// any State. Models with host-routed experts or sharded over several
// devices are refused (errs.ErrUnsupported).
func (r *Runner) Embed(prompts [][]int, pool Pooling) ([][]float32, error) {
	if _, ok := r.model.(lm.Finisher); !ok {
		return nil, fmt.Errorf("embeddings: %s does not give its final hidden states: %w", r.spec.Architecture, errs.ErrUnsupported)
	}
	if r.tp != nil || r.moe != nil {
		return nil, fmt.Errorf("embeddings run on one device with the experts in the graph: %w", errs.ErrUnsupported)
	}
	if rows := r.encoderRows(prompts); rows < len(prompts) {
		// Long inputs to an encoder run fewer at a time (encoderRows).
		var vecs [][]float32
		for lo := 0; lo < len(prompts); lo += rows {
			v, err := r.Embed(prompts[lo:min(lo+rows, len(prompts))], pool)
			if err != nil {
				return nil, err
			}
			vecs = append(vecs, v...)
		}
		return vecs, nil
	}
	r.emb.once.Do(func() {
		if r.opts.Mode == Compiled {
			r.emb.prog, r.emb.err = r.newProgram("embed-final", r.finalGraph)
		} else {
			r.emb.prog, r.emb.err = r.newProgram("head-final", r.finalHeadGraph)
		}
	})
	if r.emb.err != nil {
		return nil, r.emb.err
	}
	st := r.NewState()
	defer st.Release()
	if err := st.beginPass(prompts); err != nil {
		return nil, err
	}
	// h is the final hidden states' width: the hidden size, or what the
	// model's Final projects it to (OPT-350M's narrower embedding width).
	b, h := st.batch, lm.FinalWidth(r.model)
	sums := make([][]float64, b)
	for i := range sums {
		sums[i] = make([]float64, h)
	}
	var last, first []float32
	for st.Pending() > 0 {
		n := st.throughSwitch(min(embedPiece, st.Pending()))
		if r.spec.Encoder {
			n = st.Pending()
		}
		start := st.next
		out, err := st.finalChunk(n)
		if err != nil {
			return nil, err
		}
		if dims := out.Shape().Dimensions; dims[len(dims)-1] != h {
			out.FinalizeAll()
			return nil, fmt.Errorf("embed: the final hidden states are %d wide, the model declares %d (lm.FinalWidth)", dims[len(dims)-1], h)
		}
		err = tensors.ConstFlatData(out, func(v []float32) { // [B, n, h]
			if st.Pending() == 0 && pool == PoolLast {
				last = make([]float32, b*h)
				for i := range b {
					copy(last[i*h:(i+1)*h], v[(i*n+n-1)*h:(i*n+n)*h])
				}
			}
			if pool == PoolCLS {
				for i := range b {
					if t := int(st.pads[i]) - start; t >= 0 && t < n {
						if first == nil {
							first = make([]float32, b*h)
						}
						copy(first[i*h:(i+1)*h], v[(i*n+t)*h:(i*n+t+1)*h])
					}
				}
			}
			if pool != PoolMean {
				return
			}
			for i := range b {
				for t := max(0, int(st.pads[i])-start); t < n; t++ {
					row := v[(i*n+t)*h : (i*n+t+1)*h]
					for j, x := range row {
						sums[i][j] += float64(x)
					}
				}
			}
		})
		out.FinalizeAll()
		if err != nil {
			return nil, err
		}
	}
	vecs := make([][]float32, b)
	for i := range vecs {
		vecs[i] = make([]float32, h)
		switch pool {
		case PoolLast:
			copy(vecs[i], last[i*h:(i+1)*h])
			continue
		case PoolCLS:
			copy(vecs[i], first[i*h:(i+1)*h])
			continue
		}
		count := float64(len(prompts[i]))
		for j, s := range sums[i] {
			vecs[i][j] = float32(s / count)
		}
	}
	return vecs, nil
}

// encoderScoreBudget bounds the attention scores an encoder's step
// holds (encoderRows); a variable for tests.
var encoderScoreBudget int64 = 1 << 30

// EncoderScoreBytes is the most attention scores an encoder's step holds
// for up to rows inputs of at most longest tokens: a bound of 1 GiB
// (Embed runs fewer inputs at a time past it), one input's at least.
func EncoderScoreBytes(s *lm.Spec, rows, longest int) int64 {
	perRow := encoderRowScores(s, longest)
	return max(perRow, min(int64(rows)*perRow, encoderScoreBudget))
}

// EmbedScoreBytes is the most attention scores one of Embed's (or
// Score's) steps holds for up to rows inputs of at most longest tokens:
// an encoder's (EncoderScoreBytes), or a decoder's, whose steps of at
// most 512 tokens a row (embedPositions) attend over up to longest
// slots: rows·heads·min(longest, 512)·longest f32 (8
// Qwen3-Reranker-0.6B pairs of 40,960 tokens: 10.7 GB).
func EmbedScoreBytes(s *lm.Spec, rows, longest int) int64 {
	if s.Encoder {
		return EncoderScoreBytes(s, rows, longest)
	}
	return int64(rows) * int64(s.Heads) * int64(embedPositions(s, longest)) * int64(longest) * 4
}

// embedPositions is the most positions a row runs in one of Embed's,
// Score's or PromptLogprobs' steps over inputs of at most longest
// tokens: a piece of embedPiece, or, for a LongRoPE model whose inputs
// run past its switch, the first piece through it (State.throughSwitch),
// which with left padding may take up to the whole input.
func embedPositions(s *lm.Spec, longest int) int {
	if s.RopeSwitch > 0 && longest > s.RopeSwitch {
		return longest
	}
	return min(longest, embedPiece)
}

// encoderRowScores is the bytes of attention scores one input of T
// tokens holds at a time in an encoder's step: heads·min(T, B)·T f32,
// its queries attending in pieces of B = nn.EncoderBlock (an 8192-token
// input of 16 heads: 512 MiB).
func encoderRowScores(s *lm.Spec, t int) int64 {
	return int64(s.Heads) * int64(min(t, nn.EncoderBlock)) * int64(t) * 4
}

// encoderRows is how many of prompts an encoder's step runs together:
// every token of an input attends to every other in one step, so a step
// holds rows·encoderRowScores (T the longest input), and long inputs run
// fewer at a time to keep them within encoderScoreBudget (one at a time
// at least). All of them for a decoder, whose steps are pieces.
func (r *Runner) encoderRows(prompts [][]int) int {
	if !r.spec.Encoder || len(prompts) < 2 {
		return len(prompts)
	}
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	perRow := encoderRowScores(r.spec, longest)
	return int(max(1, min(int64(len(prompts)), encoderScoreBudget/max(perRow, 1))))
}

// EncoderError is the error for generating with an encoder (lm.Spec.Encoder):
// it gives embeddings, not text.
func EncoderError(s *lm.Spec) error {
	return fmt.Errorf("%s is an encoder: it gives embeddings (tputool embed) or, a cross-encoder, scores (tputool rerank), not text: %w", s.Architecture, errs.ErrUnsupported)
}

// ClassifierError is the error for generating with a causal model whose
// head is a sequence classifier (lm.Spec.Classifier: a decoder's
// *ForSequenceClassification): it gives scores, not text.
func ClassifierError(s *lm.Spec) error {
	return fmt.Errorf("%s is a sequence classifier (a cross-encoder): it has no language-model head and gives scores (tputool rerank), not text: %w", s.Architecture, errs.ErrUnsupported)
}

// GenerateError is the error for generating with a model that does not
// generate (lm.Spec.Generates): EncoderError for an encoder,
// ClassifierError for a causal classifier; nil for a model with a
// language-model head.
func GenerateError(s *lm.Spec) error {
	switch {
	case s.Encoder:
		return EncoderError(s)
	case s.Classifier:
		return ClassifierError(s)
	}
	return nil
}

// beginPass begins a pass over prompts that generates nothing after them
// (Embed, PromptLogprobs): Begin with no new tokens, then the slots that
// are left padding in every row, which change nothing (they are masked),
// skipped: the steps start at the last multiple of embedSkip at or below
// the shortest padding, the slots before it left empty.
func (st *State) beginPass(prompts [][]int) error {
	if _, err := st.Begin(prompts, 0); err != nil {
		return err
	}
	skip := int(slices.Min(st.pads)) / embedSkip * embedSkip
	st.next = skip
	for i, p := range st.pending {
		st.pending[i] = p[skip:]
	}
	return nil
}

// finalChunk runs the next n pending tokens of every row, as
// PrefillChunk does, and returns the final hidden states of each of
// them, [B, n, Hidden] float32, for the caller to finalize.
func (st *State) finalChunk(n int) (*tensors.Tensor, error) { return st.pendingOn(st.r.emb.prog, n) }

// pendingOn runs the next n pending tokens of every row on prog (a
// whole step in compiled mode, the head after the layers in eager mode)
// and returns its first output, for the caller to finalize.
func (st *State) pendingOn(prog *Program, n int) (*tensors.Tensor, error) {
	r := st.r
	for st.next+n > st.cacheLen {
		if err := r.growCache(st); err != nil {
			return nil, err
		}
	}
	return r.runStep(st, prog, prog, st.takePending(n), st.next)
}
