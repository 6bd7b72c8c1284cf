package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
	"github.com/tputool/tputool/pipeline/smallthinker"
)

// runSmallThinker writes a SmallThinkerForCausalLM as llama.cpp's
// "smallthinker": Llama's attention tensors, the router (on the layer's
// input in llama.cpp's graph too) as ffn_gate_inp, the ReGLU experts'
// stacks, expert_gating_func softmax (1) or sigmoid (2). llama.cpp fixes
// the layer layouts: with a sliding_window key, a window of 4096 on every
// layer but each fourth (from the first), which is a NoPE layer;
// without, full attention with the rotary everywhere. A config with
// other layouts is refused. The rotary is NEOX (rotate-half): no rows
// are permuted.
func runSmallThinker(l *lm.Loaded, dir, out string, m *qwen3moe.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "smallthinker"
	swa := s.SlidingWindow > 0
	for i := range s.Layers {
		sliding, nope := s.LayerKinds[i] == lm.KindSliding, i < len(o.NoRope) && o.NoRope[i]
		if swa && (sliding != (i%4 != 0) || nope != (i%4 == 0) || s.SlidingWindow != 4096) || !swa && nope {
			return fmt.Errorf("%s: layer %d's window and rotary are not llama.cpp's smallthinker layouts (a window of 4096 on every layer but each fourth, which is NoPE; or none and the rotary everywhere)", dir, i)
		}
	}
	if swa && s.Layers == 4 {
		// llama.cpp rotates every layer when n_layer equals its NoPE step,
		// 4 (the test it uses for "no NoPE layers").
		return fmt.Errorf("%s: 4 layers with windows; llama.cpp's smallthinker would rotate the NoPE layer (its step of 4 equals n_layer)", dir)
	}
	if o.Rope.RotaryDim != s.HeadDim || o.Rope.Type != "default" {
		return fmt.Errorf("%s: export-gguf writes %s with the default rotary over whole heads", dir, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	gating := uint32(1) // softmax
	if o.SigmoidRouter {
		gating = 2
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_gating_func", gating},
	}...)
	if swa {
		meta = append(meta, kv{a + "attention.sliding_window", uint32(s.SlidingWindow)})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	lay := smallthinker.Layout
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		block := p + lay.Block + "."
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_gate_inp.weight", block + lay.Router, true},
		})
		g.experts(b, block, o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
