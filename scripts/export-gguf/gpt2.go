package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/bloom"
	"github.com/tputool/tputool/pipeline/gpt2"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGPT2 writes a GPT2LMHeadModel as llama.cpp's "gpt2", or a
// GPTBigCodeForCausalLM as its "starcoder": token_embd, position_embd
// (llama.cpp's context length is the table's rows, n_positions), the
// biased attn_norm and ffn_norm, attn_qkv (every query, then the keys,
// then the values: GPT-2's and multi-query StarCoder's own order; a
// multi-head StarCoder's rows by head are regrouped), attn_output, the
// ungated MLP with its biases; output_norm, and output unless tied (the
// loader has already turned GPT-2's Conv1D matrices into [out, in]).
// llama.cpp runs the tanh GELU (ggml_gelu): another activation_function
// is refused.
func runGPT2(l *lm.Loaded, dir, out string, m *gpt2.Model) error {
	o, s := m.Options(), m.Spec()
	arch := "gpt2"
	if l.Config.Architecture() == gpt2.BigCodeArchitecture {
		arch = "starcoder"
	}
	var act struct {
		Act string `json:"activation_function"`
	}
	if err := l.Config.Decode(&act); err != nil {
		return err
	}
	switch act.Act {
	case "", "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
	default:
		return fmt.Errorf("%s: activation_function %q; llama.cpp's %s runs the tanh GELU", dir, act.Act, arch)
	}
	if o.AttnScale != 0 {
		return fmt.Errorf("%s: scale_attn_weights false; llama.cpp's %s scales the scores by 1/sqrt(head_dim)", dir, arch)
	}
	if o.AttnScaleByLayer {
		return fmt.Errorf("%s: scale_attn_by_inverse_layer_idx; llama.cpp's %s scales every layer's scores alike", dir, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, plainMeta(a, s, o.Eps)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	g.add("position_embd.weight", false, "model.embed_positions.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{{"attn_norm.weight", p + "input_layernorm.weight", true}, {"attn_norm.bias", p + "input_layernorm.bias", true}})
		if o.QKVPerHead {
			g.addGroupsToBlocks(b+"attn_qkv.weight", false, s.Heads, 1, p+"self_attn.qkv_proj.weight")
			g.addGroupsToBlocks(b+"attn_qkv.bias", true, s.Heads, 1, p+"self_attn.qkv_proj.bias")
		} else {
			g.pairs(b, []ggufPair{{"attn_qkv.weight", p + "self_attn.qkv_proj.weight", false}, {"attn_qkv.bias", p + "self_attn.qkv_proj.bias", true}})
		}
		g.pairs(b, ungatedBlock(p))
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

// runBloom writes a BloomForCausalLM as llama.cpp's "bloom": token_embd
// and token_embd_norm (word_embeddings_layernorm) with its bias, the
// biased attn_norm and ffn_norm, attn_qkv regrouped from BLOOM's rows by
// head to llama.cpp's blocks (as convert_hf_to_gguf.py regroups them),
// attn_output, the ungated MLP with its biases; output_norm, and output
// unless tied. llama.cpp's bloom adds ALiBi with a maximum bias of 8,
// BLOOM's slopes.
func runBloom(l *lm.Loaded, dir, out string, m *bloom.Model) error {
	o, s := m.Options(), m.Spec()
	const a = "bloom."
	meta, err := header(l, dir, "bloom")
	if err != nil {
		return err
	}
	meta = append(meta, plainMeta(a, s, o.Eps)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	g.add("token_embd_norm.weight", true, bloom.EmbedNorm+".weight")
	g.add("token_embd_norm.bias", true, bloom.EmbedNorm+".bias")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{{"attn_norm.weight", p + "input_layernorm.weight", true}, {"attn_norm.bias", p + "input_layernorm.bias", true}})
		g.addGroupsToBlocks(b+"attn_qkv.weight", false, s.Heads, 1, p+"self_attn.qkv_proj.weight")
		g.addGroupsToBlocks(b+"attn_qkv.bias", true, s.Heads, 1, p+"self_attn.qkv_proj.bias")
		g.pairs(b, ungatedBlock(p))
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

// plainMeta is the hyperparameters of a model without rotary (llama.cpp's
// gpt2, starcoder and bloom), LayerNorms of epsilon eps.
func plainMeta(a string, s *lm.Spec, eps float64) []kv {
	return []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.layer_norm_epsilon", float32(eps)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}
}

// ungatedBlock is the rest of a block after its fused q/k/v: the biased
// attn_output, ffn_norm, ffn_up and ffn_down.
func ungatedBlock(p string) []ggufPair {
	return []ggufPair{
		{"attn_output.weight", p + "self_attn.o_proj.weight", false},
		{"attn_output.bias", p + "self_attn.o_proj.bias", true},
		{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		{"ffn_norm.bias", p + "post_attention_layernorm.bias", true},
		{"ffn_up.weight", p + "mlp.up_proj.weight", false},
		{"ffn_up.bias", p + "mlp.up_proj.bias", true},
		{"ffn_down.weight", p + "mlp.down_proj.weight", false},
		{"ffn_down.bias", p + "mlp.down_proj.bias", true},
	}
}
