package main

import (
	"bufio"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/llama4"
	"github.com/tputool/tputool/pipeline/lm"
)

// runLlama4 writes a Llama 4 text model as the "llama4" GGUF that
// ollama's engine runs (what its convert_llama4.go writes from a folder,
// whose import of one Scout-sized expert stack takes more memory than
// this machine has): the q and k projections as stored (Llama 4's rotary
// already turns adjacent pairs, ggml's NORM rope), the dense layers' MLP
// of intermediate_size_mlp, and on the sparse layers the router, the
// expert stacks (gate_up_proj cut into ffn_gate_exps and ffn_up_exps) and
// the shared expert; interleave_moe_layer_step, use_qk_norm,
// attention.chunk_size, no_rope_interval and the temperature tuning's
// keys. ollama places the sparse and NoPE layers by their steps, so a
// model placing them otherwise is refused, and so is rope scaling (the
// llama3 factors are not written).
func runLlama4(l *lm.Loaded, dir, out string, m *llama4.Model) error {
	o, s := m.Options(), m.Spec()
	if o.QKVBias || o.OBias {
		return fmt.Errorf("%s: attention_bias; export-gguf writes Llama 4 without biases", dir)
	}
	if o.Rope.Type != "default" {
		return fmt.Errorf("%s: rope_scaling %s; export-gguf writes Llama 4 without rope scaling", dir, o.Rope.Type)
	}
	step := 0 // the sparse layers every step-th, as ollama places them
	for i, sp := range o.Sparse {
		if sp {
			step = i + 1
			break
		}
	}
	every := 4 // no_rope_interval
	for i := range o.NoRope {
		if o.NoRope[i] {
			every = i + 1
			break
		}
	}
	for i := 0; i < s.Layers; i++ {
		if step == 0 || o.Sparse[i] != ((i+1)%step == 0) {
			return fmt.Errorf("%s: layer %d: export-gguf writes Llama 4s whose sparse layers are every interleave_moe_layer_step-th", dir, i)
		}
		if o.NoRope[i] != ((i+1)%every == 0) || (o.Chunk > 0 && (s.LayerKinds[i] == lm.KindChunked) == o.NoRope[i]) {
			return fmt.Errorf("%s: layer %d: export-gguf writes Llama 4s whose NoPE layers are every no_rope_layer_interval-th and attend in full, the others in chunks", dir, i)
		}
	}
	chunk := o.Chunk
	if chunk == 0 {
		chunk = math.MaxInt32 // no chunks
	}
	text := l.Config // the text_config of the multimodal class
	if text.Text != nil {
		text = text.Text
	}
	var rc struct {
		Theta *float64 `json:"rope_theta"`
	}
	if err := text.Decode(&rc); err != nil {
		return err
	}
	theta := lm.Or(rc.Theta, llama4.Defaults.RopeTheta)
	const a = "llama4."
	meta, err := header(l, dir, "llama4")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.head_dim", uint32(s.HeadDim)},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "attention.chunk_size", uint32(chunk)},
		{a + "attention.temperature_tuning", o.TempFloor > 0},
		{a + "attention.floor_scale", float32(max(o.TempFloor, 1))},
		{a + "attention.scale", float32(o.TempScale)},
		{a + "rope.freq_base", float32(theta)},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "interleave_moe_layer_step", uint32(step)},
		{a + "no_rope_interval", uint32(every)},
		{a + "use_qk_norm", o.QKL2Norm},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		f := p + "feed_forward."
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_q.weight", p + "self_attn.q_proj.weight", false},
			{"attn_k.weight", p + "self_attn.k_proj.weight", false},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		})
		if !o.Sparse[i] {
			g.pairs(b, []ggufPair{{"ffn_gate.weight", f + "gate_proj.weight", false},
				{"ffn_up.weight", f + "up_proj.weight", false}, {"ffn_down.weight", f + "down_proj.weight", false}})
			continue
		}
		g.pairs(b, []ggufPair{
			{"ffn_gate_inp.weight", f + "router.weight", true},
			{"ffn_gate_shexp.weight", f + "shared_expert.gate_proj.weight", false},
			{"ffn_up_shexp.weight", f + "shared_expert.up_proj.weight", false},
			{"ffn_down_shexp.weight", f + "shared_expert.down_proj.weight", false},
		})
		if g.err == nil {
			gate, up := splitStack(l, b+"ffn_gate_exps.weight", b+"ffn_up_exps.weight", f+"experts.gate_up_proj", o.Experts, o.MoEIntermediate, s.Hidden)
			g.ts = append(g.ts, gate, up)
		}
		g.add(b+"ffn_down_exps.weight", false, f+"experts.down_proj") // [E, H, I], as the loader holds it
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// splitStack is the GGUF tensors gate and up [E, inter, hidden], each
// expert's first and second inter rows of the fused stack name [E,
// 2·inter, hidden] (as the loader holds it, transposed from the
// checkpoint), in the stored 16-bit dtype or f32. The stack is decoded
// once, by whichever is written first, and released by the second.
func splitStack(l *lm.Loaded, gate, up, name string, experts, inter, hidden int) (tensor, tensor) {
	typ, elem, read := storedType(l, name)
	var held *tensors.Tensor
	half := func(gguf string, h int) tensor {
		return tensor{
			name: gguf, typ: typ,
			dims: []uint64{uint64(hidden), uint64(inter), uint64(experts)},
			size: int64(experts*inter*hidden) * elem,
			write: func(w *bufio.Writer) error {
				x := held
				if x == nil {
					var err error
					if x, err = l.Tensor(name, read); err != nil {
						return err
					}
					held = x
				} else {
					held = nil
					defer x.FinalizeAll()
				}
				var err error
				x.MustConstFlatData(func(flat any) {
					n := inter * hidden
					for e := 0; e < experts && err == nil; e++ {
						lo := (e*2 + h) * n
						switch v := flat.(type) {
						case []float32:
							err = writeFlat(w, v[lo:lo+n], typ)
						case []bfloat16.BFloat16:
							err = writeFlat(w, v[lo:lo+n], typ)
						default:
							err = fmt.Errorf("tensor %q: read as %T", name, flat)
						}
					}
				})
				return err
			},
		}
	}
	return half(gate, 0), half(up, 1)
}
