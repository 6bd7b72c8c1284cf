package main

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/jamba"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runJamba writes a JambaForCausalLM as llama.cpp's "jamba", as
// convert_hf_to_gguf.py writes it: head_count_kv 0 on the Mamba layers
// (which tells them apart), the mixer's tensors as llama.cpp's mamba
// reads them plus ssm_dt_norm, ssm_b_norm and ssm_c_norm, q and k as
// stored (no rotary), the experts stacked with the router as
// ffn_gate_inp. llama.cpp reads no in_proj or out_proj biases and takes
// conv1d's.
func runJamba(l *lm.Loaded, dir, out string, m *jamba.Model) error {
	o := m.JambaOptions()
	s, d := o.Spec, o.Mamba
	switch {
	case o.ProjBias || !o.ConvBias:
		return fmt.Errorf("%s: llama.cpp's jamba reads no in_proj or out_proj biases and takes conv1d's (mamba_proj_bias false, mamba_conv_bias true)", dir)
	case d.Inner != 2*s.Hidden:
		return fmt.Errorf("%s: mamba_expand × hidden_size = %d; llama.cpp's jamba takes mamba_expand 2 only", dir, d.Inner)
	case s.Heads*s.HeadDim != s.Hidden:
		return fmt.Errorf("%s: num_attention_heads %d × head_dim %d must be hidden_size %d for llama.cpp's jamba", dir, s.Heads, s.HeadDim, s.Hidden)
	}
	experts, used := o.Experts, o.TopK
	if !slices.Contains(o.Sparse, true) { // dense everywhere: llama.cpp checks used <= count
		experts, used = 0, 0
	}
	const a = "jamba."
	meta, err := header(l, dir, "jamba")
	if err != nil {
		return err
	}
	kvHeads := kvHeadsBut(&s, nn.KindMamba1)
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", kvHeads},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "ssm.conv_kernel", uint32(d.ConvKernel)},
		{a + "ssm.inner_size", uint32(d.Inner)},
		{a + "ssm.state_size", uint32(d.State)},
		{a + "ssm.time_step_rank", uint32(d.Rank)},
		{a + "expert_count", uint32(experts)},
		{a + "expert_used_count", uint32(used)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	neg := func(x float32) float32 { return -float32(math.Exp(float64(x))) }
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.add(b+"attn_norm.weight", true, p+"input_layernorm.weight")
		if s.LayerKinds[i] == nn.KindMamba1 {
			mp := p + "mamba."
			g.add(b+"ssm_in.weight", false, mp+"in_proj.weight")
			g.addF32(b+"ssm_conv1d.weight", mp+"conv1d.weight", []uint64{uint64(d.ConvKernel), uint64(d.Inner)}, nil)
			g.add(b+"ssm_conv1d.bias", true, mp+"conv1d.bias")
			g.add(b+"ssm_x.weight", false, mp+"x_proj.weight")
			g.add(b+"ssm_dt_norm.weight", true, mp+"dt_layernorm.weight")
			g.add(b+"ssm_dt.weight", false, mp+"dt_proj.weight")
			g.add(b+"ssm_dt.bias", true, mp+"dt_proj.bias")
			g.add(b+"ssm_b_norm.weight", true, mp+"b_layernorm.weight")
			g.add(b+"ssm_c_norm.weight", true, mp+"c_layernorm.weight")
			g.addF32(b+"ssm_a", mp+"A_log", []uint64{uint64(d.State), uint64(d.Inner)}, neg)
			g.add(b+"ssm_d", true, mp+"D")
			g.add(b+"ssm_out.weight", false, mp+"out_proj.weight")
		} else {
			g.add(b+"attn_q.weight", false, p+"self_attn.q_proj.weight")
			g.add(b+"attn_k.weight", false, p+"self_attn.k_proj.weight")
			g.add(b+"attn_v.weight", false, p+"self_attn.v_proj.weight")
			g.add(b+"attn_output.weight", false, p+"self_attn.o_proj.weight")
		}
		g.add(b+"ffn_norm.weight", true, p+"pre_ff_layernorm.weight")
		f := p + "feed_forward."
		if o.Sparse[i] {
			g.add(b+"ffn_gate_inp.weight", true, f+"router.weight")
			g.experts(b, f, o.Experts, lm.QwenExperts)
		} else {
			g.pairs(b, []ggufPair{{"ffn_gate.weight", f + "gate_proj.weight", false}, {"ffn_up.weight", f + "up_proj.weight", false}, {"ffn_down.weight", f + "down_proj.weight", false}})
		}
	}
	g.add("output_norm.weight", true, "model.final_layernorm.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
