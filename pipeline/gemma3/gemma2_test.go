package gemma3

import (
	"math"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestGemma2Configs builds Gemma 2 from Gemma2Config's defaults (the 2B:
// 26 layers, 8 heads over 4 of 256, vocab 256000, tied) and from the 9B's
// sizes: 2,614,341,888 and 9,241,705,984 parameters (the model cards'
// 2.61B and 9.24B); every second layer global (the first local), one
// rope_theta for both kinds, no q/k norms, logits soft-capped at 50
// (attention) and 30 (final) unless the config says null.
func TestGemma2Configs(t *testing.T) {
	for _, c := range []struct {
		name, js string
		params   int64
	}{
		{"2B (defaults)", `{"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2"}`, 2_614_341_888},
		{"9B", `{"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
			"num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "rope_theta": 10000.0}`, 9_241_705_984},
	} {
		cfg, err := config.ParseModel([]byte(c.js))
		if err != nil {
			t.Fatal(err)
		}
		lmm, err := lm.New(cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m := lmm.(*Model)
		s := m.Spec()
		if m.qkNorm || m.attnSoftcap != 50 || m.finalSoftcap != 30 || m.local != m.global || s.LayerKinds[0] != lm.KindSliding ||
			s.LayerKinds[1] != lm.KindFull || s.SlidingWindow != 4096 || s.MaxPositions != 8192 || !s.TieEmbeddings {
			t.Errorf("%s: %+v", c.name, m)
		}
		var n int64
		for _, w := range lm.Weights(m) {
			k := int64(1)
			for _, d := range w.Shape {
				k *= int64(d)
			}
			n += k
		}
		if n != c.params {
			t.Errorf("%s: %d parameters, want %d", c.name, n, c.params)
		}
	}
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Gemma2ForCausalLM"], "rope_parameters": {"rope_type": "default", "rope_theta": 20000}}`))
	if err != nil {
		t.Fatal(err)
	}
	lmm, err := lm.New(cfg) // transformers v5's flat rope_parameters: one rotary
	if err != nil {
		t.Fatal(err)
	}
	if m := lmm.(*Model); m.local != m.global || math.Abs(m.global.InvFreq[1]-1/math.Pow(20000, 2.0/256)) > 1e-15 {
		t.Errorf("flat rope_parameters: local %v, global %v", m.local, m.global)
	}
	cfg, err = config.ParseModel([]byte(`{"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": null, "final_logit_softcapping": 20}`))
	if err != nil {
		t.Fatal(err)
	}
	lmm, err = lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := lmm.(*Model); m.attnSoftcap != 0 || m.finalSoftcap != 20 {
		t.Errorf("soft-capping %v and %v, want none and 20", m.attnSoftcap, m.finalSoftcap)
	}
}
