package starcoder2_test

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/starcoder2"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestStarcoder2: StarCoder2-3B's config (30 layers, hidden 3072, 24
// heads of 128 over 2, MLP 12288, vocabulary 49152, tied, biases, a
// window of 4096) has 3,030,371,328 parameters, the card's 3B; the
// checkpoint's c_fc and c_proj are read as up_proj and down_proj;
// use_bias false drops every bias; bos and eos default to 50256.
func TestStarcoder2(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Starcoder2ForCausalLM"], "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072,
		"intermediate_size": 12288, "max_position_embeddings": 16384, "model_type": "starcoder2", "norm_epsilon": 1e-05,
		"num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2, "rope_theta": 999999.4420358813,
		"sliding_window": 4096, "use_bias": true, "vocab_size": 49152}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := m.(*starcoder2.Model)
	o := sc.Options()
	if !o.LayerNorm || o.NormNoBias || !o.UngatedMLP || !o.QKVBias || !o.OBias || !o.MLPBias || o.Spec.SlidingWindow != 4096 || !o.Spec.TieEmbeddings || o.Spec.BOS != 50256 || !slices.Equal(o.Spec.EOS, []int{50256}) {
		t.Errorf("options %+v", o)
	}
	if n := lmckpt.Params(m); n != 3_030_371_328 {
		t.Errorf("%d parameters, want 3,030,371,328", n)
	}
	if got := sc.RenameWeight("model.layers.7.mlp.c_fc.bias"); got != "model.layers.7.mlp.up_proj.bias" {
		t.Errorf("c_fc read as %q", got)
	}
	cfg, _ = config.ParseModel([]byte(`{"architectures": ["Starcoder2ForCausalLM"], "use_bias": false}`))
	m, err = lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.(*starcoder2.Model).Options(); o.QKVBias || o.OBias || o.MLPBias || o.Spec.SlidingWindow != 0 {
		t.Errorf("use_bias false: biases %v/%v/%v, window %d", o.QKVBias, o.OBias, o.MLPBias, o.Spec.SlidingWindow)
	}
}
