package internvl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/internvl"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11}}

// toInternVL writes the causal LM in src as an InternVL release holds it
// into dst: its tensors renamed by rename, a vision tower and a projector
// beside them, its config as text_config of modelType.
func toInternVL(t *testing.T, src, dst, modelType string, rename func(string) string) {
	t.Helper()
	ts, text, err := lmckpt.Rewrap(src, rename, "model.vision_tower.embeddings.patch_embeddings.projection.weight", "model.multi_modal_projector.linear_1.weight")
	if err != nil {
		t.Fatal(err)
	}
	tie := text["tie_word_embeddings"]
	delete(text, "tie_word_embeddings") // on the wrapper, as some conversions write it
	text["model_type"] = modelType
	cfg := map[string]any{"architectures": []string{internvl.Architecture}, "model_type": "internvl", "text_config": text,
		"vision_config": map[string]any{"model_type": "internvl_vision", "hidden_size": 2}, "image_token_id": 90, "downsample_ratio": 0.5,
		"tie_word_embeddings": tie}
	if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
		t.Fatal(err)
	}
}

// same checks that two loaded models give the same logits, exactly.
func same(t *testing.T, want, got *lm.Loaded) {
	t.Helper()
	for _, p := range prompts {
		w, g := moecheck.Prefill(t, want, p), moecheck.Prefill(t, got, p)
		for i := range w[0] {
			if w[0][i] != g[0][i] {
				t.Fatalf("prompt %v: logit %d is %g as InternVL's text model, %g standalone", p, i, g[0][i], w[0][i])
			}
		}
	}
}

// TestTextModels: InternVL releases whose text model is a Qwen3-MoE (in
// transformers v5's names, model.language_model.*) or a Qwen3 with a tied
// head (in the older language_model.model.* and language_model.lm_head),
// the tie on the wrapper, load as that model, the vision tower and the
// projector skipped, and give exactly the standalone model's logits.
func TestTextModels(t *testing.T) {
	moe := qwenref.TinyQwen3MoE()
	dense := lmckpt.Tiny{Arch: "Qwen3ForCausalLM", Seed: 9, Config: lmckpt.Config{Vocab: 96, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4,
		KVHeads: 2, HeadDim: 16, Eps: 1e-6, QKNorm: true, Tied: true, RopeTheta: []float64{1e6, 1e6, 1e6}, Window: []int{0, 0, 0}}}
	for _, c := range []struct {
		name, modelType string
		write           func(string) error
		rename          func(string) string
	}{
		{"qwen3_moe", "qwen3_moe", moe.Write, func(n string) string { return strings.Replace(n, "model.", "model.language_model.", 1) }},
		{"qwen3", "qwen3", dense.Write, func(n string) string { return "language_model." + n }},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			if err := c.write(src); err != nil {
				t.Fatal(err)
			}
			toInternVL(t, src, dst, c.modelType, c.rename)
			plain, err := lmckpt.Load(src)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			vl, err := lmckpt.Load(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer vl.Close()
			if a := vl.Model.Spec().Architecture; a != internvl.Architecture {
				t.Errorf("architecture %q", a)
			}
			if _, routed := vl.Model.(lm.Routed); routed != (c.name == "qwen3_moe") {
				t.Errorf("routed %v", routed)
			}
			if vl.Model.Spec().TieEmbeddings != plain.Model.Spec().TieEmbeddings {
				t.Errorf("tied %v, the standalone model %v", vl.Model.Spec().TieEmbeddings, plain.Model.Spec().TieEmbeddings)
			}
			same(t, plain, vl)
		})
	}
}

// TestRefuses: a text model tputool does not wrap, and no text_config,
// are refused naming what is wrong.
func TestRefuses(t *testing.T) {
	for _, c := range []struct{ js, want string }{
		{`{"architectures": ["InternVLForConditionalGeneration"], "text_config": {"model_type": "gemma3_text", "hidden_size": 8}}`, `model_type "gemma3_text"`},
		{`{"architectures": ["InternVLForConditionalGeneration"]}`, "needs a text_config"},
	} {
		cfg, err := config.ParseModel([]byte(c.js))
		if err != nil {
			t.Fatal(err)
		}
		_, err = lm.New(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.js, err, c.want)
		}
		if c.want != "needs a text_config" && !errors.Is(err, errs.ErrUnsupported) {
			t.Errorf("%s: %v is not ErrUnsupported", c.js, err)
		}
	}
}
