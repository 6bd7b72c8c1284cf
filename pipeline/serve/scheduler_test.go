package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// countEngine is an Engine whose model counts: the token after t is
// t+1 (mod countVocab). Prefill takes a step per 4 prompt tokens; every
// call sleeps delay. It checks the scheduler's use of slots.
type countEngine struct {
	t     *testing.T
	delay time.Duration

	noPrefixes
	fixedRows
	sumEmbed

	mu        sync.Mutex
	slots     int
	live      map[int]bool // rows holding a sequence
	maxLive   int
	maxGroup  int
	decodes   int
	failAfter int // fail the decode call after this many (0: never)
}

const countVocab = 50

func newCountEngine(t *testing.T, slots int, delay time.Duration) *countEngine {
	return &countEngine{t: t, slots: slots, delay: delay, live: map[int]bool{}, fixedRows: fixedRows{t, slots}}
}

func oneHot(id int) []float32 {
	l := make([]float32, countVocab)
	l[id%countVocab] = 1
	return l
}

func (e *countEngine) Slots() int { return e.slots }

// MaxPrefill implements Engine: up to 2 prompts prefill together.
func (e *countEngine) MaxPrefill() int { return 2 }

// PrefillGroup implements Engine: any prompts prefill together.
func (e *countEngine) PrefillGroup([]int) (int, int) { return 0, e.MaxPrefill() }

type countPrefill struct {
	e     *countEngine
	left  int
	lasts []int
}

func (e *countEngine) StartPrefill(prompts [][]int) (Prefill, error) {
	if len(prompts) > e.MaxPrefill() {
		e.t.Errorf("prefill of %d prompts, above MaxPrefill", len(prompts))
	}
	p := &countPrefill{e: e}
	e.mu.Lock()
	e.maxGroup = max(e.maxGroup, len(prompts))
	e.mu.Unlock()
	for _, q := range prompts {
		p.left = max(p.left, (len(q)+3)/4)
		p.lasts = append(p.lasts, q[len(q)-1])
	}
	return p, nil
}

func (p *countPrefill) Step() ([][]float32, bool, error) {
	time.Sleep(p.e.delay)
	p.left--
	if p.left > 0 {
		return nil, false, nil
	}
	out := make([][]float32, len(p.lasts))
	for i, last := range p.lasts {
		out[i] = oneHot(last + 1)
	}
	return out, true, nil
}

func (p *countPrefill) Close() {}

func (e *countEngine) Insert(p Prefill, i, row int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if row < 0 || row >= e.slots || e.live[row] {
		e.t.Errorf("insert into row %d of %d, live: %v", row, e.slots, e.live[row])
	}
	e.live[row] = true
	e.maxLive = max(e.maxLive, len(e.live))
	return nil
}

func (e *countEngine) Decode(rows, tokens []int) ([][]float32, error) {
	time.Sleep(e.delay)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.decodes++
	if e.failAfter > 0 && e.decodes > e.failAfter {
		return nil, errors.New("device lost")
	}
	out := make([][]float32, len(rows))
	for i, row := range rows {
		if !e.live[row] {
			e.t.Errorf("decode of free row %d", row)
		}
		out[i] = oneHot(tokens[i] + 1)
	}
	return out, nil
}

func (e *countEngine) Free(row int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, row)
}

// fixedRows is the row methods of an engine whose decode batch always
// has a row per slot.
type fixedRows struct {
	t     *testing.T
	slots int
}

func (f fixedRows) Rows() int { return f.slots }

func (f fixedRows) RowBucket(int) int { return f.slots }

// Relayout is never needed, as the rows never change.
func (f fixedRows) Relayout(from []int) error {
	f.t.Errorf("relayout to %d rows of a fixed batch", len(from))
	return errors.New("fixed rows")
}

// sumEmbed is the Embed of the test engines: a prompt's vector is its
// length, the sum of its ids, its first id and its last, so that an
// answer shows which prompt it came from. A prompt whose first id is
// failEmbed fails its group.
type sumEmbed struct{}

const failEmbed = 509

func (sumEmbed) Embed(prompts [][]int) ([][]float32, error) {
	out := make([][]float32, len(prompts))
	for i, p := range prompts {
		if p[0] == failEmbed {
			return nil, errors.New("embedding failed")
		}
		sum := 0
		for _, id := range p {
			sum += id
		}
		out[i] = []float32{float32(len(p)), float32(sum), float32(p[0]), float32(p[len(p)-1])}
	}
	return out, nil
}

// noPrefixes is the prefix methods of an engine that keeps none.
type noPrefixes struct{}

func (noPrefixes) KeepsPrefixes() bool { return false }

func (noPrefixes) Keep(Prefill, int) (Kept, error) { return nil, errors.New("no prefixes kept") }

func (noPrefixes) Saving(int, int) int { return 0 }

func (noPrefixes) StartPrefillFrom([]int, Kept) (Prefill, error) {
	return nil, errors.New("no prefixes kept")
}

func (e *countEngine) liveCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.live)
}

// greedyReq is a greedy request for n tokens after prompt.
func greedyReq(prompt []int, n int) Request {
	return Request{Prompt: prompt, Gen: generate.Options{MaxNewTokens: n, Sampling: sample.Options{RepetitionPenalty: 1}}, Logprobs: -1}
}

// collect reads a stream to its end.
func collect(st *Stream) (ids []int, reason string, err error) {
	for ev := range st.Events {
		if ev.Token >= 0 {
			ids = append(ids, ev.Token)
		}
		if ev.FinishReason != "" {
			reason, err = ev.FinishReason, ev.Err
		}
	}
	return ids, reason, err
}

func startScheduler(t *testing.T, e Engine, cfg Config) (*Scheduler, func()) {
	s := New(e, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	return s, func() { cancel(); <-done }
}

func TestSchedulerConcurrentStreams(t *testing.T) {
	e := newCountEngine(t, 4, time.Millisecond)
	s, stop := startScheduler(t, e, Config{MaxQueue: 64})
	defer stop()
	const n = 24
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			prompt := make([]int, 1+i%9)
			for j := range prompt {
				prompt[j] = (i + j) % countVocab
			}
			want := 3 + i%7
			st, err := s.Submit(context.Background(), greedyReq(prompt, want))
			if err != nil {
				t.Error(err)
				return
			}
			ids, reason, err := collect(st)
			if err != nil || reason != generate.FinishLength {
				t.Errorf("request %d: finish %q, %v", i, reason, err)
			}
			var exp []int
			for k := 1; k <= want; k++ {
				exp = append(exp, (prompt[len(prompt)-1]+k)%countVocab)
			}
			if fmt.Sprint(ids) != fmt.Sprint(exp) {
				t.Errorf("request %d: tokens %v, want %v", i, ids, exp)
			}
			if st.CompletionTokens() != want || st.TTFT() <= 0 {
				t.Errorf("request %d: %d completion tokens, TTFT %v", i, st.CompletionTokens(), st.TTFT())
			}
		}(i)
	}
	wg.Wait()
	if e.maxLive < 2 || e.maxLive > 4 {
		t.Errorf("at most %d sequences ran at once, want 2 to 4", e.maxLive)
	}
	if e.maxGroup != 2 {
		t.Errorf("at most %d prompts prefilled together, want 2 (MaxPrefill)", e.maxGroup)
	}
	if e.liveCount() != 0 {
		t.Errorf("%d slots still held", e.liveCount())
	}
}

func TestSchedulerCancelFreesSlot(t *testing.T) {
	e := newCountEngine(t, 2, 2*time.Millisecond)
	s, stop := startScheduler(t, e, Config{})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.Submit(ctx, greedyReq([]int{1, 2}, 10000-2))
	if err != nil {
		t.Fatal(err)
	}
	<-st.Events // the first token: running
	cancel()
	_, reason, _ := collect(st)
	if reason != FinishCancelled {
		t.Errorf("finish %q, want %q", reason, FinishCancelled)
	}
	deadline := time.Now().Add(2 * time.Second)
	for e.liveCount() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.liveCount() != 0 {
		t.Error("the cancelled sequence's slot was not freed")
	}
}

func TestSchedulerQueueFull(t *testing.T) {
	e := newCountEngine(t, 1, 5*time.Millisecond)
	s, stop := startScheduler(t, e, Config{MaxQueue: 1})
	defer stop()
	a, err := s.Submit(context.Background(), greedyReq([]int{1}, 50))
	if err != nil {
		t.Fatal(err)
	}
	<-a.Events // running: the queue is empty again
	if _, err := s.Submit(context.Background(), greedyReq([]int{1}, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), greedyReq([]int{1}, 5)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third request: %v, want ErrQueueFull", err)
	}
}

func TestSchedulerShutdownDrains(t *testing.T) {
	e := newCountEngine(t, 2, time.Millisecond)
	s := New(e, Config{})
	done := make(chan struct{})
	go func() { s.Run(context.Background()); close(done) }()
	var streams []*Stream
	for i := 0; i < 4; i++ {
		st, err := s.Submit(context.Background(), greedyReq([]int{i}, 20))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		ids, reason, _ := collect(st)
		if len(ids) != 20 || reason != generate.FinishLength {
			t.Errorf("stream %d: %d tokens, %q: not drained", i, len(ids), reason)
		}
	}
	if _, err := s.Submit(context.Background(), greedyReq([]int{1}, 5)); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after shutdown: %v, want ErrClosed", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after shutdown")
	}
}

func TestSchedulerShutdownDeadline(t *testing.T) {
	e := newCountEngine(t, 1, 2*time.Millisecond)
	s, stop := startScheduler(t, e, Config{})
	defer stop()
	st, err := s.Submit(context.Background(), greedyReq([]int{1}, 100000))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("shutdown: %v, want the deadline", err)
	}
	if _, reason, _ := collect(st); reason != FinishCancelled {
		t.Errorf("finish %q, want %q", reason, FinishCancelled)
	}
}

func TestSchedulerEngineError(t *testing.T) {
	e := newCountEngine(t, 2, 0)
	e.failAfter = 3
	s, stop := startScheduler(t, e, Config{})
	defer stop()
	st, err := s.Submit(context.Background(), greedyReq([]int{1}, 100))
	if err != nil {
		t.Fatal(err)
	}
	ids, reason, err := collect(st)
	if reason != FinishError || err == nil || len(ids) == 0 {
		t.Errorf("%d tokens, finish %q, %v: want an error finish", len(ids), reason, err)
	}
}

func TestSchedulerEOSAndLogprobs(t *testing.T) {
	e := newCountEngine(t, 2, 0)
	s, stop := startScheduler(t, e, Config{})
	defer stop()
	r := greedyReq([]int{1}, 100)
	r.Gen.EOS = []int{5}
	r.Logprobs = 2
	st, err := s.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var last Event
	n := 0
	for ev := range st.Events {
		last = ev
		n++
		if len(ev.TopLogprobs) != 2 || ev.TopLogprobs[0].Token != ev.Token || ev.Logprob != ev.TopLogprobs[0].Logprob || ev.Logprob >= 0 {
			t.Errorf("event %+v: logprobs do not rank the chosen token first", ev)
		}
	}
	if last.FinishReason != generate.FinishStop || last.Token != 5 || n != 4 {
		t.Errorf("%d events, last %+v: want a stop at token 5 after 4", n, last)
	}
}

// TestSchedulerCancelDuringGroupPrefill: a request cancelled while its
// prompt prefills with another's ends at once; the other runs on.
func TestSchedulerCancelDuringGroupPrefill(t *testing.T) {
	e := newCountEngine(t, 2, 5*time.Millisecond)
	s := New(e, Config{})
	long := make([]int, 40) // 10 prefill steps
	ctx, cancel := context.WithCancel(context.Background())
	a, err := s.Submit(ctx, greedyReq(long, 5))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Submit(context.Background(), greedyReq(long, 5))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go s.Run(runCtx) // both are waiting: they prefill together
	time.Sleep(12 * time.Millisecond)
	cancel()
	if ids, reason, _ := collect(a); reason != FinishCancelled || len(ids) != 0 {
		t.Errorf("cancelled request: %d tokens, %q", len(ids), reason)
	}
	if ids, reason, _ := collect(b); reason != generate.FinishLength || len(ids) != 5 {
		t.Errorf("other request: %d tokens, %q", len(ids), reason)
	}
	if e.maxGroup != 2 {
		t.Errorf("the two prompts were not prefilled together (group of %d)", e.maxGroup)
	}
}

// keyedEngine groups prompts by length (as compile.Batch groups them by
// padded length), and prefills a prompt starting with 99 alone.
type keyedEngine struct{ *countEngine }

func (keyedEngine) PrefillGroup(prompt []int) (int, int) {
	if prompt[0] == 99 {
		return -1, 1
	}
	return len(prompt), 8
}

// TestSchedulerGroupsByKey: the oldest request prefills with the waiting
// ones of its key, in order, and a negative key prefills alone.
func TestSchedulerGroupsByKey(t *testing.T) {
	e := keyedEngine{newCountEngine(t, 8, time.Millisecond)}
	var groups [][]int // the first token of each prompt, per prefill
	var mu sync.Mutex
	rec := &groupRecorder{Engine: e, on: func(prompts [][]int) {
		mu.Lock()
		defer mu.Unlock()
		var g []int
		for _, p := range prompts {
			g = append(g, p[0])
		}
		groups = append(groups, g)
	}}
	s := New(rec, Config{})
	var streams []*Stream
	for _, p := range [][]int{{1, 0}, {2, 0, 0}, {3, 0}, {99, 0}, {4, 0}, {5, 0, 0}} {
		st, err := s.Submit(context.Background(), greedyReq(p, 2))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.Run(ctx)
	for _, st := range streams {
		collect(st)
	}
	// MaxPrefill is 2: {1,3} (length 2), {2,5} (length 3), {99} alone, {4}.
	if got := fmt.Sprint(groups); got != "[[1 3] [2 5] [99] [4]]" {
		t.Errorf("prefill groups %s, want [[1 3] [2 5] [99] [4]]", got)
	}
}

// groupRecorder reports the prompts of each StartPrefill.
type groupRecorder struct {
	Engine
	on func([][]int)
}

func (g *groupRecorder) StartPrefill(prompts [][]int) (Prefill, error) {
	g.on(prompts)
	return g.Engine.StartPrefill(prompts)
}

// groupsEngine is a countEngine that records the prompt lengths of each
// group it embeds.
type groupsEngine struct {
	*countEngine
	groups [][]int
}

func (g *groupsEngine) Embed(prompts [][]int) ([][]float32, error) {
	var lens []int
	for _, p := range prompts {
		lens = append(lens, len(p))
	}
	g.groups = append(g.groups, lens)
	return g.countEngine.Embed(prompts)
}

// TestSchedulerEmbedByLength: a request's prompts run the shortest
// together (groups of the engine's MaxPrefill over the prompts sorted by
// length, ties in their order), and the vectors come back in the
// prompts' order.
func TestSchedulerEmbedByLength(t *testing.T) {
	e := &groupsEngine{countEngine: newCountEngine(t, 2, 0)}
	s, stop := startScheduler(t, e, Config{MaxQueue: 8})
	defer stop()
	lens := []int{9, 1, 30, 2, 9, 17, 3, 1, 25, 4, 12, 5}
	var prompts [][]int
	for i, n := range lens {
		p := make([]int, n)
		for j := range p {
			p[j] = 3 + i
		}
		prompts = append(prompts, p)
	}
	vecs, err := s.Embed(context.Background(), prompts)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sumEmbed{}.Embed(prompts)
	if fmt.Sprint(vecs) != fmt.Sprint(want) {
		t.Errorf("vectors %v, want %v", vecs, want)
	}
	sorted := slices.Clone(lens)
	slices.Sort(sorted)
	var got []int
	for _, g := range e.groups {
		if len(g) > e.MaxPrefill() {
			t.Errorf("a group of %d prompts, more than MaxPrefill %d", len(g), e.MaxPrefill())
		}
		got = append(got, g...)
	}
	if !slices.Equal(got, sorted) {
		t.Errorf("groups %v: want the lengths in order, %v", e.groups, sorted)
	}
}

// TestSchedulerEmbed: embeddings run in groups of the engine's
// MaxPrefill between decode steps, in order, while a sequence decodes; a
// failing group fails its request alone; after Shutdown Embed answers
// ErrClosed.
func TestSchedulerEmbed(t *testing.T) {
	e := newCountEngine(t, 2, time.Millisecond)
	s, stop := startScheduler(t, e, Config{MaxQueue: 8})
	defer stop()
	st, err := s.Submit(context.Background(), greedyReq([]int{1, 2}, 30))
	if err != nil {
		t.Fatal(err)
	}
	var prompts [][]int
	for i := range 7 {
		prompts = append(prompts, []int{3 + i, 4, 5 + i})
	}
	vecs, err := s.Embed(context.Background(), prompts)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sumEmbed{}.Embed(prompts)
	if fmt.Sprint(vecs) != fmt.Sprint(want) {
		t.Errorf("vectors %v, want %v", vecs, want)
	}
	if _, err := s.Embed(context.Background(), [][]int{{1}, {failEmbed, 2}}); err == nil {
		t.Error("a failing group: no error")
	}
	if _, err := s.Embed(context.Background(), [][]int{{1}, {}}); err == nil {
		t.Error("an empty prompt: no error")
	}
	if ids, reason, err := collect(st); len(ids) != 30 || reason != generate.FinishLength || err != nil {
		t.Errorf("the decoding sequence: %d tokens, %q, %v", len(ids), reason, err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Embed(context.Background(), prompts); !errors.Is(err, ErrClosed) {
		t.Errorf("after Shutdown: %v, want ErrClosed", err)
	}
}

// switchEngine is a countEngine of a model with a LongRoPE switch, which
// records the prompts it prefills.
type switchEngine struct {
	*countEngine
	sw       int
	prefills [][]int
}

func (e *switchEngine) RopeSwitch() int { return e.sw }

func (e *switchEngine) StartPrefill(prompts [][]int) (Prefill, error) {
	e.mu.Lock()
	for _, p := range prompts {
		e.prefills = append(e.prefills, slices.Clone(p))
	}
	e.mu.Unlock()
	return e.countEngine.StartPrefill(prompts)
}

// TestSchedulerPrefillsAgainPastSwitch: a sequence whose next token is
// the first past the engine's LongRoPE switch (8) leaves the decode batch
// and is prefilled again over everything it holds (its prompt, its tokens
// and the next one), as transformers' generate does, then goes on where
// it was: the same tokens, one stream, its slot freed at the end. A
// sequence whose prompt is already past the switch is not prefilled again.
func TestSchedulerPrefillsAgainPastSwitch(t *testing.T) {
	e := &switchEngine{countEngine: newCountEngine(t, 2, 0), sw: 8}
	s, stop := startScheduler(t, e, Config{MaxQueue: 8})
	defer stop()
	for _, c := range []struct {
		prompt  []int
		again   bool
		prefill string
	}{
		{[]int{1, 2, 3, 4, 5}, true, "[1 2 3 4 5 6 7 8 9]"},
		{[]int{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, false, ""},
	} {
		e.prefills = nil
		st, err := s.Submit(context.Background(), greedyReq(c.prompt, 8))
		if err != nil {
			t.Fatal(err)
		}
		ids, reason, err := collect(st)
		last := c.prompt[len(c.prompt)-1]
		var want []int
		for k := 1; k <= 8; k++ {
			want = append(want, (last+k)%countVocab)
		}
		if err != nil || reason != generate.FinishLength || fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("prompt %v: tokens %v (%q, %v), want %v", c.prompt, ids, reason, err, want)
		}
		e.mu.Lock()
		got := e.prefills
		e.mu.Unlock()
		switch {
		case c.again && (len(got) != 2 || fmt.Sprint(got[1]) != c.prefill):
			t.Errorf("prompt %v: prefills %v, want the prompt then %s", c.prompt, got, c.prefill)
		case !c.again && len(got) != 1:
			t.Errorf("prompt %v: prefills %v, want the prompt alone", c.prompt, got)
		}
	}
	if e.liveCount() != 0 {
		t.Errorf("%d slots still held", e.liveCount())
	}
}
