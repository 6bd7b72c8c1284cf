package ernie_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/ernie"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestDenseConfig: ERNIE-4.5-0.3B-PT's config.json (18 layers, hidden
// 1024, 16 heads of 128 over 2 KV heads, MLP 3072, vocabulary 103424,
// tied) has 360,748,032 parameters, the card's 0.36B; Ernie4_5Config's
// defaults are those sizes (2 KV heads and head_dim 128 when absent, the
// heads and hidden/heads when null); use_bias puts a bias on all seven
// projections; the rotary turns adjacent pairs in float32.
func TestDenseConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5ForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "head_dim": 128,
		"hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 131072, "model_type": "ernie4_5",
		"num_attention_heads": 16, "num_hidden_layers": 18, "num_key_value_heads": 2, "pad_token_id": 0, "rms_norm_eps": 1e-05,
		"rope_theta": 500000, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_bias": false, "vocab_size": 103424}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	if !o.RopePairs || !o.RopeF32 || o.QKVBias || o.OBias || o.MLPBias || o.Spec.HeadDim != 128 || o.Spec.KVHeads != 2 || !o.Spec.TieEmbeddings {
		t.Errorf("options %+v", o)
	}
	if n := lmckpt.Params(m); n != 360_748_032 {
		t.Errorf("%d parameters, want 360,748,032", n)
	}

	d, err := ernie.ResolveDense(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5ForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Spec; s.Hidden != 1024 || s.Layers != 18 || s.KVHeads != 2 || s.HeadDim != 128 || s.VocabSize != 103424 || s.BOS != 1 ||
		fmt.Sprint(s.EOS) != "[2]" || math.Abs(d.Rope.InvFreq[1]/math.Pow(500000, -2.0/128)-1) > 1e-12 {
		t.Errorf("Ernie4_5Config's defaults: %+v, rope %+v", s, d.Rope)
	}
	n, err := ernie.ResolveDense(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
		"num_key_value_heads": null, "head_dim": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.KVHeads != 4 || n.Spec.HeadDim != 16 {
		t.Errorf("null num_key_value_heads and head_dim: %d KV heads of %d, want 4 of 16", n.Spec.KVHeads, n.Spec.HeadDim)
	}

	b, err := ernie.ResolveDense(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5ForCausalLM"], "use_bias": true, "attention_bias": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if !b.QKVBias || !b.OBias || !b.MLPBias {
		t.Errorf("use_bias: q/k/v %v, o %v, MLP %v; want all", b.QKVBias, b.OBias, b.MLPBias)
	}

	_, err = ernie.ResolveDense(lmckpt.ParseConfig(t, `{"architectures": ["Ernie4_5ForCausalLM"], "partial_rotary_factor": 0.5}`))
	if err == nil || !strings.Contains(err.Error(), "partial rotary") {
		t.Errorf("partial_rotary_factor 0.5: %v, want it refused", err)
	}
}
