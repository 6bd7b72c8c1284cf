package gptoss_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/gptoss"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gptossref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// forms are the checkpoint forms the tests write: the official MXFP4
// experts (the other tensors bf16, as released), and transformers'
// parameters in float32 and bf16 (re-saves: input-major experts).
var forms = []struct {
	name string
	form gptossref.Form
	dt   safetensors.DType
}{
	{"mxfp4", gptossref.MXFP4, safetensors.BF16},
	{"params-f32", gptossref.Params, safetensors.F32},
	{"params-bf16", gptossref.Params, safetensors.BF16},
}

// write writes the tiny model in a form and loads it with the reference.
func write(t *testing.T, form gptossref.Form, dt safetensors.DType) (*lm.Loaded, *gptossref.Model) {
	t.Helper()
	c := gptossref.Tiny()
	c.Form, c.DType = form, dt
	dir, l := lmckpt.WriteLoad(t, c.Write)
	ref, err := gptossref.Load(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	return l, ref
}

// prompts are longer than the window (4), so the sliding layers mask.
var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs the tiny GPT-OSS from each checkpoint form
// on a left-padded batch of two prompts plus decode steps, compiled and
// eager, on the go backend and on tputool's cpu backend (gathered
// experts), and with an accelerator's capabilities (the stacked
// formulation for prefill), and compares every row's logits with the
// float64 reference of transformers' modeling code.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 5
	const tol = 1e-4
	variants := []struct {
		name  string
		opts  compile.Options
		accel bool
	}{
		{"compiled", compile.Options{Mode: compile.Compiled}, false},
		{"eager", compile.Options{Mode: compile.Eager}, false},
		{"accel-compiled", compile.Options{Mode: compile.Compiled}, true},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			l, ref := write(t, f.form, f.dt)
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

// TestMutationsFail shows that the comparison above sees each GPT-OSS
// mechanism: the reference with a sink dropped, the nibbles of the MXFP4
// bytes swapped, gate and up read as halves instead of interleaved, or
// plain RoPE instead of YaRN, is farther from the model's prefill logits
// than the bound.
func TestMutationsFail(t *testing.T) {
	const tol = 1e-4
	l, ref := write(t, gptossref.MXFP4, safetensors.BF16)
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := prompts[1]
	logits, err := r.NewState().Prefill([][]int{p}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := refcheck.RelErr(logits[0], last(ref.Logits(p))); e > tol {
		t.Fatalf("unmutated reference: relative error %.3g > %g", e, tol)
	}
	for _, m := range []struct {
		name string
		set  func(*gptossref.Model, bool)
	}{
		{"sinks dropped", func(m *gptossref.Model, on bool) { m.NoSinks = on }},
		{"nibbles swapped", func(m *gptossref.Model, on bool) { m.SwapNibbles = on }},
		{"gate and up not interleaved", func(m *gptossref.Model, on bool) { m.NoInterleave = on }},
		{"plain RoPE", func(m *gptossref.Model, on bool) { m.NoYaRN = on }},
	} {
		m.set(ref, true)
		e := refcheck.RelErr(logits[0], last(ref.Logits(p)))
		m.set(ref, false)
		t.Logf("%s: relative error %.3g", m.name, e)
		if e <= 10*tol {
			t.Errorf("%s: the model is within %.3g of the mutated reference; the check would not see it", m.name, e)
		}
	}
}

func last(v [][]float64) []float64 { return v[len(v)-1] }

// configOf parses a config.json given as a map.
func configOf(t *testing.T, j map[string]any) *config.File {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return lmckpt.ParseConfig(t, string(b))
}

// TestMXFP4Dequantised checks the loader's MXFP4 and transposed reads
// bit for bit: every expert stack decoded by tputool equals the
// reference's dequantisation (transformers' convert_moe_packed_tensors),
// from both checkpoint forms, in the held [E, out, in] layout.
func TestMXFP4Dequantised(t *testing.T) {
	c := gptossref.Tiny()
	for _, f := range forms {
		l, ref := write(t, f.form, f.dt)
		for layer := 0; layer < c.Layers; layer++ {
			for _, w := range []struct {
				name    string
				out, in int
			}{{"gate_up_proj", 2 * c.Intermediate, c.Hidden}, {"down_proj", c.Hidden, c.Intermediate}} {
				name := fmt.Sprintf("model.layers.%d.mlp.experts.%s", layer, w.name)
				got, err := l.Tensor(name, dtypes.Float32)
				if err != nil {
					t.Fatal(err)
				}
				want := ref.Experts(layer, w.name, w.out, w.in) // [E][in, out]
				flat := got.Value().([][][]float32)
				bad := 0
				for e := range want {
					for o := 0; o < w.out; o++ {
						for i := 0; i < w.in; i++ {
							if float64(flat[e][o][i]) != want[e][i*w.out+o] {
								bad++
							}
						}
					}
				}
				got.FinalizeAll()
				if bad > 0 {
					t.Errorf("%s %s: %d values differ from the reference's", f.name, name, bad)
				}
			}
		}
	}
}

// TestResolve checks GptOssConfig's defaults and the config errors.
func TestResolve(t *testing.T) {
	c := gptossref.Tiny()
	j := c.ConfigJSON()
	delete(j, "layer_types")
	delete(j, "rope_scaling")
	delete(j, "swiglu_limit")
	j["max_position_embeddings"] = 131072 // YaRN's factor is max_position_embeddings / 4096
	o, err := gptoss.Resolve(configOf(t, j))
	if err != nil {
		t.Fatal(err)
	}
	kinds := strings.Join(o.Spec.LayerKinds, ",")
	if kinds != "sliding_attention,full_attention,sliding_attention" {
		t.Errorf("default layer kinds %s", kinds)
	}
	if o.Rope.Type != "yarn" || math.Abs(o.Rope.AttentionFactor-(0.1*math.Log(32)+1)) > 1e-12 {
		t.Errorf("default rope %s, attention factor %v; want yarn with factor 32's", o.Rope.Type, o.Rope.AttentionFactor)
	}
	if o.Limit != 7 || o.Alpha != 1.702 || !o.MXFP4 || !o.QKVBias || !o.OBias || o.TopK != 2 || o.Experts != 8 {
		t.Errorf("options %+v", o)
	}
	for _, bad := range []struct {
		edit func(map[string]any)
		want string
	}{
		{func(j map[string]any) { j["quantization_config"] = map[string]any{"quant_method": "bitsandbytes"} }, `quant_method "bitsandbytes" is not supported`},
		{func(j map[string]any) { j["num_experts_per_tok"] = 9 }, "num_experts_per_tok 9 must be in [1, num_local_experts 8]"},
		{func(j map[string]any) { j["intermediate_size"] = 40 }, "multiples of 32"},
		{func(j map[string]any) { j["swiglu_limit"] = 0 }, "swiglu_limit must be positive"},
	} {
		j := c.ConfigJSON()
		bad.edit(j)
		if _, err := gptoss.Resolve(configOf(t, j)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("got %v, want an error containing %q", err, bad.want)
		}
	}
}

// TestMXFP4Held: on tputool's cpu backend the MXFP4 experts stay MXFP4
// (17/32 of a byte a weight) and the rest as the holding policy says; the
// memory estimate the commands check is what the LM holds. On the go
// backend they are decoded to f32 at load.
func TestMXFP4Held(t *testing.T) {
	l, _ := write(t, gptossref.MXFP4, safetensors.BF16)
	var mx, decoded int64
	for _, w := range lm.Weights(l.Model) {
		if l.StoredMXFP4(w.Name) {
			n := int64(1)
			for _, d := range w.Shape {
				n *= int64(d)
			}
			mx += lm.MXFP4Bytes(w)
			decoded += 4 * n // f32, the compute dtype
		}
	}
	if mx == 0 {
		t.Fatal("no weight stored in MXFP4")
	}
	for _, backend := range []string{"cpu", "go"} {
		be := refcheck.GoBackend(t)
		if backend == "cpu" {
			be = refcheck.CPUBackend(t)
		}
		caps := tpu.CapabilitiesOf(be)
		opts := compile.Options{Mode: compile.Compiled}
		r, err := compile.NewRunner(be, l, opts)
		if err != nil {
			t.Fatal(err)
		}
		h := compile.HoldingOf(caps, opts)
		if got, want := r.WeightBytes(), l.HeldBytes(h); got != want {
			t.Errorf("%s: the LM holds %d bytes of weights, the estimate says %d", backend, got, want)
		}
		plain := h
		plain.MXFP4 = false
		saved := l.HeldBytes(plain) - r.WeightBytes()
		if want := map[string]int64{"cpu": decoded - mx, "go": 0}[backend]; saved != want {
			t.Errorf("%s: MXFP4 holding saves %d bytes, want %d", backend, saved, want)
		}
		r.Close()
	}
}
