package glm_test

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/glm"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func options(t *testing.T, js string) llama.Options {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*llama.Model).Options()
}

// TestDefaults: the configuration classes' defaults are GLM-4-9B's shape
// (40 layers, hidden 4096, 32 heads of 128 over 2 KV heads, MLP 13696 in
// one gate_up_proj, vocabulary 151552, untied, q/k/v biases, the rotary
// over 64 of 128 dims in pairs): GlmForCausalLM's 9,399,951,360
// parameters (glm-4-9b-chat-hf), and Glm4ForCausalLM's two more norms a
// layer make 9,400,279,040 (GLM-4-9B-0414), the cards' 9.4B; with no
// eos_token_id the classes' three.
func TestDefaults(t *testing.T) {
	o := options(t, `{"architectures": ["GlmForCausalLM"]}`)
	s := o.Spec
	if s.KVHeads != 2 || s.HeadDim != 128 || s.TieEmbeddings || !o.QKVBias || o.OBias || !o.RopePairs || !o.FusedGateUp ||
		o.Rope.RotaryDim != 64 || o.Eps != 1.5625e-07 || o.Norms != llama.LlamaNorms || !slices.Equal(s.EOS, []int{151329, 151336, 151338}) {
		t.Errorf("options %+v", o)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 9_399_951_360 {
		t.Errorf("GlmForCausalLM: %d parameters, want 9,399,951,360", n)
	}
	o = options(t, `{"architectures": ["Glm4ForCausalLM"], "attention_bias": true, "head_dim": 128, "hidden_size": 4096,
		"intermediate_size": 13696, "max_position_embeddings": 32768, "model_type": "glm4", "num_attention_heads": 32,
		"num_hidden_layers": 40, "num_key_value_heads": 2, "pad_token_id": 151329, "partial_rotary_factor": 0.5,
		"rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "vocab_size": 151552, "eos_token_id": [151329, 151336, 151338]}`)
	if o.Norms != glm.Glm4Norms || o.Spec.MaxPositions != 32768 {
		t.Errorf("Glm4ForCausalLM: norms %+v, max positions %d", o.Norms, o.Spec.MaxPositions)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 9_400_279_040 {
		t.Errorf("Glm4ForCausalLM: %d parameters, want 9,400,279,040", n)
	}
	o = options(t, `{"architectures": ["Glm4ForCausalLM"], "hidden_size": 2048, "attention_bias": false, "partial_rotary_factor": 1.0, "num_key_value_heads": null, "head_dim": null, "eos_token_id": 7}`)
	if o.QKVBias || o.Rope.RotaryDim != 64 || o.Spec.KVHeads != 32 || o.Spec.HeadDim != 64 || !slices.Equal(o.Spec.EOS, []int{7}) {
		t.Errorf("explicit fields: bias %v, rotary %d, %d KV heads of %d, eos %v", o.QKVBias, o.Rope.RotaryDim, o.Spec.KVHeads, o.Spec.HeadDim, o.Spec.EOS)
	}
}
