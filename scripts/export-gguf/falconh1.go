package main

import (
	"bufio"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/pipeline/falconh1"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// runFalconH1 writes a FalconH1ForCausalLM as llama.cpp's "falcon-h1",
// whose graph has no multipliers: as convert_hf_to_gguf.py does, they are
// folded into the weights, written in float32: embedding_multiplier into
// token_embd, lm_head_multiplier into output (written even when tied,
// the embeddings being scaled otherwise), attention_in_multiplier into
// q, k and v and key_multiplier into k, attention_out_multiplier into
// o, ssm_in_multiplier and the mup vector (ssm_multipliers, row by row)
// into ssm_in, ssm_out_multiplier into ssm_out, mlp_multipliers into
// ffn_gate and ffn_down. llama.cpp's rotary is NEOX (rotate-half), so q
// and k keep their rows; its mixer gates before the grouped norm (or
// has none): a mixer that normalizes before the gate, biases on the
// attention or on in_proj and out_proj (which its graph reads only in
// part) and a capped dt are refused.
func runFalconH1(l *lm.Loaded, dir, out string, m *falconh1.Model) error {
	o := m.FalconOptions()
	s, d, mo := o.Spec, o.Mamba, o.MambaOpts
	switch {
	case o.QKVBias || o.OBias:
		return fmt.Errorf("%s: attention_bias; llama.cpp's falcon-h1 adds no o_proj bias, so export-gguf writes Falcon-H1 without attention biases", dir)
	case o.Layout.InBias || o.Layout.OutBias || !o.Layout.ConvBias:
		return fmt.Errorf("%s: llama.cpp's falcon-h1 reads no in_proj or out_proj biases and takes conv1d's (mamba_proj_bias and projectors_bias false, mamba_conv_bias true)", dir)
	case mo.Norm == nn.Mamba2NormFirst:
		return fmt.Errorf("%s: mamba_norm_before_gate with mamba_rms_norm; llama.cpp's mixer gates before its norm", dir)
	case mo.DtMin > 0 || mo.DtMax > 0:
		return fmt.Errorf("%s: time_step_limit clamps dt; llama.cpp's falcon-h1 does not", dir)
	case o.Rope.Type != "default" || o.Rope.RotaryDim != s.HeadDim:
		return fmt.Errorf("%s: export-gguf writes Falcon-H1 without rope scaling or a partial rotary", dir)
	}
	const a = "falcon-h1."
	meta, err := header(l, dir, "falcon-h1")
	if err != nil {
		return err
	}
	meta = append(meta, llamaMeta(a, &s, o.Eps, ropeBase(o.Rope), s.HeadDim)...)
	meta = append(meta, []kv{}...)
	meta = append(meta, mamba2Meta(a, d)...)
	g := &ggufTensors{l: l}
	scaled := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	g.addRows("token_embd.weight", "model.embed_tokens.weight", scaled(o.EmbedScale))
	gn := d.Groups * d.State
	mup := func(row int) float64 { // the mup vector's part of in_proj's row, times ssm_in_multiplier
		f := o.SSMIn
		if mo.Mup == nil {
			return f
		}
		part := 4
		switch in := d.Inner(); {
		case row < in:
			part = 0
		case row < 2*in:
			part = 1
		case row < 2*in+gn:
			part = 2
		case row < 2*in+2*gn:
			part = 3
		}
		return f * mo.Mup[part]
	}
	heads := uint64(d.Heads)
	neg := func(x float32) float32 { return -float32(math.Exp(float64(x))) }
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		mp := p + "mamba."
		g.add(b+"attn_norm.weight", true, p+"input_layernorm.weight")
		g.addRows(b+"attn_q.weight", p+"self_attn.q_proj.weight", scaled(o.AttnIn))
		g.addRows(b+"attn_k.weight", p+"self_attn.k_proj.weight", scaled(o.AttnIn*o.Key))
		g.addRows(b+"attn_v.weight", p+"self_attn.v_proj.weight", scaled(o.AttnIn))
		g.addRows(b+"attn_output.weight", p+"self_attn.o_proj.weight", scaled(o.AttnOut))
		g.addRows(b+"ssm_in.weight", mp+"in_proj.weight", mup)
		g.addF32(b+"ssm_conv1d.weight", mp+"conv1d.weight", []uint64{uint64(d.ConvKernel), uint64(d.ConvDim())}, nil)
		g.add(b+"ssm_conv1d.bias", true, mp+"conv1d.bias")
		g.add(b+"ssm_dt.bias", true, mp+"dt_bias")
		g.addF32(b+"ssm_a", mp+"A_log", []uint64{1, heads}, neg)
		g.addF32(b+"ssm_d", mp+"D", []uint64{1, heads}, nil)
		if !o.Layout.NoNorm {
			g.addF32(b+"ssm_norm.weight", mp+"norm.weight", []uint64{uint64(d.Inner() / d.Groups), uint64(d.Groups)}, nil)
		}
		g.addRows(b+"ssm_out.weight", mp+"out_proj.weight", scaled(o.SSMOut))
		g.add(b+"ffn_norm", true, p+"pre_ff_layernorm.weight") // llama.cpp's loader asks for it without ".weight"
		g.addRows(b+"ffn_gate.weight", p+"feed_forward.gate_proj.weight", scaled(o.Gate))
		g.add(b+"ffn_up.weight", false, p+"feed_forward.up_proj.weight")
		g.addRows(b+"ffn_down.weight", p+"feed_forward.down_proj.weight", scaled(o.Down))
		if o.MLPBias { // the gate's bias inside the activation scales with it; down's after it
			g.addRows(b+"ffn_gate.bias", p+"feed_forward.gate_proj.bias", scaled(o.Gate))
			g.add(b+"ffn_up.bias", true, p+"feed_forward.up_proj.bias")
			g.addRows(b+"ffn_down.bias", p+"feed_forward.down_proj.bias", scaled(o.Down))
		}
	}
	g.add("output_norm.weight", true, "model.final_layernorm.weight")
	head := "lm_head.weight"
	if s.TieEmbeddings {
		head = "model.embed_tokens.weight"
	}
	g.addRows("output.weight", head, scaled(o.LogitScale))
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// addRows adds GGUF tensor gguf holding checkpoint weight name as
// float32, each row r (the outermost index; each element of a vector)
// times scale(r).
func (g *ggufTensors) addRows(gguf, name string, scale func(row int) float64) {
	if g.err != nil {
		return
	}
	t, err := newTensor(g.l, gguf, []string{name}, true, 0)
	if err != nil {
		g.err = err
		return
	}
	shape, _ := g.l.Shape(name)
	cols := 1
	for _, x := range shape[1:] {
		cols *= x
	}
	l := g.l
	t.write = func(w *bufio.Writer) error {
		x, err := l.Tensor(name, dtypes.Float32)
		if err != nil {
			return err
		}
		defer x.FinalizeAll()
		x.MustMutableFlatData(func(flat any) {
			v := flat.([]float32)
			for i := range v {
				v[i] = float32(float64(v[i]) * scale(i/cols))
			}
		})
		return writeData(w, x, ggmlF32)
	}
	g.ts = append(g.ts, t)
}
