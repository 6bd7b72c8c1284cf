package olmoe_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/olmoe"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/olmoeref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestFlexConfig reads FlexOlmoConfig's defaults (FlexOlmo-7x7B-1T's
// sizes: 32 layers, hidden 4096, 7 experts of 11008 of which 5 are
// chosen, untied: 33,270,665,216 parameters), OLMo 2's norms and no
// input_layernorm, num_local_experts as num_experts' alias, and refuses
// bad values naming the field.
func TestFlexConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["FlexOlmoForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n != 33_270_665_216 {
		t.Errorf("%d parameters, want 33,270,665,216", n)
	}
	o := m.(*olmoe.FlexModel).Options()
	if s := m.Spec(); o.Experts != 7 || o.TopK != 5 || o.NormTopK || o.Norms != llama.PostNorms || !o.QKNormAcross || !o.NormF32 ||
		o.ClipQKV != 0 || s.KVHeads != 32 || s.VocabSize != 100352 || fmt.Sprint(s.EOS) != "[100257]" || s.BOS >= 0 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(3) {
		names[w.Name] = true
	}
	if names["model.layers.3.input_layernorm.weight"] || !names["model.layers.3.post_attention_layernorm.weight"] ||
		!names["model.layers.3.post_feedforward_layernorm.weight"] || !names["model.layers.3.mlp.gate.weight"] {
		t.Errorf("layer 3's weights %v", names)
	}
	a, err := olmoe.ResolveFlex(lmckpt.ParseConfig(t, `{"architectures": ["FlexOlmoForCausalLM"], "num_local_experts": 4, "num_experts_per_tok": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Experts != 4 || a.TopK != 2 {
		t.Errorf("num_local_experts 4: %d experts, top %d", a.Experts, a.TopK)
	}
	base := `"architectures": ["FlexOlmoForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2`
	for _, bad := range []struct{ js, want string }{
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"num_experts": 0`, "num_experts 0"},
		{`"num_key_value_heads": 3`, "num_key_value_heads"},
		{`"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, err := olmoe.ResolveFlex(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestFlexLogitsMatchReference runs a tiny FlexOlmo (OLMo 2's post norms
// around OLMoE's attention and experts) on a left-padded batch of two
// prompts plus decode steps, in the graph (its only formulation),
// compiled and eager, on the go and cpu backends, against olmoeref's
// float64 FlexOlmoForCausalLM; and checks that the comparison can fail:
// a reference without either post norm's weights gives other logits.
func TestFlexLogitsMatchReference(t *testing.T) {
	const steps = 6
	c := olmoeref.TinyFlexOlmo()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)

	prompt := prompts[1]
	got := moecheck.Prefill(t, l, prompt)
	mutant := func(name string, f func(w map[string][]float64)) refcheck.Mutant {
		w := map[string][]float64{}
		for k, v := range rm.W {
			w[k] = v
		}
		f(w)
		return refcheck.Mutant{Name: name, Logits: (&olmoeref.Model{C: c, W: w}).Logits}
	}
	ones := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	refcheck.Discriminates(t, got[0], prompt, rm.Logits, 1e-3,
		mutant("no post_feedforward_layernorm weights", func(w map[string][]float64) {
			for l := 0; l < c.Layers; l++ {
				w[fmt.Sprintf("model.layers.%d.post_feedforward_layernorm.weight", l)] = ones(c.Hidden)
			}
		}),
		mutant("no post_attention_layernorm weights", func(w map[string][]float64) {
			for l := 0; l < c.Layers; l++ {
				w[fmt.Sprintf("model.layers.%d.post_attention_layernorm.weight", l)] = ones(c.Hidden)
			}
		}))
	// norm_topk_prob is no mutant here: it scales every token's weighted
	// sum by a constant that post_feedforward_layernorm, an RMSNorm,
	// divides out (up to its eps), so FlexOlmo's logits hardly depend on it.
}

// TestFlexHostRefused: the formulations that run the experts one by one
// (whose Route would add them to the residual without
// post_feedforward_layernorm) are refused, naming the reason.
func TestFlexHostRefused(t *testing.T) {
	_, l := lmckpt.WriteLoad(t, olmoeref.TinyFlexOlmo().Write)
	for _, e := range []compile.ExpertsMode{compile.ExpertsHost, compile.ExpertsDense} {
		r, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Experts: e})
		if err == nil {
			r.Close()
			t.Fatalf("experts %v: no error", e)
		}
		if !strings.Contains(err.Error(), "post_feedforward_layernorm") {
			t.Errorf("experts %v: %v, want the reason named", e, err)
		}
	}
}

// TestFlexBFloat16 runs the tiny FlexOlmo with bfloat16 compute (the
// rotary and the norms' scaling in float32, as Olmo2's are): within 5% of
// the float64 reference.
func TestFlexBFloat16(t *testing.T) {
	c := olmoeref.TinyFlexOlmo()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
}
