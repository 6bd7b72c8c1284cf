package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/phi"
)

// runPhi writes a PhiForCausalLM (Phi-1, 1.5, 2) as llama.cpp's "phi2":
// attn_norm with its bias, q, k and v with theirs, attn_output (Phi's
// dense), ffn_up and ffn_down (fc1, fc2) with biases; output_norm and
// output with theirs. Its NEOX rope turns halves of the first
// rope.dimension_count dims, as Phi does. llama.cpp's phi2 takes
// heads·head_dim to be the hidden size: other shapes are refused.
func runPhi(l *lm.Loaded, dir, out string, m *phi.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case s.Heads*s.HeadDim != s.Hidden:
		return fmt.Errorf("%s: %d heads of %d over hidden %d; llama.cpp's phi2 takes them equal", dir, s.Heads, s.HeadDim, s.Hidden)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes Phi without it", dir, o.Rope.Type)
	case o.QKLayerNormShared:
		return fmt.Errorf("%s: qk_layernorm; llama.cpp's phi2 has no q/k norms", dir)
	}
	const a = "phi2."
	meta, err := header(l, dir, "phi2")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), o.Rope.RotaryDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)})
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_norm.bias", p + "input_layernorm.bias", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_q.bias", p + "self_attn.q_proj.bias", true},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_k.bias", p + "self_attn.k_proj.bias", true},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_v.bias", p + "self_attn.v_proj.bias", true},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"attn_output.bias", p + "self_attn.o_proj.bias", true},
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_up.bias", p + "mlp.up_proj.bias", true},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
			{"ffn_down.bias", p + "mlp.down_proj.bias", true},
		})
	}
	g.add("output_norm.weight", true, "model.norm.weight")
	g.add("output_norm.bias", true, "model.norm.bias")
	g.add("output.weight", false, "lm_head.weight")
	g.add("output.bias", true, "lm_head.bias")
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
