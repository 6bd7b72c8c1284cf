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
		g.addHeadsToBlocks(b+"attn_qkv.weight", false, s.Heads, p+"self_attn.qkv_proj.weight")
		g.addHeadsToBlocks(b+"attn_qkv.bias", true, s.Heads, p+"self_attn.qkv_proj.bias")
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

// addHeadsToBlocks adds a fused q/k/v projection (or its bias) whose rows
// go head by head, [heads, 3, D], written as blocks [3, heads, D].
func (g *ggufTensors) addHeadsToBlocks(gguf string, f32 bool, heads int, name string) {
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
		if err := headsToBlocks(x, heads); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeData(w, x, t.typ); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	g.ts = append(g.ts, t)
}

// headsToBlocks regroups the rows of x [3·heads·D, ...] (or its values,
// for a vector) from head by head (each head's q, k, v rows) to blocks
// (every head's q rows, then every k, then every v), in place.
func headsToBlocks(x *tensors.Tensor, heads int) error {
	dims := x.Shape().Dimensions
	if len(dims) == 0 || dims[0]%(3*heads) != 0 {
		return fmt.Errorf("shape %v does not hold 3 × %d heads", dims, heads)
	}
	d := dims[0] / (3 * heads)
	return x.MutableBytes(func(b []byte) {
		row := len(b) / dims[0]
		src := append([]byte(nil), b...)
		for h := 0; h < heads; h++ {
			for j := 0; j < 3; j++ {
				from := (h*3 + j) * d * row
				to := (j*heads + h) * d * row
				copy(b[to:to+d*row], src[from:from+d*row])
			}
		}
	})
}
