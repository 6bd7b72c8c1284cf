package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/arctic"
	"github.com/tputool/tputool/pipeline/lm"
)

// runArctic writes an ArcticForCausalLM as llama.cpp's "arctic": Llama's
// attention tensors with q and k permuted to adjacent pairs (llama.cpp
// rotates arctic's heads as LLaMA's, rope type NORM), the residual MLP
// as ffn_gate/up/down on ffn_norm (residual_layernorm), and the experts
// on ffn_norm_exps (post_attention_layernorm) of the layer's input, as
// llama.cpp's graph runs them beside the attention (feed_forward_length
// the experts' width). llama.cpp's graph runs that layer on every layer,
// so a sequential block and dense layers are refused; it divides the top
// weights by their sum as Arctic's code does.
func runArctic(l *lm.Loaded, dir, out string, m *arctic.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "arctic"
	for i, sparse := range o.Sparse {
		if !sparse {
			return fmt.Errorf("%s: layer %d is dense; llama.cpp's %s runs experts on every layer (moe_layer_frequency 1)", dir, i, arch)
		}
	}
	switch {
	case !m.Parallel:
		return fmt.Errorf("%s: use_residual is false; llama.cpp's %s runs the experts beside the attention with the residual MLP", dir, arch)
	case o.QKVBias || o.OBias || o.Rope.RotaryDim != s.HeadDim || o.Rope.Type != "default" || s.Heads*s.HeadDim != s.Hidden:
		return fmt.Errorf("%s: export-gguf writes %s without attention biases or rope scaling, the rotary over whole heads", dir, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, kv{a + "expert_count", uint32(o.Experts)}, kv{a + "expert_used_count", uint32(o.TopK)})
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{{"attn_norm.weight", p + "input_layernorm.weight", true}})
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, []ggufPair{
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "residual_layernorm.weight", true},
			{"ffn_gate.weight", p + "residual_mlp.w1.weight", false},
			{"ffn_up.weight", p + "residual_mlp.w3.weight", false},
			{"ffn_down.weight", p + "residual_mlp.w2.weight", false},
			{"ffn_norm_exps.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_gate_inp.weight", p + "block_sparse_moe.gate.weight", true},
		})
		g.experts(b, p+"block_sparse_moe.", o.Experts, lm.MixtralExperts)
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
