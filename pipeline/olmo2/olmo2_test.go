package olmo2_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/olmo2"
)

// TestOLMo2 builds OLMo-2-1124-7B's shape (hidden 4096, 32 layers of 32
// heads, the MLP 11008, vocab 100352, untied): 7,298,617,344 parameters
// (per layer the attention's 4·4096² and the MLP's 3·4096·11008, the q/k
// norms and the two post norms; the embedding and the head; the final
// norm), the 7.3B the model card gives; no input_layernorm is read.
func TestOLMo2(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352,
		"max_position_embeddings": 4096, "rope_theta": 500000}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	if o.Norms != llama.PostNorms || !o.QKNorm || !o.QKNormAcross || !o.NormF32 || o.Spec.KVHeads != 32 || o.Spec.TieEmbeddings {
		t.Errorf("options %+v", o)
	}
	var n int64
	for _, w := range lm.Weights(m) {
		if w.Name == "model.layers.0.input_layernorm.weight" {
			t.Errorf("%s is read", w.Name)
		}
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 7_298_617_344 {
		t.Errorf("%d parameters, want 7,298,617,344", n)
	}
}

// TestOLMo3Config: Olmo3Config's layer pattern (three sliding layers of
// 4096 positions, then a full one) and its rotary: the config's scaling
// (YaRN, as the releases set it; rope_scaling or transformers v5's
// rope_parameters, whole or by layer type) on the full-attention layers,
// the plain rotary of the same rope_theta on the sliding ones.
func TestOLMo3Config(t *testing.T) {
	const base = `"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "hidden_size": 64, "num_attention_heads": 4,
		"num_hidden_layers": 8, "vocab_size": 50, "intermediate_size": 96, "max_position_embeddings": 65536`
	const yarn = `{"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192, "beta_fast": 32, "beta_slow": 1, "attention_factor": 1.2079441541679836`
	plain := 1 / math.Pow(5e5, 2.0/16) // the second inverse frequency of a plain rotary of theta 5e5 over 16 dims
	for _, c := range []struct{ name, extra string }{
		{"rope_scaling", `, "rope_theta": 500000, "rope_scaling": ` + yarn + `}`},
		{"rope_parameters", `, "rope_parameters": ` + yarn + `, "rope_theta": 500000}`},
		{"rope_parameters by layer type", `, "rope_parameters": {"full_attention": ` + yarn + `, "rope_theta": 500000}, "sliding_attention": {"rope_type": "default", "rope_theta": 500000}}`},
	} {
		cfg, err := config.ParseModel([]byte(`{` + base + c.extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		m, err := lm.New(cfg)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		o := m.(*llama.Model).Options()
		s := o.Spec
		if s.SlidingWindow != 4096 || s.LayerKinds[0] != lm.KindSliding || s.LayerKinds[2] != lm.KindSliding || s.LayerKinds[3] != lm.KindFull || s.LayerKinds[7] != lm.KindFull {
			t.Errorf("%s: window %d, kinds %v", c.name, s.SlidingWindow, s.LayerKinds)
		}
		if o.Rope.Type != "yarn" || o.Rope.AttentionFactor != 1.2079441541679836 || o.SlidingRope == nil || o.SlidingRope.Type != "default" ||
			math.Abs(o.SlidingRope.InvFreq[1]-plain) > 1e-15 || o.SlidingRope.AttentionFactor != 1 {
			t.Errorf("%s: full %+v, sliding %+v", c.name, o.Rope, o.SlidingRope)
		}
	}
	cfg, err := config.ParseModel([]byte(`{` + base + `, "sliding_window": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), "sliding_window") {
		t.Errorf("a zero window: %v; want an error naming sliding_window", err)
	}
}
