package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/sample"
)

const vocab = 16

// script is a fake Runner: row b produces want[b][0], want[b][1], ...
// whatever it is fed, by returning logits peaked on the next scripted id.
type script struct {
	want      [][]int
	pos       []int
	fed       [][]int
	prefillN  int
	maxNew    int
	decodes   int
	compile   time.Duration
	clock     *fakeClock
	stepCost  time.Duration
	compileAt map[int]time.Duration // decode call -> compile time it adds
}

func (s *script) logits() [][]float32 {
	out := make([][]float32, len(s.want))
	for b := range out {
		out[b] = make([]float32, vocab)
		if s.pos[b] < len(s.want[b]) {
			out[b][s.want[b][s.pos[b]]] = 10
		}
		s.pos[b]++
	}
	return out
}

func (s *script) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	s.prefillN, s.maxNew = len(prompts), maxNew
	s.pos = make([]int, len(prompts))
	s.fed = make([][]int, len(prompts))
	if s.clock != nil {
		s.clock.t = s.clock.t.Add(s.stepCost)
	}
	return s.logits(), nil
}

func (s *script) Decode(next []int) ([][]float32, error) {
	for b, id := range next {
		s.fed[b] = append(s.fed[b], id)
	}
	s.decodes++
	if s.clock != nil {
		s.clock.t = s.clock.t.Add(s.stepCost)
		if c, ok := s.compileAt[s.decodes]; ok {
			s.compile += c
			s.clock.t = s.clock.t.Add(c)
		}
	}
	return s.logits(), nil
}

func (s *script) CompileDuration() time.Duration { return s.compile }

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// pieces decodes id i as pieces[i].
type pieces []string

func (p pieces) decoder([]int) StreamDecoder { return &pieceDecoder{p} }

type pieceDecoder struct{ p pieces }

func (d *pieceDecoder) Add(id int) string { return d.p[id] }
func (d *pieceDecoder) Flush() string     { return "" }

var words = pieces{"<pad>", "<s>", "</s>", "Hel", "lo", " W", "orld", "!", "a", "b", "c", "x", "é", "\n", "o W", "z"}

func run(t *testing.T, want [][]int, o Options) ([]Result, []Event, *script) {
	t.Helper()
	s := &script{want: want}
	var events []Event
	o.OnEvent = func(e Event) { events = append(events, e) }
	if o.NewDecoder == nil {
		o.NewDecoder = words.decoder
	}
	prompts := make([][]int, len(want))
	for i := range prompts {
		prompts[i] = []int{1, 3}
	}
	res, _, err := Run(context.Background(), s, prompts, o)
	if err != nil {
		t.Fatal(err)
	}
	return res, events, s
}

func streamed(events []Event, row int) string {
	var b strings.Builder
	for _, e := range events {
		if e.Row == row {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func TestStopOnEOS(t *testing.T) {
	res, events, s := run(t, [][]int{{3, 4, 2, 7}}, Options{MaxNewTokens: 10, EOS: []int{2}})
	r := res[0]
	if r.FinishReason != FinishStop || r.Text != "Hello" || !slices.Equal(r.TokenIDs, []int{3, 4, 2}) {
		t.Fatalf("got %+v", r)
	}
	if !slices.Equal(r.PromptTokenIDs, []int{1, 3}) {
		t.Errorf("prompt ids %v", r.PromptTokenIDs)
	}
	if s.decodes != 2 || s.maxNew != 10 {
		t.Errorf("decodes %d, maxNew %d", s.decodes, s.maxNew)
	}
	if got := streamed(events, 0); got != r.Text {
		t.Errorf("streamed %q, result %q", got, r.Text)
	}
	if last := events[len(events)-1]; last.FinishReason != FinishStop {
		t.Errorf("last event %+v", last)
	}
}

func TestStopOnLength(t *testing.T) {
	res, _, s := run(t, [][]int{{3, 4, 5, 6, 7, 7}}, Options{MaxNewTokens: 4, EOS: []int{2}})
	if r := res[0]; r.FinishReason != FinishLength || r.Text != "Hello World" || len(r.TokenIDs) != 4 {
		t.Fatalf("got %+v", r)
	}
	if s.decodes != 3 {
		t.Errorf("%d decode calls for 4 tokens, want 3", s.decodes)
	}
}

func TestStopStringAcrossTokens(t *testing.T) {
	// "Hel" "lo" " W" "orld": the stop string "o W" spans two tokens.
	res, events, _ := run(t, [][]int{{3, 4, 5, 6, 7}}, Options{MaxNewTokens: 10, Stop: []string{"o W"}})
	r := res[0]
	if r.FinishReason != FinishStopString || r.Text != "Hell" || r.StopString != "o W" {
		t.Fatalf("got %+v", r)
	}
	if last := events[len(events)-1]; last.FinishReason != FinishStopString || last.StopString != "o W" {
		t.Errorf("last event %+v: want the stop string named", last)
	}
	if got := streamed(events, 0); got != "Hell" {
		t.Errorf("streamed %q: the stop string leaked", got)
	}
	// "lo" ends in "o", a prefix of the stop string: held back until " W".
	if events[1].Text != "l" {
		t.Errorf("second event released %q, want %q", events[1].Text, "l")
	}
}

func TestHeldBackTextIsReleased(t *testing.T) {
	// "x" "a" "c": "a" could start "ab" but "c" follows, so "ac" comes out.
	res, events, _ := run(t, [][]int{{11, 8, 10}}, Options{MaxNewTokens: 3, Stop: []string{"ab"}})
	if r := res[0]; r.Text != "xac" || r.FinishReason != FinishLength {
		t.Fatalf("got %+v", r)
	}
	var texts []string
	for _, e := range events {
		texts = append(texts, e.Text)
	}
	if !slices.Equal(texts, []string{"x", "", "ac"}) {
		t.Errorf("events %q", texts)
	}
}

func TestStopStringInOneToken(t *testing.T) {
	res, _, _ := run(t, [][]int{{3, 14, 15}}, Options{MaxNewTokens: 5, Stop: []string{"zz", "W"}})
	if r := res[0]; r.Text != "Helo " || r.FinishReason != FinishStopString || r.StopString != "W" {
		t.Fatalf("got %+v", r)
	}
}

func TestBatchRowsFinishIndependently(t *testing.T) {
	res, events, s := run(t, [][]int{{8, 2, 9, 9}, {9, 9, 9, 10}}, Options{MaxNewTokens: 4, EOS: []int{2}})
	if res[0].FinishReason != FinishStop || res[0].Text != "a" || !slices.Equal(res[0].TokenIDs, []int{8, 2}) {
		t.Errorf("row 0: %+v", res[0])
	}
	if res[1].FinishReason != FinishLength || res[1].Text != "bbbc" {
		t.Errorf("row 1: %+v", res[1])
	}
	if s.prefillN != 2 || s.decodes != 3 {
		t.Errorf("prefill batch %d, decodes %d", s.prefillN, s.decodes)
	}
	if !slices.Equal(s.fed[1], []int{9, 9, 9}) {
		t.Errorf("row 1 was fed %v", s.fed[1])
	}
	if streamed(events, 1) != "bbbc" {
		t.Errorf("row 1 streamed %q", streamed(events, 1))
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{want: [][]int{{3, 4, 5, 6, 7, 7, 7}}}
	n := 0
	o := Options{MaxNewTokens: 7, NewDecoder: words.decoder, OnEvent: func(e Event) {
		if n++; n == 2 {
			cancel()
		}
	}}
	res, _, err := Run(ctx, s, [][]int{{1}}, o)
	if !errors.Is(err, errs.ErrInterrupted) {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	if r := res[0]; r.FinishReason != FinishInterrupted || r.Text != "Hello" || len(r.TokenIDs) != 2 {
		t.Fatalf("got %+v", r)
	}
}

func TestMetrics(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	s := &script{want: [][]int{{3, 4, 5, 2}, {3, 4, 5, 6}}, clock: clock, stepCost: 10 * time.Millisecond,
		compileAt: map[int]time.Duration{1: 500 * time.Millisecond}}
	o := Options{MaxNewTokens: 4, EOS: []int{2}, Now: clock.now}
	_, m, err := Run(context.Background(), s, [][]int{{1, 3, 4}, {1}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if m.PromptEvalCount != 4 || m.EvalCount != 8 {
		t.Errorf("counts: prompt %d eval %d", m.PromptEvalCount, m.EvalCount)
	}
	if m.PromptEvalDuration != 10*time.Millisecond || m.EvalDuration != 30*time.Millisecond {
		t.Errorf("durations: prompt %v eval %v", m.PromptEvalDuration, m.EvalDuration)
	}
	if m.CompileDuration != 500*time.Millisecond || m.TotalDuration != 540*time.Millisecond || m.TTFT != 10*time.Millisecond {
		t.Errorf("compile %v total %v ttft %v", m.CompileDuration, m.TotalDuration, m.TTFT)
	}
	if sum := m.Summary(); !strings.Contains(sum, "eval rate:            266.67 tokens/s") {
		t.Errorf("summary:\n%s", sum)
	}
}

func TestRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{}, {MaxNewTokens: 1, Stop: []string{""}}} {
		if _, _, err := Run(context.Background(), &script{want: [][]int{{1}}}, [][]int{{1}}, o); !errors.Is(err, errs.ErrUsage) {
			t.Errorf("%+v: err %v, want a usage error", o, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestResolve(t *testing.T) {
	// No file, no flags: greedy, 256 tokens, model EOS.
	o, err := Resolve(nil, []int{2}, Overrides{})
	if err != nil || !o.Sampling.Greedy() || o.MaxNewTokens != DefaultMaxNewTokens || !slices.Equal(o.EOS, []int{2}) {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	// A sampling generation_config.json.
	gen := &config.Generation{DoSample: ptr(true), Temperature: ptr(0.6), TopP: ptr(0.9), EOSTokenID: config.IDList{128001, 128009}, MaxNewTokens: ptr(64)}
	o, _ = Resolve(gen, []int{2}, Overrides{})
	if s := o.Sampling; s.Temperature != 0.6 || s.TopK != 50 || s.TopP != 0.9 || o.MaxNewTokens != 64 || !slices.Equal(o.EOS, []int{128001, 128009}) {
		t.Fatalf("file: %+v", o)
	}
	// Flags win; temperature 0 forces greedy.
	o, _ = Resolve(gen, nil, Overrides{Temperature: ptr(0.0), MaxNewTokens: ptr(5)})
	if !o.Sampling.Greedy() || o.MaxNewTokens != 5 {
		t.Fatalf("flags: %+v", o)
	}
	o, _ = Resolve(nil, nil, Overrides{Temperature: ptr(0.8), TopK: ptr(0), RepetitionPenalty: ptr(1.2), Seed: ptr[uint64](9)})
	if s := o.Sampling; s.Temperature != 0.8 || s.TopK != 0 || s.RepetitionPenalty != 1.2 || s.Seed != 9 {
		t.Fatalf("flags on greedy file: %+v", o)
	}
	o, _ = Resolve(nil, nil, Overrides{PresencePenalty: ptr(0.5), FrequencyPenalty: ptr(-0.25), LogitBias: map[int]float64{7: 2}})
	if s := o.Sampling; s.PresencePenalty != 0.5 || s.FrequencyPenalty != -0.25 || s.LogitBias[7] != 2 || !s.Greedy() {
		t.Fatalf("OpenAI's penalties: %+v", o.Sampling)
	}
	if _, err := Resolve(nil, nil, Overrides{PresencePenalty: ptr(3.0)}); !errors.Is(err, errs.ErrUsage) {
		t.Fatalf("presence penalty out of range: %v", err)
	}
	if _, err := Resolve(nil, nil, Overrides{TopP: ptr(2.0), Temperature: ptr(1.0)}); !errors.Is(err, errs.ErrUsage) {
		t.Fatalf("bad top-p: %v", err)
	}
}

// chunked is a script that also prefills in pieces (Chunked, Extender):
// each piece of n tokens costs perPiece + n*perToken on the clock.
type chunked struct {
	script
	perToken time.Duration
	perPiece time.Duration // what every piece costs besides its tokens
	pending  int
	pieces   []int
	extended [][]int
	onPiece  func()
}

func (c *chunked) Begin(prompts [][]int, maxNew int) (int, error) {
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	c.pending = (longest + 7) / 8 * 8
	c.prefillN, c.maxNew = len(prompts), maxNew
	c.pos = make([]int, len(prompts))
	c.fed = make([][]int, len(prompts))
	return c.pending, nil
}

func (c *chunked) Extend(tokens [][]int, maxNew int) (int, error) {
	c.extended = tokens
	c.maxNew = maxNew
	c.pending = len(tokens[0])
	return c.pending, nil
}

func (c *chunked) PrefillChunk(n int) ([][]float32, error) {
	c.pending -= n
	c.pieces = append(c.pieces, n)
	c.clock.t = c.clock.t.Add(c.perPiece + time.Duration(n)*c.perToken)
	if c.onPiece != nil {
		c.onPiece()
	}
	if c.pending > 0 {
		return make([][]float32, len(c.pos)), nil
	}
	return c.logits(), nil
}

func TestPrefillPiecesAreSizedByTime(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	// 25 ms a token: after the first 8, pieces of 32 fit in 800 ms.
	c := &chunked{script: script{want: [][]int{{3, 4}}}, perToken: 25 * time.Millisecond}
	c.clock = clock
	var progress []int
	o := Options{MaxNewTokens: 2, Now: clock.now, NewDecoder: words.decoder, OnPrefill: func(done, total int) {
		progress = append(progress, done)
		if total != 40 {
			t.Errorf("total %d, want 40", total)
		}
	}}
	res, m, err := Run(context.Background(), c, [][]int{make([]int, 33)}, o)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Text != "Hello" || !slices.Equal(c.pieces, []int{8, 32}) || !slices.Equal(progress, []int{8, 40}) {
		t.Errorf("text %q, pieces %v, progress %v", res[0].Text, c.pieces, progress)
	}
	if m.PromptEvalDuration != time.Second {
		t.Errorf("prompt eval %v, want 1s", m.PromptEvalDuration)
	}
	for _, tc := range []struct {
		took      time.Duration
		n, rest   int
		wantChunk int
	}{
		{0, 8, 100, 100},                         // unmeasurable: the rest at once
		{10 * time.Millisecond, 8, 1000, 512},    // 640 fit
		{100 * time.Millisecond, 8, 100, 64},     // 64 fit
		{100 * time.Millisecond, 8, 60, 60},      // the rest fits
		{650 * time.Millisecond, 1, 100, 8},      // fewer than 8 fit: the smallest piece, 8
		{1200 * time.Millisecond, 8, 100, 8},     // ditto
		{1200 * time.Millisecond, 8, 5, 5},       // the rest when less
		{800 * time.Millisecond, 64, 1000, 64},   // exactly
		{790 * time.Millisecond, 128, 1000, 128}, // 129 fit
	} {
		if got := nextChunk(tc.took, tc.n, tc.rest); got != tc.wantChunk {
			t.Errorf("nextChunk(%v, %d, %d) = %d, want %d", tc.took, tc.n, tc.rest, got, tc.wantChunk)
		}
	}
}

// TestPrefillPiecesGrowPastFixedCosts: pieces whose cost is mostly fixed
// (90 ms a piece, 1.25 ms a token: a mixture of experts reading all of its
// experts for every piece) grow by their rate from 8 tokens to 256 and
// the rest; with no fixed cost a piece runs PrefillTarget from the second
// on. A piece cost of 35 ms plus 3 ms a token (an AFMoE of Trinity Mini's
// shape in 4 layers, bf16, 2 cores) prefills 512 tokens within 10% of one
// piece's time.
func TestPrefillPiecesGrowPastFixedCosts(t *testing.T) {
	for _, tc := range []struct {
		perPiece, perToken time.Duration
		prompt             int
		want               []int
	}{
		{90 * time.Millisecond, 1250 * time.Microsecond, 424, []int{8, 64, 256, 96}}, // the last piece the rest, which fits
		{0, 12 * time.Millisecond, 72, []int{8, 64}},
		{35 * time.Millisecond, 3 * time.Millisecond, 512, []int{8, 64, 128, 128, 184}},
	} {
		clock := &fakeClock{t: time.Unix(0, 0)}
		c := &chunked{script: script{want: [][]int{{3, 4}}}, perToken: tc.perToken, perPiece: tc.perPiece}
		c.clock = clock
		_, m, err := Run(context.Background(), c, [][]int{make([]int, tc.prompt)}, Options{MaxNewTokens: 2, Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.pieces, tc.want) {
			t.Errorf("%v a piece, %v a token: pieces %v, want %v", tc.perPiece, tc.perToken, c.pieces, tc.want)
		}
		one := tc.perPiece + time.Duration(tc.prompt)*tc.perToken
		if tc.perPiece == 35*time.Millisecond && m.PromptEvalDuration > one*11/10 {
			t.Errorf("%v a piece, %v a token: the prefill took %v, one piece %v", tc.perPiece, tc.perToken, m.PromptEvalDuration, one)
		}
		for _, n := range c.pieces {
			if d := tc.perPiece + time.Duration(n)*tc.perToken; d > PrefillTarget {
				t.Errorf("%v a piece, %v a token: a piece of %d took %v, past %v", tc.perPiece, tc.perToken, n, d, PrefillTarget)
			}
		}
	}
}

// fixedChunked is a chunked runner whose new piece lengths are costly.
type fixedChunked struct {
	chunked
	piece int
}

func (c *fixedChunked) PrefillPiece() int { return c.piece }

// TestPrefillFixedPieces: on a FixedPieces runner, pieces are its piece
// length (the last one the rest) however long they take, so runs of one
// prompt repeat their shapes; an explicit PrefillChunk still wins, and
// PrefillPiece 0 keeps the timed pieces.
func TestPrefillFixedPieces(t *testing.T) {
	for _, tc := range []struct {
		piece, chunk int
		perToken     time.Duration
		want         []int
	}{
		{16, 0, 25 * time.Millisecond, []int{16, 16, 8}},
		{16, 0, time.Microsecond, []int{16, 16, 8}}, // timed pieces would run the rest after 8
		{64, 0, time.Second, []int{40}},
		{16, -1, time.Second, []int{40}},
		{16, 24, time.Second, []int{24, 16}},
		{0, 0, 25 * time.Millisecond, []int{8, 32}},
	} {
		clock := &fakeClock{t: time.Unix(0, 0)}
		c := &fixedChunked{chunked: chunked{script: script{want: [][]int{{3, 4}}}, perToken: tc.perToken}, piece: tc.piece}
		c.clock = clock
		o := Options{MaxNewTokens: 2, Now: clock.now, NewDecoder: words.decoder, PrefillChunk: tc.chunk}
		if _, _, err := Run(context.Background(), c, [][]int{make([]int, 33)}, o); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.pieces, tc.want) {
			t.Errorf("piece %d, --prefill-chunk %d, %v a token: pieces %v, want %v", tc.piece, tc.chunk, tc.perToken, c.pieces, tc.want)
		}
	}
}

func TestCancelDuringPrefill(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := &fakeClock{t: time.Unix(0, 0)}
	c := &chunked{script: script{want: [][]int{{3, 4}}}, perToken: time.Second, onPiece: cancel}
	c.clock = clock
	res, _, err := Run(ctx, c, [][]int{make([]int, 100)}, Options{MaxNewTokens: 2, Now: clock.now, NewDecoder: words.decoder})
	if !errors.Is(err, errs.ErrInterrupted) || !strings.Contains(err.Error(), "8 of 104 prompt tokens") {
		t.Fatalf("err %v, want ErrInterrupted after the first piece", err)
	}
	if len(c.pieces) != 1 || res[0].FinishReason != FinishInterrupted || len(res[0].TokenIDs) != 0 {
		t.Errorf("pieces %v, result %+v", c.pieces, res[0])
	}
}

func TestCachedPromptExtends(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	c := &chunked{script: script{want: [][]int{{3, 4}}}}
	c.clock = clock
	c.Begin([][]int{{1}}, 1)
	res, m, err := Run(context.Background(), c, [][]int{{1, 3, 4, 5, 6}}, Options{MaxNewTokens: 2, Cached: 3, Now: clock.now, NewDecoder: words.decoder})
	if err != nil {
		t.Fatal(err)
	}
	if fmtInts(c.extended) != "[[5 6]]" || res[0].Text != "Hello" || m.PromptEvalCount != 2 || m.PromptCachedCount != 3 {
		t.Errorf("extended %v, text %q, metrics %+v", c.extended, res[0].Text, m)
	}
	if !slices.Equal(res[0].PromptTokenIDs, []int{1, 3, 4, 5, 6}) {
		t.Errorf("prompt ids %v", res[0].PromptTokenIDs)
	}
	// A runner that cannot extend is an error, not a silent full prefill.
	if _, _, err := Run(context.Background(), &script{want: [][]int{{3}}}, [][]int{{1, 3}}, Options{MaxNewTokens: 1, Cached: 1}); err == nil {
		t.Error("Cached on a plain runner: no error")
	}
}

func fmtInts(v [][]int) string { return fmt.Sprint(v) }

// argmaxScript is script with DecodeArgmax: the ids alone, each row's
// argmax of the logits Decode would give.
type argmaxScript struct {
	script
	argmaxCalls int
}

func (s *argmaxScript) DecodeArgmax(next []int) ([]int, error) {
	s.argmaxCalls++
	logits, err := s.Decode(next)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(logits))
	for b, row := range logits {
		ids[b] = sample.Argmax(row)
	}
	return ids, nil
}

// Greedy decoding with no logits processor asks an ArgmaxDecoder for the
// ids (every decode step), and gives the tokens the logits give; with a
// repetition penalty, sampling or a constraint it reads the logits.
func TestRunArgmaxDecoder(t *testing.T) {
	want := [][]int{{5, 6, 7, 8}, {9, 10, 11, 12}}
	prompts := [][]int{{1, 3}, {1, 3}}
	allow := func() Constraint { return allowAll{} }
	for _, c := range []struct {
		name   string
		o      Options
		argmax bool
	}{
		{"greedy", Options{}, true},
		{"greedy, penalty 1", Options{Sampling: sample.Options{RepetitionPenalty: 1}}, true},
		{"greedy, penalty 1.2", Options{Sampling: sample.Options{RepetitionPenalty: 1.2}}, false},
		{"greedy, presence penalty", Options{Sampling: sample.Options{PresencePenalty: 0.5}}, false},
		{"greedy, logit bias", Options{Sampling: sample.Options{LogitBias: map[int]float64{0: -1}}}, false},
		{"sampling", Options{Sampling: sample.Options{Temperature: 0.7, TopK: 1}}, false},
		{"constrained", Options{Constrain: allow}, false},
	} {
		s := &argmaxScript{script: script{want: want}}
		c.o.MaxNewTokens = 4
		res, _, err := Run(context.Background(), s, prompts, c.o)
		if err != nil {
			t.Fatal(err)
		}
		for b := range want {
			if !slices.Equal(res[b].TokenIDs, want[b]) {
				t.Errorf("%s row %d: %v, want %v", c.name, b, res[b].TokenIDs, want[b])
			}
		}
		if got := s.argmaxCalls == s.decodes && s.decodes > 0; got != c.argmax {
			t.Errorf("%s: %d of %d decode steps through DecodeArgmax, want all: %v", c.name, s.argmaxCalls, s.decodes, c.argmax)
		}
	}
}

// allowAll is a Constraint that allows every id.
type allowAll struct{}

func (allowAll) Allows(int) bool { return true }
func (allowAll) Mask() []uint64 {
	return []uint64{^uint64(0)} // the 16 ids of vocab
}
func (allowAll) Advance(int) error { return nil }

// ResolveWith stops at the tokenizer's end token besides the configs'
// (as vLLM), once, and not when there is none.
func TestResolveWithTokenizerEOS(t *testing.T) {
	gen := &config.Generation{EOSTokenID: []int{2}}
	for _, c := range []struct {
		gen    *config.Generation
		model  []int
		tokEOS int
		want   []int
	}{
		{gen, []int{9}, 7, []int{2, 7}},
		{gen, nil, 2, []int{2}},
		{nil, []int{9}, 7, []int{9, 7}},
		{nil, []int{9}, -1, []int{9}},
		{nil, nil, 7, []int{7}},
	} {
		o, err := ResolveWith(c.gen, c.model, c.tokEOS, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.EOS, c.want) {
			t.Errorf("%+v, model %v, tokenizer %d: EOS %v, want %v", c.gen, c.model, c.tokEOS, o.EOS, c.want)
		}
	}
	if !slices.Equal(gen.EOSTokenID, []int{2}) {
		t.Errorf("the config's list changed: %v", gen.EOSTokenID)
	}
}

// overrunning is a chunked runner whose first piece runs at least first
// tokens whatever it is asked (compile.State's first piece through a
// LongRoPE switch), and which reports what is left (PendingCounter).
type overrunning struct {
	chunked
	first int
}

func (c *overrunning) Pending() int { return c.pending }

func (c *overrunning) PrefillChunk(n int) ([][]float32, error) {
	if len(c.pieces) == 0 {
		n = min(max(n, c.first), c.pending)
	}
	return c.chunked.PrefillChunk(n)
}

// TestPrefillPiecesThatOverrun: when the runner runs more than the piece
// asked, progress counts what it ran and the next pieces ask only for what
// is left, so the prompt is not asked for past its end.
func TestPrefillPiecesThatOverrun(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	c := &overrunning{chunked: chunked{script: script{want: [][]int{{3, 4}}}}, first: 21}
	c.clock = clock
	var progress []int
	o := Options{MaxNewTokens: 2, PrefillChunk: 8, Now: clock.now, NewDecoder: words.decoder, OnPrefill: func(done, total int) { progress = append(progress, done) }}
	res, _, err := Run(context.Background(), c, [][]int{make([]int, 33)}, o)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Text != "Hello" || !slices.Equal(c.pieces, []int{21, 8, 8, 3}) || !slices.Equal(progress, []int{21, 29, 37, 40}) {
		t.Errorf("text %q, pieces %v, progress %v", res[0].Text, c.pieces, progress)
	}
}

// switching is a chunked runner that reports a LongRoPE switch.
type switching struct {
	chunked
	sw int
}

func (c *switching) RopeSwitch() int { return c.sw }

// TestCacheDroppedPastSwitch: a continuation whose prompt runs past the
// model's rotary switch while the cache holds no more than it is
// prefilled whole (Begin, no Extend), as transformers runs the sequence in
// one forward; one whose cache is already past the switch, or that stays
// under it, continues the cache.
func TestCacheDroppedPastSwitch(t *testing.T) {
	for _, c := range []struct {
		sw, cached, prompt int
		extends            bool
	}{
		{sw: 16, cached: 10, prompt: 20, extends: false}, // crosses: prefilled whole
		{sw: 16, cached: 10, prompt: 14, extends: true},  // stays under the switch
		{sw: 16, cached: 18, prompt: 30, extends: true},  // the cache is already past it
		{sw: 0, cached: 10, prompt: 30, extends: true},   // no switch
	} {
		r := &switching{chunked: chunked{script: script{want: [][]int{{3, 4}}}}, sw: c.sw}
		r.clock = &fakeClock{t: time.Unix(0, 0)}
		r.pos, r.fed = []int{0}, [][]int{nil} // as a previous Run left them
		o := Options{MaxNewTokens: 2, Cached: c.cached, Now: r.clock.now, NewDecoder: words.decoder}
		_, m, err := Run(context.Background(), r, [][]int{make([]int, c.prompt)}, o)
		if err != nil {
			t.Fatal(err)
		}
		if extended := r.extended != nil; extended != c.extends || (m.PromptCachedCount > 0) != c.extends {
			t.Errorf("switch %d, cache %d, prompt %d: extended %v (cached count %d), want %v", c.sw, c.cached, c.prompt, extended, m.PromptCachedCount, c.extends)
		}
	}
}
