package main

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGranite writes a GraniteForCausalLM as llama.cpp's "granite": Llama's
// tensors, the q and k projections' rows permuted within each head from
// rotate-half order to adjacent pairs (llama.cpp's NORM rope, as its
// converter permutes Llama-architecture q and k), and the four
// multipliers as embedding_scale, attention.scale, residual_scale and
// logit_scale. GraniteMoe and GraniteMoeShared are runGraniteMoE's.
func runGranite(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.OBias || o.MLPBias || o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim {
		return fmt.Errorf("%s: export-gguf writes Granite without biases, rope scaling or a partial rotary", dir)
	}
	theta, err := ropeTheta(filepath.Join(dir, "config.json"), granite.Defaults.RopeTheta)
	if err != nil {
		return err
	}
	const a = "granite."
	meta, err := header(l, dir, "granite")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, theta, s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "embedding_scale", float32(o.EmbedScale)},
		{a + "attention.scale", float32(o.AttnScale)},
		{a + "residual_scale", float32(o.ResidualScale)},
		{a + "logit_scale", float32(o.LogitsDivisor)},
	}...)
	ts, err := llamaTensors(l, s)
	if err != nil {
		return err
	}
	return write(out, meta, ts)
}

// llamaTensors are a Llama-architecture model's GGUF tensors for a
// llama.cpp architecture with the NORM rope: the embedding; per layer
// the q and k projections with their rows paired (addPaired), v, o, the
// two norms and the SwiGLU MLP; the final norm and the head (left out
// when tied: llama.cpp takes token_embd for a missing output), or the
// first error reading them.
func llamaTensors(l *lm.Loaded, s *lm.Spec) ([]tensor, error) {
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, append([]ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		}, denseMLP(p)...))
	}
	g.final(s.TieEmbeddings, true)
	return g.ts, g.err
}

// llamaMeta are the hyperparameters llama.cpp reads for a Llama-shaped
// architecture (a its key prefix, "afmoe." say): the sizes, the head
// width as key and value length, the RMSNorm epsilon, the rotary's base
// and rotated dims, the vocabulary. An architecture appends its own.
func llamaMeta(a string, s *lm.Spec, eps, theta float64, rotary int) []kv {
	return []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(eps)},
		{a + "rope.freq_base", float32(theta)},
		{a + "rope.dimension_count", uint32(rotary)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}
}

// runGraniteMoE writes a GraniteMoeForCausalLM (o from its MoEModel) or a
// GraniteMoeSharedForCausalLM (its HybridModel, every layer attention) as
// llama.cpp's "granitemoe": Granite's attention tensors and multipliers
// (runGranite), the router as ffn_gate_inp, each expert's halves of the
// input_linear stack as ffn_gate_exps and ffn_up_exps and the
// output_linear stack as ffn_down_exps (feed_forward_length the
// experts' width), and with shared > 0 shared_mlp's input_linear halves
// as ffn_gate_shexp and ffn_up_shexp and its output_linear as
// ffn_down_shexp (expert_shared_feed_forward_length). llama.cpp's router
// softmaxes the logits and renormalizes the top k, which is the softmax
// of the top k that GraniteMoe takes.
func runGraniteMoE(l *lm.Loaded, dir, out string, o llama.Options, experts, topK, inter, shared int) error {
	s := &o.Spec
	if o.QKVBias || o.OBias || o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim || len(o.NoRope) > 0 {
		return fmt.Errorf("%s: export-gguf writes GraniteMoe without biases, rope scaling or a partial rotary", dir)
	}
	var act struct {
		HiddenAct string `json:"hidden_act"`
	}
	if err := l.Config.Decode(&act); err != nil {
		return err
	}
	if a := act.HiddenAct; a != "" && a != "silu" && a != "swish" {
		return fmt.Errorf("%s: hidden_act %q; llama.cpp's granitemoe runs SiLU experts", dir, a)
	}
	const a = "granitemoe."
	meta, err := header(l, dir, "granitemoe")
	if err != nil {
		return err
	}
	s2 := *s
	s2.Intermediate = inter
	meta = append(meta, llamaMeta(a, &s2, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "embedding_scale", float32(o.EmbedScale)},
		{a + "attention.scale", float32(o.AttnScale)},
		{a + "residual_scale", float32(o.ResidualScale)},
		{a + "logit_scale", float32(o.LogitsDivisor)},
		{a + "expert_count", uint32(experts)},
		{a + "expert_used_count", uint32(topK)},
	}...)
	if shared > 0 {
		meta = append(meta, kv{a + "expert_shared_feed_forward_length", uint32(shared)})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		})
		block := p + "block_sparse_moe."
		g.add(b+"ffn_gate_inp.weight", true, block+"gate.weight")
		g.halves(b+"ffn_gate_exps.weight", b+"ffn_up_exps.weight", block+"experts.gate_up_proj", experts, inter, s.Hidden)
		g.add(b+"ffn_down_exps.weight", false, block+"experts.down_proj") // [E, H, I]
		if shared > 0 {
			g.halves(b+"ffn_gate_shexp.weight", b+"ffn_up_shexp.weight", p+"shared_mlp.input_linear.weight", 1, shared, s.Hidden)
			g.add(b+"ffn_down_shexp.weight", false, p+"shared_mlp.output_linear.weight")
		}
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
