package compile

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/serve"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// bertLoaded writes a tiny BERT-family checkpoint of c with weights from
// seed and returns it loaded (closed with the test) and its folder.
func bertLoaded(t *testing.T, c bertref.Config, seed uint64) (*lm.Loaded, string) {
	t.Helper()
	dir := t.TempDir()
	if err := bertref.Write(dir, c, seed); err != nil {
		t.Fatal(err)
	}
	return loadDir(t, dir), dir
}

// bertRunner writes a tiny BERT checkpoint of c and returns its Runner
// on the cpu backend, closed with the test, and its folder.
func bertRunner(t *testing.T, c bertref.Config) (*Runner, string) {
	t.Helper()
	l, dir := bertLoaded(t, c, 5)
	r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, dir
}

// TestEncoderEngine: an Encoder is the server's engine of an encoder: one
// row that never holds a sequence, any inputs embedded together 8 at a
// time, no prefix cache, and every generating method EncoderError
// (ErrUnsupported) directly and through serve.Adapt; Embed gives the
// reference encoder's pooled hidden states, through the scheduler too (a
// request of more inputs than a group), and refuses inputs beyond its
// context.
func TestEncoderEngine(t *testing.T) {
	c := bertref.Config{Vocab: 48, Hidden: 16, Layers: 2, Heads: 2, Intermediate: 24, MaxPositions: 20, TypeVocab: 2, Eps: 1e-12}
	r, dir := bertRunner(t, c)
	enc, err := NewEncoder(r, EncoderOptions{Pooling: PoolMean, MaxContext: 16})
	if err != nil {
		t.Fatal(err)
	}
	if enc.MaxContext() != 16 {
		t.Errorf("MaxContext %d, want 16", enc.MaxContext())
	}
	eng := serve.Adapt(enc)
	if eng.Slots() != 1 || eng.Rows() != 1 || eng.RowBucket(5) != 1 {
		t.Errorf("slots %d, rows %d, RowBucket(5) %d: want 1 row", eng.Slots(), eng.Rows(), eng.RowBucket(5))
	}
	if eng.MaxPrefill() != 8 {
		t.Errorf("MaxPrefill %d, want 8", eng.MaxPrefill())
	}
	k1, most := eng.PrefillGroup([]int{5, 6})
	k2, _ := eng.PrefillGroup(make([]int, 15))
	if k1 != k2 || most != 8 {
		t.Errorf("PrefillGroup: keys %d and %d, most %d: want one key, 8", k1, k2, most)
	}
	if eng.KeepsPrefixes() || eng.Saving(40, 32) != 0 {
		t.Error("an encoder keeps no prefixes")
	}
	for _, from := range [][]int{{-1}, {0}} {
		if err := eng.Relayout(from); err != nil {
			t.Errorf("Relayout(%v): %v", from, err)
		}
	}
	for _, from := range [][]int{{0, -1}, {1}, nil} {
		if err := eng.Relayout(from); err == nil {
			t.Errorf("Relayout(%v): no error", from)
		}
	}
	eng.Free(0)
	unsupported := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "is an encoder") {
			t.Errorf("%s: %v, want EncoderError", what, err)
		}
	}
	p, err := eng.StartPrefill([][]int{{5, 6}})
	unsupported("StartPrefill", err)
	if p != nil {
		t.Errorf("StartPrefill gave a prefill %v", p)
	}
	_, err = eng.Decode([]int{0}, []int{5})
	unsupported("Decode", err)
	unsupported("Insert", enc.Insert(nil, 0, 0))
	_, err = enc.Keep(nil, 0)
	unsupported("Keep", err)
	_, err = enc.StartPrefillFrom([]int{5}, nil)
	unsupported("StartPrefillFrom", err)

	rng := rand.New(rand.NewPCG(1, 2))
	var prompts [][]int
	for _, n := range []int{3, 16, 1, 7, 9, 2, 12, 5, 4, 11} {
		p := make([]int, n)
		for i := range p {
			p[i] = 5 + rng.IntN(c.Vocab-5)
		}
		prompts = append(prompts, p)
	}
	check := func(what string, got [][]float32) {
		t.Helper()
		if len(got) != len(prompts) {
			t.Fatalf("%s: %d vectors for %d inputs", what, len(got), len(prompts))
		}
		for i, p := range prompts {
			h, err := bertref.Forward(dir, c, p)
			if err != nil {
				t.Fatal(err)
			}
			want := bertref.Pool(h, "mean", false)
			if len(got[i]) != c.Hidden {
				t.Fatalf("%s: input %d: %d values, want %d", what, i, len(got[i]), c.Hidden)
			}
			for j, x := range got[i] {
				if d := math.Abs(float64(x) - want[j]); d > 2e-5 {
					t.Fatalf("%s: input %d, value %d differs from the reference by %.3g", what, i, j, d)
				}
			}
		}
	}
	got, err := eng.Embed(prompts[:8])
	if err != nil {
		t.Fatal(err)
	}
	rest, err := eng.Embed(prompts[8:])
	if err != nil {
		t.Fatal(err)
	}
	check("Embed", append(got, rest...))

	// Through the scheduler, in groups of MaxPrefill.
	sched := serve.New(eng, serve.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	got, err = sched.Embed(context.Background(), prompts)
	if err != nil {
		t.Fatal(err)
	}
	check("Scheduler.Embed", got)

	// Beyond the context, or nothing: usage errors.
	if _, err := eng.Embed([][]int{make([]int, 17)}); !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "context of 16") {
		t.Errorf("an input of 17 tokens: %v, want a usage error naming the context of 16", err)
	}
	if _, err := eng.Embed([][]int{{5}, {}}); !errors.Is(err, errs.ErrUsage) {
		t.Errorf("an empty input: %v, want a usage error", err)
	}
	if _, err := eng.Embed(nil); err == nil {
		t.Error("no inputs: no error")
	}
}

// TestNewEncoderRefuses: NewEncoder takes an encoder's Runner only, and a
// context within the model's positions.
func TestNewEncoderRefuses(t *testing.T) {
	if _, err := NewEncoder(storiesRunner(t), EncoderOptions{}); !errors.Is(err, errs.ErrUsage) || !strings.Contains(err.Error(), "not an encoder") {
		t.Errorf("NewEncoder on a causal model: %v, want a usage error saying it is not an encoder", err)
	}
	r, _ := bertRunner(t, bertref.Config{Vocab: 40, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12})
	for _, n := range []int{-1, 17} {
		_, err := NewEncoder(r, EncoderOptions{MaxContext: n})
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != "MaxContext" || oe.Value != n || !errors.Is(err, errs.ErrUsage) {
			t.Errorf("MaxContext %d: %v, want an OptionError for MaxContext", n, err)
		}
	}
	enc, err := NewEncoder(r, EncoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if enc.MaxContext() != 16 {
		t.Errorf("MaxContext %d, want the model's 16 positions", enc.MaxContext())
	}
}

// TestEncoderScores: an Encoder with Scores over a cross-encoder
// (BertForSequenceClassification, one label) gives through Embed, and
// through the scheduler in groups of 8, each pair's classifier logit as
// Runner.Score gives it: the reference's (bertref.Score), for pairs whose
// second text's ids carry type 1 (id + VocabSize); NewEncoder refuses
// Scores for an encoder without a classification head.
func TestEncoderScores(t *testing.T) {
	c := bertref.Config{Vocab: 48, Hidden: 16, Layers: 2, Heads: 2, Intermediate: 24, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	r, dir := bertRunner(t, c)
	enc, err := NewEncoder(r, EncoderOptions{Scores: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var inputs [][]int
	var want []float64
	for _, n := range [][2]int{{3, 9}, {1, 1}, {12, 10}, {5, 2}, {2, 7}, {4, 4}, {8, 1}, {1, 15}, {6, 6}, {3, 3}} {
		var ids, types, in []int
		for part, k := range n {
			for range k {
				id := 5 + rng.IntN(c.Vocab-5)
				ids, types, in = append(ids, id), append(types, part), append(in, id+part*c.Vocab)
			}
		}
		s, err := bertref.Score(dir, c, ids, types)
		if err != nil {
			t.Fatal(err)
		}
		inputs, want = append(inputs, in), append(want, s[0])
	}
	check := func(what string, got [][]float32) {
		t.Helper()
		if len(got) != len(inputs) {
			t.Fatalf("%s: %d results for %d inputs", what, len(got), len(inputs))
		}
		for i, g := range got {
			if len(g) != 1 {
				t.Fatalf("%s: input %d: %d scores, want 1 (the one label's logit)", what, i, len(g))
			}
			if d := math.Abs(float64(g[0]) - want[i]); d > 2e-5 {
				t.Errorf("%s: input %d: %v, want the reference's %v", what, i, g[0], want[i])
			}
		}
	}
	got, err := enc.Embed(inputs[:8])
	if err != nil {
		t.Fatal(err)
	}
	rest, err := enc.Embed(inputs[8:])
	if err != nil {
		t.Fatal(err)
	}
	check("Embed", append(got, rest...))

	sched := serve.New(serve.Adapt(enc), serve.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	got, err = sched.Embed(context.Background(), inputs)
	if err != nil {
		t.Fatal(err)
	}
	check("Scheduler.Embed", got)

	// Without a head there is nothing to score with.
	plain, _ := bertRunner(t, bertref.Config{Vocab: 40, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12})
	if _, err := NewEncoder(plain, EncoderOptions{Scores: true}); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "no classification head") {
		t.Errorf("Scores on an encoder without a head: %v, want ErrUnsupported naming the missing classification head", err)
	}
}
