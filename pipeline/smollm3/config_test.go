package smollm3_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/smollm3"
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

// TestSmolLM3 builds SmolLM3-3B's shape from SmolLM3Config's defaults
// (36 layers, 16 heads over 4 KV heads, tied embeddings, every fourth
// layer NoPE, rope_theta 2e6): 3,075,098,624 parameters (per layer the
// attention's 10,485,760, the MLP's 67,633,152 and two norms; the
// embedding 128256 × 2048; the final norm), the 3.08B the model card
// gives.
func TestSmolLM3(t *testing.T) {
	o, err := options(t, `{"architectures": ["SmolLM3ForCausalLM"]}`)
	if err != nil {
		t.Fatal(err)
	}
	s := o.Spec
	if o, err := options(t, `{"architectures": ["SmolLM3ForCausalLM"], "num_key_value_heads": null}`); err != nil || o.Spec.KVHeads != 16 {
		t.Errorf("null num_key_value_heads: %d KV heads (%v), want the 16 heads", o.Spec.KVHeads, err)
	}
	if s.KVHeads != 4 || s.HeadDim != 128 || !s.TieEmbeddings || s.SlidingWindow != 0 || math.Abs(o.Rope.InvFreq[1]-1/math.Pow(2e6, 2.0/128)) > 1e-15 {
		t.Errorf("spec %+v, rope %v", s, o.Rope.InvFreq[:2])
	}
	for i, nope := range o.NoRope {
		if nope != ((i+1)%4 == 0) || s.LayerKinds[i] != lm.KindFull {
			t.Errorf("layer %d: NoPE %v, kind %s", i, nope, s.LayerKinds[i])
		}
	}
	var n int64
	for _, w := range lm.Weights(llama.NewModel(o)) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 3_075_098_624 {
		t.Errorf("%d parameters, want 3,075,098,624", n)
	}
}

// TestConfig checks what SmolLM3Config reads: no_rope_layers over the
// interval, the window on the NoPE layers only with use_sliding_window
// (whatever sliding_window says without it), layer_types, and what is
// refused, each naming its field.
func TestConfig(t *testing.T) {
	base := `"architectures": ["SmolLM3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 50, "intermediate_size": 96`
	for _, c := range []struct {
		name, extra string
		nope        []bool
		kinds       string // one letter a layer: f full, s sliding
		window      int
	}{
		{"the interval", `, "no_rope_layer_interval": 2`, []bool{false, true, false, true}, "ffff", 0},
		{"the list", `, "no_rope_layers": [0, 1, 1, 1, 1]`, []bool{true, false, false, false}, "ffff", 0},
		{"a window", `, "use_sliding_window": true, "sliding_window": 8`, []bool{false, false, false, true}, "fffs", 8},
		{"a window unused", `, "use_sliding_window": false, "sliding_window": 8`, []bool{false, false, false, true}, "ffff", 0},
		{"empty layer types", `, "use_sliding_window": true, "sliding_window": 8, "layer_types": []`, []bool{false, false, false, true}, "fffs", 8},
		{"an empty list", `, "no_rope_layers": []`, []bool{false, false, false, true}, "ffff", 0},
		{"layer types", `, "use_sliding_window": true, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]`, []bool{false, false, false, true}, "sfff", 8},
	} {
		o, err := options(t, `{`+base+c.extra+`}`)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var kinds strings.Builder
		for _, k := range o.Spec.LayerKinds {
			kinds.WriteByte(map[string]byte{lm.KindFull: 'f', lm.KindSliding: 's'}[k])
		}
		if !slices.Equal(o.NoRope, c.nope) || kinds.String() != c.kinds || o.Spec.SlidingWindow != c.window {
			t.Errorf("%s: NoPE %v, kinds %s, window %d; want %v, %s, %d", c.name, o.NoRope, kinds.String(), o.Spec.SlidingWindow, c.nope, c.kinds, c.window)
		}
	}
	for _, c := range []struct{ name, extra, want string }{
		{"a short list", `, "no_rope_layers": [1, 1, 0]`, "no_rope_layers"},
		{"a value not 0 or 1", `, "no_rope_layers": [1, 2, 1, 0]`, "no_rope_layers[1]"},
		{"interval 0", `, "no_rope_layer_interval": 0`, "no_rope_layer_interval"},
		{"a zero window", `, "use_sliding_window": true, "sliding_window": 0`, "sliding_window"},
		{"sliding layers, no use_sliding_window", `, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]`, "use_sliding_window"},
	} {
		if _, err := options(t, `{`+base+c.extra+`}`); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", c.name, err, c.want)
		}
	}
}
