package gemma3

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/lm"
)

func load(t *testing.T, cfg *config.File) *Model {
	t.Helper()
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*Model)
}

func TestGemma3_1BConfig(t *testing.T) {
	cfg, err := config.ReadModel("testdata/gemma-3-1b-it.config.json")
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, cfg)
	s := m.Spec()
	if s.Hidden != 1152 || s.Heads != 4 || s.KVHeads != 1 || s.HeadDim != 256 || s.Layers != 26 || s.VocabSize != 262144 ||
		!s.TieEmbeddings || s.SlidingWindow != 512 || !slices.Equal(s.EOS, []int{1, 106}) || s.BOS != 2 {
		t.Fatalf("spec %+v", s)
	}
	var global []int
	for i, k := range s.LayerKinds {
		if k == lm.KindFull {
			global = append(global, i)
		}
	}
	if !slices.Equal(global, []int{5, 11, 17, 23}) {
		t.Errorf("global layers %v", global)
	}
	if m.scale != 1.0/16 || m.attnSoftcap != 0 || m.finalSoftcap != 0 || m.eps != 1e-6 {
		t.Errorf("scale %v softcaps %v %v eps %v", m.scale, m.attnSoftcap, m.finalSoftcap, m.eps)
	}
	if g, l := m.global.InvFreq[1], m.local.InvFreq[1]; math.Abs(g-math.Pow(1e6, -2.0/256)) > 1e-15 || math.Abs(l-math.Pow(1e4, -2.0/256)) > 1e-15 {
		t.Errorf("rope bases: global %g local %g", g, l)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = true
	}
	for _, n := range []string{"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight"} {
		if !names["model.layers.0."+n] {
			t.Errorf("missing %s", n)
		}
	}
}

func TestGemma3RopeScalingOnGlobalOnly(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"num_hidden_layers":6,
		"rope_scaling":{"rope_type":"linear","factor":8.0},"rope_theta":1000000,"rope_local_base_freq":10000}`))
	m := load(t, cfg)
	if want := math.Pow(1e6, -2.0/256) / 8; math.Abs(m.global.InvFreq[1]-want) > 1e-18 {
		t.Errorf("global inv_freq %g, want %g", m.global.InvFreq[1], want)
	}
	if m.local.Type != "default" {
		t.Errorf("local rope %s", m.local.Type)
	}
	// transformers v5 spelling: per-layer-type rope_parameters.
	cfg, _ = config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"num_hidden_layers":6,
		"layer_types":["sliding_attention","sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention"],
		"rope_parameters":{"full_attention":{"rope_type":"linear","factor":8.0,"rope_theta":1000000.0},
		"sliding_attention":{"rope_type":"default","rope_theta":10000.0}}}`))
	m = load(t, cfg)
	if want := math.Pow(1e6, -2.0/256) / 8; math.Abs(m.global.InvFreq[1]-want) > 1e-18 || m.local.InvFreq[1] != math.Pow(1e4, -2.0/256) {
		t.Errorf("rope_parameters: global %g local %g", m.global.InvFreq[1], m.local.InvFreq[1])
	}
	if m.Spec().LayerKinds[5] != lm.KindFull || m.Spec().LayerKinds[0] != lm.KindSliding {
		t.Errorf("kinds %v", m.Spec().LayerKinds)
	}
}

func TestGemma3Unsupported(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Gemma3ForCausalLM"],"use_bidirectional_attention":true}`))
	if _, err := lm.New(cfg); err == nil {
		t.Error("bidirectional attention accepted")
	}
}

// TestGemma3_4BConfig reads gemma-3-4b-it's config.json, whose
// text_config names few fields: Gemma3TextConfig's defaults fill the rest
// (vocab_size 262208, 8 heads, 4 KV heads, head_dim 256,
// query_pre_attn_scalar 256, rope_theta 1e6, rope_local_base_freq 1e4,
// sliding_window_pattern 6, no soft-capping), and the eos ids come from
// the top level.
func TestGemma3_4BConfig(t *testing.T) {
	cfg, err := config.ReadModel("testdata/gemma-3-4b-it.config.json")
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, cfg)
	s := m.Spec()
	if s.Architecture != Conditional || s.Hidden != 2560 || s.Intermediate != 10240 || s.Layers != 34 || s.Heads != 8 || s.KVHeads != 4 ||
		s.HeadDim != 256 || s.VocabSize != 262208 || s.MaxPositions != 131072 || !s.TieEmbeddings || s.SlidingWindow != 1024 ||
		!slices.Equal(s.EOS, []int{1, 106}) || s.BOS != 2 {
		t.Fatalf("spec %+v", s)
	}
	var global []int
	for i, k := range s.LayerKinds {
		if k == lm.KindFull {
			global = append(global, i)
		}
	}
	if !slices.Equal(global, []int{5, 11, 17, 23, 29}) {
		t.Errorf("global layers %v", global)
	}
	if m.scale != 1.0/16 || m.attnSoftcap != 0 || m.finalSoftcap != 0 || m.eps != 1e-6 {
		t.Errorf("scale %v softcaps %v %v eps %v", m.scale, m.attnSoftcap, m.finalSoftcap, m.eps)
	}
	if g, l := m.global.InvFreq[1], m.local.InvFreq[1]; math.Abs(g-math.Pow(1e6, -2.0/256)/8) > 1e-18 || math.Abs(l-math.Pow(1e4, -2.0/256)) > 1e-15 {
		t.Errorf("rope: global %g (linear 8 on 1e6) local %g (1e4)", g, l)
	}
	if w := m.EmbedWeights()[0]; w.Name != "model.language_model.embed_tokens.weight" || !slices.Equal(w.Shape, []int{262208, 2560}) {
		t.Errorf("embedding %s %v", w.Name, w.Shape)
	}
	if h := m.HeadWeights(); h[0].Name != "model.language_model.norm.weight" || h[1].Name != "model.language_model.embed_tokens.weight" {
		t.Errorf("head weights %s, %s", h[0].Name, h[1].Name)
	}
	if n := m.LayerWeights(33)[0].Name; n != "model.language_model.layers.33.input_layernorm.weight" {
		t.Errorf("layer weight %s", n)
	}
	for stored, want := range map[string]string{
		"language_model.model.layers.0.mlp.up_proj.weight":      "model.language_model.layers.0.mlp.up_proj.weight",
		"language_model.lm_head.weight":                         "lm_head.weight",
		"vision_tower.vision_model.post_layernorm.weight":       "model.vision_tower.vision_model.post_layernorm.weight",
		"multi_modal_projector.mm_input_projection_weight":      "model.multi_modal_projector.mm_input_projection_weight",
		"model.language_model.layers.0.mlp.up_proj.weight":      "model.language_model.layers.0.mlp.up_proj.weight",
		"model.vision_tower.vision_model.post_layernorm.weight": "model.vision_tower.vision_model.post_layernorm.weight",
	} {
		if got := m.RenameWeight(stored); got != want {
			t.Errorf("RenameWeight(%s) = %s, want %s", stored, got, want)
		}
	}
	for _, n := range []string{"vision_tower.vision_model.post_layernorm.weight", "model.multi_modal_projector.mm_soft_emb_norm.weight"} {
		if _, skip := m.SkipWeight(n); !skip {
			t.Errorf("%s not skipped", n)
		}
	}
	if _, skip := m.SkipWeight("model.language_model.norm.weight"); skip {
		t.Error("text weight skipped")
	}
}

// TestGemma3ConditionalConfig: the text_config's own token ids and
// tie_word_embeddings win over the top level's, the top level's fill in
// for absent ones, final_logit_softcapping is not applied (transformers'
// Gemma3ForConditionalGeneration does not soft-cap its logits), and a
// config without text_config is refused.
func TestGemma3ConditionalConfig(t *testing.T) {
	cfg, _ := config.ParseModel([]byte(`{"architectures":["Gemma3ForConditionalGeneration"],"eos_token_id":[1,106],"bos_token_id":5,
		"tie_word_embeddings":false,"text_config":{"num_hidden_layers":6,"eos_token_id":7,"final_logit_softcapping":30.0}}`))
	m := load(t, cfg)
	if s := m.Spec(); !slices.Equal(s.EOS, []int{7}) || s.BOS != 5 || s.TieEmbeddings || m.finalSoftcap != 0 {
		t.Errorf("eos %v bos %d tied %v final softcap %v", s.EOS, s.BOS, s.TieEmbeddings, m.finalSoftcap)
	}
	if m.HeadWeights()[1].Name != "lm_head.weight" {
		t.Errorf("untied head %s", m.HeadWeights()[1].Name)
	}
	cfg, _ = config.ParseModel([]byte(`{"architectures":["Gemma3ForConditionalGeneration"],"text_config":{"num_hidden_layers":6}}`))
	if s := load(t, cfg).Spec(); !slices.Equal(s.EOS, []int{1}) || s.BOS != 2 || !s.TieEmbeddings {
		t.Errorf("defaults: eos %v bos %d tied %v", s.EOS, s.BOS, s.TieEmbeddings)
	}
	cfg, _ = config.ParseModel([]byte(`{"architectures":["Gemma3ForConditionalGeneration"],"hidden_size":64}`))
	if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("no text_config: %v", err)
	}
	cfg, _ = config.ParseModel([]byte(`{"architectures":["Gemma3ForConditionalGeneration"],"text_config":{"use_bidirectional_attention":true}}`))
	if _, err := lm.New(cfg); err == nil || !strings.Contains(err.Error(), "text_config") {
		t.Errorf("bidirectional text_config: %v", err)
	}
}
