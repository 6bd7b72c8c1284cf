package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/deepseek"
	"github.com/tputool/tputool/pipeline/lm"
)

// runMLA writes a DeepseekV2ForCausalLM as llama.cpp's "deepseek2" in its
// original layout (kv_b_proj whole, as attn_kv_b; no key_length_mla, so
// llama.cpp expands it into every head's keys and values): q LoRA
// (attn_q_a, attn_q_a_norm, attn_q_b), attn_kv_a_mqa and its norm, the
// leading dense layers' MLP, and on the sparse layers the softmax router
// (expert_gating_func 1), the expert stacks and the shared experts. The
// rotary dims are adjacent pairs in both (llama.cpp's NORM rope), so no
// rows are permuted. llama.cpp decides whether a deepseek2 projects its
// query with a plain q_proj by its layer count alone (26 or 27 layers, the
// Lite models'), so a model without q LoRA must have that many and one
// with q LoRA must not. The YaRN metadata is rope.scaling.* with
// yarn_log_multiplier 0.1·mscale_all_dim, as llama.cpp's converter writes
// it; llama.cpp applies mscale² to the softmax scale, as tputool does.
// The pre-tokenizer stays header's "qwen2": ollama's own engine takes no
// deepseek2 but DeepSeek-V3's tokenizer and runs a sigmoid router only, so
// ollama hands such a file to its llama.cpp runner, whose deepseek2 has
// the softmax router.
func runMLA(l *lm.Loaded, dir, out string, m *deepseek.Model) error {
	o, s := m.Options(), m.Spec()
	if !o.V2 {
		return fmt.Errorf("%s: export-gguf writes DeepSeek-V2's MLA only (ollama imports a DeepseekV3ForCausalLM folder itself)", dir)
	}
	if o.Groups > 1 && o.TopKGroup < o.Groups {
		return fmt.Errorf("%s: topk_method group_limited_greedy; llama.cpp limits groups by their two best scores (DeepSeek-V3's way), not by their best one (V2's)", dir)
	}
	if o.Shared == 0 {
		return fmt.Errorf("%s: n_shared_experts 0; llama.cpp's deepseek2 requires the shared experts", dir)
	}
	if lite := s.Layers == 26 || s.Layers == 27; lite != (o.QLoraRank == 0) {
		return fmt.Errorf("%s: %d layers with q_lora_rank %d; llama.cpp's deepseek2 reads a plain q_proj exactly when there are 26 or 27 layers", dir, s.Layers, o.QLoraRank)
	}
	dense := 0
	for dense < len(o.Sparse) && !o.Sparse[dense] {
		dense++
	}
	for i := dense; i < len(o.Sparse); i++ {
		if !o.Sparse[i] {
			return fmt.Errorf("%s: layer %d is dense after a sparse one; deepseek2's dense layers lead", dir, i)
		}
	}
	rs, err := readRope(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	const a = "deepseek2."
	meta, err := header(l, dir, "deepseek2")
	if err != nil {
		return err
	}
	meta = append(meta, []kv{
		{a + "block_count", uint32(s.Layers)},
		{a + "context_length", uint32(s.MaxPositions)},
		{a + "embedding_length", uint32(s.Hidden)},
		{a + "feed_forward_length", uint32(s.Intermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.Heads)},
		{a + "attention.key_length", uint32(o.QKNope + o.QKRope)},
		{a + "attention.value_length", uint32(o.VHead)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "attention.q_lora_rank", uint32(o.QLoraRank)},
		{a + "attention.kv_lora_rank", uint32(o.KVLoraRank)},
		{a + "rope.dimension_count", uint32(o.QKRope)},
		{a + "rope.freq_base", float32(rs.theta)},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "expert_feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "expert_shared_count", uint32(o.Shared)},
		{a + "expert_weights_scale", float32(o.RoutedScale)},
		{a + "expert_weights_norm", false},
		{a + "expert_gating_func", uint32(1)}, // softmax
		{a + "leading_dense_block_count", uint32(dense)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	if rs.factor > 1 {
		meta = append(meta, []kv{
			{a + "rope.scaling.type", "yarn"},
			{a + "rope.scaling.factor", float32(rs.factor)},
			{a + "rope.scaling.original_context_length", uint32(rs.origMax)},
			{a + "rope.scaling.yarn_log_multiplier", float32(0.1 * rs.mscaleAllDim)},
		}...)
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := 0; i < s.Layers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		ps := []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_kv_a_mqa.weight", p + "self_attn.kv_a_proj_with_mqa.weight", false},
			{"attn_kv_a_norm.weight", p + "self_attn.kv_a_layernorm.weight", true},
			{"attn_kv_b.weight", p + "self_attn.kv_b_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
		}
		if o.QLoraRank > 0 {
			ps = append(ps, ggufPair{"attn_q_a.weight", p + "self_attn.q_a_proj.weight", false},
				ggufPair{"attn_q_a_norm.weight", p + "self_attn.q_a_layernorm.weight", true}, ggufPair{"attn_q_b.weight", p + "self_attn.q_b_proj.weight", false})
		} else {
			ps = append(ps, ggufPair{"attn_q.weight", p + "self_attn.q_proj.weight", false})
		}
		if !o.Sparse[i] {
			g.pairs(b, append(ps, denseMLP(p)...))
			continue
		}
		g.pairs(b, append(append(ps, ggufPair{"ffn_gate_inp.weight", p + "mlp.gate.weight", true}), sharedExperts(p+"mlp.")...))
		g.experts(b, p+"mlp.", o.Experts, m.Layout().Experts)
	}
	g.final(s.TieEmbeddings, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// ropeScaling is a config.json's rope_theta (DeepseekV2Config's 10000
// by default) and its YaRN rope_scaling (factor 0 without one).
type ropeScaling struct {
	theta, factor, mscale, mscaleAllDim float64
	origMax                             int
	// explicitTheta reports rope_theta present (else theta is 10000).
	explicitTheta bool
}

// readRope reads path's rope_theta and rope_scaling (type or rope_type
// "yarn"); another scaling type is refused, and so are an mscale other
// than mscale_all_dim, for which llama.cpp's YaRN attention factor is
// not transformers', beta_fast and beta_slow other than 32 and 1 (the
// ones llama.cpp's deepseek2 assumes), and transformers v5's
// rope_parameters, which this script does not read.
func readRope(path string) (ropeScaling, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ropeScaling{}, err
	}
	var c struct {
		Theta      *float64        `json:"rope_theta"`
		Parameters json.RawMessage `json:"rope_parameters"`
		Scaling    *struct {
			Type         string   `json:"type"`
			RopeType     string   `json:"rope_type"`
			Factor       float64  `json:"factor"`
			Orig         int      `json:"original_max_position_embeddings"`
			MScale       float64  `json:"mscale"`
			MScaleAllDim float64  `json:"mscale_all_dim"`
			BetaFast     *float64 `json:"beta_fast"`
			BetaSlow     *float64 `json:"beta_slow"`
		} `json:"rope_scaling"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return ropeScaling{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Parameters) > 0 && string(c.Parameters) != "null" {
		return ropeScaling{}, fmt.Errorf("%s: rope_parameters (transformers v5's layout) is not read by export-gguf; write rope_theta and rope_scaling", path)
	}
	r := ropeScaling{theta: 10000}
	if c.Theta != nil {
		r.theta, r.explicitTheta = *c.Theta, true
	}
	if sc := c.Scaling; sc != nil {
		t := sc.Type
		if t == "" {
			t = sc.RopeType
		}
		if t != "yarn" {
			return ropeScaling{}, fmt.Errorf("%s: rope_scaling type %q; export-gguf writes YaRN or no scaling", path, t)
		}
		if (sc.BetaFast != nil && *sc.BetaFast != 32) || (sc.BetaSlow != nil && *sc.BetaSlow != 1) {
			return ropeScaling{}, fmt.Errorf("%s: rope_scaling beta_fast/beta_slow other than 32/1; llama.cpp assumes those", path)
		}
		if sc.MScale != sc.MScaleAllDim {
			return ropeScaling{}, fmt.Errorf("%s: rope_scaling mscale %g differs from mscale_all_dim %g; llama.cpp's deepseek2 assumes them equal", path, sc.MScale, sc.MScaleAllDim)
		}
		r.factor, r.origMax, r.mscale, r.mscaleAllDim = sc.Factor, sc.Orig, sc.MScale, sc.MScaleAllDim
	}
	return r, nil
}
