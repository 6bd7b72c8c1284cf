// Package internvl runs the text model of InternVLForConditionalGeneration
// (transformers' models/internvl, the "-HF" releases of OpenGVLab's
// InternVL3 and InternVL3.5, among them the mixtures of experts
// InternVL3.5-30B-A3B and -241B-A28B): a vision tower and a projector
// before a language model that is any causal LM of text_config
// (AutoModelForCausalLM; the class is LlavaForConditionalGeneration's).
// tputool runs the text model when it is one it runs: Qwen3-MoE
// (qwen3_moe), Qwen3 (qwen3), Qwen2 (qwen2) or Llama (llama). The vision
// tower and the projector are skipped; images are not supported.
//
// The language model's tensors are read under the standalone model's
// names: transformers v5's model.language_model.* and lm_head, or the
// older language_model.model.* and language_model.lm_head.
package internvl

import (
	"encoding/json"
	"fmt"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/qwen2" // Qwen2ForCausalLM
	_ "github.com/tputool/tputool/pipeline/qwen3" // Qwen3ForCausalLM
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// Architecture is the class this package registers.
const Architecture = "InternVLForConditionalGeneration"

func init() { lm.Register(Architecture, New) }

// textClasses are the causal LMs a text_config's model_type names, as
// AutoModelForCausalLM maps them, among those tputool runs here.
var textClasses = map[string]string{
	"qwen3_moe": "Qwen3MoeForCausalLM",
	"qwen3":     "Qwen3ForCausalLM",
	"qwen2":     "Qwen2ForCausalLM",
	"llama":     "LlamaForCausalLM",
}

// New builds an InternVLForConditionalGeneration's text model from its
// text_config.
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	if cfg.Text == nil {
		return nil, fmt.Errorf("%s: %s needs a text_config object", where, Architecture)
	}
	t := *cfg.Text
	t.Path = where + " text_config"
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := t.Decode(&head); err != nil {
		return nil, err
	}
	class, ok := textClasses[head.ModelType]
	if !ok {
		return nil, errs.Unsupportedf("%s: model_type %q: tputool runs %s's text model when it is qwen3_moe, qwen3, qwen2 or llama", t.Path, head.ModelType, Architecture)
	}
	t.Architectures = []string{class}
	// bos, eos and the head's tie from the wrapper when the text config
	// has none (releases converted with the tie on the wrapper).
	t.Raw = make(map[string]json.RawMessage, len(cfg.Text.Raw)+3)
	for k, v := range cfg.Text.Raw {
		t.Raw[k] = v
	}
	for _, k := range []string{"bos_token_id", "eos_token_id", "tie_word_embeddings"} {
		if _, ok := t.Raw[k]; !ok {
			if raw, ok := cfg.Raw[k]; ok {
				t.Raw[k] = raw
			}
		}
	}
	inner, err := lm.New(&t)
	if err != nil {
		return nil, err
	}
	switch m := inner.(type) {
	case *qwen3moe.Model:
		m.Spec().Architecture = Architecture
		return &MoE{Model: m}, nil
	case *llama.Model:
		m.Spec().Architecture = Architecture
		return &Dense{Model: m}, nil
	}
	return nil, errs.Unsupportedf("%s: the text model %s is not one %s's text path wraps", t.Path, class, Architecture)
}

// names maps the language model's tensors to the standalone model's.
var names = [][2]string{
	{"model.language_model.", "model."},
	{"language_model.model.", "model."},
	{"language_model.lm_head.", "lm_head."},
}

// skip reports the vision tower's and the projector's tensors.
func skip(name string) (string, bool) {
	return lm.SkipPrefixed(name, "vision tower and projector (vision_tower.*, multi_modal_projector.*): tputool runs the text model only",
		"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector.")
}

// MoE is a Qwen3-MoE text model (lm.Routed, as qwen3moe's).
type MoE struct{ *qwen3moe.Model }

// Dense is a dense text model (Qwen3, Qwen2, Llama).
type Dense struct{ *llama.Model }

var (
	_ lm.Renamer = (*MoE)(nil)
	_ lm.Skipper = (*MoE)(nil)
	_ lm.Routed  = (*MoE)(nil)
	_ lm.Renamer = (*Dense)(nil)
	_ lm.Skipper = (*Dense)(nil)
)

// RenameWeight implements lm.Renamer.
func (m *MoE) RenameWeight(stored string) string { return lm.RenamePrefix(stored, names) }

// SkipWeight implements lm.Skipper.
func (m *MoE) SkipWeight(name string) (string, bool) { return skip(name) }

// RenameWeight implements lm.Renamer.
func (m *Dense) RenameWeight(stored string) string { return lm.RenamePrefix(stored, names) }

// SkipWeight implements lm.Skipper.
func (m *Dense) SkipWeight(name string) (string, bool) { return skip(name) }
