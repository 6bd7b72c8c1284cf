package exaone4_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"

	_ "github.com/tputool/tputool/pipeline/exaone4"
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

// kinds is one letter a layer: s sliding (with the rotary), F full
// without it, f full with it.
func kinds(o llama.Options) string {
	var b strings.Builder
	for i, k := range o.Spec.LayerKinds {
		switch {
		case k == lm.KindSliding:
			b.WriteByte('s')
		case i < len(o.NoRope) && o.NoRope[i]:
			b.WriteByte('F')
		default:
			b.WriteByte('f')
		}
	}
	return b.String()
}

// TestReleases builds EXAONE 4.0's two shapes from their configs: the
// 32B (64 layers, hidden 5120, 40 heads of 128 over 8, MLP 27392, three
// sliding layers of 4096 then a NoPE global one, untied) has
// 32,003,216,384 parameters, 30,954,640,384 without the embedding and
// head (the card's 30.95B); the 1.2B (30 layers, hidden 2048, 32 heads of
// 64 over 8, MLP 4096, every layer global with the rotary, tied)
// 1,279,391,488, 1,069,676,288 without the embedding (the card's 1.07B).
func TestReleases(t *testing.T) {
	o, err := options(t, `{"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "hidden_size": 5120, "intermediate_size": 27392,
		"num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 102400,
		"max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "sliding_window": 4096, "sliding_window_pattern": "LLLG",
		"rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"rope_theta": 1000000, "tie_word_embeddings": false}`)
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(o); k != strings.Repeat("sssF", 16) || o.Spec.SlidingWindow != 4096 || o.Norms != llama.PostNorms || !o.QKNorm || o.QKNormAcross || o.NormF32 || o.Rope.Type != "llama3" {
		t.Errorf("32B: kinds %s, window %d, norms %v, q/k norms %v (across %v), norm f32 %v, rope %s", k, o.Spec.SlidingWindow, o.Norms, o.QKNorm, o.QKNormAcross, o.NormF32, o.Rope.Type)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 32_003_216_384 {
		t.Errorf("32B: %d parameters, want 32,003,216,384", n)
	}
	o, err = options(t, `{"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "hidden_size": 2048, "intermediate_size": 4096,
		"num_hidden_layers": 30, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 102400,
		"max_position_embeddings": 65536, "sliding_window": null, "layer_types": null, "rope_theta": 1000000, "tie_word_embeddings": true}`)
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(o); k != strings.Repeat("f", 30) || o.Spec.SlidingWindow != 0 || !o.Spec.TieEmbeddings {
		t.Errorf("1.2B: kinds %s, window %d, tied %v", k, o.Spec.SlidingWindow, o.Spec.TieEmbeddings)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 1_279_391_488 {
		t.Errorf("1.2B: %d parameters, want 1,279,391,488", n)
	}
}

// TestLayerKinds: what Exaone4Config makes of sliding_window,
// sliding_window_pattern and layer_types, and what is refused.
func TestLayerKinds(t *testing.T) {
	base := `"architectures": ["Exaone4ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 6, "vocab_size": 50, "intermediate_size": 96`
	for _, c := range []struct{ name, extra, kinds string }{
		{"the defaults", ``, "sssFss"},
		{"a number", `, "sliding_window": 16, "sliding_window_pattern": 2`, "sFsFsF"},
		{"a string, the last layer global", `, "sliding_window": 16, "sliding_window_pattern": "LLG"`, "ssFssF"},
		{"a string ending local", `, "sliding_window": 16, "sliding_window_pattern": "LLLLG"`, "ssssFF"},
		{"no window", `, "sliding_window": null`, "ffffff"},
		{"layer types", `, "sliding_window": 16, "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention", "full_attention", "sliding_attention"]`, "FssFFs"},
		{"a window, no sliding layer", `, "sliding_window": 16, "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"]`, "FFFFFF"},
	} {
		o, err := options(t, `{`+base+c.extra+`}`)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if k := kinds(o); k != c.kinds {
			t.Errorf("%s: kinds %s, want %s", c.name, k, c.kinds)
		}
		if o.Spec.KVHeads != 4 {
			t.Errorf("%s: %d KV heads, want the config's 4", c.name, o.Spec.KVHeads)
		}
	}
	for _, c := range []struct{ name, extra, want string }{
		{"sliding layers without a window", `, "sliding_window": null, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"]`, "sliding_window"},
		{"a pattern of other letters", `, "sliding_window_pattern": "LXG"`, "sliding_window_pattern"},
		{"a zero pattern", `, "sliding_window_pattern": 0`, "sliding_window_pattern"},
		{"a negative window", `, "sliding_window": -1`, "sliding_window"},
	} {
		if _, err := options(t, `{`+base+c.extra+`}`); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", c.name, err, c.want)
		}
	}
	if o, _ := options(t, `{`+base+`}`); !slices.Equal(o.NoRope, []bool{false, false, false, true, false, false}) {
		t.Errorf("NoPE %v", o.NoRope)
	}
}

// TestDefaults: Exaone4Config's num_key_value_heads is 32 whatever the
// heads (an explicit null: the heads), bos 0 and eos 2.
func TestDefaults(t *testing.T) {
	o, err := options(t, `{"architectures": ["Exaone4ForCausalLM"], "num_attention_heads": 64, "hidden_size": 4096}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Spec.KVHeads != 32 || o.Spec.BOS != 0 || !slices.Equal(o.Spec.EOS, []int{2}) {
		t.Errorf("defaults: %d KV heads, bos %d, eos %v; want 32, 0, [2]", o.Spec.KVHeads, o.Spec.BOS, o.Spec.EOS)
	}
	o, err = options(t, `{"architectures": ["Exaone4ForCausalLM"], "num_attention_heads": 64, "hidden_size": 4096, "num_key_value_heads": null, "eos_token_id": [7, 8]}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Spec.KVHeads != 64 || !slices.Equal(o.Spec.EOS, []int{7, 8}) {
		t.Errorf("explicit: %d KV heads, eos %v; want 64, [7 8]", o.Spec.KVHeads, o.Spec.EOS)
	}
}
