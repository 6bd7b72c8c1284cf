package qwen3

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func TestQwen3Config(t *testing.T) {
	cfg, err := config.ReadModel("testdata/Qwen3-0.6B.config.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Spec()
	// head_dim 128 although hidden/heads = 64.
	if s.Hidden != 1024 || s.Heads != 16 || s.KVHeads != 8 || s.HeadDim != 128 || s.Layers != 28 || !s.TieEmbeddings ||
		!slices.Equal(s.EOS, []int{151645}) || s.MaxPositions != 40960 {
		t.Fatalf("spec %+v", s)
	}
	var names []string
	shapes := map[string][]int{}
	for _, w := range m.LayerWeights(7) {
		names = append(names, w.Name)
		shapes[w.Name] = w.Shape
	}
	for _, n := range []string{"model.layers.7.self_attn.q_norm.weight", "model.layers.7.self_attn.k_norm.weight"} {
		if !slices.Equal(shapes[n], []int{128}) {
			t.Errorf("%s: shape %v (names %v)", n, shapes[n], names)
		}
	}
	if !slices.Equal(shapes["model.layers.7.self_attn.q_proj.weight"], []int{2048, 1024}) ||
		!slices.Equal(shapes["model.layers.7.self_attn.o_proj.weight"], []int{1024, 2048}) {
		t.Errorf("projection shapes %v", shapes)
	}
	if _, ok := shapes["model.layers.7.self_attn.q_proj.bias"]; ok {
		t.Error("attention_bias false but q_proj.bias listed")
	}
}
