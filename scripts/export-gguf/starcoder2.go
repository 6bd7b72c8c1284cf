package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
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

// runNemotron writes a NemotronForCausalLM as llama.cpp's "nemotron":
// attn_norm and ffn_norm (LayerNorm1P: written plus one, with their
// biases), the projections as stored (its NEOX rope turns halves of the
// first rope.dimension_count dims, as Nemotron does), ffn_up and ffn_down;
// output_norm (plus one) and output. Attention and MLP biases, which no
// released Nemotron has, are refused.
func runNemotron(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	switch {
	case o.QKVBias || o.MLPBias:
		return fmt.Errorf("%s: attention_bias or mlp_bias; export-gguf writes Nemotron without them", dir)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes Nemotron without it", dir, o.Rope.Type)
	case s.TieEmbeddings:
		return fmt.Errorf("%s: tied embeddings; llama.cpp's nemotron reads its own output", dir)
	}
	const a = "nemotron."
	meta, err := header(l, dir, "nemotron")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), o.Rope.RotaryDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)})
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPlusOne(b+"attn_norm.weight", p+"input_layernorm.weight")
		g.add(b+"attn_norm.bias", true, p+"input_layernorm.bias")
		g.pairs(b, []ggufPair{
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		})
		g.addPlusOne(b+"ffn_norm.weight", p+"post_attention_layernorm.weight")
		g.add(b+"ffn_norm.bias", true, p+"post_attention_layernorm.bias")
		g.pairs(b, []ggufPair{
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
		})
	}
	g.addPlusOne("output_norm.weight", "model.norm.weight")
	g.add("output_norm.bias", true, "model.norm.bias")
	g.add("output.weight", false, "lm_head.weight")
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// runStableLM writes a StableLmForCausalLM as llama.cpp's "stablelm":
// attn_norm with its bias, q, k and v (with their biases when
// use_qkv_bias), attn_output, ffn_norm with its bias (absent with
// use_parallel_residual, which llama.cpp reads as the parallel layer),
// the SwiGLU MLP; output_norm with its bias, and output unless tied. Its
// NEOX rope turns halves of the first rope.dimension_count dims, as
// StableLM does. StableLM 2 12B's qk_layernorm is attn_q_norm and
// attn_k_norm, each head's weight stacked.
func runStableLM(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.Rope.Type != "default" {
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes StableLM without it", dir, o.Rope.Type)
	}
	const a = "stablelm."
	meta, err := header(l, dir, "stablelm")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), o.Rope.RotaryDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)})
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_norm.bias", p + "input_layernorm.bias", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		}
		if o.QKVBias {
			ps = append(ps, ggufPair{"attn_q.bias", p + "self_attn.q_proj.bias", true},
				ggufPair{"attn_k.bias", p + "self_attn.k_proj.bias", true}, ggufPair{"attn_v.bias", p + "self_attn.v_proj.bias", true})
		}
		if !o.Parallel {
			ps = append(ps, ggufPair{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
				ggufPair{"ffn_norm.bias", p + "post_attention_layernorm.bias", true})
		}
		g.pairs(b, append(ps, denseMLP(p)...))
		if o.QKLayerNorm { // qk_layernorm: [heads, head_dim] (each head's tensor stacked as the loader assembles it), llama.cpp's {head_dim, heads}
			g.add(b+"attn_q_norm.weight", true, p+"self_attn.q_norm.weight")
			g.add(b+"attn_k_norm.weight", true, p+"self_attn.k_norm.weight")
		}
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
