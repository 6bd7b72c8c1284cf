package generate

// Sequence follows one generated sequence outside Run, for callers that
// drive the model themselves (the server's continuous batching): it
// samples the next token, and turns tokens into final text with Run's
// rules (end-of-sequence ids, stop strings and the held-back text that
// may still become one, the token limit, and a decoder that never splits
// a UTF-8 character). For the same prompt, options and logits, the
// sequence of tokens and events is the one Run produces for row `row`.
type Sequence struct {
	rw     *row
	o      Options
	events []Event
}

// NewSequence starts the sequence of row idx (its sampler's stream) for
// prompt; o.OnEvent and o.Now are not used.
func NewSequence(prompt []int, idx int, o Options) *Sequence {
	s := &Sequence{}
	s.o = o
	s.o.OnEvent = func(e Event) { s.events = append(s.events, e) }
	s.rw = newRow(idx, prompt, o)
	s.rw.res.PromptTokenIDs = append([]int(nil), prompt...)
	s.rw.res.TokenIDs = []int{}
	if o.NewDecoder != nil {
		s.rw.dec = o.NewDecoder(prompt)
	}
	return s
}

// Sample picks the next token from the logits that follow the sequence so
// far (it does not record it: Add does).
func (s *Sequence) Sample(logits []float32) int { return s.SampleDraft(logits, -1, nil) }

// SampleDraft is Sample at a position for which a speculative draft
// proposed draft (-1: none): sample.Sampler.NextDraft, or NextDraftFrom
// where the draft was drawn from q (a draft model's distribution; nil:
// a proposal of probability 1).
func (s *Sequence) SampleDraft(logits []float32, draft int, q []float64) int {
	if q != nil {
		return s.rw.sampler.NextDraftFrom(logits, s.rw.history, s.rw.con, draft, q)
	}
	return s.rw.sampler.NextDraft(logits, s.rw.history, s.rw.con, draft)
}

// Add records generated token id and returns the event it makes (the text
// that became final, and the finish reason when id ends the sequence).
func (s *Sequence) Add(id int) Event {
	if s.rw.con != nil {
		_ = s.rw.con.Advance(id) // an id the grammar refuses leaves it as it was
	}
	s.rw.history = append(s.rw.history, id)
	s.rw.res.TokenIDs = append(s.rw.res.TokenIDs, id)
	s.rw.step(id, s.o)
	return s.take()
}

// Finish ends an unfinished sequence with reason (FinishInterrupted, say)
// and returns the event that releases its held-back text.
func (s *Sequence) Finish(reason string) Event {
	if s.rw.done {
		return Event{Row: s.rw.idx, Token: -1}
	}
	s.rw.finish(s.o, reason, -1)
	return s.take()
}

// History is the prompt and the tokens added so far (the caller must not
// change it): what speculative decoding looks drafts up in (Drafter).
func (s *Sequence) History() []int { return s.rw.history }

// Done reports whether the sequence has finished.
func (s *Sequence) Done() bool { return s.rw.done }

// Result returns the sequence's result so far.
func (s *Sequence) Result() Result { return s.rw.res }

// take returns the event the last step emitted (rows emit one per step).
func (s *Sequence) take() Event {
	e := Event{Row: s.rw.idx, Token: -1}
	if n := len(s.events); n > 0 {
		e = s.events[n-1]
	}
	s.events = s.events[:0]
	return e
}
