package main

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/dbrx"
	"github.com/tputool/tputool/pipeline/lm"
)

// runDbrx writes a DbrxForCausalLM as llama.cpp's "dbrx": the fused
// attn_qkv, attn_norm and attn_output_norm (norm_1 and norm_2, LayerNorms
// without a bias, as llama.cpp's LLM_NORM runs them with no bias), the
// router as ffn_gate_inp and each layer's experts, split from w1, v1 and
// the transposed w2 as the loader reads them, as ffn_gate_exps,
// ffn_up_exps and ffn_down_exps (feed_forward_length the experts' width,
// which llama.cpp's dbrx reads for them), attention.clamp_kqv the clamp
// (llama.cpp requires one: the largest float32 when clip_qkv is null).
// llama.cpp's graph takes the softmax's top k divided by their sum and
// SiLU experts, so moe_normalize_expert_weights null and another
// ffn_act_fn are refused. The rotary is NEOX (rotate-half) over whole
// heads.
func runDbrx(l *lm.Loaded, dir, out string, m *dbrx.Model) error {
	o, s := m.Options(), m.Spec()
	const arch = "dbrx"
	var c struct {
		FFN struct {
			Act *struct {
				Name string `json:"name"`
			} `json:"ffn_act_fn"`
		} `json:"ffn_config"`
	}
	if err := l.Config.Decode(&c); err != nil {
		return err
	}
	switch {
	case !o.NormTopK:
		return fmt.Errorf("%s: moe_normalize_expert_weights is null; llama.cpp's %s divides the top weights by their sum", dir, arch)
	case c.FFN.Act != nil && c.FFN.Act.Name != "silu":
		return fmt.Errorf("%s: ffn_act_fn %q; llama.cpp's %s runs SiLU experts", dir, c.FFN.Act.Name, arch)
	case o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim:
		return fmt.Errorf("%s: export-gguf writes %s with the default rotary over whole heads", dir, arch)
	}
	clamp := float32(math.MaxFloat32)
	if o.ClipQKV > 0 {
		clamp = float32(o.ClipQKV)
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
		{a + "feed_forward_length", uint32(o.MoEIntermediate)},
		{a + "attention.head_count", uint32(s.Heads)},
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.layer_norm_epsilon", float32(o.Eps)},
		{a + "attention.clamp_kqv", clamp},
		{a + "rope.freq_base", float32(ropeBase(o.Rope))},
		{a + "expert_count", uint32(o.Experts)},
		{a + "expert_used_count", uint32(o.TopK)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_qkv.weight", p + "self_attn.qkv_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"attn_output_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_gate_inp.weight", p + "mlp.gate.weight", true},
		})
		g.experts(b, p+"mlp.", o.Experts, dbrx.Layout.Experts)
	}
	g.final(false, false)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
