package compile

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"

	_ "github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

func goBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("go:ops_sequential") // as tpu.Open does
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// TestStoriesGreedy checks that the real TinyStories model continues "Once
// upon a time" with the same coherent English in both modes.
func TestStoriesGreedy(t *testing.T) {
	be := goBackend(t)
	l, err := lm.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// "<s> Once upon a time" with the model's tokenizer.json: <s>=1,
	// ▁Once=403, ▁upon=407, ▁a=261, ▁time=378.
	prompt := []int{1, 403, 407, 261, 378}
	// ", there was a little girl named Lily. She loved to play outside in
	// the park. One day, she saw a big, red ball."
	want := []int{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
		411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426}
	for _, mode := range []Mode{Compiled, Eager} {
		r, err := NewLM(be, l, Options{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		logits, err := r.Prefill([][]int{prompt}, len(want))
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for len(got) < len(want) {
			best := 0
			for j, v := range logits[0] {
				if v > logits[0][best] {
					best = j
				}
			}
			got = append(got, best)
			if logits, err = r.Decode([]int{best}); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: greedy ids\n got %v\nwant %v", mode, got, want)
		}
		r.Close()
	}
}
