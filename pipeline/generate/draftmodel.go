package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
)

// Speculative decoding with a draft model: a smaller language model of
// the same vocabulary (Qwen3-0.6B for Qwen3-8B, Llama 3.2 1B for Llama
// 3.1 8B) proposes the next tokens, greedily, one cheap step each, and
// the model confirms them in one step as it confirms prompt lookup's
// (speculate). Decoding greedily, the draft model proposes its argmax (a
// proposal of probability 1, sample.Sampler.NextDraft); sampling, it
// draws each proposal from its own processed distribution q, which
// NextDraftFrom takes with probability min(1, p/q) of the model's p
// (speculative sampling): greedy decoding gives the tokens decoding one
// at a time gives, sampling tokens of the same distribution, whatever the
// draft model proposes. A draft stops at the first token the draft model
// is less sure of than DraftModel's PMin (llama.cpp's p_min; sampling,
// its likeliest token, before it draws), so a
// hard stretch of text costs a step or two of the draft, not a draft of
// tokens the model will refuse; and after a step that confirmed nothing
// (no draft, or its first token refused) the draft model sits out the
// next 1, 2, 4, then 8 steps, catching up in one step when it drafts
// again, so a stretch it cannot guess costs little more than decoding
// without it.

// DraftStepper is a draft model's runner: one row fed a token at a time
// or several (DecodeMany), taken back to any earlier token (Rewind: a
// compile.State of a Rewindable runner, not one with recurrent state),
// and continued with a longer prompt (Extend: a conversation's next
// turn).
type DraftStepper interface {
	Stepper
	Speculator
	Extender
	// Rewindable reports whether Rewind reaches any earlier token
	// (compile.Runner.Rewindable), which a draft model needs.
	Rewindable() bool
}

// DefaultDraftPMin is DraftModel's default PMin: llama.cpp's (common
// params' speculative p_min).
const DefaultDraftPMin = 0.75

// maxCatchUp is the most tokens a draft model is fed in one DecodeMany
// step to catch up with the text (1 or 2 after a draft: the model's pick
// after it, and the draft's last token when the draft was confirmed
// whole; up to maxSitOut+1 after steps sat out); more (a conversation's
// next turn, another sequence) are prefilled as a prompt, in pieces.
const maxCatchUp = maxSitOut + 1

// maxSitOut is the most steps a draft model sits out after steps that
// confirmed nothing.
const maxSitOut = 8

// draftPiece is the most prompt tokens a draft model prefills in one
// step where its runner does not fix a piece (FixedPieces): its memory
// bound, and where a cancelled Run is seen.
const draftPiece = 512

// The steps a draft model sits out after a failure: from 16, doubling
// with each failure in a row, up to 1024.
const (
	firstErrWait = 16
	maxErrWait   = 1024
)

// DraftModel proposes speculative drafts with a draft model
// (Options.DraftModel). It keeps the tokens its runner's cache holds, so
// a conversation's next Run continues it (a common prefix is kept, the
// rest taken back). It is used by one Run at a time, or by serve's
// scheduler alone.
type DraftModel struct {
	m DraftStepper
	// mtp drafts in place of m: the model's multi-token-prediction head
	// (NewMTPDraft).
	mtp MTPDrafter
	// PMin ends a draft before a token the draft model gives less than
	// this probability (0: every draft is as long as asked).
	PMin float64
	// OnError, when set, is told of a failure of the draft model in a
	// Run, which then decodes that step's token without a draft (the
	// draft model sits out the next 16 steps, 32 after a second failure
	// in a row, … up to 1024).
	OnError func(error)
	// vocab bounds the ids both models have: a draft ends before an id
	// past it, and a text holding one gets no draft.
	vocab int
	// positions is the draft model's: a text as long gets no draft.
	positions int
	fed       []int // the tokens in m's cache, in order; nil: none known
	// maxNew sizes the cache at a prefill or extension: the tokens the
	// Run may still generate plus a draft.
	maxNew int
	// cool is the steps the draft model sits out after the next step that
	// confirms nothing (doubling from 1 to maxSitOut, 0 after one that
	// confirms a token); errWait the steps after the next failure; wait
	// the steps it still sits out.
	cool, errWait, wait int
	// sampler draws the proposals of a Run that samples (start); nil:
	// greedy proposals. hist is pick's scratch history, built where the
	// run's penalties read it (readsHistory).
	sampler      *sample.Sampler
	hist         []int
	readsHistory bool
	qs           [][]float64 // pick's distributions, by position (qBuf)
	// piece is the prefill piece (FixedPieces' where it fixes one);
	// fixed pads catch-ups to one length (FixedSteps: a device where each
	// new step length compiles, eager mode).
	piece int
	fixed bool
}

// NewDraftModel proposes drafts with m, a draft model of positions
// positions whose token ids mean what the model's do below vocab (the
// smaller of the two models' vocabulary sizes), with PMin
// DefaultDraftPMin. m must be Rewindable (errs.ErrUnsupported).
func NewDraftModel(m DraftStepper, vocab, positions int) (*DraftModel, error) {
	if !m.Rewindable() {
		return nil, fmt.Errorf("a draft model must take its cache back to any earlier token (not one with recurrent state): %w", errs.ErrUnsupported)
	}
	d := &DraftModel{m: m, PMin: DefaultDraftPMin, vocab: vocab, positions: positions, piece: draftPiece}
	if fp, ok := m.(FixedPieces); ok && fp.PrefillPiece() > 0 {
		d.piece = fp.PrefillPiece()
	}
	if fs, ok := m.(FixedSteps); ok {
		d.fixed = fs.FixedSteps()
	}
	if lr, ok := m.(LogitsReuser); ok {
		lr.ReuseLogits() // every step's logits are read before the next
	}
	return d, nil
}

// MTPDrafter is a model's multi-token-prediction head drafting beside
// the model's State (compile.MTP), which feeds it the final hidden states
// of the positions its steps run.
type MTPDrafter interface {
	// Draft begins a draft after next, the text's newest token (not fed
	// to the model yet): the head's logits for the token after it (nil:
	// no draft now).
	Draft(next int) ([]float32, error)
	// Chain feeds a drafted token: the head's logits for the token after
	// it.
	Chain(id int) ([]float32, error)
	// Room is how many more tokens the head may be fed.
	Room() int
}

// NewMTPDraft proposes drafts with a model's multi-token-prediction head
// h, over the model's vocab, as a draft model would (PMin
// DefaultDraftPMin, sitting out after steps that confirmed nothing,
// speculative sampling): the head follows the text through the model's
// steps, so it needs no catching up of its own.
func NewMTPDraft(h MTPDrafter, vocab int) *DraftModel {
	return &DraftModel{mtp: h, PMin: DefaultDraftPMin, vocab: vocab}
}

// CompileDuration is the draft model's time compiling (CompileTimer), so
// a Run counts it as it counts the model's.
func (d *DraftModel) CompileDuration() time.Duration {
	if ct, ok := d.m.(CompileTimer); ok && d.mtp == nil { // the head compiles on the model's runner
		return ct.CompileDuration()
	}
	return 0
}

// proposer proposes speculative drafts for one Run: prompt lookup
// (Drafter) or a draft model (DraftModel).
type proposer interface {
	// propose proposes up to limit tokens to follow history, the
	// sequence so far (nil: none this step), with the distribution each
	// was drawn from (nil: each of probability 1). Only a cancelled ctx
	// is an error.
	propose(ctx context.Context, history []int, limit int) ([]int, [][]float64, error)
	// done records how a draft of n tokens fared: kept of them were
	// confirmed.
	done(n, kept int)
}

type lookupProposer struct{ *Drafter }

func (l lookupProposer) propose(_ context.Context, history []int, limit int) ([]int, [][]float64, error) {
	return l.Draft(history, limit), nil, nil
}

func (l lookupProposer) done(n, kept int) { l.Done(n, kept) }

// modelProposer is a DraftModel in one Run.
type modelProposer struct{ *DraftModel }

// start readies d for a Run that may generate maxNew more tokens with
// drafts of up to draft tokens, sampling as o says after a prompt of
// promptLen tokens: the draft model samples its proposals from its own
// distribution, processed as o says (speculative sampling), where o
// samples; greedy, it proposes its argmax.
func (d *DraftModel) start(maxNew, draft int, o sample.Options, promptLen int) proposer {
	d.maxNew = maxNew + draft
	d.Restart(o, promptLen)
	return modelProposer{d}
}

// draftStream is the random stream of a draft model's samples: apart
// from the rows' (sample.New's row 0, 1, …) of the same seed.
const draftStream = 1 << 40

// Restart begins another sequence (serve's scheduler: another sequence
// runs alone), sampling as o says after a prompt of promptLen tokens:
// where o samples, the draft model draws its proposals from its own
// distribution processed as o says, on a random stream of its own from
// o's seed (speculative sampling); greedy, it proposes its argmax. How
// the last sequence's drafts fared (sitting out, failures) is forgotten.
func (d *DraftModel) Restart(o sample.Options, promptLen int) {
	d.cool, d.errWait, d.wait = 0, 0, 0
	d.sampler = nil
	if !o.Greedy() {
		d.sampler = sample.New(o, draftStream)
		d.sampler.SetPromptLen(promptLen)
		d.readsHistory = o.ReadsHistory()
	}
}

func (p modelProposer) done(n, kept int) { p.Done(n, kept) }

// Done records how a draft of n tokens fared: kept of them were
// confirmed (serve's scheduler; a Run calls it itself).
func (d *DraftModel) Done(n, kept int) {
	if kept == 0 {
		d.sitOut()
	} else {
		d.cool = 0
	}
}

// sitOut makes the draft model sit out the next steps, twice as many as
// the last time (1 to maxSitOut).
func (d *DraftModel) sitOut() {
	d.cool = min(max(2*d.cool, 1), maxSitOut)
	d.wait = d.cool
}

// propose is Propose in a Run: a failure of the draft model is reported
// to OnError, and the step goes on without a draft.
func (p modelProposer) propose(ctx context.Context, history []int, limit int) ([]int, [][]float64, error) {
	draft, qs, err := p.draft(ctx, history, limit)
	if err != nil && ctx.Err() == nil {
		if p.OnError != nil {
			p.OnError(err)
		}
		return nil, nil, nil
	}
	return draft, qs, err
}

// Propose proposes up to limit tokens to follow history, the sequence so
// far, with its cache sized for maxNew more tokens (a server's sequence
// running alone: serve's scheduler, which calls Restart when the
// sequence changes), and the distribution each was drawn from (nil:
// greedy, each of probability 1); nil for none. After an error the draft
// model sits out the next steps (16, doubling with each failure in a row
// up to 1024), then starts afresh.
func (d *DraftModel) Propose(ctx context.Context, history []int, limit, maxNew int) ([]int, [][]float64, error) {
	d.maxNew = maxNew
	return d.draft(ctx, history, limit)
}

// draft is Propose with the cache sized by d.maxNew, its proposals drawn
// by d.sampler (their distributions returned) or greedy (nil).
func (d *DraftModel) draft(ctx context.Context, history []int, limit int) ([]int, [][]float64, error) {
	if limit <= 0 {
		return nil, nil, nil
	}
	if d.wait > 0 {
		d.wait--
		return nil, nil, nil
	}
	var logits []float32
	var err error
	if d.mtp != nil {
		logits, err = d.mtp.Draft(history[len(history)-1])
	} else {
		logits, err = d.catchUp(ctx, history)
	}
	if err != nil {
		return nil, nil, d.failed(err)
	}
	if logits == nil {
		return nil, nil, nil
	}
	var draft []int
	var qs [][]float64
	for {
		id, q := d.pick(logits, history, draft)
		if id < 0 {
			if len(draft) == 0 {
				d.sitOut()
			}
			d.errWait = 0 // a proposal without a failure
			return draft, qs, nil
		}
		draft = append(draft, id)
		if q != nil {
			qs = append(qs, q)
		}
		if len(draft) == limit || d.room() < 1 {
			d.errWait = 0
			return draft, qs, nil
		}
		if logits, err = d.chain(id); err != nil {
			return nil, nil, d.failed(err)
		}
	}
}

// room is how many more tokens the draft model or head may be fed.
func (d *DraftModel) room() int {
	if d.mtp != nil {
		return d.mtp.Room()
	}
	return d.m.Room()
}

// chain feeds a drafted token and returns the logits for the one after.
func (d *DraftModel) chain(id int) ([]float32, error) {
	if d.mtp != nil {
		return d.mtp.Chain(id)
	}
	rows, err := d.m.Decode([]int{id})
	if err != nil {
		return nil, err
	}
	d.fed = append(d.fed, id)
	return rows[0], nil
}

// qBuf is the buffer of the distribution of a draft's i-th token, n
// long: one per position, reused by the next proposal (a Run verifies a
// draft before it asks for the next).
func (d *DraftModel) qBuf(i, n int) []float64 {
	for len(d.qs) <= i {
		d.qs = append(d.qs, nil)
	}
	if cap(d.qs[i]) < n {
		d.qs[i] = make([]float64, n)
	}
	return d.qs[i][:n]
}

// pick is the draft model's next proposal after history and the draft so
// far, from its logits: greedy, the argmax (q nil); sampling, a draw from
// its processed distribution q over the ids both models have. -1 where
// the draft ends: the argmax, or the likeliest token of q, is less likely
// than PMin (decided before drawing, so the draws keep q's distribution),
// or the argmax is an id the model does not have.
func (d *DraftModel) pick(logits []float32, history, draft []int) (int, []float64) {
	if d.sampler == nil {
		id, p := argmaxProb(logits)
		if id >= d.vocab || !(p > 0) || p < d.PMin { // p 0: NaN or infinite logits
			return -1, nil
		}
		return id, nil
	}
	var hist []int
	if d.readsHistory { // the penalties count the draft so far too
		d.hist = append(append(d.hist[:0], history...), draft...)
		hist = d.hist
	}
	q := d.qBuf(len(draft), len(logits))
	d.sampler.Distribution(q, logits, hist)
	q = q[:min(len(q), d.vocab)]
	var sum, top float64
	for _, w := range q {
		sum += w
		top = max(top, w)
	}
	if !(sum > 0) || !(top/sum >= d.PMin) { // NaN logits give no draft
		return -1, nil
	}
	for i := range q {
		q[i] /= sum
	}
	return d.sampler.Draw(q), q
}

// failed records a failure of the draft model: its cache's content is
// unknown (the next proposal prefills afresh), and unless ctx was
// cancelled it sits out the next steps.
func (d *DraftModel) failed(err error) error {
	d.fed = nil
	if !errors.Is(err, errs.ErrInterrupted) {
		d.errWait = min(max(2*d.errWait, firstErrWait), maxErrWait)
		d.wait = d.errWait
	}
	if d.mtp != nil {
		return fmt.Errorf("multi-token-prediction head: %w", err)
	}
	return fmt.Errorf("draft model: %w", err)
}

// catchUp brings the draft model's cache to history and returns its
// logits after history's last token; nil where history holds an id the
// draft model does not have or fills its positions (it proposes nothing
// then).
func (d *DraftModel) catchUp(ctx context.Context, history []int) ([]float32, error) {
	// The cache is sized for the rest of the Run, as far as the draft
	// model's positions go.
	budget := min(d.maxNew, d.positions-len(history))
	if budget < 1 {
		return nil, nil
	}
	p := 0
	for p < len(d.fed) && p < len(history) && d.fed[p] == history[p] {
		p++
	}
	// The last token is fed again when the cache holds it already: its
	// logits were not kept.
	p = min(p, len(history)-1)
	rest := history[p:]
	for _, id := range rest {
		if id < 0 || id >= d.vocab {
			return nil, nil
		}
	}
	if p == 0 {
		d.fed = nil
		n, err := d.m.Begin([][]int{history}, budget)
		if err != nil {
			return nil, err
		}
		logits, err := d.prefill(ctx, n)
		if err != nil {
			return nil, err
		}
		d.fed = append([]int(nil), history...)
		return logits, nil
	}
	if err := d.m.Rewind(len(d.fed) - p); err != nil {
		return nil, err
	}
	d.fed = d.fed[:p]
	var logits []float32
	switch feed := d.catchUpFeed(rest); {
	case len(rest) == 1 && d.m.Room() >= 1:
		rows, err := d.m.Decode(rest)
		if err != nil {
			return nil, err
		}
		logits = rows[0]
	case len(rest) <= maxCatchUp && len(feed) <= d.m.Room():
		rows, err := d.m.DecodeMany(feed)
		if err != nil {
			return nil, err
		}
		logits = rows[len(rest)-1]
		if err := d.m.Rewind(len(feed) - len(rest)); err != nil { // the padding
			return nil, err
		}
	default:
		n, err := d.m.Extend([][]int{rest}, budget)
		if err != nil {
			return nil, err
		}
		if logits, err = d.prefill(ctx, n); err != nil {
			return nil, err
		}
	}
	d.fed = append(d.fed, rest...)
	return logits, nil
}

// catchUpFeed is rest as a catch-up step feeds it: padded with its last
// token to maxCatchUp tokens where every step length compiles (fixed),
// so that one executable serves every catch-up.
func (d *DraftModel) catchUpFeed(rest []int) []int {
	if !d.fixed || len(rest) >= maxCatchUp {
		return rest
	}
	feed := append(make([]int, 0, maxCatchUp), rest...)
	for len(feed) < maxCatchUp {
		feed = append(feed, rest[len(rest)-1])
	}
	return feed
}

// prefill runs the n pending tokens in pieces of d.piece, checking ctx
// between them, and returns the logits after the last.
func (d *DraftModel) prefill(ctx context.Context, n int) ([]float32, error) {
	for {
		rows, k, err := prefillRan(d.m, min(n, d.piece))
		if err != nil {
			return nil, err
		}
		if n -= k; n == 0 {
			return rows[0], nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("draft model's prefill cancelled: %w", errs.ErrInterrupted)
		}
	}
}

// argmaxProb is the id of the largest of logits and its softmax
// probability (0 where a logit is NaN or every one is -Inf).
func argmaxProb(logits []float32) (int, float64) {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	top := float64(logits[best])
	if math.IsNaN(top) || math.IsInf(top, 0) {
		return best, 0
	}
	var sum float64
	for _, l := range logits {
		if math.IsNaN(float64(l)) {
			return best, 0
		}
		sum += math.Exp(float64(l) - top)
	}
	return best, 1 / sum
}
