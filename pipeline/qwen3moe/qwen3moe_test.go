package qwen3moe_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

// TestLogitsMatchReference runs the tiny Qwen3-MoE and Qwen2-MoE, from
// checkpoints holding the experts one by one and stacked (transformers
// v5), on a left-padded batch of two prompts plus decode steps, with every
// experts formulation (in-graph gathered, host-routed, dense) in compiled
// and eager mode on the go backend and on tputool's cpu backend (whose
// grouped kernel takes the gathered products), and compares every row's
// logits with the float64 reference. The two checkpoint layouts must give
// identical logits, and so must compiled and eager host-routed runs.
func TestLogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 5
	const tol = 1e-4
	type variant struct {
		name string
		opts compile.Options
		// accel: the backend's capabilities with HostMemory off, as an
		// accelerator's, so that the in-graph experts take the stacked
		// formulation wherever the pairs outnumber a third of the experts
		// (every prefill and batch-2 decode here).
		accel bool
	}
	variants := []variant{
		{"graph-compiled", compile.Options{Mode: compile.Compiled}, false},
		{"graph-eager", compile.Options{Mode: compile.Eager}, false},
		{"graph-accel-compiled", compile.Options{Mode: compile.Compiled}, true},
		{"host-compiled", compile.Options{Mode: compile.Compiled, SplitMatmul: 1, Experts: compile.ExpertsHost}, false},
		{"host-eager", compile.Options{Mode: compile.Eager, SplitMatmul: 1, Experts: compile.ExpertsHost}, false},
		{"host-eager-split", compile.Options{Mode: compile.Eager, SplitMatmul: 2, Experts: compile.ExpertsHost}, false},
		{"dense-compiled", compile.Options{Mode: compile.Compiled, Experts: compile.ExpertsDense}, false},
	}
	for _, c := range []qwenref.MoE{qwenref.TinyQwen3MoE(), qwenref.TinyQwen2MoE()} {
		name := "Qwen3MoE"
		if c.Qwen2 {
			name = "Qwen2MoE"
		}
		t.Run(name, func(t *testing.T) {
			all := map[string][]float32{}
			greedy := map[string][]int{}
			for _, stacked := range []bool{false, true} {
				c.Stacked = stacked
				layout := "per-expert"
				if stacked {
					layout = "stacked"
				}
				dir := t.TempDir()
				if err := c.Write(dir); err != nil {
					t.Fatal(err)
				}
				l, err := lmckpt.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				rm, err := qwenref.LoadMoE(dir, c)
				if err != nil {
					t.Fatal(err)
				}
				seqs := refcheck.GreedySequences(rm, prompts, steps)
				for _, backend := range []string{"go", "cpu"} {
					be := refcheck.GoBackend(t)
					if backend == "cpu" {
						be = refcheck.CPUBackend(t)
					}
					for _, v := range variants {
						key := layout + "/" + backend + "/" + v.name
						t.Run(key, func(t *testing.T) {
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
							gen := r.NewState()
							f := refcheck.TeacherForced(t, gen, rm, prompts, seqs, steps, tol)
							greedy[key], all[key] = f.Greedy, f.Logits
							t.Logf("max relative error %.3g, %d executables", f.Worst, r.Stats().Executables)
						})
					}
				}
			}
			if t.Failed() {
				return // a variant stopped early; there is nothing whole to compare
			}
			same := func(a, b string) {
				x, y := all[a], all[b]
				for i := range x {
					if x[i] != y[i] {
						t.Errorf("%s and %s logits differ at %d: %g vs %g", a, b, i, x[i], y[i])
						return
					}
				}
			}
			for _, backend := range []string{"go", "cpu"} {
				for _, v := range variants {
					same("per-expert/"+backend+"/"+v.name, "stacked/"+backend+"/"+v.name)
				}
				same("per-expert/"+backend+"/host-compiled", "per-expert/"+backend+"/host-eager")
			}
		})
	}
}

// TestInGraphOneExecutable checks the point of the in-graph formulation:
// decode steps that route tokens to ever different experts reuse one
// compiled executable (host routing compiles a new experts shape whenever
// the groups' count or capacity changes).
func TestInGraphOneExecutable(t *testing.T) {
	c := qwenref.TinyQwen3MoE()
	dir := t.TempDir()
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled, CacheLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	gen := r.NewState()
	prompts := [][]int{{1, 7, 21, 33}, {1, 9, 14, 60}, {2, 5, 8, 90}}
	logits, err := gen.Prefill(prompts, 24)
	if err != nil {
		t.Fatal(err)
	}
	afterPrefill := r.Stats().Executables
	next := make([]int, len(prompts))
	for s := 0; s < 24; s++ {
		for b := range next {
			next[b] = (refcheck.Argmax(logits[b]) + 13*s + 29*b) % c.Vocab // vary the routing
		}
		if logits, err = gen.Decode(next); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Stats().Executables - afterPrefill; got != 1 {
		t.Errorf("24 decode steps compiled %d executables, want 1", got)
	}
}

// TestRealConfig resolves the real Qwen/Qwen3-30B-A3B config.json.
func TestRealConfig(t *testing.T) {
	cfg, err := config.ReadModel("../../testdata/configs/qwen3_moe_30b_a3b/config.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen3moe.Model).Options()
	s := m.Spec()
	if s.Layers != 48 || s.Hidden != 2048 || s.Heads != 32 || s.KVHeads != 4 || s.HeadDim != 128 || s.VocabSize != 151936 {
		t.Errorf("spec %+v", s)
	}
	if o.Experts != 128 || o.TopK != 8 || o.MoEIntermediate != 768 || !o.NormTopK || o.SharedIntermediate != 0 || !o.QKNorm || o.QKVBias {
		t.Errorf("options %+v", o)
	}
	ex := m.(lm.Routed).Experts(0)
	if ex == nil || ex.Num != 128 || ex.TopK != 8 {
		t.Fatalf("experts %+v", ex)
	}
	if got := fmt.Sprint(ex.Weights(127)[2]); !strings.Contains(got, "model.layers.0.mlp.experts.127.down_proj.weight [2048 768]") {
		t.Errorf("expert weight %s", got)
	}
	n, parts := 0, 0
	for _, w := range lm.Weights(m) {
		if strings.Contains(w.Name, ".mlp.experts.") {
			n++
			parts += len(w.Parts)
			if w.Name == "model.layers.47.mlp.experts.gate_up_proj" && fmt.Sprintf("%v %s", w.Shape, w.Parts[255].Name) != "[128 1536 2048] model.layers.47.mlp.experts.127.up_proj.weight" {
				t.Errorf("stack %s %v, last part %s", w.Name, w.Shape, w.Parts[255].Name)
			}
		}
	}
	if n != 48*2 || parts != 48*128*3 {
		t.Errorf("%d expert stacks of %d parts, want %d of %d", n, parts, 48*2, 48*128*3)
	}
}

// TestConfigErrors checks that bad configs give errors naming the field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"architectures":["Qwen3MoeForCausalLM"],"num_experts":4,"num_experts_per_tok":5}`, "num_experts_per_tok 5"},
		{`{"architectures":["Qwen3MoeForCausalLM"],"num_hidden_layers":2,"mlp_only_layers":[2]}`, "mlp_only_layers holds 2"},
		{`{"architectures":["Qwen3MoeForCausalLM"],"decoder_sparse_step":0}`, "decoder_sparse_step"},
		{`{"architectures":["Qwen3MoeForCausalLM"],"use_sliding_window":true}`, "use_sliding_window"},
	} {
		cfg, err := config.ParseModel([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.json, err, tc.want)
		}
	}
}

// TestBFloat16Compute runs the tiny Qwen3-MoE and Qwen2-MoE (stored as
// BF16) with bfloat16 compute on the go backend in both modes, and on the
// cpu backend with float32 compute (the bf16 expert stacks then stay
// narrow and the grouped kernel reads them as stored) and bfloat16:
// logits stay within a few percent of the float64 reference.
func TestBFloat16Compute(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	for _, c := range []qwenref.MoE{qwenref.TinyQwen3MoE(), qwenref.TinyQwen2MoE()} {
		c.DType = safetensors.BF16
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		rm, err := qwenref.LoadMoE(dir, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			backend string
			opts    compile.Options
		}{
			{"go", compile.Options{Mode: compile.Compiled, DType: dtypes.BFloat16}},
			{"go", compile.Options{Mode: compile.Eager, DType: dtypes.BFloat16}},
			{"cpu", compile.Options{Mode: compile.Compiled}},
			{"cpu", compile.Options{Mode: compile.Compiled, DType: dtypes.BFloat16}},
		} {
			be := refcheck.GoBackend(t)
			if v.backend == "cpu" {
				be = refcheck.CPUBackend(t)
			}
			r, err := compile.NewRunner(be, l, v.opts)
			if err != nil {
				t.Fatal(err)
			}
			gen := r.NewState()
			logits, err := gen.Prefill(prompts, 2)
			if err != nil {
				t.Fatal(err)
			}
			tol, compute := 0.05, "bf16"
			if v.opts.DType != dtypes.BFloat16 {
				tol, compute = 1e-4, "f32" // the reference reads the same bf16 values
			}
			for b, p := range prompts {
				e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1])
				t.Logf("qwen2=%v %s %s %s row %d: relative error %.3g", c.Qwen2, v.backend, v.opts.Mode, compute, b, e)
				if e > tol {
					t.Errorf("qwen2=%v %s %s %s row %d: relative error %.3g > %g", c.Qwen2, v.backend, v.opts.Mode, compute, b, e, tol)
				}
			}
			r.Close()
		}
		l.Close()
	}
}

// TestInt8Experts runs the tiny Qwen3-MoE and Qwen2-MoE with --quantize
// int8 (expert stacks included): in the graph on the cpu backend (its
// grouped kernel reads the int8 experts in place) and on the go backend
// (which dequantises the gathered matrices as written), and dense (each
// expert quantised apart, the same int8 values), from both checkpoint
// layouts. All agree with each other to float32 rounding, stay within 5%
// of the float64 reference, and hold what lm.Loaded.HeldBytes estimates.
func TestInt8Experts(t *testing.T) {
	for _, c := range []qwenref.MoE{qwenref.TinyQwen3MoE(), qwenref.TinyQwen2MoE()} {
		checkQuantizedExperts(t, c, "int8", 0.05, []expertsRun{
			{"cpu", compile.ExpertsInGraph, true}, {"go", compile.ExpertsInGraph, true}, {"cpu", compile.ExpertsDense, true}})
	}
}

// TestInt4Experts: with --quantize int4 the expert stacks whose inputs
// come in blocks of 32 are held as int4 (one scale table a stack), and
// the in-graph experts run on the cpu backend (whose grouped kernel reads
// the int4 experts in place, with f32 or int8 activations) and on the go
// backend (which decodes the gathered matrices as written), from both
// checkpoint layouts; dense holds each expert's matrices as int4 apart.
// The cpu and go backends agree to float32 rounding, every run stays
// within the bound of the float64 reference, and each holds what
// lm.Loaded.HeldBytes estimates.
func TestInt4Experts(t *testing.T) {
	c := qwenref.TinyQwen3MoE()
	c.MoEIntermediate = 32 // gate, up and down all int4
	checkQuantizedExperts(t, c, "int4", 0.25, []expertsRun{
		{"cpu", compile.ExpertsInGraph, true}, {"go", compile.ExpertsInGraph, true},
		{"cpu:act=int8", compile.ExpertsInGraph, false}, // other activations
		{"cpu", compile.ExpertsDense, false},            // other scale tables
	})
}

// expertsRun is one way of running quantised experts: a backend config,
// a formulation, and whether its logits must equal the first run's to
// float32 rounding.
type expertsRun struct {
	backend     string
	experts     compile.ExpertsMode
	sameAsFirst bool
}

// checkQuantizedExperts runs c under --quantize quantize each way of runs,
// from both checkpoint layouts: each holds what lm.Loaded.HeldBytes
// estimates and stays within bound of the float64 reference, and the runs
// marked sameAsFirst agree with the first (of either layout) to float32
// rounding.
func checkQuantizedExperts(t *testing.T, c qwenref.MoE, quantize string, bound float64, runs []expertsRun) {
	t.Helper()
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	var first []float32
	for _, stacked := range []bool{false, true} {
		c.Stacked = stacked
		dir := t.TempDir()
		if err := c.Write(dir); err != nil {
			t.Fatal(err)
		}
		l, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		rm, err := qwenref.LoadMoE(dir, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range runs {
			be := refcheck.GoBackend(t)
			if v.backend != "go" {
				if be, err = backends.NewWithConfig(v.backend); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(be.Finalize)
			}
			name := fmt.Sprintf("qwen2=%v stacked=%v %s --quantize %s --experts %s", c.Qwen2, stacked, v.backend, quantize, v.experts)
			opts := compile.Options{Quantize: quantize, Experts: v.experts}
			r, err := compile.NewRunner(be, l, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := r.WeightBytes(), l.HeldBytes(compile.HoldingOf(tpu.CapabilitiesOf(be), opts)); got != want {
				t.Errorf("%s: holds %d bytes, HeldBytes estimates %d", name, got, want)
			}
			logits, err := r.NewState().Prefill(prompts, 2)
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			var all []float32
			for b, p := range prompts {
				all = append(all, logits[b]...)
				e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1])
				t.Logf("%s row %d: relative error %.3g", name, b, e)
				if e > bound {
					t.Errorf("%s row %d: relative error %.3g > %g", name, b, e, bound)
				}
			}
			if !v.sameAsFirst {
				continue
			}
			if first == nil {
				first = all
				continue
			}
			worst := 0.0
			for i := range all {
				worst = max(worst, math.Abs(float64(all[i]-first[i])))
			}
			if worst > 1e-4 {
				t.Errorf("%s: logits differ from the first run's by %.3g", name, worst)
			}
		}
		l.Close()
	}
}
