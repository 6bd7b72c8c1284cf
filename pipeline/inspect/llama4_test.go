package inspect_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/inspect"
	_ "github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
)

// TestLlama4Scout inspects Llama 4 Scout's config over a checkpoint in
// the release's layout: the text model under language_model.*, each
// layer's experts two stacks stored transposed, and a vision tower and
// projector, which are skipped and named in a note. 107.8B parameters
// read (109B with the tower), about 17B active, and a KV cache of 8
// heads of 128 a layer.
func TestLlama4Scout(t *testing.T) {
	dir, model := realConfig(t, "llama4_scout")
	var rel released
	var params int64
	for _, w := range lm.Weights(model) {
		shape := w.Sources(func(string) bool { return true })[0].Shape // the stacks stored transposed
		name := "language_model." + w.Name
		rel.names = append(rel.names, name)
		if rel.shapes == nil {
			rel.shapes = map[string][]int{}
		}
		rel.shapes[name] = shape
		params += elements(shape)
	}
	for name, shape := range map[string][]int{
		"vision_model.patch_embedding.linear.weight":        {1408, 588},
		"vision_model.model.layers.0.mlp.fc1.weight":        {5632, 1408},
		"multi_modal_projector.linear_1.weight":             {5120, 4096},
		"vision_model.vision_adapter.mlp.fc1.weight":        {4096, 5632},
		"vision_model.model.layers.0.self_attn.q_proj.bias": {1408},
	} {
		rel.names = append(rel.names, name)
		rel.shapes[name] = shape
	}
	r := rel.inspect(t, dir, inspect.Options{Batch: 1, Context: 32768, DType: "bf16"})
	if b := float64(params) / 1e9; b < 107.5 || b > 108.2 || r.Params.Used != params {
		t.Errorf("parameters %d (%.4gB), used %d; want about 107.8B, all used", params, b, r.Params.Used)
	}
	if a := float64(r.Params.Active) / 1e9; a < 16.5 || a > 17.5 {
		t.Errorf("active %.3gB, want about 17B", a)
	}
	if r.Text.KVHeads != 8 || r.Text.HeadDim != 128 || r.Text.MoE == nil || r.Text.MoE.Experts != 16 || r.Text.MoE.ExpertsPerToken != 1 {
		t.Errorf("text %+v, MoE %+v", r.Text, r.Text.MoE)
	}
	// 48 layers × 8 heads × 128 × K and V × 2 bytes × 32768.
	if want := int64(48 * 8 * 128 * 2 * 2 * 32768); r.Memory.KVCache != want {
		t.Errorf("KV cache %d, want %d", r.Memory.KVCache, want)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "vision") {
		t.Errorf("notes %q: want one naming the skipped vision tower", r.Notes)
	}
	t.Logf("%.2fB, active %.2fB (%.2fB less the input embedding), weights %d GiB in bf16, KV at 32768 %d MiB; notes %q", float64(params)/1e9,
		float64(r.Params.Active)/1e9, float64(r.Params.ActiveLessEmbedding)/1e9, r.Memory.Weights>>30, r.Memory.KVCache>>20, r.Notes)
}
