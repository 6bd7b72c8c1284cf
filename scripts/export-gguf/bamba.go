package main

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/bamba"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runBamba writes a BambaForCausalLM as llama.cpp's "granitehybrid", as
// its convert_hf_to_gguf.py does (GraniteHybridModel takes both
// classes): no multipliers, the rotary on (rope.scaling.finetuned true)
// over rope.dimension_count = the rotary's width (attn_rotary_emb, half of
// each head), rope.freq_base; attention.head_count_kv 0 on the Mamba-2
// layers; the Mamba-2 tensors as runGraniteHybrid writes them;
// feed_forward's gate_proj, up_proj and down_proj as ffn_gate, ffn_up
// and ffn_down; pre_ff_layernorm as ffn_norm; model.final_layernorm as
// output_norm.
//
// q and k: Bamba rotates each head's first half in rotate-half order
// (pairs j and j + R/2 of the R = head_dim/2 rotated rows). llama.cpp's
// rope (NORM) turns adjacent pairs of the first R rows, so those R rows
// are permuted to adjacent pairs and the unrotated half stays
// (addPairedRot). The converter permutes the whole head instead (its
// Llama permutation, which pairs row j with row j + head_dim/2, one of
// them unrotated), so its GGUFs do not compute transformers' Bamba; see
// docs/generation.md.
//
// Refused as runGraniteHybrid refuses them: attention or MLP biases,
// mamba_n_groups > 1, mamba_expand other than 2, mamba_proj_bias or no
// mamba_conv_bias.
func runBamba(l *lm.Loaded, dir, out string, m *bamba.Model) error {
	b := m.BambaOptions()
	o, s, d := b.Options, b.Spec, b.Mamba
	if o.Rope == nil || o.Rope.Type != "default" {
		return fmt.Errorf("%s: export-gguf writes Bamba without rope scaling", dir)
	}
	rot := o.Rope.RotaryDim
	switch {
	case o.QKVBias || o.OBias || o.MLPBias:
		return fmt.Errorf("%s: attention or MLP biases; export-gguf writes Bamba without them", dir)
	case b.ProjBias || !b.ConvBias:
		return fmt.Errorf("%s: llama.cpp's granitehybrid reads no in_proj/out_proj biases and always adds conv1d's (mamba_proj_bias false, mamba_conv_bias true)", dir)
	case d.Inner() != 2*s.Hidden:
		return fmt.Errorf("%s: mamba_expand × hidden_size = %d; llama.cpp's granitehybrid requires mamba_expand 2", dir, d.Inner())
	case d.Groups != 1:
		return fmt.Errorf("%s: mamba_n_groups %d; llama.cpp normalizes the gated output per group, transformers over the whole width, so export-gguf writes one group only", dir, d.Groups)
	case rot <= 0 || rot%2 != 0 || rot > s.HeadDim:
		return fmt.Errorf("%s: a rotary of %d dimensions in heads of %d", dir, rot, s.HeadDim)
	}
	kvHeads := kvHeadsBut(&s, nn.KindMamba)
	const a = "granitehybrid."
	meta, err := header(l, dir, "granitehybrid")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxUint32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", kvHeads},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.dimension_count", uint32(rot)},
		{a + "rope.scaling.finetuned", true},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	meta = append(meta, mamba2Meta(a, d)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, blk := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.add(blk+"attn_norm.weight", true, p+"input_layernorm.weight")
		if s.LayerKinds[i] == nn.KindMamba {
			g.mamba2(blk, p+"mamba.", d)
		} else {
			g.addPairedRot(blk+"attn_q.weight", s.Heads, rot, p+"self_attn.q_proj.weight")
			g.addPairedRot(blk+"attn_k.weight", s.KVHeads, rot, p+"self_attn.k_proj.weight")
			g.add(blk+"attn_v.weight", false, p+"self_attn.v_proj.weight")
			g.add(blk+"attn_output.weight", false, p+"self_attn.o_proj.weight")
		}
		g.add(blk+"ffn_norm.weight", true, p+"pre_ff_layernorm.weight")
		g.pairs(blk, []ggufPair{{"ffn_gate.weight", p + "feed_forward.gate_proj.weight", false},
			{"ffn_up.weight", p + "feed_forward.up_proj.weight", false}, {"ffn_down.weight", p + "feed_forward.down_proj.weight", false}})
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
