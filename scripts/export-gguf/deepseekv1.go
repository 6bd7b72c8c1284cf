package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/deepseekv1"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// runDeepseekV1 writes a DeepseekForCausalLM (deepseek-moe-16b) as
// llama.cpp's "deepseek", as its converter writes it: Llama's attention
// tensors with q and k permuted to adjacent pairs (llama.cpp rotates
// deepseek's heads as LLaMA's, rope type NORM), the first
// leading_dense_block_count layers' dense MLPs, then on every layer the
// router, the expert stacks and the shared experts (the _shexp tensors:
// llama.cpp requires them), expert_weights_scale 1. llama.cpp's graph
// never divides the top weights (norm_w false) and reads a sparse block
// on every layer past the dense ones, so norm_topk_prob with more than
// one expert, moe_layer_freq other than 1 and no shared experts are
// refused.
func runDeepseekV1(l *lm.Loaded, dir, out string, m *qwen3moe.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "deepseek"
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	for i := dense; i < len(o.Sparse); i++ {
		if !o.Sparse[i] {
			return fmt.Errorf("%s: layer %d is dense after a sparse one; llama.cpp's %s reads dense layers first only (moe_layer_freq 1)", dir, i, arch)
		}
	}
	switch {
	case o.Experts == 0:
		return fmt.Errorf("%s: no routed experts; write a dense DeepSeek as a Llama", dir)
	case o.NormTopK:
		return fmt.Errorf("%s: norm_topk_prob is true; llama.cpp's %s never divides the top weights", dir, arch)
	case o.SharedIntermediate == 0:
		return fmt.Errorf("%s: no shared experts; llama.cpp's %s requires them", dir, arch)
	case o.QKVBias || o.OBias || o.Rope.RotaryDim != s.HeadDim || o.Rope.Type != "default" || s.Heads*s.HeadDim != s.Hidden:
		return fmt.Errorf("%s: export-gguf writes %s without attention biases or rope scaling, the rotary over whole heads", dir, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "leading_dense_block_count", uint32(dense)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_count", uint32(o.SharedIntermediate / o.MoEIntermediate)},
		{a + "expert_weights_scale", float32(1)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	lay := deepseekv1.Layout
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{{"attn_norm.weight", p + "input_layernorm.weight", true}})
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, []ggufPair{
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		})
		if i < dense {
			g.pairs(b, denseMLP(p))
			continue
		}
		block := p + lay.Block + "."
		g.pairs(b, append([]ggufPair{{"ffn_gate_inp.weight", block + "gate.weight", true}}, sharedExperts(block)...))
		g.experts(b, block, o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
