package compile

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"

	"github.com/tputool/tputool/loader/tokenizer"
	_ "github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/sample"
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
		r, err := NewRunner(be, l, Options{Mode: mode})
		gen := r.NewState()
		if err != nil {
			t.Fatal(err)
		}
		logits, err := gen.Prefill([][]int{prompt}, n)
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
			if logits, err = gen.Decode([]int{best}); err != nil {
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

// argmax returns the index of the largest value.
func argmax(v []float32) int {
	best := 0
	for j, x := range v {
		if x > v[best] {
			best = j
		}
	}
	return best
}

// greedyFrom decodes n greedy tokens from logits.
func greedyFrom(t *testing.T, gen *State, logits [][]float32, n int) []int {
	t.Helper()
	var got []int
	for len(got) < n {
		id := argmax(logits[0])
		got = append(got, id)
		var err error
		if logits, err = gen.Decode([]int{id}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestChunkedPrefillAndExtend checks that a prompt prefilled in pieces
// (Begin, then PrefillChunk of 1, 3 and the rest) and a conversation
// continued with Extend over the same cache give the greedy tokens of one
// whole Prefill, in both modes.
func TestChunkedPrefillAndExtend(t *testing.T) {
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
	prompt, err := tok.Encode("Once upon a time there was a big dog named Max. He", true)
	if err != nil {
		t.Fatal(err)
	}
	more, err := tok.Encode(" Then the sun came out and", false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	for _, mode := range []Mode{Compiled, Eager} {
		r, err := NewRunner(be, l, Options{Mode: mode})
		gen := r.NewState()
		if err != nil {
			t.Fatal(err)
		}
		logits, err := gen.Prefill([][]int{prompt}, n)
		if err != nil {
			t.Fatal(err)
		}
		whole := greedyFrom(t, gen, logits, n)

		T, err := gen.Begin([][]int{prompt}, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []int{1, 3, T - 4} {
			if logits, err = gen.PrefillChunk(k); err != nil {
				t.Fatal(err)
			}
		}
		if gen.Pending() != 0 || gen.Position() != T {
			t.Fatalf("%s: %d pending at slot %d after chunks of %d tokens", mode, gen.Pending(), gen.Position(), T)
		}
		if got := greedyFrom(t, gen, logits, n); fmt.Sprint(got) != fmt.Sprint(whole) {
			t.Errorf("%s: chunked prefill gives %v, whole prefill %v", mode, got, whole)
		}

		// The cache now holds prompt + whole[:n] (each fed to Decode):
		// Extend with more tokens, against a fresh prefill of all of it.
		full := append(append(append([]int(nil), prompt...), whole...), more...)
		if logits, err = gen.Prefill([][]int{full}, n); err != nil {
			t.Fatal(err)
		}
		fresh := greedyFrom(t, gen, logits, n)
		if _, err = gen.Prefill([][]int{prompt}, n); err != nil {
			t.Fatal(err)
		}
		for _, id := range whole {
			if _, err = gen.Decode([]int{id}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := gen.Extend([][]int{more}, n+200); err != nil {
			t.Fatal(err)
		}
		if logits, err = gen.PrefillChunk(gen.Pending()); err != nil {
			t.Fatal(err)
		}
		if got := greedyFrom(t, gen, logits, n); fmt.Sprint(got) != fmt.Sprint(fresh) {
			t.Errorf("%s: extended cache gives %v, fresh prefill %v", mode, got, fresh)
		}
		r.Close()
	}
}

// TestStatesAreIndependent: two States stepped in turn on one Runner, each
// growing its cache at its own time, give the tokens each gives alone,
// and releasing one leaves the other running: the Runner holds no
// generation state.
func TestStatesAreIndependent(t *testing.T) {
	be := cpuBackend(t)
	l := loadDir(t, "../testdata/stories260K-hf")
	prompts := [][]int{{1, 403, 407, 261, 378}, {1, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401}}
	const n = 40
	for _, mode := range []Mode{Compiled, Eager} {
		r, err := NewRunner(be, l, Options{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		var alone [2][]int
		for i, p := range prompts {
			alone[i] = generateGreedy(t, r, p, n)
		}
		var sts [2]*State
		var logits [2][][]float32
		var got [2][]int
		for i, p := range prompts {
			sts[i] = r.NewState()
			if logits[i], err = sts[i].Prefill([][]int{p}, n); err != nil {
				t.Fatal(err)
			}
		}
		for step := 0; step < n; step++ {
			for i := range sts {
				if i == 1 && step == n/2 { // the second one's tokens so far must hold
					if fmt.Sprint(got[1]) != fmt.Sprint(alone[1][:len(got[1])]) {
						t.Fatalf("%s: state 1 %v, alone %v", mode, got[1], alone[1][:len(got[1])])
					}
					sts[1].Release()
					continue
				}
				if i == 1 && step > n/2 {
					continue
				}
				id := argmax(logits[i][0])
				got[i] = append(got[i], id)
				if logits[i], err = sts[i].Decode([]int{id}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(alone[0]) {
			t.Errorf("%s: interleaved %v, alone %v", mode, got[0], alone[0])
		}
		if _, err := sts[1].Decode([]int{1}); err == nil {
			t.Errorf("%s: a released state decoded", mode)
		}
		sts[0].Release()
		r.Close()
	}
}

// With ReuseLogits a State's steps return their logits in one buffer
// that the next step overwrites, with the values a State without it
// returns (the stories model, two rows, compiled, the go backend).
func TestStateReuseLogits(t *testing.T) {
	be := goBackend(t)
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := NewRunner(be, l, Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fresh, reused := r.NewState(), r.NewState()
	reused.ReuseLogits()
	prompts := [][]int{{1, 403, 407, 261, 378}, {1, 403}}
	a, err := fresh.Prefill(prompts, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reused.Prefill(prompts, 4)
	if err != nil {
		t.Fatal(err)
	}
	var buf, prevFresh *float32
	for step := 0; step < 3; step++ {
		for i := range a {
			if fmt.Sprint(a[i]) != fmt.Sprint(b[i]) {
				t.Fatalf("step %d, row %d: reused logits differ from fresh ones", step, i)
			}
		}
		if step > 0 && &b[0][0] != buf {
			t.Fatalf("step %d: the logits are not in the reused buffer", step)
		}
		if step > 0 && &a[0][0] == prevFresh {
			t.Fatalf("step %d: a State without ReuseLogits returned the last step's buffer", step)
		}
		buf, prevFresh = &b[0][0], &a[0][0]
		next := []int{step + 5, step + 9}
		if a, err = fresh.Decode(next); err != nil {
			t.Fatal(err)
		}
		if b, err = reused.Decode(next); err != nil {
			t.Fatal(err)
		}
	}
}

// DecodeArgmax gives, step after step, the argmax of the logits Decode
// gives (sample.Argmax, the sampler's greedy pick) on the go and cpu
// backends, compiled and eager; before a prefill it is an error, as
// Decode is.
func TestDecodeArgmax(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name string
		be   backends.Backend
		mode Mode
	}{{"go compiled", goBackend(t), Compiled}, {"cpu compiled", cpuBackend(t), Compiled}, {"cpu eager", cpuBackend(t), Eager}} {
		r, err := NewRunner(c.be, l, Options{Mode: c.mode})
		if err != nil {
			t.Fatal(err)
		}
		host, device := r.NewState(), r.NewState()
		if _, err := device.DecodeArgmax([]int{1}); err == nil {
			t.Errorf("%s: DecodeArgmax before a prefill: no error", c.name)
		}
		prompts := [][]int{{1, 403, 407, 261, 378}, {1, 403}}
		logits, err := host.Prefill(prompts, 8)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := device.Prefill(prompts, 8); err != nil {
			t.Fatal(err)
		}
		next := []int{sample.Argmax(logits[0]), sample.Argmax(logits[1])}
		for step := range 6 {
			if logits, err = host.Decode(next); err != nil {
				t.Fatal(err)
			}
			ids, err := device.DecodeArgmax(next)
			if err != nil {
				t.Fatal(err)
			}
			want := []int{sample.Argmax(logits[0]), sample.Argmax(logits[1])}
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("%s step %d: DecodeArgmax %v, the logits' argmax %v", c.name, step, ids, want)
			}
			next = want
		}
		r.Close()
	}
}
