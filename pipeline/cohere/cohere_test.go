package cohere_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/cohere"
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

// TestReleases: Aya Expanse 8B's config (CohereForCausalLM: 32 layers,
// hidden 4096, 32 heads over 8, MLP 14336, vocabulary 256000, tied,
// logit_scale 0.125) and Command R7B's (Cohere2ForCausalLM, the same
// sizes, three sliding layers of 4096 then a NoPE global one, logit_scale
// 0.25) both have 8,028,033,024 parameters (per layer the attention's
// 41,943,040, the MLP's 176,160,768 and one norm; the embedding; the
// final norm), the 8.03B the Hub counts.
func TestReleases(t *testing.T) {
	o, err := options(t, `{"architectures": ["CohereForCausalLM"], "model_type": "cohere", "hidden_size": 4096, "intermediate_size": 14336,
		"layer_norm_eps": 1e-05, "logit_scale": 0.125, "max_position_embeddings": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
		"num_key_value_heads": 8, "rope_theta": 10000, "use_qk_norm": false, "vocab_size": 256000, "bos_token_id": 5, "eos_token_id": 255001}`)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Parallel || !o.LayerNorm || !o.NormNoBias || !o.RopePairs || o.LogitScale != 0.125 || !o.Spec.TieEmbeddings || o.NoRope != nil || o.Norms != (llama.Norms{PreAttn: "input_layernorm"}) {
		t.Errorf("Aya Expanse: %+v", o)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 8_028_033_024 {
		t.Errorf("Aya Expanse 8B: %d parameters, want 8,028,033,024", n)
	}
	o, err = options(t, `{"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 4096, "intermediate_size": 14336,
		"layer_norm_eps": 1e-05, "logit_scale": 0.25, "max_position_embeddings": 132768, "num_attention_heads": 32, "num_hidden_layers": 32,
		"num_key_value_heads": 8, "rope_theta": 50000, "sliding_window": 4096, "sliding_window_pattern": 4, "vocab_size": 256000, "head_dim": 999}`)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range o.Spec.LayerKinds {
		if sliding := (i+1)%4 != 0; sliding != (k == lm.KindSliding) || o.NoRope[i] == sliding {
			t.Errorf("Command R7B layer %d: %s, NoPE %v", i, k, o.NoRope[i])
		}
	}
	if o.Spec.SlidingWindow != 4096 || o.Spec.HeadDim != 128 || o.LogitScale != 0.25 || o.Spec.BOS != 5 || !slices.Equal(o.Spec.EOS, []int{255001}) {
		t.Errorf("Command R7B: window %d, head_dim %d, logit scale %g, bos %d, eos %v", o.Spec.SlidingWindow, o.Spec.HeadDim, o.LogitScale, o.Spec.BOS, o.Spec.EOS)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 8_028_033_024 {
		t.Errorf("Command R7B: %d parameters, want 8,028,033,024", n)
	}
}

// TestConfigs: the defaults and what is refused, each by name.
func TestConfigs(t *testing.T) {
	o, err := options(t, `{"architectures": ["Cohere2ForCausalLM"], "num_hidden_layers": 6, "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.NoRope, []bool{true, false, true, false, false, true}) || o.Spec.SlidingWindow != 4096 || o.LogitScale != 0.0625 || o.Spec.KVHeads != 64 || o.Eps != 1e-5 {
		t.Errorf("layer_types: NoPE %v, window %d, logit scale %g, %d KV heads, eps %g", o.NoRope, o.Spec.SlidingWindow, o.LogitScale, o.Spec.KVHeads, o.Eps)
	}
	base := `"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 50`
	// Cohere's head_dim is config.json's when it has one; its rotary base
	// CohereConfig's default_theta, Cohere2Config's 10000.
	o, err = options(t, `{"architectures": ["CohereForCausalLM"], `+base+`, "head_dim": 32}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Spec.HeadDim != 32 || math.Abs(o.Rope.InvFreq[1]-math.Pow(500000, -2.0/32)) > 1e-15 || !o.RopeF32 {
		t.Errorf("Cohere: head_dim %d, inverse frequency %g, rotary in f32 %v; want 32, 500000^(-1/16), true", o.Spec.HeadDim, o.Rope.InvFreq[1], o.RopeF32)
	}
	o, err = options(t, `{"architectures": ["Cohere2ForCausalLM"], `+base+`, "head_dim": 32}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Spec.HeadDim != 16 || math.Abs(o.Rope.InvFreq[1]-math.Pow(10000, -2.0/16)) > 1e-15 {
		t.Errorf("Cohere2: head_dim %d, inverse frequency %g; want 16, 10000^(-1/8)", o.Spec.HeadDim, o.Rope.InvFreq[1])
	}
	// Command R+'s sizes (64 layers, hidden 12288, 96 heads of 128 over 8,
	// MLP 33792, vocabulary 256000, tied, use_qk_norm): 103,810,674,688
	// parameters, the card's 104B, q_norm and k_norm a weight per head.
	plus, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["CohereForCausalLM"], "model_type": "cohere", "hidden_size": 12288,
		"intermediate_size": 33792, "layer_norm_eps": 1e-05, "logit_scale": 0.8333333333333334, "num_attention_heads": 96,
		"num_hidden_layers": 64, "num_key_value_heads": 8, "rope_theta": 75000000.0, "use_qk_norm": true, "vocab_size": 256000}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(plus); n != 103_810_674_688 {
		t.Errorf("Command R+: %d parameters, want 103,810,674,688", n)
	}
	shapes := map[string][]int{}
	for _, w := range plus.LayerWeights(0) {
		shapes[w.Name] = w.Shape
	}
	if !plus.(*llama.Model).Options().QKLayerNorm || !slices.Equal(shapes["model.layers.0.self_attn.q_norm.weight"], []int{96, 128}) ||
		!slices.Equal(shapes["model.layers.0.self_attn.k_norm.weight"], []int{8, 128}) {
		t.Errorf("use_qk_norm: q/k norms %v %v", shapes["model.layers.0.self_attn.q_norm.weight"], shapes["model.layers.0.self_attn.k_norm.weight"])
	}
	o, err = options(t, `{"architectures": ["Cohere2ForCausalLM"], `+base+`, "use_qk_norm": true}`)
	if err != nil || o.QKLayerNorm {
		t.Errorf("Cohere2 with use_qk_norm: %v, QKLayerNorm %v; Cohere2Config has no q/k norms", err, o.QKLayerNorm)
	}
	for _, c := range []struct{ name, extra, want string }{
		{"a null window", `, "sliding_window": null`, "sliding_window"},
		{"a zero pattern", `, "sliding_window_pattern": 0`, "sliding_window_pattern"},
	} {
		if _, err := options(t, `{"architectures": ["Cohere2ForCausalLM"], `+base+c.extra+`}`); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", c.name, err, c.want)
		}
	}
}
