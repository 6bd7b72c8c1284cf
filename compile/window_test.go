package compile

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
)

// TestPrefillWindow: a piece's end rounded up to a quarter of the cache,
// the whole cache (0) at its last quarter, for small caches and where the
// runner does not window.
func TestPrefillWindow(t *testing.T) {
	r := &Runner{opts: Options{Mode: Compiled, Caps: &tpu.Capabilities{HostMemory: true}}}
	for _, c := range []struct{ end, cacheLen, want int }{
		{128, 768, 192}, {192, 768, 192}, {193, 768, 384}, {256, 768, 384}, {384, 768, 384},
		{512, 768, 576}, {577, 768, 0}, {768, 768, 0},
		{1, 128, 32}, {100, 128, 0}, {64, 64, 0}, {10, 100, 0},
		{300, 1000, 500}, // quarters of 250
	} {
		if got := r.prefillWindow(c.end, c.cacheLen); got != c.want {
			t.Errorf("prefillWindow(%d, %d) = %d, want %d", c.end, c.cacheLen, got, c.want)
		}
	}
	for _, o := range []Options{
		{Mode: Eager, Caps: &tpu.Capabilities{HostMemory: true}},
		{Mode: Compiled, Caps: &tpu.Capabilities{}},
	} {
		r := &Runner{opts: o}
		if got := r.prefillWindow(128, 768); got != 0 {
			t.Errorf("%s, host memory %v: window %d, want none", o.Mode, o.Caps.HostMemory, got)
		}
	}
}

// TestWindowedPrefill runs a prompt in pieces into a cache of 512 slots,
// reading windows of 128, 256 and 384 slots, and compares every piece's
// logits with a runner that reads the whole cache (the same graph, no
// window), on both CPU backends. A window that missed the piece's own
// last slots would drop keys its queries see and fail it.
func TestWindowedPrefill(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := make([]int, 300)
	for i := range prompt {
		prompt[i] = 3 + rng.IntN(500)
	}
	for _, be := range []backends.Backend{cpuBackend(t), goBackend(t)} {
		run := func(hostMemory bool) ([][]float32, *Runner) {
			caps := tpu.CapabilitiesOf(be)
			caps.HostMemory = hostMemory
			r, err := NewRunner(be, l, Options{Mode: Compiled, CacheLen: 512, Caps: &caps})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			st := r.NewState()
			defer st.Release()
			if _, err := st.Begin([][]int{prompt}, 8); err != nil {
				t.Fatal(err)
			}
			var out [][]float32
			for st.Pending() > 0 {
				logits, err := st.PrefillChunk(min(64, st.Pending()))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, slices.Clone(logits[0]))
			}
			return out, r
		}
		got, r := run(true)
		want, _ := run(false)
		for i := range want {
			diff := 0.0
			for j := range want[i] {
				diff = math.Max(diff, math.Abs(float64(got[i][j]-want[i][j])))
			}
			if diff > 1e-4 {
				t.Errorf("%s: piece %d: windowed logits differ by %g", be.Name(), i, diff)
			}
		}
		var windows []string
		for _, p := range r.Stats().Programs {
			if strings.HasPrefix(p.Name, "prefill/") && p.Calls > 0 {
				windows = append(windows, p.Name)
			}
		}
		slices.Sort(windows)
		// Pieces end at 64, 128, 192, 256 and 300: windows 128, 256, 384.
		if want := []string{"prefill/w128", "prefill/w256", "prefill/w384"}; !slices.Equal(windows, want) {
			t.Errorf("%s: windowed programs run %v, want %v", be.Name(), windows, want)
		}
	}
}

// TestPrefillPiece: a generation on a backend that does not compute in
// host memory (an XLA device) prefills in fixed pieces (one, for prompts
// under DevicePrefillPiece), and running the same prompts again compiles
// nothing; on a host-memory backend the pieces stay timed (PrefillPiece
// 0). generate's TestPrefillFixedPieces checks that fixed pieces do not
// follow the clock.
func TestPrefillPiece(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	be := goBackend(t)
	caps := tpu.CapabilitiesOf(be)
	if !caps.HostMemory {
		t.Fatal("the go backend computes in host memory")
	}
	r, err := NewRunner(be, l, Options{Mode: Compiled, Caps: &caps})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.NewState().PrefillPiece(); got != 0 {
		t.Errorf("host memory: PrefillPiece %d, want 0 (timed pieces)", got)
	}

	caps.HostMemory = false
	d, err := NewRunner(be, l, Options{Mode: Compiled, Caps: &caps})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st := d.NewState()
	defer st.Release()
	if got := st.PrefillPiece(); got != DevicePrefillPiece {
		t.Fatalf("device: PrefillPiece %d, want %d", got, DevicePrefillPiece)
	}
	prompts := [][]int{make([]int, 300), make([]int, 200)}
	for i := range prompts {
		for j := range prompts[i] {
			prompts[i][j] = 3 + (i*7+j*13)%400
		}
	}
	var misses []int
	for range 2 {
		if _, err := generate.Prefill(context.Background(), st, prompts, generate.Options{MaxNewTokens: 8}); err != nil {
			t.Fatal(err)
		}
		misses = append(misses, d.Stats().Sum().Misses)
	}
	if misses[1] != misses[0] {
		t.Errorf("the second prefill of the same prompts compiled %d executables", misses[1]-misses[0])
	}
	var pieces []int
	for _, p := range d.Stats().Programs {
		if strings.HasPrefix(p.Name, "prefill") {
			pieces = append(pieces, p.Calls)
		}
	}
	if !slices.Equal(pieces, []int{2}) {
		t.Errorf("prefill programs' calls %v, want one piece a run ([2])", pieces)
	}
}
