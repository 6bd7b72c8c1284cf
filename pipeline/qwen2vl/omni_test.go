package qwen2vl_test

import (
	"testing"

	"github.com/tputool/tputool/pipeline/qwen2vl"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestOmniThinker: a tiny Qwen2 written as a Qwen2.5-Omni release holds
// its thinker (thinker.model.*, thinker.lm_head, the audio encoder, the
// vision tower, the talker and the token-to-wave decoder beside them, the
// config as thinker_config.text_config with the multimodal rotary, eos on
// the wrapper only; under both of the classes' names) gives exactly the
// standalone model's logits.
func TestOmniThinker(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}
	tiny := lmckpt.LlamaShape(32, 2, 4, 48, 64)
	tiny.Arch, tiny.Seed = "Qwen2ForCausalLM", 6
	tiny.Config.QKVBias, tiny.Config.KVHeads, tiny.Config.RopeTheta = true, 2, []float64{1e6, 1e6}
	src := t.TempDir()
	if err := tiny.Write(src); err != nil {
		t.Fatal(err)
	}
	want := logits(t, src, prompts)
	ts, text, err := lmckpt.Rewrap(src, func(n string) string { return "thinker." + n }, "thinker.audio_tower.conv1.weight",
		"thinker.visual.patch_embed.proj.weight", "talker.model.embed_tokens.weight", "token2wav.code2wav_dit_model.input_embed.proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	eos := text["eos_token_id"]
	delete(text, "eos_token_id")
	text["model_type"] = "qwen2_5_omni_text"
	text["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{2, 1, 1}}
	for _, arch := range []string{qwen2vl.OmniModel, qwen2vl.Omni} {
		cfg := map[string]any{"architectures": []string{arch}, "model_type": "qwen2_5_omni", "enable_audio_output": true, "eos_token_id": eos,
			"thinker_config": map[string]any{"model_type": "qwen2_5_omni_thinker", "text_config": text,
				"audio_config": map[string]any{"model_type": "qwen2_5_omni_audio_encoder"}},
			"talker_config": map[string]any{"model_type": "qwen2_5_omni_talker"}}
		dst := t.TempDir()
		if err := lmckpt.WriteCheckpoint(dst, cfg, ts); err != nil {
			t.Fatal(err)
		}
		got := logits(t, dst, prompts)
		for b := range want {
			for i := range want[b] {
				if got[b][i] != want[b][i] {
					t.Fatalf("%s row %d logit %d: %v as the thinker, %v standalone", arch, b, i, got[b][i], want[b][i])
				}
			}
		}
		l, err := lmckpt.Load(dst)
		if err != nil {
			t.Fatal(err)
		}
		if s := l.Model.Spec(); s.Architecture != arch || len(s.EOS) == 0 {
			t.Errorf("%s: spec %+v", arch, s)
		}
		l.Close()
	}
}
