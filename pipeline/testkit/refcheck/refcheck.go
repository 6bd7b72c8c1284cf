// Package refcheck holds what the tests comparing graph code with a
// float64 reference (lmref, qwenref, sdref) share: the go backend as tputool opens it, the relative
// error they bound, and for language models the greedy reference
// sequences and the step-by-step, teacher-forced comparison of a runner's
// logits.
package refcheck

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego" // the "go" backend

	_ "github.com/tputool/tputool/tpu/cpu" // the "cpu" backend
)

// GoBackend opens the pure-Go backend with ops_sequential, as tpu.Open
// does (GoMLX v0.26's parallel op scheduling can deadlock on 2 cores), and
// finalizes it when the test ends.
func GoBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("go:ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	return be
}

// RelErr is max|a-b| / max|b|.
func RelErr(a []float32, b []float64) float64 {
	num, den := 0.0, 0.0
	for i := range b {
		num = math.Max(num, math.Abs(float64(a[i])-b[i]))
		den = math.Max(den, math.Abs(b[i]))
	}
	return num / den
}

// Mutant is a reference with one feature changed, by name: its logits
// after every token of a prompt.
type Mutant struct {
	Name   string
	Logits func(prompt []int) [][]float64
}

// Discriminates checks that a comparison with a reference can fail where
// its mutants differ: got, a model's logits after prompt's last token, is
// within 1e-4 of ref's, and more than far from each mutant's.
func Discriminates(t testing.TB, got []float32, prompt []int, ref func(prompt []int) [][]float64, far float64, mutants ...Mutant) {
	t.Helper()
	last := len(prompt) - 1
	if e := RelErr(got, ref(prompt)[last]); e > 1e-4 {
		t.Fatalf("relative error %.3g against the reference", e)
	}
	for _, m := range mutants {
		if e := RelErr(got, m.Logits(prompt)[last]); e < far {
			t.Errorf("a reference with %s is within %.3g of the model", m.Name, e)
		}
	}
}

// Argmax is the index of the largest value, the first one on ties.
func Argmax[T float32 | float64](v []T) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// Reference is a float64 causal language model: the logits after every
// token of a sequence ([len(tokens)][vocab]).
type Reference interface {
	Logits(tokens []int) [][]float64
}

// GreedySequences extends each prompt by steps tokens, each the
// reference's most likely next token.
func GreedySequences(ref Reference, prompts [][]int, steps int) [][]int {
	seqs := make([][]int, len(prompts))
	for b, p := range prompts {
		seqs[b] = append([]int(nil), p...)
		for s := 0; s < steps; s++ {
			lg := ref.Logits(seqs[b])
			seqs[b] = append(seqs[b], Argmax(lg[len(lg)-1]))
		}
	}
	return seqs
}

// Runner runs a batch one step at a time (compile.State).
type Runner interface {
	Prefill(prompts [][]int, maxNew int) ([][]float32, error)
	Decode(next []int) ([][]float32, error)
}

// Forced is what TeacherForced saw.
type Forced struct {
	// Worst is the largest relative error.
	Worst float64
	// Greedy holds the runner's most likely token and Logits its logits,
	// for every step (prefill first) and row, step-major.
	Greedy []int
	Logits []float32
}

// TeacherForced prefills the prompts on r, then decodes steps tokens per
// row taken from seqs (GreedySequences of the same prompts), and checks
// after the prefill and every decode step that each row's logits are
// within tol (RelErr) of the reference's for that row's sequence so far;
// it stops the test at the first row over tol. The reference is causal, so
// its logits for a whole sequence hold those of every prefix.
func TeacherForced(t testing.TB, r Runner, ref Reference, prompts, seqs [][]int, steps int, tol float64) Forced {
	t.Helper()
	want := make([][][]float64, len(prompts))
	for b, p := range prompts {
		want[b] = ref.Logits(seqs[b][:len(p)+steps])
	}
	var f Forced
	logits, err := r.Prefill(prompts, steps)
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; ; s++ {
		for b, p := range prompts {
			e := RelErr(logits[b], want[b][len(p)+s-1])
			f.Worst = math.Max(f.Worst, e)
			if e > tol {
				t.Fatalf("row %d step %d: relative error %.3g > %g", b, s, e, tol)
			}
			f.Greedy = append(f.Greedy, Argmax(logits[b]))
			f.Logits = append(f.Logits, logits[b]...)
		}
		if s == steps {
			return f
		}
		next := make([]int, len(prompts))
		for b, p := range prompts {
			next[b] = seqs[b][len(p)+s]
		}
		if logits, err = r.Decode(next); err != nil {
			t.Fatal(err)
		}
	}
}

// CPUBackend is tputool's cpu backend (tpu/cpu), closed when the test ends.
func CPUBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("cpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	return be
}

// Causal checks a float64 reference's causality on tokens (the test kits'
// TestCausal): the logits of each of the prefixes' lengths are exactly
// the first rows of the whole sequence's; every token after position 5
// changed leaves rows 0…5 exactly as they were and changes every later
// one; every row holds vocab finite logits spanning more than minSpan
// and at most 100. name labels the errors (the flavour under test).
func Causal(t testing.TB, name string, logits func(tokens []int) [][]float64, tokens []int, vocab int, prefixes []int, minSpan float64) {
	t.Helper()
	all := logits(tokens)
	if len(all) != len(tokens) {
		t.Fatalf("%s: %d rows for %d tokens", name, len(all), len(tokens))
	}
	for _, n := range prefixes {
		prefix := logits(tokens[:n])
		for i := range prefix {
			if !slices.Equal(prefix[i], all[i]) {
				d := 0.0
				for j := range prefix[i] {
					d = math.Max(d, math.Abs(prefix[i][j]-all[i][j]))
				}
				t.Errorf("%s: prefix of %d, position %d: logits differ by %g", name, n, i, d)
			}
		}
	}
	other := slices.Clone(tokens)
	for i := 6; i < len(other); i++ {
		other[i] = (other[i] + 31) % vocab
	}
	changed := logits(other)
	for i := range changed {
		same := slices.Equal(changed[i], all[i])
		if i <= 5 && !same {
			t.Errorf("%s: a later token changes position %d's logits", name, i)
		}
		if i > 5 && same {
			t.Errorf("%s: another token at position %d leaves its logits alone", name, i)
		}
	}
	for i, row := range all {
		if len(row) != vocab {
			t.Fatalf("%s: row %d: %d logits", name, i, len(row))
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s, position %d: logit %g", name, i, v)
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if hi-lo < minSpan || hi-lo > 100 {
			t.Errorf("%s, position %d: logits span [%g, %g]", name, i, lo, hi)
		}
	}
}
