// Package mistral3 implements the text model of Mistral 3's releases,
// following transformers' models/mistral3 and models/ministral3:
//
//   - Mistral3ForConditionalGeneration (Mistral Small 3.1 and 3.2,
//     Magistral Small, Devstral Small, Ministral 3, Devstral Small 2): a
//     Pixtral vision tower, a projector and a text model from its
//     text_config. tputool runs the text model: the tower and projector
//     are skipped by name (lm.Skipper), and the text model's tensors are
//     read under the standalone model's names, from transformers v5's
//     model.language_model.* and the first uploads' language_model.model.*
//     (lm.Renamer). A text_config of model_type "mistral" is Mistral's
//     decoder (pipeline/mistral); "ministral3" is Ministral 3's, below.
//   - Ministral3ForCausalLM: Ministral 3's decoder alone.
//
// Ministral 3's decoder (modular_ministral3.py) is Mistral's, with two
// things of its own: the rotary is YaRN by default (factor 16 over 16384
// original positions), and every layer multiplies its queries, after the
// rotary, by 1 + β·log(1 + ⌊position / original_max_position_embeddings⌋)
// (β is rope_parameters' llama_4_scaling_beta; Llama 4's attention
// temperature with the position unshifted), the scale rounded to the
// queries' dtype first. transformers takes the position from
// cache_position, which counts a left-padded row's padding too; tputool
// takes the token's position in its own sequence, the same for a row
// without padding, and only different past 16384 tokens at that.
//
// The Hub's Ministral 3 and Devstral 2 releases store their projections
// in per-tensor FP8 (pipeline/lm's quant_method fp8, weight_block_size
// null), read as any FP8 checkpoint is; their static activation scales
// are not applied (docs/quantized.md).
package mistral3

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mistral"
	"github.com/tputool/tputool/pipeline/nn"
)

// The architectures this package registers.
const (
	Conditional = "Mistral3ForConditionalGeneration"
	Causal      = "Ministral3ForCausalLM"
)

func init() {
	lm.Register(Conditional, New)
	lm.Register(Causal, New)
}

// Config is a Ministral3Config (a Ministral3ForCausalLM's config.json or
// a Mistral3ForConditionalGeneration's text_config).
type Config struct {
	llama.Config
	SlidingWindow *int `json:"sliding_window"`
}

// Defaults are Ministral3Config's defaults.
var Defaults = llama.Defaults{
	VocabSize: 131072, Hidden: 4096, Intermediate: 14336, Layers: 34, Heads: 32,
	MaxPositions: 262144, Eps: 1e-5, RopeTheta: 1e6, Tie: false, Act: "silu",
	KVHeads: 8, HeadDim: 128,
}

// MistralConfig's and Ministral3Config's bos_token_id and eos_token_id
// (tokenIDs).
const (
	defaultBOS = 1
	defaultEOS = 2
)

// defaultRope is Ministral3Config's rope_parameters when a config has
// none (and neither rope_scaling): YaRN over 16384 original positions,
// and the query scaling's β.
func defaultRope(maxPositions int) map[string]any {
	return map[string]any{
		"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 16384,
		"max_position_embeddings": maxPositions, "beta_fast": 32.0, "beta_slow": 1.0,
		"mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1,
	}
}

// New builds the text model of a Mistral3ForConditionalGeneration, or a
// Ministral3ForCausalLM, from config.json.
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	multimodal := cfg.Architecture() == Conditional
	text := cfg
	if multimodal {
		if cfg.Text == nil {
			return nil, fmt.Errorf("%s: %s needs a text_config object", where, Conditional)
		}
		t := *cfg.Text
		t.Path = where + " text_config"
		t.Architectures = cfg.Architectures
		text = &t
	}
	var head struct {
		ModelType string `json:"model_type"`
		Tie       *bool  `json:"tie_word_embeddings"`
	}
	if err := text.Decode(&head); err != nil {
		return nil, err
	}
	if multimodal && head.ModelType == "" {
		head.ModelType = "mistral" // Mistral3Config's text_config default
	}
	var m *llama.Model
	var rope map[string]any
	switch {
	case multimodal && head.ModelType == "mistral":
		d, err := mistral.New(text)
		if err != nil {
			return nil, err
		}
		m = d.(*llama.Model)
	case head.ModelType == "ministral3" || !multimodal && head.ModelType == "":
		o, params, err := resolve(text)
		if err != nil {
			return nil, err
		}
		m, rope = llama.NewModel(o), params
	default:
		return nil, errs.Unsupportedf("%s: model_type %q: tputool reads Mistral 3's text models of model_type ministral3 (and, within %s, mistral)", lm.ConfigName(text), head.ModelType, Conditional)
	}
	if err := tokenIDs(cfg, text, multimodal, m.Spec()); err != nil {
		return nil, err
	}
	if multimodal && head.Tie == nil {
		// The wrapper's tie_word_embeddings decides when text_config has none.
		var w struct {
			Tie *bool `json:"tie_word_embeddings"`
		}
		if err := cfg.Decode(&w); err != nil {
			return nil, err
		}
		if w.Tie != nil {
			m.Spec().TieEmbeddings = *w.Tie
		}
	}
	m.Spec().Architecture = cfg.Architecture()
	return &Model{Model: m, multimodal: multimodal, rope: rope}, nil
}

// tokenIDs sets s's bos and eos as the text config gives them, else (in
// the multimodal class) as the wrapper does, else as MistralConfig and
// Ministral3Config default them (1 and 2).
func tokenIDs(cfg, text *config.File, multimodal bool, s *lm.Spec) error {
	var ids struct {
		BOS config.IDList `json:"bos_token_id"`
		EOS config.IDList `json:"eos_token_id"`
	}
	pick := func(key string) (*config.File, bool) {
		switch {
		case text.Has(key):
			return text, true
		case multimodal && cfg.Has(key):
			return cfg, true
		}
		return nil, false
	}
	s.BOS, s.EOS = defaultBOS, []int{defaultEOS}
	if f, ok := pick("bos_token_id"); ok {
		if err := f.Decode(&ids); err != nil {
			return err
		}
		s.BOS = -1
		if len(ids.BOS) > 0 {
			s.BOS = ids.BOS[0]
		}
	}
	if f, ok := pick("eos_token_id"); ok {
		if err := f.Decode(&ids); err != nil {
			return err
		}
		s.EOS = ids.EOS
	}
	return nil
}

// Resolve reads a Ministral3Config: Mistral's decoder without biases, its
// window (sliding_window on every layer when set; none by default), YaRN
// by default, and the query scaling over every layer. layer_types is
// ignored, as Ministral3Config warns it is.
func Resolve(text *config.File) (llama.Options, error) {
	o, _, err := resolve(text)
	return o, err
}

// resolve is Resolve, returning the rotary parameters too (ropeParams).
func resolve(text *config.File) (llama.Options, map[string]any, error) {
	where := lm.ConfigName(text)
	var c Config
	if err := text.Decode(&c); err != nil {
		return llama.Options{}, nil, err
	}
	c.LayerTypes = nil
	resolved := *text
	params, err := ropeParams(text, lm.Or(c.MaxPositionEmbeddings, Defaults.MaxPositions))
	if err != nil {
		return llama.Options{}, nil, err
	}
	if !hasRope(text) {
		resolved.Raw = maps.Clone(text.Raw)
		resolved.Raw["rope_parameters"], _ = json.Marshal(params)
	}
	o, err := c.Resolve(&resolved, Defaults)
	if err != nil {
		return llama.Options{}, nil, err
	}
	o.QKVBias, o.OBias, o.MLPBias = false, false, false
	if err := mistral.Window(text, c.SlidingWindow, 0, nil, &o.Spec); err != nil {
		return llama.Options{}, nil, err
	}
	beta, ok := params["llama_4_scaling_beta"].(float64)
	if !ok {
		return llama.Options{}, nil, fmt.Errorf("%s: rope_parameters needs a numeric llama_4_scaling_beta (Ministral3Attention scales its queries by it)", where)
	}
	orig, ok := params["original_max_position_embeddings"].(float64)
	if !ok || orig <= 0 {
		return llama.Options{}, nil, fmt.Errorf("%s: rope_parameters needs a positive original_max_position_embeddings (Ministral3Attention's query scaling counts positions in it)", where)
	}
	if beta != 0 {
		o.TempFloor, o.TempScale, o.TempEvery = orig, beta, true
	}
	return o, params, nil
}

// hasRope reports a rope_parameters or rope_scaling object in text.
func hasRope(text *config.File) bool {
	for _, k := range []string{"rope_parameters", "rope_scaling"} {
		if v, ok := text.Raw[k]; ok && strings.TrimSpace(string(v)) != "null" {
			return true
		}
	}
	return false
}

// ropeParams is the config's rotary parameters: rope_parameters (or an
// older rope_scaling, given rope_theta from beside it), else
// Ministral3Config's default.
func ropeParams(text *config.File, maxPositions int) (map[string]any, error) {
	for _, k := range []string{"rope_parameters", "rope_scaling"} {
		p, err := nn.ParseRopeScaling(text.Raw[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", lm.ConfigName(text), k, err)
		}
		if p == nil {
			continue
		}
		if _, ok := p["rope_theta"].(float64); !ok {
			var theta *float64
			if err := json.Unmarshal(text.Raw["rope_theta"], &theta); err != nil || theta == nil {
				theta = &Defaults.RopeTheta
			}
			p["rope_theta"] = *theta
		}
		return p, nil
	}
	p := defaultRope(maxPositions)
	// Through JSON, as a config's own would read: numbers as float64.
	b, _ := json.Marshal(p)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Model is the text decoder (pipeline/llama's), reading a
// Mistral3ForConditionalGeneration checkpoint's text model when
// multimodal.
type Model struct {
	*llama.Model
	multimodal bool
	rope       map[string]any
}

// RopeParameters returns a Ministral 3 text model's rotary parameters as
// its config gives them (rope_parameters, or rope_scaling), or
// Ministral3Config's default when it gives none; nil for Mistral's text
// model, whose rotary is Options().Rope alone.
func (m *Model) RopeParameters() map[string]any { return m.rope }

var (
	_ lm.Renamer = (*Model)(nil)
	_ lm.Skipper = (*Model)(nil)
)

// conversion is Mistral3ForConditionalGeneration's text model under the
// standalone model's names: transformers v5's model.language_model.*,
// the first uploads' language_model.model.*, and the head.
var conversion = [][2]string{
	{"model.language_model.", "model."},
	{"language_model.model.", "model."},
	{"language_model.lm_head.", "lm_head."},
}

// RenameWeight implements lm.Renamer.
func (m *Model) RenameWeight(stored string) string {
	if !m.multimodal {
		return stored
	}
	return lm.RenamePrefix(stored, conversion)
}

// SkipWeight implements lm.Skipper: the multimodal class does not read
// the vision tower or the projector (under either layout's names).
func (m *Model) SkipWeight(name string) (string, bool) {
	if !m.multimodal {
		return "", false
	}
	return lm.SkipPrefixed(name, "vision tower and projector (model.vision_tower.*, model.multi_modal_projector.*): tputool runs the text model only",
		"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector.")
}
