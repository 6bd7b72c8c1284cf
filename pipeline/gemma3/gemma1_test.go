package gemma3_test

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

func gemma1(t *testing.T, js string) llama.Options {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*llama.Model).Options()
}

// TestGemma1: GemmaConfig's defaults are gemma-7b's shape (28 layers,
// hidden 3072, 16 heads of 256, MLP 24576, tied): 8,537,680,896
// parameters; gemma-2b's config (18 layers, hidden 2048, 8 heads over 1
// KV head of 256, MLP 16384) 2,506,172,416, the cards' 8.54B and 2.51B.
// The activation is hidden_activation, else the tanh GELU whatever
// hidden_act says; bos 2 and eos 1 by default.
func TestGemma1(t *testing.T) {
	o := gemma1(t, `{"architectures": ["GemmaForCausalLM"]}`)
	if !o.NormPlusOne || !o.EmbedSqrtHidden || o.Spec.HeadDim != 256 || o.Spec.KVHeads != 16 || !o.Spec.TieEmbeddings || o.Spec.BOS != 2 || !slices.Equal(o.Spec.EOS, []int{1}) {
		t.Errorf("defaults: %+v", o)
	}
	if n := lmckpt.Params(llama.NewModel(o)); n != 8_537_680_896 {
		t.Errorf("gemma-7b: %d parameters, want 8,537,680,896", n)
	}
	// num_key_value_heads defaults to 16 whatever the heads; an explicit
	// null is the heads.
	if o := gemma1(t, `{"architectures": ["GemmaForCausalLM"], "num_attention_heads": 32}`); o.Spec.KVHeads != 16 {
		t.Errorf("32 heads, no num_key_value_heads: %d KV heads, want GemmaConfig's 16", o.Spec.KVHeads)
	}
	if o := gemma1(t, `{"architectures": ["GemmaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": null}`); o.Spec.KVHeads != 32 {
		t.Errorf("a null num_key_value_heads: %d KV heads, want the 32 heads", o.Spec.KVHeads)
	}
	o = gemma1(t, `{"architectures": ["GemmaForCausalLM"], "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
		"hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2048, "intermediate_size": 16384, "max_position_embeddings": 8192,
		"model_type": "gemma", "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
		"rope_theta": 10000.0, "vocab_size": 256000}`)
	if n := lmckpt.Params(llama.NewModel(o)); n != 2_506_172_416 {
		t.Errorf("gemma-2b: %d parameters, want 2,506,172,416", n)
	}
	// 1.5: tanh GELU 0.5·1.5·(1 + tanh(√(2/π)(1.5 + 0.044715·1.5³))) =
	// 1.3995716, exact GELU 0.5·1.5·(1 + erf(1.5/√2)) = 1.3997892; relu 1.5.
	for _, c := range []struct {
		extra string
		want  float64
	}{
		{`"hidden_act": "gelu"`, 1.3995716},
		{`"hidden_act": "gelu", "hidden_activation": "gelu"`, 1.3997892},
		{`"hidden_activation": "relu"`, 1.5},
	} {
		o := gemma1(t, `{"architectures": ["GemmaForCausalLM"], `+c.extra+`}`)
		if got := evalAct(t, o.Act, 1.5); got < c.want-1e-5 || got > c.want+1e-5 {
			t.Errorf("%s: act(1.5) = %.7f, want %.7f", c.extra, got, c.want)
		}
	}
}

// evalAct is act at x, run on the go backend in float32.
func evalAct(t *testing.T, act func(*graph.Node) *graph.Node, x float32) float64 {
	t.Helper()
	e, err := graph.NewExec(refcheck.GoBackend(t), func(in *graph.Node) *graph.Node { return act(in) })
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Exec(tensors.FromFlatDataAndDimensions([]float32{x}, 1))
	if err != nil {
		t.Fatal(err)
	}
	return float64(tensors.MustCopyFlatData[float32](out[0])[0])
}
