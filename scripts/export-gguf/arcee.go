package main

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runArcee writes an ArceeForCausalLM (AFM) as llama.cpp's "arcee":
// Llama's attention (q and k paired for its NORM rope), the ungated MLP
// as ffn_up and ffn_down (llama.cpp squares a ReLU there: relu2 only),
// no biases, no rope scaling.
func runArcee(l *lm.Loaded, dir, out string, m *llama.Model) error {
	o, s := m.Options(), m.Spec()
	var act struct {
		HiddenAct string `json:"hidden_act"`
	}
	if err := l.Config.Decode(&act); err != nil {
		return err
	}
	if a := act.HiddenAct; a != "" && nn.Activation(a) != nil && a != "relu2" {
		return fmt.Errorf("%s: hidden_act %q; llama.cpp's arcee squares a ReLU (relu2)", dir, a)
	}
	if o.QKVBias || o.OBias || o.MLPBias || o.Rope.Type != "default" || s.SlidingWindow > 0 {
		return fmt.Errorf("%s: export-gguf writes AFM without biases, rope scaling or a window (llama.cpp's arcee)", dir)
	}
	const a = "arcee."
	meta, err := header(l, dir, "arcee")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		g.addPaired(b+"attn_q.weight", s.Heads, p+"self_attn.q_proj.weight")
		g.addPaired(b+"attn_k.weight", s.KVHeads, p+"self_attn.k_proj.weight")
		g.pairs(b, []ggufPair{
			{"attn_norm.weight", p + "input_layernorm.weight", true},
			{"attn_v.weight", p + "self_attn.v_proj.weight", false},
			{"attn_output.weight", p + "self_attn.o_proj.weight", false},
			{"ffn_norm.weight", p + "post_attention_layernorm.weight", true},
			{"ffn_up.weight", p + "mlp.up_proj.weight", false},
			{"ffn_down.weight", p + "mlp.down_proj.weight", false},
		})
	}
	g.final(s.TieEmbeddings, true)
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}
