package compile

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
)

// refLogprobs is the float64 reference's log-softmax of the logits that
// follow each prefix of p: out[j] for token j+1.
func refLogprobs(ref *lmref.Model, p []int) [][]float64 {
	logits := ref.Logits(p)
	out := make([][]float64, len(p)-1)
	for j := range out {
		l := logits[j]
		mx := slices.Max(l)
		var sum float64
		for _, v := range l {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		out[j] = make([]float64, len(l))
		for k, v := range l {
			out[j][k] = v - lse
		}
	}
	return out
}

// TestPromptLogprobs: every token of a batch of prompts of unequal
// lengths (left padding; a one-token prompt has nothing to score) gets
// the log-probability the float64 reference gives it after the tokens
// before it, its rank among the vocabulary, and the reference's likeliest
// tokens best first, for the causal families (Qwen3's q/k norms, Qwen2's
// biases, Mistral's window shorter than the prompts, Gemma 3's local
// layers and soft-capped, tied head), in both modes on both CPU
// backends, the alternatives picked on the host and in the graph (as on
// a device). The scoring head runs in pieces of 8 positions here, so a
// position's figures must land on its own token.
func TestPromptLogprobs(t *testing.T) {
	defer func(b int, g bool) { logprobHeadBytes, logprobGraphTop = b, g }(logprobHeadBytes, logprobGraphTop)
	logprobHeadBytes = 8 * 64 * 4 // 8 rows of the 64-token vocabulary
	prompts := classifierPrompts()
	for _, tc := range classifierCases() {
		if tc.Labels != 1 {
			continue
		}
		tc.Arch, tc.Labels = lmckpt.CausalArch(tc.Arch), 0
		t.Run(tc.Arch, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.Write(dir); err != nil {
				t.Fatal(err)
			}
			l := loadDir(t, dir)
			ref, err := lmref.Load(dir, tc.Config)
			if err != nil {
				t.Fatal(err)
			}
			want := make([][][]float64, len(prompts))
			for i, p := range prompts {
				want[i] = refLogprobs(ref, p)
			}
			for _, be := range []backends.Backend{goBackend(t), cpuBackend(t)} {
				for _, mode := range []Mode{Compiled, Eager} {
					r, err := NewRunner(be, l, Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					got, err := r.PromptLogprobs(prompts, 5)
					r.Close()
					if err != nil {
						t.Fatalf("%s/%s: %v", be.Name(), mode, err)
					}
					checkLogprobs(t, fmt.Sprintf("%s/%s", be.Name(), mode), prompts, got, want, 5, 1e-4)
				}
			}
			// The alternatives picked in the graph, as on a device.
			logprobGraphTop = true
			for _, be := range []backends.Backend{goBackend(t), cpuBackend(t)} {
				r, err := NewRunner(be, l, Options{Mode: Compiled})
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.PromptLogprobs(prompts, 5)
				r.Close()
				if err != nil {
					t.Fatalf("%s, in the graph: %v", be.Name(), err)
				}
				checkLogprobs(t, be.Name()+", alternatives in the graph", prompts, got, want, 5, 1e-4)
			}
			logprobGraphTop = false
			// Without alternatives: the same figures, no Top.
			r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := r.PromptLogprobs(prompts, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkLogprobs(t, "topK 0", prompts, got, want, 0, 1e-4)
		})
	}
}

// checkLogprobs compares PromptLogprobs' got with the reference's
// log-softmax want: each token's value within tol, its rank (1 plus the
// reference's values above it by more than tol; ties within tol may go
// either way), and topK alternatives that are the reference's best.
func checkLogprobs(t *testing.T, what string, prompts [][]int, got [][]sample.TokenLogprob, want [][][]float64, topK int, tol float64) {
	t.Helper()
	if len(got) != len(prompts) {
		t.Fatalf("%s: %d results for %d prompts", what, len(got), len(prompts))
	}
	for i, p := range prompts {
		if len(got[i]) != len(p)-1 {
			t.Fatalf("%s: prompt %d (%d tokens): %d log-probabilities, want %d", what, i, len(p), len(got[i]), len(p)-1)
		}
		for j, g := range got[i] {
			w := want[i][j]
			tok := p[j+1]
			if d := math.Abs(float64(g.Logprob) - w[tok]); d > tol*math.Max(1, math.Abs(w[tok])) {
				t.Errorf("%s: prompt %d token %d: log-probability %v, want the reference's %v", what, i, j+1, g.Logprob, w[tok])
			}
			above, near := 0, 0
			for _, v := range w {
				switch {
				case v > w[tok]+tol:
					above++
				case v > w[tok]-tol && v <= w[tok]+tol:
					near++
				}
			}
			if g.Rank < above+1 || g.Rank > above+near {
				t.Errorf("%s: prompt %d token %d: rank %d, want %d to %d", what, i, j+1, g.Rank, above+1, above+near)
			}
			if len(g.Top) != topK {
				t.Fatalf("%s: prompt %d token %d: %d alternatives, want %d", what, i, j+1, len(g.Top), topK)
			}
			order := make([]int, len(w))
			for k := range order {
				order[k] = k
			}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w[b], w[a]) })
			for k, a := range g.Top {
				if d := math.Abs(float64(a.Logprob) - w[order[k]]); d > tol*math.Max(1, math.Abs(w[order[k]])) {
					t.Errorf("%s: prompt %d token %d: alternative %d is %d at %v, want the reference's %d-th best %v", what, i, j+1, k, a.ID, a.Logprob, k+1, w[order[k]])
				}
				if d := math.Abs(float64(a.Logprob) - w[a.ID]); d > tol*math.Max(1, math.Abs(w[a.ID])) {
					t.Errorf("%s: prompt %d token %d: alternative %d: id %d at %v, the reference gives it %v", what, i, j+1, k, a.ID, a.Logprob, w[a.ID])
				}
			}
		}
	}
}

// TestPromptLogprobsLong: a prompt longer than one of Embed's steps (512
// tokens) is scored across the step's edge, beside a short one, with the
// head in its default pieces; bfloat16 compute stays near the
// reference.
func TestPromptLogprobsLong(t *testing.T) {
	tc := classifierCases()[2] // Llama
	tc.Arch, tc.Labels, tc.MaxPositions = lmckpt.CausalArch(tc.Arch), 0, 1024
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	l := loadDir(t, dir)
	ref, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var prompts [][]int
	for _, n := range []int{530, 3} {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + rng.IntN(61)
		}
		prompts = append(prompts, p)
	}
	want := make([][][]float64, len(prompts))
	for i, p := range prompts {
		want[i] = refLogprobs(ref, p)
	}
	r, err := NewRunner(cpuBackend(t), l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.PromptLogprobs(prompts, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkLogprobs(t, "f32", prompts, got, want, 2, 1e-4)

	// From token 520 (and 2) on: those entries as they were, none before.
	from, err := r.PromptLogprobsFrom(prompts, []int{520, 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range []int{520, 2} {
		for j := range got[i] {
			tok := j + 1
			switch {
			case tok < f && (from[i][j].Logprob != 0 || from[i][j].Rank != 0 || from[i][j].Top != nil):
				t.Errorf("prompt %d token %d before %d: %+v, want nothing", i, tok, f, from[i][j])
			case tok >= f && (math.Abs(float64(from[i][j].Logprob-got[i][j].Logprob)) > 1e-6 || from[i][j].Rank != got[i][j].Rank):
				t.Errorf("prompt %d token %d: %+v, want %+v", i, tok, from[i][j], got[i][j])
			}
		}
	}
	r.Close()

	r, err = NewRunner(cpuBackend(t), l, Options{Mode: Compiled, DType: dtypes.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err = r.PromptLogprobs(prompts, 0)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range prompts {
		for j, g := range got[i] {
			worst = math.Max(worst, math.Abs(float64(g.Logprob)-want[i][j][prompts[i][j+1]]))
		}
	}
	if worst > 0.1 {
		t.Errorf("bf16: log-probabilities up to %g from the reference's, want within 0.1", worst)
	}
}

// TestPromptLogprobsErrors: a cross-encoder has no language-model head;
// too many alternatives and an empty prompt are usage errors, an id
// outside the vocabulary an error (as Embed's).
func TestPromptLogprobsErrors(t *testing.T) {
	tc := classifierCases()[0]
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	cr, err := NewRunner(goBackend(t), loadDir(t, dir), Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	if _, err := cr.PromptLogprobs([][]int{{3, 4}}, 0); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("classifier: %v, want ErrUnsupported", err)
	}
	r := storiesRunner(t)
	for _, c := range []struct {
		prompts [][]int
		topK    int
		usage   bool
	}{
		{[][]int{{3, 4}}, MaxTopLogprobs + 1, true},
		{[][]int{{3, 4}}, -1, true},
		{[][]int{{3, 4}, {}}, 0, true},
		{[][]int{{3, 512}}, 0, false},
	} {
		_, err := r.PromptLogprobs(c.prompts, c.topK)
		if err == nil || errors.Is(err, errs.ErrUsage) != c.usage {
			t.Errorf("%v top %d: %v, want an error (usage %v)", c.prompts, c.topK, err, c.usage)
		}
	}
}

// TestTopLogits: the k largest, largest first, equal values by id, NaNs
// passed over, fewer than k when the row is shorter.
func TestTopLogits(t *testing.T) {
	nan := float32(math.NaN())
	row := []float32{1, 3, nan, 3, -2, 5, 1}
	for k, want := range map[int][]int{1: {5}, 2: {5, 1}, 3: {5, 1, 3}, 5: {5, 1, 3, 0, 6}, 9: {5, 1, 3, 0, 6, 4}} {
		if got := topLogits(row, k); !slices.Equal(got, want) {
			t.Errorf("k %d: %v, want %v", k, got, want)
		}
	}
}
