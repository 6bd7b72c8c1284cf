package lfm2

import (
	"fmt"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

// Lfm2VlForConditionalGeneration (Liquid AI's LFM2-VL: LFM2-VL-450M,
// 1.6B, 3B), following transformers' models/lfm2_vl, on text-only input:
// the language model is LFM2 (this package's decoder), configured by
// text_config; the SigLIP2 vision tower and the projector are not read
// (lm.Skipper): images are not supported. transformers saves the text
// model as model.language_model.* and the head as lm_head.*; the
// Llava-style names language_model.model.* and language_model.lm_head.*
// are read too (lm.Renamer). The head is tied as Lfm2VlConfig says: the
// text config's tie_embedding, else the wrapper's tie_word_embeddings
// (true by default).

// VL is the multimodal architecture this file reads.
const VL = "Lfm2VlForConditionalGeneration"

func init() {
	lm.Register(VL, NewVL)
}

// NewVL builds the text model of an Lfm2VlForConditionalGeneration
// config.json.
func NewVL(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	if cfg.Text == nil {
		return nil, fmt.Errorf("%s: %s needs a text_config object", where, VL)
	}
	text := *cfg.Text
	text.Path = where + " text_config"
	arch := "Lfm2ForCausalLM"
	if text.ModelType == moeModelType {
		arch = moeArchitecture
	}
	text.Architectures = []string{arch}
	o, err := Resolve(&text)
	if err != nil {
		return nil, err
	}
	if !text.Has("tie_embedding") { // Lfm2VlConfig: getattr(text_config, "tie_embedding", tie_word_embeddings)
		var w struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&w); err != nil {
			return nil, err
		}
		o.Spec.TieEmbeddings = w.Tie == nil || *w.Tie
	}
	o.Spec.Architecture = VL
	return &VLModel{NewModel(o)}, nil
}

// VLModel is LFM2-VL's text model: LFM2's decoder reading the wrapper's
// names.
type VLModel struct{ *Model }

// vlConversion is the multimodal checkpoints' text model under the
// standalone model's names.
var vlConversion = [][2]string{
	{"model.language_model.", "model."},
	{"language_model.model.", "model."},
	{"language_model.lm_head.", "lm_head."},
}

// RenameWeight implements lm.Renamer.
func (m *VLModel) RenameWeight(stored string) string { return lm.RenamePrefix(stored, vlConversion) }

// SkipWeight implements lm.Skipper: the vision tower and the projector,
// under either layout's names.
func (m *VLModel) SkipWeight(name string) (string, bool) {
	return lm.SkipPrefixed(name, "vision tower and projector (model.vision_tower.*, model.multi_modal_projector.*): tputool runs the text model only",
		"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector.")
}

var (
	_ lm.Renamer = (*VLModel)(nil)
	_ lm.Skipper = (*VLModel)(nil)
)
