package nemotron_test

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/nemotron"
)

// TestNemotronMini4B: Nemotron-Mini-4B-Instruct's config (32 layers,
// hidden 3072, 24 heads of 128 over 8, an ungated MLP of 9216, vocabulary
// 256000, untied, the rotary over half of each head) has 4,190,509,056
// parameters, the Hub's 4.19B; the defaults give LayerNorm1P, relu², the
// half-head rotary, bos 2 and eos 3.
func TestNemotronMini4B(t *testing.T) {
	opts := func(js string) llama.Options {
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
	o := opts(`{"architectures": ["NemotronForCausalLM"], "head_dim": 128, "hidden_act": "relu2", "hidden_size": 3072,
		"intermediate_size": 9216, "max_position_embeddings": 4096, "model_type": "nemotron", "norm_eps": 1e-05,
		"num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8, "partial_rotary_factor": 0.5,
		"rope_theta": 10000, "tie_word_embeddings": false, "vocab_size": 256000}`)
	if n := lmckpt.Params(llama.NewModel(o)); n != 4_190_509_056 {
		t.Errorf("%d parameters, want 4,190,509,056", n)
	}
	d := opts(`{"architectures": ["NemotronForCausalLM"]}`)
	if !d.LayerNorm || !d.NormPlusOne || d.NormNoBias || !d.UngatedMLP || d.Rope.RotaryDim != 64 || d.Spec.HeadDim != 128 || d.Spec.BOS != 2 || !slices.Equal(d.Spec.EOS, []int{3}) {
		t.Errorf("defaults: %+v", d)
	}
}
