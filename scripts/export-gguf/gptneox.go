package main

import (
	"bufio"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/gptneox"
	"github.com/tputool/tputool/pipeline/lm"
)

// runGPTNeoX writes a GPTNeoXForCausalLM as llama.cpp's "gptneox": the
// biased LayerNorms, the fused projection (attn_qkv) with its rows
// regrouped from GPT-NeoX's head by head (each head's q, k, v) to
// llama.cpp's blocks (every q, then every k, then every v), as
// convert_hf_to_gguf.py regroups them, attn_output, the ungated MLP with
// its biases, use_parallel_residual. The rotary is NEOX (rotate-half) over
// rope.dimension_count dims: no rows permuted within a head. llama.cpp
// reads the attention's biases always, so attention_bias false is
// refused, and runs the tanh GELU (ggml_gelu), so another hidden_act is;
// Pythia's erf GELU comes out within about 2e-4.
func runGPTNeoX(l *lm.Loaded, dir, out string, m *gptneox.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "gptneox"
	if !o.QKVBias || !o.OBias {
		return fmt.Errorf("%s: attention_bias false; llama.cpp's %s reads the attention's biases", dir, arch)
	}
	if o.Rope.Type != "default" {
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes %s without it", dir, o.Rope.Type, arch)
	}
	var act struct {
		HiddenAct string `json:"hidden_act"`
	}
	if err := l.Config.Decode(&act); err != nil {
		return err
	}
	switch act.HiddenAct { // llama.cpp's gptneox runs ggml_gelu, the tanh formula: erf's gelu within about 2e-4
	case "", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
	default:
		return fmt.Errorf("%s: hidden_act %q; llama.cpp's %s runs a GELU", dir, act.HiddenAct, arch)
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
		{a + "rope.dimension_count", uint32(o.Rope.RotaryDim)},
		{a + "use_parallel_residual", o.Parallel},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_norm.bias", p + "input_layernorm.bias", true},
		})
		g.addGroupsToBlocks(b+"attn_qkv.weight", false, s.Heads, 1, p+"self_attn.qkv_proj.weight")
		g.addGroupsToBlocks(b+"attn_qkv.bias", true, s.Heads, 1, p+"self_attn.qkv_proj.bias")
		g.pairs(b, []ggufPair{
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"attn_output.bias", p + "self_attn.o_proj.bias", true},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_norm.bias", p + "post_attention_layernorm.bias", true},
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_up.bias", p + "mlp.up_proj.bias", true},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
			{"ffn_down.bias", p + "mlp.down_proj.bias", true},
		})
	}
	g.add("output_norm.bias", true, "model.norm.bias")
	g.final(s.TieEmbeddings, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// addGroupsToBlocks adds a fused q/k/v projection (or its bias) whose
// rows go by key/value group, [groups, per + 2, D], written as blocks
// (groupsToBlocks).
func (g *ggufTensors) addGroupsToBlocks(gguf string, f32 bool, groups, per int, name string) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, f32, 0)
	if err != nil {
		g.err = err
		return
	}
	read := dtypes.Float32
	if !f32 {
		_, _, read = storedType(g.l, name)
	}
	t.write = func(w *bufio.Writer) error {
		x, err := g.l.Tensor(name, read)
		if err != nil {
			return err
		}
		defer x.FinalizeAll()
		if err := groupsToBlocks(x, groups, per); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeData(w, x, t.typ); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	g.ts = append(g.ts, t)
}

// groupsToBlocks regroups the rows of x [groups·(per+2)·D, ...] (or its
// values, for a vector) from group by group (each key/value group's per
// query heads, then its key and its value: Falcon's new architecture;
// GPT-NeoX's heads are groups of one) to blocks (every query head, then
// every key, then every value), in place.
func groupsToBlocks(x *tensors.Tensor, groups, per int) error {
	dims := x.Shape().Dimensions
	if len(dims) == 0 || dims[0]%(groups*(per+2)) != 0 {
		return fmt.Errorf("shape %v does not hold %d groups of %d query heads, a key and a value", dims, groups, per)
	}
	d := dims[0] / (groups * (per + 2))
	return x.MutableBytes(func(b []byte) {
		row := len(b) / dims[0]
		src := append([]byte(nil), b...)
		move := func(from, to int) { copy(b[to*d*row:(to+1)*d*row], src[from*d*row:(from+1)*d*row]) }
		for g := 0; g < groups; g++ {
			for j := 0; j < per; j++ {
				move(g*(per+2)+j, g*per+j)
			}
			move(g*(per+2)+per, groups*per+g)
			move(g*(per+2)+per+1, groups*per+groups+g)
		}
	})
}
