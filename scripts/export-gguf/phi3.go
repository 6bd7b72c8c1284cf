package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/mixtral"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/phi3"
)

// runPhi3 writes a Phi3ForCausalLM as llama.cpp's "phi3" (the names and
// keys of ollama's importer, convert_phi3.go) and a Phi-3.5-MoE as its
// "phimoe" (llama.cpp's loader for it).
//
//   - phi3: attn_qkv (qkv_proj, as stored), attn_output, ffn_up (the fused
//     gate_up_proj, gate first, which llama.cpp's SwiGLU halves the same
//     way), ffn_down, RMSNorm weights attn_norm, ffn_norm, output_norm;
//     output unless tied. rope.dimension_count is the rotary dims
//     (partial_rotary_factor's share of the head; ollama's importer writes
//     the whole head), NeoX-style as transformers' rotate_half, so no row
//     is permuted.
//   - phimoe: attn_q, attn_k, attn_v and attn_output with their biases,
//     attn_norm and ffn_norm and output_norm with theirs, ffn_gate_inp,
//     the experts' ffn_gate_exps, ffn_up_exps and ffn_down_exps, output
//     and its bias.
//   - LongRoPE: rope_factors_short.weight and rope_factors_long.weight
//     (the config's lists, float32), rope.scaling.original_context_length
//     and rope.scaling.attn_factor (Phi-3's attention factor; Phi-3.5-MoE's
//     short_mscale). llama.cpp takes the long factors for the whole
//     session when its context is longer than the original length, where
//     tputool and transformers switch by the sequence's length.
//
// llama.cpp's phimoe is not transformers' Phi-3.5-MoE: it normalizes by
// RMSNorm plus the LayerNorms' biases, and routes by the softmax's top 2
// renormalized where sparsemixer weighs each choice by a softmax over the
// logits near it; so its logits differ from tputool's and transformers'
// (the bench compares speed). It also runs Phi-3's windows as full
// attention ("Phi SWA is currently disabled"). Refused: a MoE whose
// short_mscale and long_mscale differ (llama.cpp has one factor).
func runPhi3(l *lm.Loaded, dir, out string) error {
	var o llama.Options
	var moe *phi3.MoEModel
	switch m := l.Model.(type) {
	case *llama.Model:
		o = m.Options()
	case *phi3.MoEModel:
		moe, o = m, m.Options().Options
	}
	s := o.Spec
	r := o.Rope
	arch := "phi3"
	if moe != nil {
		arch = "phimoe"
		if r.LongInvFreq != nil && r.AttentionFactor != r.LongAttentionFactor {
			return fmt.Errorf("%s: short_mscale %g and long_mscale %g differ; llama.cpp's phimoe has one attention factor", dir, r.AttentionFactor, r.LongAttentionFactor)
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
		{a + "attention.head_count_kv", uint32(s.KVHeads)},
		{a + "attention.layer_norm_rms_epsilon", float32(o.Eps)},
		{a + "rope.dimension_count", uint32(r.RotaryDim)},
		{a + "vocab_size", uint32(s.VocabSize)},
	}...)
	if s.SlidingWindow > 0 {
		meta = append(meta, kv{a + "attention.sliding_window", uint32(s.SlidingWindow)})
	}
	if moe != nil {
		mo := moe.Options()
		meta = append(meta, kv{a + "expert_count", uint32(mo.Experts)}, kv{a + "expert_used_count", uint32(mo.TopK)})
	}
	short, long, err := longFactors(l, r)
	if err != nil {
		return err
	}
	if long != nil {
		meta = append(meta, kv{a + "rope.freq_base", float32(longropeBase(r, short))},
			kv{a + "rope.scaling.original_context_length", uint32(r.LongAfter)},
			kv{a + "rope.scaling.attn_factor", float32(r.AttentionFactor)})
	} else {
		meta = append(meta, kv{a + "rope.freq_base", float32(ropeBase(r))})
	}
	g := &ggufTensors{l: l}
	g.add("token_embd.weight", false, "model.embed_tokens.weight")
	if long != nil {
		g.ts = append(g.ts, f32Const("rope_factors_long.weight", long), f32Const("rope_factors_short.weight", short))
	}
	for i := range s.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		if moe == nil {
			g.add(b+"attn_norm.weight", true, p+"input_layernorm.weight")
			g.add(b+"attn_qkv.weight", false, p+"self_attn.qkv_proj.weight")
			g.add(b+"attn_output.weight", false, p+"self_attn.o_proj.weight")
			g.add(b+"ffn_norm.weight", true, p+"post_attention_layernorm.weight")
			g.add(b+"ffn_up.weight", false, p+"mlp.gate_up_proj.weight")
			g.add(b+"ffn_down.weight", false, p+"mlp.down_proj.weight")
			continue
		}
		mo := moe.Options()
		for _, x := range []struct{ gguf, hf string }{
			{"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
			{"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
		} {
			norm := x.gguf == "attn_norm" || x.gguf == "ffn_norm"
			g.add(b+x.gguf+".weight", norm, p+x.hf+".weight")
			if norm || o.QKVBias {
				g.add(b+x.gguf+".bias", true, p+x.hf+".bias")
			}
		}
		bl := p + mixtral.Layout.Block + "."
		g.add(b+"ffn_gate_inp.weight", true, bl+"gate.weight")
		g.halves(b+"ffn_gate_exps.weight", b+"ffn_up_exps.weight", bl+"experts.gate_up_proj", mo.Experts, mo.MoEIntermediate, s.Hidden)
		g.add(b+"ffn_down_exps.weight", false, bl+"experts.down_proj") // [E, H, I]
	}
	g.add("output_norm.weight", true, "model.norm.weight")
	if o.LayerNorm {
		g.add("output_norm.bias", true, "model.norm.bias")
	}
	if !s.TieEmbeddings { // tied: llama.cpp's phi3 takes token_embd for a missing output
		g.add("output.weight", false, "lm_head.weight")
	}
	if o.HeadBias {
		g.add("output.bias", true, "lm_head.bias")
	}
	if g.err != nil {
		return g.err
	}
	return write(out, meta, g.ts)
}

// longFactors are the short_factor and long_factor lists of the config's
// LongRoPE (nil, nil without it).
func longFactors(l *lm.Loaded, r *nn.Rope) (short, long []float32, err error) {
	if r.LongInvFreq == nil {
		return nil, nil, nil
	}
	sc, err := nn.ParseRopeScaling(l.Config.Raw["rope_scaling"])
	if err == nil && sc == nil {
		sc, err = nn.ParseRopeScaling(l.Config.Raw["rope_parameters"])
	}
	if err != nil {
		return nil, nil, err
	}
	list := func(key string) ([]float32, error) {
		xs, ok := sc[key].([]any)
		if !ok || len(xs) != len(r.InvFreq) {
			return nil, fmt.Errorf("rope_scaling %q: want %d numbers", key, len(r.InvFreq))
		}
		out := make([]float32, len(xs))
		for i, x := range xs {
			f, ok := x.(float64)
			if !ok {
				return nil, fmt.Errorf("rope_scaling %q[%d] is %v", key, i, x)
			}
			out[i] = float32(f)
		}
		return out, nil
	}
	if short, err = list("short_factor"); err != nil {
		return nil, nil, err
	}
	long, err = list("long_factor")
	return short, long, err
}

// longropeBase is the rotary base of a LongRoPE: InvFreq[1] is
// 1/(short[1]·base^(2/RotaryDim)).
func longropeBase(r *nn.Rope, short []float32) float64 {
	if len(r.InvFreq) < 2 {
		return 10000
	}
	return math.Pow(1/(r.InvFreq[1]*float64(short[1])), float64(r.RotaryDim)/2)
}

// f32Const is a float32 GGUF tensor of the values vs.
func f32Const(name string, vs []float32) tensor {
	return tensor{name: name, dims: []uint64{uint64(len(vs))}, typ: ggmlF32, size: int64(4 * len(vs)),
		write: func(w *bufio.Writer) error { return binary.Write(w, binary.LittleEndian, vs) }}
}
