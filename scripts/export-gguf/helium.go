package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runHelium writes a HeliumForCausalLM as llama.cpp's "llama", as its
// converter does: Helium's rotary already turns adjacent pairs (llama.cpp's
// NORM rope), so q and k are written as stored, with no rows permuted;
// the rest is Llama's. Biases (attention_bias, mlp_bias), which no release
// has, and rope scaling are refused.
func runHelium(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.MLPBias || o.Rope.Type != "default" {
		return fmt.Errorf("%s: export-gguf writes Helium without attention_bias, mlp_bias or rope scaling", dir)
	}
	const a = "llama."
	meta, err := header(l, dir, "llama")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, append([]ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		}, denseMLP(p)...))
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
