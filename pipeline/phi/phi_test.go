package phi_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/phi"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func model(t *testing.T, js string) (*phi.Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		return nil, err
	}
	return m.(*phi.Model), nil
}

// TestPhi2: Phi-2's config (32 layers, hidden 2560, 32 heads, MLP 10240,
// vocabulary 51200, the rotary over 32 of 80 dims, untied, biases
// everywhere) has 2,779,683,840 parameters, the card's 2.7B; the
// checkpoint's names are read as Llama's; qk_layernorm adds its norms.
func TestPhi2(t *testing.T) {
	m, err := model(t, `{"architectures": ["PhiForCausalLM"], "hidden_act": "gelu_new", "hidden_size": 2560, "intermediate_size": 10240,
		"layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi", "num_attention_heads": 32, "num_hidden_layers": 32,
		"num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": false, "rope_theta": 10000.0, "tie_word_embeddings": false,
		"vocab_size": 51200, "bos_token_id": 50256, "eos_token_id": 50256}`)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Options()
	if o.Rope.RotaryDim != 32 || !o.Parallel || !o.LayerNorm || o.NormNoBias || !o.HeadBias || !o.UngatedMLP || o.Spec.BOS != 50256 || !slices.Equal(o.Spec.EOS, []int{50256}) {
		t.Errorf("options %+v", o)
	}
	if n := lmckpt.Params(m); n != 2_779_683_840 {
		t.Errorf("%d parameters, want 2,779,683,840", n)
	}
	for stored, want := range map[string]string{
		"model.layers.3.self_attn.dense.bias": "model.layers.3.self_attn.o_proj.bias",
		"model.layers.0.mlp.fc1.weight":       "model.layers.0.mlp.up_proj.weight",
		"model.layers.0.mlp.fc2.bias":         "model.layers.0.mlp.down_proj.bias",
		"model.final_layernorm.weight":        "model.norm.weight",
		"lm_head.bias":                        "lm_head.bias",
	} {
		if got := m.RenameWeight(stored); got != want {
			t.Errorf("RenameWeight(%q) = %q, want %q", stored, got, want)
		}
	}
	// qk_layernorm: a biased LayerNorm over head_dim for the query heads
	// and one for the key heads, 4·head_dim parameters a layer more.
	qk, err := model(t, `{"architectures": ["PhiForCausalLM"], "qk_layernorm": true}`)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := model(t, `{"architectures": ["PhiForCausalLM"]}`)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, w := range lm.Weights(qk) {
		names[w.Name] = true
	}
	if d := lmckpt.Params(qk) - lmckpt.Params(plain); d != 24*4*64 || !names["model.layers.0.self_attn.q_layernorm.bias"] || !names["model.layers.23.self_attn.k_layernorm.weight"] {
		t.Errorf("qk_layernorm: %d parameters more, want %d; q_layernorm.bias listed: %v", d, 24*4*64, names["model.layers.0.self_attn.q_layernorm.bias"])
	}
	_, err = model(t, `{"architectures": ["PhiForCausalLM"], "model_type": "phi-msft", "n_embd": 2560}`)
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "phi-msft") {
		t.Errorf("phi-msft: %v, want an unsupported error naming it", err)
	}
}
