// Package moecheck runs a mixture-of-experts language model against its
// float64 reference under each formulation of its experts (compile's
// --experts graph, host and dense; compiled and eager) on the go backend
// and on tputool's cpu backend: the loop the MoE families' tests share. It
// imports compile, so it is apart from refcheck, which compile's own
// tests use.
package moecheck

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// Variants are the formulations Run compares, by name.
var Variants = []struct {
	Name string
	Opts compile.Options
}{
	{"graph-compiled", compile.Options{Mode: compile.Compiled}},
	{"graph-eager", compile.Options{Mode: compile.Eager}},
	{"host-compiled", compile.Options{Mode: compile.Compiled, SplitMatmul: 1, Experts: compile.ExpertsHost}},
	{"host-eager", compile.Options{Mode: compile.Eager, SplitMatmul: 1, Experts: compile.ExpertsHost}},
	{"dense-compiled", compile.Options{Mode: compile.Compiled, Experts: compile.ExpertsDense}},
}

// Run runs l on the go and cpu backends under each of Variants (the
// graph formulations only for a model whose experts run only in the
// graph, lm.InGraphExperts), as subtests named prefix+"backend/variant",
// each teacher-forced against ref over prompts extended to seqs
// (refcheck.TeacherForced, relative tolerance tol), and returns each
// run's logits by "backend/variant".
func Run(t *testing.T, prefix string, l *lm.Loaded, ref refcheck.Reference, prompts, seqs [][]int, steps int, tol float64) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, backend := range []string{"go", "cpu"} {
		var be backends.Backend
		if backend == "go" {
			be = refcheck.GoBackend(t)
		} else {
			be = refcheck.CPUBackend(t)
		}
		for _, v := range Variants {
			if _, graphOnly := l.Model.(lm.InGraphExperts); graphOnly && v.Opts.Experts != compile.ExpertsInGraph {
				continue
			}
			key := backend + "/" + v.Name
			t.Run(prefix+key, func(t *testing.T) {
				r, err := compile.NewRunner(be, l, v.Opts)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				f := refcheck.TeacherForced(t, r.NewState(), ref, prompts, seqs, steps, tol)
				t.Logf("max relative error %.3g", f.Worst)
				out[key] = f.Logits
			})
		}
	}
	return out
}

// Same fails t unless the runs of two layouts of one model (Run's
// results) gave identical logits under every formulation.
func Same(t *testing.T, what string, a, b map[string][]float32) {
	t.Helper()
	for key, la := range a {
		if lb, ok := b[key]; ok && !slices.Equal(la, lb) {
			t.Errorf("%s: %s's logits differ", what, key)
		}
	}
}

// Prefill returns the logits after prompt (a batch of one) from l
// compiled on the go backend: what the families' switch tests compare
// with their mutated references (refcheck.Discriminates).
func Prefill(t *testing.T, l *lm.Loaded, prompt []int) [][]float32 {
	t.Helper()
	r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.NewState().Prefill([][]int{prompt}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Differs checks that a checkpoint written wrong (mutant: a release read
// with two tensors swapped, say) moves the logits after prompt by at
// least far from l's, both by Prefill: a test of a family's reading
// that can fail. what names the mistake in the error.
func Differs(t *testing.T, what string, l, mutant *lm.Loaded, prompt []int, far float64) {
	t.Helper()
	got, bad := Prefill(t, l, prompt)[0], Prefill(t, mutant, prompt)[0]
	diff := 0.0
	for i := range got {
		diff = math.Max(diff, math.Abs(float64(got[i]-bad[i])))
	}
	if diff < far {
		t.Errorf("%s moves the logits by %g only", what, diff)
	}
}

// BFloat16 runs l with bfloat16 compute, compiled and eager, on the go
// and cpu backends: a prefill of prompts (left-padded to one batch) and
// one decode step, each row's logits within tol (relative to the largest)
// of ref's after the same tokens. It returns the largest error seen.
func BFloat16(t *testing.T, l *lm.Loaded, ref refcheck.Reference, prompts [][]int, tol float64) float64 {
	t.Helper()
	worst := 0.0
	next := make([]int, len(prompts))
	for b := range next {
		next[b] = 5 + b
	}
	want := make([][][]float64, len(prompts))
	for b, p := range prompts {
		want[b] = ref.Logits(append(slices.Clone(p), next[b]))
	}
	for _, backend := range []string{"go", "cpu"} {
		be := refcheck.GoBackend(t)
		if backend == "cpu" {
			be = refcheck.CPUBackend(t)
		}
		for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
			r, err := compile.NewRunner(be, l, compile.Options{Mode: mode, DType: dtypes.BFloat16})
			if err != nil {
				t.Fatal(err)
			}
			st := r.NewState()
			pre, err := st.Prefill(prompts, 2)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := st.Decode(next)
			if err != nil {
				t.Fatal(err)
			}
			for b, p := range prompts {
				for i, got := range [][]float32{pre[b], dec[b]} {
					e := refcheck.RelErr(got, want[b][len(p)-1+i])
					worst = max(worst, e)
					t.Logf("%s/%s row %d step %d: relative error %.3g", backend, mode, b, i, e)
					if e > tol {
						t.Errorf("%s/%s row %d step %d: relative error %.3g > %g", backend, mode, b, i, e, tol)
					}
				}
			}
			r.Close()
		}
	}
	return worst
}
