package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/bailing"
	"github.com/tputool/tputool/pipeline/lm"
)

// runBailing writes a BailingMoeV2ForCausalLM (Ling 2.0) as llama.cpp's
// "bailingmoe2": the fused q/k/v projection (attn_qkv, no bias), the
// per-head q/k norms, attn_output (no bias), the leading dense layers'
// MLP, and on the sparse layers the sigmoid router with its correction
// bias (exp_probs_b), the expert stacks and the shared experts. The
// rotary is NEOX (rotate-half) over rope.dimension_count dims, as Ling's
// partial rotary, so no rows are permuted. The group limit is
// expert_group_count and expert_group_used_count, which llama.cpp's
// build_moe_ffn applies for every architecture, closing the other groups
// with −∞ as Ling's gate does. llama.cpp splits the fused projection at
// hidden_size rows, so heads × head_dim other than hidden_size is
// refused.
func runBailing(l *lm.Loaded, dir, out string, m *bailing.Model) error {
	o, s, lay := m.Options(), m.Spec(), m.Layout()
	const arch = "bailingmoe2"
	switch {
	case o.QKVBias || o.OBias:
		return fmt.Errorf("%s: use_qkv_bias or use_bias is true; llama.cpp's %s reads no attention biases", dir, arch)
	case !o.QKNorm:
		return fmt.Errorf("%s: use_qk_norm is false; llama.cpp's %s requires the q/k norms", dir, arch)
	case s.Heads*s.HeadDim != s.Hidden:
		return fmt.Errorf("%s: %d heads of %d make %d, not hidden_size %d; llama.cpp's %s splits the fused projection at hidden_size", dir, s.Heads, s.HeadDim, s.Heads*s.HeadDim, s.Hidden, arch)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes %s without it", dir, o.Rope.Type, arch)
	}
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	if dense == len(o.Sparse) {
		return fmt.Errorf("%s: no sparse layer; llama.cpp's %s needs experts", dir, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_feed_forward_length", uint32(o.MoEIntermediate)}, // llama.cpp multiplies it by expert_shared_count
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))},
		{a + "rope.dimension_count", uint32(o.Rope.RotaryDim)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_shared_count", uint32(o.Shared)},
		{a + "leading_dense_block_count", uint32(dense)},
		{a + "expert_weights_scale", float32(o.RoutedScale)},
		{a + "expert_weights_norm", o.NormTopK},
		{a + "expert_gating_func", uint32(2)}, // sigmoid
		{a + "nextn_predict_layers", uint32(0)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	if o.Groups > 1 && o.TopKGroup < o.Groups { // llama.cpp asserts fewer used groups than groups
		meta = append(meta, kv{a + "expert_group_count", uint32(o.Groups)}, kv{a + "expert_group_used_count", uint32(o.TopKGroup)})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		block := p + lay.Block + "."
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_qkv.weight", p + "self_attn.qkv_proj.weight", false},
			{"attn_q_norm.weight", p + "self_attn.q_norm.weight", true},
			{"attn_k_norm.weight", p + "self_attn.k_norm.weight", true},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		}
		if !o.Sparse[i] {
			g.pairs(b, append(ps, denseMLP(p)...))
			continue
		}
		ps = append(ps, ggufPair{"ffn_gate_inp.weight", block + "gate.weight", true}, ggufPair{"exp_probs_b.bias", block + lay.Bias, true})
		if o.Shared > 0 {
			ps = append(ps, sharedExperts(block)...)
		}
		g.pairs(b, ps)
		g.experts(b, block, o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
