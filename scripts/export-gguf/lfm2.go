package main

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/lfm2"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runLFM2 writes an Lfm2ForCausalLM as llama.cpp's "lfm2" and an
// Lfm2MoeForCausalLM as its "lfm2moe", as ollama's importer
// (convert_lfm2.go) writes them. ollama v0.24.0 runs both on its own
// engine (model/models/lfm2, on the ggml kernels), which reads these keys
// and tensors; llama.cpp's loader reads the same keys.
//
//   - attention.head_count_kv is a per-layer array, 0 on the
//     short-convolution layers: both read such a layer as a convolution.
//     attention.key_length is the head's size; the rope is NeoX (rotate
//     half) over the whole head with rope.freq_base, as transformers', so
//     q and k keep their rows; rope.dimension_count is written for
//     ollama's engine.
//   - A convolution layer: shortconv.in_proj (B, C and x, as stored),
//     shortconv.conv [H, 1, K] squeezed to {K, H} in float32,
//     shortconv.out_proj. An attention layer: attn_q, attn_k, attn_v,
//     attn_q_norm, attn_k_norm, attn_output.
//   - operator_norm is attn_norm, ffn_norm is ffn_norm; the final
//     embedding_norm is token_embd_norm for lfm2 (as ollama's importer
//     writes it; v0.24.0's llama.cpp looks it up under a bare
//     "output_norm" and refuses the file, which ollama's engine runs)
//     and output_norm for lfm2moe (llama.cpp's name); ollama's engine
//     takes either.
//   - The dense MLPs: ffn_gate (w1), ffn_up (w3), ffn_down (w2); their
//     width is feed_forward_length. The MoE layers: ffn_gate_inp, the
//     expert bias as exp_probs_b.bias, the experts' stacks ffn_gate_exps,
//     ffn_up_exps {H, I, E} and ffn_down_exps {I, H, E} (one by one or
//     stacked, as the checkpoint holds them); the keys expert_count,
//     expert_used_count, expert_feed_forward_length,
//     leading_dense_block_count, expert_gating_func 2 (sigmoid),
//     expert_weights_scale (routed_scaling_factor) and norm_top_k_prob.
//
// Refused: conv_bias (neither reads the convolutions' biases), an MoE
// without the expert bias or norm_topk_prob (llama.cpp's lfm2moe requires
// the bias and always renormalizes), and a routed_scaling_factor other
// than 1 (llama.cpp's lfm2moe never scales; ollama's engine does).
func runLFM2(l *lm.Loaded, dir, out string, m *lfm2.Model) error {
	o := m.Options()
	s := o.Spec
	switch {
	case o.ConvBias:
		return fmt.Errorf("%s: conv_bias; llama.cpp's and ollama's lfm2 read no convolution biases", dir)
	case o.MoE && (!o.ExpertBias || !o.NormTopK):
		return fmt.Errorf("%s: use_expert_bias %v, norm_topk_prob %v; llama.cpp's lfm2moe needs the expert bias and renormalizes", dir, o.ExpertBias, o.NormTopK)
	case o.MoE && o.Scale != 1:
		return fmt.Errorf("%s: routed_scaling_factor %g; llama.cpp's lfm2moe does not scale the experts' weights", dir, o.Scale)
	case o.Rope.Type != "default":
		return fmt.Errorf("%s: rope scaling (%s); export-gguf writes lfm2 without it", dir, o.Rope.Type)
	}
	arch := "lfm2"
	if o.MoE {
		arch = "lfm2moe"
	}
	kvHeads := make([]int32, s.Layers)
	for i, k := range s.LayerKinds {
		if k == lm.KindFull {
			kvHeads[i] = int32(s.KVHeads)
		}
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", kvHeads},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))},
		{a + "rope.dimension_count", uint32(s.HeadDim)},
		{a + "shortconv.l_cache", uint32(o.Kernel)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	if o.MoE {
		meta = append(meta, []kv{
			{a + "expert_count", uint32(o.Experts)},
			{a + "expert_used_count", uint32(o.TopK)},
			{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
			{a + "leading_dense_block_count", uint32(o.Dense)},
			{a + "expert_gating_func", uint32(2)}, // sigmoid
			{a + "expert_weights_scale", float32(o.Scale)},
			{a + "norm_top_k_prob", o.NormTopK},
		}...)
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.add(b+"attn_norm.weight", true, p+"operator_norm.weight")
		if s.LayerKinds[i] == nn.KindConv {
			g.add(b+"shortconv.in_proj.weight", false, p+"conv.in_proj.weight")
			g.addF32(b+"shortconv.conv.weight", p+"conv.conv.weight", []uint64{uint64(o.Kernel), uint64(s.Hidden)}, nil)
			g.add(b+"shortconv.out_proj.weight", false, p+"conv.out_proj.weight")
		} else {
			sa := p + "self_attn."
			g.add(b+"attn_q.weight", false, sa+"q_proj.weight")
			g.add(b+"attn_k.weight", false, sa+"k_proj.weight")
			g.add(b+"attn_v.weight", false, sa+"v_proj.weight")
			g.add(b+"attn_q_norm.weight", true, sa+"q_layernorm.weight")
			g.add(b+"attn_k_norm.weight", true, sa+"k_layernorm.weight")
			g.add(b+"attn_output.weight", false, sa+"out_proj.weight")
		}
		g.add(b+"ffn_norm.weight", true, p+"ffn_norm.weight")
		ff := p + "feed_forward."
		if m.Experts(i) == nil {
			g.add(b+"ffn_gate.weight", false, ff+"w1.weight")
			g.add(b+"ffn_up.weight", false, ff+"w3.weight")
			g.add(b+"ffn_down.weight", false, ff+"w2.weight")
			continue
		}
		g.add(b+"ffn_gate_inp.weight", true, ff+"gate.weight")
		g.add(b+"exp_probs_b.bias", true, ff+"expert_bias")
		g.halves(b+"ffn_gate_exps.weight", b+"ffn_up_exps.weight", ff+"experts.gate_up_proj", o.Experts, o.MoEIntermediate, s.Hidden)
		g.add(b+"ffn_down_exps.weight", false, ff+"experts.down_proj") // [E, H, I]
	}
	norm := "token_embd_norm.weight" // ollama's importer's name for lfm2
	if o.MoE {
		norm = "output_norm.weight" // its lfm2moe's
	}
	g.add(norm, true, "model.embedding_norm.weight")
	if !s.TieEmbeddings { // tied: both take token_embd for a missing output
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// ropeBase is the rotary base of a default rope: InvFreq[1] is
// base^(-2/RotaryDim).
func ropeBase(r *nn.Rope) float64 {
	if len(r.InvFreq) < 2 {
		return 10000
	}
	return math.Pow(r.InvFreq[1], -float64(r.RotaryDim)/2)
}
