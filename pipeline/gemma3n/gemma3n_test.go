package gemma3n_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/gemma3n"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/gemma3nref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

func load(t *testing.T, c gemma3nref.Config) (*lm.Loaded, *gemma3nref.Model) {
	t.Helper()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	ref, err := gemma3nref.Load(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	return l, ref
}

// prompts are longer than the window (3); the second holds ids past the
// per-layer vocabulary (80), which read its row 0.
var prompts = [][]int{{2, 7, 21, 33, 4}, {2, 9, 14, 60, 3, 85, 41, 27, 11, 93, 50}}

func configs() map[string]gemma3nref.Config {
	causal := gemma3nref.Tiny()
	causal.CausalLM, causal.Seed = true, 5
	return map[string]gemma3nref.Config{"E": gemma3nref.Tiny(), "E-causal": causal}
}

// TestLogitsMatchReference runs each tiny Gemma 3n on a left-padded
// batch of two prompts plus decode steps, compiled and eager, on the go
// backend and the cpu engine, against the float64 reference of
// transformers' code; and in bfloat16 within 10%: four streams mixed and
// re-mixed by every layer carry bf16's rounding further than one
// residual does (measured: up to 6.3%; without the sparse MLPs the
// same).
func TestLogitsMatchReference(t *testing.T) {
	const steps = 5
	for name, c := range configs() {
		t.Run(name, func(t *testing.T) {
			l, ref := load(t, c)
			seqs := refcheck.GreedySequences(ref, prompts, steps)
			for _, backend := range []string{"go", "cpu"} {
				be := refcheck.GoBackend(t)
				if backend == "cpu" {
					be = refcheck.CPUBackend(t)
				}
				for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
					r, err := compile.NewRunner(be, l, compile.Options{Mode: mode})
					if err != nil {
						t.Fatal(err)
					}
					f := refcheck.TeacherForced(t, r.NewState(), ref, prompts, seqs, steps, 1e-4)
					t.Logf("%s %v: max relative error %.3g", backend, mode, f.Worst)
					r.Close()
				}
			}
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, ref, prompts, 0.1))
		})
	}
}

// TestMutationsFail: the reference without the MLPs' sparsity, without
// LAuReL, with the per-layer input on the first stream, with the
// prediction coefficients transposed, without correct_output_scale, with
// the prediction coefficients clipped (transformers clips them only in
// training) or the correction ones not clipped is far from the model's
// logits.
func TestMutationsFail(t *testing.T) {
	l, ref := load(t, gemma3nref.Tiny())
	p := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, p)[0], p, ref.Logits, 1e-3,
		refcheck.Mutant{Name: "no sparsity", Logits: mutant(ref, func(m *gemma3nref.Model) { m.NoSparsity = true })},
		refcheck.Mutant{Name: "no LAuReL", Logits: mutant(ref, func(m *gemma3nref.Model) { m.NoLaurel = true })},
		refcheck.Mutant{Name: "per-layer input on stream 0", Logits: mutant(ref, func(m *gemma3nref.Model) { m.PLEOnFirstStream = true })},
		refcheck.Mutant{Name: "prediction coefficients transposed", Logits: mutant(ref, func(m *gemma3nref.Model) { m.PredictTransposed = true })},
		refcheck.Mutant{Name: "no correct_output_scale", Logits: mutant(ref, func(m *gemma3nref.Model) { m.NoCorrectScale = true })},
		refcheck.Mutant{Name: "prediction coefficients clipped", Logits: mutant(ref, func(m *gemma3nref.Model) { m.ClipPrediction = true })},
		refcheck.Mutant{Name: "correction coefficients not clipped", Logits: mutant(ref, func(m *gemma3nref.Model) { m.NoClip = true })})
}

func mutant(ref *gemma3nref.Model, set func(*gemma3nref.Model)) func([]int) [][]float64 {
	m := *ref
	set(&m)
	return m.Logits
}

// TestConfig: Gemma3nTextConfig's defaults (E4B: 35 layers, 4 sliding to
// 1 full, the last 15 sharing layers 18 and 19's caches, the first 10
// MLPs sparse, θ 1e6 and 1e4 over whole heads, the soft-cap 30), and the
// refusals, each naming its field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text"}}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*gemma3n.Model).Options()
	s := o.Spec
	if s.Layers != 35 || s.VocabSize != 262400 || o.PLEVocab != 262144 || o.FinalSoftcap != 30 || o.Streams != 4 || o.Laurel != 64 ||
		s.LayerKinds[4] != lm.KindFull || s.LayerKinds[34] != lm.KindFull || s.LayerKinds[33] != lm.KindSliding || o.Prefix != "model.language_model." {
		t.Errorf("defaults: %+v", o)
	}
	for i, want := range map[int]int{19: -1, 20: 18, 24: 19, 33: 18, 34: 19} {
		if got := o.Layer[i].Source; got != want {
			t.Errorf("layer %d: source %d, want %d", i, got, want)
		}
	}
	if s.Carried != 4*2048+35*256 {
		t.Errorf("carried width %d, want the 4 streams and 35 per-layer inputs of 256", s.Carried)
	}
	if o.Layer[9].Sparsity != 0.95 || o.Layer[10].Sparsity != 0 || o.Layer[0].Intermediate != 16384 {
		t.Errorf("layers: %+v", o.Layer[:11])
	}
	if full, sl := o.Rope[lm.KindFull], o.Rope[lm.KindSliding]; full.RotaryDim != 256 || sl.RotaryDim != 256 || full.InvFreq[1] == sl.InvFreq[1] {
		t.Errorf("ropes: full %d, sliding %d", full.RotaryDim, sl.RotaryDim)
	}
	// rope_parameters by kind: a missing rope_theta is the legacy key's,
	// a partial_rotary_factor not read; altup_coef_clip null: no clip.
	m, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "rope_local_base_freq": 500.0,
		"rope_parameters": {"sliding_attention": {"rope_type": "default", "partial_rotary_factor": 0.5}}, "altup_coef_clip": null}`))
	if err != nil {
		t.Fatal(err)
	}
	o = m.(*gemma3n.Model).Options()
	if sl := o.Rope[lm.KindSliding]; sl.RotaryDim != 256 || math.Abs(sl.InvFreq[1]-math.Pow(500, -2.0/256)) > 1e-12 || o.Clip {
		t.Errorf("rope_parameters: rotary %d, inv_freq[1] %g, clip %v", sl.RotaryDim, sl.InvFreq[1], o.Clip)
	}
	// num_kv_shared_layers past the layers: no sharing, as transformers'
	// layer_idx >= first > 0.
	m, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "num_hidden_layers": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, ly := range m.(*gemma3n.Model).Options().Layer {
		if ly.Source != -1 {
			t.Errorf("10 layers, the default 15 shared: layer %d shares layer %d", i, ly.Source)
		}
	}
	for _, c := range []struct{ js, want string }{
		{`"altup_active_idx": 1`, "altup_active_idx 1"},
		{`"intermediate_size": [1, 2]`, "intermediate_size has 2 entries for 35 layers"},
		{`"activation_sparsity_pattern": [0.95]`, "activation_sparsity_pattern has 1 entries"},
		{`"num_hidden_layers": 2, "activation_sparsity_pattern": [1.5, 0]`, "activation_sparsity_pattern[0] is 1.5"},
		{`"num_kv_shared_layers": -1`, "num_kv_shared_layers must be at least 0"},
		{`"altup_num_inputs": 1`, "altup_num_inputs 1"},
		{`"hidden_activation": "swiglu"`, "hidden_activation"},
		{`"rope_theta": -1`, "rope_theta"},
		{`"intermediate_size": "big"`, "intermediate_size: expected"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
}
