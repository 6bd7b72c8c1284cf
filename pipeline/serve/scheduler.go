package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// Errors of Submit.
var (
	// ErrQueueFull: every slot is busy and the waiting queue is full
	// (HTTP 429).
	ErrQueueFull = errors.New("the server is at capacity: every sequence slot is busy and the queue is full")
	// ErrClosed: the scheduler is shutting down (HTTP 503).
	ErrClosed = errors.New("the server is shutting down")
)

// MaxNewTokens bounds a request's tokens (its stream buffers them all).
const MaxNewTokens = 1 << 20

// Finish reasons beyond generate's.
const (
	// FinishCancelled: the client went away (its context ended).
	FinishCancelled = "cancelled"
	// FinishError: the engine failed; Event.Err says why.
	FinishError = "error"
)

// Request is one sequence to generate.
type Request struct {
	// Prompt is the prompt's token ids.
	Prompt []int
	// Gen are the sequence's settings: MaxNewTokens, Sampling, EOS (empty
	// to ignore end-of-sequence ids), Stop and NewDecoder.
	Gen generate.Options
	// Index picks the sampler's stream (generate's row): the n choices of
	// one request differ by it.
	Index int
	// Logprobs < 0 reports no log-probabilities; 0 reports the chosen
	// token's, k > 0 also the k most likely tokens'.
	Logprobs int
}

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	Token   int
	Logprob float64
}

// Event is one update of a stream: a generated token and the text that
// became final with it; the last event carries FinishReason.
type Event struct {
	// Token is the generated id, or -1 for an event with no token (the
	// finish of a cancelled or failed sequence).
	Token       int
	Text        string
	Logprob     float64
	TopLogprobs []TokenLogprob
	// FinishReason is set on the last event: generate's "stop", "length",
	// "stop_string", or FinishCancelled, FinishError.
	FinishReason string
	// Err is the engine's error on a FinishError event.
	Err error
	// StopString is the stop string that ended the text ("stop_string").
	StopString string
}

// Stream is a submitted request's output. Events delivers every event in
// order and is closed after the last one; it is buffered for the whole
// sequence, so the scheduler never waits for a slow reader.
type Stream struct {
	Events <-chan Event
	// PromptTokens is the prompt's length.
	PromptTokens int

	mu         sync.Mutex
	completion int
	submitted  time.Time
	firstToken time.Time
}

// CompletionTokens is the number of tokens generated so far.
func (st *Stream) CompletionTokens() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.completion
}

// TTFT is the time from Submit to the first token (0 before it).
func (st *Stream) TTFT() time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.firstToken.IsZero() {
		return 0
	}
	return st.firstToken.Sub(st.submitted)
}

// Config configures a Scheduler.
type Config struct {
	// MaxQueue bounds the requests waiting for a slot; beyond it Submit
	// answers ErrQueueFull. 0 means 4 x the engine's slots.
	MaxQueue int
	// Observer receives the scheduler's measurements (Metrics); nil
	// discards them.
	Observer Observer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PrefixCache is the number of finished prompts whose caches are kept
	// so that a later prompt sharing a prefix with one of them (a chat's
	// system prompt) starts from it (Slots); 0 keeps none.
	PrefixCache int
	// Speculate, above 0, decodes a sequence that runs alone
	// by prompt lookup, up to that many proposed tokens a step
	// (speculateStep), where the engine can (Speculator); SpeculateNgram
	// is the longest run of last tokens looked up (0: the default).
	Speculate, SpeculateNgram int
	// SpeculateFixed makes every speculative step feed 1+Speculate
	// tokens (the draft padded): on a device where each new step length
	// compiles for seconds.
	SpeculateFixed bool
	// DraftModel, with Speculate above 0, proposes the drafts in place of
	// prompt lookup: one draft model for the sequence running alone,
	// whichever it is (its cache follows the sequence, a new one
	// prefilled).
	DraftModel *generate.DraftModel
}

// Observer receives measurements as the scheduler runs (Metrics
// implements it). Calls come from the scheduler's goroutine and Submit.
type Observer interface {
	// Queue reports the waiting requests and the running sequences.
	Queue(waiting, running int)
	// Step reports a decode step: sequences decoded, slots, duration.
	Step(running, slots int, d time.Duration)
	// Prefill reports a prefill piece's duration.
	Prefill(d time.Duration)
	// PrefixReused reports the prompt tokens a prefill took from the
	// prefix cache (Slots).
	PrefixReused(tokens int)
	// FirstToken reports a sequence's time to first token.
	FirstToken(d time.Duration)
	// NextToken reports the time between two tokens of a sequence.
	NextToken(d time.Duration)
	// Drafted reports a speculative step: the tokens proposed and those
	// the model confirmed.
	Drafted(proposed, accepted int)
	// DraftFailed reports a draft model's error (Config.DraftModel): the
	// sequence decoded one token that step.
	DraftFailed(err error)
	// Finished reports a sequence's end: reason, prompt and generated
	// tokens.
	Finished(reason string, prompt, completion int)
	// Rejected reports a request refused by Submit (queue full, closed).
	Rejected(err error)
}

// job is a request in the scheduler.
type job struct {
	ctx    context.Context
	req    Request
	st     *Stream
	events chan Event
	seq    *generate.Sequence
	handle int // its sequence in Slots, once inserted
	next   int // the token to feed at the next decode step
	last   time.Time
	// drafter proposes its tokens while it speculates (made at its first
	// speculative step).
	drafter *generate.Drafter
	// again, when set, is what the sequence holds (prompt, generated
	// tokens and next), to be prefilled again: it crossed the engine's
	// LongRoPE switch while decoding (requeueCrossing).
	again []int
	// short reports that the sequence's cached keys turned at LongRoPE's
	// short frequencies (its last prefill was not past the switch).
	short bool
}

// prompt is what a prefill of the job runs: its prompt, or everything
// it holds when it is prefilled again.
func (j *job) prompt() []int {
	if j.again != nil {
		return j.again
	}
	return j.req.Prompt
}

// unrun is the last event of a job ended while it waits or prefills: a
// new request has no text to release, a sequence waiting to be
// prefilled again (requeueCrossing) releases its held-back text.
func unrun(j *job, reason string) Event {
	if j.seq != nil {
		return finishEvent(j, reason)
	}
	return Event{Token: -1}
}

// Scheduler runs requests on an Engine by continuous batching. Run drives
// it; Submit and Shutdown may be called from any goroutine.
type Scheduler struct {
	sl    *Slots
	cfg   Config
	now   func() time.Time
	obs   Observer
	slots int

	mu      sync.Mutex
	waiting []*job
	embeds  []*embedJob // embedding requests, oldest first
	closed  bool
	wake    chan struct{}
	idle    chan struct{} // closed and replaced when the scheduler has nothing to do
	active  int           // running + prefilling, under mu (for Queue reports)
	abort   bool          // Shutdown's deadline passed: end everything

	// Owned by Run's goroutine.
	running []*job
	pre     []*job // the prompts prefilling together; nil for one cancelled since
	preRun  *Prefilling
	// drafting is the sequence the draft model last proposed for
	// (Config.DraftModel).
	drafting *job
}

// New returns a scheduler over e; call Run to start it.
func New(e Engine, cfg Config) *Scheduler {
	s := &Scheduler{sl: NewSlots(e, cfg.PrefixCache), cfg: cfg, now: cfg.Now, obs: cfg.Observer, slots: e.Slots(),
		wake: make(chan struct{}, 1), idle: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.cfg.MaxQueue <= 0 {
		s.cfg.MaxQueue = 4 * s.slots
	}
	return s
}

// Submit queues a request. The stream ends early, with FinishCancelled,
// when ctx ends (the client disconnected). It returns ErrQueueFull when
// the queue is full and ErrClosed after Shutdown.
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Stream, error) {
	if len(r.Prompt) == 0 {
		return nil, fmt.Errorf("empty prompt")
	}
	if r.Gen.MaxNewTokens <= 0 || r.Gen.MaxNewTokens > MaxNewTokens {
		return nil, fmt.Errorf("max new tokens must be 1 to %d, got %d", MaxNewTokens, r.Gen.MaxNewTokens)
	}
	events := make(chan Event, r.Gen.MaxNewTokens+2)
	st := &Stream{Events: events, PromptTokens: len(r.Prompt), submitted: s.now()}
	j := &job{ctx: ctx, req: r, st: st, events: events, handle: -1}
	s.mu.Lock()
	if err := s.refusal(); err != nil {
		s.mu.Unlock()
		s.obs.Rejected(err)
		return nil, err
	}
	s.waiting = append(s.waiting, j)
	s.obs.Queue(s.queued(), s.active)
	s.mu.Unlock()
	context.AfterFunc(ctx, s.poke)
	s.poke()
	return st, nil
}

// refusal says, under mu, why a request cannot be queued: ErrClosed after
// Shutdown, ErrQueueFull when MaxQueue requests (completions and
// embeddings) already wait; nil when it can.
func (s *Scheduler) refusal() error {
	switch {
	case s.closed:
		return ErrClosed
	case s.queued()+len(s.embeds) >= s.cfg.MaxQueue:
		return ErrQueueFull
	}
	return nil
}

// queued counts, under mu, the waiting requests that have not run yet (a
// sequence waiting to be prefilled again was admitted before).
func (s *Scheduler) queued() int {
	n := 0
	for _, j := range s.waiting {
		if j.again == nil {
			n++
		}
	}
	return n
}

// poke wakes Run.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Shutdown stops accepting requests (Submit answers ErrClosed) and waits
// until every queued and running request has finished, or ctx ends; then
// the sequences still running end with FinishCancelled. Run returns once
// the scheduler is idle after Shutdown.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.poke()
	for {
		s.mu.Lock()
		idle := len(s.waiting) == 0 && len(s.embeds) == 0 && s.active == 0
		ch := s.idle
		s.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			s.abort = true
			s.mu.Unlock()
			s.poke()
			return ctx.Err()
		}
	}
}

// Load reports the waiting requests and the sequences prefilling or
// running.
func (s *Scheduler) Load() (waiting, active int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued(), s.active
}

// Slots is the number of sequences decoded at once.
func (s *Scheduler) Slots() int { return s.slots }

// Run drives the scheduler until ctx ends, or until it is idle after
// Shutdown. An engine failure ends every sequence in flight with
// FinishError and Run goes on (the engine is expected to recover at its
// next prefill).
func (s *Scheduler) Run(ctx context.Context) {
	defer s.sl.Close()
	defer s.abortAll(FinishCancelled, nil)
	for {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if s.abort {
			s.mu.Unlock()
			s.abortAll(FinishCancelled, nil)
			s.mu.Lock()
		}
		closed := s.closed
		s.mu.Unlock()
		s.dropCancelled()
		worked := s.prefillStep()
		if s.embedStep() {
			worked = true
		}
		if s.decodeStep() {
			worked = true
		}
		s.mu.Lock()
		active := len(s.running) + s.prefilling()
		if active != s.active {
			s.active = active
			s.obs.Queue(s.queued(), active)
		}
		idle := len(s.waiting) == 0 && len(s.embeds) == 0 && s.active == 0
		if idle {
			close(s.idle)
			s.idle = make(chan struct{})
		}
		s.mu.Unlock()
		if idle && closed {
			return
		}
		if !worked {
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
		}
	}
}

// dropCancelled ends the sequences whose client went away, freeing their
// slots at once.
func (s *Scheduler) dropCancelled() {
	s.running = slices.DeleteFunc(s.running, func(j *job) bool {
		if j.ctx.Err() == nil {
			return false
		}
		s.sl.Free(j.handle)
		s.end(j, finishEvent(j, FinishCancelled), FinishCancelled, nil)
		return true
	})
	for i, j := range s.pre {
		if j != nil && j.ctx.Err() != nil {
			s.end(j, unrun(j, FinishCancelled), FinishCancelled, nil)
			s.pre[i] = nil
		}
	}
	if s.preRun != nil && s.prefilling() == 0 { // every prompt of the prefill cancelled
		s.preRun.Close()
		s.pre, s.preRun = nil, nil
	}
	s.mu.Lock()
	var gone []*job
	s.waiting = slices.DeleteFunc(s.waiting, func(j *job) bool {
		if j.ctx.Err() != nil {
			gone = append(gone, j)
			return true
		}
		return false
	})
	s.mu.Unlock()
	for _, j := range gone {
		s.end(j, unrun(j, FinishCancelled), FinishCancelled, nil)
	}
}

// prefilling counts the prompts of the current prefill still wanted.
func (s *Scheduler) prefilling() int {
	n := 0
	for _, j := range s.pre {
		if j != nil {
			n++
		}
	}
	return n
}

// prefillStep runs one piece of the current prefill, first starting one
// when a slot is free: the oldest waiting request, with as many others as
// free slots and the engine's MaxPrefill allow that it prefills well
// together (takeGroup). A finished prefill's prompts join the running
// sequences with their first tokens. It reports whether it ran anything.
func (s *Scheduler) prefillStep() bool {
	if s.preRun == nil {
		free := min(s.slots-len(s.running), s.sl.MaxPrefill())
		if free <= 0 {
			return false
		}
		s.mu.Lock()
		group := s.takeGroup(free)
		if len(group) == 0 {
			s.mu.Unlock()
			return false
		}
		s.active = len(s.running) + len(group) // still busy to Shutdown
		s.obs.Queue(s.queued(), s.active)
		s.mu.Unlock()
		prompts := make([][]int, len(group))
		for i, j := range group {
			prompts[i] = j.prompt()
		}
		p, err := s.sl.StartPrefill(prompts)
		if err != nil {
			for _, j := range group {
				s.end(j, unrun(j, FinishError), FinishError, err)
			}
			return true
		}
		for _, j := range group {
			if j.seq == nil { // a sequence prefilled again goes on where it was
				j.seq = generate.NewSequence(j.req.Prompt, j.req.Index, j.req.Gen)
			}
			j.short = s.sl.ropeSwitch > 0 && len(j.prompt()) <= s.sl.ropeSwitch
			j.again = nil
		}
		s.pre, s.preRun = group, p
	}
	t0 := s.now()
	logits, done, err := s.preRun.Step()
	s.obs.Prefill(s.now().Sub(t0))
	if err != nil {
		s.endPrefill(FinishError, err)
		return true
	}
	if !done {
		return true
	}
	if n := s.preRun.Reused(); n > 0 {
		s.obs.PrefixReused(n)
	}
	for i, j := range s.pre {
		if j == nil {
			continue
		}
		h, err := s.sl.Insert(s.preRun, i)
		if err != nil {
			s.end(j, unrun(j, FinishError), FinishError, err)
			continue
		}
		j.handle = h
		if !s.emit(j, logits[i]) {
			s.running = append(s.running, j)
		}
	}
	s.preRun.Close()
	s.pre, s.preRun = nil, nil
	return true
}

// takeGroup takes from the queue (under mu) the prompts of the next
// prefill: the oldest waiting request, and up to n-1 more waiting ones
// that prefill well with it (Slots.PrefillGroup: equal keys, at most its
// limit; a prompt the prefix cache serves goes alone).
func (s *Scheduler) takeGroup(n int) []*job {
	if len(s.waiting) == 0 {
		return nil
	}
	head := s.waiting[0]
	group := []*job{head}
	k, most := s.sl.PrefillGroup(head.prompt())
	n = min(n, most)
	rest := s.waiting[1:]
	if n > 1 {
		rest = slices.DeleteFunc(slices.Clone(rest), func(j *job) bool {
			if kj, _ := s.sl.PrefillGroup(j.prompt()); len(group) < n && kj == k {
				group = append(group, j)
				return true
			}
			return false
		})
	}
	s.waiting = rest
	return group
}

// endPrefill ends every prompt of the current prefill with reason and
// closes it.
func (s *Scheduler) endPrefill(reason string, err error) {
	for _, j := range s.pre {
		if j != nil {
			s.end(j, unrun(j, reason), reason, err)
		}
	}
	if s.preRun != nil {
		s.preRun.Close()
	}
	s.pre, s.preRun = nil, nil
}

// decodeStep runs one decode step for every running sequence and emits
// their tokens. It reports whether it ran.
func (s *Scheduler) decodeStep() bool {
	if len(s.running) == 0 {
		return false
	}
	if s.requeueCrossing() {
		return true
	}
	if s.speculateStep() {
		return true
	}
	seqs := make([]int, len(s.running))
	tokens := make([]int, len(s.running))
	for i, j := range s.running {
		seqs[i], tokens[i] = j.handle, j.next
	}
	t0 := s.now()
	logits, err := s.sl.Decode(seqs, tokens)
	s.obs.Step(len(s.running), s.slots, s.now().Sub(t0))
	if err != nil {
		for _, j := range s.running {
			s.sl.Free(j.handle)
			s.end(j, finishEvent(j, FinishError), FinishError, err)
		}
		s.running = nil
		return true
	}
	kept := s.running[:0]
	for i, j := range s.running {
		if s.emit(j, logits[i]) {
			continue
		}
		kept = append(kept, j)
	}
	clear(s.running[len(kept):])
	s.running = kept
	return true
}

// requeueCrossing takes out of the decode batch the running sequences
// whose next token is past the engine's LongRoPE switch while their
// cached keys turned at the short frequencies (short) and queues them
// first, to be prefilled again over everything they hold,
// which turns every key at the long frequencies: transformers' generate
// drops its cache at that token and runs the sequence again. It reports
// whether it took any.
func (s *Scheduler) requeueCrossing() bool {
	sw := s.sl.ropeSwitch
	if sw <= 0 {
		return false
	}
	var moved []*job
	kept := s.running[:0]
	for _, j := range s.running {
		if h := j.seq.History(); j.short && len(h) > sw { // next goes to position len(h)-1
			s.sl.Free(j.handle)
			j.handle, j.again = -1, slices.Clone(h)
			moved = append(moved, j)
			continue
		}
		kept = append(kept, j)
	}
	if len(moved) == 0 {
		return false
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.mu.Lock()
	s.waiting = append(moved, s.waiting...)
	s.mu.Unlock()
	return true
}

// speculateStep decodes the one running sequence by prompt lookup when
// it runs alone and the engine can feed it several tokens (a
// batch of one row: Slots.SpeculateRoom): the tokens the sequence's
// Drafter proposes are fed after its next token in one step, each
// position's logits are emitted in turn as a decode step's are (at a
// proposed token by generate.Sequence.SampleDraft), as long as the token
// emitted is the one proposed, and the engine forgets the rest. Greedy
// decoding gives the tokens and events of one token a step, sampling
// tokens of the same distribution. It reports whether it ran a step
// (false: decode as usual).
func (s *Scheduler) speculateStep() bool {
	if s.cfg.Speculate <= 0 || len(s.running) != 1 {
		return false
	}
	j := s.running[0]
	room := s.sl.SpeculateRoom(j.handle)
	budget := j.req.Gen.MaxNewTokens - len(j.seq.Result().TokenIDs)
	if room < 2 || budget < 2 || (s.cfg.SpeculateFixed && room < 1+s.cfg.Speculate) {
		return false
	}
	// The model's own pick after the last confirmed token is emitted too:
	// propose one fewer than the tokens left.
	limit := min(s.cfg.Speculate, room-1, budget-1)
	if j.short { // the step stays under the LongRoPE switch, which requeueCrossing then meets
		limit = min(limit, s.sl.ropeSwitch-len(j.seq.History()))
		if s.cfg.SpeculateFixed && len(j.seq.History())+s.cfg.Speculate > s.sl.ropeSwitch {
			return false // the padded step would reach the switch: the step's frequencies are its last position's
		}
	}
	if limit < 1 {
		return false
	}
	var draft []int
	var qs [][]float64 // a sampling request's draft distributions (nil: each of probability 1)
	if d := s.cfg.DraftModel; d != nil {
		if s.drafting != j { // another sequence: its sampling, and nothing of the last one's drafts
			d.Restart(j.req.Gen.Sampling, len(j.seq.Result().PromptTokenIDs))
			s.drafting = j
		}
		var err error
		if draft, qs, err = d.Propose(j.ctx, j.seq.History(), limit, budget+s.cfg.Speculate); err != nil {
			if !errors.Is(err, errs.ErrInterrupted) {
				s.obs.DraftFailed(err)
			}
			return false
		}
	} else {
		if j.drafter == nil {
			j.drafter = generate.NewDrafter(s.cfg.Speculate, s.cfg.SpeculateNgram)
		}
		draft = j.drafter.Draft(j.seq.History(), limit)
	}
	if len(draft) == 0 {
		return false
	}
	feed := append([]int{j.next}, draft...)
	for s.cfg.SpeculateFixed && len(feed) < 1+s.cfg.Speculate {
		feed = append(feed, draft[len(draft)-1]) // padding, its logits not read
	}
	t0 := s.now()
	logits, err := s.sl.DecodeMany(j.handle, feed)
	if err != nil && !Lost(err) {
		return false // refused before it ran: decode one token
	}
	s.obs.Step(1, s.slots, s.now().Sub(t0))
	if err != nil {
		s.sl.Free(j.handle)
		s.end(j, finishEvent(j, FinishError), FinishError, err)
		s.running = nil
		return true
	}
	kept, confirmed, done := 0, 0, false
	for i, l := range logits[:len(draft)+1] {
		d, q := -1, []float64(nil)
		if i < len(draft) {
			d = draft[i]
			if qs != nil {
				q = qs[i]
			}
		}
		done = s.emitDraft(j, l, d, q) // j.next is the token emitted
		if i < len(draft) && j.next == draft[i] {
			confirmed++
		}
		if done || i == len(draft) || j.next != draft[i] {
			break
		}
		kept++
	}
	if d := s.cfg.DraftModel; d != nil {
		d.Done(len(draft), kept)
	} else {
		j.drafter.Done(len(draft), kept)
	}
	s.obs.Drafted(len(draft), confirmed)
	if done {
		s.running = nil // emit freed its row
		return true
	}
	// The engine holds the token before the draft, the draft and any
	// padding: keep that token and the confirmed part.
	if err := s.sl.Rewind(len(feed) - 1 - kept); err != nil {
		s.sl.Free(j.handle)
		s.end(j, finishEvent(j, FinishError), FinishError, err)
		s.running = nil
	}
	return true
}

// emit samples a sequence's next token from logits and sends its event;
// it reports whether the sequence finished.
func (s *Scheduler) emit(j *job, logits []float32) bool { return s.emitDraft(j, logits, -1, nil) }

// emitDraft is emit at a position for which a speculative draft proposed
// draft (generate.Sequence.SampleDraft; -1: none), drawn from q where q
// is not nil (a draft model's distribution).
func (s *Scheduler) emitDraft(j *job, logits []float32, draft int, q []float64) bool {
	id := j.seq.SampleDraft(logits, draft, q)
	ev := j.seq.Add(id)
	out := Event{Token: id, Text: ev.Text, StopString: ev.StopString}
	if j.req.Logprobs >= 0 {
		out.Logprob, out.TopLogprobs = logprobs(logits, id, j.req.Logprobs)
	}
	now := s.now()
	j.st.mu.Lock()
	j.st.completion++
	first := j.st.firstToken.IsZero()
	if first {
		j.st.firstToken = now
	}
	j.st.mu.Unlock()
	if first {
		s.obs.FirstToken(now.Sub(j.st.submitted))
	} else {
		s.obs.NextToken(now.Sub(j.last))
	}
	j.last = now
	j.next = id
	if ev.FinishReason != "" {
		s.sl.Free(j.handle) // before the stream ends: its reader sees the slot free
		s.end(j, out, ev.FinishReason, nil)
		return true
	}
	j.events <- out
	return false
}

// end sends a sequence's last event and closes its stream.
func (s *Scheduler) end(j *job, ev Event, reason string, err error) {
	ev.FinishReason, ev.Err = reason, err
	if ev.Token < 0 {
		ev.Token = -1
	}
	j.events <- ev
	close(j.events)
	s.obs.Finished(reason, j.st.PromptTokens, j.st.CompletionTokens())
}

// finishEvent ends a running sequence's text with reason: the event
// releases its held-back text.
func finishEvent(j *job, reason string) Event {
	return Event{Token: -1, Text: j.seq.Finish(reason).Text}
}

// abortAll ends everything in flight with reason (Run's exit, or
// Shutdown's deadline).
func (s *Scheduler) abortAll(reason string, err error) {
	for _, j := range s.running {
		s.sl.Free(j.handle)
		s.end(j, finishEvent(j, reason), reason, err)
	}
	s.running = nil
	s.endPrefill(reason, err)
	s.mu.Lock()
	w, embeds := s.waiting, s.embeds
	s.waiting, s.embeds = nil, nil
	s.closed = true
	s.active = 0
	close(s.idle)
	s.idle = make(chan struct{})
	s.mu.Unlock()
	for _, j := range w {
		s.end(j, unrun(j, reason), reason, err)
	}
	for _, e := range embeds {
		e.done <- ErrClosed
	}
}

// logprobs returns the log-probability of token id under logits (the
// model's distribution, before sampling settings, as vLLM reports) and,
// for k > 0, the k most likely tokens.
func logprobs(logits []float32, id, k int) (float64, []TokenLogprob) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	lp := float64(logits[id]) - lse
	if k <= 0 {
		return lp, nil
	}
	k = min(k, len(logits))
	idx := make([]int, 0, k+1)
	for i := range logits {
		if len(idx) < k || logits[i] > logits[idx[len(idx)-1]] {
			idx = append(idx, i)
			sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
			if len(idx) > k {
				idx = idx[:k]
			}
		}
	}
	top := make([]TokenLogprob, len(idx))
	for i, t := range idx {
		top[i] = TokenLogprob{Token: t, Logprob: float64(logits[t]) - lse}
	}
	return lp, top
}

type nopObserver struct{}

func (nopObserver) Queue(int, int)               {}
func (nopObserver) Step(int, int, time.Duration) {}
func (nopObserver) Prefill(time.Duration)        {}
func (nopObserver) PrefixReused(int)             {}
func (nopObserver) FirstToken(time.Duration)     {}
func (nopObserver) NextToken(time.Duration)      {}
func (nopObserver) Drafted(int, int)             {}
func (nopObserver) DraftFailed(error)            {}
func (nopObserver) Finished(string, int, int)    {}
func (nopObserver) Rejected(error)               {}

// embedJob is an embedding (or prompt-scoring) request in the
// scheduler: its prompts, run in groups of the engine's MaxPrefill
// between decode steps by run, which keeps each group's results.
type embedJob struct {
	ctx     context.Context
	prompts [][]int
	ran     int                       // the prompts run so far
	run     func(group [][]int) error // runs the next group
	done    chan error                // receives once: nil when every group ran
}

// Embed queues prompts for their pooled final hidden states
// (Engine.Embed, not normalized) and waits for them. The scheduler runs
// them in groups of up to the engine's MaxPrefill between two decode
// steps, as it runs prefill pieces, so running sequences go on; the
// shortest run together (as `tputool embed` groups them), so that a
// group pads little, and the vectors come back in the prompts' order. It
// returns ErrQueueFull when the queue is full, ErrClosed after Shutdown,
// and ctx's error when ctx ends first.
func (s *Scheduler) Embed(ctx context.Context, prompts [][]int) ([][]float32, error) {
	return inJobs(s, ctx, "embed", prompts, s.sl.Embed)
}

// PromptLogprobs queues prompts for the log-probability of each of
// their tokens after the first (Engine's PromptScorer) with topK
// alternatives, and waits for them: run between decode steps in groups
// as Embed's, the results in the prompts' order. An engine that does
// not score prompts gives an error wrapping errs.ErrUnsupported.
func (s *Scheduler) PromptLogprobs(ctx context.Context, prompts [][]int, topK int) ([][]sample.TokenLogprob, error) {
	ps, ok := s.sl.e.(PromptScorer)
	if !ok {
		return nil, fmt.Errorf("this model's engine does not score prompts: %w", errs.ErrUnsupported)
	}
	return inJobs(s, ctx, "score", prompts, func(group [][]int) ([][]sample.TokenLogprob, error) { return ps.PromptLogprobs(group, topK) })
}

// inJobs runs prompts through run as one job of the scheduler (runJob),
// the shortest first, and returns run's results in the prompts' order;
// what names the work in errors.
func inJobs[T any](s *Scheduler, ctx context.Context, what string, prompts [][]int, run func(group [][]int) ([]T, error)) ([]T, error) {
	if err := checkJobPrompts(what, prompts); err != nil {
		return nil, err
	}
	sorted, order := byLength(prompts)
	var res []T
	err := s.runJob(ctx, sorted, func(group [][]int) error {
		v, err := run(group)
		if err == nil && len(v) != len(group) {
			err = fmt.Errorf("%s: %d results for %d prompts", what, len(v), len(group))
		}
		res = append(res, v...)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]T, len(res))
	for i, j := range order {
		out[j] = res[i]
	}
	return out, nil
}

// checkJobPrompts refuses no prompts and an empty one.
func checkJobPrompts(what string, prompts [][]int) error {
	if len(prompts) == 0 {
		return fmt.Errorf("no prompts to %s", what)
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return fmt.Errorf("prompt %d to %s is empty", i, what)
		}
	}
	return nil
}

// byLength returns prompts shortest first (equal lengths in their
// order) and where each came from: sorted[i] is prompts[order[i]].
func byLength(prompts [][]int) (sorted [][]int, order []int) {
	order = make([]int, len(prompts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(prompts[a]) - len(prompts[b]) })
	sorted = make([][]int, len(prompts))
	for i, j := range order {
		sorted[i] = prompts[j]
	}
	return sorted, order
}

// runJob queues a job of prompts, run group by group, and waits for it.
func (s *Scheduler) runJob(ctx context.Context, prompts [][]int, run func(group [][]int) error) error {
	e := &embedJob{ctx: ctx, prompts: prompts, run: run, done: make(chan error, 1)}
	s.mu.Lock()
	if err := s.refusal(); err != nil {
		s.mu.Unlock()
		s.obs.Rejected(err)
		return err
	}
	s.embeds = append(s.embeds, e)
	s.mu.Unlock()
	s.poke()
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
		s.poke() // Run drops it
		return ctx.Err()
	}
}

// embedStep runs the next group of the oldest embedding (or scoring)
// request, first
// dropping those whose client went away. It reports whether it ran
// anything.
func (s *Scheduler) embedStep() bool {
	s.mu.Lock()
	var e *embedJob
	for len(s.embeds) > 0 && e == nil {
		e = s.embeds[0]
		if err := e.ctx.Err(); err != nil {
			s.embeds = s.embeds[1:]
			e.done <- err
			e = nil
		}
	}
	s.mu.Unlock()
	if e == nil {
		return false
	}
	group := e.prompts[e.ran:]
	group = group[:min(len(group), s.sl.MaxPrefill())]
	err := e.run(group)
	e.ran += len(group)
	if err == nil && e.ran < len(e.prompts) {
		return true
	}
	s.mu.Lock()
	s.embeds = slices.DeleteFunc(s.embeds, func(x *embedJob) bool { return x == e })
	s.mu.Unlock()
	e.done <- err
	return true
}
