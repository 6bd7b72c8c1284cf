package main

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runApertus writes an ApertusForCausalLM as llama.cpp's "apertus":
// attn_norm (attention_layernorm), the projections as stored (its NEOX
// rope turns halves), the per-head q and k norms, ffn_norm
// (feedforward_layernorm), ffn_up and ffn_down; output_norm and output.
// Each layer's xIELU scalars go to the metadata arrays xielu.alpha_n,
// alpha_p, beta and eps, as stored (llama.cpp applies the softplus). Only
// the xIELU MLP without rope scaling, untied, is written.
func runApertus(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case !o.XIELU:
		return fmt.Errorf("%s: hidden_act is not xielu; llama.cpp's apertus runs xIELU", dir)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes Apertus without it", dir, o.Rope.Type)
	case s.TieEmbeddings || o.QKVBias:
		return fmt.Errorf("%s: tied embeddings or attention biases; export-gguf writes Apertus without them", dir)
	}
	scalars := map[string][]float32{}
	for _, k := range []string{"alpha_n", "alpha_p", "beta", "eps"} {
		for i := range s.Layers {
			name := fmt.Sprintf("model.layers.%d.mlp.act_fn.%s", i, k)
			t, err := l.Tensor(name, dtypes.Float32)
			if err != nil {
				return err
			}
			scalars[k] = append(scalars[k], tensors.MustCopyFlatData[float32](t)[0])
		}
	}
	const a = "apertus."
	meta, err := header(l, dir, "apertus")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	for _, k := range []string{"alpha_n", "alpha_p", "beta", "eps"} {
		meta = append(meta, kv{"xielu." + k, scalars[k]})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "attention_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"attn_q_norm.weight", p + "self_attn.q_norm.weight", true},
			{"attn_k_norm.weight", p + "self_attn.k_norm.weight", true},
			{"ffn_norm.weight", p + "feedforward_layernorm.weight", true},
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
		})
	}
	g.final(false, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
