package main

import (
	"fmt"
	"math"
	"os"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mamba"
)

// runMamba writes a MambaForCausalLM or FalconMambaForCausalLM as
// llama.cpp's "mamba" (FalconMamba with ssm.dt_b_c_rms), as
// convert_hf_to_gguf.py writes them: the convolution squeezed to {K,
// inner}, A = -exp(A_log) as ssm_a, a context of 2^20 and no heads.
// llama.cpp takes expand 2 only, reads no in_proj or out_proj biases,
// always adds conv1d's, and norms FalconMamba's dt, B and C with
// layer_norm_epsilon (not mixer_rms_eps): such models are refused, and
// a FalconMamba whose two eps differ is written with a note.
func runMamba(l *lm.Loaded, dir, out string, m *mamba.Model) error {
	o := m.Options()
	s, d := o.Spec, o.Mamba
	switch {
	case d.Inner != 2*s.Hidden:
		return fmt.Errorf("%s: intermediate_size %d; llama.cpp's mamba takes expand 2 only", dir, d.Inner)
	case l.Config.Raw["hidden_act"] != nil && string(l.Config.Raw["hidden_act"]) != `"silu"`:
		return fmt.Errorf("%s: hidden_act %s; llama.cpp's mamba runs SiLU", dir, l.Config.Raw["hidden_act"])
	case o.ProjBias || !o.ConvBias:
		return fmt.Errorf("%s: llama.cpp's mamba reads no in_proj or out_proj biases and takes conv1d's (use_bias false, use_conv_bias true)", dir)
	}
	if o.RMSEps > 0 && o.RMSEps != o.Eps {
		fmt.Fprintf(os.Stderr, "note: llama.cpp norms dt, B and C with layer_norm_epsilon %g, not mixer_rms_eps %g\n", o.Eps, o.RMSEps)
	}
	const a = "mamba."
	meta, err := header(l, dir, "mamba")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(1 << 20)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(0)},
		{a + "attention.head_count", uint32(0)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "ssm.conv_kernel", uint32(d.ConvKernel)},
		{a + "ssm.inner_size", uint32(d.Inner)},
		{a + "ssm.state_size", uint32(d.State)},
		{a + "ssm.time_step_rank", uint32(d.Rank)},
		{a + "ssm.dt_b_c_rms", o.RMSEps > 0},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "backbone.embeddings.weight")
	neg := func(x float32) float32 { return -float32(math.Exp(float64(x))) }
	for i := range s.Layers {
		p, b := fmt.Sprintf("backbone.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		mp := p + "mixer."
		g.add(b+"attn_norm.weight", true, p+"norm.weight")
		g.add(b+"ssm_in.weight", false, mp+"in_proj.weight")
		g.addF32(b+"ssm_conv1d.weight", mp+"conv1d.weight", []uint64{uint64(d.ConvKernel), uint64(d.Inner)}, nil)
		g.add(b+"ssm_conv1d.bias", true, mp+"conv1d.bias")
		g.add(b+"ssm_x.weight", false, mp+"x_proj.weight")
		g.add(b+"ssm_dt.weight", false, mp+"dt_proj.weight")
		g.add(b+"ssm_dt.bias", true, mp+"dt_proj.bias")
		g.addF32(b+"ssm_a", mp+"A_log", []uint64{uint64(d.State), uint64(d.Inner)}, neg)
		g.add(b+"ssm_d", true, mp+"D")
		g.add(b+"ssm_out.weight", false, mp+"out_proj.weight")
	}
	g.add("output_norm.weight", true, "backbone.norm_f.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// runMamba2 writes a Mamba2ForCausalLM as llama.cpp's "mamba2": attn_norm
// (the block's norm), the mixer's tensors as runGraniteHybrid writes them
// (g.mamba2), output_norm, and output unless tied. llama.cpp normalizes
// the gated output per group where transformers takes the whole width,
// so only one group is written; it reads no in_proj or out_proj biases
// and always adds conv1d's, and clamps no dt (time_step_limit other than
// transformers' default is refused).
func runMamba2(l *lm.Loaded, dir, out string, m *mamba.Mamba2Model) error {
	o := m.Options()
	s, d := o.Spec, o.Mamba
	switch {
	case d.Groups != 1:
		return fmt.Errorf("%s: n_groups %d; llama.cpp normalizes the gated output per group, transformers over the whole width, so export-gguf writes one group only", dir, d.Groups)
	case o.ProjBias || !o.ConvBias:
		return fmt.Errorf("%s: llama.cpp's mamba2 reads no in_proj or out_proj biases and takes conv1d's (use_bias false, use_conv_bias true)", dir)
	case o.Mixer.DtMin > 0 || o.Mixer.DtMax > 0:
		return fmt.Errorf("%s: time_step_limit clamps dt; llama.cpp's mamba2 does not", dir)
	}
	const a = "mamba2."
	meta, err := header(l, dir, "mamba2")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(1 << 20)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(0)},
		{a + "attention.head_count", uint32(0)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
	}...)
	meta = append(meta, mamba2Meta(a, d)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "backbone.embeddings.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("backbone.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.add(b+"attn_norm.weight", true, p+"norm.weight")
		g.mamba2(b, p+"mixer.", d)
	}
	g.add("output_norm.weight", true, "backbone.norm_f.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
