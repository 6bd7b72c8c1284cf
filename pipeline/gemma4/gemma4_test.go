package gemma4_test

import (
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/gemma4"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gemma4ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/tpu"
)

func load(t *testing.T, c gemma4ref.Config) (*lm.Loaded, *gemma4ref.Model) {
	t.Helper()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	ref, err := gemma4ref.Load(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	return l, ref
}

// prompts are longer than the window (3).
var prompts = [][]int{{2, 7, 21, 33, 4}, {2, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// configs are the tiny models the tests run: E2B/E4B-shaped (per-layer
// embeddings, KV sharing, double-wide MLPs), the same as Gemma4ForCausalLM
// with per_layer_config, and 26B-A4B-shaped (routed experts, k = v).
func configs() map[string]gemma4ref.Config {
	e := gemma4ref.TinyE()
	causal := gemma4ref.TinyE()
	causal.CausalLM, causal.PerLayerConfig = true, true
	return map[string]gemma4ref.Config{"E": e, "E-causal-per-layer-config": causal, "MoE": gemma4ref.TinyMoE()}
}

// TestLogitsMatchReference runs each tiny Gemma 4 on a left-padded batch
// of two prompts plus decode steps, compiled and eager, on the go backend
// and the cpu engine (and the MoE with an accelerator's formulation), and
// compares every row's logits with the float64 reference of transformers'
// code.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 5
	const tol = 1e-4
	for name, c := range configs() {
		t.Run(name, func(t *testing.T) {
			l, ref := load(t, c)
			seqs := refcheck.GreedySequences(ref, prompts, steps)
			for _, backend := range []string{"go", "cpu"} {
				be := refcheck.GoBackend(t)
				if backend == "cpu" {
					be = refcheck.CPUBackend(t)
				}
				for _, v := range []struct {
					name  string
					opts  compile.Options
					accel bool
				}{
					{"compiled", compile.Options{Mode: compile.Compiled}, false},
					{"eager", compile.Options{Mode: compile.Eager}, false},
					{"accel-compiled", compile.Options{Mode: compile.Compiled}, true},
				} {
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
						f := refcheck.TeacherForced(t, r.NewState(), ref, prompts, seqs, steps, tol)
						t.Logf("max relative error %.3g", f.Worst)
					})
				}
			}
		})
	}
}

// TestMutationsFail: the reference without KV sharing (zero keys and
// values in the sharing layers), with RoPE over the first dims instead
// of proportional, without per-layer embeddings, or without the routers'
// per-expert scale is far from the model's logits.
func TestMutationsFail(t *testing.T) {
	const tol = 1e-4
	p := prompts[1]
	for name, c := range configs() {
		l, ref := load(t, c)
		r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{Mode: compile.Compiled})
		if err != nil {
			t.Fatal(err)
		}
		logits, err := r.NewState().Prefill([][]int{p}, 1)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		last := func() []float64 { lg := ref.Logits(p); return lg[len(lg)-1] }
		if e := refcheck.RelErr(logits[0], last()); e > tol {
			t.Fatalf("%s: unmutated reference: relative error %.3g", name, e)
		}
		muts := map[string]*bool{"proportional RoPE over the first dims": &ref.FirstDimsRope}
		if c.SharedLayers > 0 {
			muts["KV sharing off"] = &ref.NoSharing
		}
		if c.PLE > 0 {
			muts["per-layer embeddings off"] = &ref.NoPLE
		}
		if c.Experts > 0 {
			muts["per-expert scale dropped"] = &ref.NoPerExpertScale
		}
		for mname, flag := range muts {
			*flag = true
			e := refcheck.RelErr(logits[0], last())
			*flag = false
			t.Logf("%s / %s: relative error %.3g", name, mname, e)
			if e <= 10*tol {
				t.Errorf("%s / %s: within %.3g of the mutated reference", name, mname, e)
			}
		}
	}
}

// TestResolve checks the layer shapes of TinyE: sharing sources, double-
// wide MLPs, full layers' head size, in both config forms.
func TestResolve(t *testing.T) {
	for name, c := range configs() {
		l, _ := load(t, c)
		o := l.Model.(*gemma4.Model).Options()
		for i, ly := range o.Layer {
			want := map[string][]int{ // source per layer
				"E": {-1, -1, -1, -1, 3, 2}, "E-causal-per-layer-config": {-1, -1, -1, -1, 3, 2}, "MoE": {-1, -1, -1, -1},
			}[name][i]
			if ly.Source != want {
				t.Errorf("%s layer %d: source %d, want %d", name, i, ly.Source, want)
			}
			if ly.Kind == lm.KindFull && ly.HeadDim != c.GlobalHeadDim {
				t.Errorf("%s layer %d: head_dim %d, want global %d", name, i, ly.HeadDim, c.GlobalHeadDim)
			}
		}
	}
}
