package afmoe_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/afmoe"
	"github.com/tputool/tputool/pipeline/lm"
)

func newModel(t *testing.T, js string) (*afmoe.Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		return nil, err
	}
	return m.(*afmoe.Model), nil
}

// TestDefaults builds a config.json that names only the architecture:
// AfmoeConfig's defaults apply (head_dim 128, not hidden/heads; KV heads
// the heads; every fourth layer full attention without the rotary
// embedding, the others within 1024 positions; one dense layer; 64
// experts, top 6, two shared; route scale 1; no mup). Its parameters,
// counted by hand from transformers' modules: per layer q, k, v, the
// gate and o (5·16·128·2048 = 20,971,520), the q/k norms (256) and four
// norms (8,192); the dense MLP 3·2048·6144 = 37,748,736; each MoE layer
// the router (131,072), the bias (64), 64 experts of 3·2048·1408
// (553,648,128) and the shared MLP of 3·2048·2816 (17,301,504); the
// embedding and the head 2·200192·2048 and the final norm: 19,232,600,000,
// of which 3,678,547,904 a token uses (6 of 64 experts).
func TestDefaults(t *testing.T) {
	m, err := newModel(t, `{"architectures": ["AfmoeForCausalLM"]}`)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Options()
	s := o.Spec
	if s.HeadDim != 128 || s.KVHeads != 16 || s.SlidingWindow != 1024 || o.Experts != 64 || o.TopK != 6 || o.Shared != 2*1408 ||
		o.RouteScale != 1 || o.EmbedScale != 0 || o.Sparse[0] || !o.Sparse[1] || s.MaxPositions != 16384 || o.Eps != 1e-5 {
		t.Errorf("options %+v", o)
	}
	for i, k := range s.LayerKinds {
		full := (i+1)%4 == 0
		if (k == lm.KindFull) != full || o.NoRope[i] != full {
			t.Errorf("layer %d: kind %s, no rope %v", i, k, o.NoRope[i])
		}
	}
	var all, active int64
	for _, w := range lm.Weights(m) {
		n := int64(1)
		for _, d := range w.Shape {
			n *= int64(d)
		}
		all += n
		if strings.Contains(w.Name, ".mlp.experts.") {
			n = n * int64(o.TopK) / int64(o.Experts)
		}
		active += n
	}
	if all != 19_232_600_000 || active != 3_678_547_904 {
		t.Errorf("%d parameters (%d active), want 19,232,600,000 (3,678,547,904)", all, active)
	}
}

// TestConfig checks the fields AFMoE reads beyond the defaults: mup's
// scale, layer_types over global_attn_every_n_layers, the window, and
// what is refused, each naming its field.
func TestConfig(t *testing.T) {
	base := `"architectures": ["AfmoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
		"num_hidden_layers": 3, "vocab_size": 50, "intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2`
	m, err := newModel(t, `{`+base+`, "mup_enabled": true, "sliding_window": 7, "global_attn_every_n_layers": 2, "route_scale": 2.826, "num_shared_experts": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Options()
	if o.EmbedScale != 8 || o.Spec.SlidingWindow != 7 || o.RouteScale != 2.826 || o.Shared != 32 ||
		o.Spec.LayerKinds[0] != lm.KindSliding || o.Spec.LayerKinds[1] != lm.KindFull || o.Spec.LayerKinds[2] != lm.KindSliding {
		t.Errorf("options %+v", o)
	}
	m, err = newModel(t, `{`+base+`, "layer_types": [], "sliding_window": 5}`) // empty: AfmoeConfig's pattern
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Options(); o.Spec.LayerKinds[0] != lm.KindSliding || o.Spec.LayerKinds[2] != lm.KindSliding || o.Spec.SlidingWindow != 5 || o.NoRope[0] {
		t.Errorf("empty layer_types: %+v", o)
	}
	m, err = newModel(t, `{`+base+`, "layer_types": ["full_attention", "full_attention", "full_attention"], "sliding_window": null, "num_dense_layers": 3}`)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Options(); o.Spec.SlidingWindow != 0 || !o.NoRope[2] || o.Sparse[2] {
		t.Errorf("all full, all dense: %+v", o)
	}
	for _, c := range []struct {
		name, extra, want string
		unsupported       bool
	}{
		{"top k past the experts", `, "num_experts_per_tok": 9`, "num_experts_per_tok", false},
		{"no window for sliding layers", `, "sliding_window": null`, "sliding_window", false},
		{"a zero window", `, "sliding_window": 0`, "sliding_window", false},
		{"global every 0", `, "global_attn_every_n_layers": 0`, "global_attn_every_n_layers", false},
		{"negative dense layers", `, "num_dense_layers": -1`, "num_dense_layers", false},
		{"negative shared experts", `, "num_shared_experts": -2`, "num_shared_experts", false},
		{"an unknown layer type", `, "layer_types": ["sliding_attention", "chunked_attention", "full_attention"]`, "chunked_attention", true},
		{"layer types of the wrong count", `, "layer_types": ["full_attention"]`, "layer_types", false},
		{"a rope type", `, "rope_scaling": {"rope_type": "longrope", "short_factor": [1], "long_factor": [1]}`, "longrope", true},
	} {
		_, err := newModel(t, `{`+base+c.extra+`}`)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, errs.ErrUnsupported) != c.unsupported {
			t.Errorf("%s: %v; want an error naming %s (unsupported: %v)", c.name, err, c.want, c.unsupported)
		}
	}
}
