package compile

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/tpu"
	_ "github.com/tputool/tputool/tpu/cpu"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

func cpuBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := backends.NewWithConfig("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// steps runs a prompt and n decode steps and returns the tokens fed
// (greedy, or forced when given) and the logits of every step.
func steps(t *testing.T, r *Runner, prompt []int, n int, forced []int) (tokens []int, logits [][]float32) {
	t.Helper()
	gen := r.NewState()
	defer gen.Release()
	out, err := gen.Prefill([][]int{prompt}, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		logits = append(logits, out[0])
		next := argmax(out[0])
		if forced != nil {
			next = forced[i]
		}
		tokens = append(tokens, next)
		if out, err = gen.Decode([]int{next}); err != nil {
			t.Fatal(err)
		}
	}
	return tokens, logits
}

// deviation is the largest |got - want| over all steps relative to the
// largest |want|, and the fraction of steps whose argmax agrees.
func deviation(got, want [][]float32) (rel, agree float64) {
	var maxD, maxW float64
	same := 0
	for s := range want {
		for j := range want[s] {
			maxD = max(maxD, math.Abs(float64(got[s][j]-want[s][j])))
			maxW = max(maxW, math.Abs(float64(want[s][j])))
		}
		if argmax(got[s]) == argmax(want[s]) {
			same++
		}
	}
	return maxD / maxW, float64(same) / float64(len(want))
}

// writeAs writes a copy of the checkpoint in dir with every tensor stored
// as d.
func writeAs(t *testing.T, dir string, d safetensors.DType) string {
	t.Helper()
	c, err := safetensors.OpenDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ts []safetensors.Tensor
	for _, name := range c.Names() {
		vals, err := c.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		shape, _ := c.Shape(name)
		tn, err := safetensors.Float32Tensor(name, d, shape, vals)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tn)
	}
	out := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(out, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func loadDir(t *testing.T, dir string) *lm.Loaded {
	t.Helper()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// On tputool's cpu backend a bf16 or f16 checkpoint keeps its Matmul
// weights in their dtype (converted in the graph, multiplied in place by
// the backend), and the f32 computation gives what converting them on the
// host gives: the conversion to f32 is exact.
func TestNarrowWeightsEqualHostConversion(t *testing.T) {
	be := cpuBackend(t)
	narrow := tpu.CapabilitiesOf(be)
	if !narrow.NarrowWeights {
		t.Fatal("the cpu backend should report NarrowWeights")
	}
	wide := narrow
	wide.NarrowWeights = false
	prompt := []int{1, 7, 30, 12, 55}
	for _, d := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		for _, tied := range []bool{true, false} {
			m := lmckpt.LlamaShape(64, 2, 8, 96, 64)
			m.Config.Tied = tied
			m.DType = d
			m.MaxPositions = 128
			dir := t.TempDir()
			if err := m.Write(dir); err != nil {
				t.Fatal(err)
			}
			l := loadDir(t, dir)
			for _, mode := range []Mode{Compiled, Eager} {
				ref, err := NewRunner(be, l, Options{Mode: mode, Caps: &wide})
				if err != nil {
					t.Fatal(err)
				}
				wantTok, want := steps(t, ref, prompt, 12, nil)
				ref.Close()
				r, err := NewRunner(be, l, Options{Mode: mode, Caps: &narrow})
				if err != nil {
					t.Fatal(err)
				}
				held := r.weights["model.layers.0.mlp.up_proj.weight"].DType()
				gotTok, got := steps(t, r, prompt, 12, nil)
				r.Close()
				if held == dtypes.Float32 {
					t.Errorf("%s tied=%v: up_proj held as %s, want the checkpoint's dtype", d, tied, held)
				}
				rel, _ := deviation(got, want)
				if rel > 1e-6 || !equalInts(gotTok, wantTok) {
					t.Errorf("%s tied=%v %s: narrow weights give tokens %v (relative logit difference %.3g), host conversion %v",
						d, tied, mode, gotTok, rel, wantTok)
				}
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bf16 weights and --quantize int8 and int4 against f32 on the real
// TinyStories model: each runs teacher-forced on the f32 greedy
// continuation, and reports its largest logit difference relative to the
// largest f32 logit and how often its argmax agrees with f32's. The model
// is tiny (hidden 64), which 4 bits hurt most: int4 measures 0.32 and
// 0.90 (every backend and mode alike: the same weights), and with the CPU
// engine's int8 activations (cpu:act=int8) 0.32 and 0.90. The bf16
// activations (cpu:act=bf16) stay within bf16's, int8's and int4's bounds
// (int4: 0.33 and 0.925), and so do int8 and int4 weights under bf16
// compute (the CPU engine reads them as held: tpu/cpu's wide16 products),
// int8 within 0.017 on the CPU engine and 0.023 on the go backend, whose
// bf16 conversion truncates.
func TestCompactWeightsDeviation(t *testing.T) {
	const dir = "../testdata/stories260K-hf"
	const n = 40
	prompt := []int{1, 403, 407, 261, 378} // <s> Once upon a time
	cpu, goBe := cpuBackend(t), goBackend(t)
	cpuQ8, err := backends.NewWithConfig("cpu:act=int8")
	if err != nil {
		t.Fatal(err)
	}
	cpuBF, err := backends.NewWithConfig("cpu:act=bf16")
	if err != nil {
		t.Fatal(err)
	}
	f32 := loadDir(t, dir)
	ref, err := NewRunner(cpu, f32, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tokens, want := steps(t, ref, prompt, n, nil)
	ref.Close()
	bf16 := loadDir(t, writeAs(t, dir, safetensors.BF16))
	for _, c := range []struct {
		name     string
		be       backends.Backend
		l        *lm.Loaded
		opts     Options
		maxRel   float64
		minAgree float64
	}{
		{"bf16 weights, cpu", cpu, bf16, Options{}, 0.03, 0.95},
		{"int8, cpu", cpu, f32, Options{Quantize: "int8"}, 0.03, 0.95},
		{"int8, cpu, eager", cpu, f32, Options{Mode: Eager, Quantize: "int8"}, 0.03, 0.95},
		{"int8 of bf16, cpu", cpu, bf16, Options{Quantize: "int8"}, 0.05, 0.9},
		{"int8, go backend (unfused)", goBe, f32, Options{Quantize: "int8"}, 0.03, 0.95},
		{"int4, cpu", cpu, f32, Options{Quantize: "int4"}, 0.4, 0.85},
		{"int4, cpu, eager", cpu, f32, Options{Mode: Eager, Quantize: "int4"}, 0.4, 0.85},
		{"int4 of bf16, cpu", cpu, bf16, Options{Quantize: "int4"}, 0.4, 0.85},
		{"int4, go backend (unfused)", goBe, f32, Options{Quantize: "int4"}, 0.4, 0.85},
		{"int4, int8 activations, cpu", cpuQ8, f32, Options{Quantize: "int4"}, 0.4, 0.85},
		{"bf16 weights, bf16 activations, cpu", cpuBF, bf16, Options{}, 0.03, 0.95},
		{"int8, bf16 activations, cpu", cpuBF, f32, Options{Quantize: "int8"}, 0.03, 0.95},
		{"int4, bf16 activations, cpu", cpuBF, f32, Options{Quantize: "int4"}, 0.4, 0.85},
		{"int8, bf16 compute, cpu", cpu, f32, Options{DType: dtypes.BFloat16, Quantize: "int8"}, 0.06, 0.9},
		{"int8, bf16 compute, go backend (unfused)", goBe, f32, Options{DType: dtypes.BFloat16, Quantize: "int8"}, 0.06, 0.9},
		{"int4, bf16 compute, cpu", cpu, f32, Options{DType: dtypes.BFloat16, Quantize: "int4"}, 0.4, 0.85},
	} {
		r, err := NewRunner(c.be, c.l, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		_, got := steps(t, r, prompt, n, tokens)
		r.Close()
		rel, agree := deviation(got, want)
		t.Logf("%s: max relative logit error %.4f, greedy agreement %.3f", c.name, rel, agree)
		if rel > c.maxRel || agree < c.minAgree {
			t.Errorf("%s: max relative logit error %.4f (bound %g), greedy agreement %.3f (bound %g)", c.name, rel, c.maxRel, agree, c.minAgree)
		}
	}
}

// The memory estimate (lm.Loaded.HeldBytes, which the pre-flight check and
// inspect use) is what NewRunner actually holds, for every way of holding.
func TestHeldBytesEstimate(t *testing.T) {
	cpu, goBe := cpuBackend(t), goBackend(t)
	f32 := loadDir(t, "../testdata/stories260K-hf")
	bf16 := loadDir(t, writeAs(t, "../testdata/stories260K-hf", safetensors.BF16))
	for _, be := range []backends.Backend{cpu, goBe} {
		caps := tpu.CapabilitiesOf(be)
		for _, l := range []*lm.Loaded{f32, bf16} {
			for _, o := range []Options{{}, {DType: dtypes.BFloat16}, {Quantize: "int8"}, {Quantize: "int4"}} {
				r, err := NewRunner(be, l, o)
				if err != nil {
					t.Fatal(err)
				}
				got := r.WeightBytes()
				r.Close()
				dt := o.DType
				if dt == dtypes.InvalidDType {
					dt = dtypes.Float32
				}
				want := l.HeldBytes(lm.Holding{Compute: dt, Narrow: caps.NarrowWeights, Quantize: o.Quantize})
				if got != want {
					t.Errorf("%s, %s checkpoint, %+v: held %d bytes, estimate %d", be.Name(), l.StoredDType("lm_head.weight"), o, got, want)
				}
			}
		}
	}
}

// Quantising in blocks of rows gives the weights quantising whole tensors
// gives (int8: each row's groups are independent; int4: the blocks' ranges
// merge into the whole matrix's table): the logits are identical.
func TestQuantizeBlocksEqualWhole(t *testing.T) {
	be := cpuBackend(t)
	l := loadDir(t, "../testdata/stories260K-hf")
	prompt := []int{1, 403, 407, 261, 378}
	for _, q := range []string{"int8", "int4"} {
		r, err := NewRunner(be, l, Options{Quantize: q})
		if err != nil {
			t.Fatal(err)
		}
		_, whole := steps(t, r, prompt, 6, nil)
		r.Close()
		saved := quantBlock
		quantBlock = 3 * 172 // blocks of 3 rows for in=172, of 8 rows for in=64 (last blocks shorter)
		r, err = NewRunner(be, l, Options{Quantize: q})
		quantBlock = saved
		if err != nil {
			t.Fatal(err)
		}
		_, blocks := steps(t, r, prompt, 6, nil)
		r.Close()
		if rel, _ := deviation(blocks, whole); rel != 0 {
			t.Errorf("%s: blockwise quantisation changes the logits (relative %.3g)", q, rel)
		}
	}
}

// lm.Int4Block, which the memory figures use, is the kernels' block.
func TestInt4BlockAgrees(t *testing.T) {
	if lm.Int4Block != kernels.Int4Block {
		t.Fatalf("lm.Int4Block %d, kernels.Int4Block %d", lm.Int4Block, kernels.Int4Block)
	}
}

// activationsDeviation runs l on the CPU engine with f32 activations and
// with the backend config act (teacher-forced on the f32 greedy
// continuation) and checks that the logits differ, by at most maxRel of
// the largest, with greedy agreement of at least 95%: what the narrow
// activations alone cost.
func activationsDeviation(t *testing.T, l *lm.Loaded, opts Options, act string, maxRel float64) {
	t.Helper()
	prompt := []int{1, 403, 407, 261, 378} // <s> Once upon a time
	narrow, err := backends.NewWithConfig("cpu:act=" + act)
	if err != nil {
		t.Fatal(err)
	}
	var logits [2][][]float32
	var tokens []int
	for i, be := range []backends.Backend{cpuBackend(t), narrow} {
		r, err := NewRunner(be, l, opts)
		if err != nil {
			t.Fatal(err)
		}
		tokens, logits[i] = steps(t, r, prompt, 40, tokens)
		r.Close()
	}
	rel, agree := deviation(logits[1], logits[0])
	t.Logf("%s activations against f32 activations: max relative logit error %.4f, greedy agreement %.3f", act, rel, agree)
	if rel == 0 || rel > maxRel || agree < 0.95 {
		t.Errorf("max relative logit error %.4f (want in (0, %g]), greedy agreement %.3f (want >= 0.95)", rel, maxRel, agree)
	}
}

// The CPU engine's int8 activations (cpu:act=int8) against its f32
// activations on the same int4 weights, and on the same int8 weights.
func TestInt8ActivationsDeviation(t *testing.T) {
	activationsDeviation(t, loadDir(t, "../testdata/stories260K-hf"), Options{Quantize: "int4"}, "int8", 0.05)
}

func TestInt8ActivationsInt8WeightsDeviation(t *testing.T) {
	activationsDeviation(t, loadDir(t, "../testdata/stories260K-hf"), Options{Quantize: "int8"}, "int8", 0.05)
}

// The CPU engine's bf16 activations (cpu:act=bf16) against its f32
// activations on the same bf16 weights.
func TestBF16ActivationsDeviation(t *testing.T) {
	activationsDeviation(t, loadDir(t, writeAs(t, "../testdata/stories260K-hf", safetensors.BF16)), Options{}, "bf16", 0.03)
}

// KV caches held in bf16 or int8 (Options.KVDType) under f32 compute: the
// caches are allocated in that dtype, int8 ones with their f32 scales
// after them (lm.HeldState; counted so by lm.StateBytes), the logits stay
// within the rounding of the keys and values of the f32 caches'
// (teacher-forced on the f32 greedy continuation), compiled and eager, on
// the CPU engine and the go backend, and a dtype other than f32, bf16 or
// int8 is refused.
func TestKVCacheNarrow(t *testing.T) {
	const dir = "../testdata/stories260K-hf"
	prompt := []int{1, 403, 407, 261, 378}
	l := loadDir(t, dir)
	ref, err := NewRunner(cpuBackend(t), l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tokens, want := steps(t, ref, prompt, 40, nil)
	ref.Close()
	for _, c := range []struct {
		kv    dtypes.DType
		bound float64
		be    func(testing.TB) backends.Backend
		modes []Mode
	}{
		{dtypes.BFloat16, 0.03, cpuBackend, []Mode{Compiled, Eager}},
		{dtypes.Int8, 0.05, cpuBackend, []Mode{Compiled, Eager}},
		{dtypes.Int8, 0.05, goBackend, []Mode{Compiled}},
	} {
		for _, mode := range c.modes {
			r, err := NewRunner(c.be(t), l, Options{Mode: mode, KVDType: c.kv})
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s %s %s", c.kv, r.backend.Name(), mode)
			st := r.NewState()
			if _, err := st.Prefill([][]int{prompt}, 8); err != nil {
				t.Fatal(err)
			}
			var held int64
			for i, layer := range st.tensors {
				specs := lm.HeldState(r.model, i, 1, st.cacheLen, c.kv)
				if len(layer) != len(specs) {
					t.Fatalf("%s: layer %d holds %d state tensors, want %d", name, i, len(layer), len(specs))
				}
				for j, s := range specs {
					wantDT := c.kv
					if strings.HasSuffix(s.Name, "_scale") {
						wantDT = dtypes.Float32
					}
					if got := layer[j].DType(); s.KV && got != wantDT {
						t.Errorf("%s: layer %d state %q held in %s, want %s", name, i, s.Name, got, wantDT)
					}
					held += int64(layer[j].Memory())
				}
			}
			if n, ok := lm.StateBytes(r.model, 1, st.cacheLen, dtypes.Float32, c.kv); !ok || n != held {
				t.Errorf("%s: lm.StateBytes %d (ok %v), the state holds %d", name, n, ok, held)
			}
			st.Release()
			_, got := steps(t, r, prompt, 40, tokens)
			r.Close()
			rel, agree := deviation(got, want)
			t.Logf("%s: KV cache against f32: max relative logit error %.4f, greedy agreement %.3f", name, rel, agree)
			if rel == 0 || rel > c.bound || agree < 0.95 {
				t.Errorf("%s: max relative logit error %.4f (want in (0, %g]), greedy agreement %.3f (want >= 0.95)", name, rel, c.bound, agree)
			}
		}
	}
	if _, err := NewRunner(cpuBackend(t), l, Options{KVDType: dtypes.Float16}); err == nil || !strings.Contains(err.Error(), "Options.KVDType Float16: not supported (use float32, bfloat16 or int8)") {
		t.Errorf("KVDType float16: err %v, want it refused", err)
	}
}
