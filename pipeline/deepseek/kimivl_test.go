package deepseek_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestKimiVLText: a KimiVLForConditionalGeneration checkpoint (the
// decoder's tensors under language_model.*, a vision tower and a
// projector beside them, the decoder's config as text_config) loads as
// its text model, the vision tensors skipped, and gives exactly the
// logits of the standalone DeepSeek-V3 decoder on the same weights.
func TestKimiVLText(t *testing.T) {
	c := dsref.TinyDeepSeek()
	src, l := lmckpt.WriteLoad(t, c.Write)
	want := prefill(t, l)
	ck, err := safetensors.OpenDir(src, "")
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		raw, err := ck.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: "language_model." + n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	ck.Close()
	for _, n := range []string{"vision_tower.encoder.blocks.0.wqkv.weight", "multi_modal_projector.linear_1.weight"} {
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int{2, 2}, Data: make([]byte, 16)})
	}
	// The release also stores each layer's rotary buffer, which transformers
	// never loads.
	ts = append(ts, safetensors.Tensor{Name: "language_model.model.layers.0.self_attn.rotary_emb.inv_freq", DType: safetensors.F32, Shape: []int{2}, Data: make([]byte, 8)})
	text, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	delete(text, "model_type") // the release's text_config names none
	cfg := map[string]any{"architectures": []string{deepseek.KimiVL}, "model_type": "kimi_vl", "text_config": text,
		"vision_config": map[string]any{"model_type": "moonvit", "hidden_size": 2}, "media_placeholder_token_id": 3}
	dir := t.TempDir()
	if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
		t.Fatal(err)
	}
	l2, err := lmckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if s := l2.Model.Spec(); s.Architecture != deepseek.KimiVL {
		t.Errorf("architecture %q", s.Architecture)
	}
	var skipped int
	for _, g := range l2.Skipped() {
		skipped += g.Tensors
	}
	if skipped != 2 {
		t.Errorf("%d tensors skipped, want the vision tower's and the projector's", skipped)
	}
	got := prefill(t, l2)
	for i := range want[0] {
		if got[0][i] != want[0][i] {
			t.Fatalf("logit %d: %g as Kimi-VL's text model, %g standalone", i, got[0][i], want[0][i])
		}
	}
	text["model_type"] = "qwen2"
	if _, err := lm.New(lmckpt.ParseConfig(t, mustJSON(t, cfg))); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), `model_type "qwen2"`) {
		t.Errorf("a qwen2 text_config: %v", err)
	}
	delete(cfg, "text_config")
	if _, err := lm.New(lmckpt.ParseConfig(t, mustJSON(t, cfg))); err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("no text_config: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
