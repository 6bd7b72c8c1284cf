package mistral_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

func ministral(t *testing.T, js string) (llama.Options, error) {
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

// TestMinistral: Ministral-8B-Instruct-2410's shape (36 layers, hidden
// 4096, 32 heads of 128 over 8, MLP 12288, vocabulary 131072, untied)
// has 8,019,808,256 parameters, the card's 8.02B; without layer_types
// every layer slides within sliding_window (4096 by default), none when
// it is null; layer_types places them; sliding layers without a window
// are refused by name.
func TestMinistral(t *testing.T) {
	o, err := ministral(t, `{"architectures": ["MinistralForCausalLM"], "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288,
		"num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "vocab_size": 131072, "sliding_window": 32768,
		"rope_theta": 100000000.0, "max_position_embeddings": 32768}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 8_019_808_256 {
		t.Errorf("%d parameters, want 8,019,808,256", n)
	}
	base := `"architectures": ["MinistralForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3, "vocab_size": 50, "intermediate_size": 96`
	for _, c := range []struct {
		name, extra, kinds string
		window             int
	}{
		{"the defaults", ``, "sss", 4096},
		{"no window", `, "sliding_window": null`, "fff", 0},
		{"layer types", `, "sliding_window": 16, "layer_types": ["full_attention", "sliding_attention", "full_attention"]`, "fsf", 16},
	} {
		o, err := ministral(t, `{`+base+c.extra+`}`)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var k strings.Builder
		for _, kind := range o.Spec.LayerKinds {
			k.WriteByte(map[string]byte{lm.KindFull: 'f', lm.KindSliding: 's'}[kind])
		}
		if k.String() != c.kinds || o.Spec.SlidingWindow != c.window || o.Spec.KVHeads != 4 {
			t.Errorf("%s: kinds %s, window %d, %d KV heads; want %s, %d, 4", c.name, k.String(), o.Spec.SlidingWindow, o.Spec.KVHeads, c.kinds, c.window)
		}
	}
	_, err = ministral(t, `{`+base+`, "sliding_window": null, "layer_types": ["full_attention", "sliding_attention", "full_attention"]}`)
	if err == nil || !strings.Contains(err.Error(), "sliding_window") {
		t.Errorf("sliding layers without a window: %v, want an error naming sliding_window", err)
	}
}
