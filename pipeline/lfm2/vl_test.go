package lfm2_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lfm2"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lfm2ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// wrapVL writes src, a standalone LFM2 checkpoint, to dst as an
// Lfm2VlForConditionalGeneration holds it: src's config as text_config
// (model_type lfm2), a SigLIP2 vision_config, the text model's tensors
// under layout's names (v5: model.language_model.*; v4: the first
// uploads' language_model.model.*), and a vision tower and projector
// tensor beside them.
func wrapVL(t *testing.T, src, dst, layout string) {
	t.Helper()
	text, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	delete(text, "architectures")
	if text["model_type"] == nil {
		text["model_type"] = "lfm2"
	}
	cfg := map[string]any{"architectures": []string{lfm2.VL}, "model_type": "lfm2_vl", "text_config": text,
		"vision_config": map[string]any{"model_type": "siglip2_vision_model"}, "image_token_index": 90, "downsample_factor": 2}
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
	for _, n := range []string{vision + "vision_tower.vision_model.embeddings.patch_embedding.weight", vision + "multi_modal_projector.linear_1.weight"} {
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

// vlLogits is the prefill logits of the checkpoint in dir.
func vlLogits(t *testing.T, dir string) [][]float32 {
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

// TestVLLayouts: a tiny LFM2 (tied) and a tiny LFM2-MoE (untied, its
// head renamed too), each written standalone and as an
// Lfm2VlForConditionalGeneration in transformers v5's and the Llava-style
// names, with a vision tower and projector beside the text model, give
// exactly the standalone model's logits; the wrapper's architecture is
// the one reported.
func TestVLLayouts(t *testing.T) {
	for _, c := range []lfm2ref.LFM2{lfm2ref.TinyLFM2(), lfm2ref.TinyMoE()} {
		vlLayouts(t, c)
	}
}

func vlLayouts(t *testing.T, c lfm2ref.LFM2) {
	src := t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	want := vlLogits(t, src)
	for _, layout := range []string{"v5", "v4"} {
		dst := t.TempDir()
		wrapVL(t, src, dst, layout)
		l, err := lmckpt.Load(dst)
		if err != nil {
			t.Fatal(err)
		}
		if a := l.Model.Spec().Architecture; a != lfm2.VL {
			t.Errorf("%s: architecture %q", layout, a)
		}
		l.Close()
		got := vlLogits(t, dst)
		for b := range want {
			for i := range want[b] {
				if got[b][i] != want[b][i] {
					t.Fatalf("%s row %d logit %d: %v wrapped, %v standalone", layout, b, i, got[b][i], want[b][i])
				}
			}
		}
	}
}

// TestVLConfig: LFM2-VL without a text_config is refused naming it; the
// wrapper's tie_word_embeddings decides when text_config has no
// tie_embedding, whatever its own tie_word_embeddings says (as
// Lfm2VlConfig reads them).
func TestVLConfig(t *testing.T) {
	_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Lfm2VlForConditionalGeneration"]}`))
	if err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("no text_config: %v, want an error naming it", err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Lfm2VlForConditionalGeneration"], "tie_word_embeddings": false,
		"text_config": {"model_type": "lfm2", "tie_word_embeddings": true, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "layer_types": ["conv", "full_attention"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec().TieEmbeddings || m.Spec().Hidden != 64 {
		t.Errorf("spec %+v: want hidden 64, untied as the wrapper says", m.Spec())
	}
}
