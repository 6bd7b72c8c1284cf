package helium_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/helium"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestConfig: HeliumConfig's defaults are helium-1-preview-2b's sizes (24
// layers, hidden 2560, 20 heads of 128, MLP 7040, vocabulary 48000,
// untied): 2,172,643,840 parameters, the card's 2B; the rotary turns
// pairs, the norms scale in float32; attention_bias gives q, k and v
// biases but none on o_proj; heads × head_dim other than hidden_size is
// refused naming both.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["HeliumForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n != 2_172_643_840 {
		t.Errorf("%d parameters, want 2,172,643,840", n)
	}
	o := m.(*llama.Model).Options()
	if s := o.Spec; !o.RopePairs || !o.NormF32 || o.QKVBias || o.OBias || s.KVHeads != 20 || s.HeadDim != 128 || o.Eps != 1e-8 ||
		s.BOS != 1 || fmt.Sprint(s.EOS) != "[2]" || s.TieEmbeddings {
		t.Errorf("defaults: spec %+v, options %+v", s, o)
	}
	b, err := helium.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["HeliumForCausalLM"], "attention_bias": true, "mlp_bias": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if !b.QKVBias || b.OBias || !b.MLPBias {
		t.Errorf("attention_bias and mlp_bias: q/k/v %v, o %v, MLP %v; want q/k/v and MLP", b.QKVBias, b.OBias, b.MLPBias)
	}
	_, err = helium.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["HeliumForCausalLM"], "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64}`))
	if err == nil || !strings.Contains(err.Error(), "head_dim 64") || !strings.Contains(err.Error(), "hidden_size 2048") {
		t.Errorf("16 heads of 64 over hidden 2048: %v, want an error naming both", err)
	}
}
