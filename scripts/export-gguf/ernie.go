package main

import (
	"fmt"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/ernie"
	"github.com/tputool/tputool/pipeline/lm"
)

// runErnie writes an Ernie4_5_MoeForCausalLM as llama.cpp's
// "ernie4_5-moe": grouped-query attention whose rotary turns adjacent
// pairs in both (llama.cpp's NORM rope, so no rows are permuted), the
// leading dense layers' MLP, and on the sparse layers the softmax router
// with its correction bias (exp_probs_b, written [experts] from the
// release's [1, experts]), the expert stacks and the shared experts
// (expert_shared_feed_forward_length). llama.cpp reads the sparse
// blocks' tensors on every layer from leading_dense_block_count on
// (whatever interleave_moe_layer_step says), so only a model whose
// sparse layers run from one layer to the last is written.
func runErnie(l *lm.Loaded, dir, out string, m *ernie.Model) error {
	o, s, lay := m.Options(), m.Spec(), m.Layout()
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	for i := dense; i < len(o.Sparse); i++ {
		if !o.Sparse[i] {
			return fmt.Errorf("%s: layer %d is dense after a sparse one; llama.cpp's ernie4_5-moe has the sparse layers from the first dense ones to the last", dir, i)
		}
	}
	rs, err := readRope(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	if rs.factor > 1 {
		return fmt.Errorf("%s: rope_scaling; export-gguf writes ERNIE 4.5 without rope scaling", dir)
	}
	theta := ernie.Defaults.RopeTheta
	if rs.explicitTheta {
		theta = rs.theta
	}
	const a = "ernie4_5-moe."
	meta, err := header(l, dir, "ernie4_5-moe")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(theta)},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_feed_forward_length", uint32(o.Shared * o.MoEIntermediate)},
		{a + "interleave_moe_layer_step", uint32(1)},
		{a + "leading_dense_block_count", uint32(dense)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		}
		if !o.Sparse[i] {
			g.pairs(b, append(ps, denseMLP(p)...))
			continue
		}
		ps = append(ps, ggufPair{"ffn_gate_inp.weight", p + "mlp.gate.weight", true})
		if o.Shared > 0 {
			ps = append(ps, sharedExperts(p+"mlp.")...)
		}
		g.pairs(b, ps)
		g.add(b+"exp_probs_b.bias", true, p+"mlp."+lay.Bias)
		if g.err == nil {
			g.ts[len(g.ts)-1].dims = []uint64{uint64(o.Experts)} // [1, E] in the checkpoint
		}
		g.experts(b, p+"mlp.", o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, true) // llama.cpp takes token_embd for a missing output
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
