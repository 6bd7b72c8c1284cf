package zamba2_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
	"github.com/tputool/tputool/pipeline/zamba2"
)

var prompts = [][]int{{1, 7, 21, 33, 4}, {1, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs two tiny Zamba2s (2.7B-shaped: two
// shared blocks taken in turn by four hybrid layers, MLP adapters; and
// 1.2B-shaped: one block, the rotary, q/k/v adapters) on a left-padded
// batch over several SSD chunks and decode steps, compiled and eager, on
// the go and cpu backends, against zamba2ref's float64 forward; in
// bfloat16 within a few percent; and references with the attention scaled
// by head_dim^-½, the original embeddings first, the block picked by the
// layer's index or a residual in the block differ.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 5
	for name, c := range map[string]zamba2ref.Config{"2.7B-like": zamba2ref.Tiny(), "1.2B-like": zamba2ref.TinyRope()} {
		t.Run(name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.Write)
			rm, err := c.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			mut := func(set func(*zamba2ref.Config)) func([]int) [][]float64 {
				mc := c
				set(&mc)
				return (&zamba2ref.Model{C: mc, W: rm.W}).Logits
			}
			p := prompts[1]
			muts := []refcheck.Mutant{
				{Name: "attention scaled by head_dim^-½", Logits: mut(func(c *zamba2ref.Config) { c.ScaleByHeadDim = true })},
				{Name: "the original embeddings first", Logits: mut(func(c *zamba2ref.Config) { c.OrigFirst = true })},
				{Name: "a residual around the block's attention", Logits: mut(func(c *zamba2ref.Config) { c.ResidualInBlock = true })},
			}
			if c.Blocks > 1 {
				muts = append(muts, refcheck.Mutant{Name: "the block picked by the layer's index", Logits: mut(func(c *zamba2ref.Config) { c.BlockByLayer = true })})
			}
			refcheck.Discriminates(t, moecheck.Prefill(t, l, p)[0], p, rm.Logits, 1e-3, muts...)
		})
	}
}

// TestConfig: Zamba2Config's defaults (Zamba2-2.7B: 54 layers, hybrid at
// 6, 12, …, 42, 47 and 51, attention heads of 160), each hybrid layer
// naming its block under the block's first layer and its own adapter
// slot, the releases' parameter counts, and the refusals.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Zamba2ForCausalLM"], "n_mamba_heads": 80}`))
	if err != nil {
		t.Fatal(err)
	}
	z := m.(*zamba2.Model)
	o := z.Options()
	if want := []int{6, 12, 18, 24, 30, 36, 42, 47, 51}; len(o.Hybrid) != len(want) || o.Hybrid[8] != 51 || o.Hybrid[6] != 42 {
		t.Errorf("hybrid layers %v, want %v", o.Hybrid, want)
	}
	if o.AttnHeadDim != 160 || o.Mamba.HeadDim != 64 || o.Blocks != 1 || o.Spec.Intermediate != 4*2560 {
		t.Errorf("defaults: %+v", o)
	}
	m, err = lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Zamba2ForCausalLM"], "n_mamba_heads": 80, "num_mem_blocks": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, w := range m.LayerWeights(47) { // ordinal 7: block 1, stored under layer 12
		names[w.Name] = true
	}
	for _, want := range []string{"model.layers.12.shared_transformer.self_attn.q_proj.weight", "model.layers.12.shared_transformer.feed_forward.gate_up_proj_adapter_list.7.1.weight", "model.layers.47.linear.weight", "model.layers.47.mamba_decoder.mamba.in_proj.weight"} {
		if !names[want] {
			t.Errorf("layer 47 does not list %s", want)
		}
	}
	// Zamba2-2.7B's config (two blocks, no attention adapters): 2,662,214,560
	// parameters, the card's 2.7B (each shared block and adapter counted
	// once); Zamba2-1.2B's (one block, the rotary and q/k/v adapters,
	// hybrid layers 5, 11, …, 35 of 38): 1,215,064,704, its 1.2B.
	if n := lmckpt.Params(m); n != 2_662_214_560 {
		t.Errorf("Zamba2-2.7B: %d parameters", n)
	}
	types := make([]string, 38)
	for i := range types {
		types[i] = `"mamba"`
		if i%6 == 5 {
			types[i] = `"hybrid"`
		}
	}
	small, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Zamba2ForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 38, "n_mamba_heads": 64,
		"mamba_d_state": 128, "use_mem_rope": true, "use_shared_attention_adapter": true, "layers_block_type": [`+strings.Join(types, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(small); n != 1_215_064_704 {
		t.Errorf("Zamba2-1.2B: %d parameters", n)
	}
	for _, c := range []struct{ js, want string }{
		{`"num_attention_heads": 7`, "num_attention_heads 7"},
		{`"n_mamba_heads": 7`, "n_mamba_heads 7"},
		{`"layers_block_type": ["mamba", "g"], "num_hidden_layers": 2`, `layers_block_type[1] is "g"`},
		{`"layers_block_type": ["mamba"]`, "layers_block_type has 1 entries"},
		{`"use_shared_attention_adapter": true, "num_key_value_heads": 8`, "use_shared_attention_adapter"},
		{`"use_long_context": true`, "use_long_context"},
		{`"hidden_act": "silu"`, "hidden_act"},
		{`"num_mem_blocks": 0`, "num_mem_blocks"},
		{`"time_step_limit": [0.001, 0.1]`, "time_step_limit"},
		{`"use_mem_rope": true, "rope_parameters": {"rope_type": "linear", "factor": 2.0}`, "rope_type"},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["Zamba2ForCausalLM"], "n_mamba_heads": 80, `+c.js+`}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.js, err, c.want)
		}
	}
}
