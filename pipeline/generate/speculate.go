package generate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// Speculative decoding by prompt lookup: the tokens that followed the
// latest earlier occurrence of the sequence's last few tokens (in the
// prompt or the answer so far) are proposed as the next ones, fed to the
// model in one step with the last sampled token, and kept as long as
// they are what the model picks itself; the first one it does not pick
// is replaced by its own pick, and the cache is taken back over the
// rest. Where decoding streams the weights once a step, as on a CPU at
// one row, a step over a few tokens costs about what a step over one
// does, so every proposed token the model confirms is nearly free: text
// that repeats its input (summaries, edits of code, answers quoting
// their context) or itself decodes faster. Each position is sampled
// with the history before it (penalties and constraints included), at a
// proposed token by sample.Sampler.NextDraft: greedy decoding gives the
// tokens decoding one at a time gives, sampling tokens drawn from the
// same distribution.

// Speculator is implemented by runners whose one row can be fed several
// tokens in one step, with the logits after each, and taken back over
// the last of them (compile.State).
type Speculator interface {
	// Speculates reports whether the model and backend can
	// (compile.Runner.Speculates).
	Speculates() bool
	// Room is how many more tokens the row may be fed.
	Room() int
	// DecodeMany feeds tokens and returns the logits after each.
	DecodeMany(tokens []int) ([][]float32, error)
	// Rewind forgets the last n tokens fed; speculation takes back only
	// tokens of the last DecodeMany, which is all a model with recurrent
	// state can take back (compile.State replays the rest).
	Rewind(n int) error
}

// FixedSteps is implemented by Speculators on which each new step length
// costs an executable kept for good (compile.State: on an XLA device,
// where each compiles for seconds, and in eager mode, whose layer
// programs keep a bounded number): FixedSteps true makes every
// speculative step feed 1+Options.Speculate tokens.
type FixedSteps interface {
	FixedSteps() bool
}

// DefaultSpeculateNgram is Options.SpeculateNgram's default: the longest
// run of last tokens looked up (transformers' prompt lookup matches up to
// 2 by default; 3 proposes less often and more surely).
const DefaultSpeculateNgram = 3

// Drafter proposes a sequence's next tokens by prompt lookup
// (lookupDraft) and schedules the draft's length by its luck, as
// transformers' assisted generation schedules it: two more after a draft
// confirmed whole, one fewer after one cut short (at least 1, at most
// the most asked); and after a one-token draft that failed, the next 1,
// 2, 4, … 16 steps propose none. A text that does not repeat itself then
// costs few steps of two tokens. Run's speculative decoding and the
// server's use it.
type Drafter struct {
	max, ngram       int
	most, cool, wait int
}

// NewDrafter proposes up to max tokens a step, looking up runs of up to
// ngram last tokens (0: DefaultSpeculateNgram).
func NewDrafter(max, ngram int) *Drafter {
	if ngram <= 0 {
		ngram = DefaultSpeculateNgram
	}
	return &Drafter{max: max, ngram: ngram, most: max}
}

// Draft proposes up to limit tokens (fewer as the schedule says) to
// follow history, the sequence so far; nil for none this step.
func (d *Drafter) Draft(history []int, limit int) []int {
	if d.wait > 0 {
		d.wait--
		return nil
	}
	return lookupDraft(history, d.ngram, min(d.most, limit))
}

// Done records how a draft of n tokens fared: kept of them were
// confirmed before the model picked another (or the text ended).
func (d *Drafter) Done(n, kept int) {
	switch {
	case kept == n:
		d.most, d.cool = min(d.most+2, d.max), 0
	case n == 1:
		d.cool = min(max(2*d.cool, 1), 16)
		d.wait = d.cool
	default:
		d.most = max(d.most-1, 1)
	}
}

// lookupDraft proposes k tokens to follow history: those that followed
// the latest earlier occurrence of its last n tokens, for the longest n
// from maxN down to 1 that has one (nil when none does). An occurrence
// fewer than k tokens from the end is a loop the text is in, and the
// draft goes round it: token i of the draft is the one at p+n+i of the
// history with the draft appended.
func lookupDraft(history []int, maxN, k int) []int {
	if k <= 0 {
		return nil
	}
	l := len(history)
	for n := min(maxN, l-1); n >= 1; n-- {
		suffix := history[l-n:]
		for p := l - n - 1; p >= 0; p-- {
			if !slices.Equal(history[p:p+n], suffix) {
				continue
			}
			draft := make([]int, k)
			for i := range draft {
				if at := p + n + i; at < l {
					draft[i] = history[at]
				} else {
					draft[i] = draft[at-l]
				}
			}
			return draft
		}
	}
	return nil
}

// speculates says whether a Run of prompts with o decodes speculatively
// on r, and with which Speculator: o.Speculate above 0, one prompt, a
// runner that can, and no LongRoPE switch the generation may cross.
func speculates(r Stepper, prompts [][]int, o Options) (Speculator, bool) {
	if o.Speculate <= 0 || len(prompts) != 1 {
		return nil, false
	}
	sp, ok := r.(Speculator)
	if !ok || !sp.Speculates() {
		return nil, false
	}
	if rs, ok := r.(RopeSwitcher); ok {
		// A generation that may cross LongRoPE's switch, a speculative
		// step's padding included, decodes token by token, where Run
		// prefills it again at the crossing.
		if sw := rs.RopeSwitch(); sw > 0 && len(prompts[0]) <= sw && len(prompts[0])+o.MaxNewTokens+o.Speculate > sw {
			return nil, false
		}
	}
	return sp, true
}

// speculate decodes rw, whose first logits are logits, speculatively on
// sp (Speculator of r) until it finishes, counting into m from start. On
// context cancellation it finishes the row as interrupted and returns an
// error wrapping errs.ErrInterrupted.
func speculate(ctx context.Context, r Stepper, sp Speculator, rw *row, logits []float32, o Options, m *Metrics, now func() time.Time, start time.Time) error {
	emit := func(id int) {
		if m.EvalCount == 0 {
			m.TTFT = now().Sub(start)
		}
		m.EvalCount++
		rw.history = append(rw.history, id)
		rw.res.TokenIDs = append(rw.res.TokenIDs, id)
		rw.step(id, o)
	}
	var drafter proposer = lookupProposer{NewDrafter(o.Speculate, o.SpeculateNgram)}
	if o.DraftModel != nil {
		drafter = o.DraftModel.start(o.MaxNewTokens, o.Speculate, o.Sampling, len(rw.res.PromptTokenIDs))
	}
	id := rw.sample(logits)
	emit(id)
	// Where each new step length costs an executable (FixedSteps: an XLA
	// device, eager mode), every speculative step feeds 1+o.Speculate
	// tokens, the draft padded with copies of its last token, whose
	// logits are not read.
	fs, fixed := r.(FixedSteps)
	fixed = fixed && fs.FixedSteps()
	// One token at a time, by the device's argmax where plain greedy
	// decoding may (as Run decodes).
	ad, argmaxOnly := r.(ArgmaxDecoder)
	argmaxOnly = argmaxOnly && o.Sampling.ArgmaxOnly() && o.Constrain == nil
	decodeOne := func(prev int) (int, error) {
		if argmaxOnly {
			ids, err := ad.DecodeArgmax([]int{prev})
			if err != nil {
				return 0, err
			}
			return ids[0], nil
		}
		l, err := r.Decode([]int{prev})
		if err != nil {
			return 0, err
		}
		return rw.sample(l[0]), nil
	}
	for !rw.done {
		if err := ctx.Err(); err != nil {
			finishAll([]*row{rw}, o, FinishInterrupted)
			return fmt.Errorf("generation cancelled: %w", errs.ErrInterrupted)
		}
		// The bonus token (the model's pick after the last confirmed
		// one) counts against the budget: propose at most one fewer than
		// the tokens left, and what the cache has room for; near the
		// cache's end on a device, none (no step of another length).
		var draft []int
		var qs [][]float64 // the drafts' distributions (nil: each of probability 1)
		if !fixed || sp.Room() >= 1+o.Speculate {
			var err error
			if draft, qs, err = drafter.propose(ctx, rw.history, min(o.Speculate, sp.Room()-1, o.MaxNewTokens-len(rw.res.TokenIDs)-1)); err != nil {
				finishAll([]*row{rw}, o, FinishInterrupted)
				return fmt.Errorf("generation cancelled: %w", errs.ErrInterrupted)
			}
		}
		if len(draft) == 0 {
			next, err := decodeOne(id)
			if err != nil {
				return err
			}
			id = next
			emit(id)
			continue
		}
		feed := append([]int{id}, draft...)
		if fixed {
			for len(feed) < 1+o.Speculate {
				feed = append(feed, draft[len(draft)-1])
			}
		}
		rows, err := sp.DecodeMany(feed)
		if err != nil {
			return err
		}
		m.DraftTokens += len(draft)
		// kept are the draft tokens confirmed and kept in the cache;
		// confirmed counts also one that ended the text (its own pick,
		// the last token, is not in the cache).
		kept, confirmed := 0, 0
		for i, l := range rows[:len(draft)+1] {
			if i < len(draft) {
				var q []float64
				if qs != nil {
					q = qs[i]
				}
				id = rw.sampleDraft(l, draft[i], q)
			} else {
				id = rw.sample(l)
			}
			emit(id)
			if i < len(draft) && id == draft[i] {
				confirmed++
			}
			if rw.done || i == len(draft) || id != draft[i] {
				break
			}
			kept++
		}
		m.DraftAccepted += confirmed
		drafter.done(len(draft), kept)
		// The cache holds the token before the draft, the draft and any
		// padding; keep that token and the confirmed part.
		if err := sp.Rewind(len(feed) - 1 - kept); err != nil {
			return err
		}
	}
	return nil
}
