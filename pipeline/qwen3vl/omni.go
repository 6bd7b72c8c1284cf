package qwen3vl

import (
	"encoding/json"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Omni is Qwen3-Omni's class (transformers' models/qwen3_omni_moe:
// Qwen3-Omni-30B-A3B-Instruct, -Thinking and -Captioner). tputool runs
// its thinker's text model, on text-only input: the thinker's decoder is
// Qwen3-VL-MoE's text model (Qwen3OmniMoeThinkerTextModel: Qwen3-MoE's
// layers, attention without a window, the multimodal rotary that text
// tokens turn as the plain one), the config in
// thinker_config.text_config, the tensors under thinker.model.* and
// thinker.lm_head. Unlike Qwen3-VL-MoE's, the releases hold each expert
// apart (thinker.model.layers.L.mlp.experts.E.gate_proj.weight), as
// Qwen3-MoE's do, and the router renormalizes as norm_topk_prob says
// (Qwen3MoeSparseMoeBlock). The audio encoder (thinker.audio_tower.*),
// the vision tower (thinker.visual.*), the talker that speaks (talker.*)
// and the codec decoder (code2wav.*) are skipped: no audio or images in,
// no speech out.
const Omni = "Qwen3OmniMoeForConditionalGeneration"

func init() { lm.Register(Omni, newOmni) }

// omniDefaults are Qwen3OmniMoeTextConfig's defaults, which a field the
// thinker's text_config leaves out takes.
var omniDefaults = map[string]any{
	"vocab_size": 3584, "hidden_size": 2048, "intermediate_size": 18944, "num_hidden_layers": 28,
	"num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
	"rope_theta": 1e6, "decoder_sparse_step": 1, "moe_intermediate_size": 768, "num_experts_per_tok": 8,
	"num_experts": 128, "norm_topk_prob": true,
}

// newOmni builds a Qwen3-Omni's thinker text model from
// thinker_config.text_config; bos, eos and the head's tie come from the
// thinker's config, else the wrapper's, when the text config has none.
func newOmni(cfg *config.File) (lm.Model, error) {
	text, err := lm.ThinkerText(cfg)
	if err != nil {
		return nil, err
	}
	set := func(k string, v json.RawMessage) {
		if old, ok := text.Raw[k]; !ok || string(old) == "null" {
			text.Raw[k] = v
		}
	}
	for k, v := range omniDefaults {
		b, _ := json.Marshal(v)
		set(k, b)
	}
	var heads, hidden int
	_ = json.Unmarshal(text.Raw["num_attention_heads"], &heads)
	_ = json.Unmarshal(text.Raw["hidden_size"], &hidden)
	if heads > 0 {
		b, _ := json.Marshal(hidden / heads)
		set("head_dim", b) // Qwen3OmniMoeTextConfig: hidden_size / num_attention_heads when absent
	}
	o, err := qwen3moe.Resolve(text)
	if err != nil {
		return nil, err
	}
	m := &OmniModel{qwen3moe.NewModel(o)}
	m.Spec().Architecture = Omni
	return m, nil
}

// OmniModel is Qwen3-Omni's thinker text model: Qwen3-MoE's decoder in
// the release's names. It implements lm.Renamer, lm.Skipper and
// lm.Routed.
type OmniModel struct{ *qwen3moe.Model }

var (
	_ lm.Renamer = (*OmniModel)(nil)
	_ lm.Skipper = (*OmniModel)(nil)
	_ lm.Routed  = (*OmniModel)(nil)
)

// omniNames maps the thinker's tensors to Qwen3-MoE's.
var omniNames = [][2]string{{"thinker.model.", "model."}, {"thinker.lm_head.", "lm_head."}}

// RenameWeight implements lm.Renamer.
func (m *OmniModel) RenameWeight(stored string) string { return lm.RenamePrefix(stored, omniNames) }

// SkipWeight implements lm.Skipper: the audio encoder, the vision tower,
// the talker and the codec decoder.
func (m *OmniModel) SkipWeight(name string) (string, bool) {
	for _, p := range []struct{ prefix, what string }{
		{"thinker.audio_tower.", "audio encoder (thinker.audio_tower.*)"},
		{"thinker.visual.", "vision tower (thinker.visual.*)"},
		{"talker.", "talker (talker.*: speech output)"},
		{"code2wav.", "codec decoder (code2wav.*: speech output)"},
	} {
		if strings.HasPrefix(name, p.prefix) {
			return p.what + ": tputool runs the thinker's text model only", true
		}
	}
	return "", false
}
