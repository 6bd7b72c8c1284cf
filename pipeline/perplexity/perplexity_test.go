package perplexity

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/tputool/tputool/internal/errs"
)

// TestWindows: for texts of every length up to 40 and every context up
// to 9 and stride below it, the windows hold the context (all of a
// shorter text), each ends a stride after the previous one or at the
// text's end, and they score every token but the first exactly once,
// each with at least context−stride tokens before it in its window where
// the text has them.
func TestWindows(t *testing.T) {
	for n := 2; n <= 40; n++ {
		for c := 2; c <= 9; c++ {
			for s := 1; s < c; s++ {
				ws := Windows(n, c, s)
				seen := make([]int, n)
				for k, w := range ws {
					end := min(n, c+k*s)
					if w.End != end || w.End-w.Begin != min(c, n) || w.Scored < 1 || w.Scored > w.End-w.Begin-1 {
						t.Fatalf("n %d c %d s %d: window %d %+v", n, c, s, k, w)
					}
					for p := w.End - w.Scored; p < w.End; p++ {
						seen[p]++
						if before := p - w.Begin; before < min(p, c-s) {
							t.Errorf("n %d c %d s %d: token %d scored with %d before it, want %d", n, c, s, p, before, min(p, c-s))
						}
					}
				}
				if ws[len(ws)-1].End != n {
					t.Fatalf("n %d c %d s %d: the last window ends at %d", n, c, s, ws[len(ws)-1].End)
				}
				for p, k := range seen {
					if want := min(p, 1); k != want {
						t.Fatalf("n %d c %d s %d: token %d scored %d times, want %d", n, c, s, p, k, want)
					}
				}
			}
		}
	}
}

// TestRun: with a scorer whose log-probability of a token is minus its id
// (the ids being the tokens' positions), the mean NLL is the mean of
// 1..n−1 whatever the batching, and the standard error is that of those
// values; windows come in batches of at most Batch, and only the values
// from each window's from on are read (the others are NaN here).
func TestRun(t *testing.T) {
	ids := make([]int, 50)
	for i := range ids {
		ids[i] = i
	}
	score := func(batch int) Scorer {
		return func(ws [][]int, from []int) ([][]float32, error) {
			if len(ws) > batch {
				t.Fatalf("%d windows in a batch of %d", len(ws), batch)
			}
			out := make([][]float32, len(ws))
			for i, w := range ws {
				for j, id := range w[1:] {
					v := -float32(id)
					if j+1 < from[i] {
						v = float32(math.NaN()) // not to be read
					}
					out[i] = append(out[i], v)
				}
			}
			return out, nil
		}
	}
	// The values 1..49: mean 25, population variance (49²−1)/12 = 200.
	wantNLL, wantVar := 25.0, 200.0
	for _, b := range []int{1, 3, 100} {
		calls := 0
		res, err := Run(context.Background(), ids, Options{Context: 8, Stride: 3, Batch: b, OnWindows: func(done, total int) { calls++ }}, score(b))
		if err != nil {
			t.Fatal(err)
		}
		if res.Scored != 49 || res.Tokens != 50 || res.NLL != wantNLL || res.Perplexity != math.Exp(wantNLL) || res.MinLogprob != -49 {
			t.Errorf("batch %d: %+v", b, res)
		}
		if want := math.Sqrt(wantVar/48) * math.Exp(wantNLL); math.Abs(res.Stderr-want) > 1e-9*want {
			t.Errorf("batch %d: stderr %v, want %v", b, res.Stderr, want)
		}
		if want := (res.Windows + b - 1) / b; calls != want {
			t.Errorf("batch %d: %d progress calls, want %d", b, calls, want)
		}
	}
}

// TestRunErrors: too short a text, bad settings, a scorer's error and a
// cancelled context.
func TestRunErrors(t *testing.T) {
	ok := func(ws [][]int, _ []int) ([][]float32, error) {
		out := make([][]float32, len(ws))
		for i, w := range ws {
			out[i] = make([]float32, len(w)-1)
		}
		return out, nil
	}
	o := Options{Context: 4, Stride: 2, Batch: 1}
	for _, c := range []struct {
		ids []int
		o   Options
	}{
		{[]int{1}, o},
		{[]int{1, 2, 3}, Options{Context: 1, Stride: 1, Batch: 1}},
		{[]int{1, 2, 3}, Options{Context: 4, Stride: 4, Batch: 1}},
		{[]int{1, 2, 3}, Options{Context: 4, Stride: 0, Batch: 1}},
		{[]int{1, 2, 3}, Options{Context: 4, Stride: 2}},
	} {
		if _, err := Run(context.Background(), c.ids, c.o, ok); !errors.Is(err, errs.ErrUsage) {
			t.Errorf("%v %+v: %v, want a usage error", c.ids, c.o, err)
		}
	}
	boom := errors.New("boom")
	if _, err := Run(context.Background(), []int{1, 2, 3}, o, func([][]int, []int) ([][]float32, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("scorer's error: %v", err)
	}
	short := func(ws [][]int, _ []int) ([][]float32, error) { return make([][]float32, len(ws)), nil }
	if _, err := Run(context.Background(), []int{1, 2, 3}, o, short); err == nil {
		t.Error("a scorer that returns too few values: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, []int{1, 2, 3}, o, ok); !errors.Is(err, errs.ErrInterrupted) {
		t.Errorf("cancelled: %v, want ErrInterrupted", err)
	}
}
