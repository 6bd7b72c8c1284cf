package olmo2_test

import (
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/olmo2"
)

// TestOLMo2 builds OLMo-2-1124-7B's shape (hidden 4096, 32 layers of 32
// heads, the MLP 11008, vocab 100352, untied): 7,298,617,344 parameters
// (per layer the attention's 4·4096² and the MLP's 3·4096·11008, the q/k
// norms and the two post norms; the embedding and the head; the final
// norm), the 7.3B the model card gives; no input_layernorm is read.
func TestOLMo2(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352,
		"max_position_embeddings": 4096, "rope_theta": 500000}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*llama.Model).Options()
	if o.Norms != llama.PostNorms || !o.QKNorm || !o.QKNormAcross || !o.NormF32 || o.Spec.KVHeads != 32 || o.Spec.TieEmbeddings {
		t.Errorf("options %+v", o)
	}
	var n int64
	for _, w := range lm.Weights(m) {
		if w.Name == "model.layers.0.input_layernorm.weight" {
			t.Errorf("%s is read", w.Name)
		}
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		n += k
	}
	if n != 7_298_617_344 {
		t.Errorf("%d parameters, want 7,298,617,344", n)
	}
}
