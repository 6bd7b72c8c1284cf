package compile

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/testkit/bambaref"
	"github.com/tputool/tputool/pipeline/testkit/falconh1ref"
	"github.com/tputool/tputool/pipeline/testkit/granitehref"
	"github.com/tputool/tputool/pipeline/testkit/jambaref"
	"github.com/tputool/tputool/pipeline/testkit/lfm2ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
	"github.com/tputool/tputool/pipeline/testkit/nemotronhref"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
	"github.com/tputool/tputool/tpu"
)

// maxDiff is the largest difference between two rows of logits.
func maxDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i])-float64(b[i])))
	}
	return worst
}

// TestDecodeManyAndRewind: several tokens fed in one step give the
// logits that feeding them one at a time gives, after each; a State taken
// back over some of them and fed others gives what a State that never
// saw them gives, as does one taken back to its prompt's end; in both
// modes on tputool's CPU engine, the cache growing past its first
// bucket, with int8 KV caches (whose scales a rewritten slot rewrites),
// for a model whose sliding window is shorter than the text (Mistral) and
// for a mixture of experts in the graph (Qwen3-MoE).
// GoMLX's go backend, which writes cache slots by adding into their
// zeros, is not Rewindable.
func TestDecodeManyAndRewind(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gr, err := NewRunner(goBackend(t), l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if gr.Rewindable() {
		t.Error("the go backend adds into cache slots: not Rewindable")
	}
	gr.Close()
	prompt := []int{1, 403, 407, 261, 378, 9}
	for _, mode := range []Mode{Compiled, Eager} {
		for _, kv := range []dtypes.DType{dtypes.InvalidDType, dtypes.Int8} {
			t.Run(fmt.Sprintf("stories/%s/kv%s", mode, kv), func(t *testing.T) {
				r, err := NewRunner(cpuBackend(t), l, Options{Mode: mode, KVDType: kv})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if r.FixedSteps() != (mode == Eager) {
					t.Errorf("%s mode on the CPU engine: FixedSteps %v (eager mode's layer programs keep a bounded number of step lengths)", mode, r.FixedSteps())
				}
				checkDecodeMany(t, r, prompt, 500)
			})
		}
	}
	tc := classifierCases()[4] // Mistral, a window of 6
	tc.Arch, tc.Labels = lmckpt.CausalArch(tc.Arch), 0
	dir := t.TempDir()
	if err := tc.Write(dir); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(cpuBackend(t), loadDir(t, dir), Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Run("mistral-window", func(t *testing.T) { checkDecodeMany(t, r, []int{1, 5, 9, 13, 17}, 60) })

	// A mixture of experts in the graph: each token of a step routed to
	// its own experts.
	mdir := t.TempDir()
	if err := qwenref.TinyQwen3MoE().Write(mdir); err != nil {
		t.Fatal(err)
	}
	mr, err := NewRunner(cpuBackend(t), loadDir(t, mdir), Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	t.Run("qwen3-moe", func(t *testing.T) { checkDecodeMany(t, mr, []int{1, 5, 9, 13, 17}, 60) })
}

// decodeOneByOne prefills prompt on a new State of r (for 40 new
// tokens) and feeds it n tokens (ids from 3 below vocab) one at a time;
// it returns them, the logits after each, and the State (released when
// the test ends).
func decodeOneByOne(t *testing.T, r *Runner, prompt []int, n, vocab int) ([]int, [][]float32, *State) {
	t.Helper()
	feed := make([]int, n)
	for i := range feed {
		feed[i] = 3 + (i*37)%(vocab-3)
	}
	one := prefilled(t, r, prompt)
	var want [][]float32
	for _, id := range feed {
		l, err := one.Decode([]int{id})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, append([]float32(nil), l[0]...))
	}
	return feed, want, one
}

// prefilled is a new State of r with prompt prefilled for 40 new tokens,
// released when the test ends.
func prefilled(t *testing.T, r *Runner, prompt []int) *State {
	t.Helper()
	st := r.NewState()
	t.Cleanup(st.Release)
	if _, err := st.Prefill([][]int{prompt}, 40); err != nil {
		t.Fatal(err)
	}
	return st
}

// checkDecodeMany feeds 30 tokens (ids from 3 below vocab) after prompt
// one at a time on one State and in steps with wrong tokens fed and
// taken back between them on another, and compares the logits.
func checkDecodeMany(t *testing.T, r *Runner, prompt []int, vocab int) {
	t.Helper()
	if !r.Rewindable() {
		t.Fatal("a model whose state is all KV caches, on the CPU engine: Rewindable")
	}
	feed, want, _ := decodeOneByOne(t, r, prompt, 30, vocab)
	many := prefilled(t, r, prompt)
	// Fed in steps of 7, 1 and the rest, with wrong tokens fed and taken
	// back between them.
	got := [][]float32{}
	for _, cut := range [][2]int{{0, 7}, {7, 8}, {8, 30}} {
		wrong := []int{11, 12, 13}
		if _, err := many.DecodeMany(wrong); err != nil {
			t.Fatal(err)
		}
		if err := many.Rewind(len(wrong)); err != nil {
			t.Fatal(err)
		}
		rows, err := many.DecodeMany(feed[cut[0]:cut[1]])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rows...)
	}
	for i := range feed {
		if d := maxDiff(got[i], want[i]); d > 1e-4 {
			t.Errorf("after token %d: logits differ by %g", i, d)
		}
	}
	// Back to the prompt's end: the first token's logits again.
	if err := many.Rewind(len(feed)); err != nil {
		t.Fatal(err)
	}
	rows, err := many.DecodeMany(feed[:1])
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(rows[0], want[0]); d > 1e-4 {
		t.Errorf("rewound to the prompt: logits differ by %g", d)
	}
	if err := many.Rewind(many.Position()); err == nil {
		t.Error("a rewind into the prompt: no error")
	}
}

// TestDecodeManyRefuses: a model with recurrent state (Qwen3.5's linear
// attention) is not Rewindable but Speculates: it takes back only tokens
// of its last several-token step; a batch of two rows, no room and no
// tokens are errors.
func TestDecodeManyRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := qwenref.TinyQwen35().Write(dir); err != nil {
		t.Fatal(err)
	}
	rq, err := NewRunner(cpuBackend(t), loadDir(t, dir), Options{Mode: Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer rq.Close()
	if rq.Rewindable() || !rq.Speculates() {
		t.Errorf("Qwen3.5's recurrent state: Rewindable %v, Speculates %v; want false, true", rq.Rewindable(), rq.Speculates())
	}
	st := rq.NewState()
	defer st.Release()
	if _, err := st.Prefill([][]int{{1, 2, 3}}, 8); err != nil {
		t.Fatal(err)
	}
	if err := st.Rewind(1); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("Qwen3.5 rewind with no several-token step: %v, want ErrUnsupported", err)
	}
	if _, err := st.DecodeMany([]int{4, 5}); err != nil {
		t.Fatal(err)
	}
	if err := st.Rewind(3); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("Qwen3.5 rewind past its last step: %v, want ErrUnsupported", err)
	}
	if _, err := st.Decode([]int{6}); err != nil {
		t.Fatal(err)
	}
	if err := st.Rewind(1); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("Qwen3.5 rewind after a one-token step: %v, want ErrUnsupported", err)
	}
	// A prompt continued after the step: nothing to take back.
	if _, err := st.DecodeMany([]int{4, 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Extend([][]int{{7, 8}}, 4); err != nil {
		t.Fatal(err)
	}
	if err := st.Rewind(1); err == nil {
		t.Error("Qwen3.5 rewind after Extend: no error")
	}
	if st.Pending() != 2 {
		t.Errorf("%d tokens pending after the refused rewind, want the 2 of Extend", st.Pending())
	}
	// On a device (no host memory) the copy would go through the host and
	// every replay length compile: no speculation.
	caps := tpu.CapabilitiesOf(cpuBackend(t))
	caps.HostMemory = false
	rd, err := NewRunner(cpuBackend(t), loadDir(t, dir), Options{Mode: Compiled, Caps: &caps})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if rd.Speculates() {
		t.Error("Qwen3.5 on a backend without host memory: Speculates")
	}

	r := storiesRunner(t)
	two := r.NewState()
	defer two.Release()
	if _, err := two.Prefill([][]int{{1, 2}, {1, 3}}, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := two.DecodeMany([]int{4, 5}); err == nil {
		t.Error("two rows: no error")
	}
	one := r.NewState()
	defer one.Release()
	if _, err := one.Prefill([][]int{{1, 2}}, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := one.DecodeMany(nil); err == nil {
		t.Error("no tokens: no error")
	}
	if _, err := one.DecodeMany(make([]int, one.Room()+1)); err == nil {
		t.Errorf("%d tokens with room for %d: no error", one.Room()+1, one.Room())
	}
}

// TestDecodeManyRecurrent: on a model with recurrent state (Qwen3.5's
// DeltaNet, Granite 4.0-H's and Nemotron 3 Nano's Mamba-2, in compiled
// mode) several tokens fed
// in one step give the logits of feeding them one at a time, and a step
// taken back over some of its tokens (the state restored and the rest fed
// again) and fed others gives what a State that never saw them gives: the
// tokens of speculative decoding. In eager mode, whose steps all have one
// length, it does not speculate.
func TestDecodeManyRecurrent(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(dir string) error
	}{{"qwen3.5", qwenref.TinyQwen35().Write}, {"granite-4.0-h", granitehref.TinyHybrid().Write}, {"nemotron-3-nano", nemotronhref.TinyNano().Write}, {"lfm2-moe", lfm2ref.TinyMoE().Write},
		{"falcon-h1", falconh1ref.Tiny().Write}, {"mamba", mambaref.Tiny().Write}, {"falcon-mamba", mambaref.TinyFalcon().Write}, {"jamba", jambaref.Tiny().Write}, {"bamba", bambaref.Tiny().Write}, {"zamba2", zamba2ref.Tiny().Write}} {
		t.Run(c.name, func(t *testing.T) { decodeManyRecurrent(t, c.write) })
	}
}

func decodeManyRecurrent(t *testing.T, write func(dir string) error) {
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	l := loadDir(t, dir)
	vocab := l.Model.Spec().VocabSize
	er, err := NewRunner(cpuBackend(t), l, Options{Mode: Eager})
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	if er.Speculates() {
		t.Error("eager mode: Speculates")
	}
	for _, mode := range []Mode{Compiled} {
		t.Run(mode.String(), func(t *testing.T) {
			r, err := NewRunner(cpuBackend(t), l, Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			prompt := []int{1, 5, 9, 13, 17}
			feed, want, one := decodeOneByOne(t, r, prompt, 24, vocab)
			many := prefilled(t, r, prompt)
			before := prefillCalls(r)
			// Each step feeds the next tokens and two wrong ones, keeps
			// the right ones (the logits after them compared) and takes
			// the wrong ones back; a step of wrong tokens alone is taken
			// back whole; one step keeps everything.
			at := 0
			for _, n := range []int{3, 1, 5, 0, 4, 2, 6} {
				step := append(append([]int(nil), feed[at:at+n]...), 11, 12)
				wrong := 2
				if n == 6 {
					step, wrong = feed[at:at+n], 0
				}
				rows, err := many.DecodeMany(step)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if d := maxDiff(rows[i], want[at+i]); d > 1e-4 {
						t.Errorf("after token %d: logits differ by %g", at+i, d)
					}
				}
				if err := many.Rewind(wrong); err != nil {
					t.Fatal(err)
				}
				if got := many.Position(); got != one.Position()-len(feed)+at+n {
					t.Fatalf("position %d after keeping %d tokens, want %d", got, at+n, one.Position()-len(feed)+at+n)
				}
				at += n
			}
			// The replays ran on DecodeMany's program (uncapped, its
			// executables those the steps compiled), not on prefill's.
			if after := prefillCalls(r); after != before {
				t.Errorf("prefill ran %d times during the steps: the replays should not run it", after-before)
			}
			// One token at a time from here gives the reference's logits.
			for ; at < len(feed)-1; at++ {
				rows, err := many.Decode([]int{feed[at]})
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(rows[0], want[at]); d > 1e-4 {
					t.Errorf("decoding token %d after the steps: logits differ by %g", at, d)
				}
			}
		})
	}
}

// prefillCalls is how many times r's prefill programs ran.
func prefillCalls(r *Runner) int {
	n := 0
	for _, p := range r.Stats().Programs {
		if strings.HasPrefix(p.Name, "prefill") {
			n += p.Calls
		}
	}
	return n
}
