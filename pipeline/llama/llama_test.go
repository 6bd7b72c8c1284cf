package llama

import (
	"math"
	"slices"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func load(t *testing.T, path string) *Model {
	t.Helper()
	cfg, err := config.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*Model)
}

func TestLlama32Config(t *testing.T) {
	m := load(t, "testdata/Llama-3.2-1B.config.json")
	s := m.Spec()
	if s.Hidden != 2048 || s.Layers != 16 || s.Heads != 32 || s.KVHeads != 8 || s.HeadDim != 64 ||
		s.Intermediate != 8192 || s.VocabSize != 128256 || s.MaxPositions != 131072 || !s.TieEmbeddings {
		t.Fatalf("spec %+v", s)
	}
	if !slices.Equal(s.EOS, []int{128001}) || s.BOS != 128000 {
		t.Errorf("eos %v bos %d", s.EOS, s.BOS)
	}
	for i, k := range s.LayerKinds {
		if k != lm.KindFull {
			t.Errorf("layer %d kind %q", i, k)
		}
	}
	if m.o.Eps != 1e-5 || m.o.QKVBias || m.o.QKNorm {
		t.Errorf("options %+v", m.o)
	}
	// llama3 RoPE: wavelengths below 8192/4 keep their frequency, those
	// above 8192/1 are divided by 32, the band between is blended.
	r := m.o.Rope
	if r.Type != "llama3" || r.RotaryDim != 64 || len(r.InvFreq) != 32 {
		t.Fatalf("rope %+v", r)
	}
	for i, f := range r.InvFreq {
		base := 1 / math.Pow(500000, float64(2*i)/64)
		wavelen := 2 * math.Pi / base
		switch {
		case wavelen < 2048:
			if f != base {
				t.Errorf("dim %d: high frequency changed: %g vs %g", i, f, base)
			}
		case wavelen > 8192:
			if math.Abs(f-base/32) > 1e-18 {
				t.Errorf("dim %d: low frequency %g, want %g", i, f, base/32)
			}
		default:
			if !(f < base && f > base/32) {
				t.Errorf("dim %d: medium frequency %g not between %g and %g", i, f, base/32, base)
			}
		}
	}
	// Weights: tied head, no biases.
	head := m.HeadWeights()
	if head[1].Name != "model.embed_tokens.weight" || !head[1].Matmul {
		t.Errorf("head weights %+v", head)
	}
	lw := m.LayerWeights(3)
	if len(lw) != 9 || lw[1].Name != "model.layers.3.self_attn.q_proj.weight" || !slices.Equal(lw[1].Shape, []int{2048, 2048}) ||
		!slices.Equal(lw[2].Shape, []int{512, 2048}) {
		t.Errorf("layer weights %+v", lw)
	}
	if n := len(lm.Weights(m)); n != 16*9+2 {
		t.Errorf("%d weights, want %d", n, 16*9+2)
	}
	st := m.LayerState(0, 2, 128)
	if !slices.Equal(st[0].Shape, []int{2, 8, 128, 64}) || !slices.Equal(st[1].Shape, []int{2, 8, 64, 128}) {
		t.Errorf("state %+v", st)
	}
}

func TestStoriesConfig(t *testing.T) {
	m := load(t, "../../testdata/stories260K-hf/config.json")
	s := m.Spec()
	if s.Hidden != 64 || s.Layers != 5 || s.Heads != 8 || s.KVHeads != 4 || s.HeadDim != 8 || !s.TieEmbeddings || m.o.Rope.Type != "default" {
		t.Fatalf("spec %+v rope %+v", s, m.o.Rope)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, json string }{
		{"heads not dividing hidden", `{"architectures":["LlamaForCausalLM"],"hidden_size":100,"num_attention_heads":3}`},
		{"kv heads not dividing heads", `{"architectures":["LlamaForCausalLM"],"num_attention_heads":32,"num_key_value_heads":5}`},
		{"unknown activation", `{"architectures":["LlamaForCausalLM"],"hidden_act":"relu6"}`},
		{"unknown rope type", `{"architectures":["LlamaForCausalLM"],"rope_scaling":{"rope_type":"longrope","factor":2}}`},
		{"llama3 without fields", `{"architectures":["LlamaForCausalLM"],"rope_scaling":{"rope_type":"llama3","factor":8}}`},
		{"negative layers", `{"architectures":["LlamaForCausalLM"],"num_hidden_layers":-1}`},
	} {
		cfg, err := config.ParseModel([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lm.New(cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
