package olmo_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/olmo"
)

func options(t *testing.T, js string) (llama.Options, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		return llama.Options{}, err
	}
	return m.(*llama.Model).Options(), nil
}

// TestConfigs: OLMo-1B-hf's config (16 layers, hidden 2048, 16 heads,
// MLP 8192, vocabulary 50304, tied, no clip) has 1,176,764,416
// parameters, the card's 1.18B, none of them in a norm; OLMo-7B-0424-hf's
// (32 layers, hidden 4096, MLP 11008, untied, clip_qkv 8) has
// 6,888,095,744, the card's 6.89B. The norms' eps is 1e-5 whatever the
// config says, as OlmoLayerNorm fixes it. A clip_qkv not positive, a
// partial rotary and windowed layers are refused, naming the field.
func TestConfigs(t *testing.T) {
	o, err := options(t, `{"architectures": ["OlmoForCausalLM"], "attention_bias": false, "clip_qkv": null, "eos_token_id": 50279,
		"hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 2048, "model_type": "olmo",
		"num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "rope_theta": 10000.0,
		"tie_word_embeddings": true, "vocab_size": 50304, "rms_norm_eps": 1e-6}`)
	if err != nil {
		t.Fatal(err)
	}
	if !o.NormNoParams || o.Eps != 1e-5 || o.ClipQKV != 0 || o.QKVBias || o.OBias || o.MLPBias || !o.Spec.TieEmbeddings || !slices.Equal(o.Spec.EOS, []int{50279}) {
		t.Errorf("options %+v", o)
	}
	m := llama.NewModel(o)
	if n := lmckpt.Params(m); n != 1_176_764_416 {
		t.Errorf("%d parameters, want 1,176,764,416", n)
	}
	for _, w := range append(m.LayerWeights(0), m.FinalWeights()...) {
		if strings.Contains(w.Name, "norm") {
			t.Errorf("weight %s: OLMo's LayerNorms have no parameters", w.Name)
		}
	}

	o, err = options(t, `{"architectures": ["OlmoForCausalLM"], "clip_qkv": 8.0, "hidden_size": 4096, "intermediate_size": 11008,
		"num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "tie_word_embeddings": false, "vocab_size": 50304}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.ClipQKV != 8 {
		t.Errorf("clip_qkv: %g, want 8", o.ClipQKV)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 6_888_095_744 {
		t.Errorf("%d parameters, want 6,888,095,744", n)
	}

	for _, bad := range []struct{ js, want string }{
		{`"clip_qkv": 0`, "clip_qkv"},
		{`"clip_qkv": -1`, "clip_qkv"},
		{`"partial_rotary_factor": 0.5`, "partial rotary"},
		{`"num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, err := options(t, `{"architectures": ["OlmoForCausalLM"], `+bad.js+`}`)
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: %v, want an error naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
