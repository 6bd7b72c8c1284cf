package qwen3vl_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	_ "github.com/tputool/tputool/pipeline/qwen3"
	"github.com/tputool/tputool/pipeline/qwen3vl"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 90, 77, 6, 31, 44}}

// toVL rewrites the Qwen3 (or Qwen3-MoE) checkpoint in src as a
// Qwen3-VL release holds it, into dst: the tensors under
// model.language_model.*, the expert stacks transposed ([E, hidden, 2I],
// [E, I, hidden]), a vision tower beside them; config.json the wrapper
// arch with the text model's config as text_config (model_type
// textType, the multimodal rope_scaling, no tie_word_embeddings) and the
// tie on the wrapper.
func toVL(t *testing.T, src, dst, arch, modelType, textType string) {
	t.Helper()
	ck, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []lmckpt.F32Tensor
	for _, name := range ck.Names() {
		v, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		shape, _ := ck.Shape(name)
		if strings.HasSuffix(name, ".experts.gate_up_proj") || strings.HasSuffix(name, ".experts.down_proj") {
			e, r, c := shape[0], shape[1], shape[2]
			tr := make([]float32, len(v))
			for k := 0; k < e; k++ {
				for i := 0; i < r; i++ {
					for j := 0; j < c; j++ {
						tr[k*r*c+j*r+i] = v[k*r*c+i*c+j]
					}
				}
			}
			v, shape = tr, []int{e, c, r}
		}
		ts = append(ts, lmckpt.F32Tensor{Name: strings.Replace(name, "model.", "model.language_model.", 1), Shape: shape, Values: v})
	}
	ts = append(ts, lmckpt.F32Tensor{Name: "model.visual.patch_embed.proj.weight", Shape: []int{4, 3}, Values: make([]float32, 12)},
		lmckpt.F32Tensor{Name: "model.visual.deepstack_merger_list.0.norm.weight", Shape: []int{4}, Values: make([]float32, 4)})
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var text map[string]any
	if err := json.Unmarshal(raw, &text); err != nil {
		t.Fatal(err)
	}
	tie := text["tie_word_embeddings"]
	delete(text, "architectures")
	delete(text, "tie_word_embeddings")
	text["model_type"] = textType
	text["rope_scaling"] = map[string]any{"rope_type": "default", "mrope_section": []int{4, 2, 2}, "mrope_interleaved": true}
	cfg := map[string]any{"architectures": []string{arch}, "model_type": modelType, "text_config": text,
		"vision_config": map[string]any{"depth": 1, "hidden_size": 4}, "tie_word_embeddings": tie,
		"image_token_id": 90, "video_token_id": 91, "vision_start_token_id": 92, "vision_end_token_id": 93}
	if err := lmckpt.WriteF32(dst, cfg, map[string]any{"bos_token_id": 1, "eos_token_id": 2}, ts); err != nil {
		t.Fatal(err)
	}
}

// tinyVLMoE writes qwenref's tiny Qwen3-MoE, its experts stacked, into
// src and as a Qwen3-VL-MoE release holds it (toVL) into dst.
func tinyVLMoE(t *testing.T) (c qwenref.MoE, src, dst string) {
	t.Helper()
	c = qwenref.TinyQwen3MoE()
	c.Stacked = true
	src, dst = t.TempDir(), t.TempDir()
	if err := c.Write(src); err != nil {
		t.Fatal(err)
	}
	toVL(t, src, dst, qwen3vl.MoE, "qwen3_vl_moe", "qwen3_vl_moe_text")
	return c, src, dst
}

// TestMoEMatchesReference: a tiny Qwen3-VL-MoE in the release's layout
// (the text model under model.language_model.*, the experts fused and
// transposed, a vision tower beside it) runs text as Qwen3-MoE does:
// within 1e-4 of qwenref's float64 Qwen3-MoE on the same weights, every
// experts formulation, go and cpu, compiled and eager; the vision tower is
// skipped by name.
func TestMoEMatchesReference(t *testing.T) {
	c, src, dst := tinyVLMoE(t)
	rm, err := qwenref.LoadMoE(src, c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lmckpt.Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Model.Spec().Architecture; got != qwen3vl.MoE {
		t.Errorf("architecture %q", got)
	}
	if reason, skipped := lm.SkipReason(l.Model, "model.visual.patch_embed.proj.weight"); !skipped || !strings.Contains(reason, "vision tower") {
		t.Errorf("the vision tower: skipped %v (%q)", skipped, reason)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, 4), 4, 1e-4)
}

// TestDenseMatchesQwen3: a tiny Qwen3-VL (dense) in the release's layout
// gives the logits of the Qwen3ForCausalLM it was written from, exactly,
// its head tied by the wrapper's tie_word_embeddings (text_config has
// none, and Qwen3's default is untied).
func TestDenseMatchesQwen3(t *testing.T) {
	base := lmckpt.Config{Vocab: 96, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 16, Eps: 1e-6,
		QKNorm: true, Tied: true, RopeTheta: []float64{5e6, 5e6, 5e6}, Window: []int{0, 0, 0}}
	src, dst := t.TempDir(), t.TempDir()
	if err := (lmckpt.Tiny{Arch: "Qwen3ForCausalLM", Config: base, Seed: 8}).Write(src); err != nil {
		t.Fatal(err)
	}
	toVL(t, src, dst, qwen3vl.Dense, "qwen3_vl", "qwen3_vl_text")
	plain, err := lmckpt.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	vl, err := lmckpt.Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer vl.Close()
	if !vl.Model.Spec().TieEmbeddings {
		t.Error("the wrapper's tie_word_embeddings true was not read")
	}
	for _, p := range prompts {
		want, got := moecheck.Prefill(t, plain, p), moecheck.Prefill(t, vl, p)
		for i := range want[0] {
			if want[0][i] != got[0][i] {
				t.Fatalf("prompt %v: logit %d is %g, Qwen3's %g", p, i, got[0][i], want[0][i])
			}
		}
	}
}

// TestNeedsTextConfig: a Qwen3-VL config without text_config is refused,
// naming it.
func TestNeedsTextConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["Qwen3VLMoeForConditionalGeneration"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := lmckpt.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "needs a text_config") {
		t.Errorf("error %v, want one naming text_config", err)
	}
}

// TestHostExpertsRefused: --experts host and dense, which read each
// expert apart, are refused naming the graph formulation.
func TestHostExpertsRefused(t *testing.T) {
	_, _, dst := tinyVLMoE(t)
	l, err := lmckpt.Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, mode := range []compile.ExpertsMode{compile.ExpertsHost, compile.ExpertsDense} {
		_, err := compile.NewRunner(refcheck.GoBackend(t), l, compile.Options{Mode: compile.Compiled, Experts: mode})
		if err == nil || !strings.Contains(err.Error(), "fused and transposed") {
			t.Errorf("--experts %s: error %v, want one saying why", mode, err)
		}
	}
}

// TestTextDefaults: a text_config's absent fields take the Qwen3-VL text
// configs' defaults (num_key_value_heads as many as the heads, the MoE's
// 60 experts of 1408, top 4, head_dim hidden/heads, rope_theta 5e5), and
// the MoE router renormalizes its top k whatever norm_topk_prob says, as
// Qwen3VLMoeTextTopKRouter does.
func TestTextDefaults(t *testing.T) {
	cfg, err := config.ParseModel([]byte(`{"architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
		"text_config": {"model_type": "qwen3_vl_moe_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "norm_topk_prob": false}}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*qwen3vl.MoEModel).Options()
	if s := o.Spec; s.KVHeads != 4 || s.HeadDim != 16 || s.MaxPositions != 128000 || s.Intermediate != 5632 {
		t.Errorf("spec %+v", s)
	}
	if o.Experts != 60 || o.TopK != 4 || o.MoEIntermediate != 1408 || !o.NormTopK {
		t.Errorf("experts %d, top %d, width %d, renormalized %v; want 60, 4, 1408, true", o.Experts, o.TopK, o.MoEIntermediate, o.NormTopK)
	}
	if theta := math.Pow(o.Rope.InvFreq[1], -float64(o.Rope.RotaryDim)/2); math.Abs(theta/5e5-1) > 1e-9 {
		t.Errorf("rope theta %g, want 5e5", theta)
	}
	if a := m.Spec().Architecture; a != qwen3vl.MoE {
		t.Errorf("architecture %q", a)
	}
}
