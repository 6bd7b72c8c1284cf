package main

import (
	"bufio"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/gemma3"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGemma2 writes a Gemma2ForCausalLM as llama.cpp's "gemma2": per layer
// attn_norm, attn_q, attn_k, attn_v, attn_output, post_attention_norm,
// ffn_norm (pre_feedforward_layernorm), the GeGLU MLP and post_ffw_norm;
// output_norm, and output unless tied. Gemma's norms scale by (1 + w)
// and llama.cpp's by w, so the norm weights are written plus one, as
// llama.cpp's and ollama's converters write them. The rotary turns
// halves (llama.cpp's NEOX rope for gemma2). llama.cpp's gemma2 fixes
// the layer pattern (every second layer global, the first local) and,
// but for its 27B, the query scale to 1/sqrt(head_dim), so only a model
// whose layer_types and query_pre_attn_scalar agree is written.
func runGemma2(l *lm.Loaded, dir, out string, m *gemma3.Model) error {
	s := m.Spec()
	attn, final := m.Softcaps()
	global, local := m.Ropes()
	switch {
	case global != local || global.Type != "default":
		return fmt.Errorf("%s: rope scaling; export-gguf writes Gemma 2 with one plain rotary", dir)
	case math.Abs(m.QueryScale()*math.Sqrt(float64(s.HeadDim))-1) > 1e-12:
		return fmt.Errorf("%s: query_pre_attn_scalar is not head_dim %d, which llama.cpp's gemma2 scales by", dir, s.HeadDim)
	case attn <= 0 || final <= 0:
		return fmt.Errorf("%s: soft-capping off; llama.cpp's gemma2 always soft-caps", dir)
	}
	for i, k := range s.LayerKinds {
		if sliding := i%2 == 0; sliding != (k == lm.KindSliding) {
			return fmt.Errorf("%s: layer %d is %s; llama.cpp's gemma2 alternates local and global layers, the first local", dir, i, k)
		}
	}
	const a = "gemma2."
	meta, err := header(l, dir, "gemma2")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, m.Eps(), ropeBase(global), s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "attention.sliding_window", uint32(s.SlidingWindow)},
		{a + "attn_logit_softcapping", float32(attn)},
		{a + "final_logit_softcapping", float32(final)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPlusOne(b+"attn_norm.weight", p+"input_layernorm.weight")
		g.pairs(b, []ggufPair{
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		})
		g.addPlusOne(b+"post_attention_norm.weight", p+"post_attention_layernorm.weight")
		g.addPlusOne(b+"ffn_norm.weight", p+"pre_feedforward_layernorm.weight")
		g.pairs(b, denseMLP(p))
		g.addPlusOne(b+"post_ffw_norm.weight", p+"post_feedforward_layernorm.weight")
	}
	g.addPlusOne("output_norm.weight", "model.norm.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// addPlusOne adds a norm weight written as float32 values plus one (a
// (1 + w) norm for an engine that scales by w).
func (g *ggufTensors) addPlusOne(gguf, name string) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, true, 0)
	if err != nil {
		g.err = err
		return
	}
	l := g.l
	t.write = func(w *bufio.Writer) error {
		x, err := l.Tensor(name, dtypes.Float32)
		if err != nil {
			return err
		}
		v, err := tensors.CopyFlatData[float32](x)
		x.FinalizeAll()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range v {
			v[i]++
		}
		return writeFlat(w, v, ggmlF32)
	}
	g.ts = append(g.ts, t)
}

// runGemma1 writes a GemmaForCausalLM as llama.cpp's "gemma": attn_norm,
// the projections as stored (its NEOX rope turns halves), ffn_norm (Gemma
// 1's post_attention_layernorm, the MLP's input norm) and the GeGLU MLP;
// output_norm, and output unless tied. The norms are written plus one, as
// for Gemma 2; llama.cpp scales the embeddings by sqrt(hidden) itself.
// llama.cpp's gemma uses the tanh GELU: another activation is refused.
func runGemma1(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	var c struct {
		Act string `json:"hidden_activation"`
	}
	if err := l.Config.Decode(&c); err != nil {
		return err
	}
	switch {
	case c.Act != "" && c.Act != "gelu_pytorch_tanh" && c.Act != "gelu_new" && c.Act != "gelu_fast":
		return fmt.Errorf("%s: hidden_activation %q; llama.cpp's gemma uses the tanh GELU", dir, c.Act)
	case o.QKVBias || o.Rope.Type != "default" || s.SlidingWindow > 0:
		return fmt.Errorf("%s: export-gguf writes Gemma without biases, rope scaling or a window (llama.cpp's gemma)", dir)
	}
	const a = "gemma."
	meta, err := header(l, dir, "gemma")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPlusOne(b+"attn_norm.weight", p+"input_layernorm.weight")
		g.pairs(b, []ggufPair{
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		})
		g.addPlusOne(b+"ffn_norm.weight", p+"post_attention_layernorm.weight")
		g.pairs(b, denseMLP(p))
	}
	g.addPlusOne("output_norm.weight", "model.norm.weight")
	if !s.TieEmbeddings {
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
