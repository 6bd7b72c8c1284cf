package gemma3

import (
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func load(t *testing.T, cfg *config.File) *Model {
	t.Helper()
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*Model)
}

func TestGemma3_1BConfig(t *testing.T) {
	cfg, err := config.ReadModel("testdata/gemma-3-1b-it.config.json")
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, cfg)
	s := m.Spec()
	if s.Hidden != 1152 || s.Heads != 4 || s.KVHeads != 1 || s.HeadDim != 256 || s.Layers != 26 || s.VocabSize != 262144 ||
		!s.TieEmbeddings || s.SlidingWindow != 512 || !slices.Equal(s.EOS, []int{1, 106}) || s.BOS != 2 {
		t.Fatalf("spec %+v", s)
	}
	var global []int
	for i, k := range s.LayerKinds {
		if k == lm.KindFull {
			global = append(global, i)
		}
	}
	if !slices.Equal(global, []int{5, 11, 17, 23}) {
		t.Errorf("global layers %v", global)
	}
	if m.scale != 1.0/16 || m.attnSoftcap != 0 || m.finalSoftcap != 0 || m.eps != 1e-6 {
		t.Errorf("scale %v softcaps %v %v eps %v", m.scale, m.attnSoftcap, m.finalSoftcap, m.eps)
	}
	if g, l := m.global.InvFreq[1], m.local.InvFreq[1]; math.Abs(g-math.Pow(1e6, -2.0/256)) > 1e-15 || math.Abs(l-math.Pow(1e4, -2.0/256)) > 1e-15 {
		t.Errorf("rope bases: global %g local %g", g, l)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = true
	}
	for _, n := range []string{"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight"} {
		if !names["model.layers.0."+n] {
			t.Errorf("missing %s", n)
		}
	}
}

func TestGemma3RopeScalingOnGlobalOnly(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"num_hidden_layers":6,
		"rope_scaling":{"rope_type":"linear","factor":8.0},"rope_theta":1000000,"rope_local_base_freq":10000}`))
	m := load(t, cfg)
	if want := math.Pow(1e6, -2.0/256) / 8; math.Abs(m.global.InvFreq[1]-want) > 1e-18 {
		t.Errorf("global inv_freq %g, want %g", m.global.InvFreq[1], want)
	}
	if m.local.Type != "default" {
		t.Errorf("local rope %s", m.local.Type)
	}
	// transformers v5 spelling: per-layer-type rope_parameters.
	cfg, _ = config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"num_hidden_layers":6,
		"layer_types":["sliding_attention","sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention"],
		"rope_parameters":{"full_attention":{"rope_type":"linear","factor":8.0,"rope_theta":1000000.0},
		"sliding_attention":{"rope_type":"default","rope_theta":10000.0}}}`))
	m = load(t, cfg)
	if want := math.Pow(1e6, -2.0/256) / 8; math.Abs(m.global.InvFreq[1]-want) > 1e-18 || m.local.InvFreq[1] != math.Pow(1e4, -2.0/256) {
		t.Errorf("rope_parameters: global %g local %g", m.global.InvFreq[1], m.local.InvFreq[1])
	}
	if m.Spec().LayerKinds[5] != lm.KindFull || m.Spec().LayerKinds[0] != lm.KindSliding {
		t.Errorf("kinds %v", m.Spec().LayerKinds)
	}
}

func TestGemma3Unsupported(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"use_bidirectional_attention":true}`))
	if _, err := lm.New(cfg); err == nil {
		t.Error("bidirectional attention accepted")
	}
}
