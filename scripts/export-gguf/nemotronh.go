package main

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nemotronh"
	"github.com/tputool/tputool/pipeline/nn"
)

// runNemotronH writes a NemotronHForCausalLM (Nemotron-H, Nemotron Nano 2,
// Nemotron 3 Nano) as llama.cpp's "nemotron_h_moe" when it has MoE layers
// and "nemotron_h" when not, as its convert_hf_to_gguf.py (NemotronHModel)
// and ollama's importer (convert_nemotron_h.go) write them. ollama v0.24.0
// runs both architectures on its own engine (model/models/nemotronh, a
// port of llama.cpp's graph on the same ggml kernels), which reads the
// same keys and tensors; the file suits either.
//
//   - The layer kinds are per-layer arrays: attention.head_count_kv is 0
//     except on the attention layers, feed_forward_length 0 except on the
//     MLP layers (intermediate_size) and the MoE layers
//     (moe_intermediate_size). Both read a layer with neither as Mamba-2,
//     one with KV heads and no FFN as attention, one with an FFN as MLP,
//     or as MoE whenever expert_count is set.
//   - Attention has no positional embedding: both builders run
//     nemotron_h without rope (LLAMA_ROPE_TYPE_NONE), so no rope key is
//     written and q and k keep their rows; the scale is 1/sqrt(head_dim)
//     (no attention.scale).
//   - The ssm keys: conv_kernel, inner_size (mamba_num_heads ×
//     mamba_head_dim), state_size, time_step_rank (mamba_num_heads) and
//     group_count (n_groups). A Mamba-2 layer: ssm_in (in_proj: z, x|B|C,
//     dt), ssm_conv1d [ConvDim, 1, K] squeezed to {K, ConvDim} and its
//     bias, ssm_dt.bias (dt_bias), ssm_a = -exp(A_log) and ssm_d (D) as
//     {1, heads}, ssm_norm as {inner/groups, groups} (the gated norm per
//     group, as transformers' NemotronH normalizes), ssm_out.
//   - MLP layers: ffn_up and ffn_down (relu², no gate). MoE layers: the
//     router ffn_gate_inp, its correction bias as exp_probs_b.bias, the
//     expert stacks ffn_up_exps {H, I, E} and ffn_down_exps {I, H, E}
//     (the experts' tensors one by one or stacked, as the checkpoint holds
//     them), the shared expert ffn_up_shexp / ffn_down_shexp; the keys
//     expert_count, expert_used_count, expert_feed_forward_length,
//     expert_shared_feed_forward_length, expert_shared_count,
//     expert_weights_norm (norm_topk_prob) and expert_weights_scale
//     (routed_scaling_factor, which llama.cpp always applies: without it
//     the experts would weigh 0). The gating is sigmoid in both builders
//     whatever the keys say; expert_gating_func is written for the record.
//   - Norms, the router, its bias, the convolution and the Mamba vectors
//     are float32, as the converter writes them; the matrices keep the
//     checkpoint's dtype. A tied head is left out (both take token_embd).
//   - A dense file carries expert_feed_forward_length too (unread): v0.24.0's
//     llama.cpp otherwise divides by its zero expert_used_count loading it.
//
// Refused, as llama.cpp's or ollama's nemotron_h cannot run them as
// transformers does: MLP and MoE layers in one model (with expert_count
// set every FFN layer is MoE), MoE without a shared expert (llama.cpp
// builds it unconditionally), moe_latent_size (v0.24.0's llama.cpp has
// no latent projections), n_group with topk_group < n_group (ollama's
// engine does not limit the groups), use_bias (in_proj/out_proj biases
// are not read), use_conv_bias false (llama.cpp adds the bias
// unconditionally) and mlp_bias (ollama's engine reads no MLP biases).
// The attention has no biases whatever attention_bias says, as in
// transformers. A model without attention layers is written (ollama's
// engine runs it), but v0.24.0's llama.cpp aborts on it
// (GGML_ASSERT(buffer): its hybrid memory's KV cache is then empty).
func runNemotronH(l *lm.Loaded, dir, out string, m *nemotronh.Model) error {
	o := m.Options()
	s, d, r := o.Spec, o.Mamba, o.Router
	var mlp, moe bool
	for _, k := range s.LayerKinds {
		mlp = mlp || k == nemotronh.KindMLP
		moe = moe || k == nemotronh.KindMoE
	}
	switch {
	case moe && mlp:
		return fmt.Errorf("%s: the layer types mix MLP (-) and MoE (E) layers; llama.cpp's and ollama's nemotron_h_moe run every FFN layer as MoE", dir)
	case moe && o.Latent > 0:
		return fmt.Errorf("%s: moe_latent_size %d; ollama v0.24.0's llama.cpp has no latent projections in nemotron_h_moe", dir, o.Latent)
	case moe && o.Shared == 0:
		return fmt.Errorf("%s: n_shared_experts 0; llama.cpp's nemotron_h_moe requires the shared expert", dir)
	case moe && r.Groups > 1 && r.TopKGroup < r.Groups:
		return fmt.Errorf("%s: n_group %d with topk_group %d; ollama's nemotron_h_moe engine does not limit the groups", dir, r.Groups, r.TopKGroup)
	case o.ProjBias:
		return fmt.Errorf("%s: use_bias (in_proj/out_proj biases); llama.cpp's nemotron_h reads none", dir)
	case !o.ConvBias:
		return fmt.Errorf("%s: use_conv_bias false; llama.cpp's nemotron_h always adds conv1d's bias", dir)
	case o.MLPBias:
		return fmt.Errorf("%s: mlp_bias; ollama's nemotron_h engine reads no MLP biases (and llama.cpp none on the shared expert)", dir)
	}
	arch := "nemotron_h"
	if moe {
		arch = "nemotron_h_moe"
	}
	kvHeads := make([]int32, s.Layers)
	ff := make([]int32, s.Layers)
	for i, k := range s.LayerKinds {
		switch k {
		case lm.KindFull:
			kvHeads[i] = int32(s.KVHeads)
		case nemotronh.KindMLP:
			ff[i] = int32(s.Intermediate)
		case nemotronh.KindMoE:
			ff[i] = int32(o.MoEIntermediate)
		}
	}
	a := arch + "."
	meta, err := header(l, dir, arch)
	if err != nil {
		return err
	}
	for i := range meta { // header reads the file type from model.embed_tokens.weight
		if meta[i].key == "general.file_type" {
			switch l.StoredDType("backbone.embeddings.weight") {
			case dtypes.Float16:
				meta[i].val = uint32(1)
			case dtypes.BFloat16:
				meta[i].val = uint32(32)
			}
		}
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(min(s.MaxPositions, math.MaxInt32))},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", ff},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", kvHeads},
		{a + "attention.key_length", uint32(s.HeadDim)},
		{a + "attention.value_length", uint32(s.HeadDim)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	meta = append(meta, mamba2Meta(a, d)...)
	if !moe {
		// v0.24.0's llama.cpp computes n_ff / expert_used_count for every
		// layer when expert_feed_forward_length is unset: a division by
		// zero (SIGFPE) loading a dense file. Its value is unread here.
		meta = append(meta, kv{a + "expert_feed_forward_length", uint32(s.Intermediate)})
	} else {
		meta = append(meta, []kv{
			{a + "expert_count", uint32(r.Experts)},
			{a + "expert_used_count", uint32(r.TopK)},
			{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
			{a + "expert_shared_feed_forward_length", uint32(o.Shared)},
			{a + "expert_shared_count", uint32(1)},
			{a + "expert_weights_norm", r.NormTopK},
			{a + "expert_weights_scale", float32(r.Scale)},
			{a + "expert_gating_func", uint32(2)}, // sigmoid
		}...)
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "backbone.embeddings.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("backbone.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		mp := p + "mixer."
		g.add(b+"attn_norm.weight", true, p+"norm.weight")
		switch s.LayerKinds[i] {
		case nn.KindMamba:
			g.mamba2(b, mp, d)
		case lm.KindFull:
			g.add(b+"attn_q.weight", false, mp+"q_proj.weight")
			g.add(b+"attn_k.weight", false, mp+"k_proj.weight")
			g.add(b+"attn_v.weight", false, mp+"v_proj.weight")
			g.add(b+"attn_output.weight", false, mp+"o_proj.weight")
		case nemotronh.KindMLP:
			g.add(b+"ffn_up.weight", false, mp+"up_proj.weight")
			g.add(b+"ffn_down.weight", false, mp+"down_proj.weight")
		case nemotronh.KindMoE:
			g.add(b+"ffn_gate_inp.weight", true, mp+"gate.weight")
			g.add(b+"exp_probs_b.bias", true, mp+"gate.e_score_correction_bias")
			g.add(b+"ffn_up_exps.weight", false, mp+"experts.up_proj")     // [E, I, H]
			g.add(b+"ffn_down_exps.weight", false, mp+"experts.down_proj") // [E, H, I]
			g.add(b+"ffn_up_shexp.weight", false, mp+"shared_experts.up_proj.weight")
			g.add(b+"ffn_down_shexp.weight", false, mp+"shared_experts.down_proj.weight")
		}
	}
	g.add("output_norm.weight", true, "backbone.norm_f.weight")
	if !s.TieEmbeddings { // tied: both take token_embd for a missing output
		g.add("output.weight", false, "lm_head.weight")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
