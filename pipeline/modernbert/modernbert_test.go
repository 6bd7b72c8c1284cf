package modernbert

import (
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

func build(t *testing.T, js string) (*Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return m.(*Model), nil
}

// TestConfigDefaults: ModernBERT-base's shape from ModernBertConfig's
// defaults, which layers are global, and the rotary bases from either
// config style (rope_parameters over the 4.48 keys; a null
// local_rope_theta is the global base, an absent one 10000).
func TestConfigDefaults(t *testing.T) {
	m, err := build(t, `{"architectures":["ModernBertModel"],"model_type":"modernbert"}`)
	if err != nil {
		t.Fatal(err)
	}
	s, o := m.Spec(), m.Options()
	if !s.Encoder || s.Hidden != 768 || s.Layers != 22 || s.Heads != 12 || s.HeadDim != 64 || s.Intermediate != 1152 ||
		s.VocabSize != 50368 || s.MaxPositions != 8192 || s.TokenTypes != 0 || o.Window != 64 || o.Eps != 1e-5 ||
		o.NormBias || o.AttentionBias || o.MLPBias || o.Scorer {
		t.Errorf("defaults: %+v %+v", s, o)
	}
	for i, g := range o.Global {
		if g != (i%3 == 0) {
			t.Errorf("layer %d global %v, want every third from 0", i, g)
		}
	}
	theta := func(js string) (global, local float64) {
		t.Helper()
		m, err := build(t, js)
		if err != nil {
			t.Fatal(err)
		}
		o := m.Options()
		// InvFreq[1] = theta^(-2/d) with d = 64: theta = InvFreq[1]^(-32).
		pow := func(f float64) float64 {
			r := 1.0
			for range 32 {
				r /= f
			}
			return r
		}
		return pow(o.GlobalRope.InvFreq[1]), pow(o.LocalRope.InvFreq[1])
	}
	near := func(a, b float64) bool { return a/b > 1-1e-9 && a/b < 1+1e-9 }
	for _, c := range []struct {
		js            string
		global, local float64
	}{
		{`{"architectures":["ModernBertModel"]}`, 160000, 10000},
		{`{"architectures":["ModernBertModel"],"global_rope_theta":50000,"local_rope_theta":2000}`, 50000, 2000},
		{`{"architectures":["ModernBertModel"],"global_rope_theta":50000,"local_rope_theta":null}`, 50000, 50000},
		{`{"architectures":["ModernBertModel"],"global_rope_theta":50000,"rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":70000},"sliding_attention":{"rope_type":"default","rope_theta":3000}}}`, 70000, 3000},
		{`{"architectures":["ModernBertModel"],"rope_parameters":{"full_attention":{"rope_theta":70000}}}`, 70000, 10000},
	} {
		g, l := theta(c.js)
		if !near(g, c.global) || !near(l, c.local) {
			t.Errorf("%s: bases %v and %v, want %v and %v", c.js, g, l, c.global, c.local)
		}
	}
	// layer_types wins over global_attn_every_n_layers.
	m, err = build(t, `{"architectures":["ModernBertModel"],"num_hidden_layers":3,"global_attn_every_n_layers":3,"layer_types":["sliding_attention","full_attention","sliding_attention"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if g := m.Options().Global; g[0] || !g[1] || g[2] {
		t.Errorf("layer_types: global %v, want [false true false]", g)
	}
	if k := m.Spec().LayerKinds; k[0] != KindFirstLocal || k[1] != KindGlobal || k[2] != KindLocal {
		t.Errorf("layer kinds %v", k)
	}
	m, err = build(t, `{"architectures":["ModernBertForSequenceClassification"],"classifier_pooling":"mean","num_labels":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Options(); !o.Scorer || o.Labels != 1 || m.ScorePool() != "mean" {
		t.Errorf("classifier: %+v", o)
	}
}

// TestConfigRefusals: what tputool does not run is refused with the key
// named (unsupported: exit 3), and inconsistent configs are errors.
func TestConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		js, want    string
		unsupported bool
	}{
		{`{"architectures":["ModernBertModel"],"rope_scaling":{"rope_type":"linear","factor":2}}`, "rope_scaling", true},
		{`{"architectures":["ModernBertModel"],"partial_rotary_factor":0.5}`, "partial_rotary_factor", true},
		{`{"architectures":["ModernBertModel"],"num_hidden_layers":2,"layer_types":["full_attention"]}`, "layer_types lists 1 layers", false},
		{`{"architectures":["ModernBertModel"],"num_hidden_layers":1,"layer_types":["chunked_attention"]}`, "layer_types[0]", true},
		{`{"architectures":["ModernBertModel"],"local_attention":1}`, "local_attention 1", false},
		{`{"architectures":["ModernBertModel"],"global_attn_every_n_layers":0}`, "global_attn_every_n_layers", false},
		{`{"architectures":["ModernBertModel"],"rope_parameters":{"sliding_attention":{"rope_type":"yarn","rope_theta":10000}}}`, "rope_type \"yarn\"", true},
		{`{"architectures":["ModernBertForSequenceClassification"],"classifier_pooling":"max"}`, "classifier_pooling \"max\"", true},
		{`{"architectures":["ModernBertForSequenceClassification"],"num_labels":0}`, "0 labels", false},
		{`{"architectures":["ModernBertModel"],"hidden_activation":"swoosh"}`, "hidden_activation", true},
		{`{"architectures":["ModernBertModel"],"hidden_size":100,"num_attention_heads":12}`, "not a multiple", false},
	} {
		_, err := build(t, c.js)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.js, err, c.want)
			continue
		}
		if got := errors.Is(err, errs.ErrUnsupported); got != c.unsupported {
			t.Errorf("%s: unsupported %v, want %v (%v)", c.js, got, c.unsupported, err)
		}
	}
}
