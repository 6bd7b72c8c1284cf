package deepseek

import (
	"encoding/json"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Glm4vMoe is Z.ai's GLM-4.5V class (and the later releases of that class) (transformers'
// models/glm4v_moe): a vision tower before GLM-4.5-Air's decoder.
// tputool runs its text model, Glm4vMoeTextModel. That is GLM-4.5's
// layer (Glm4MoeDecoderLayer: attention_bias on q, k and v, no q/k norm,
// the dense first layers and DeepSeek-V3's router) under a multimodal
// rotary, Glm4vMoeTextRotaryEmbedding: mrope_section splits the rotary's
// frequencies among the temporal, height and width positions, which are
// one position for text, so on text the rotary is GLM-4.5's (the first
// partial_rotary_factor of each head, rotate-half). The vision tower
// (model.visual) is skipped; images are not supported.
const Glm4vMoe = "Glm4vMoeForConditionalGeneration"

func init() { lm.Register(Glm4vMoe, newGlm4vMoe) }

// newGlm4vMoe builds a Glm4vMoeForConditionalGeneration's text model from
// its text_config, read as Glm4vMoeTextConfig (Glm4MoeConfig's fields),
// its multimodal rotary read as the plain one it is on text.
func newGlm4vMoe(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	if cfg.Text == nil {
		return nil, fmt.Errorf("%s: %s needs a text_config object", where, Glm4vMoe)
	}
	t := *cfg.Text
	t.Path = where + " text_config"
	t.Architectures = []string{"Glm4MoeForCausalLM"}
	t.Raw = make(map[string]json.RawMessage, len(cfg.Text.Raw)+2)
	for k, v := range cfg.Text.Raw {
		t.Raw[k] = v
	}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := t.Decode(&head); err != nil {
		return nil, err
	}
	if head.ModelType != "" && head.ModelType != "glm4v_moe_text" {
		return nil, errs.Unsupportedf("%s: model_type %q: tputool reads %s's text model of model_type glm4v_moe_text", t.Path, head.ModelType, Glm4vMoe)
	}
	// Glm4vMoeTextConfig's defaults where they differ from Glm4MoeConfig's.
	for k, v := range map[string]string{"vocab_size": "151424", "max_position_embeddings": "65536", "attention_bias": "true"} {
		if _, ok := t.Raw[k]; !ok {
			t.Raw[k] = json.RawMessage(v)
		}
	}
	// bos and eos from the wrapper when the text config has none.
	for _, k := range []string{"bos_token_id", "eos_token_id"} {
		if _, ok := t.Raw[k]; !ok {
			if raw, ok := cfg.Raw[k]; ok {
				t.Raw[k] = raw
			}
		}
	}
	// The multimodal rotary on text: the plain rotary of its base and
	// partial factor, mrope_section dropped.
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		p, err := nn.ParseRopeScaling(t.Raw[key])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", t.Path, key, err)
		}
		if p == nil {
			continue
		}
		typ, _ := p["rope_type"].(string)
		if typ == "" {
			typ, _ = p["type"].(string)
		}
		if typ != "mrope" && typ != "default" && typ != "" {
			return nil, errs.Unsupportedf("%s: %s type %q: %s's text model turns by the multimodal rotary (mrope_section) only", t.Path, key, typ, Glm4vMoe)
		}
		plain := map[string]any{"rope_type": "default"}
		for _, k := range []string{"rope_theta", "partial_rotary_factor"} {
			if v, ok := p[k]; ok {
				plain[k] = v
			}
		}
		// transformers v5 reads the base (and factor) within either
		// object, as rope_parameters: the converter writes rope_scaling
		// with rope_theta inside.
		delete(t.Raw, key)
		t.Raw["rope_parameters"], _ = json.Marshal(plain)
	}
	// Glm4vMoeTextAttention has no q/k norms (use_qk_norm is not a field
	// of Glm4vMoeTextConfig).
	delete(t.Raw, "use_qk_norm")
	o, err := Resolve(&t)
	if err != nil {
		return nil, err
	}
	o.Spec.Architecture = Glm4vMoe
	o.MaskInf = true // Glm4vMoeTextTopkRouter closes groups with −∞ (one group in the releases: no difference)
	return &Glm4vMoeModel{Model: NewModel(o)}, nil
}

// Glm4vMoeModel is GLM-4.5V's text model: GLM-4.5's decoder reading
// model.language_model.* (the releases' and transformers' names; an
// older model.* layout is accepted in case) and lm_head (lm.Renamer), the
// vision tower skipped (lm.Skipper).
type Glm4vMoeModel struct{ *Model }

var (
	_ lm.Renamer = (*Glm4vMoeModel)(nil)
	_ lm.Skipper = (*Glm4vMoeModel)(nil)
	_ lm.Routed  = (*Glm4vMoeModel)(nil)
)

// RenameWeight implements lm.Renamer: model.language_model.* is the
// decoder's model.*.
func (m *Glm4vMoeModel) RenameWeight(stored string) string {
	return lm.RenamePrefix(stored, [][2]string{{"model.language_model.", "model."}})
}

// SkipWeight implements lm.Skipper: the vision tower, and what the
// decoder skips (a multi-token-prediction layer past num_hidden_layers,
// if a checkpoint holds one: Glm4vMoeTextModel does not run it).
func (m *Glm4vMoeModel) SkipWeight(name string) (string, bool) {
	if why, ok := lm.SkipPrefixed(name, "vision tower (model.visual.*): tputool runs the text model only", "model.visual.", "visual."); ok {
		return why, true
	}
	return m.Model.SkipWeight(name)
}
