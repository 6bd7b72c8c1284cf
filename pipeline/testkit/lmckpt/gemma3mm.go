package lmckpt

import (
	"fmt"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// Gemma3Layout is how a Gemma3ForConditionalGeneration checkpoint names
// its tensors.
type Gemma3Layout int

const (
	// Gemma3Original is the first uploads' layout (google/gemma-3-4b-it,
	// 12b-it, 27b-it): language_model.model.*, language_model.lm_head.weight
	// (when untied), vision_tower.*, multi_modal_projector.*.
	Gemma3Original Gemma3Layout = iota
	// Gemma3Saved is what transformers saves since the class holds a
	// Gemma3Model: model.language_model.*, lm_head.weight (when untied),
	// model.vision_tower.*, model.multi_modal_projector.*.
	Gemma3Saved
)

func (l Gemma3Layout) String() string {
	if l == Gemma3Original {
		return "original"
	}
	return "saved"
}

// names returns the layout's prefixes for the text model, the head, the
// vision tower and the projector.
func (l Gemma3Layout) names() (text, head, vision, projector string) {
	if l == Gemma3Original {
		return "language_model.model.", "language_model.lm_head.weight", "vision_tower.", "multi_modal_projector."
	}
	return "model.language_model.", "lm_head.weight", "model.vision_tower.", "model.multi_modal_projector."
}

// Gemma3Multimodal describes t, a Gemma3ForCausalLM, as the
// Gemma3ForConditionalGeneration checkpoint that holds the same text
// model: config.json with t's config as text_config (less the token ids,
// which Gemma3Config holds at the top level as the real ones do) and a
// SigLIP vision_config; the same tensors with the same values as t.Write,
// named as layout names them, plus a few vision-tower and projector
// tensors.
func (t Tiny) Gemma3Multimodal(layout Gemma3Layout) (map[string]any, []safetensors.Tensor, error) {
	if t.Arch != "Gemma3ForCausalLM" {
		return nil, nil, fmt.Errorf("lmckpt: Gemma3Multimodal of a %s", t.Arch)
	}
	text := t.ConfigJSON()
	for _, k := range []string{"architectures", "torch_dtype", "bos_token_id", "eos_token_id"} {
		delete(text, k)
	}
	cfg := map[string]any{
		"architectures":       []string{"Gemma3ForConditionalGeneration"},
		"model_type":          "gemma3",
		"boi_token_index":     t.Config.Vocab - 2,
		"eoi_token_index":     t.Config.Vocab - 1,
		"image_token_index":   t.Config.Vocab,
		"mm_tokens_per_image": 4,
		"bos_token_id":        1,
		"eos_token_id":        []int{2},
		"torch_dtype":         "float32",
		"text_config":         text,
		"vision_config": map[string]any{
			"model_type": "siglip_vision_model", "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2,
			"num_hidden_layers": 1, "image_size": 8, "patch_size": 4, "vision_use_head": false,
		},
	}
	ts, err := t.encoded()
	if err != nil {
		return nil, nil, err
	}
	textPrefix, head, vision, projector := layout.names()
	for i := range ts {
		if ts[i].Name == "lm_head.weight" {
			ts[i].Name = head
		} else {
			ts[i].Name = textPrefix + strings.TrimPrefix(ts[i].Name, "model.")
		}
	}
	r := NewRand(t.Seed + 1)
	for _, w := range []Tensor{
		{vision + "vision_model.embeddings.patch_embedding.weight", []int{8, 3, 4, 4}, "linear"},
		{vision + "vision_model.embeddings.position_embedding.weight", []int{4, 8}, "embed"},
		{vision + "vision_model.post_layernorm.weight", []int{8}, "norm"},
		{projector + "mm_input_projection_weight", []int{8, t.Config.Hidden}, "linear"},
		{projector + "mm_soft_emb_norm.weight", []int{8}, "norm"},
	} {
		st, err := safetensors.Float32Tensor(w.Name, safetensors.F32, w.Shape, t.values(r, w))
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		ts = append(ts, st)
	}
	return cfg, ts, nil
}

// WriteGemma3Multimodal writes t as a Gemma3ForConditionalGeneration
// checkpoint in layout (Gemma3Multimodal) to dir.
func (t Tiny) WriteGemma3Multimodal(dir string, layout Gemma3Layout) error {
	cfg, ts, err := t.Gemma3Multimodal(layout)
	if err != nil {
		return err
	}
	return WriteCheckpoint(dir, cfg, ts)
}
