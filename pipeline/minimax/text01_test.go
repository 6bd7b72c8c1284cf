package minimax_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/minimax"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/minimaxref"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

// TestText01Config reads MiniMax-Text-01's config.json (80 layers, every
// eighth softmax attention and the rest lightning, 64 heads of 128 over
// 8 KV heads turning 64 dims, the top 2 of 32 experts of 9216, every
// residual weighed 3.5566 and 1; 456.09B parameters, the published
// 456B), the same model in the releases' own names
// (MiniMaxText01ForCausalLM, attn_type_list, the layernorm_* factors),
// MiniMaxConfig's defaults, and the refusals, naming the field.
func TestText01Config(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "minimax_text_01", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*minimax.Text01Model).Text01Options()
	if n := lmckpt.Params(m); n != 456_089_655_296 {
		t.Errorf("%d parameters, want 456,089,655,296 (the published 456B)", n)
	}
	var full []int
	for i, k := range o.Spec.LayerKinds {
		if k == lm.KindFull {
			full = append(full, i)
		} else if k != nn.KindLinearAttention {
			t.Errorf("layer %d: kind %q", i, k)
		}
	}
	const a = 3.5565588200778455
	if s := &o.Spec; len(full) != 10 || full[0] != 7 || full[9] != 79 || s.Heads != 64 || s.KVHeads != 8 || s.HeadDim != 128 || o.Rope.RotaryDim != 64 ||
		o.Experts != 32 || o.TopK != 2 || o.MoEIntermediate != 9216 || !o.NormTopK || !o.Postnorm || o.Chunk != 64 ||
		o.FullAlpha != a || o.LinearAlpha != a || o.MLPAlpha != a || o.FullBeta != 1 || o.LinearBeta != 1 || o.MLPBeta != 1 || o.Eps != 1e-5 {
		t.Errorf("full layers %v, options %+v", full, o)
	}
	names := map[string][]int{}
	for _, w := range m.LayerWeights(0) {
		names[w.Name] = w.Shape
		for _, p := range w.Parts {
			names[p.Name] = p.Shape
		}
	}
	for name, shape := range map[string][]int{
		"model.layers.0.self_attn.qkv_proj.weight":             {3 * 8192, 6144},
		"model.layers.0.self_attn.output_gate.weight":          {8192, 6144},
		"model.layers.0.self_attn.norm.weight":                 {8192},
		"model.layers.0.self_attn.out_proj.weight":             {6144, 8192},
		"model.layers.0.block_sparse_moe.gate.weight":          {32, 6144},
		"model.layers.0.block_sparse_moe.experts.31.w2.weight": {6144, 9216},
		"model.layers.0.self_attn.q_proj.weight":               nil,
	} {
		if fmt.Sprint(names[name]) != fmt.Sprint(shape) {
			t.Errorf("%s: shape %v, want %v", name, names[name], shape)
		}
	}
	if st := m.LayerState(0, 1, 64); len(st) != 1 || fmt.Sprint(st[0].Shape) != "[1 64 128 128]" || st[0].SlotAxis != lm.NoSlots {
		t.Errorf("lightning state %+v", st)
	}
	v := m.(lm.Varianter)
	if v.LayerVariant(0) == v.LayerVariant(1) || v.LayerVariant(7) != "" {
		t.Errorf("variants %q %q %q: each lightning layer's own, none for softmax", v.LayerVariant(0), v.LayerVariant(1), v.LayerVariant(7))
	}

	// The releases' names for the same model.
	orig := strings.NewReplacer(`"MiniMaxForCausalLM"`, `"MiniMaxText01ForCausalLM"`, `full_attn_alpha_factor`, `layernorm_full_attention_alpha`,
		`linear_attn_alpha_factor`, `layernorm_linear_attention_alpha`, `mlp_alpha_factor`, `layernorm_mlp_alpha`).Replace(string(raw))
	types := make([]string, 80)
	for i := range types {
		types[i] = "0"
		if (i+1)%8 == 0 {
			types[i] = "1"
		}
	}
	orig = strings.Replace(orig, `"layer_types"`, `"attn_type_list": [`+strings.Join(types, ",")+`], "old_layer_types"`, 1)
	mo, err := lm.New(lmckpt.ParseConfig(t, orig))
	if err != nil {
		t.Fatal(err)
	}
	if p := mo.(*minimax.Text01Model).Text01Options(); fmt.Sprint(p.Spec.LayerKinds) != fmt.Sprint(o.Spec.LayerKinds) || p.MLPAlpha != a || !p.Postnorm {
		t.Errorf("releases' names: %+v", p)
	}

	// MiniMaxConfig's defaults: Mixtral's sizes, softmax and lightning
	// layers in turn, the whole head turned, factors 1.
	d, err := minimax.ResolveText01(lmckpt.ParseConfig(t, `{"architectures": ["MiniMaxForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := &d.Spec; s.Hidden != 4096 || s.Layers != 32 || s.Heads != 32 || s.KVHeads != 8 || s.HeadDim != 128 || d.Rope.RotaryDim != 128 ||
		s.LayerKinds[0] != lm.KindFull || s.LayerKinds[1] != nn.KindLinearAttention || d.Experts != 8 || d.TopK != 2 || d.FullAlpha != 1 || !d.Postnorm {
		t.Errorf("defaults: %+v", d)
	}
	// The releases' architectures: no postnorm, and (as vLLM reads a
	// config without attn_type_list) every layer softmax by default; the
	// releases' slopes.
	if d, err := minimax.ResolveText01(lmckpt.ParseConfig(t, `{"architectures": ["MiniMaxM1ForCausalLM"]}`)); err != nil || d.Postnorm || !d.ReleaseSlopes ||
		d.Spec.LayerKinds[1] != lm.KindFull || d.Spec.LayerKinds[31] != lm.KindFull {
		t.Errorf("the releases' defaults: %+v, %v", d, err)
	}
	if o.ReleaseSlopes {
		t.Error("MiniMaxForCausalLM computes transformers' slopes")
	}
	mm := m.(*minimax.Text01Model)
	for name, skip := range map[string]bool{
		"model.layers.3.self_attn.slope_rate":     true,
		"model.layers.3.self_attn.diagonal_decay": true,
		"model.layers.3.self_attn.query_decay":    true,
		"model.layers.3.self_attn.norm.weight":    false,
	} {
		if _, ok := mm.SkipWeight(name); ok != skip {
			t.Errorf("%s: skipped %v, want %v", name, ok, skip)
		}
	}

	base := `"architectures": ["MiniMaxForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 32, "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 2`
	for _, bad := range []struct{ js, want string }{
		{`"shared_intermediate_size": 64`, "shared_intermediate_size 64"},
		{`"layer_types": ["full_attention", "mamba"]`, `layer_types[1] is "mamba"`},
		{`"layer_types": ["full_attention"]`, "layer_types has 1 entries for 2 layers"},
		{`"attn_type_list": [1, 2]`, "attn_type_list[1] is 2"},
		{`"attn_type_list": [1]`, "attn_type_list has 1 entries"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"rotary_dim": 3`, "rotary_dim 3"},
		{`"rotary_dim": 32`, "rotary_dim 32"},
		{`"block_size": 0`, "block_size"},
		{`"sliding_window": 128`, "sliding_window 128"},
		{`"postnorm": false`, "postnorm is false"},
	} {
		_, err := minimax.ResolveText01(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestText01LogitsMatchReference runs tiny MiniMax-Text-01s (lightning
// layers around a softmax layer turning half of each head; in
// transformers' config with postnorm, its checkpoint holding the
// lightning layers' buffers as a transformers save does, and in the
// releases' without postnorm, with 6 heads, whose ALiBi slopes differ
// from transformers', and a tied head) on a left-padded batch of two
// prompts, the longer over three lightning chunks, plus decode steps,
// with each experts formulation, compiled and eager, on the go and cpu
// backends (moecheck.Run), against minimaxref's float64 forward; and in
// bfloat16 compute.
func TestText01LogitsMatchReference(t *testing.T) {
	prompts := [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50, 2, 8, 31, 44, 12, 6, 22, 35}}
	const steps = 6
	for _, c := range []struct {
		name string
		mm   minimaxref.MiniMax
	}{{"hf", minimaxref.Tiny()}, {"original", minimaxref.TinyOriginal()}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.mm.Write)
			rm, err := c.mm.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			moecheck.Run(t, "", l, rm, prompts, refcheck.GreedySequences(rm, prompts, steps), steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
		})
	}
}

// TestText01SwitchesMatter: a reference that turns every dim of the
// softmax layer's heads (transformers' MiniMaxConfig's reading), gives
// every lightning layer the first layer's decays, or adds the stream
// before each norm despite postnorm, differs; and for the releases'
// architecture with 6 heads, one with transformers' slopes.
func TestText01SwitchesMatter(t *testing.T) {
	prompt := []int{1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}
	load := func(c minimaxref.MiniMax) (*minimaxref.Model, []float32, func(func(*minimaxref.Model)) func([]int) [][]float64) {
		dir, l := lmckpt.WriteLoad(t, c.Write)
		rm, err := c.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return rm, moecheck.Prefill(t, l, prompt)[0], func(f func(*minimaxref.Model)) func([]int) [][]float64 {
			m := *rm
			f(&m)
			return m.Logits
		}
	}
	rm, got, mutant := load(minimaxref.Tiny())
	refcheck.Discriminates(t, got, prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "every dim turned", Logits: mutant(func(m *minimaxref.Model) { m.WholeRotary = true })},
		refcheck.Mutant{Name: "one layer's decays everywhere", Logits: mutant(func(m *minimaxref.Model) { m.FlatSlopes = true })},
		refcheck.Mutant{Name: "no postnorm", Logits: mutant(func(m *minimaxref.Model) { m.NoPostnorm = true })})
	rm, got, mutant = load(minimaxref.TinyOriginal())
	refcheck.Discriminates(t, got, prompt, rm.Logits, 1e-3,
		refcheck.Mutant{Name: "transformers' slopes", Logits: mutant(func(m *minimaxref.Model) { m.PowerSlopes = true })})
}
