package apertus_test

import (
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/apertus"
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

// TestApertus8B: Apertus-8B's config (32 layers, hidden 4096, 32 heads of
// 128 over 8, an ungated MLP of 21504 with xIELU, untied, the Llama 3
// rope scaling) has 8,053,338,240 parameters (the four xIELU scalars a
// layer among them), the Hub's 8.05B; the defaults give the Llama 3
// scaling of rope_theta 12e6, xIELU, bos 1 and eos 2; another hidden_act
// runs as named.
func TestApertus8B(t *testing.T) {
	o := options(t, `{"architectures": ["ApertusForCausalLM"], "hidden_act": "xielu", "hidden_size": 4096, "intermediate_size": 21504,
		"max_position_embeddings": 65536, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
		"rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"rope_theta": 12000000, "tie_word_embeddings": false, "vocab_size": 131072}`)
	if n := lmckpt.Params(llama.NewModel(o)); n != 8_053_338_240 {
		t.Errorf("%d parameters, want 8,053,338,240", n)
	}
	d := options(t, `{"architectures": ["ApertusForCausalLM"]}`)
	if !d.XIELU || !d.UngatedMLP || !d.QKNorm || d.Norms != apertus.Norms || d.Rope.Type != "llama3" || d.Spec.KVHeads != 32 || d.Spec.BOS != 1 || !slices.Equal(d.Spec.EOS, []int{2}) {
		t.Errorf("defaults: %+v", d)
	}
	if r := options(t, `{"architectures": ["ApertusForCausalLM"], "hidden_act": "relu2"}`); r.XIELU || !r.UngatedMLP {
		t.Errorf("relu2: xIELU %v, ungated %v", r.XIELU, r.UngatedMLP)
	}
	// rope_theta alone keeps the Llama 3 scaling, of that base; a
	// rope_scaling of its own replaces it.
	if r := options(t, `{"architectures": ["ApertusForCausalLM"], "rope_theta": 1e6}`); r.Rope.Type != "llama3" || math.Abs(r.Rope.InvFreq[1]-math.Pow(1e6, -2.0/128)) > 1e-15 {
		t.Errorf("rope_theta only: rope %s, frequency %g", r.Rope.Type, r.Rope.InvFreq[1])
	}
	if r := options(t, `{"architectures": ["ApertusForCausalLM"], "rope_scaling": {"rope_type": "default"}}`); r.Rope.Type != "default" {
		t.Errorf("a default rope_scaling: rope %s", r.Rope.Type)
	}
}
