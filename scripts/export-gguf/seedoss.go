package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runSeedOss writes a SeedOssForCausalLM as llama.cpp's "seed_oss":
// Llama's tensors with the q, k and v biases, post_attention_layernorm as
// post_attention_norm (the MLP's input norm there), the projections as stored
// (llama.cpp's NEOX rope for seed_oss turns halves, as transformers
// does). llama.cpp reads no o_proj or MLP bias: such models are refused.
func runSeedOss(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.OBias || o.MLPBias || o.Rope.Type != "default" || s.SlidingWindow > 0 {
		return fmt.Errorf("%s: export-gguf writes Seed-OSS without o_proj or MLP biases, rope scaling or a window (llama.cpp's seed_oss)", dir)
	}
	const a = "seed_oss."
	meta, err := header(l, dir, "seed_oss")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"post_attention_norm.weight", p + "post_attention_layernorm.weight", true},
		}
		if o.QKVBias {
			ps = append(ps, ggufPair{"attn_q.bias", p + "self_attn.q_proj.bias", true},
				ggufPair{"attn_k.bias", p + "self_attn.k_proj.bias", true}, ggufPair{"attn_v.bias", p + "self_attn.v_proj.bias", true})
		}
		g.pairs(b, append(ps, denseMLP(p)...))
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
