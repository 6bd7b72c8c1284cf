package deepseek_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// tinyDots is dsref's GLM-4.5 with q/k norms in dots.llm1's switches:
// whole heads rotated, no attention biases; with mha, as many KV heads as
// query heads (the release's), one group and the top k renormalized.
func tinyDots(mha bool) dsref.GLM {
	c := dsref.TinyGLMQKNorm()
	c.PartialRotary, c.Seed = 1, 60
	if mha {
		c.KVHeads, c.Groups, c.TopKGroup, c.Tied, c.Seed = c.Heads, 1, 1, false, 61
	}
	return c
}

// writeDots writes c as a Dots1ForCausalLM: the same tensors, the config
// under that class, without GLM's use_qk_norm and partial_rotary_factor
// (dots.llm1 always norms and rotates whole heads).
func writeDots(c dsref.GLM, dir string) error {
	if err := c.Write(dir); err != nil {
		return err
	}
	cfg, err := lmckpt.ReadConfig(dir)
	if err != nil {
		return err
	}
	cfg["architectures"], cfg["model_type"] = []string{"Dots1ForCausalLM"}, "dots1"
	delete(cfg, "use_qk_norm")
	delete(cfg, "partial_rotary_factor")
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

// TestDotsLogitsMatchReference runs tiny dots.llm1s (grouped-query, 4
// groups of which 2 are open, a routed scale, a tied head; and
// multi-head, one group, untied) on a left-padded batch of two prompts
// plus decode steps, with each experts formulation, compiled and eager,
// on the go and cpu backends, against dsref's GLM-4.5 with per-head q/k
// norms and whole heads rotated, which is dots.llm1 (Qwen3's attention
// before DeepSeek-V3's mixture of experts).
func TestDotsLogitsMatchReference(t *testing.T) {
	const steps = 6
	for _, c := range []struct {
		name string
		mha  bool
	}{{"gqa-groups", false}, {"mha", true}} {
		t.Run(c.name, func(t *testing.T) {
			g := tinyDots(c.mha)
			dir, l := lmckpt.WriteLoad(t, func(dir string) error { return writeDots(g, dir) })
			if l.Config.Architecture() != "Dots1ForCausalLM" {
				t.Fatalf("loaded as %s", l.Config.Architecture())
			}
			rm, err := g.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
		})
	}
}

// TestDotsConfig reads Dots1Config's defaults (with the three fields it
// leaves unset), dots.llm1's sizes (142B), the sliding layers from
// max_window_layers, and refuses what the class cannot be.
func TestDotsConfig(t *testing.T) {
	d, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Dots1ForCausalLM"], "n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Spec; s.Hidden != 4608 || s.Heads != 32 || s.KVHeads != 32 || s.HeadDim != 144 || s.VocabSize != 152064 || d.NormTopK ||
		s.Layers != 62 || d.Eps != 1e-6 || s.MaxPositions != 2048 || s.Intermediate != 10944 || d.MoEIntermediate != 1408 ||
		d.RoutedScale != 1 || !d.QKNorm || d.QKVBias || d.Sparse[0] != true || s.SlidingWindow != 0 || !d.GQA {
		t.Errorf("Dots1Config's defaults: %+v", d)
	}
	// dots.llm1: hidden 4096, 62 layers, 32 heads of 128, 128 experts of
	// 1408, top 6, 2 shared, the first layer dense.
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Dots1ForCausalLM"], "hidden_size": 4096, "intermediate_size": 10944,
		"num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "n_routed_experts": 128,
		"num_experts_per_tok": 6, "n_shared_experts": 2, "first_k_dense_replace": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
		"sliding_window": null, "vocab_size": 152064}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n/1e9 != 142 {
		t.Errorf("dots.llm1: %d parameters, want 142B", n)
	}
	// The release's router fields (scoring_func "noaux_tc", null groups),
	// which transformers does not read, and a null window with
	// max_window_layers 1: no sliding layers.
	r, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Dots1ForCausalLM"], "num_hidden_layers": 3, "hidden_size": 64,
		"num_attention_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "scoring_func": "noaux_tc",
		"topk_method": "noaux_tc", "n_group": null, "topk_group": null, "sliding_window": null, "max_window_layers": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Groups != 1 || r.TopKGroup != 1 || r.Spec.SlidingWindow != 0 || fmt.Sprint(r.Spec.LayerKinds) != "[full_attention full_attention full_attention]" {
		t.Errorf("release-shaped config: %+v", r)
	}
	w, err := deepseek.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["Dots1ForCausalLM"], "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
		"n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "sliding_window": 16, "max_window_layers": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.Spec.LayerKinds) != "[full_attention full_attention sliding_attention sliding_attention]" || w.Spec.SlidingWindow != 16 {
		t.Errorf("sliding layers %v, window %d", w.Spec.LayerKinds, w.Spec.SlidingWindow)
	}
	base := `"architectures": ["Dots1ForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4`
	for _, bad := range []struct{ js, want string }{
		{`"num_experts_per_tok": 2, "n_shared_experts": 1`, "n_routed_experts is missing"},
		{`"n_routed_experts": 8, "n_shared_experts": 1`, "num_experts_per_tok is missing"},
		{`"n_routed_experts": 8, "num_experts_per_tok": 2`, "n_shared_experts is missing"},
		{`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "partial_rotary_factor": 0.5`, "partial rotary"},
		{`"n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "layer_types": ["full_attention", "sliding_attention"], "sliding_window": null`, "no sliding_window"},
	} {
		_, err := deepseek.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
