package smallthinker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/smallthinker"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/lmref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// tiny is a small SmallThinker: 4 layers of 4 query heads of 16 over 2,
// the last a NoPE layer, the second and third sliding within 4 tokens; 8
// ReGLU experts of width 24, top 2; a tied head. sigmoid picks the
// sigmoid router (moe_primary_router_apply_softmax false).
func tiny(seed uint64, sigmoid bool) lmckpt.Tiny {
	c := lmckpt.Config{Vocab: 64, Hidden: 32, Intermediate: 24, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6,
		RopeTheta: []float64{1e6, 1e6, 1e6, 1e6}, Window: []int{0, 4, 4, 0}, NoRope: []bool{false, false, false, true},
		Experts: 8, TopK: 2, SmallThinker: true, SmallThinkerSigmoid: sigmoid, Tied: true}
	return lmckpt.Tiny{Arch: smallthinker.Architecture, Config: c, Seed: seed}
}

// TestLogitsMatchReference runs tiny SmallThinkers (the softmax router
// and the sigmoid one) on a left-padded batch of two prompts longer than
// the window plus decode steps, with each experts formulation, compiled
// and eager, on the go and cpu backends, against lmref's float64 forward
// (SmallThinkerMoeBlock: the router on the layer's input, ReGLU experts);
// and in bfloat16 compute within a few percent.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, sigmoid := range []bool{false, true} {
		t.Run(fmt.Sprintf("sigmoid=%v", sigmoid), func(t *testing.T) {
			tc := tiny(80, sigmoid)
			dir, l := lmckpt.WriteLoad(t, tc.Write)
			rm, err := lmref.Load(dir, tc.Config)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
			if sigmoid {
				return
			}
			tc.DType = safetensors.BF16
			dir, l = lmckpt.WriteLoad(t, tc.Write)
			if rm, err = lmref.Load(dir, tc.Config); err != nil {
				t.Fatal(err)
			}
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestSwitchesMatter checks that the test above can fail where
// SmallThinker departs from its kin: a reference routing from the MLP's
// normed input, one with Mixtral's whole block (that router input and
// SwiGLU experts), with the other router, rotating the NoPE layer or
// without the windows gives other logits than the model.
func TestSwitchesMatter(t *testing.T) {
	tc := tiny(81, false)
	dir, l := lmckpt.WriteLoad(t, tc.Write)
	rm, err := lmref.Load(dir, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11}
	got := moecheck.Prefill(t, l, prompt)
	normed := &lmref.Model{C: rm.C, W: rm.W, RouteNormed: true}
	mutant := func(f func(c *lmckpt.Config, w map[string][]float64)) func([]int) [][]float64 {
		m := &lmref.Model{C: rm.C, W: map[string][]float64{}}
		m.C.NoRope = append([]bool(nil), rm.C.NoRope...)
		m.C.Window = append([]int(nil), rm.C.Window...)
		for n, v := range rm.W {
			m.W[n] = v
		}
		f(&m.C, m.W)
		return m.Logits
	}
	mixtral := func(c *lmckpt.Config, w map[string][]float64) { // the router on h, SwiGLU experts named w1/w3/w2
		c.SmallThinker = false
		for n, v := range w {
			r := strings.NewReplacer("primary_router", "gate", ".gate.weight", ".w1.weight", ".up.weight", ".w3.weight", ".down.weight", ".w2.weight")
			w[r.Replace(n)] = v
		}
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "the router on the normed input", Logits: normed.Logits},
		refcheck.Mutant{Name: "Mixtral's block", Logits: mutant(mixtral)},
		refcheck.Mutant{Name: "sigmoid router", Logits: mutant(func(c *lmckpt.Config, _ map[string][]float64) { c.SmallThinkerSigmoid = true })},
		refcheck.Mutant{Name: "rotary on every layer", Logits: mutant(func(c *lmckpt.Config, _ map[string][]float64) { c.NoRope[3] = false })},
		refcheck.Mutant{Name: "no windows", Logits: mutant(func(c *lmckpt.Config, _ map[string][]float64) { c.Window = []int{0, 0, 0, 0} })},
	)
}

// small4b is SmallThinker-4BA0.6B-Instruct's config.json (its rope and
// sliding-window layouts all 1 and all 0, written here by their lengths).
func small4b(extra string) string {
	ones, zeros := strings.TrimSuffix(strings.Repeat("1,", 32), ","), strings.TrimSuffix(strings.Repeat("0,", 32), ",")
	return `{"architectures": ["SmallThinkerForCausalLM"], "model_type": "smallthinker", "bos_token_id": 151643,
	"eos_token_id": [151643, 151645], "head_dim": 128, "hidden_size": 1536, "max_position_embeddings": 32768,
	"moe_ffn_hidden_size": 768, "moe_num_active_primary_experts": 4, "moe_num_primary_experts": 32, "norm_topk_prob": true,
	"num_attention_heads": 12, "num_hidden_layers": 32, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
	"rope_layout": [` + ones + `], "rope_scaling": null, "rope_theta": 1.5e6, "sliding_window_size": 4096,
	"sliding_window_layout": [` + zeros + `], "tie_word_embeddings": true, "vocab_size": 151936` + extra + `}`
}

// TestConfig reads SmallThinker-4BA0.6B's config.json (4.04B parameters,
// of which 0.63B outside the embedding are active a token: the name's 4B
// and 0.6B) and refuses what
// it cannot run, naming the field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, small4b("")))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen3moe.Model).Options()
	s := m.Spec()
	if o.Experts != 32 || o.TopK != 4 || o.MoEIntermediate != 768 || !o.SigmoidRouter || !o.NormTopK || s.Heads != 12 || s.KVHeads != 2 ||
		s.HeadDim != 128 || !s.TieEmbeddings || s.SlidingWindow != 0 || len(o.Sparse) != 32 || !o.Sparse[0] || o.NoRope[5] || fmt.Sprint(s.EOS) != "[151643 151645]" {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	var total, experts int64
	for _, w := range lm.Weights(m) {
		n := int64(1)
		for _, d := range w.Shape {
			n *= int64(d)
		}
		total += n
		if strings.Contains(w.Name, ".experts.") {
			experts += n
		}
	}
	active := total - experts + experts*4/32 - 151936*1536
	if total != 4_035_085_824 || active != 630_818_304 { // the name's 4B, of which 0.6B active
		t.Errorf("%d parameters, %d active outside the embedding", total, active)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = true
	}
	for _, want := range []string{"model.layers.0.block_sparse_moe.primary_router.weight", "model.layers.0.block_sparse_moe.experts.gate_up_proj"} {
		if !names[want] {
			t.Errorf("layer 0 does not read %s", want)
		}
	}

	w, err := smallthinker.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["SmallThinkerForCausalLM"], "num_hidden_layers": 3,
		"rope_layout": [1, 0, 1], "sliding_window_layout": [0, 1, 1], "sliding_window_size": 64, "moe_primary_router_apply_softmax": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if w.SigmoidRouter || !w.NoRope[1] || w.NoRope[0] || w.Spec.LayerKinds[1] != lm.KindSliding || w.Spec.LayerKinds[0] != lm.KindFull || w.Spec.SlidingWindow != 64 {
		t.Errorf("layouts: %+v", w)
	}

	for _, bad := range []struct{ js, want string }{
		{`, "moe_num_active_primary_experts": 33`, "moe_num_active_primary_experts 33"},
		{`, "moe_num_primary_experts": 0`, "moe_num_primary_experts must be positive"},
		{`, "moe_ffn_hidden_size": 0`, "moe_ffn_hidden_size must be positive"},
		{`, "num_hidden_layers": 31`, "rope_layout has 32 entries for 31 layers"},
		{`, "sliding_window_size": 0, "sliding_window_layout": [` + strings.TrimSuffix(strings.Repeat("1,", 32), ",") + `]`, "sliding_window_size must be positive"},
		{`, "moe_num_primary_experts": 1000000`, "expert MLPs"},
	} {
		js := small4b(bad.js)
		if strings.Contains(bad.js, "sliding_window_layout") { // the later key wins in Go's decoder too
			js = strings.Replace(js, `"sliding_window_layout": [`+strings.TrimSuffix(strings.Repeat("0,", 32), ",")+`],`, "", 1)
		}
		_, err := smallthinker.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
