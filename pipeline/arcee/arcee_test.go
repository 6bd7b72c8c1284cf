package arcee_test

import (
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"

	_ "github.com/tputool/tputool/pipeline/arcee"
)

// TestDefaults: ArceeConfig's defaults (AFM-4.5B-Base's style: 32 layers,
// hidden 2560, MLP 18432 without a gate, relu2, bos 128000, eos 128001):
// no gate_proj among the weights, and a config's own activation and ids
// are taken.
func TestDefaults(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["ArceeForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	if !o.UngatedMLP || o.Spec.Hidden != 2560 || o.Spec.Intermediate != 18432 || o.Spec.KVHeads != 32 || o.Spec.BOS != 128000 || !slices.Equal(o.Spec.EOS, []int{128001}) {
		t.Errorf("options %+v", o.Spec)
	}
	var names []string
	for _, w := range lm.Weights(m) {
		names = append(names, w.Name)
	}
	if slices.Contains(names, "model.layers.0.mlp.gate_proj.weight") || !slices.Contains(names, "model.layers.0.mlp.up_proj.weight") {
		t.Errorf("layer 0's MLP weights: %v", names[:12])
	}
	cfg, _ = config.ParseModel([]byte(`{"architectures": ["ArceeForCausalLM"], "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": [2, 3]}`))
	m, err = lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.BOS != 1 || !slices.Equal(s.EOS, []int{2, 3}) {
		t.Errorf("explicit ids: bos %d, eos %v", s.BOS, s.EOS)
	}
}
