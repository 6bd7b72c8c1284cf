package ernie_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/ernie"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/ernieref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestVLLogitsMatchReference runs a tiny ERNIE 4.5 VL in the Hub's
// layout (routers stored transposed, a correction bias row a modality,
// vision experts after the text ones, a vision tower and resampler) as
// its text model, with each experts formulation, compiled and eager, on
// the go and cpu backends, against ernieref's float64 forward, and in
// bfloat16 compute; and checks that a reference routing with the vision
// row of the bias, or through the vision router, differs.
func TestVLLogitsMatchReference(t *testing.T) {
	const steps = 6
	c := ernieref.TinyErnieVL()
	dir, l := lmckpt.WriteLoad(t, c.Write)
	rm, err := c.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
	t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))

	swapped := func(tensor func(l int) (text, vision string, n int)) *ernieref.Model {
		w := map[string][]float64{}
		for k, v := range rm.W {
			w[k] = v
		}
		for layer := 0; layer < c.Layers; layer++ {
			if !c.Sparse(layer) {
				continue
			}
			text, vision, n := tensor(layer)
			if text == vision {
				row := append([]float64(nil), w[text]...)
				copy(row[:n], w[text][n:])
				w[text] = row
				continue
			}
			w[text] = w[vision]
		}
		return &ernieref.Model{C: rm.C, W: w}
	}
	visionBias := swapped(func(l int) (string, string, int) {
		n := fmt.Sprintf("model.layers.%d.mlp.moe_statics.e_score_correction_bias", l)
		return n, n, c.Experts
	})
	visionRouter := swapped(func(l int) (string, string, int) {
		p := fmt.Sprintf("model.layers.%d.mlp.gate.weight", l)
		return p, p + "_1", 0
	})
	prompt := prompts[1]
	refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "the vision row of the bias", Logits: visionBias.Logits},
		refcheck.Mutant{Name: "the vision router", Logits: visionRouter.Logits})
}

// TestVLConfig reads transformers' ERNIE 4.5 VL config (text_config with
// mlp_layer_types, moe_intermediate_size a list, the 3D rope's
// rope_parameters, the wrapper's tied head) and refuses malformed lists,
// naming the field.
func TestVLConfig(t *testing.T) {
	parse := func(js string) *config.File {
		cfg, err := config.ParseModel([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	m, err := lm.New(parse(`{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "model_type": "ernie4_5_vl_moe",
		"text_config": {"model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
		"num_attention_heads": 20, "num_key_value_heads": 4, "moe_num_experts": 64, "moe_k": 6, "moe_intermediate_size": [1536, 512],
		"moe_num_shared_experts": 2, "mlp_layer_types": ["dense"` + strings.Repeat(`, "sparse"`, 27) + `], "vocab_size": 103424,
		"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [22, 22, 20]}, "rms_norm_eps": 1e-5},
		"vision_config": {"depth": 32}}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*ernie.VLModel).Options()
	if s := m.Spec(); o.Experts != 64 || o.TopK != 6 || o.MoEIntermediate != 1536 || o.Shared != 2 || o.Sparse[0] || !o.Sparse[27] ||
		!s.TieEmbeddings || s.HeadDim != 128 || s.Architecture != ernie.VLArch {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	t.Logf("ERNIE-4.5-VL-28B-A3B's text model: %.2fB parameters", float64(lmckpt.Params(m))/1e9)

	// The release's layout of the same model: per-modality lists, the
	// ends past the last layer ([29, 28]: every layer from 1 sparse), no
	// moe_num_shared_experts (none, as transformers' converter reads it).
	rel, err := ernie.ResolveVL(parse(`{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "num_hidden_layers": 28,
		"hidden_size": 2560, "num_attention_heads": 20, "num_key_value_heads": 4, "moe_num_experts": [64, 64], "moe_k": 6,
		"moe_intermediate_size": [1536, 512], "moe_layer_start_index": [1, 1], "moe_layer_end_index": [29, 28], "moe_layer_interval": 1}`))
	if err != nil || rel.Sparse[0] || !rel.Sparse[1] || !rel.Sparse[27] || rel.Shared != 0 || !rel.RopeF32 || !rel.RopeTablesF32 {
		t.Errorf("the release's config: %+v, %v", rel, err)
	}
	for _, bad := range []struct{ js, want string }{
		{`"moe_num_experts": []`, "moe_num_experts"},
		{`"moe_intermediate_size": ["a"]`, "moe_intermediate_size"},
		{`"mlp_layer_types": ["dense"]`, "mlp_layer_types has 1 entries"},
		{`"mlp_layer_types": ["dense", "moe"]`, `mlp_layer_types[1] is "moe"`},
		{`"moe_layer_start_index": [1, 0], "moe_layer_end_index": [1, 1]`, "are not all the sparse layers"},
	} {
		_, err := ernie.ResolveVL(parse(`{"architectures": ["Ernie4_5_VLMoeForConditionalGeneration"], "num_hidden_layers": 2, "hidden_size": 64,
			"num_attention_heads": 4, "num_key_value_heads": 2, "moe_num_experts": [8, 8], "moe_k": 2, ` + bad.js + `}`))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
