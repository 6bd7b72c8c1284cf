package main

import (
	"bufio"
	"fmt"
	"math"
	"path/filepath"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runGraniteHybrid writes a GraniteMoeHybridForCausalLM (Granite 4.0-H)
// as llama.cpp's "granitehybrid", as its convert_hf_to_gguf.py
// (GraniteHybridModel) does:
//
//   - attention.head_count_kv is an array by layer, 0 on the Mamba-2
//     layers: llama.cpp takes a layer with no KV heads for a recurrent
//     one. The ssm keys: conv_kernel, inner_size (mamba_expand × hidden),
//     state_size, time_step_rank (mamba_n_heads) and group_count.
//   - The four multipliers as embedding_scale, attention.scale,
//     residual_scale and logit_scale (granite's). llama.cpp's
//     granitehybrid rotates q and k only when rope.scaling.finetuned is
//     true (its default): it is written false for position_embedding_type
//     "nope" (the releases: no positional embedding, and context_length
//     2^20 as the converter writes), true with rope.freq_base for "rope".
//     The q and k rows are permuted within each head to adjacent pairs
//     (llama.cpp's NORM rope) either way, as the converter does; without
//     rope the permutation changes no score.
//   - A Mamba-2 layer: ssm_in (in_proj: gate, x|B|C, dt, as llama.cpp
//     splits it), ssm_conv1d [ConvDim, 1, K] squeezed to {K, ConvDim},
//     its bias, ssm_dt.bias (dt_bias), ssm_a = -exp(A_log) and ssm_d (D)
//     as {1, heads}, ssm_norm as {inner/groups, groups}, ssm_out.
//   - shared_mlp's input_linear cut into ffn_gate_shexp and ffn_up_shexp
//     (its first and second halves) and output_linear as ffn_down_shexp;
//     block_sparse_moe's router as ffn_gate_inp and its input_linear stack
//     cut into ffn_gate_exps and ffn_up_exps (each expert's halves), its
//     output_linear stack as ffn_down_exps; feed_forward_length is the
//     experts' width and expert_shared_feed_forward_length the shared
//     MLP's. Without experts (num_local_experts 0) shared_mlp is the dense
//     ffn_gate/ffn_up/ffn_down of feed_forward_length.
//   - Norms, the router, the convolution and the Mamba vectors are
//     float32, as the converter writes them; the matrices keep the
//     checkpoint's dtype. A tied head is left out (llama.cpp takes
//     token_embd).
//
// Refused, as llama.cpp does not run them or runs them otherwise than
// transformers: mamba_expand other than 2, mamba_proj_bias, no
// mamba_conv_bias, attention biases, rope scaling or a partial rotary,
// and mamba_n_groups > 1 (llama.cpp's gated RMSNorm normalizes each
// group apart, transformers' GraniteMoeHybridRMSNormGated the whole
// width).
func runGraniteHybrid(l *lm.Loaded, dir, out string, m *granite.HybridModel) error {
	h := m.HybridOptions()
	o, s, d := h.Options, h.Spec, h.Mamba
	switch {
	case o.QKVBias || o.OBias || o.MLPBias:
		return fmt.Errorf("%s: attention or MLP biases; export-gguf writes GraniteMoeHybrid without them", dir)
	case h.ProjBias || !h.ConvBias:
		return fmt.Errorf("%s: llama.cpp's granitehybrid reads no in_proj/out_proj biases and always adds conv1d's (mamba_proj_bias false, mamba_conv_bias true)", dir)
	case d.Inner() != 2*s.Hidden:
		return fmt.Errorf("%s: mamba_expand × hidden_size = %d; llama.cpp's granitehybrid requires mamba_expand 2", dir, d.Inner())
	case d.Groups != 1:
		return fmt.Errorf("%s: mamba_n_groups %d; llama.cpp normalizes the gated output per group, transformers over the whole width, so export-gguf writes one group only", dir, d.Groups)
	}
	rope := len(o.NoRope) == 0 || !o.NoRope[0]
	for i := range o.NoRope {
		if o.NoRope[i] == rope {
			return fmt.Errorf("%s: layer %d: export-gguf writes GraniteMoeHybrids whose attention layers all rotate or none", dir, i)
		}
	}
	context := uint32(1 << 20) // the converter's, without rope
	var theta float64
	if rope {
		if o.Rope == nil || o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim {
			return fmt.Errorf("%s: export-gguf writes GraniteMoeHybrid without rope scaling or a partial rotary", dir)
		}
		var err error
		if theta, err = ropeTheta(filepath.Join(dir, "config.json"), granite.Defaults.RopeTheta); err != nil {
			return err
		}
		context = uint32(min(s.MaxPositions, math.MaxUint32))
	}
	kvHeads := kvHeadsBut(&s, nn.KindMamba)
	ff := s.Intermediate
	if h.Experts == 0 {
		ff = h.Shared
	}
	const a = "granitehybrid."
	meta, err := header(l, dir, "granitehybrid")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", context},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(ff)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", kvHeads},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "rope.scaling.finetuned", rope},
		{a + "vocab_size", uint32(s.VocabSize)},
		{a + "embedding_scale", float32(o.EmbedScale)},
		{a + "attention.scale", float32(o.AttnScale)},
		{a + "residual_scale", float32(o.ResidualScale)},
		{a + "logit_scale", float32(o.LogitsDivisor)},
	}...)
	meta = append(meta, mamba2Meta(a, d)...)
	if rope {
		meta = append(meta, kv{a + "rope.freq_base", float32(theta)})
	}
	if h.Experts > 0 {
		meta = append(meta, []kv{
			{a + "expert_count", uint32(h.Experts)},
			{a + "expert_used_count", uint32(h.TopK)},
			{a + "expert_shared_feed_forward_length", uint32(h.Shared)},
		}...)
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.add(b+"attn_norm.weight", true, p+"input_layernorm.weight")
		if s.LayerKinds[i] == nn.KindMamba {
			g.mamba2(b, p+"mamba.", d)
		} else {
			g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
			g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
			g.add(b+"attn_v.weight", false, p+"self_attn.v_proj.weight")
			g.add(b+"attn_output.weight", false, p+"self_attn.o_proj.weight")
		}
		g.add(b+"ffn_norm.weight", true, p+"post_attention_layernorm.weight")
		gate, up, down := "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"
		if h.Experts == 0 { // shared_mlp alone: llama.cpp's dense MLP
			gate, up, down = "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"
		}
		g.halves(b+gate, b+up, p+"shared_mlp.input_linear.weight", 1, h.Shared, s.Hidden)
		g.add(b+down, false, p+"shared_mlp.output_linear.weight")
		if h.Experts > 0 {
			block := p + "block_sparse_moe."
			g.add(b+"ffn_gate_inp.weight", true, block+"gate.weight")
			g.halves(b+"ffn_gate_exps.weight", b+"ffn_up_exps.weight", block+"experts.gate_up_proj", h.Experts, s.Intermediate, s.Hidden)
			g.add(b+"ffn_down_exps.weight", false, block+"experts.down_proj") // [E, H, I]
		}
	}
	g.final(s.TieEmbeddings, true) // llama.cpp takes token_embd for a missing output
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// mamba2Meta are a Mamba-2 mixer's keys as llama.cpp reads them under
// the arch prefix a: ssm.conv_kernel, inner_size (heads × head_dim),
// state_size, time_step_rank (the heads) and group_count.
func mamba2Meta(a string, d nn.Mamba2Dims) []kv {
	return []kv{
		{a + "ssm.conv_kernel", uint32(d.ConvKernel)},
		{a + "ssm.inner_size", uint32(d.Inner())},
		{a + "ssm.state_size", uint32(d.State)},
		{a + "ssm.time_step_rank", uint32(d.Heads)},
		{a + "ssm.group_count", uint32(d.Groups)},
	}
}

// kvHeadsBut is attention.head_count_kv by layer: the KV heads, but 0 on
// the layers of kind recurrent, which llama.cpp then takes for recurrent
// ones.
func kvHeadsBut(s *lm.Spec, recurrent string) []int32 {
	kv := make([]int32, s.Layers)
	for i, k := range s.LayerKinds {
		if k != recurrent {
			kv[i] = int32(s.KVHeads)
		}
	}
	return kv
}

// halves adds gate and up, each expert's first and second inter rows of
// the fused stack name [experts, 2·inter, hidden] (splitStack); one
// expert (a 2-D [2·inter, hidden] matrix) gives 2-D tensors.
// mamba2 adds a Mamba-2 mixer's tensors, read under mp ("….mamba." or
// "….mixer."), as llama.cpp's block b reads them: ssm_in and ssm_out as
// stored; the convolution squeezed to {K, ConvDim} and its bias, dt_bias,
// A = -exp(A_log) and D as {1, heads}, the gated norm's weight as
// {inner/groups, groups}, all float32, as convert_hf_to_gguf.py writes
// them.
func (g *ggufTensors) mamba2(b, mp string, d nn.Mamba2Dims) {
	heads := uint64(d.Heads)
	neg := func(x float32) float32 { return -float32(math.Exp(float64(x))) }
	g.add(b+"ssm_in.weight", false, mp+"in_proj.weight")
	g.addF32(b+"ssm_conv1d.weight", mp+"conv1d.weight", []uint64{uint64(d.ConvKernel), uint64(d.ConvDim())}, nil)
	g.add(b+"ssm_conv1d.bias", true, mp+"conv1d.bias")
	g.add(b+"ssm_dt.bias", true, mp+"dt_bias")
	g.addF32(b+"ssm_a", mp+"A_log", []uint64{1, heads}, neg)
	g.addF32(b+"ssm_d", mp+"D", []uint64{1, heads}, nil)
	g.addF32(b+"ssm_norm.weight", mp+"norm.weight", []uint64{uint64(d.Inner() / d.Groups), uint64(d.Groups)}, nil)
	g.add(b+"ssm_out.weight", false, mp+"out_proj.weight")
}

func (g *ggufTensors) halves(gate, up, name string, experts, inter, hidden int) {
	if g.err != nil {
		return
	}
	if shape, ok := g.l.Shape(name); !ok || elements(shape) != experts*2*inter*hidden {
		g.err = fmt.Errorf("tensor %q: shape %v, want %d × %d × %d", name, shape, experts, 2*inter, hidden)
		return
	}
	gt, ut := splitStack(g.l, gate, up, name, experts, inter, hidden)
	if experts == 1 {
		gt.dims, ut.dims = gt.dims[:2], ut.dims[:2]
	}
	g.ts = append(g.ts, gt, ut)
}

// addF32 adds GGUF tensor gguf holding checkpoint weight name as float32
// with dimensions dims (innermost first; as many elements as the weight,
// whose shape they reshape), each value through f when f is set.
func (g *ggufTensors) addF32(gguf, name string, dims []uint64, f func(float32) float32) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, true, 0)
	if err != nil {
		g.err = err
		return
	}
	n := uint64(1)
	for _, x := range dims {
		n *= x
	}
	if uint64(t.size) != 4*n {
		g.err = fmt.Errorf("tensor %q: %d elements, want %v", name, t.size/4, dims)
		return
	}
	t.dims = dims
	if f != nil {
		t.write = func(w *bufio.Writer) error {
			x, err := g.l.Tensor(name, dtypes.Float32)
			if err != nil {
				return err
			}
			defer x.FinalizeAll()
			x.MustMutableFlatData(func(flat any) {
				v := flat.([]float32)
				for i := range v {
					v[i] = f(v[i])
				}
			})
			return writeData(w, x, ggmlF32)
		}
	}
	g.ts = append(g.ts, t)
}

// elements is the number of elements of shape.
func elements(shape []int) int {
	n := 1
	for _, x := range shape {
		n *= x
	}
	return n
}
