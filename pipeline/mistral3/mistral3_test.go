package mistral3_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral3"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"

	_ "github.com/tputool/tputool/pipeline/mistral"
)

func model(t *testing.T, js string) (*mistral3.Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		return nil, err
	}
	return m.(*mistral3.Model), nil
}

// TestDefaults: Ministral3Config's defaults are Ministral 3 8B's shape
// (34 layers, hidden 4096, 32 heads of 128 over 8 KV heads, MLP 14336,
// vocabulary 131072, head untied): 8,489,553,920 parameters (per layer
// the attention's 41,943,040, the MLP's 176,160,768 and two norms; the
// embedding and the head, 536,870,912 each; the final norm), the card's
// 8.4B language model. The rotary is YaRN (factor 16 over 16384 original
// positions), and every layer scales its queries by β 0.1 over 16384
// positions.
func TestDefaults(t *testing.T) {
	m, err := model(t, `{"architectures": ["Ministral3ForCausalLM"]}`)
	if err != nil {
		t.Fatal(err)
	}
	o, s := m.Options(), m.Spec()
	if s.KVHeads != 8 || s.HeadDim != 128 || s.TieEmbeddings || s.SlidingWindow != 0 || s.MaxPositions != 262144 || o.Eps != 1e-5 {
		t.Errorf("spec %+v, eps %g", s, o.Eps)
	}
	if o.Rope.Type != "yarn" || o.Rope.AttentionFactor != 1 || !o.TempEvery || o.TempFloor != 16384 || o.TempScale != 0.1 {
		t.Errorf("rope %s (attention factor %g), temperature every layer %v over %g by %g", o.Rope.Type, o.Rope.AttentionFactor, o.TempEvery, o.TempFloor, o.TempScale)
	}
	// YaRN keeps the fastest frequency and divides the slowest by 16.
	if d := len(o.Rope.InvFreq); o.Rope.InvFreq[0] != 1 || math.Abs(o.Rope.InvFreq[d-1]*16/math.Pow(1e6, -float64(2*(d-1))/128)-1) > 1e-12 {
		t.Errorf("inverse frequencies %g … %g", o.Rope.InvFreq[0], o.Rope.InvFreq[d-1])
	}
	if n := lmckpt.Params(m); n != 8_489_553_920 {
		t.Errorf("%d parameters, want 8,489,553,920", n)
	}
}

// TestMinistral3B: Ministral 3 3B's config as the Hub has it, a
// Mistral3ForConditionalGeneration whose text_config (ministral3, 26
// layers, hidden 3072, MLP 9216, tied) its text model reads:
// 3,429,006,336 parameters, the card's 3.4B language model.
func TestMinistral3B(t *testing.T) {
	m, err := model(t, `{"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "image_token_index": 10,
		"quantization_config": {"activation_scheme": "static", "modules_to_not_convert": ["model.vision_tower", "model.multi_modal_projector", "lm_head"], "quant_method": "fp8", "weight_block_size": null},
		"text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 9216, "max_position_embeddings": 262144,
			"model_type": "ministral3", "num_attention_heads": 32, "num_hidden_layers": 26, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
			"rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0, "llama_4_scaling_beta": 0.1, "mscale": 1.0, "mscale_all_dim": 1.0,
				"original_max_position_embeddings": 16384, "rope_theta": 1000000.0, "rope_type": "yarn", "type": "yarn"},
			"sliding_window": null, "tie_word_embeddings": true, "vocab_size": 131072},
		"vision_config": {"model_type": "pixtral", "hidden_size": 1024}}`)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Spec()
	if s.Architecture != mistral3.Conditional || !s.TieEmbeddings || s.FP8Block != lm.FP8PerTensor || s.Layers != 26 {
		t.Errorf("spec %+v", s)
	}
	if n := lmckpt.Params(m); n != 3_429_006_336 {
		t.Errorf("%d parameters, want 3,429,006,336", n)
	}
}

// TestConfigs: a Mistral 3.1-style wrapper (text_config of model_type
// mistral) is Mistral's decoder, with its rope_theta and no query
// scaling; β 0 turns the scaling off; what is refused names its field.
func TestConfigs(t *testing.T) {
	m, err := model(t, `{"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"model_type": "mistral", "hidden_size": 64,
		"num_attention_heads": 16, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 50, "head_dim": 32, "rope_theta": 1e9, "sliding_window": null}}`)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Options(); o.TempFloor != 0 || o.Rope.Type != "default" || math.Abs(o.Rope.InvFreq[1]-math.Pow(1e9, -2.0/32)) > 1e-15 || o.Spec.KVHeads != 8 || o.Spec.SlidingWindow != 0 {
		t.Errorf("mistral text model: temperature floor %g, rope %s %v, KV heads %d, window %d", o.TempFloor, o.Rope.Type, o.Rope.InvFreq[:2], o.Spec.KVHeads, o.Spec.SlidingWindow)
	}
	base := `"architectures": ["Ministral3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 16, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 50`
	m, err = model(t, `{`+base+`, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4, "original_max_position_embeddings": 64, "llama_4_scaling_beta": 0}, "num_key_value_heads": null, "head_dim": null, "sliding_window": 32}`)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Options(); o.TempFloor != 0 || o.TempEvery || o.Spec.KVHeads != 16 || o.Spec.HeadDim != 4 || o.Spec.SlidingWindow != 32 || o.Spec.LayerKinds[1] != lm.KindSliding {
		t.Errorf("β 0, null heads, a window: temperature %g/%v, %d KV heads of %d, window %d, kinds %v", o.TempFloor, o.TempEvery, o.Spec.KVHeads, o.Spec.HeadDim, o.Spec.SlidingWindow, o.Spec.LayerKinds)
	}
	for _, c := range []struct{ name, js, want string }{
		{"no beta", `{` + base + `, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4, "original_max_position_embeddings": 64}}`, "llama_4_scaling_beta"},
		{"no original positions", `{` + base + `, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "llama_4_scaling_beta": 0.1}}`, "original_max_position_embeddings"},
		{"no text_config", `{"architectures": ["Mistral3ForConditionalGeneration"]}`, "text_config"},
		{"another text model", `{"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"model_type": "llama"}}`, `model_type "llama"`},
	} {
		if _, err := model(t, c.js); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", c.name, err, c.want)
		}
	}
	if _, err := model(t, `{"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"model_type": "llama"}}`); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("another text model: %v, want an unsupported error", err)
	}
	// A text_config without model_type is Mistral's (Mistral3Config's
	// default); bos and eos come from text_config, else the wrapper, else
	// the classes' 1 and 2.
	small := `"hidden_size": 64, "num_attention_heads": 16, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 50, "sliding_window": null`
	m, err = model(t, `{"architectures": ["Mistral3ForConditionalGeneration"], "eos_token_id": 9, "bos_token_id": 4, "text_config": {`+small+`}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); m.RopeParameters() != nil || m.Options().TempEvery || s.BOS != 4 || !slices.Equal(s.EOS, []int{9}) {
		t.Errorf("no model_type: rope parameters %v, bos %d, eos %v; want Mistral's decoder, 4, [9]", m.RopeParameters(), s.BOS, s.EOS)
	}
	m, err = model(t, `{"architectures": ["Mistral3ForConditionalGeneration"], "eos_token_id": 9, "text_config": {"model_type": "ministral3", "eos_token_id": [2, 7], `+small+`}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.BOS != 1 || !slices.Equal(s.EOS, []int{2, 7}) {
		t.Errorf("text_config's ids: bos %d, eos %v; want 1, [2 7]", s.BOS, s.EOS)
	}
}

// wrap writes the standalone checkpoint in src as a
// Mistral3ForConditionalGeneration's to dst: config.json's fields as its
// text_config (the quantization_config at the top, as the Hub's), the
// tensors under layout's names ("v5": model.language_model.*, lm_head.*;
// "v4": language_model.model.*, language_model.lm_head.*), and a vision
// tower and projector tensor the text model skips.
func wrap(t *testing.T, src, dst, textType, layout string) {
	t.Helper()
	text, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	text["model_type"] = textType
	delete(text, "architectures")
	cfg := map[string]any{"architectures": []string{mistral3.Conditional}, "model_type": "mistral3", "text_config": text,
		"vision_config": map[string]any{"model_type": "pixtral"}, "image_token_index": 10}
	if q, ok := text["quantization_config"]; ok {
		cfg["quantization_config"] = q
		delete(text, "quantization_config")
	}
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	model, head, vision := "model.language_model.", "lm_head.", "model."
	if layout == "v4" {
		model, head, vision = "language_model.model.", "language_model.lm_head.", ""
	}
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		raw, err := ck.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		to := name
		if rest, ok := strings.CutPrefix(name, "model."); ok {
			to = model + rest
		} else if rest, ok := strings.CutPrefix(name, "lm_head."); ok {
			to = head + rest
		}
		ts = append(ts, safetensors.Tensor{Name: to, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	for _, n := range []string{vision + "vision_tower.patch_conv.weight", vision + "multi_modal_projector.linear_1.weight"} {
		st, err := safetensors.Float32Tensor(n, safetensors.F32, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, st)
	}
	if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
		t.Fatal(err)
	}
}

func logits(t *testing.T, dir string, prompts [][]int) [][]float32 {
	t.Helper()
	l, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := compile.NewRunner(refcheck.CPUBackend(t), l, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lg, err := r.NewState().Prefill(prompts, 1)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// TestMultimodalLayouts: a tiny Ministral 3 (YaRN, β, tied) and a tiny
// Mistral, each written standalone and as a
// Mistral3ForConditionalGeneration in transformers v5's and the first
// uploads' names, with a vision tower and projector beside the text
// model, give exactly the standalone model's logits; so does Ministral
// 3's per-tensor FP8 copy (the Hub's layout: scales and static activation
// scales under the wrapper's names, the quantization_config at the top).
func TestMultimodalLayouts(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 12, 8, 30, 2, 44, 17, 23}}
	ministral := lmckpt.LlamaShape(32, 2, 4, 48, 64)
	ministral.Arch, ministral.MaxPositions, ministral.Seed = "Ministral3ForCausalLM", 64, 3
	ministral.Config.Tied, ministral.Config.RopeTheta = true, []float64{1e6, 1e6}
	ministral.Config.Yarn, ministral.Config.Llama4Beta = &lmckpt.Yarn{Factor: 8, Orig: 8, BetaFast: 32, BetaSlow: 1}, 0.1
	mistral := lmckpt.LlamaShape(32, 2, 4, 48, 64)
	mistral.Arch, mistral.Seed = "MistralForCausalLM", 4
	fp8 := t.TempDir()
	for _, c := range []struct {
		name, textType string
		write          func(dir string) error
	}{
		{"ministral3", "ministral3", ministral.Write},
		{"mistral", "mistral", mistral.Write},
		{"ministral3-fp8", "ministral3", func(dir string) error {
			if err := ministral.Write(fp8); err != nil {
				return err
			}
			return lmckpt.WriteFP8Copy(fp8, dir, lmckpt.FP8Options{PerTensor: true})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := t.TempDir()
			if err := c.write(src); err != nil {
				t.Fatal(err)
			}
			want := logits(t, src, prompts)
			for _, layout := range []string{"v5", "v4"} {
				dst := t.TempDir()
				wrap(t, src, dst, c.textType, layout)
				got := logits(t, dst, prompts)
				for b := range want {
					for i := range want[b] {
						if got[b][i] != want[b][i] {
							t.Fatalf("%s row %d logit %d: %v wrapped, %v standalone", layout, b, i, got[b][i], want[b][i])
						}
					}
				}
			}
		})
	}
}
