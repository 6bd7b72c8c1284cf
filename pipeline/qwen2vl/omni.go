package qwen2vl

import (
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen2"
)

// Qwen2.5-Omni's classes (transformers' models/qwen2_5_omni: Qwen2.5-Omni-3B
// and 7B; the releases' config.json names Qwen2_5OmniModel). tputool runs
// the thinker's text model on text-only input: Qwen2's decoder (biases on
// q, k and v) with the multimodal rotary, which text turns as the plain
// one, configured by thinker_config.text_config, its tensors
// thinker.model.* and thinker.lm_head. The audio encoder
// (thinker.audio_tower.*), the vision tower (thinker.visual.*), the talker
// (talker.*) and the token-to-wave decoder (token2wav.*) are skipped.
const (
	Omni      = "Qwen2_5OmniForConditionalGeneration"
	OmniModel = "Qwen2_5OmniModel"
)

func init() {
	lm.Register(Omni, newOmni)
	lm.Register(OmniModel, newOmni)
}

// omniDefaults are Qwen2_5OmniTextConfig's defaults (Qwen2.5-Omni-7B's
// sizes), for the fields the thinker's text config leaves out.
var omniDefaults = map[string]any{
	"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
	"num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
	"rope_theta": 1e6, "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 28,
}

// newOmni builds a Qwen2.5-Omni's thinker text model; bos, eos and the
// head's tie come from the thinker's config, else the wrapper's, when
// the text config has none.
func newOmni(cfg *config.File) (lm.Model, error) {
	text, err := lm.ThinkerText(cfg)
	if err != nil {
		return nil, err
	}
	plain, err := plainText(text, text, omniDefaults)
	if err != nil {
		return nil, err
	}
	d, err := qwen2.New(plain)
	if err != nil {
		return nil, err
	}
	m := &Omni25{d.(*llama.Model)}
	m.Spec().Architecture = cfg.Architecture()
	return m, nil
}

// Omni25 is Qwen2.5-Omni's thinker text model: Qwen2's decoder in the
// release's names. It implements lm.Renamer and lm.Skipper.
type Omni25 struct{ *llama.Model }

var (
	_ lm.Renamer = (*Omni25)(nil)
	_ lm.Skipper = (*Omni25)(nil)
)

// RenameWeight implements lm.Renamer: thinker.model.* and
// thinker.lm_head are Qwen2's model.* and lm_head.
func (m *Omni25) RenameWeight(stored string) string {
	return lm.RenamePrefix(stored, [][2]string{{"thinker.model.", "model."}, {"thinker.lm_head.", "lm_head."}})
}

// SkipWeight implements lm.Skipper: the audio encoder, the vision tower,
// the talker and the token-to-wave decoder.
func (m *Omni25) SkipWeight(name string) (string, bool) {
	return lm.SkipPrefixed(name, "audio encoder, vision tower, talker and token-to-wave decoder (thinker.audio_tower.*, thinker.visual.*, talker.*, token2wav.*): tputool runs the thinker's text model only",
		"thinker.audio_tower.", "thinker.visual.", "talker.", "token2wav.")
}
