// Package qwen2vl runs the text model of Qwen2-VL
// (Qwen2VLForConditionalGeneration: Qwen2-VL-2B, 7B, 72B) and Qwen2.5-VL
// (Qwen2_5_VLForConditionalGeneration: Qwen2.5-VL-3B, 7B, 32B, 72B, and
// the models built on them), following transformers' models/qwen2_vl and
// models/qwen2_5_vl, on text-only input:
//
//   - The text model is Qwen2's decoder (pipeline/qwen2: biases on q, k
//     and v), configured by text_config or, in the configs written before
//     it existed (the releases'), by the wrapper's own fields (the
//     configuration classes read those as the text config). Fields both
//     leave out take Qwen2VLTextConfig's and Qwen2_5_VLTextConfig's
//     defaults (textDefaults), not Qwen2Config's.
//   - Its rotary embedding is multimodal (rope_scaling type "mrope",
//     mrope_section): time, height and width positions each rotate their
//     own frequencies. A text token has the same position on all three
//     axes, so every frequency turns as in the plain rotary embedding of
//     rope_theta (the classes rename "mrope" to "default"), which is what
//     runs.
//   - The releases name the text model model.* and the vision tower
//     visual.*; transformers v5 saves model.language_model.* (read as
//     model.*, lm.Renamer) and model.visual.*. The tower is not read
//     (lm.Skipper): images are not supported.
//   - tie_word_embeddings is the text config's, else the wrapper's.
//
// Qwen2.5-Omni's thinker (omni.go) is the same text model under other
// names.
package qwen2vl

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/qwen2"
)

// The architectures this package runs.
const (
	Qwen2VL  = "Qwen2VLForConditionalGeneration"
	Qwen25VL = "Qwen2_5_VLForConditionalGeneration"
)

func init() {
	lm.Register(Qwen2VL, New)
	lm.Register(Qwen25VL, New)
}

// textDefaults are Qwen2VLTextConfig's and Qwen2_5_VLTextConfig's
// defaults (the same), for the fields the text config leaves out.
var textDefaults = map[string]any{
	"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
	"num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
	"rope_theta": 1e6, "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 80,
}

// New builds the text model of a Qwen2-VL or Qwen2.5-VL config.json.
func New(cfg *config.File) (lm.Model, error) {
	text, err := textConfig(cfg)
	if err != nil {
		return nil, err
	}
	d, err := qwen2.New(text)
	if err != nil {
		return nil, err
	}
	m := &Model{d.(*llama.Model)}
	s := m.Spec()
	s.Architecture = cfg.Architecture()
	if !text.Has("tie_word_embeddings") {
		var w struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&w); err != nil {
			return nil, err
		}
		s.TieEmbeddings = w.Tie != nil && *w.Tie
	}
	return m, nil
}

// textConfig is the text config (text_config, else the wrapper's own
// fields) with textDefaults for what it leaves out, its multimodal
// rotary read as the plain one, named in errors as where it came from.
func textConfig(cfg *config.File) (*config.File, error) {
	text := *cfg
	if cfg.Text != nil {
		text = *cfg.Text
		text.Path = lm.ConfigName(cfg) + " text_config"
	}
	text.Architectures = cfg.Architectures
	text.Raw = maps.Clone(text.Raw)
	return plainText(cfg, &text, textDefaults)
}

// plainText fills the text config's fields it leaves out from defaults,
// its bos and eos from the wrapper (cfg) when it has none, and reads its
// multimodal rotary as the plain one.
func plainText(cfg, text0 *config.File, defaults map[string]any) (*config.File, error) {
	text := *text0
	for k, v := range defaults {
		// An explicit null num_key_value_heads is the heads, and a null
		// sliding_window no window; other nulls take the default.
		if raw, ok := text.Raw[k]; !ok || k != "num_key_value_heads" && k != "sliding_window" && string(raw) == "null" {
			text.Raw[k], _ = json.Marshal(v)
		}
	}
	// bos and eos from the wrapper when the text config has none.
	for _, k := range []string{"bos_token_id", "eos_token_id"} {
		if _, ok := text.Raw[k]; !ok && cfg != text0 {
			if raw, ok := cfg.Raw[k]; ok {
				text.Raw[k] = raw
			}
		}
	}
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		p, err := nn.ParseRopeScaling(text.Raw[key])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", lm.ConfigName(&text), key, err)
		}
		if p == nil {
			continue
		}
		typ, _ := p["rope_type"].(string)
		if typ == "" {
			typ, _ = p["type"].(string)
		}
		if typ != "mrope" && typ != "default" && typ != "" {
			return nil, fmt.Errorf("%s: %s type %q: Qwen2-VL's text model turns by the multimodal rotary (mrope) only", lm.ConfigName(&text), key, typ)
		}
		plain := map[string]any{"rope_type": "default"}
		if t, ok := p["rope_theta"]; ok {
			plain["rope_theta"] = t
		}
		text.Raw[key], _ = json.Marshal(plain)
	}
	return &text, nil
}

// Model is the text decoder in the releases' and transformers v5's names.
type Model struct{ *llama.Model }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// RenameWeight implements lm.Renamer: transformers v5's
// model.language_model.* is the releases' model.*.
func (m *Model) RenameWeight(stored string) string {
	if rest, ok := strings.CutPrefix(stored, "model.language_model."); ok {
		return "model." + rest
	}
	return stored
}

// SkipWeight implements lm.Skipper: the vision tower.
func (m *Model) SkipWeight(name string) (string, bool) {
	return lm.SkipPrefixed(name, "vision tower (visual.*, model.visual.*): tputool runs the text model only", "visual.", "model.visual.")
}
