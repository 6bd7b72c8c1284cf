package cpu_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"

	"github.com/tputool/tputool/compile"
	_ "github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu/cpu"
)

func argmax(v []float32) int {
	best := 0
	for j, x := range v {
		if x > v[best] {
			best = j
		}
	}
	return best
}

// greedy runs n greedy steps of the model after prompt and returns the
// tokens and every step's logits.
func greedy(t *testing.T, be backends.Backend, dir string, mode compile.Mode, prompt []int, n int) ([]int, [][]float32) {
	t.Helper()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := compile.NewRunner(be, l, compile.Options{Mode: mode})
	gen := r.NewState()
	if err != nil {
		t.Fatal(err)
	}
	logits, err := gen.Prefill([][]int{prompt}, n)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var all [][]float32
	for len(toks) < n {
		all = append(all, append([]float32(nil), logits[0]...))
		best := argmax(logits[0])
		toks = append(toks, best)
		if logits, err = gen.Decode([]int{best}); err != nil {
			t.Fatal(err)
		}
	}
	return toks, all
}

// TestStoriesGreedyMatchesGoBackend: f32 greedy tokens of the TinyStories
// 260K model on the cpu backend equal the go backend's, in both execution
// modes, and the logits agree closely at every step.
func TestStoriesGreedyMatchesGoBackend(t *testing.T) {
	const dir = "../../testdata/stories260K-hf"
	ref, err := backends.NewWithConfig("go:ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Finalize()
	be, err := backends.NewWithConfig(cpu.BackendName)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	prompt := []int{1, 403, 407, 261, 378} // <s> Once upon a time
	const n = 40
	for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
		want, wantLogits := greedy(t, ref, dir, mode, prompt, n)
		got, gotLogits := greedy(t, be, dir, mode, prompt, n)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("mode %v: token %d is %d, go backend %d (got %v, want %v)", mode, i, got[i], want[i], got, want)
			}
		}
		worst := 0.0
		for s := range wantLogits {
			scale := 0.0
			for _, v := range wantLogits[s] {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for j, v := range wantLogits[s] {
				worst = math.Max(worst, math.Abs(float64(gotLogits[s][j]-v))/scale)
			}
		}
		if worst > 1e-4 {
			t.Errorf("mode %v: logits differ from the go backend by up to %.2g of their largest magnitude", mode, worst)
		}
		t.Logf("mode %v: %d tokens equal; largest logit difference %.2g relative", mode, n, worst)
	}
}
