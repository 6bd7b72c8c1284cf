// Package qwen3vl runs the text model of Qwen3-VL: the dense
// Qwen3VLForConditionalGeneration (Qwen3-VL-2B, 4B, 8B, 32B) and the
// mixture of experts Qwen3VLMoeForConditionalGeneration (Qwen3-VL-30B-A3B,
// 235B-A22B), following transformers' models/qwen3_vl and
// models/qwen3_vl_moe, on text-only input:
//
//   - The text model (text_config) is Qwen3's (pipeline/qwen3: per-head
//     q/k norms) or Qwen3-MoE's (pipeline/qwen3moe: a softmax router's
//     top num_experts_per_tok, decoder_sparse_step and mlp_only_layers),
//     its tensors model.language_model.* (read as model.*, lm.Renamer).
//   - Its rotary embedding is multimodal (rope_scaling's mrope_section,
//     interleaved): time, height and width positions each rotate their
//     own frequencies. A text token has the same position on all three
//     axes, so every frequency turns by the same angle as in the plain
//     rotary embedding of rope_theta, which is what runs.
//   - The vision tower (model.visual.*, its deepstack mergers among it)
//     is not read: images are not supported. Deepstack adds visual
//     features to the first layers' hidden states at image tokens only,
//     so text is unchanged without them.
//   - The MoE releases store each layer's experts fused and transposed
//     (Qwen3VLMoeTextExperts): mlp.experts.gate_up_proj [E, hidden, 2I]
//     (each expert's gate columns, then its up columns) and
//     mlp.experts.down_proj [E, I, hidden]; they are read transposed into
//     Qwen3-MoE's stacks (lm.WeightSpec.Transposed); the experts run in
//     the graph only (lm.InGraphExperts: --experts host and dense read
//     each expert apart, which a transposed stack does not allow).
//   - tie_word_embeddings is text_config's, else the wrapper's; other
//     fields text_config leaves out take its classes' defaults
//     (textDefaults), and the MoE's router always renormalizes its top k
//     (Qwen3VLMoeTextTopKRouter reads no norm_topk_prob).
//
// Qwen3-Omni's thinker (omni.go) is Qwen3-VL-MoE's text model with its
// experts held apart.
package qwen3vl

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// The architectures this package runs.
const (
	Dense = "Qwen3VLForConditionalGeneration"
	MoE   = "Qwen3VLMoeForConditionalGeneration"
)

func init() {
	lm.Register(Dense, New)
	lm.Register(MoE, New)
}

// textPrefix is the text model's tensor prefix in the releases, read as
// the Qwen3 models' model.*.
const textPrefix = "model.language_model."

// New builds the text model of a Qwen3-VL or Qwen3-VL-MoE config.json
// (from its text_config).
func New(cfg *config.File) (lm.Model, error) {
	where := lm.ConfigName(cfg)
	if cfg.Text == nil {
		return nil, fmt.Errorf("%s: %s needs a text_config object", where, cfg.Architecture())
	}
	moe := cfg.Architecture() == MoE
	text := withDefaults(cfg, moe)
	textTie, wrapperTie, err := ties(cfg)
	if err != nil {
		return nil, err
	}
	var m lm.Model
	if moe {
		o, err := qwen3moe.Resolve(text)
		if err != nil {
			return nil, err
		}
		o.NormTopK = true // Qwen3VLMoeTextTopKRouter renormalizes whatever norm_topk_prob says
		m = &MoEModel{qwen3moe.NewModel(o)}
	} else {
		d, err := qwen3.New(text)
		if err != nil {
			return nil, err
		}
		m = &DenseModel{d.(*llama.Model)}
	}
	s := m.Spec()
	s.Architecture = cfg.Architecture()
	if textTie == nil && wrapperTie != nil { // the wrapper's field decides when text_config has none
		s.TieEmbeddings = *wrapperTie
	}
	return m, nil
}

// textDefaults are the text configs' defaults (Qwen3VLTextConfig,
// Qwen3VLMoeTextConfig) where they differ from Qwen3's and Qwen3-MoE's,
// which the text model is built with: a field text_config leaves out
// takes them. num_key_value_heads defaults to num_attention_heads and the
// MoE's head_dim to hidden_size/num_attention_heads (both set by
// withDefaults).
var textDefaults = map[bool]map[string]any{
	false: {"hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32, "num_attention_heads": 32,
		"head_dim": 128, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "rope_theta": 5e6},
	true: {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
		"num_attention_heads": 16, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6, "rope_theta": 5e5,
		"decoder_sparse_step": 1, "moe_intermediate_size": 1408, "num_experts_per_tok": 4, "num_experts": 60},
}

// withDefaults is the wrapper's text_config with textDefaults for the
// fields it leaves out, named in errors as the wrapper's text_config and
// with the wrapper's architecture.
func withDefaults(cfg *config.File, moe bool) *config.File {
	text := *cfg.Text
	text.Path = lm.ConfigName(cfg) + " text_config"
	text.Architectures = cfg.Architectures
	text.Raw = maps.Clone(cfg.Text.Raw)
	set := func(k string, v any) {
		if raw, ok := text.Raw[k]; !ok || string(raw) == "null" {
			text.Raw[k], _ = json.Marshal(v)
		}
	}
	for k, v := range textDefaults[moe] {
		set(k, v)
	}
	var heads, hidden int
	_ = json.Unmarshal(text.Raw["num_attention_heads"], &heads)
	_ = json.Unmarshal(text.Raw["hidden_size"], &hidden)
	set("num_key_value_heads", heads)
	if moe && heads > 0 {
		set("head_dim", hidden/heads)
	}
	return &text
}

// ties reads tie_word_embeddings from text_config and from the wrapper
// (each nil when absent).
func ties(cfg *config.File) (text, wrapper *bool, err error) {
	var t, w struct {
		Tie *bool `json:"tie_word_embeddings"`
	}
	if err := cfg.Text.Decode(&t); err != nil {
		return nil, nil, err
	}
	if err := cfg.Decode(&w); err != nil {
		return nil, nil, err
	}
	return t.Tie, w.Tie, nil
}

// renameText is lm.Renamer's rename of both models: the release's
// model.language_model.* is the Qwen3 model's model.*.
func renameText(stored string) string {
	if rest, ok := strings.CutPrefix(stored, textPrefix); ok {
		return "model." + rest
	}
	return stored
}

// skipVision is lm.Skipper's skip of both models: the vision tower.
func skipVision(name string) (string, bool) {
	if strings.HasPrefix(name, "model.visual.") {
		return "vision tower (model.visual.*): tputool runs the text model only", true
	}
	return "", false
}

// DenseModel is Qwen3-VL's text model: Qwen3's decoder in the release's
// names.
type DenseModel struct{ *llama.Model }

// RenameWeight implements lm.Renamer.
func (m *DenseModel) RenameWeight(stored string) string { return renameText(stored) }

// SkipWeight implements lm.Skipper.
func (m *DenseModel) SkipWeight(name string) (string, bool) { return skipVision(name) }

// MoEModel is Qwen3-VL-MoE's text model: Qwen3-MoE's decoder in the
// release's names, its expert stacks read transposed.
type MoEModel struct{ *qwen3moe.Model }

// RenameWeight implements lm.Renamer.
func (m *MoEModel) RenameWeight(stored string) string { return renameText(stored) }

// SkipWeight implements lm.Skipper.
func (m *MoEModel) SkipWeight(name string) (string, bool) { return skipVision(name) }

// LayerWeights implements lm.Model: Qwen3-MoE's, the expert stacks
// marked as stored transposed ([E, hidden, 2I] and [E, I, hidden]).
func (m *MoEModel) LayerWeights(i int) []lm.WeightSpec {
	ws := m.Model.LayerWeights(i)
	for k, w := range ws {
		if strings.HasSuffix(w.Name, ".experts.gate_up_proj") || strings.HasSuffix(w.Name, ".experts.down_proj") {
			ws[k].Transposed = true
		}
	}
	return ws
}

// InGraphExperts implements lm.InGraphExperts: the one-by-one
// formulations (--experts host, dense) read each expert apart, which a
// transposed stack does not allow (the model keeps its Routed form, for
// the graph's routing).
func (m *MoEModel) InGraphExperts() string {
	return "its checkpoint stores each layer's experts fused and transposed, which cannot be read one by one"
}

var (
	_ lm.InGraphExperts = (*MoEModel)(nil)
	_ lm.Renamer        = (*DenseModel)(nil)
	_ lm.Skipper        = (*DenseModel)(nil)
	_ lm.Renamer        = (*MoEModel)(nil)
	_ lm.Skipper        = (*MoEModel)(nil)
	_ lm.Routed         = (*MoEModel)(nil)
)
