package compile

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/internal/errs"
	_ "github.com/tputool/tputool/pipeline/afmoe"
	_ "github.com/tputool/tputool/pipeline/bamba"
	_ "github.com/tputool/tputool/pipeline/falconh1"
	_ "github.com/tputool/tputool/pipeline/gemma3"
	_ "github.com/tputool/tputool/pipeline/gemma3n"
	_ "github.com/tputool/tputool/pipeline/gemma4"
	_ "github.com/tputool/tputool/pipeline/granite"
	_ "github.com/tputool/tputool/pipeline/jamba"
	_ "github.com/tputool/tputool/pipeline/lfm2"
	_ "github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/mamba"
	_ "github.com/tputool/tputool/pipeline/mistral"
	_ "github.com/tputool/tputool/pipeline/nemotronh"
	_ "github.com/tputool/tputool/pipeline/phi3"
	_ "github.com/tputool/tputool/pipeline/qwen35"
	_ "github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/serve"
	"github.com/tputool/tputool/pipeline/testkit/afmoeref"
	"github.com/tputool/tputool/pipeline/testkit/bambaref"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/falconh1ref"
	"github.com/tputool/tputool/pipeline/testkit/gemma3nref"
	"github.com/tputool/tputool/pipeline/testkit/gemma4ref"
	"github.com/tputool/tputool/pipeline/testkit/granitehref"
	"github.com/tputool/tputool/pipeline/testkit/jambaref"
	"github.com/tputool/tputool/pipeline/testkit/lfm2ref"
	"github.com/tputool/tputool/pipeline/testkit/llama4ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
	"github.com/tputool/tputool/pipeline/testkit/nemotronhref"
	"github.com/tputool/tputool/pipeline/testkit/phi3ref"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
	_ "github.com/tputool/tputool/pipeline/zamba2"
)

// greedy is the index of the largest logit.
func greedy(logits []float32) int {
	best := 0
	for j, v := range logits {
		if v > logits[best] {
			best = j
		}
	}
	return best
}

// generateGreedy is generate's path: one prompt, Prefill then Decode.
func generateGreedy(t *testing.T, r *Runner, prompt []int, n int) []int {
	t.Helper()
	gen := r.NewState()
	defer gen.Release()
	logits, err := gen.Prefill([][]int{prompt}, n)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for {
		id := greedy(logits[0])
		got = append(got, id)
		if len(got) == n {
			return got
		}
		if logits, err = gen.Decode([]int{id}); err != nil {
			t.Fatal(err)
		}
	}
}

// batchSeq is one sequence of a batch test: it joins at decode step
// `join` and generates n tokens.
type batchSeq struct {
	prompt []int
	n      int
	join   int
}

// runBatch serves seqs as the server's scheduler does: one prefill piece
// and one decode step per round, a prefill starting when a slot is free
// and its sequence's join step has come. It returns each sequence's ids.
func runBatch(t *testing.T, b *Batch, seqs []batchSeq) [][]int {
	got, _ := runBatchReusing(t, b, seqs)
	return got
}

// testPrefixCache is the prefix cache of the tests' serve.Slots over a
// Batch whose options allow prefixes.
const testPrefixCache = 2

// slotsOf is the server's bookkeeping over b (serve.Slots), released when
// the test ends.
func slotsOf(t testing.TB, b *Batch) *serve.Slots {
	n := 0
	if b.o.Prefixes {
		n = testPrefixCache
	}
	sl := serve.NewSlots(serve.Adapt(b), n)
	t.Cleanup(sl.Close)
	return sl
}

// runBatchReusing is runBatch, also returning the prompt tokens taken
// from the prefix cache.
func runBatchReusing(t *testing.T, bt *Batch, seqs []batchSeq) ([][]int, int) {
	t.Helper()
	b := slotsOf(t, bt)
	defer b.Close() // before the Runner closes
	reused := 0
	got := make([][]int, len(seqs))
	handle := make([]int, len(seqs))
	var running []int // indices into seqs
	var pre *serve.Prefilling
	var preSeqs []int
	queued := 0
	for step := 0; step < 10000; step++ {
		// A prefill takes every sequence whose turn has come, as many as
		// free slots and MaxPrefill allow.
		// (Any prompts may prefill together; the scheduler groups equal
		// PrefillGroup keys, but a prompt the prefix cache serves alone.)
		for pre == nil && queued < len(seqs) && seqs[queued].join <= step && len(running)+len(preSeqs) < b.Slots() && len(preSeqs) < b.MaxPrefill() {
			key, _ := b.PrefillGroup(seqs[queued].prompt)
			alone := key < 0
			if alone && len(preSeqs) > 0 {
				break
			}
			preSeqs = append(preSeqs, queued)
			queued++
			if alone {
				break
			}
		}
		if pre == nil && len(preSeqs) > 0 {
			var prompts [][]int
			for _, i := range preSeqs {
				prompts = append(prompts, seqs[i].prompt)
			}
			var err error
			if pre, err = b.StartPrefill(prompts); err != nil {
				t.Fatal(err)
			}
		}
		if pre != nil {
			logits, done, err := pre.Step()
			if err != nil {
				t.Fatal(err)
			}
			if done {
				reused += pre.Reused()
				for k, i := range preSeqs {
					h, err := b.Insert(pre, k)
					if err != nil {
						t.Fatal(err)
					}
					handle[i] = h
					got[i] = append(got[i], greedy(logits[k]))
					running = append(running, i)
				}
				pre.Close()
				pre, preSeqs = nil, nil
			}
		}
		// Finished sequences leave before the step.
		running = slices.DeleteFunc(running, func(i int) bool {
			if len(got[i]) == seqs[i].n {
				b.Free(handle[i])
				return true
			}
			return false
		})
		if len(running) > 0 {
			hs := make([]int, len(running))
			toks := make([]int, len(running))
			for k, i := range running {
				hs[k], toks[k] = handle[i], got[i][len(got[i])-1]
			}
			logits, err := b.Decode(hs, toks)
			if err != nil {
				t.Fatal(err)
			}
			for k, i := range running {
				got[i] = append(got[i], greedy(logits[k]))
			}
		}
		if queued == len(seqs) && pre == nil && len(preSeqs) == 0 && len(running) == 0 {
			return got, reused
		}
	}
	t.Fatal("batch did not finish")
	return nil, 0
}

// batchTest checks that every sequence served by continuous batching
// gets generate's greedy tokens, whatever joins and leaves around it.
func batchTest(t *testing.T, be backends.Backend, l *lm.Loaded, mode Mode, o BatchOptions, seqs []batchSeq) int {
	t.Helper()
	return batchTestWith(t, be, l, Options{Mode: mode}, o, seqs)
}

// batchTestWith is batchTest with the Runner's options.
func batchTestWith(t *testing.T, be backends.Backend, l *lm.Loaded, opts Options, o BatchOptions, seqs []batchSeq) int {
	t.Helper()
	r, err := NewRunner(be, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := make([][]int, len(seqs))
	for i, s := range seqs {
		want[i] = generateGreedy(t, r, s.prompt, s.n)
	}
	b, err := NewBatch(r, o)
	if err != nil {
		t.Fatal(err)
	}
	got, reused := runBatchReusing(t, b, seqs)
	calls := map[string]int{}
	for _, p := range r.Stats().Programs {
		calls[p.Name] = p.Calls
	}
	if calls["serve-write-row"] != len(seqs) || calls["serve-rows"]+calls["serve-slots"] < 3 {
		t.Errorf("%d inserts and %d relayout steps, want %d and at least 3", calls["serve-write-row"], calls["serve-rows"]+calls["serve-slots"], len(seqs))
	}
	for i := range seqs {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("sequence %d (prompt of %d tokens, joining at step %d):\n got %v\nwant %v", i, len(seqs[i].prompt), seqs[i].join, got[i], want[i])
		}
	}
	return reused
}

// testPrompt is a prompt of n token ids below vocab, seeded.
func testPrompt(seed uint64, n, vocab int) []int {
	r := lmckpt.NewRand(seed)
	p := make([]int, n)
	for i := range p {
		p[i] = int(r.Next() % uint64(vocab))
	}
	return p
}

// mixedSeqs are sequences of various prompt lengths (one spanning
// several prefill pieces) and lengths, joining at various steps, more
// than the slots so that rows are reused, the batch grows and shrinks,
// and the cache is compacted.
func mixedSeqs(vocab int) []batchSeq {
	return []batchSeq{
		{prompt: testPrompt(1, 5, vocab), n: 20, join: 0},
		{prompt: testPrompt(2, 1, vocab), n: 7, join: 0},
		{prompt: testPrompt(3, 37, vocab), n: 12, join: 2},
		{prompt: testPrompt(4, 9, vocab), n: 30, join: 3},
		{prompt: testPrompt(5, 16, vocab), n: 3, join: 4},
		{prompt: testPrompt(6, 3, vocab), n: 25, join: 30},
		{prompt: testPrompt(7, 50, vocab), n: 10, join: 31},
		{prompt: testPrompt(8, 2, vocab), n: 40, join: 60},
	}
}

func TestBatchMatchesGenerate(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	vocab := l.Model.Spec().VocabSize
	o := BatchOptions{MaxBatch: 4, MaxContext: 96, PrefillChunk: 16}
	for _, c := range []struct {
		name string
		be   func(testing.TB) backends.Backend
		mode Mode
	}{
		{"cpu/compiled", cpuBackend, Compiled},
		{"cpu/eager", cpuBackend, Eager},
		{"go/compiled", goBackend, Compiled},
	} {
		t.Run(c.name, func(t *testing.T) {
			batchTest(t, c.be(t), l, c.mode, o, mixedSeqs(vocab))
		})
	}
	// KV caches held in bf16 or int8 under f32 compute: the batch's
	// relayouts, growth and inserts move the narrow caches (and the int8
	// caches' scales, state of their own), and still give generate's
	// tokens (with the same caches); on the go backend through the
	// scatter-add update.
	for _, be := range []struct {
		name string
		be   func(testing.TB) backends.Backend
	}{{"cpu", cpuBackend}, {"go", goBackend}} {
		t.Run("kv-bf16/"+be.name, func(t *testing.T) {
			batchTestWith(t, be.be(t), l, Options{KVDType: dtypes.BFloat16}, o, mixedSeqs(vocab))
		})
		t.Run("kv-int8/"+be.name, func(t *testing.T) {
			batchTestWith(t, be.be(t), l, Options{KVDType: dtypes.Int8}, o, mixedSeqs(vocab))
		})
	}
	// A burst: ten prompts of 1 to 40 tokens at once, prefilled eight
	// together (rows of very different lengths) then two.
	t.Run("burst", func(t *testing.T) {
		batchTest(t, cpuBackend(t), l, Compiled, BatchOptions{MaxBatch: 8, MaxContext: 96, PrefillChunk: 64}, burstSeqs(vocab, 10))
	})
	// Odd limits: 3 slots (batch buckets 1, 2, 3), a context that is no
	// bucket (slots 32, 64, 72), a piece of 5 tokens (rounded to 8), and
	// sequences that reach the context's end.
	t.Run("odd-limits", func(t *testing.T) {
		seqs := mixedSeqs(vocab)
		seqs = append(seqs, batchSeq{prompt: testPrompt(9, 60, vocab), n: 10, join: 61}, batchSeq{prompt: testPrompt(10, 1, vocab), n: 69, join: 62})
		batchTest(t, cpuBackend(t), l, Compiled, BatchOptions{MaxBatch: 3, MaxContext: 70, PrefillChunk: 5}, seqs)
	})
}

// TestBatchRecurrentAndRouted covers the other kinds of layer state and
// execution: Qwen3.5's DeltaNet state (no slot axis, copied whole),
// Qwen3-MoE's host-routed experts, and sliding-window attention (Gemma 3's
// local layers, Mistral's), whose window is measured from the shared clock,
// DeepSeek-V3's one latent cache a layer, the key/value caches of
// GLM-4.5 and MiniMax-M2, built on DeepSeek-V3's decoder, and Llama 4's
// chunked attention, whose chunks are counted from each row's first
// token, not from the shared clock, Granite 4.0-H's Mamba-2 state,
// Nemotron 3 Nano's layers without any state, and AFMoE's windowed
// layers beside NoPE ones.
func TestBatchRecurrentAndRouted(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(dir string) error
	}{
		{"qwen3.5", qwenref.TinyQwen35().Write},
		{"qwen3-moe", qwenref.TinyQwen3MoE().Write},
		{"gemma3", slidingTiny("Gemma3ForCausalLM").Write},
		{"mistral", slidingTiny("MistralForCausalLM").Write},
		{"gemma4-kv-sharing", gemma4ref.TinyE().Write},     // layers without a cache of their own
		{"gemma3n", gemma3nref.Tiny().Write},               // AltUp's four streams carried with the per-layer inputs, KV sharing
		{"deepseek-v3", dsref.TinyDeepSeek().Write},        // one latent cache a layer (MLA), keys and values at once
		{"glm-4.5", dsref.TinyGLM().Write},                 // DeepSeek-V3's experts after grouped-query attention
		{"minimax-m2", dsref.TinyMiniMax().Write},          // q/k norms over whole projections
		{"llama4", llama4ref.TinyScout().Write},            // chunks of 4 positions from each row's first token, a NoPE layer's temperature
		{"granite-4.0-h", granitehref.TinyHybrid().Write},  // Mamba-2 layers: a convolution's last inputs and an SSM state, no slot axis
		{"nemotron-3-nano", nemotronhref.TinyNano().Write}, // MoE layers with no state of their own, Mamba-2 in groups
		{"lfm2-moe", lfm2ref.TinyMoE().Write},              // short convolutions: the last two inputs, no slot axis
		{"phi-4-mini", phi3ref.TinyDense().Write},          // LongRoPE's factors chosen per row, a window, fused projections
		{"phi-3.5-moe", phi3ref.TinyMoE().Write},           // sparsemixer routing, LayerNorms
		{"afmoe", afmoeref.Tiny().Write},                   // a window over rotated layers beside NoPE ones, sandwich norms, the attention's gate
		{"falcon-h1", falconh1ref.Tiny().Write},            // a KV cache and Mamba-2's state in one layer
		{"mamba", mambaref.Tiny().Write},                   // no attention at all: Mamba-1's state alone
		{"falcon-mamba", mambaref.TinyFalcon().Write},      // the same with dt, B and C normed
		{"jamba", jambaref.Tiny().Write},                   // Mamba-1 and unrotated attention layers, experts on every second
		{"bamba", bambaref.Tiny().Write},                   // Mamba-2 beside attention rotating half of each head
		{"zamba2", zamba2ref.Tiny().Write},                 // shared attention blocks with per-layer adapters, the original embeddings carried
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.write(dir); err != nil {
				t.Fatal(err)
			}
			l, err := lmckpt.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			vocab := l.Model.Spec().VocabSize
			o := BatchOptions{MaxBatch: 4, MaxContext: 96, PrefillChunk: 16}
			batchTest(t, cpuBackend(t), l, Compiled, o, mixedSeqs(vocab))
			batchTest(t, cpuBackend(t), l, Compiled, o, burstSeqs(vocab, 7)) // prefilled 4 together, then 3 in a batch of 4 rows
			batchTestWith(t, cpuBackend(t), l, Options{KVDType: dtypes.BFloat16}, o, mixedSeqs(vocab))
			batchTestWith(t, cpuBackend(t), l, Options{KVDType: dtypes.Int8}, o, mixedSeqs(vocab))
		})
	}
}

// storiesRunner is the stories model compiled on the cpu backend, closed
// with the test.
func storiesRunner(t *testing.T) *Runner { return storiesRunnerWith(t, Options{}) }

// storiesRunnerWith is storiesRunner with options o.
func storiesRunnerWith(t *testing.T, o Options) *Runner {
	t.Helper()
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r, err := NewRunner(cpuBackend(t), l, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// storiesBatch is a Batch with options o over the stories260K model on the
// cpu backend, closed (with its Runner and checkpoint) when the test ends.
func storiesBatch(t *testing.T, o BatchOptions) (*Runner, *Batch) {
	t.Helper()
	return storiesBatchWith(t, Options{}, o)
}

// storiesBatchWith is storiesBatch with the Runner's options ro.
func storiesBatchWith(t *testing.T, ro Options, o BatchOptions) (*Runner, *Batch) {
	t.Helper()
	r := storiesRunnerWith(t, ro)
	b, err := NewBatch(r, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return r, b
}

// TestSlotLadder: powers of two from 32, the midpoints from 64 where
// asked, and the context rounded up to 8 last.
func TestSlotLadder(t *testing.T) {
	for _, c := range []struct {
		max  int
		mid  bool
		want []int
	}{
		{160, false, []int{32, 64, 128, 160}},
		{160, true, []int{32, 64, 96, 128, 160}},
		{2048, true, []int{32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048}},
		{100, true, []int{32, 64, 96, 104}},
		{20, true, []int{24}},
	} {
		if got := slotLadder(c.max, c.mid); !slices.Equal(got, c.want) {
			t.Errorf("slotLadder(%d, %v) = %v, want %v", c.max, c.mid, got, c.want)
		}
	}
}

// TestBatchWarmup checks that after Warmup serving compiles nothing, in
// both modes, and that a Batch's prefills read whole caches (no windowed
// programs).
func TestBatchWarmup(t *testing.T) {
	for _, mode := range []Mode{Compiled, Eager} {
		t.Run(mode.String(), func(t *testing.T) {
			r, b := storiesBatchWith(t, Options{Mode: mode}, BatchOptions{MaxBatch: 4, MaxContext: 160, PrefillChunk: 16, Prefixes: true})
			if err := b.Warmup(); err != nil {
				t.Fatal(err)
			}
			compiled := func() map[string]int {
				m := map[string]int{}
				for _, p := range r.Stats().Programs {
					m[p.Name] = p.Misses
				}
				return m
			}
			before := compiled()
			if mode == Compiled && before["decode"] != 3*5 { // rows 1, 2, 4 x slots 32, 64, 96, 128, 160
				t.Errorf("warmup compiled %d decode executables, want 15", before["decode"])
			}
			runBatch(t, b, mixedSeqs(r.Spec().VocabSize))
			if _, reused := runBatchReusing(t, b, sharedPrefixSeqs(r.Spec().VocabSize)); reused == 0 {
				t.Error("no prefix reused")
			}
			for name, n := range compiled() {
				if n != before[name] {
					t.Errorf("%s: %d executables compiled under load after warmup", name, n-before[name])
				}
				if strings.HasPrefix(name, "prefill/w") {
					t.Errorf("%s: a Batch's prefills read whole caches (window.go)", name)
				}
			}
		})
	}
}

// BenchmarkBatchDecode measures decode steps of a Batch with 1, 8 and 32
// running sequences on the model in $TPUTOOL_BENCH_MODEL (skipped when
// unset; scripts/gen-llm-checkpoint writes the 110M one): tokens/s is
// the aggregate decode rate, each sequence 64 prompt tokens in.
func BenchmarkBatchDecode(b *testing.B) {
	dir := os.Getenv("TPUTOOL_BENCH_MODEL")
	if dir == "" {
		b.Skip("TPUTOOL_BENCH_MODEL is not set")
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r, err := NewRunner(cpuBackend(b), l, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			eng, err := NewBatch(r, BatchOptions{MaxBatch: n, MaxContext: 1024})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			bt := slotsOf(b, eng)
			var seqs, toks []int
			for i := 0; i < n; i++ {
				p, err := bt.StartPrefill([][]int{testPrompt(uint64(i), 64, 32000)})
				if err != nil {
					b.Fatal(err)
				}
				for done := false; !done; {
					if _, done, err = p.Step(); err != nil {
						b.Fatal(err)
					}
				}
				h, err := bt.Insert(p, 0)
				if err != nil {
					b.Fatal(err)
				}
				p.Close()
				seqs, toks = append(seqs, h), append(toks, i)
			}
			if _, err := bt.Decode(seqs, toks); err != nil { // compile
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := bt.Decode(seqs, toks); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
			for _, h := range seqs {
				bt.Free(h)
			}
		})
	}
}

// sharedPrefixSeqs are chat-like prompts: a 45-token system prefix and
// different questions, one prompt repeated, one sharing only part of the
// prefix, joining at different times.
func sharedPrefixSeqs(vocab int) []batchSeq {
	system := testPrompt(20, 45, vocab)
	with := func(seed uint64, n int) []int { return append(slices.Clone(system), testPrompt(seed, n, vocab)...) }
	return []batchSeq{
		{prompt: with(21, 6), n: 12, join: 0},
		{prompt: with(22, 30), n: 9, join: 0},
		{prompt: with(23, 1), n: 15, join: 3},
		{prompt: with(21, 6), n: 5, join: 10},
		{prompt: append(slices.Clone(system[:20]), testPrompt(24, 9, vocab)...), n: 8, join: 12},
		{prompt: with(25, 70), n: 6, join: 20},
	}
}

// TestBatchPrefixReuse: prompts sharing a prefix with an earlier one start
// from its cached KV and still give generate's greedy tokens (with f32
// and int8 caches).
func TestBatchPrefixReuse(t *testing.T) {
	l, err := lmckpt.Load("../testdata/stories260K-hf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	vocab := l.Model.Spec().VocabSize
	o := BatchOptions{MaxBatch: 4, MaxContext: 160, PrefillChunk: 8, Prefixes: true}
	for _, mode := range []Mode{Compiled, Eager} {
		t.Run(mode.String(), func(t *testing.T) {
			reused := batchTest(t, cpuBackend(t), l, mode, o, sharedPrefixSeqs(vocab))
			if reused < 2*40 {
				t.Errorf("%d prompt tokens reused, want at least 80 (two prompts or more sharing 45 tokens)", reused)
			}
		})
	}
	// Int8 caches: the kept prompts hold their codes and scales.
	t.Run("kv-int8", func(t *testing.T) {
		if reused := batchTestWith(t, cpuBackend(t), l, Options{KVDType: dtypes.Int8}, o, sharedPrefixSeqs(vocab)); reused < 2*40 {
			t.Errorf("%d prompt tokens reused, want at least 80", reused)
		}
	})
	t.Run("go-backend-keeps-none", func(t *testing.T) {
		if reused := batchTest(t, goBackend(t), l, Compiled, o, sharedPrefixSeqs(vocab)); reused != 0 {
			t.Errorf("%d tokens reused without DynamicUpdateSlice", reused)
		}
	})
}

// burstSeqs are n sequences arriving at once, prompts of 1 to 40 tokens.
func burstSeqs(vocab, n int) []batchSeq {
	var seqs []batchSeq
	for i := 0; i < n; i++ {
		seqs = append(seqs, batchSeq{prompt: testPrompt(uint64(30+i), 1+i*i*2/5, vocab), n: 5 + i*3})
	}
	return seqs
}

// slidingTiny is a tiny checkpoint of arch with sliding-window layers
// (window 6, shorter than the sequences), as pipeline/testkit/lmref's.
func slidingTiny(arch string) lmckpt.Tiny {
	c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5,
		RopeTheta: []float64{10000, 1e6, 10000}, Window: []int{6, 0, 6}}
	if arch == "MistralForCausalLM" {
		c.Window = []int{6, 6, 6}
		c.RopeTheta = []float64{10000, 10000, 10000}
	} else {
		c.Gemma, c.Tied, c.HeadDim = true, true, 16
		c.AttnSoftcap, c.FinalSoftcap = 20, 10
	}
	return lmckpt.Tiny{Arch: arch, Config: c, Seed: 7}
}

// TestBatchOptionErrors: out-of-range options are OptionErrors naming the
// field, its value and its range, and usage errors; nothing names a flag.
func TestBatchOptionErrors(t *testing.T) {
	r, err := NewRunner(cpuBackend(t), loadDir(t, "../testdata/stories260K-hf"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		o     BatchOptions
		field string
		value int
	}{
		{BatchOptions{MaxBatch: 0}, "MaxBatch", 0},
		{BatchOptions{MaxBatch: MaxSlots + 1}, "MaxBatch", MaxSlots + 1},
		{BatchOptions{MaxBatch: 2, MaxContext: r.spec.MaxPositions + 1}, "MaxContext", r.spec.MaxPositions + 1},
		{BatchOptions{MaxBatch: 2, PrefillChunk: -3}, "PrefillChunk", -3},
	} {
		_, err := NewBatch(r, c.o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != c.field || oe.Value != c.value || !errors.Is(err, errs.ErrUsage) {
			t.Errorf("%+v: %v, want an OptionError for %s %d", c.o, err, c.field, c.value)
			continue
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %q names a flag", c.o, err)
		}
	}
}

// A batch that ran four sequences shrinks to one row when only one is
// left, so that a lone sequence decodes at batch 1 (the GEMV path), not
// in two rows.
func TestBatchShrinksToOneRow(t *testing.T) {
	r, eng := storiesBatch(t, BatchOptions{MaxBatch: 4, MaxContext: 96, PrefillChunk: 16})
	b := slotsOf(t, eng)
	vocab := r.Spec().VocabSize
	var prompts [][]int
	for i := range 4 {
		prompts = append(prompts, testPrompt(uint64(i+1), 3+i, vocab))
	}
	pre, err := b.StartPrefill(prompts)
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if _, done, err = pre.Step(); err != nil {
			t.Fatal(err)
		}
	}
	seqs := make([]int, 4)
	for k := range seqs {
		if seqs[k], err = b.Insert(pre, k); err != nil {
			t.Fatal(err)
		}
	}
	pre.Close()
	if _, err := b.Decode(seqs, []int{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if eng.dec.batch != 4 {
		t.Fatalf("four sequences decode in %d rows, want 4", eng.dec.batch)
	}
	for _, s := range seqs[1:] {
		b.Free(s)
	}
	if _, err := b.Decode(seqs[:1], []int{5}); err != nil {
		t.Fatal(err)
	}
	if eng.dec.batch != 1 {
		t.Errorf("one sequence left decodes in %d rows, want 1", eng.dec.batch)
	}
}

// A kept cache serves only the Batch's own model: another's is an error,
// and so is one released.
func TestBatchKeptOfAnotherModel(t *testing.T) {
	o := BatchOptions{MaxBatch: 2, MaxContext: 96, PrefillChunk: 16, Prefixes: true}
	r1, b1 := storiesBatch(t, o)
	_, b2 := storiesBatch(t, o)
	prompt := testPrompt(1, 20, r1.Spec().VocabSize)
	p, err := b1.StartPrefill([][]int{prompt})
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if _, done, err = p.Step(); err != nil {
			t.Fatal(err)
		}
	}
	k, err := b1.Keep(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := b2.StartPrefillFrom(prompt, k); err == nil {
		t.Error("a kept cache of another model started a prefill")
	}
	q, err := b1.StartPrefillFrom(prompt, k) // its own: fine
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	k.Release()
	if _, err := b1.StartPrefillFrom(prompt, k); err == nil {
		t.Error("a released kept cache started a prefill")
	}
}

// TestBatchPromptLimits: a prompt must leave a slot below MaxContext for
// the token it generates; an embedding input may fill the context.
func TestBatchPromptLimits(t *testing.T) {
	_, b := storiesBatch(t, BatchOptions{MaxBatch: 2, MaxContext: 64})
	prompt := testPrompt(1, 64, 512)
	if _, err := b.StartPrefill([][]int{prompt}); !errors.Is(err, errs.ErrUsage) {
		t.Errorf("a prompt of MaxContext tokens: %v, want a usage error", err)
	}
	p, err := b.StartPrefill([][]int{prompt[:63]})
	if err != nil {
		t.Fatalf("a prompt of MaxContext-1 tokens: %v", err)
	}
	p.Close()
	if _, err := b.Embed([][]int{prompt}); err != nil {
		t.Errorf("embedding MaxContext tokens: %v", err)
	}
	if _, err := b.Embed([][]int{append(prompt, 5)}); !errors.Is(err, errs.ErrUsage) {
		t.Errorf("embedding MaxContext+1 tokens: %v, want a usage error", err)
	}
}
