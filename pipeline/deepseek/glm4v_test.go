package deepseek_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestGlm4vMoeText: a Glm4vMoeForConditionalGeneration checkpoint (the
// decoder under model.language_model.*, a vision tower beside it, the
// decoder's config as text_config with the multimodal rotary's
// mrope_section and the partial factor in rope_parameters) loads as its
// text model and gives exactly the logits of the standalone GLM-4.5
// decoder on the same weights; the first uploads' names (model.*) too.
func TestGlm4vMoeText(t *testing.T) {
	c := dsref.TinyGLM()
	c.Theta, c.PartialRotary = 1e6, 0.25 // neither Glm4MoeConfig's default: the wrapper must carry both
	src, l := lmckpt.WriteLoad(t, c.Write)
	want := prefill(t, l)
	text, err := lmckpt.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	theta, factor := text["rope_theta"], text["partial_rotary_factor"]
	delete(text, "rope_theta")
	delete(text, "partial_rotary_factor")
	delete(text, "rope_scaling")
	text["model_type"] = "glm4v_moe_text"
	text["rope_parameters"] = map[string]any{"rope_type": "default", "mrope_section": []int{1, 1, 2}, "rope_theta": theta, "partial_rotary_factor": factor}
	cfg := map[string]any{"architectures": []string{deepseek.Glm4vMoe}, "model_type": "glm4v_moe", "text_config": text,
		"vision_config": map[string]any{"model_type": "glm4v_moe", "hidden_size": 2}, "image_token_id": 3}
	for _, prefix := range []string{"model.language_model.", "model."} {
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
			name := n
			if rest, ok := strings.CutPrefix(n, "model."); ok {
				name = prefix + rest
			}
			ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
		}
		ck.Close()
		ts = append(ts, safetensors.Tensor{Name: "model.visual.blocks.0.attn.qkv.weight", DType: safetensors.F32, Shape: []int{2, 2}, Data: make([]byte, 16)})
		dir := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dir, cfg, ts); err != nil {
			t.Fatal(err)
		}
		l2, err := lmckpt.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s := l2.Model.Spec(); s.Architecture != deepseek.Glm4vMoe {
			t.Errorf("architecture %q", s.Architecture)
		}
		got := prefill(t, l2)
		l2.Close()
		for i := range want[0] {
			if got[0][i] != want[0][i] {
				t.Fatalf("%s: logit %d: %g as GLM-4.5V's text model, %g standalone", prefix, i, got[0][i], want[0][i])
			}
		}
	}
	// The converter's layout: rope_scaling with the base inside, the
	// partial factor at the top level.
	delete(text, "rope_parameters")
	text["rope_scaling"] = map[string]any{"rope_type": "default", "mrope_section": []int{1, 1, 2}, "rope_theta": theta}
	text["partial_rotary_factor"] = factor
	text["use_qk_norm"] = true // not a Glm4vMoeTextConfig field: not read
	m, err := lm.New(lmckpt.ParseConfig(t, mustJSON(t, cfg)))
	if err != nil {
		t.Fatal(err)
	}
	if o := m.(*deepseek.Glm4vMoeModel).Options(); o.QKNorm || o.Rope.RotaryDim != 4 || math.Abs(o.Rope.InvFreq[1]-math.Pow(1e6, -2.0/4)) > 1e-12 {
		t.Errorf("rope_scaling's base and the factor: q/k norm %v, rotary dim %d, inv freq %v", o.QKNorm, o.Rope.RotaryDim, o.Rope.InvFreq)
	}
	delete(text, "rope_scaling")
	text["rope_parameters"] = map[string]any{"rope_type": "yarn", "factor": 2.0, "rope_theta": theta}
	if _, err := lm.New(lmckpt.ParseConfig(t, mustJSON(t, cfg))); !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), `type "yarn"`) {
		t.Errorf("a yarn rotary: %v", err)
	}
}
