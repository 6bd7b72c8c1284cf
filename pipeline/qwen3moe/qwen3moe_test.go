package qwen3moe_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestLogitsMatchReference runs the tiny Qwen3-MoE and Qwen2-MoE on a
// left-padded batch of two prompts plus decode steps with the experts
// grouped on the host (compiled and eager) and in the dense in-graph
// formulation, compares every row's logits with the float64 reference, and
// checks that the grouped compiled and eager runs produce identical greedy
// tokens and identical logits.
func TestLogitsMatchReference(t *testing.T) {
	be := refcheck.GoBackend(t)
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 5
	const tol = 1e-4
	for _, c := range []qwenref.MoE{qwenref.TinyQwen3MoE(), qwenref.TinyQwen2MoE()} {
		name := "Qwen3MoE"
		if c.Qwen2 {
			name = "Qwen2MoE"
		}
		t.Run(name, func(t *testing.T) {
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
			greedy := map[string][]int{}
			all := map[string][]float32{}
			for _, v := range []struct {
				name string
				opts compile.Options
			}{
				{"grouped-compiled", compile.Options{Mode: compile.Compiled, SplitMatmul: 1}},
				{"grouped-eager", compile.Options{Mode: compile.Eager, SplitMatmul: 1}},
				{"grouped-eager-split", compile.Options{Mode: compile.Eager, SplitMatmul: 2}},
				{"dense-compiled", compile.Options{Mode: compile.Compiled, DenseExperts: true}},
			} {
				t.Run(v.name, func(t *testing.T) {
					r, err := compile.NewLM(be, l, v.opts)
					gen := r.NewState()
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					f := refcheck.TeacherForced(t, gen, rm, prompts, seqs, steps, tol)
					greedy[v.name], all[v.name] = f.Greedy, f.Logits
					t.Logf("max relative error %.3g, %d executables", f.Worst, r.Stats().Executables)
				})
			}
			if t.Failed() {
				return // a variant stopped early; there is nothing whole to compare
			}
			if fmt.Sprint(greedy["grouped-compiled"]) != fmt.Sprint(greedy["grouped-eager"]) {
				t.Errorf("greedy tokens differ:\ncompiled %v\neager    %v", greedy["grouped-compiled"], greedy["grouped-eager"])
			}
			a, b := all["grouped-compiled"], all["grouped-eager"]
			for i := range a {
				if a[i] != b[i] {
					t.Errorf("grouped compiled and eager logits differ at %d: %g vs %g", i, a[i], b[i])
					break
				}
			}
		})
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
	n := 0
	for _, w := range lm.Weights(m) {
		if strings.Contains(w.Name, ".mlp.experts.") {
			n++
		}
	}
	if n != 48*128*3 {
		t.Errorf("%d expert tensors, want %d", n, 48*128*3)
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
// BF16) with bfloat16 compute, grouped experts in both modes: logits stay
// within a few percent of the float64 reference.
func TestBFloat16Compute(t *testing.T) {
	be := refcheck.GoBackend(t)
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
		for _, mode := range []compile.Mode{compile.Compiled, compile.Eager} {
			r, err := compile.NewLM(be, l, compile.Options{Mode: mode, DType: dtypes.BFloat16})
			gen := r.NewState()
			if err != nil {
				t.Fatal(err)
			}
			logits, err := gen.Prefill(prompts, 2)
			if err != nil {
				t.Fatal(err)
			}
			for b, p := range prompts {
				e := refcheck.RelErr(logits[b], rm.Logits(p)[len(p)-1])
				t.Logf("qwen2=%v %s row %d: relative error %.3g", c.Qwen2, mode, b, e)
				if e > 0.05 {
					t.Errorf("qwen2=%v %s row %d: relative error %.3g > 0.05", c.Qwen2, mode, b, e)
				}
			}
			r.Close()
		}
		l.Close()
	}
}
