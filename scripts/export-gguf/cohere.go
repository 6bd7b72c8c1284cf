package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/cohere"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runCohere writes a CohereForCausalLM as llama.cpp's "command-r" and a
// Cohere2ForCausalLM as its "cohere2": attn_norm (a LayerNorm without
// bias, attention.layer_norm_epsilon) feeding both the attention and the
// MLP, the projections as stored (llama.cpp's NORM rope turns adjacent
// pairs, as Cohere does), the head tied to token_embd, and logit_scale.
// cohere2 windows three layers of four (attention.sliding_window) and
// turns only those. Command R+'s use_qk_norm is written as attn_q_norm
// and attn_k_norm ([heads, head_dim], a weight per head), which
// llama.cpp's command-r reads only at 64 layers or more: a model with q/k
// norms and fewer layers, or without them and 64 or more, is refused, as
// are biases and an untied head, which llama.cpp does not read.
func runCohere(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	arch := "command-r"
	c2 := l.Config.Architecture() == cohere.Cohere2
	if c2 {
		arch = "cohere2"
	}
	switch {
	case o.QKVBias:
		return fmt.Errorf("%s: attention_bias; llama.cpp's %s reads no biases", dir, arch)
	case !s.TieEmbeddings:
		return fmt.Errorf("%s: tie_word_embeddings false; llama.cpp's %s ties its head to token_embd", dir, arch)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes Cohere models without it", dir, o.Rope.Type)
	case !c2 && s.Layers >= 64 && !o.QKLayerNorm:
		return fmt.Errorf("%s: %d layers without use_qk_norm; llama.cpp's command-r reads q/k norms at 64 layers or more", dir, s.Layers)
	case o.QKLayerNorm && s.Layers < 64:
		return fmt.Errorf("%s: use_qk_norm with %d layers; llama.cpp's command-r reads q/k norms only at 64 layers or more", dir, s.Layers)
	}
	if c2 {
		if err := threeOfFour(dir, arch, s); err != nil {
			return err
		}
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, kv{a + "attention.layer_norm_epsilon", float32(o.Eps)}, kv{a + "logit_scale", float32(o.LogitScale)})
	if c2 {
		meta = append(meta, kv{a + "attention.sliding_window", uint32(s.SlidingWindow)})
	}
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
		}, denseMLP(p)...))
		if o.QKLayerNorm { // [heads, head_dim] as stored: llama.cpp's {head_dim, heads}
			g.add(b+"attn_q_norm.weight", true, p+"self_attn.q_norm.weight")
			g.add(b+"attn_k_norm.weight", true, p+"self_attn.k_norm.weight")
		}
	}
	g.final(true, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
