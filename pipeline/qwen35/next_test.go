package qwen35_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen35"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestQwen3NextMatchesReference runs tiny Qwen3-Next checkpoints
// (Qwen3NextForCausalLM: the DeltaNet's projections fused by key head,
// the experts one tensor per expert) on a left-padded batch of two
// prompts and decode steps, against the float64 reference: every layer
// sparse; some layers dense (mlp_only_layers) with the router's top k
// not renormalised (norm_topk_prob false), in the graph and routed on
// the host; the dense model (num_experts 0); and the experts stacked as
// transformers v5 re-saves them (with a dense layer). A checkpoint read with
// the fused rows taken flat ([q k v | z], [b | a]: no grouping by key
// head) gives other logits.
func TestQwen3NextMatchesReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	const steps = 4
	const tol = 1e-4
	mixed := qwenref.TinyQwen3Next()
	mixed.MLPOnly, mixed.KeepTopK, mixed.Tied, mixed.Seed = []int{1, 4}, true, true, 81
	dense := qwenref.TinyQwen3Next()
	dense.Experts, dense.Seed = 0, 82
	stacked := qwenref.TinyQwen3Next()
	stacked.Stacked, stacked.MLPOnly = true, []int{2}
	for name, c := range map[string]qwenref.Qwen35{"sparse": qwenref.TinyQwen3Next(), "mixed": mixed, "dense": dense, "stacked": stacked} {
		t.Run(name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.Write)
			withChunk(t, l, 4)
			if got := l.Model.Spec().Architecture; got != "Qwen3NextForCausalLM" {
				t.Fatalf("architecture %q", got)
			}
			rm, err := qwenref.LoadQwen35(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			for _, v := range []struct {
				name string
				cpu  bool
				opts compile.Options
			}{
				{"cpu-compiled", true, compile.Options{Mode: compile.Compiled}},
				{"go-eager", false, compile.Options{Mode: compile.Eager}},
				{"cpu-host-experts", true, compile.Options{Mode: compile.Compiled, SplitMatmul: 1, Experts: compile.ExpertsHost}},
			} {
				if c.Experts == 0 && v.opts.Experts != "" {
					continue
				}
				t.Run(v.name, func(t *testing.T) {
					be := refcheck.GoBackend(t)
					if v.cpu {
						be = refcheck.CPUBackend(t)
					}
					r, err := compile.NewRunner(be, l, v.opts)
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					f := refcheck.TeacherForced(t, r.NewState(), rm, prompts, seqs, steps, tol)
					t.Logf("max relative error %.3g", f.Worst)
				})
			}
		})
	}

	// The fused rows read flat instead of by key head.
	c := qwenref.TinyQwen3Next()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	got := prefillLogits(t, l, prompts[1])
	w, err := qwenref.LoadWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	H, conv := c.Hidden, (2*c.KHeads*c.KDim+c.VHeads*c.VDim)*c.Hidden
	for name, v := range w {
		if p, ok := strings.CutSuffix(name, "in_proj_qkvz.weight"); ok {
			ba := w[p+"in_proj_ba.weight"]
			w[p+"in_proj_qkv.weight"], w[p+"in_proj_z.weight"] = v[:conv], v[conv:]
			w[p+"in_proj_b.weight"], w[p+"in_proj_a.weight"] = ba[:c.VHeads*H], ba[c.VHeads*H:]
		}
	}
	flat := &qwenref.Qwen35Model{C: c, W: w}
	want := flat.Logits(prompts[1])
	if e := refcheck.RelErr(got, want[len(want)-1]); e <= tol {
		t.Errorf("the model matches a reference reading the fused rows flat (%.3g)", e)
	}
}

// TestQwen3NextConfig: Qwen3NextConfig's defaults (the 80B-A3B sizes),
// the layers decoder_sparse_step and mlp_only_layers make dense, and
// their checks.
func TestQwen3NextConfig(t *testing.T) {
	cfg := func(extra string) *config.File {
		t.Helper()
		m, err := config.ParseModel([]byte(`{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next"` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	o, err := qwen35.Resolve(cfg(""))
	if err != nil {
		t.Fatal(err)
	}
	s, dn := o.Spec, o.DeltaNet
	if s.VocabSize != 151936 || s.Hidden != 2048 || s.Layers != 48 || s.Heads != 16 || s.KVHeads != 2 || s.HeadDim != 256 ||
		o.Experts != 512 || o.TopK != 10 || o.MoEIntermediate != 512 || o.SharedIntermediate != 512 || s.Intermediate != 512 ||
		dn.KHeads != 16 || dn.VHeads != 32 || o.Prefix != "model." || !o.Fused || o.Dense != nil || o.KeepTopK || o.MTPLayers != 1 ||
		s.LayerKinds[3] != "full_attention" || s.LayerKinds[2] != "linear_attention" || s.TieEmbeddings {
		t.Errorf("defaults: %+v", o)
	}
	// Rotary embedding on a quarter of head_dim, θ 10000, where the config
	// names neither (Qwen3NextConfig's __post_init__ default).
	if r := o.Rope; r == nil || r.RotaryDim != 64 || len(r.InvFreq) != 32 || r.InvFreq[1] != math.Pow(10000, -2.0/64) {
		t.Errorf("rope %+v: want 64 rotary dims of θ 10000", r)
	}
	// The model card's sizes: 80B parameters, 79B without the embedding
	// and lm_head (79.67B and 79.05B from the weights read).
	var total, embed int64
	for _, w := range lm.Weights(qwen35.NewModel(o)) {
		n := int64(1)
		for _, d := range w.Shape {
			n *= int64(d)
		}
		total += n
		if w.Name == "model.embed_tokens.weight" || w.Name == "lm_head.weight" {
			embed += n
		}
	}
	if total < 79.5e9 || total > 79.8e9 || total-embed < 78.9e9 || total-embed > 79.2e9 {
		t.Errorf("%d parameters, %d without the embedding and head: want about 80B and 79B", total, total-embed)
	}
	o, err = qwen35.Resolve(cfg(`, "decoder_sparse_step": 2, "mlp_only_layers": [3], "intermediate_size": 96, "norm_topk_prob": false,
		"num_nextn_predict_layers": 0`))
	if err != nil {
		t.Fatal(err)
	}
	if !o.Dense[0] || o.Dense[1] || !o.Dense[2] || !o.Dense[3] || !o.Dense[4] || o.Dense[5] || o.DenseIntermediate != 96 || o.Spec.Intermediate != 96 ||
		!o.KeepTopK || o.MTPLayers != 0 {
		t.Errorf("dense layers %v, intermediate %d (spec %d), keep top k %v, MTP layers %d", o.Dense[:6], o.DenseIntermediate, o.Spec.Intermediate, o.KeepTopK, o.MTPLayers)
	}
	// The head's layers: num_nextn_predict_layers (vLLM), else
	// mtp_num_hidden_layers (mlx-lm's reading), else 1.
	for extra, want := range map[string]int{`, "mtp_num_hidden_layers": 2`: 2, `, "mtp_num_hidden_layers": 2, "num_nextn_predict_layers": 1`: 1} {
		if o, err := qwen35.Resolve(cfg(extra)); err != nil || o.MTPLayers != want {
			t.Errorf("%s: MTP layers %d (%v), want %d", extra, o.MTPLayers, err, want)
		}
	}
	for _, bad := range []struct{ extra, want string }{
		{`, "decoder_sparse_step": 0`, "decoder_sparse_step must be positive"},
		{`, "mlp_only_layers": [48]`, "mlp_only_layers holds 48"},
		{`, "num_nextn_predict_layers": -1`, "num_nextn_predict_layers -1"},
		{`, "linear_num_key_heads": 5`, "linear_num"},
	} {
		if _, err := qwen35.Resolve(cfg(bad.extra)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error naming %q", bad.extra, err, bad.want)
		}
	}
}
