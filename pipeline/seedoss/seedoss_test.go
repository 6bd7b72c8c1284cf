package seedoss_test

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/seedoss"
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

// TestSeedOss36B: Seed-OSS-36B's config (64 layers, hidden 5120, 80 heads
// of 128 over 8, MLP 27648, vocabulary 155136, untied, q/k/v biases) has
// 36,151,104,512 parameters, the Hub's 36.2B; the defaults put biases on
// q, k and v only, and an explicit null num_key_value_heads is the heads.
func TestSeedOss36B(t *testing.T) {
	o := options(t, `{"architectures": ["SeedOssForCausalLM"], "attention_bias": true, "attention_out_bias": false, "head_dim": 128,
		"hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 524288, "mlp_bias": false,
		"model_type": "seed_oss", "num_attention_heads": 80, "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
		"rope_theta": 10000000.0, "tie_word_embeddings": false, "vocab_size": 155136}`)
	if n := lmckpt.Params(llama.NewModel(o)); n != 36_151_104_512 {
		t.Errorf("%d parameters, want 36,151,104,512", n)
	}
	d := options(t, `{"architectures": ["SeedOssForCausalLM"]}`)
	if !d.QKVBias || d.OBias || d.MLPBias || d.Spec.KVHeads != 8 || d.Spec.HeadDim != 128 || d.Spec.Heads != 80 || d.Eps != 1e-6 {
		t.Errorf("defaults: biases %v/%v/%v, %d heads over %d of %d, eps %g", d.QKVBias, d.OBias, d.MLPBias, d.Spec.Heads, d.Spec.KVHeads, d.Spec.HeadDim, d.Eps)
	}
	e := options(t, `{"architectures": ["SeedOssForCausalLM"], "num_key_value_heads": null, "attention_out_bias": true, "attention_bias": false, "mlp_bias": true}`)
	if e.Spec.KVHeads != 80 || e.QKVBias || !e.OBias || !e.MLPBias {
		t.Errorf("explicit: %d KV heads, biases %v/%v/%v", e.Spec.KVHeads, e.QKVBias, e.OBias, e.MLPBias)
	}
}
