package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runPairs writes a Llama-shaped model whose rotary llama.cpp's arch
// turns as the model does without rows permuted (adjacent pairs under
// llama.cpp's NORM rope, halves under its NEOX rope) as that arch, as its
// converter does: q and k as stored; the rest is Llama's tensors. family
// names the model in errors. It writes the dense ERNIE 4.5
// (Ernie4_5ForCausalLM) as "ernie4_5", Helium (HeliumForCausalLM) as
// "llama" and EXAONE (ExaoneForCausalLM, NEOX: 3.0's default rotary;
// 3.5's llama3 scaling is refused with the others) as "exaone". Biases (ERNIE's use_bias, Helium's
// attention_bias and mlp_bias: llama.cpp reads no MLP biases there, and
// no release has them) and rope scaling are refused.
func runPairs(l *lm.Loaded, dir, out string, m *llama.Model, arch, family string) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.OBias || o.MLPBias || o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim {
		return fmt.Errorf("%s: export-gguf writes %s without biases, rope scaling or a partial rotary (llama.cpp's %s)", dir, family, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
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
