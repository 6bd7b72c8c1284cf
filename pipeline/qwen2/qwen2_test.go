package qwen2

import (
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func TestQwen25Config(t *testing.T) {
	cfg, err := config.ReadModel("testdata/Qwen2.5-0.5B.config.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Spec()
	if s.Hidden != 896 || s.Heads != 14 || s.KVHeads != 2 || s.HeadDim != 64 || s.Layers != 24 || !s.TieEmbeddings || s.SlidingWindow != 0 {
		t.Fatalf("spec %+v", s)
	}
	for i, k := range s.LayerKinds {
		if k != lm.KindFull {
			t.Errorf("layer %d is %s although use_sliding_window is false", i, k)
		}
	}
	var biases []string
	for _, w := range m.LayerWeights(0) {
		if strings.HasSuffix(w.Name, ".bias") {
			biases = append(biases, w.Name)
		}
	}
	want := []string{"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.bias"}
	if !slices.Equal(biases, want) {
		t.Errorf("biases %v, want %v", biases, want)
	}
}

func TestQwen2SlidingLayers(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Qwen2ForCausalLM"],"num_hidden_layers":4,"hidden_size":64,"num_attention_heads":4,
		"use_sliding_window":true,"sliding_window":16,"max_window_layers":2}`))
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if k := m.Spec().LayerKinds; !slices.Equal(k, []string{lm.KindFull, lm.KindFull, lm.KindSliding, lm.KindSliding}) || m.Spec().SlidingWindow != 16 {
		t.Errorf("kinds %v window %d", k, m.Spec().SlidingWindow)
	}
}
