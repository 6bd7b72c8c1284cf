package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/falcon"
	"github.com/tputool/tputool/pipeline/lm"
)

// runFalcon writes a FalconForCausalLM as llama.cpp's "falcon": the fused
// projection's rows regrouped into llama.cpp's blocks (every query head,
// then the keys, then the values) from the new architecture's groups, as
// convert_hf_to_gguf.py regroups them; attn_norm the LayerNorm the MLP
// reads (ln_mlp, or the one input_layernorm) and attn_norm_2 the
// attention's own (ln_attn), as llama.cpp's graph reads them; the
// ungated MLP. llama.cpp's graph runs the parallel block without biases
// and the tanh GELU (ggml_gelu), so biases, the sequential block and
// another activation are refused; erf's GELU, Falcon's, comes out within
// about 2e-4. The rotary is NEOX (rotate-half) over whole heads.
func runFalcon(l *lm.Loaded, dir, out string, m *falcon.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "falcon"
	var act struct {
		Activation string `json:"activation"`
	}
	if err := l.Config.Decode(&act); err != nil {
		return err
	}
	switch {
	case o.QKVBias || o.MLPBias:
		return fmt.Errorf("%s: bias is true; llama.cpp's %s reads no biases", dir, arch)
	case !o.Parallel:
		return fmt.Errorf("%s: parallel_attn is false; llama.cpp's %s runs the parallel block only", dir, arch)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes %s without it", dir, o.Rope.Type, arch)
	}
	switch act.Activation {
	case "", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
	default:
		return fmt.Errorf("%s: activation %q; llama.cpp's %s runs a GELU", dir, act.Activation, arch)
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.layer_norm_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		if n := o.Norms; n.PreMLP != "" { // two LayerNorms: the MLP's is llama.cpp's attn_norm
			g.pairs(b, []ggufPair{
				{"attn_norm.weight", p + n.PreMLP + ".weight", true}, {"attn_norm.bias", p + n.PreMLP + ".bias", true},
				{"attn_norm_2.weight", p + n.PreAttn + ".weight", true}, {"attn_norm_2.bias", p + n.PreAttn + ".bias", true},
			})
		} else {
			g.pairs(b, []ggufPair{
				{"attn_norm.weight", p + n.PreAttn + ".weight", true}, {"attn_norm.bias", p + n.PreAttn + ".bias", true},
			})
		}
		if o.QKVPerHead {
			g.addGroupsToBlocks(b+"attn_qkv.weight", false, s.KVHeads, s.Heads/s.KVHeads, p+"self_attn.qkv_proj.weight")
		} else {
			g.add(b+"attn_qkv.weight", false, p+"self_attn.qkv_proj.weight")
		}
		g.pairs(b, []ggufPair{
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
		})
	}
	g.add("output_norm.bias", true, "model.norm.bias")
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
