// Package generate is the text-generation loop: prefill a batch of prompts,
// then decode one token per row per step, sampling on the host
// (pipeline/sample), until every row stops on an end-of-sequence id, a
// stop string or the token limit, or the context is cancelled.
//
// It depends only on a small Runner interface (compile.State implements it),
// so it is tested without a model. Text comes from per-row stream decoders
// (loader/tokenizer's StreamDecoder), which never split a UTF-8 character;
// stop strings are matched on the decoded text, and text that could still
// become a stop string is held back until it cannot.
package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
)

// Stepper runs a model one step at a time (compile.State).
type Stepper interface {
	// Prefill starts a generation of at most maxNew tokens per prompt and
	// returns each row's logits after its last prompt token.
	Prefill(prompts [][]int, maxNew int) ([][]float32, error)
	// Decode feeds one token per row and returns the logits that follow.
	Decode(next []int) ([][]float32, error)
}

// LogitsReuser is implemented by runners that can return each step's
// logits in one buffer that the next step overwrites (compile.State):
// Run reads a step's logits before the next one, so it asks for that.
type LogitsReuser interface{ ReuseLogits() }

// ArgmaxDecoder is implemented by runners that can take a decode step's
// argmax where its logits are (compile.State: on the device) and return
// the B ids alone: Run asks for them when every row decodes greedily with
// no logits processor (no repetition penalty, no constraint), where the
// logits would only be read for their argmax. Ties and NaNs go as in
// sample.Argmax.
type ArgmaxDecoder interface {
	DecodeArgmax(next []int) ([]int, error)
}

// Chunked is implemented by runners that prefill in pieces over one cache
// (compile.State): Begin queues the left-padded prompts and returns their
// padded length; PrefillChunk runs the next n queued tokens and returns
// the logits after them. Run uses it to check for cancellation and report
// progress between pieces.
type Chunked interface {
	Begin(prompts [][]int, maxNew int) (int, error)
	PrefillChunk(n int) ([][]float32, error)
}

// RopeSwitcher is implemented by runners of a model whose rotary
// embedding turns at other frequencies past a sequence length (LongRoPE:
// lm.Spec.RopeSwitch; 0 for none): Run prefills again a sequence that
// reaches it while decoding, as transformers' generate does.
type RopeSwitcher interface {
	RopeSwitch() int
}

// PendingCounter is implemented by Chunked runners whose PrefillChunk
// may run more than the n tokens asked (compile.State runs a LongRoPE
// model's first piece through its switch: lm.Spec.RopeSwitch): Pending
// reports the queued tokens left.
type PendingCounter interface {
	Pending() int
}

// prefillRan runs c.PrefillChunk(n) and returns its logits and the
// number of tokens it ran: n, or what c's Pending says it took.
func prefillRan(c Chunked, n int) ([][]float32, int, error) {
	p, ok := c.(PendingCounter)
	before := 0
	if ok {
		before = p.Pending()
	}
	logits, err := c.PrefillChunk(n)
	if err != nil || !ok {
		return logits, n, err
	}
	return logits, before - p.Pending(), nil
}

// Extender is implemented by runners that can continue the cache of the
// previous Run with more prompt tokens (compile.State); Options.Cached uses it.
type Extender interface {
	Chunked
	Extend(tokens [][]int, maxNew int) (int, error)
}

// FixedPieces is implemented by Chunked runners on which a new piece
// length is costly, because each one compiles an executable for seconds
// (XLA devices): with Options.PrefillChunk 0 their prompts run in pieces
// of PrefillPiece tokens (the last piece the rest) instead of pieces sized
// by time. Timed pieces follow the clock, so two runs of the same prompt
// could run different piece lengths and compile again; fixed ones give
// every prompt of a length the same shapes. PrefillPiece 0 keeps the
// timed pieces (a backend computing in host memory compiles in
// milliseconds).
type FixedPieces interface {
	PrefillPiece() int
}

// PrefillTarget is how long one prefill piece should take when
// Options.PrefillChunk is 0: cancellation is checked between pieces, so
// Ctrl-C stops a prefill within about a second. A piece pays a fixed
// cost besides its tokens (the executable's, the reads of every weight:
// of every expert a mixture of experts' tokens touch), so the longer the
// pieces the faster a prompt runs; the target is about what a person
// waits for (docs/generation.md has the measurements).
const PrefillTarget = 800 * time.Millisecond

// firstPrefillChunk is the first piece of a timed prefill: small enough to
// be quick on a slow CPU, it measures the rate the next pieces are sized by.
const firstPrefillChunk = 8

// CompileTimer is implemented by runners that compile lazily; Run
// subtracts compile time from the evaluation durations.
type CompileTimer interface {
	CompileDuration() time.Duration
}

// StreamDecoder turns token ids into text incrementally
// (*tokenizer.StreamDecoder).
type StreamDecoder interface {
	Add(id int) string
	Flush() string
}

// Finish reasons.
const (
	FinishStop        = "stop"        // an end-of-sequence token
	FinishLength      = "length"      // MaxNewTokens reached
	FinishStopString  = "stop_string" // a stop string appeared in the text
	FinishInterrupted = "interrupted" // the context was cancelled
)

// Options configure a Run.
type Options struct {
	// MaxNewTokens bounds the tokens generated per prompt (> 0).
	MaxNewTokens int
	// ConfigMaxNewTokens is generation_config.json's max_new_tokens (0:
	// none), which Resolve read: a server whose request gives no limit
	// bounds it by the rest of the context and this, as vLLM does.
	ConfigMaxNewTokens int
	Sampling           sample.Options
	// EOS are the end-of-sequence ids; generating one finishes the row
	// (the id is kept in TokenIDs, its text is not emitted).
	EOS []int
	// Stop strings finish a row when they appear in its text; the text is
	// cut before the stop string.
	Stop []string
	// NewDecoder returns a fresh stream decoder for the row of prompt (so
	// it can take the prompt's last tokens as context and keep the first
	// generated token's leading space); nil leaves Result.Text empty (ids
	// only).
	NewDecoder func(prompt []int) StreamDecoder
	// PrefillChunk is the number of prompt tokens run per prefill piece on
	// a Chunked runner: 0 sizes the pieces by time (PrefillTarget, first a
	// piece of 8 tokens to measure the rate), or on a FixedPieces runner
	// takes its PrefillPiece; < 0 runs the prompt as one piece. Context
	// cancellation is checked between pieces.
	PrefillChunk int
	// OnPrefill, when set, is called after each prefill piece with the
	// prompt tokens done (per row, padding included) of total.
	OnPrefill func(done, total int)
	// Cached is the number of leading tokens of every prompt that are
	// already in the runner's cache from the previous Run (a conversation
	// continued): only the rest is prefilled, through Extender.Extend. The
	// cache holds the previous prompt and every generated token but the
	// last; 0 starts afresh.
	Cached int
	// OnEvent, when set, receives every generated token and every piece of
	// text as soon as it is final (streaming).
	OnEvent func(Event)
	// Now is the clock (tests fix it); nil means time.Now.
	Now func() time.Time
	// Constrain, when set, returns a fresh constraint for each row
	// (constrained decoding: a JSON schema, a tool call): the row samples
	// only the tokens it allows and advances it over each one taken.
	Constrain func() Constraint
	// Speculate, above 0, proposes up to that many tokens a step by
	// prompt lookup and confirms them in one step (speculate.go): for
	// one prompt, on a Speculator that is Rewindable; otherwise it is
	// ignored. Greedy decoding gives the tokens decoding one at a time
	// gives, sampling tokens of the same distribution.
	Speculate int
	// SpeculateNgram is the longest run of last tokens looked up
	// (0: DefaultSpeculateNgram).
	SpeculateNgram int
	// DraftModel, with Speculate above 0, proposes the drafts in place of
	// prompt lookup (draftmodel.go).
	DraftModel *DraftModel
}

// Constraint is a row's constrained decoding state
// (*constrain.Matcher).
type Constraint interface {
	sample.Constraint
	// Advance records the token taken.
	Advance(id int) error
}

// Event is one streaming update of one row.
type Event struct {
	Row int `json:"row"`
	// Token is the generated id, or -1 for an event that only releases
	// held-back text or reports the finish.
	Token int `json:"token"`
	// Text is the text that became final with this event (possibly "").
	Text string `json:"text"`
	// FinishReason is set on the row's last event.
	FinishReason string `json:"finish_reason,omitempty"`
	// StopString is the stop string that ended the row, on its last
	// event when FinishReason is FinishStopString.
	StopString string `json:"stop_string,omitempty"`
}

// Result is the outcome of one prompt.
type Result struct {
	Text           string `json:"text"`
	TokenIDs       []int  `json:"token_ids"`
	PromptTokenIDs []int  `json:"prompt_token_ids"`
	FinishReason   string `json:"finish_reason"`
	// StopString is the stop string that ended the text (FinishStopString).
	StopString string `json:"stop_string,omitempty"`
}

// Metrics follows ollama's api.Metrics (durations in nanoseconds in JSON),
// plus compile duration and time to first token. Counts are tokens
// actually processed or produced, over all rows; durations exclude
// compilation.
type Metrics struct {
	TotalDuration time.Duration `json:"total_duration"`
	// PromptCachedCount is the prompt tokens reused from the cache of the
	// previous Run (Options.Cached), not counted in PromptEvalCount.
	PromptCachedCount  int           `json:"prompt_cached_count,omitempty"`
	LoadDuration       time.Duration `json:"load_duration"`
	CompileDuration    time.Duration `json:"compile_duration"`
	PromptEvalCount    int           `json:"prompt_eval_count"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration"`
	EvalCount          int           `json:"eval_count"`
	EvalDuration       time.Duration `json:"eval_duration"`
	// TTFT is the time from the start of Run to the first generated token
	// (compilation included: it is what a user waits).
	TTFT time.Duration `json:"ttft"`
	// DraftTokens are the tokens speculative decoding proposed, and
	// DraftAccepted those the model confirmed (Options.Speculate).
	DraftTokens   int `json:"draft_tokens,omitempty"`
	DraftAccepted int `json:"draft_accepted,omitempty"`
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Summary renders the metrics as ollama's --verbose does, one per line.
func (m Metrics) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "total duration:       %v\n", m.TotalDuration)
	fmt.Fprintf(&b, "load duration:        %v\n", m.LoadDuration)
	fmt.Fprintf(&b, "compile duration:     %v\n", m.CompileDuration)
	fmt.Fprintf(&b, "prompt eval count:    %d token(s)\n", m.PromptEvalCount)
	fmt.Fprintf(&b, "prompt eval duration: %v\n", m.PromptEvalDuration)
	fmt.Fprintf(&b, "prompt eval rate:     %.2f tokens/s\n", rate(m.PromptEvalCount, m.PromptEvalDuration))
	fmt.Fprintf(&b, "eval count:           %d token(s)\n", m.EvalCount)
	fmt.Fprintf(&b, "eval duration:        %v\n", m.EvalDuration)
	fmt.Fprintf(&b, "eval rate:            %.2f tokens/s\n", rate(m.EvalCount, m.EvalDuration))
	fmt.Fprintf(&b, "time to first token:  %v\n", m.TTFT)
	if m.DraftTokens > 0 {
		fmt.Fprintf(&b, "draft tokens:         %d proposed, %d accepted (%.0f%%)\n", m.DraftTokens, m.DraftAccepted, 100*float64(m.DraftAccepted)/float64(m.DraftTokens))
	}
	return b.String()
}

// row is the state of one prompt during a Run.
type row struct {
	idx     int
	res     Result
	history []int // prompt + generated, for the penalties
	sampler *sample.Sampler
	con     Constraint // nil: unconstrained
	dec     StreamDecoder
	text    string // decoded text so far (including held-back text)
	emitted int    // bytes of text already released
	done    bool
}

// newRow starts row idx of prompt.
func newRow(idx int, prompt []int, o Options) *row {
	rw := &row{idx: idx, history: append([]int(nil), prompt...), sampler: sample.New(o.Sampling, idx)}
	rw.sampler.SetPromptLen(len(prompt))
	if o.Constrain != nil {
		rw.con = o.Constrain()
	}
	return rw
}

// sample picks the row's next token and advances its constraint over it.
func (rw *row) sample(logits []float32) int { return rw.sampleDraft(logits, -1, nil) }

// sampleDraft is sample at a position a speculative draft proposed draft
// for (sample.Sampler.NextDraft; -1: none), drawn from q where q is not
// nil (a draft model's distribution: NextDraftFrom).
func (rw *row) sampleDraft(logits []float32, draft int, q []float64) int {
	var c sample.Constraint
	if rw.con != nil {
		c = rw.con
	}
	var id int
	if q != nil {
		id = rw.sampler.NextDraftFrom(logits, rw.history, c, draft, q)
	} else {
		id = rw.sampler.NextDraft(logits, rw.history, c, draft)
	}
	if rw.con == nil {
		return id
	}
	// The sampler picks only allowed ids; an error would mean a mask
	// with no id in the logits' range, where the pick is the model's.
	_ = rw.con.Advance(id)
	return id
}

// Run generates a continuation for each prompt (token ids). On context
// cancellation it returns what was generated so far, with finish reason
// "interrupted", together with an error wrapping errs.ErrInterrupted.
func Run(ctx context.Context, r Stepper, prompts [][]int, o Options) ([]Result, Metrics, error) {
	var m Metrics
	if o.MaxNewTokens <= 0 {
		return nil, m, errs.Usagef("max new tokens must be positive, got %d", o.MaxNewTokens)
	}
	if err := o.Sampling.Validate(); err != nil {
		return nil, m, errs.Usagef("%v", err)
	}
	for _, s := range o.Stop {
		if s == "" {
			return nil, m, errs.Usagef("empty stop string")
		}
	}
	if lr, ok := r.(LogitsReuser); ok {
		lr.ReuseLogits()
	}
	o.Cached = UsableCache(r, prompts, o.Cached)
	now, compileTime := clocks(r, o)
	rows := make([]*row, len(prompts))
	for i, p := range prompts {
		rw := newRow(i, p, o)
		rw.res.PromptTokenIDs = append([]int(nil), p...)
		rw.res.TokenIDs = []int{}
		if o.NewDecoder != nil {
			rw.dec = o.NewDecoder(p)
		}
		rows[i] = rw
		m.PromptEvalCount += len(p) - o.Cached
		m.PromptCachedCount += o.Cached
	}

	start := now()
	compile0 := compileTime()
	if err := ctx.Err(); err != nil {
		return finishAll(rows, o, FinishInterrupted), m, fmt.Errorf("generation cancelled: %w", errs.ErrInterrupted)
	}
	logits, err := prefill(ctx, r, prompts, o, now, compileTime)
	if errors.Is(err, errs.ErrInterrupted) {
		return finishAll(rows, o, FinishInterrupted), m, err
	}
	if err != nil {
		return nil, m, err
	}
	compile1 := compileTime()
	prefillEnd := now()
	m.PromptEvalDuration = prefillEnd.Sub(start) - (compile1 - compile0)

	// The durations once decoding ends; a second prefill at LongRoPE's
	// switch counts as prompt processing.
	var reprefill time.Duration
	ended := func() {
		end := now()
		compile2 := compileTime()
		m.CompileDuration = compile2 - compile0
		m.EvalDuration = end.Sub(prefillEnd) - (compile2 - compile1) - reprefill
		m.TotalDuration = end.Sub(start)
	}
	if sp, ok := speculates(r, prompts, o); ok {
		interrupted := speculate(ctx, r, sp, rows[0], logits[0], o, &m, now, start)
		if interrupted != nil && !errors.Is(interrupted, errs.ErrInterrupted) {
			return nil, m, interrupted
		}
		ended()
		return []Result{rows[0].res}, m, interrupted
	}
	next := make([]int, len(rows))
	// Plain greedy decoding reads the logits for their argmax alone: a
	// runner that can takes it where they are (ArgmaxDecoder).
	ad, argmaxOnly := r.(ArgmaxDecoder)
	argmaxOnly = argmaxOnly && o.Sampling.ArgmaxOnly() && o.Constrain == nil
	var ids []int // the step's ids when DecodeArgmax gave them, else nil
	var interrupted error
	for step := 0; ; step++ {
		for _, rw := range rows {
			if rw.done {
				continue
			}
			var id int
			if ids != nil {
				id = ids[rw.idx]
			} else {
				id = rw.sample(logits[rw.idx])
			}
			if m.EvalCount == 0 {
				m.TTFT = now().Sub(start)
			}
			m.EvalCount++
			rw.history = append(rw.history, id)
			rw.res.TokenIDs = append(rw.res.TokenIDs, id)
			next[rw.idx] = id
			rw.step(id, o)
		}
		active := false
		for _, rw := range rows {
			active = active || !rw.done
		}
		if !active {
			break
		}
		if err := ctx.Err(); err != nil {
			interrupted = fmt.Errorf("generation cancelled: %w", errs.ErrInterrupted)
			finishAll(rows, o, FinishInterrupted)
			break
		}
		if again := crossesSwitch(r, rows); again != nil {
			// A row's next token is the first past LongRoPE's switch
			// while its cache holds keys turned at the short frequencies:
			// transformers' generate drops the cache there and runs the
			// whole sequence again (Phi3ForCausalLM's
			// prepare_inputs_for_generation), which turns every key at
			// the long ones. So does Run, for every row.
			ro := o
			// No progress display in the middle of the answer; the cache
			// is sized for the tokens left to generate.
			ro.Cached, ro.OnPrefill = 0, nil
			ro.MaxNewTokens = 1
			for _, rw := range rows {
				if !rw.done { // a finished row has fewer tokens and needs none: the running rows' bound holds for it
					ro.MaxNewTokens = max(ro.MaxNewTokens, o.MaxNewTokens-len(rw.res.TokenIDs))
				}
			}
			t0, c0 := now(), compileTime()
			logits, err = prefill(ctx, r, again, ro, now, compileTime)
			spent := now().Sub(t0) - (compileTime() - c0) // prompt processing, not decoding
			m.PromptEvalDuration += spent
			reprefill += spent
			for _, seq := range again {
				m.PromptEvalCount += len(seq)
			}
			if err != nil {
				if errors.Is(err, errs.ErrInterrupted) {
					interrupted = err
					finishAll(rows, o, FinishInterrupted)
					break
				}
				return nil, m, err
			}
			ids = nil
			continue
		}
		if argmaxOnly {
			if ids, err = ad.DecodeArgmax(next); err != nil {
				return nil, m, err
			}
		} else if logits, err = r.Decode(next); err != nil {
			return nil, m, err
		}
	}
	ended()
	out := make([]Result, len(rows))
	for i, rw := range rows {
		out[i] = rw.res
	}
	return out, m, interrupted
}

// UsableCache is the number of cached prompt tokens a Run may continue
// from: cached, or 0 when r's model switches its rotary frequencies
// (RopeSwitcher) and a prompt runs past the switch while the cache holds
// no more than it (keys turned at the short frequencies, which the
// prompt's one forward in transformers would turn at the long ones): the
// prompts are then prefilled whole. Run and Prefill apply it to
// Options.Cached.
func UsableCache(r Stepper, prompts [][]int, cached int) int {
	rs, ok := r.(RopeSwitcher)
	if !ok || cached == 0 {
		return cached
	}
	sw := rs.RopeSwitch()
	for _, p := range prompts {
		if sw > 0 && cached <= sw && len(p) > sw {
			return 0
		}
	}
	return cached
}

// crossesSwitch returns every row's sequence so far (prompt, generated
// tokens and the token about to be fed) when r's model switches its
// rotary frequencies (RopeSwitcher) and an unfinished row's next token is
// the first past the switch after a prompt that was not (its cached keys
// turned at the short frequencies), else nil.
func crossesSwitch(r Stepper, rows []*row) [][]int {
	rs, ok := r.(RopeSwitcher)
	if !ok {
		return nil
	}
	sw := rs.RopeSwitch()
	if sw <= 0 {
		return nil
	}
	cross := false
	for _, rw := range rows {
		n := len(rw.res.PromptTokenIDs) + len(rw.res.TokenIDs) // with the token about to be fed
		cross = cross || (!rw.done && n == sw+1 && len(rw.res.PromptTokenIDs) <= sw)
	}
	if !cross {
		return nil
	}
	seqs := make([][]int, len(rows))
	for i, rw := range rows {
		seqs[i] = append(append([]int(nil), rw.res.PromptTokenIDs...), rw.res.TokenIDs...)
	}
	return seqs
}

// Prefill runs only the prefill of a Run: the prompts (after o.Cached
// tokens) in pieces on a Chunked runner, sized and reported as
// o.PrefillChunk, o.OnPrefill and o.Now say, checking ctx between pieces
// (an error wrapping errs.ErrInterrupted when it is cancelled); else in
// one Prefill call. It returns each row's logits after its prompt. bench
// times prefill through it, so Ctrl-C stops a benchmark too.
func Prefill(ctx context.Context, r Stepper, prompts [][]int, o Options) ([][]float32, error) {
	o.Cached = UsableCache(r, prompts, o.Cached)
	now, compileTime := clocks(r, o)
	return prefill(ctx, r, prompts, o, now, compileTime)
}

// prefill runs the prompts: in pieces on a Chunked runner (checking ctx
// between them), else in one Prefill call.
func prefill(ctx context.Context, r Stepper, prompts [][]int, o Options, now func() time.Time, compileTime func() time.Duration) ([][]float32, error) {
	c, chunked := r.(Chunked)
	if o.Cached > 0 {
		ext, ok := r.(Extender)
		if !ok {
			return nil, fmt.Errorf("the runner cannot continue its cache")
		}
		rest := make([][]int, len(prompts))
		for i, p := range prompts {
			if o.Cached >= len(p) {
				return nil, fmt.Errorf("prompt %d: %d cached tokens leave none to prefill", i, o.Cached)
			}
			rest[i] = p[o.Cached:]
		}
		total, err := ext.Extend(rest, o.MaxNewTokens)
		if err != nil {
			return nil, err
		}
		return prefillChunks(ctx, ext, total, o, now, compileTime)
	}
	if !chunked {
		return r.Prefill(prompts, o.MaxNewTokens)
	}
	total, err := c.Begin(prompts, o.MaxNewTokens)
	if err != nil {
		return nil, err
	}
	return prefillChunks(ctx, c, total, o, now, compileTime)
}

// prefillChunks runs total queued tokens in pieces. With PrefillChunk 0 on
// a FixedPieces runner every piece has its PrefillPiece tokens; elsewhere
// the first piece has 8 tokens and each next piece is the largest power of
// two that the last piece's rate (compilation excluded) runs in
// PrefillTarget, or all the rest when that fits (nextChunk).
func prefillChunks(ctx context.Context, c Chunked, total int, o Options, now func() time.Time, compileTime func() time.Duration) ([][]float32, error) {
	chunk, timed := o.PrefillChunk, false
	switch {
	case chunk < 0:
		chunk = total
	case chunk == 0:
		if f, ok := c.(FixedPieces); ok && f.PrefillPiece() > 0 {
			chunk = f.PrefillPiece()
		} else {
			chunk, timed = firstPrefillChunk, true
		}
	}
	var logits [][]float32
	for done := 0; done < total; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("generation cancelled during prefill (%d of %d prompt tokens): %w", done, total, errs.ErrInterrupted)
		}
		n := min(chunk, total-done)
		t0, c0 := now(), compileTime()
		var err error
		if logits, n, err = prefillRan(c, n); err != nil {
			return nil, err
		}
		done += n
		if o.OnPrefill != nil {
			o.OnPrefill(done, total)
		}
		if timed {
			chunk = nextChunk(now().Sub(t0)-(compileTime()-c0), n, total-done)
		}
	}
	return logits, nil
}

// nextChunk sizes the next prefill piece from the last one (n tokens in
// took): all the rest when it fits in PrefillTarget at that rate, else the
// largest power of two that does, but never below 8 tokens: every call
// reads every weight and pays the executable's fixed cost, so tiny pieces
// cost far more per token than they gain in reaction time. A piece's cost
// is that fixed part plus its tokens', so a longer piece runs at least at
// the last one's rate and the piece fits in PrefillTarget; the pieces grow
// while the fixed part is a large share of them.
func nextChunk(took time.Duration, n, rest int) int {
	if took <= 0 {
		return rest
	}
	fit := int(int64(PrefillTarget) * int64(n) / int64(took))
	if fit >= rest {
		return rest
	}
	k := minPrefillChunk
	for k*2 <= fit {
		k *= 2
	}
	return min(k, rest)
}

// minPrefillChunk is the smallest timed prefill piece.
const minPrefillChunk = 8

// step handles one new token of a row: end of sequence, text, stop
// strings, length.
func (rw *row) step(id int, o Options) {
	if slices.Contains(o.EOS, id) {
		rw.finish(o, FinishStop, id)
		return
	}
	if rw.dec != nil {
		rw.text += rw.dec.Add(id)
	}
	if cut, stop, ok := rw.findStop(o.Stop); ok {
		rw.text, rw.res.StopString = rw.text[:cut], stop
		rw.finish(o, FinishStopString, id)
		return
	}
	if len(rw.res.TokenIDs) >= o.MaxNewTokens {
		rw.finish(o, FinishLength, id)
		return
	}
	safe := len(rw.text) - heldBack(rw.text, o.Stop)
	rw.release(o, id, safe, "")
}

// findStop returns where the earliest stop string starts in the text not
// yet released (plus the overlap a stop string may have with it), and
// which it is.
func (rw *row) findStop(stops []string) (int, string, bool) {
	maxStop := 0
	for _, s := range stops {
		maxStop = max(maxStop, len(s))
	}
	from := max(0, rw.emitted-maxStop+1)
	best, which := -1, ""
	for _, s := range stops {
		if i := strings.Index(rw.text[from:], s); i >= 0 && (best < 0 || from+i < best) {
			best, which = from+i, s
		}
	}
	return best, which, best >= 0
}

// heldBack is the length of the longest suffix of text that is a proper
// prefix of a stop string: text that may still turn into a stop string.
func heldBack(text string, stops []string) int {
	n := 0
	for _, s := range stops {
		for k := min(len(s)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, s[:k]) {
				n = k
				break
			}
		}
	}
	return n
}

// release emits the text up to byte `upto` as one event.
func (rw *row) release(o Options, id, upto int, reason string) {
	text := ""
	if upto > rw.emitted {
		text = rw.text[rw.emitted:upto]
		rw.emitted = upto
	}
	if o.OnEvent != nil {
		ev := Event{Row: rw.idx, Token: id, Text: text, FinishReason: reason}
		if reason == FinishStopString {
			ev.StopString = rw.res.StopString
		}
		o.OnEvent(ev)
	}
}

// finish ends a row: the decoder's held-back bytes are flushed (unless a
// stop string cut the text) and the rest of the text is released.
func (rw *row) finish(o Options, reason string, id int) {
	if rw.dec != nil && reason != FinishStopString {
		rw.text += rw.dec.Flush()
		if cut, stop, ok := rw.findStop(o.Stop); ok {
			rw.text, rw.res.StopString = rw.text[:cut], stop
			reason = FinishStopString
		}
	}
	rw.done = true
	rw.res.FinishReason = reason
	rw.res.Text = rw.text
	rw.release(o, id, len(rw.text), reason)
}

// finishAll finishes every unfinished row with reason.
func finishAll(rows []*row, o Options, reason string) []Result {
	out := make([]Result, len(rows))
	for i, rw := range rows {
		if !rw.done {
			rw.finish(o, reason, -1)
		}
		out[i] = rw.res
	}
	return out
}

// clocks returns the clock of o (time.Now when unset) and how long r (and
// o's draft model) has spent compiling so far (0 when r does not say).
func clocks(r Stepper, o Options) (now func() time.Time, compileTime func() time.Duration) {
	now = o.Now
	if now == nil {
		now = time.Now
	}
	return now, func() time.Duration {
		var d time.Duration
		if ct, ok := r.(CompileTimer); ok {
			d = ct.CompileDuration()
		}
		if o.DraftModel != nil && o.Speculate > 0 {
			d += o.DraftModel.CompileDuration()
		}
		return d
	}
}
