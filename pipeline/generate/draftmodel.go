package generate

import (
	"fmt"
	"math"
	"time"
)

// Speculative decoding with a draft model: a smaller language model of
// the same vocabulary (Qwen3-0.6B for Qwen3-8B, Llama 3.2 1B for Llama
// 3.1 8B) proposes the next tokens, greedily, one cheap step each, and
// the model confirms them in one step as it confirms prompt lookup's
// (speculate). The draft's tokens are its argmax, so each is a proposal
// of probability 1 and sample.Sampler.NextDraft's rule keeps the
// model's own distribution: greedy decoding gives the tokens decoding
// one at a time gives, sampling tokens of the same distribution, whatever
// the draft model proposes. A draft stops at the first token the draft
// model is less sure of than DraftModel's PMin (llama.cpp's p_min), so a
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
}

// DefaultDraftPMin is DraftModel's default PMin: llama.cpp's (common
// params' speculative p_min).
const DefaultDraftPMin = 0.75

// maxCatchUp is the most tokens a draft model is fed in one DecodeMany
// step to catch up with the text (1 or 2 after a draft: the model's pick
// after it, and the draft's last token when the draft was confirmed
// whole; up to maxSitOut+1 after steps sat out); more (a conversation's
// next turn) are prefilled as a prompt continued (Extend).
const maxCatchUp = maxSitOut + 1

// maxSitOut is the most steps a draft model sits out after steps that
// confirmed nothing.
const maxSitOut = 8

// DraftModel proposes speculative drafts with a draft model
// (Options.DraftModel). It keeps the tokens its runner's cache holds, so
// a conversation's next Run continues it (a common prefix is kept, the
// rest taken back). It is used by one Run at a time.
type DraftModel struct {
	m DraftStepper
	// PMin ends a draft before a token the draft model gives less than
	// this probability (0: every draft is as long as asked).
	PMin float64
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
	// confirms a token); wait the steps it still sits out.
	cool, wait int
}

// NewDraftModel proposes drafts with m, a draft model of positions
// positions whose token ids mean what the model's do below vocab (the
// smaller of the two models' vocabulary sizes), with PMin
// DefaultDraftPMin.
func NewDraftModel(m DraftStepper, vocab, positions int) *DraftModel {
	return &DraftModel{m: m, PMin: DefaultDraftPMin, vocab: vocab, positions: positions}
}

// CompileDuration is the draft model's time compiling (CompileTimer), so
// a Run counts it as it counts the model's.
func (d *DraftModel) CompileDuration() time.Duration {
	if ct, ok := d.m.(CompileTimer); ok {
		return ct.CompileDuration()
	}
	return 0
}

// proposer proposes speculative drafts for one Run: prompt lookup
// (Drafter) or a draft model (DraftModel).
type proposer interface {
	// propose proposes up to limit tokens to follow history, the
	// sequence so far (nil: none this step).
	propose(history []int, limit int) ([]int, error)
	// done records how a draft of n tokens fared: kept of them were
	// confirmed.
	done(n, kept int)
}

type lookupProposer struct{ *Drafter }

func (l lookupProposer) propose(history []int, limit int) ([]int, error) {
	return l.Draft(history, limit), nil
}

func (l lookupProposer) done(n, kept int) { l.Done(n, kept) }

// modelProposer is a DraftModel in one Run.
type modelProposer struct{ *DraftModel }

// start readies d for a Run that may generate maxNew more tokens with
// drafts of up to draft tokens.
func (d *DraftModel) start(maxNew, draft int) proposer {
	d.maxNew = maxNew + draft
	d.cool, d.wait = 0, 0
	return modelProposer{d}
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

func (p modelProposer) propose(history []int, limit int) ([]int, error) {
	return p.DraftModel.draft(history, limit)
}

// Propose proposes up to limit tokens to follow history, the sequence so
// far, with its cache sized for maxNew more tokens (a server's sequence
// running alone: serve's scheduler); nil for none. After an error the
// next proposal starts afresh.
func (d *DraftModel) Propose(history []int, limit, maxNew int) ([]int, error) {
	d.maxNew = maxNew
	return d.draft(history, limit)
}

// draft is Propose with the cache sized by d.maxNew.
func (d *DraftModel) draft(history []int, limit int) ([]int, error) {
	if limit <= 0 {
		return nil, nil
	}
	if d.wait > 0 {
		d.wait--
		return nil, nil
	}
	logits, err := d.catchUp(history)
	if err != nil {
		d.fed = nil // the cache's content is unknown: prefill afresh next time
		return nil, fmt.Errorf("draft model: %w", err)
	}
	if logits == nil {
		return nil, nil
	}
	var draft []int
	for {
		id, p := argmaxProb(logits)
		if id >= d.vocab || p < d.PMin {
			if len(draft) == 0 {
				d.sitOut()
			}
			return draft, nil
		}
		draft = append(draft, id)
		if len(draft) == limit || d.m.Room() < 1 {
			return draft, nil
		}
		rows, err := d.m.Decode([]int{id})
		if err != nil {
			d.fed = nil
			return nil, fmt.Errorf("draft model: %w", err)
		}
		d.fed = append(d.fed, id)
		logits = rows[0]
	}
}

// catchUp brings the draft model's cache to history and returns its
// logits after history's last token; nil where history holds an id the
// draft model does not have or fills its positions (it proposes nothing
// then).
func (d *DraftModel) catchUp(history []int) ([]float32, error) {
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
		rows, err := d.m.Prefill([][]int{history}, budget)
		if err != nil {
			return nil, err
		}
		d.fed = append([]int(nil), history...)
		return rows[0], nil
	}
	if err := d.m.Rewind(len(d.fed) - p); err != nil {
		return nil, err
	}
	d.fed = d.fed[:p]
	var logits []float32
	switch {
	case len(rest) == 1 && d.m.Room() >= 1:
		rows, err := d.m.Decode(rest)
		if err != nil {
			return nil, err
		}
		logits = rows[0]
	case len(rest) <= maxCatchUp && len(rest) <= d.m.Room():
		rows, err := d.m.DecodeMany(rest)
		if err != nil {
			return nil, err
		}
		logits = rows[len(rows)-1]
	default:
		n, err := d.m.Extend([][]int{rest}, budget)
		if err != nil {
			return nil, err
		}
		rows, err := d.m.PrefillChunk(n)
		if err != nil {
			return nil, err
		}
		logits = rows[0]
	}
	d.fed = append(d.fed, rest...)
	return logits, nil
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
