package qwen3vl_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3vl"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// toOmni writes the Qwen3-MoE checkpoint in src as a Qwen3-Omni release
// holds its thinker into dst: the tensors under thinker.model.* and
// thinker.lm_head, an audio encoder, a vision tower, a talker and a
// codec decoder beside them, the config as thinker_config.text_config
// (with the release's multimodal rope_scaling), eos on the thinker's
// config only.
func toOmni(t *testing.T, src, dst string) {
	t.Helper()
	ts, text, err := lmckpt.Rewrap(src, func(n string) string { return "thinker." + n }, "thinker.audio_tower.conv2d1.weight",
		"thinker.visual.patch_embed.proj.weight", "talker.model.embed_tokens.weight", "code2wav.decoder.0.conv.weight")
	if err != nil {
		t.Fatal(err)
	}
	eos := text["eos_token_id"]
	delete(text, "eos_token_id")
	text["model_type"] = "qwen3_omni_moe_text"
	text["rope_scaling"] = map[string]any{"rope_type": "default", "mrope_section": []int{4, 2, 2}, "interleaved": true, "mrope_interleaved": true}
	cfg := map[string]any{"architectures": []string{qwen3vl.Omni}, "model_type": "qwen3_omni_moe", "enable_audio_output": true,
		"thinker_config": map[string]any{"model_type": "qwen3_omni_moe_thinker", "text_config": text, "eos_token_id": eos,
			"audio_config": map[string]any{"model_type": "qwen3_omni_moe_audio_encoder"}, "vision_config": map[string]any{"model_type": "qwen3_omni_moe_vision_encoder"}},
		"talker_config": map[string]any{"model_type": "qwen3_omni_moe_talker"}}
	if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
		t.Fatal(err)
	}
}

// TestOmniThinker: a Qwen3-Omni release's thinker, a Qwen3-MoE under
// thinker.*, loads as that model (eos from the thinker's config, the
// audio, vision, talker and codec tensors skipped) and gives exactly the
// standalone model's logits.
func TestOmniThinker(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := qwenref.TinyQwen3MoE().Write(src); err != nil {
		t.Fatal(err)
	}
	toOmni(t, src, dst)
	plain, err := lmckpt.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	omni, err := lmckpt.Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer omni.Close()
	if a := omni.Model.Spec().Architecture; a != qwen3vl.Omni {
		t.Errorf("architecture %q", a)
	}
	if _, routed := omni.Model.(lm.Routed); !routed {
		t.Error("not routed")
	}
	if got, want := omni.Model.Spec().EOS, plain.Model.Spec().EOS; len(got) != len(want) || len(got) == 0 || got[0] != want[0] {
		t.Errorf("eos %v, the standalone model's %v", got, want)
	}
	for _, p := range [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11}} {
		w, g := moecheck.Prefill(t, plain, p), moecheck.Prefill(t, omni, p)
		for i := range w[0] {
			if w[0][i] != g[0][i] {
				t.Fatalf("prompt %v: logit %d is %g as Qwen3-Omni's thinker, %g standalone", p, i, g[0][i], w[0][i])
			}
		}
	}
	for _, c := range []struct{ js, want string }{
		{`{"architectures": ["Qwen3OmniMoeForConditionalGeneration"]}`, "needs a thinker_config"},
		{`{"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "thinker_config": {"model_type": "qwen3_omni_moe_thinker"}}`, "thinker_config needs a text_config"},
	} {
		cfg, err := config.ParseModel([]byte(c.js))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.js, err, c.want)
		}
	}
}
