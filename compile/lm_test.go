package compile

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"

	"github.com/tputool/tputool/loader/tokenizer"
	_ "github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
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
	const dir = "../testdata/stories260K-hf"
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tok.Encode("Once upon a time", true)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(prompt) != "[1 403 407 261 378]" { // <s> ▁Once ▁upon ▁a ▁time
		t.Fatalf("prompt ids %v", prompt)
	}
	const want = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
	const n = 40
	var first []int
	for _, mode := range []Mode{Compiled, Eager} {
		r, err := NewLM(be, l, Options{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		logits, err := r.Prefill([][]int{prompt}, n)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for len(got) < n {
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
		r.Close()
		if text := tok.Decode(got, true); text != want {
			t.Errorf("%s: greedy text\n got %q\nwant %q", mode, text, want)
		}
		if first == nil {
			first = got
		} else if fmt.Sprint(got) != fmt.Sprint(first) {
			t.Errorf("eager ids %v differ from compiled ids %v", got, first)
		}
	}
}
