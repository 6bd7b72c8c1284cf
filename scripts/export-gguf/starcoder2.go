package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/starcoder2"
)

// runStarcoder2 writes a Starcoder2ForCausalLM as llama.cpp's
// "starcoder2": attn_norm and ffn_norm with their biases, q, k, v and
// attn_output with theirs, ffn_up and ffn_down (c_fc, c_proj) with
// theirs; output_norm, and output unless tied. Its NEOX rope turns
// halves, as StarCoder2 does. llama.cpp's starcoder2 attends in full: a
// window is refused, as are models without biases.
func runStarcoder2(l *lm.Loaded, dir, out string, m *starcoder2.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case s.SlidingWindow > 0:
		return fmt.Errorf("%s: sliding_window %d; llama.cpp's starcoder2 attends in full", dir, s.SlidingWindow)
	case !o.QKVBias:
		return fmt.Errorf("%s: use_bias false; llama.cpp's starcoder2 reads the biases", dir)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes StarCoder2 without it", dir, o.Rope.Type)
	}
	const a = "starcoder2."
	meta, err := header(l, dir, "starcoder2")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)})
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		var ps []ggufPair
		for _, t := range [][3]string{
			{"attn_norm", "input_layernorm", "f32"}, {"attn_q", "self_attn.q_proj", ""}, {"attn_k", "self_attn.k_proj", ""},
			{"attn_v", "self_attn.v_proj", ""}, {"attn_output", "self_attn.o_proj", ""}, {"ffn_norm", "post_attention_layernorm", "f32"},
			{"ffn_up", "mlp.up_proj", ""}, {"ffn_down", "mlp.down_proj", ""},
		} {
			ps = append(ps, ggufPair{t[0] + ".weight", p + t[1] + ".weight", t[2] == "f32"}, ggufPair{t[0] + ".bias", p + t[1] + ".bias", true})
		}
		g.pairs(b, ps)
	}
	g.add("output_norm.weight", true, "model.norm.weight")
	g.add("output_norm.bias", true, "model.norm.bias")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
