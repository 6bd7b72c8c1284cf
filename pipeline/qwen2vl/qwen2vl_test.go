package qwen2vl_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen2vl"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"

	_ "github.com/tputool/tputool/pipeline/qwen2"
)

func model(t *testing.T, js string) (lm.Model, error) {
	t.Helper()
	cfg, err := config.ParseModel([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return lm.New(cfg)
}

// TestQwen25VL7B: Qwen2.5-VL-7B-Instruct's config as released (the text
// fields on the wrapper, rope_scaling of type mrope) gives its text
// model: 28 layers, hidden 3584, 28 heads over 4, MLP 18944, untied,
// q/k/v biases, the plain rotary of rope_theta 1e6: 7,615,616,512
// parameters (the 8.29B of the release less its 0.67B vision tower).
// text_config, where there is one, is read before the wrapper; fields
// neither gives take Qwen2_5_VLTextConfig's defaults.
func TestQwen25VL7B(t *testing.T) {
	m, err := model(t, `{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "attention_dropout": 0.0,
		"bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
		"max_position_embeddings": 128000, "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
		"num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false,
		"use_sliding_window": false, "vocab_size": 152064, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
		"vision_config": {"depth": 32, "hidden_size": 1280}}`)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen2vl.Model).Options()
	if s := m.Spec(); s.Architecture != qwen2vl.Qwen25VL || s.SlidingWindow != 0 || s.TieEmbeddings || !o.QKVBias || o.Rope.Type != "default" || math.Abs(o.Rope.InvFreq[1]-math.Pow(1e6, -2.0/128)) > 1e-15 {
		t.Errorf("spec %+v, rope %s %v", s, o.Rope.Type, o.Rope.InvFreq[:2])
	}
	if n := lmckpt.Params(m); n != 7_615_616_512 {
		t.Errorf("%d parameters, want 7,615,616,512", n)
	}
	m, err = model(t, `{"architectures": ["Qwen2VLForConditionalGeneration"], "tie_word_embeddings": true, "hidden_size": 999,
		"text_config": {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 50, "num_key_value_heads": null}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.Hidden != 64 || s.KVHeads != 4 || !s.TieEmbeddings || s.MaxPositions != 32768 || m.(*qwen2vl.Model).Options().Eps != 1e-5 {
		t.Errorf("text_config: hidden %d, %d KV heads, tied %v, max positions %d", s.Hidden, s.KVHeads, s.TieEmbeddings, s.MaxPositions)
	}
	// An explicit null sliding_window is no window, use_sliding_window or
	// not; bos and eos come from the wrapper when text_config has none.
	m, err = model(t, `{"architectures": ["Qwen2VLForConditionalGeneration"], "bos_token_id": 7, "eos_token_id": [8, 9],
		"text_config": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 96,
		"vocab_size": 50, "use_sliding_window": true, "sliding_window": null, "max_window_layers": 2}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.SlidingWindow != 0 || s.LayerKinds[3] != lm.KindFull || s.BOS != 7 || len(s.EOS) != 2 || s.EOS[1] != 9 {
		t.Errorf("null window, wrapper ids: window %d, kinds %v, bos %d, eos %v", s.SlidingWindow, s.LayerKinds, s.BOS, s.EOS)
	}
	if _, err := model(t, `{"architectures": ["Qwen2VLForConditionalGeneration"], "rope_scaling": {"type": "yarn", "factor": 4}}`); err == nil || !strings.Contains(err.Error(), "mrope") {
		t.Errorf("a yarn rope_scaling: %v, want an error naming mrope", err)
	}
}

// wrap writes the tiny Qwen2 checkpoint in src as a
// Qwen2_5_VLForConditionalGeneration's to dst, in the releases' layout
// (the text fields on the wrapper, model.*, visual.*) or transformers
// v5's (text_config, model.language_model.*, model.visual.*), with a
// vision tensor the text model skips.
func wrap(t *testing.T, src, dst string, v5 bool) {
	t.Helper()
	text, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	delete(text, "architectures")
	text["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{2, 1, 1}}
	cfg := map[string]any{}
	if v5 {
		cfg["text_config"] = text
	} else {
		for k, v := range text {
			cfg[k] = v
		}
	}
	cfg["architectures"], cfg["model_type"] = []string{qwen2vl.Qwen25VL}, "qwen2_5_vl"
	cfg["vision_config"] = map[string]any{"depth": 1}
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []safetensors.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		raw, err := ck.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		if rest, ok := strings.CutPrefix(name, "model."); ok && v5 {
			name = "model.language_model." + rest
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	vision := "visual.patch_embed.proj.weight"
	if v5 {
		vision = "model." + vision
	}
	st, err := safetensors.Float32Tensor(vision, safetensors.F32, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if err := lmckpt.WriteCheckpoint(dst, cfg, append(ts, st)); err != nil {
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

// TestLayouts: a tiny Qwen2 (q/k/v biases, GQA) written standalone and as
// a Qwen2.5-VL in the releases' layout and transformers v5's, each with a
// vision tensor beside the text model and the multimodal rotary in its
// config, gives exactly the standalone model's logits.
func TestLayouts(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	tiny := lmckpt.LlamaShape(32, 2, 4, 48, 64)
	tiny.Arch, tiny.Seed = "Qwen2ForCausalLM", 5
	tiny.Config.QKVBias, tiny.Config.KVHeads, tiny.Config.RopeTheta = true, 2, []float64{1e6, 1e6}
	src := t.TempDir()
	if err := tiny.Write(src); err != nil {
		t.Fatal(err)
	}
	want := logits(t, src, prompts)
	for _, v5 := range []bool{false, true} {
		dst := t.TempDir()
		wrap(t, src, dst, v5)
		got := logits(t, dst, prompts)
		for b := range want {
			for i := range want[b] {
				if got[b][i] != want[b][i] {
					t.Fatalf("v5 %v row %d logit %d: %v wrapped, %v standalone", v5, b, i, got[b][i], want[b][i])
				}
			}
		}
	}
}
