package main

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/afmoe"
	"github.com/tputool/tputool/pipeline/lm"
)

// runAfmoe writes an AfmoeForCausalLM as llama.cpp's "afmoe": per layer
// attn_norm and post_attention_norm (the sandwich around the attention),
// attn_q, attn_k, attn_v, attn_q_norm, attn_k_norm, attn_gate (the
// output's sigmoid gate) and attn_output; ffn_norm (pre_mlp_layernorm)
// and post_ffw_norm; the leading dense layers' MLP, or ffn_gate_inp (the
// router), exp_probs_b (expert_bias), the expert stacks and the shared
// experts. The keys give the sigmoid gating (expert_gating_func 2), the
// renormalized weights times route_scale (expert_weights_norm,
// expert_weights_scale) and the window. The rotary turns halves
// (llama.cpp's NEOX rope for afmoe), so no rows are permuted.
//
// llama.cpp's afmoe fixes what the config may vary, so a model is
// written only where they agree: the embeddings always scaled by
// sqrt(hidden_size) (mup_enabled), every fourth layer full attention
// without the rotary embedding and the others within the window (its
// sliding-window pattern and no-rope step of 4, whatever layer_types
// says), no rope scaling.
func runAfmoe(l *lm.Loaded, dir, out string, m *afmoe.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case o.EmbedScale != math.Sqrt(float64(s.Hidden)):
		return fmt.Errorf("%s: mup_enabled is false; llama.cpp's afmoe always scales the embeddings by sqrt(hidden_size)", dir)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes afmoe without it", dir, o.Rope.Type)
	}
	for i, k := range s.LayerKinds {
		if full := (i+1)%4 == 0; full != (k == lm.KindFull) {
			return fmt.Errorf("%s: layer %d is %s; llama.cpp's afmoe has three sliding-window layers, then one full-attention layer, throughout", dir, i, k)
		}
	}
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	theta, err := ropeTheta(filepath.Join(dir, "config.json"), afmoe.Defaults.RopeTheta)
	if err != nil {
		return err
	}
	const a = "afmoe."
	meta, err := header(l, dir, "afmoe")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, theta, s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "attention.sliding_window", uint32(s.SlidingWindow)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_count", uint32(o.SharedExperts)},
		{a + "expert_gating_func", uint32(2)}, // sigmoid
		{a + "expert_weights_norm", true},
		{a + "expert_weights_scale", float32(o.RouteScale)},
		{a + "leading_dense_block_count", uint32(dense)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_q_norm.weight", p + "self_attn.q_norm.weight", true},
			{"attn_k_norm.weight", p + "self_attn.k_norm.weight", true},
			{"attn_gate.weight", p + "self_attn.gate_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"post_attention_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_norm.weight", p + "pre_mlp_layernorm.weight", true},
			{"post_ffw_norm.weight", p + "post_mlp_layernorm.weight", true},
		}
		if !o.Sparse[i] {
			g.pairs(b, append(ps, denseMLP(p)...))
			continue
		}
		ps = append(ps, ggufPair{"ffn_gate_inp.weight", p + "mlp.router.gate.weight", true}, ggufPair{"exp_probs_b.bias", p + "mlp.expert_bias", true})
		if o.Shared > 0 {
			ps = append(ps, sharedExperts(p+"mlp.")...)
		}
		g.pairs(b, ps)
		g.experts(b, p+"mlp.", o.Experts, lm.QwenExperts)
	}
	g.final(s.TieEmbeddings, true) // llama.cpp's afmoe takes token_embd for a missing output
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
