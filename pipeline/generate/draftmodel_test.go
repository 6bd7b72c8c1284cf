package generate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
)

// draftCache is cacheModel as a draft model: it also continues its cache
// with more prompt tokens (Extender), and counts how it was fed. With
// piece set it fixes its prefill pieces (FixedPieces); with failAt its
// Decode calls fail from that one on.
type draftCache struct {
	cacheModel
	pending  []int
	prefills int
	extends  int
	steps    int   // Decode and DecodeMany calls
	chunks   []int // PrefillChunk's sizes
	manys    []int // DecodeMany's lengths
	piece    int
	decodes  int
	failAt   int
	onChunk  func()
}

func (d *draftCache) PrefillPiece() int { return d.piece }
func (d *draftCache) FixedSteps() bool  { return d.piece > 0 }

func (d *draftCache) Prefill(prompts [][]int, maxNew int) ([][]float32, error) {
	d.prefills++
	return d.cacheModel.Prefill(prompts, maxNew)
}

func (d *draftCache) Decode(next []int) ([][]float32, error) {
	d.steps++
	if d.decodes++; d.failAt > 0 && d.decodes >= d.failAt {
		return nil, errors.New("out of memory")
	}
	return d.cacheModel.Decode(next)
}

func (d *draftCache) DecodeMany(tokens []int) ([][]float32, error) {
	d.steps++
	d.manys = append(d.manys, len(tokens))
	return d.cacheModel.DecodeMany(tokens)
}

func (d *draftCache) Begin(prompts [][]int, maxNew int) (int, error) {
	d.prefills++
	d.fed, d.pending = nil, slices.Clone(prompts[0])
	d.room = len(prompts[0]) + maxNew + 2
	return len(d.pending), nil
}

func (d *draftCache) Extend(tokens [][]int, maxNew int) (int, error) {
	d.extends++
	d.pending = slices.Clone(tokens[0])
	d.room = max(d.room, len(d.fed)+len(d.pending)+maxNew+2)
	return len(d.pending), nil
}

func (d *draftCache) PrefillChunk(n int) ([][]float32, error) {
	d.chunks = append(d.chunks, n)
	if d.onChunk != nil {
		d.onChunk()
	}
	d.fed = append(d.fed, d.pending[:n]...)
	d.pending = d.pending[n:]
	return [][]float32{d.after()}, nil
}

// TestDraftModelSameTokens: with a draft model the tokens are those
// decoding one at a time gives, whether the draft model agrees with the
// model everywhere (then every draft is confirmed whole, which a draft
// cache out of step with the text would not give), in part, or nowhere;
// greedy and sampled; and the draft model's cache is what DraftModel
// counts, brought in step with the text by a proposal.
func TestDraftModelSameTokens(t *testing.T) {
	prompt := []int{1, 4, 5}
	rules := map[string]func(a, b int) int{
		"same":    nil,
		"partial": func(a, b int) int { return 3 + (a*7+b*3+(a*b)%3/2)%9 },
		"other":   func(a, b int) int { return 3 + (a*5+b+1)%9 },
	}
	for _, rule := range []string{"same", "partial", "other"} {
		for _, temp := range []float64{0, 0.8, 0.81} { // 0.81: with a repetition penalty
			for _, k := range []int{1, 4, 7} {
				name := fmt.Sprintf("%s/T%v/k%d", rule, temp, k)
				opts := func() Options {
					o := Options{MaxNewTokens: 45, Sampling: sample.Options{Temperature: temp, TopK: 3, RepetitionPenalty: 1, Seed: 5}}
					if temp == 0.81 {
						o.Sampling.RepetitionPenalty = 1.2
					}
					return o
				}
				want, _, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{prompt}, opts())
				if err != nil {
					t.Fatal(err)
				}
				draft := &draftCache{cacheModel: cacheModel{t: t, vocab: 16, nextFn: rules[rule]}}
				o := opts()
				o.Speculate, o.DraftModel = k, mustDraftModel(t, draft, 16, 1000)
				m := &cacheModel{t: t, vocab: 16}
				got, met, err := Run(context.Background(), m, [][]int{prompt}, o)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if temp == 0 && !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
					t.Errorf("%s: with a draft model %v, one at a time %v", name, got[0].TokenIDs, want[0].TokenIDs)
				}
				// What DraftModel takes its cache to hold is what it holds,
				// and a proposal brings it in step with the text.
				if !slices.Equal(o.DraftModel.fed, draft.fed) {
					t.Errorf("%s: the draft model's cache holds %v, DraftModel counts %v", name, draft.fed, o.DraftModel.fed)
				}
				text := append(slices.Clone(prompt), got[0].TokenIDs...)
				o.DraftModel.wait = 0
				if _, _, err := o.DraftModel.draft(context.Background(), text, 1); err != nil || !slices.Equal(draft.fed, text) {
					t.Errorf("%s: after a proposal the draft model's cache holds %v (%v), not the text %v", name, draft.fed, err, text)
				}
				if draft.prefills != 1 {
					t.Errorf("%s: the draft model prefilled %d times, want once", name, draft.prefills)
				}
				switch {
				case met.DraftTokens == 0:
					t.Errorf("%s: no draft proposed", name)
				case rule == "same" && met.DraftAccepted != met.DraftTokens:
					// Sampling too: the draft model draws from its own
					// distribution, here the model's, and a draw from p
					// checked against p is always taken.
					t.Errorf("%s: %d of %d drafted tokens confirmed by the same model", name, met.DraftAccepted, met.DraftTokens)
				case rule == "same" && temp == 0 && k > 1 && met.DraftTokens < 30:
					t.Errorf("%s: %d tokens drafted of 45", name, met.DraftTokens)
				case rule == "other" && temp == 0 && 4*met.DraftAccepted > met.DraftTokens:
					t.Errorf("%s: %d of %d drafted tokens confirmed by a model that disagrees", name, met.DraftAccepted, met.DraftTokens)
				}
			}
		}
	}
}

// TestDraftModelContinues: a draft model kept for a conversation's next
// Run continues its cache (the text it holds kept, the next turn fed as
// a prompt continued), proposes nothing where its confidence is below
// PMin, and nothing for a text past its positions or holding an id it
// does not have.
func TestDraftModelContinues(t *testing.T) {
	greedy := Options{MaxNewTokens: 20, Speculate: 4, Sampling: sample.Options{RepetitionPenalty: 1}}
	draft := &draftCache{cacheModel: cacheModel{t: t, vocab: 16}}
	d := mustDraftModel(t, draft, 16, 1000)
	o := greedy
	o.DraftModel = d
	first, met, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
	if err != nil || met.DraftAccepted == 0 {
		t.Fatalf("first turn: %v, %+v", err, met)
	}
	next := append(append([]int{1, 4, 5}, first[0].TokenIDs...), 2, 9, 2, 9, 2, 9, 2, 9, 2, 9)
	want, _, _ := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{next}, greedy)
	got, met, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{next}, o)
	if err != nil || !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) || met.DraftAccepted == 0 {
		t.Fatalf("next turn: %v, %v, want %v, %+v", err, got[0].TokenIDs, want[0].TokenIDs, met)
	}
	if draft.prefills != 1 || draft.extends != 1 {
		t.Errorf("the draft model prefilled %d times and continued %d, want once and once", draft.prefills, draft.extends)
	}

	// The fake's top token has probability 0.90, or 0.96 where the
	// runner-up is the top.
	// Proposing nothing, it sits out 1, 2, 4, 8 steps, then 8 again: of
	// the 39 steps after the first token it runs at 7 (its cache holds
	// the prompt: no prefill).
	d.PMin = 0.99
	steps := draft.steps
	o.MaxNewTokens = 40
	if _, met, _ = Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o); met.DraftTokens != 0 {
		t.Errorf("PMin 0.99: %d tokens drafted, want none", met.DraftTokens)
	}
	if n := draft.steps - steps; n != 7 {
		t.Errorf("PMin 0.99: the draft model ran %d steps, want 7", n)
	}
	o.MaxNewTokens = 20
	d.PMin = DefaultDraftPMin
	o.DraftModel = mustDraftModel(t, &draftCache{cacheModel: cacheModel{t: t, vocab: 16}}, 16, 12)
	if _, met, _ = Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o); met.DraftTokens == 0 || met.DraftTokens > 9 {
		t.Errorf("12 positions: %d tokens drafted, want some, and none past the positions", met.DraftTokens)
	}
	o.DraftModel = mustDraftModel(t, &draftCache{cacheModel: cacheModel{t: t, vocab: 16}}, 8, 1000)
	if _, met, _ = Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o); met.DraftTokens != 0 {
		t.Errorf("a draft model of 8 ids: %d tokens drafted, want none (the fake's picks are 3 to 11)", met.DraftTokens)
	}
}

func TestArgmaxProb(t *testing.T) {
	for _, c := range []struct {
		logits []float32
		id     int
		p      float64
	}{
		{[]float32{0, 0}, 0, 0.5},
		{[]float32{1, 3, 2}, 1, 1 / (1 + math.Exp(-1) + math.Exp(-2))},
		{[]float32{float32(math.Inf(-1)), 0}, 1, 1},
		{[]float32{float32(math.NaN()), 1}, 0, 0},
		{[]float32{float32(math.Inf(-1))}, 0, 0},
	} {
		id, p := argmaxProb(c.logits)
		if id != c.id || math.Abs(p-c.p) > 1e-12 {
			t.Errorf("argmaxProb(%v) = %d, %v; want %d, %v", c.logits, id, p, c.id, c.p)
		}
	}
}

// TestDraftModelFails: a draft model that fails leaves the text as it is
// (the step decodes without a draft), is reported once a failure, and
// sits out the next 16 steps, then 32; a cancelled Run stops in the
// draft model's prefill, between its pieces.
func TestDraftModelFails(t *testing.T) {
	greedy := Options{MaxNewTokens: 60, Speculate: 4, Sampling: sample.Options{RepetitionPenalty: 1}}
	want, _, _ := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, greedy)
	draft := &draftCache{cacheModel: cacheModel{t: t, vocab: 16}, failAt: 5}
	d := mustDraftModel(t, draft, 16, 1000)
	var failures []error
	d.OnError = func(err error) { failures = append(failures, err) }
	o := greedy
	o.DraftModel = d
	got, met, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
	if err != nil || !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
		t.Fatalf("a failing draft model: %v, %v; want %v", err, got[0].TokenIDs, want[0].TokenIDs)
	}
	// Failing from its fifth Decode: once, then after 16 steps (a
	// prefill, then a Decode that fails), then after 32.
	if len(failures) != 3 || met.DraftAccepted == 0 {
		t.Errorf("%d failures reported (%v), %d drafted tokens confirmed; want 3 and some", len(failures), failures, met.DraftAccepted)
	}
	if draft.prefills != 3 {
		t.Errorf("%d prefills, want 3 (the first, and one after each of the first two failures)", draft.prefills)
	}

	// Cancelled in the draft model's prefill.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make([]int, 40)
	for i := range long {
		long[i] = 3 + i%9
	}
	pieces := &draftCache{cacheModel: cacheModel{t: t, vocab: 16}, piece: 8, onChunk: cancel}
	o.DraftModel = mustDraftModel(t, pieces, 16, 1000)
	_, _, err = Run(ctx, &cacheModel{t: t, vocab: 16}, [][]int{long}, o)
	if !errors.Is(err, errs.ErrInterrupted) || len(pieces.chunks) != 1 {
		t.Errorf("cancelled: %v after %d pieces; want ErrInterrupted after one", err, len(pieces.chunks))
	}
}

// TestDraftModelShapes: where every step length compiles (FixedPieces),
// the draft model prefills in the runner's pieces and pads its catch-ups
// to one length (taking the padding back), with the same tokens; else it
// prefills in pieces of draftPiece.
func TestDraftModelShapes(t *testing.T) {
	long := make([]int, 1100)
	for i := range long {
		long[i] = 3 + i%9
	}
	for _, piece := range []int{0, 64} {
		greedy := Options{MaxNewTokens: 40, Speculate: 4, Sampling: sample.Options{RepetitionPenalty: 1}}
		want, _, _ := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{long}, greedy)
		rule := func(a, b int) int { return 3 + (a*7+b*3+(a*b)%3/2)%9 } // agrees in part
		draft := &draftCache{cacheModel: cacheModel{t: t, vocab: 16, nextFn: rule}, piece: piece}
		o := greedy
		o.DraftModel = mustDraftModel(t, draft, 16, 10000)
		o.DraftModel.PMin = 0
		got, _, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{long}, o)
		if err != nil || !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
			t.Fatalf("piece %d: %v, %v; want %v", piece, err, got[0].TokenIDs, want[0].TokenIDs)
		}
		wantPiece := cmp.Or(piece, draftPiece)
		for i, n := range draft.chunks {
			if n > wantPiece || (i < len(draft.chunks)-1 && n != wantPiece) {
				t.Errorf("piece %d: prefill pieces %v, want %d each but the last", piece, draft.chunks, wantPiece)
				break
			}
		}
		if len(draft.manys) == 0 {
			t.Errorf("piece %d: no catch-up step", piece)
		}
		for _, n := range draft.manys {
			if piece > 0 && n != maxCatchUp {
				t.Errorf("fixed pieces: catch-up steps of %v tokens, want %d each", draft.manys, maxCatchUp)
				break
			}
		}
	}
}

func mustDraftModel(t *testing.T, m DraftStepper, vocab, positions int) *DraftModel {
	t.Helper()
	d, err := NewDraftModel(m, vocab, positions)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDraftModelRewindable: a runner that takes back only its last step
// (a model with recurrent state) cannot draft.
func TestDraftModelRewindable(t *testing.T) {
	_, err := NewDraftModel(&draftCache{cacheModel: cacheModel{t: t, vocab: 16, noRewind: true}}, 16, 100)
	if !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("a draft model that cannot rewind: %v, want ErrUnsupported", err)
	}
}

// TestDraftModelNaN: a draft model whose logits are NaN proposes nothing,
// greedy or sampling, and the text is the model's own.
func TestDraftModelNaN(t *testing.T) {
	for _, temp := range []float64{0, 0.8} {
		o := Options{MaxNewTokens: 60, Sampling: sample.Options{Temperature: temp, RepetitionPenalty: 1, Seed: 3}}
		want, _, _ := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
		o.Speculate = 4 // no draft: the same draws as without speculation
		o.DraftModel = mustDraftModel(t, &draftCache{cacheModel: cacheModel{t: t, vocab: 16, nan: true}}, 16, 1000)
		o.DraftModel.PMin = 0
		got, met, err := Run(context.Background(), &cacheModel{t: t, vocab: 16}, [][]int{{1, 4, 5}}, o)
		if err != nil || met.DraftTokens != 0 || !slices.Equal(got[0].TokenIDs, want[0].TokenIDs) {
			t.Errorf("T %v: %v, %d drafted, %v; want no draft and %v", temp, err, met.DraftTokens, got[0].TokenIDs, want[0].TokenIDs)
		}
	}
}
