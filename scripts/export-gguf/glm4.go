package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/glm"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGlm4 writes a Glm4ForCausalLM (GLM-4-0414) as llama.cpp's "glm4":
// attn_norm, the q, k and v projections with their biases, attn_output,
// post_attention_norm, ffn_norm, the fused gate and up projection as
// ffn_up (llama.cpp's SwiGLU of a merged matrix takes the gate from its
// first half, as Phi3MLP does), ffn_down and post_ffw_norm. llama.cpp's
// glm4 turns adjacent pairs of the first rope.dimension_count dims (its
// NORM rope), as GLM does, so no rows are permuted.
func runGlm4(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes GLM-4-0414 without it", dir, o.Rope.Type)
	case s.SlidingWindow > 0:
		return fmt.Errorf("%s: a sliding window; llama.cpp's glm4 attends in full", dir)
	case !o.RopePairs || !o.FusedGateUp || o.Norms != glm.Glm4Norms:
		return fmt.Errorf("%s: not GLM-4-0414's layer (paired rotary, fused gate and up, four norms)", dir)
	}
	const a = "glm4."
	meta, err := header(l, dir, "glm4")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), o.Rope.RotaryDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
		}
		if o.QKVBias {
			ps = append(ps, ggufPair{"attn_q.bias", p + "self_attn.q_proj.bias", true},
				ggufPair{"attn_k.bias", p + "self_attn.k_proj.bias", true}, ggufPair{"attn_v.bias", p + "self_attn.v_proj.bias", true})
		}
		g.pairs(b, append(ps, []ggufPair{
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"post_attention_norm.weight", p + "post_self_attn_layernorm.weight", true},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_up.weight", p + "mlp.gate_up_proj.weight", false},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
			{"post_ffw_norm.weight", p + "post_mlp_layernorm.weight", true},
		}...))
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
