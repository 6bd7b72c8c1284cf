package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/hunyuan"
	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/qwen3moe"
)

// hunyuanCheck refuses what llama.cpp's hunyuan-dense and hunyuan-moe do
// not run: biases (they read none) and a partial rotary. The rotary is
// NEOX (rotate-half), so no rows are permuted; the alpha's raised base is
// written as rope.freq_base, as convert_hf_to_gguf.py writes it.
func hunyuanCheck(dir string, o llama.Options) error {
	if o.QKVBias || o.OBias || o.Rope.RotaryDim != o.Spec.HeadDim || o.Rope.Type != "default" && o.Rope.Type != "dynamic" {
		return fmt.Errorf("%s: export-gguf writes HunYuan without attention_bias, rope scaling other than the alpha, or a partial rotary (llama.cpp's hunyuan-dense and hunyuan-moe)", dir)
	}
	return nil
}

// hunyuanAttention is a HunYuan layer's attention tensors: the q/k norms
// after the rotary are llama.cpp's attn_q_norm and attn_k_norm, which it
// applies after the rotary too.
func hunyuanAttention(p string) []ggufPair {
	return []ggufPair{
		{"attn_norm.weight", p + "input_layernorm.weight", true},
		{"attn_q.weight", p + "self_attn.q_proj.weight", false},
		{"attn_k.weight", p + "self_attn.k_proj.weight", false},
		{"attn_v.weight", p + "self_attn.v_proj.weight", false},
		{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		{"attn_q_norm.weight", p + "self_attn.query_layernorm.weight", true},
		{"attn_k_norm.weight", p + "self_attn.key_layernorm.weight", true},
		{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
	}
}

// runHunYuanDense writes a HunYuanDenseV1ForCausalLM as llama.cpp's
// "hunyuan-dense".
func runHunYuanDense(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	if err := hunyuanCheck(dir, o); err != nil {
		return err
	}
	const arch = "hunyuan-dense"
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(arch+".", s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, append(hunyuanAttention(p), denseMLP(p)...))
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// runHunYuanMoE writes a HunYuanMoEV1ForCausalLM as llama.cpp's
// "hunyuan-moe": the router (ffn_gate_inp, float32 as stored), the expert
// stacks and the shared MLP (the _shexp tensors) on every layer, the
// top k renormalized (llama.cpp hard-codes it for the architecture).
func runHunYuanMoE(l *lm.Loaded, dir, out string, m *qwen3moe.Model) error {
	o, s := m.Options(), m.Spec()
	if err := hunyuanCheck(dir, o.Options); err != nil {
		return err
	}
	const arch = "hunyuan-moe"
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, []kv{
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_feed_forward_length", uint32(o.SharedIntermediate)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	lay := hunyuan.Layout
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		block := p + lay.Block + "."
		g.pairs(b, append(hunyuanAttention(p),
			ggufPair{"ffn_gate_inp.weight", block + lay.Router, true},
			ggufPair{"ffn_gate_shexp.weight", block + lay.SharedMLP + ".gate_proj.weight", false},
			ggufPair{"ffn_up_shexp.weight", block + lay.SharedMLP + ".up_proj.weight", false},
			ggufPair{"ffn_down_shexp.weight", block + lay.SharedMLP + ".down_proj.weight", false}))
		g.experts(b, block, o.Experts, lay.Experts)
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
