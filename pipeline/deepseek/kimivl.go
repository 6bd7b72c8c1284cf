package deepseek

import (
	"encoding/json"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// KimiVL is Moonshot's Kimi-VL class (Kimi-VL-A3B-Instruct and
// -Thinking: a MoonViT vision tower and a projector before Moonlight's
// DeepSeek-V3 decoder, 16B parameters of which 3B active), whose
// modeling code ships with the checkpoints (modeling_kimi_vl.py: the
// decoder is a DeepseekV3ForCausalLM of text_config under
// language_model). tputool runs its text model: the decoder of
// text_config, its tensors read under the standalone model's names, the
// vision tower and the projector skipped. Images are not supported.
const KimiVL = "KimiVLForConditionalGeneration"

func init() { lm.Register(KimiVL, newKimiVL) }

// newKimiVL builds a KimiVLForConditionalGeneration's text model from
// its text_config, read as DeepseekV3Config.
func newKimiVL(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	if cfg.Text == nil {
		return nil, fmt.Errorf("%s: %s needs a text_config object", where, KimiVL)
	}
	t := *cfg.Text
	t.Path = where + " text_config"
	t.Architectures = []string{"DeepseekV3ForCausalLM"}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := t.Decode(&head); err != nil {
		return nil, err
	}
	if head.ModelType != "" && head.ModelType != "deepseek_v3" { // the releases' text_config has none
		return nil, errs.Unsupportedf("%s: model_type %q: tputool reads %s's text model of model_type deepseek_v3", t.Path, head.ModelType, KimiVL)
	}
	// bos and eos from the wrapper when the text config has none.
	t.Raw = make(map[string]json.RawMessage, len(cfg.Text.Raw)+2)
	for k, v := range cfg.Text.Raw {
		t.Raw[k] = v
	}
	for _, k := range []string{"bos_token_id", "eos_token_id"} {
		if _, ok := t.Raw[k]; !ok {
			if raw, ok := cfg.Raw[k]; ok {
				t.Raw[k] = raw
			}
		}
	}
	o, err := Resolve(&t)
	if err != nil {
		return nil, err
	}
	o.Spec.Architecture = KimiVL
	return &KimiVLModel{Model: NewModel(o)}, nil
}

// KimiVLModel is Kimi-VL's text model: the DeepSeek-V3 decoder reading
// language_model.model.* and language_model.lm_head (lm.Renamer), the
// vision tower and projector skipped (lm.Skipper).
type KimiVLModel struct{ *Model }

var (
	_ lm.Renamer = (*KimiVLModel)(nil)
	_ lm.Skipper = (*KimiVLModel)(nil)
	_ lm.Routed  = (*KimiVLModel)(nil)
)

// kimiVLNames maps the language model's tensors to the standalone
// decoder's.
var kimiVLNames = [][2]string{
	{"language_model.model.", "model."},
	{"language_model.lm_head.", "lm_head."},
}

// RenameWeight implements lm.Renamer.
func (m *KimiVLModel) RenameWeight(stored string) string { return lm.RenamePrefix(stored, kimiVLNames) }

// SkipWeight implements lm.Skipper: the vision tower and the projector,
// and what the decoder skips (a multi-token-prediction layer).
func (m *KimiVLModel) SkipWeight(name string) (string, bool) {
	if why, ok := lm.SkipPrefixed(name, "vision tower and projector (vision_tower.*, multi_modal_projector.*): tputool runs the text model only",
		"vision_tower.", "multi_modal_projector."); ok {
		return why, true
	}
	return m.Model.SkipWeight(name)
}
