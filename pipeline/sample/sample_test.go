package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func logitsOf(probs ...float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		out[i] = float32(math.Log(p))
	}
	return out
}

// frequencies draws n tokens and returns how often each came up.
func frequencies(o Options, logits []float32, n int) []float64 {
	s := New(o, 0)
	f := make([]float64, len(logits))
	for range n {
		f[s.Next(logits, nil)]++
	}
	for i := range f {
		f[i] /= float64(n)
	}
	return f
}

func TestGreedyAndRepetitionPenalty(t *testing.T) {
	logits := []float32{2, 1.9, -1, -0.5}
	if got := New(Options{}, 0).Next(logits, nil); got != 0 {
		t.Fatalf("greedy: got %d, want 0", got)
	}
	// 2/1.1 = 1.82 < 1.9: the repeated token loses.
	if got := New(Options{RepetitionPenalty: 1.1}, 0).Next(logits, []int{0, 0}); got != 1 {
		t.Fatalf("penalized greedy: got %d, want 1", got)
	}
	// Negative logits are multiplied: -0.5*3 = -1.5 < -1.
	if got := New(Options{RepetitionPenalty: 3}, 0).Next([]float32{-1, -0.5}, []int{1}); got != 0 {
		t.Fatalf("penalty on a negative logit: got %d, want 0", got)
	}
	// The logits passed in are not modified.
	if logits[0] != 2 {
		t.Fatalf("Next modified its input: %v", logits)
	}
}

func TestTemperatureOneMatchesSoftmax(t *testing.T) {
	f := frequencies(Options{Temperature: 1, Seed: 7}, logitsOf(0.1, 0.2, 0.7), 40000)
	for i, want := range []float64{0.1, 0.2, 0.7} {
		if math.Abs(f[i]-want) > 0.01 {
			t.Errorf("token %d: frequency %.3f, want %.3f", i, f[i], want)
		}
	}
}

func TestTemperatureSharpens(t *testing.T) {
	// p^(1/0.5) renormalized: 0.01, 0.04, 0.49 -> /0.54.
	f := frequencies(Options{Temperature: 0.5, Seed: 1}, logitsOf(0.1, 0.2, 0.7), 40000)
	for i, want := range []float64{0.01 / 0.54, 0.04 / 0.54, 0.49 / 0.54} {
		if math.Abs(f[i]-want) > 0.01 {
			t.Errorf("token %d: frequency %.3f, want %.3f", i, f[i], want)
		}
	}
}

func TestTopK(t *testing.T) {
	f := frequencies(Options{Temperature: 1, TopK: 2, Seed: 3}, logitsOf(0.1, 0.2, 0.3, 0.4), 20000)
	if f[0] != 0 || f[1] != 0 {
		t.Fatalf("top-k 2 drew a token outside the top 2: %v", f)
	}
	if math.Abs(f[3]-0.4/0.7) > 0.015 {
		t.Errorf("top-k renormalization: %v", f)
	}
	// Ties with the k-th value are kept.
	f = frequencies(Options{Temperature: 1, TopK: 1, Seed: 3}, []float32{1, 1, 0}, 2000)
	if f[0] == 0 || f[1] == 0 || f[2] != 0 {
		t.Errorf("top-k 1 with a tie: %v", f)
	}
}

func TestTopP(t *testing.T) {
	// Ascending 0.05, 0.15 (cumulative 0.2 <= 0.3): dropped; 0.3 kept.
	f := frequencies(Options{Temperature: 1, TopP: 0.7, Seed: 5}, logitsOf(0.5, 0.3, 0.15, 0.05), 20000)
	if f[2] != 0 || f[3] != 0 {
		t.Fatalf("top-p 0.7 kept unlikely tokens: %v", f)
	}
	if math.Abs(f[0]-0.625) > 0.015 {
		t.Errorf("top-p renormalization: %v", f)
	}
	// A tiny top-p keeps only the most likely token.
	f = frequencies(Options{Temperature: 1, TopP: 0.01, Seed: 5}, logitsOf(0.5, 0.3, 0.2), 1000)
	if f[0] != 1 {
		t.Errorf("top-p 0.01: %v", f)
	}
}

func TestMinP(t *testing.T) {
	// min_p 0.5 of 0.5 = 0.25: drops 0.15 and 0.05.
	f := frequencies(Options{Temperature: 1, MinP: 0.5, Seed: 9}, logitsOf(0.5, 0.3, 0.15, 0.05), 20000)
	if f[2] != 0 || f[3] != 0 || f[1] == 0 {
		t.Fatalf("min-p 0.5: %v", f)
	}
}

func TestOrderTemperatureBeforeTopP(t *testing.T) {
	// Temperature 0.5 first turns (0.5, 0.3, 0.2) into (0.66, 0.24, 0.105);
	// top-p 0.85 then drops only the last one (0.105 <= 0.15). In the
	// opposite order top-p would have kept all three (0.2 > 0.15).
	f := frequencies(Options{Temperature: 0.5, TopP: 0.85, Seed: 11}, logitsOf(0.5, 0.3, 0.2), 20000)
	if f[2] != 0 {
		t.Fatalf("token 2 survived top-p after temperature: %v", f)
	}
}

func TestSeedReproducible(t *testing.T) {
	o := Options{Temperature: 1, Seed: 42}
	logits := logitsOf(0.2, 0.2, 0.2, 0.2, 0.2)
	run := func(row int) []int {
		s := New(o, row)
		var out []int
		for range 50 {
			out = append(out, s.Next(logits, nil))
		}
		return out
	}
	if !slices.Equal(run(0), run(0)) {
		t.Fatal("same seed and row gave different draws")
	}
	if slices.Equal(run(0), run(1)) {
		t.Fatal("rows share one stream")
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.IntN(50)
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r.IntN(10)) // many ties
		}
		k := 1 + r.IntN(n)
		sorted := append([]float64(nil), v...)
		sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
		if got := kthLargest(v, k); got != sorted[k-1] {
			t.Fatalf("trial %d: kthLargest(k=%d) = %v, want %v", trial, k, got, sorted[k-1])
		}
	}
}

// OpenAI's presence and frequency penalties count the generated tokens
// only (history after SetPromptLen), and the logit bias moves the logits
// of its ids: each changes the greedy pick.
func TestPresenceFrequencyPenaltiesAndLogitBias(t *testing.T) {
	logits := []float32{3, 2.5, 1, 0}
	history := []int{0, 1, 0, 0} // prompt {0, 1}, then token 0 twice
	next := func(o Options, prompt int) int {
		s := New(o, 0)
		s.SetPromptLen(prompt)
		return s.Next(logits, history)
	}
	for _, c := range []struct {
		name   string
		o      Options
		prompt int
		want   int
	}{
		{"none", Options{}, 2, 0},
		// 3 - 0.4 = 2.6 > 2.5: presence alone does not move it...
		{"presence 0.4", Options{PresencePenalty: 0.4}, 2, 0},
		// ...0.6 does (token 1 is the prompt's: not penalized).
		{"presence 0.6", Options{PresencePenalty: 0.6}, 2, 1},
		// 3 - 2*0.3 = 2.4 < 2.5: frequency counts both times.
		{"frequency 0.3", Options{FrequencyPenalty: 0.3}, 2, 1},
		// With the whole history generated, token 1 is penalized too:
		// 3 - 3*0.3 = 2.1, 2.5 - 0.3 = 2.2.
		{"frequency 0.3, no prompt", Options{FrequencyPenalty: 0.3}, 0, 1},
		// Token 1 counted too, 2.5 - 0.6 < 3 - 0.6: the prompt decides.
		{"presence 0.6, no prompt", Options{PresencePenalty: 0.6}, 0, 0},
		// The bias drops token 0 below token 1 (3 - 1 = 2 < 2.5); a
		// negative penalty raises it back (2 + 2 = 4, 2 + 2*0.8 = 3.6).
		{"bias -1", Options{LogitBias: map[int]float64{0: -1}}, 2, 1},
		{"negative presence", Options{PresencePenalty: -2, LogitBias: map[int]float64{0: -1}}, 2, 0},
		{"negative frequency", Options{FrequencyPenalty: -0.8, LogitBias: map[int]float64{0: -1}}, 2, 0},
		{"bias", Options{LogitBias: map[int]float64{3: 3.5}}, 2, 3},
		{"bias -100", Options{LogitBias: map[int]float64{0: -100, 99: 5}}, 2, 1},
		{"sampling, bias 100", Options{Temperature: 1, LogitBias: map[int]float64{2: 100}}, 2, 2},
	} {
		if got := next(c.o, c.prompt); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
		if c.name != "none" && c.o.ArgmaxOnly() {
			t.Errorf("%s: ArgmaxOnly, yet the logits are processed", c.name)
		}
	}
	if logits[0] != 3 {
		t.Fatalf("Next modified its input: %v", logits)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1}, {RepetitionPenalty: -2},
		{PresencePenalty: 2.5}, {FrequencyPenalty: -3}, {PresencePenalty: math.NaN()}, {LogitBias: map[int]float64{1: 101}}, {LogitBias: map[int]float64{-1: 1}}} {
		if o.Validate() == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if err := (Options{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1, PresencePenalty: -2, FrequencyPenalty: 2, LogitBias: map[int]float64{5: -100}}).Validate(); err != nil {
		t.Error(err)
	}
}

// setConstraint allows the ids of a set and counts mask requests.
type setConstraint struct {
	allowed map[int]bool
	masks   int
}

func (c *setConstraint) Allows(id int) bool { return c.allowed[id] }

func (c *setConstraint) Mask() []uint64 {
	c.masks++
	m := make([]uint64, 1)
	for id := range c.allowed {
		m[id/64] |= 1 << (id % 64)
	}
	return m
}

// Greedy under a constraint: the argmax when allowed (no mask asked),
// else the best allowed id.
func TestGreedyConstrained(t *testing.T) {
	logits := []float32{2, 1.9, -1, -0.5}
	c := &setConstraint{allowed: map[int]bool{0: true, 2: true}}
	if got := New(Options{}, 0).NextAllowed(logits, nil, c); got != 0 || c.masks != 0 {
		t.Fatalf("allowed argmax: got %d with %d masks", got, c.masks)
	}
	c = &setConstraint{allowed: map[int]bool{2: true, 3: true}}
	if got := New(Options{}, 0).NextAllowed(logits, nil, c); got != 3 || c.masks != 1 {
		t.Fatalf("masked argmax: got %d with %d masks, want 3", got, c.masks)
	}
}

// Sampling under a constraint draws from the distribution renormalised
// over the allowed ids, top-p applied after the mask.
func TestSamplingConstrained(t *testing.T) {
	logits := logitsOf(0.5, 0.2, 0.2, 0.1)
	c := &setConstraint{allowed: map[int]bool{1: true, 3: true}}
	s := New(Options{Temperature: 1, Seed: 5}, 0)
	f := make([]float64, 4)
	const n = 40000
	for range n {
		f[s.NextAllowed(logits, nil, c)]++
	}
	if f[0] != 0 || f[2] != 0 {
		t.Fatalf("disallowed ids drawn: %v", f)
	}
	if p := f[1] / n; math.Abs(p-2.0/3) > 0.01 {
		t.Errorf("p(1) = %.3f, want 2/3", p)
	}
	// top-p 0.6 over the allowed ids keeps id 1 alone (2/3 >= 0.6).
	s = New(Options{Temperature: 1, TopP: 0.6, Seed: 5}, 0)
	for range 200 {
		if got := s.NextAllowed(logits, nil, c); got != 1 {
			t.Fatalf("top-p after the mask: drew %d", got)
		}
	}
}

// Argmax takes the smallest index of a tie and the first NaN, as
// torch.argmax and the backends' ArgMax do; greedy sampling follows it.
func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{-1, -1}, 0},
		{[]float32{1, nan, 5, nan}, 1},
		{[]float32{nan, 9}, 0},
		{[]float32{float32(math.Inf(-1)), -3}, 1},
		{nil, 0},
	} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
		if len(c.x) > 0 {
			if got := New(Options{}, 0).Next(c.x, nil); got != c.want {
				t.Errorf("greedy Next(%v) = %d, want %d", c.x, got, c.want)
			}
		}
	}
}

// TestNextDraftExact: with a draft token, sampling still draws each token
// with its probability under the processed distribution (speculative
// sampling's acceptance rule for a draft of probability 1): the
// frequencies of 200,000 draws match softmax's within 5 standard
// deviations, for a likely draft, an unlikely one and one top-k removed
// (never drawn); greedy decoding takes the draft only where it is the
// argmax.
func TestNextDraftExact(t *testing.T) {
	logits := []float32{2, 1, 0, -1}
	for _, c := range []struct {
		o     Options
		draft int
		want  []float64
	}{
		{Options{Temperature: 1, RepetitionPenalty: 1}, 0, softmax64(logits)},
		{Options{Temperature: 1, RepetitionPenalty: 1}, 3, softmax64(logits)},
		{Options{Temperature: 0.7, TopK: 2, RepetitionPenalty: 1}, 3, append(softmax64([]float32{2 / 0.7, 1 / 0.7}), 0, 0)},
	} {
		s := New(c.o, 0)
		const n = 200000
		counts := make([]float64, len(logits))
		for range n {
			counts[s.NextDraft(logits, nil, nil, c.draft)]++
		}
		for i, p := range c.want {
			sd := math.Sqrt(p * (1 - p) / n)
			if got := counts[i] / n; math.Abs(got-p) > 5*sd+1e-9 {
				t.Errorf("%+v draft %d: token %d drawn %.4f of the time, want %.4f", c.o, c.draft, i, got, p)
			}
		}
	}
	g := New(Options{RepetitionPenalty: 1}, 0)
	if g.NextDraft(logits, nil, nil, 1) != 0 || g.NextDraft(logits, nil, nil, 0) != 0 {
		t.Error("greedy: the argmax, whatever the draft")
	}
}

func softmax64(l []float32) []float64 {
	p := make([]float64, len(l))
	var sum float64
	for i, v := range l {
		p[i] = math.Exp(float64(v))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// TestNextDraftFromExact: a draft drawn from a draft model's distribution
// q and taken or replaced by NextDraftFrom's rule gives tokens drawn from
// the model's processed distribution p, whatever q: one equal to p (every
// draft taken), one close, one far, one that misses p's likeliest token,
// one shorter than the vocabulary, and under top-k; and Distribution is
// the distribution Next draws from.
func TestNextDraftFromExact(t *testing.T) {
	logits := []float32{2, 1, 0, -1, 0.5}
	p := softmax64(logits)
	for _, c := range []struct {
		name string
		o    Options
		q    []float64
		want []float64
	}{
		{"q=p", Options{Temperature: 1, RepetitionPenalty: 1}, p, p},
		{"close", Options{Temperature: 1, RepetitionPenalty: 1}, []float64{0.5, 0.2, 0.1, 0.05, 0.15}, p},
		{"far", Options{Temperature: 1, RepetitionPenalty: 1}, []float64{0.02, 0.03, 0.05, 0.8, 0.1}, p},
		{"misses the top", Options{Temperature: 1, RepetitionPenalty: 1}, []float64{0, 0.5, 0.5, 0, 0}, p},
		{"short", Options{Temperature: 1, RepetitionPenalty: 1}, []float64{0.3, 0.7}, p},
		{"top-k", Options{Temperature: 0.7, TopK: 2, RepetitionPenalty: 1}, []float64{0.2, 0.2, 0.2, 0.2, 0.2},
			append(softmax64([]float32{2 / 0.7, 1 / 0.7}), 0, 0, 0)},
	} {
		s := New(c.o, 0)
		drafter := New(Options{Temperature: 1, Seed: 7}, 1)
		const n = 200000
		counts := make([]float64, len(logits))
		taken := 0
		for range n {
			d := drafter.Draw(c.q)
			id := s.NextDraftFrom(logits, nil, nil, d, c.q)
			counts[id]++
			if id == d {
				taken++
			}
		}
		for i, w := range c.want {
			sd := math.Sqrt(w * (1 - w) / n)
			if got := counts[i] / n; math.Abs(got-w) > 5*sd+1e-9 {
				t.Errorf("%s: token %d drawn %.4f of the time, want %.4f", c.name, i, got, w)
			}
		}
		// Drafts are taken with probability Σ min(p, q).
		var accept float64
		for i, w := range c.want {
			accept += min(w, qAt(c.q, i))
		}
		if sd := math.Sqrt(accept * (1 - accept) / n); math.Abs(float64(taken)/n-accept) > 5*sd+1e-9 {
			t.Errorf("%s: drafts taken %.4f of the time, want %.4f", c.name, float64(taken)/n, accept)
		}
	}
	// Distribution: the processed probabilities, or the argmax greedy.
	q := make([]float64, len(logits))
	New(Options{Temperature: 0.7, TopK: 2, RepetitionPenalty: 1}, 0).Distribution(q, logits, nil)
	want := append(softmax64([]float32{2 / 0.7, 1 / 0.7}), 0, 0, 0)
	for i := range q {
		if math.Abs(q[i]-want[i]) > 1e-6 {
			t.Errorf("Distribution: %v, want %v", q, want)
			break
		}
	}
	New(Options{RepetitionPenalty: 3}, 0).Distribution(q, logits, []int{0})
	if q[1] != 1 {
		t.Errorf("greedy Distribution with token 0 penalized: %v, want all on token 1", q)
	}
}

// TestNextDraftFromOdd: a q longer than the model's vocabulary (mass on
// ids it does not have), one holding NaN, and a draft q could not have
// drawn still give tokens of p.
func TestNextDraftFromOdd(t *testing.T) {
	logits := []float32{2, 1, 0, -1}
	p := softmax64(logits)
	nan := math.NaN()
	for _, c := range []struct {
		name string
		q    []float64
		draw func(*Sampler) int
	}{
		{"longer", []float64{0.1, 0.1, 0.1, 0.1, 0.3, 0.3}, nil},
		{"nan", []float64{nan, nan, nan, nan}, func(*Sampler) int { return 3 }},
		{"q(draft) 0", []float64{0, 0.5, 0.5, 0}, func(*Sampler) int { return 0 }},
	} {
		s := New(Options{Temperature: 1, RepetitionPenalty: 1}, 0)
		drafter := New(Options{Temperature: 1, Seed: 7}, 1)
		const n = 200000
		counts := make([]float64, len(logits))
		for range n {
			d := 0
			if c.draw != nil {
				d = c.draw(drafter)
			} else {
				d = drafter.Draw(c.q)
			}
			counts[s.NextDraftFrom(logits, nil, nil, d, c.q)]++
		}
		for i, w := range p {
			sd := math.Sqrt(w * (1 - w) / n)
			if got := counts[i] / n; math.Abs(got-w) > 5*sd+1e-9 {
				t.Errorf("%s: token %d drawn %.4f of the time, want %.4f", c.name, i, got, w)
			}
		}
	}
}
