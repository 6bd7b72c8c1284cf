package llama4_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/llama4ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// prompts are longer than both tiny models' chunks (4 and 6) and their
// temperature floors, so the chunked masks cut and the NoPE layers'
// queries are scaled by several temperatures; the first is left-padded in
// the batch, so that chunks and temperatures must follow positions, not
// cache slots.
var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

func write(t *testing.T, c llama4ref.Llama4) (*lm.Loaded, *llama4ref.Model) {
	t.Helper()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	ref, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l, ref
}

// TestLogitsMatchReference runs the tiny Scout (a multimodal checkpoint:
// every layer sparse, top 1, q/k norms, llama3 rope scaling, chunks of 4)
// and the tiny Maverick (Llama4ForCausalLM: dense and sparse layers
// alternating, top 2, a tied head, chunks of 6) on a left-padded batch of
// two prompts plus decode steps, compiled and eager, on the go and cpu
// backends, and with an accelerator's capabilities (the stacked experts
// for prefill), against llama4ref's float64 transformers Llama 4, written
// by a separate helper session from transformers' code. A third model is
// the tiny Scout with a null attention_chunk_size: every layer attends in
// full, so a NoPE layer's kind differs from a rotating one's only by its
// mark (LayerKind's "+nope"), which keeps eager mode from running the
// one's program for the other.
func TestLogitsMatchReference(t *testing.T) {
	const steps, tol = 6, 1e-4
	variants := []struct {
		name  string
		opts  compile.Options
		accel bool
	}{
		{"compiled", compile.Options{Mode: compile.Compiled}, false},
		{"eager", compile.Options{Mode: compile.Eager}, false},
		{"accel-compiled", compile.Options{Mode: compile.Compiled}, true},
	}
	unchunked := llama4ref.TinyScout()
	unchunked.ChunkSize, unchunked.Seed = 0, 42
	for _, c := range []llama4ref.Llama4{llama4ref.TinyScout(), llama4ref.TinyMaverick(), unchunked} {
		t.Run(fmt.Sprint(c.Seed), func(t *testing.T) {
			l, ref := write(t, c)
			seqs := refcheck.GreedySequences(ref, prompts, steps)
			for _, backend := range []string{"go", "cpu"} {
				be := refcheck.GoBackend(t)
				if backend == "cpu" {
					be = refcheck.CPUBackend(t)
				}
				for _, v := range variants {
					t.Run(backend+"/"+v.name, func(t *testing.T) {
						opts := v.opts
						if v.accel {
							caps := tpu.CapabilitiesOf(be)
							caps.HostMemory = false
							opts.Caps = &caps
						}
						r, err := compile.NewRunner(be, l, opts)
						if err != nil {
							t.Fatal(err)
						}
						defer r.Close()
						got := refcheck.TeacherForced(t, r.NewState(), ref, prompts, seqs, steps, tol)
						t.Logf("max relative error %.3g", got.Worst)
					})
				}
			}
		})
	}
}

// TestMistakesMatter shows that the comparison above sees each of Llama
// 4's mechanisms: the reference with the rotary on halves, the routing
// weight on the experts' outputs, no chunks, no temperature, the q/k norm
// on the NoPE layers too, or a softmax router, is farther from the
// model's prefill logits than the bound.
func TestMistakesMatter(t *testing.T) {
	for _, c := range []llama4ref.Llama4{llama4ref.TinyScout(), llama4ref.TinyMaverick()} {
		t.Run(fmt.Sprint(c.Seed), func(t *testing.T) {
			l, ref := write(t, c)
			dir := l.Dir
			prompt := prompts[1]
			got := moecheck.Prefill(t, l, prompt)
			var mutants []refcheck.Mutant
			for _, m := range []struct {
				name string
				set  func(*llama4ref.Mistakes)
			}{
				{"rotary on halves", func(m *llama4ref.Mistakes) { m.RopeHalves = true }},
				{"weights after the experts", func(m *llama4ref.Mistakes) { m.WeightAfter = true }},
				{"no chunks", func(m *llama4ref.Mistakes) { m.NoChunk = true }},
				{"no temperature", func(m *llama4ref.Mistakes) { m.NoTempTuning = true }},
				{"q/k norm on NoPE layers", func(m *llama4ref.Mistakes) { m.QKNormOnNoPE = true }},
				{"softmax router", func(m *llama4ref.Mistakes) { m.SoftmaxRouter = true }},
			} {
				if m.name == "q/k norm on NoPE layers" && !c.UseQKNorm {
					continue
				}
				mc := c
				m.set(&mc.Mistakes)
				mm, err := mc.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				mutants = append(mutants, refcheck.Mutant{Name: m.name, Logits: mm.Logits})
			}
			refcheck.Discriminates(t, got[0], prompt, ref.Logits, 1e-3, mutants...)
		})
	}
}

// TestExpertsOneByOne: a checkpoint holding each expert's three matrices
// on their own in the Linear layout (experts.E.{gate,up,down}_proj.weight,
// as per-expert conversions of Llama 4 store them) is assembled into the
// stacks and gives the stacked checkpoint's logits. The other way, an
// expert's matrix is not read apart from a stack stored transposed (its
// rows are not a range of the stored bytes): that is an error.
func TestExpertsOneByOne(t *testing.T) {
	c := llama4ref.TinyMaverick()
	l, _ := write(t, c)
	if x, err := l.Tensor("model.layers.1.feed_forward.experts.0.gate_proj.weight", dtypes.Float32); err == nil || !strings.Contains(err.Error(), "transposed") {
		if x != nil {
			x.FinalizeAll()
		}
		t.Errorf("an expert read apart from a transposed stack: error %v, want one saying the stack is transposed", err)
	}
	dir := writeApart(t, c, l.Dir)
	apart, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer apart.Close()
	want := moecheck.Prefill(t, l, prompts[1])[0]
	got := moecheck.Prefill(t, apart, prompts[1])[0]
	ref := make([]float64, len(want))
	for i, v := range want {
		ref[i] = float64(v)
	}
	if e := refcheck.RelErr(got, ref); e > 1e-6 {
		t.Errorf("experts one by one: relative error %.3g against the stacked checkpoint's logits", e)
	}
}

// writeApart copies the checkpoint in src (of the tiny model c) to a new
// directory with each expert stack split into the experts' own matrices
// in the Linear layout, experts.E.{gate,up,down}_proj.weight.
func writeApart(t *testing.T, c llama4ref.Llama4, src string) string {
	t.Helper()
	cfg, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	h, in, e := c.Hidden, c.Intermediate, c.Experts
	var ts []safetensors.Tensor
	add := func(name string, vals []float32, shape ...int) {
		b, err := safetensors.EncodeFloat32(safetensors.F32, vals)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: b})
	}
	split := 0
	for _, name := range ck.Names() {
		vals, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		shape, _ := ck.Shape(name)
		prefix, ok := strings.CutSuffix(name, "gate_up_proj")
		if !ok {
			if prefix, ok = strings.CutSuffix(name, "down_proj"); !ok || !strings.HasSuffix(prefix, ".experts.") {
				add(name, vals, shape...)
				continue
			}
			for x := 0; x < e; x++ { // stored [E, I, H]: expert x's down_proj [H, I]
				down := make([]float32, h*in)
				for i := 0; i < in; i++ {
					for j := 0; j < h; j++ {
						down[j*in+i] = vals[(x*in+i)*h+j]
					}
				}
				add(fmt.Sprintf("%s%d.down_proj.weight", prefix, x), down, h, in)
			}
			split++
			continue
		}
		for x := 0; x < e; x++ { // stored [E, H, 2I]: expert x's gate (the first I columns) and up [I, H]
			gate, up := make([]float32, in*h), make([]float32, in*h)
			for j := 0; j < h; j++ {
				for i := 0; i < in; i++ {
					gate[i*h+j] = vals[(x*h+j)*2*in+i]
					up[i*h+j] = vals[(x*h+j)*2*in+in+i]
				}
			}
			add(fmt.Sprintf("%s%d.gate_proj.weight", prefix, x), gate, in, h)
			add(fmt.Sprintf("%s%d.up_proj.weight", prefix, x), up, in, h)
		}
		split++
	}
	if split != 2*(c.Layers/c.InterleaveMoE) {
		t.Fatalf("split %d stacks, want both of each of the %d sparse layers", split, c.Layers/c.InterleaveMoE)
	}
	dir := t.TempDir()
	if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFP8ExpertsApart: Meta's FP8 release of Maverick stores its experts
// one by one, each projection (attention, experts, shared expert; not the
// router or the head) FP8 with a scale per output channel (fbgemm_fp8),
// under the multimodal class's names. The tiny Scout in that form loads
// (the parts decoded and assembled into the stacks) and gives the logits
// of the f32 checkpoint holding the same weights dequantized, within 1e-5,
// on the go backend and on tputool's cpu backend, while FP8's rounding
// moves them from the original weights' by more.
func TestFP8ExpertsApart(t *testing.T) {
	c := llama4ref.TinyScout()
	l, _ := write(t, c)
	apart := writeApart(t, c, l.Dir)
	fp8 := t.TempDir()
	if err := lmckpt.WriteFP8Copy(apart, fp8, lmckpt.FP8Options{FBGEMM: true}); err != nil {
		t.Fatal(err)
	}
	// The same weights dequantized, in f32: code × the row's scale.
	ck, err := safetensors.OpenDir(fp8, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, err := lmckpt.ReadConfig(fp8)
	if err != nil {
		t.Fatal(err)
	}
	delete(cfg, "quantization_config")
	var ts []safetensors.Tensor
	coded := 0
	for _, name := range ck.Names() {
		if strings.HasSuffix(name, ".weight_scale") {
			continue
		}
		vals, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		shape, _ := ck.Shape(name)
		if info, _ := ck.Info(name); info.DType == safetensors.F8E4M3 {
			scales, err := ck.Float32(strings.TrimSuffix(name, "weight") + "weight_scale")
			if err != nil {
				t.Fatal(err)
			}
			for i := range vals {
				vals[i] *= scales[i/shape[1]]
			}
			if strings.Contains(name, ".experts.") {
				coded++
			}
		}
		b, err := safetensors.EncodeFloat32(safetensors.F32, vals)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: b})
	}
	if want := 3 * c.Experts * c.Layers; coded != want {
		t.Fatalf("%d experts' matrices in FP8, want %d", coded, want)
	}
	deq := t.TempDir()
	if err := lmckpt.WriteCheckpoint(deq, cfg, ts); err != nil {
		t.Fatal(err)
	}
	load := func(dir string) []float32 {
		m, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return moecheck.Prefill(t, m, prompts[1])[0]
	}
	got, want, orig := load(fp8), load(deq), moecheck.Prefill(t, l, prompts[1])[0]
	// And on tputool's cpu backend.
	m, err := lmckpt.Load(fp8)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := compile.NewRunner(refcheck.CPUBackend(t), m, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	onCPU, err := r.NewState().Prefill([][]int{prompts[1]}, 1)
	if err != nil {
		t.Fatal(err)
	}
	f64 := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	t.Logf("relative error %.3g against the dequantized weights, %.3g against the original ones", refcheck.RelErr(got, f64(want)), refcheck.RelErr(got, f64(orig)))
	if e := refcheck.RelErr(got, f64(want)); e > 1e-5 {
		t.Errorf("FP8 experts apart: relative error %.3g against the dequantized f32 checkpoint's logits", e)
	}
	if e := refcheck.RelErr(onCPU[0], f64(want)); e > 1e-5 {
		t.Errorf("FP8 experts apart on the cpu backend: relative error %.3g against the dequantized f32 checkpoint's logits", e)
	}
	if e := refcheck.RelErr(got, f64(orig)); e < 1e-4 {
		t.Errorf("FP8 logits within %.3g of the original weights': the test does not see the FP8 path", e)
	}
}
