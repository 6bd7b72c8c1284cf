package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
)

// cacheModel is a fake model with a cache: the tokens fed so far. Its
// logits after them favour next(last two tokens), so its greedy text
// falls into loops that prompt lookup finds, and a wrong cache (a rewind
// of the wrong length) changes what follows. As a Speculator it checks
// that DecodeMany stays within Room.
type cacheModel struct {
	t        *testing.T
	vocab    int
	fed      []int
	room     int // the most tokens fed in all (prompt included)
	many     int // DecodeMany calls
	rewinds  int
	noRewind bool
	// nextFn, when set, replaces next's rule (a draft model's); nan
	// makes every logit NaN (a broken draft model).
	nextFn func(a, b int) int
	nan    bool
}

func (c *cacheModel) next(a, b int) int {
	if c.nextFn != nil {
		return c.nextFn(a, b)
	}
	return 3 + (a*7+b*3)%9
}

func (c *cacheModel) after() []float32 {
	l := make([]float32, c.vocab)
	if c.nan {
		for i := range l {
			l[i] = float32(math.NaN())
		}
		return l
	}
	n := len(c.fed)
	l[c.next(c.fed[max(0, n-2)], c.fed[n-1])] = 5
	l[(c.fed[n-1]+1)%c.vocab] += 1 // a runner-up
	return l
}

func (c *cacheModel) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	c.fed = slices.Clone(prompts[0])
	c.room = len(prompts[0]) + maxNew + 2
	return [][]float32{c.after()}, nil
}

func (c *cacheModel) Decode(next []int) ([][]float32, error) {
	c.fed = append(c.fed, next[0])
	if len(c.fed) > c.room {
		c.t.Errorf("fed %d tokens, room for %d", len(c.fed), c.room)
	}
	return [][]float32{c.after()}, nil
}

func (c *cacheModel) Speculates() bool { return !c.noRewind }
func (c *cacheModel) Rewindable() bool { return !c.noRewind }
func (c *cacheModel) Room() int        { return c.room - len(c.fed) }

func (c *cacheModel) DecodeMany(tokens []int) ([][]float32, error) {
	if len(tokens) > c.Room() {
		c.t.Errorf("DecodeMany of %d tokens with room for %d", len(tokens), c.Room())
	}
	c.many++
	var out [][]float32
	for _, id := range tokens {
		c.fed = append(c.fed, id)
		out = append(out, c.after())
	}
	return out, nil
}

func (c *cacheModel) Rewind(n int) error {
	if n < 0 || n > len(c.fed) {
		return fmt.Errorf("rewind %d of %d", n, len(c.fed))
	}
	c.rewinds++
	c.fed = c.fed[:len(c.fed)-n]
	return nil
}

// TestSpeculateSameTokens: with prompt lookup the tokens are those
// decoding one at a time gives, for drafts of 1 to 8 tokens, n-grams of 1
// to 3, budgets that end inside a confirmed draft, an end-of-sequence
// token and a stop string, and a repetition penalty (whose history grows
// inside a step); the loops are found (most drafts confirmed), and the
// cache ends holding every generated token but the last, as Options.Cached
// expects of the next Run.
func TestSpeculateSameTokens(t *testing.T) {
	prompt := []int{1, 4, 5}
	for _, c := range []struct {
		k, ngram, maxNew int
		eos              []int
		penalty          float64
	}{
		{4, 3, 40, nil, 0}, {1, 1, 40, nil, 0}, {8, 2, 37, nil, 0}, {5, 3, 13, nil, 0},
		{4, 3, 60, []int{11}, 0}, {3, 2, 50, nil, 1.3},
	} {
		name := fmt.Sprintf("k%d/n%d/max%d/eos%v/pen%v", c.k, c.ngram, c.maxNew, c.eos, c.penalty)
		run := func(speculate int) ([]Result, Metrics, *cacheModel) {
			m := &cacheModel{t: t, vocab: 16}
			o := Options{MaxNewTokens: c.maxNew, EOS: c.eos, Speculate: speculate, SpeculateNgram: c.ngram,
				Sampling: sample.Options{RepetitionPenalty: 1}}
			if c.penalty > 0 {
				o.Sampling.RepetitionPenalty = c.penalty
			}
			res, met, err := Run(context.Background(), m, [][]int{prompt}, o)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return res, met, m
		}
		want, _, _ := run(0)
		got, met, m := run(c.k)
		if !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) || got[0].FinishReason != want[0].FinishReason {
			t.Errorf("%s: speculating gave %v (%s), one at a time %v (%s)", name, got[0].TokenIDs, got[0].FinishReason, want[0].TokenIDs, want[0].FinishReason)
		}
		if m.many == 0 || met.DraftTokens == 0 {
			t.Errorf("%s: no draft was proposed", name)
		}
		if met.DraftAccepted > met.DraftTokens || met.EvalCount != len(got[0].TokenIDs) {
			t.Errorf("%s: metrics %+v for %d tokens", name, met, len(got[0].TokenIDs))
		}
		if c.penalty == 0 && c.eos == nil && c.maxNew >= 37 && 2*met.DraftAccepted < met.DraftTokens {
			t.Errorf("%s: %d of %d drafted tokens accepted in a looping text", name, met.DraftAccepted, met.DraftTokens)
		}
		ids := got[0].TokenIDs
		if wantFed := append(slices.Clone(prompt), ids[:len(ids)-1]...); !slices.Equal(m.fed, wantFed) {
			t.Errorf("%s: the cache holds %v, want the prompt and every generated token but the last %v", name, m.fed, wantFed)
		}
	}
}

// TestSpeculateOnlyWhereItCan: several prompts and a runner that cannot
// be taken back decode one token at a time.
func TestSpeculateOnlyWhereItCan(t *testing.T) {
	for _, c := range []struct {
		name     string
		prompts  [][]int
		temp     float64
		noRewind bool
	}{
		{"two prompts", [][]int{{1, 4, 5}, {1, 4, 5}}, 0, false},
		{"not rewindable", [][]int{{1, 4, 5}}, 0, true},
	} {
		m := &cacheModel{t: t, vocab: 16, noRewind: c.noRewind}
		var r Stepper = m
		if len(c.prompts) > 1 {
			r = &batchOfCache{m}
		}
		_, met, err := Run(context.Background(), r, c.prompts, Options{MaxNewTokens: 20, Speculate: 4, Sampling: sample.Options{Temperature: c.temp, RepetitionPenalty: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if m.many != 0 || met.DraftTokens != 0 {
			t.Errorf("%s: speculated (%d DecodeMany calls)", c.name, m.many)
		}
	}
}

// fixedCache is a cacheModel on an XLA-like device (FixedSteps).
type fixedCache struct {
	*cacheModel
	lens []int // the lengths DecodeMany was fed, in order
}

func (f *fixedCache) FixedSteps() bool { return true }

func (f *fixedCache) DecodeMany(tokens []int) ([][]float32, error) {
	f.lens = append(f.lens, len(tokens))
	return f.cacheModel.DecodeMany(tokens)
}

// TestSpeculateFixedShapes: where new shapes are costly, every
// speculative step feeds 1+Speculate tokens (with less room left, none
// speculates), and the tokens are still those of one at a time.
func TestSpeculateFixedShapes(t *testing.T) {
	o := Options{MaxNewTokens: 40, Sampling: sample.Options{RepetitionPenalty: 1}}
	want, _, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixedCache{cacheModel: &cacheModel{t: t, vocab: 16}}
	o.Speculate = 5
	got, _, err := Run(context.Background(), f, [][]int{{1, 4, 5}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
		t.Errorf("fixed shapes gave %v, one at a time %v", got[0].TokenIDs, want[0].TokenIDs)
	}
	if len(f.lens) < 2 {
		t.Fatalf("%d speculative steps", len(f.lens))
	}
	for _, n := range f.lens { // near the end, no speculative step at all
		if n != 6 {
			t.Errorf("steps of %v tokens, want 6", f.lens)
			break
		}
	}
}

// TestSpeculateSampling: sampling speculates too, each token drawn from
// the model's distribution (sample.Sampler.NextDraft); with top-k 1 that
// distribution is the argmax alone, so the tokens are greedy decoding's,
// through the sampling path.
func TestSpeculateSampling(t *testing.T) {
	o := Options{MaxNewTokens: 50, Sampling: sample.Options{RepetitionPenalty: 1}}
	want, _, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
	if err != nil {
		t.Fatal(err)
	}
	m := &cacheModel{t: t, vocab: 16}
	o.Speculate, o.Sampling = 4, sample.Options{Temperature: 0.8, TopK: 1, RepetitionPenalty: 1, Seed: 9}
	got, met, err := Run(context.Background(), m, [][]int{{1, 4, 5}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
		t.Errorf("sampled with top-k 1: %v, greedy %v", got[0].TokenIDs, want[0].TokenIDs)
	}
	if m.many == 0 || met.DraftAccepted == 0 {
		t.Errorf("sampling did not speculate: %d steps, %+v", m.many, met)
	}
}

// batchOfCache runs several identical rows on one cacheModel.
type batchOfCache struct{ *cacheModel }

func (b *batchOfCache) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	l, err := b.cacheModel.Prefill(prompts[:1], maxNew)
	return slices.Repeat(l, len(prompts)), err
}

func (b *batchOfCache) Decode(next []int) ([][]float32, error) {
	l, err := b.cacheModel.Decode(next[:1])
	return slices.Repeat(l, len(next)), err
}

// TestSpeculateCancelled: a cancelled context ends a speculative run as
// interrupted, with what was generated.
func TestSpeculateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := &cacheModel{t: t, vocab: 16}
	n := 0
	res, _, err := Run(ctx, m, [][]int{{1, 4, 5}}, Options{MaxNewTokens: 100, Speculate: 4, Sampling: sample.Options{RepetitionPenalty: 1},
		OnEvent: func(ev Event) {
			if n++; n == 10 {
				cancel()
			}
		}})
	if !errors.Is(err, errs.ErrInterrupted) {
		t.Fatalf("%v, want ErrInterrupted", err)
	}
	if res[0].FinishReason != FinishInterrupted || len(res[0].TokenIDs) < 10 || len(res[0].TokenIDs) >= 100 {
		t.Errorf("%s after %d tokens", res[0].FinishReason, len(res[0].TokenIDs))
	}
}

// TestLookupDraft: the k tokens after the latest earlier occurrence of
// the longest matching suffix, round the loop where it is near the end,
// none without one.
func TestLookupDraft(t *testing.T) {
	for _, c := range []struct {
		h       []int
		n, k    int
		want    []int
		comment string
	}{
		{[]int{1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3}, 3, 2, []int{7, 1}, "the latest occurrence"},
		{[]int{1, 2, 3, 9, 4, 2, 3}, 3, 4, []int{9, 4, 2, 3}, "a shorter n-gram; the draft may run into the suffix"},
		{[]int{1, 2, 3, 9, 4, 2, 3}, 3, 7, []int{9, 4, 2, 3, 9, 4, 2}, "round the loop"},
		{[]int{5, 6, 7}, 3, 4, nil, "no earlier occurrence"},
		{[]int{4, 4, 4, 4}, 2, 3, []int{4, 4, 4}, "a loop of one token"},
		{[]int{1, 2, 1, 2}, 3, 0, nil, "k 0"},
		{[]int{1}, 3, 2, nil, "one token"},
	} {
		if got := lookupDraft(c.h, c.n, c.k); !slices.Equal(got, c.want) {
			t.Errorf("%s: lookupDraft(%v, %d, %d) = %v, want %v", c.comment, c.h, c.n, c.k, got, c.want)
		}
	}
}
