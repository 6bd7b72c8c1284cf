// Package falconh1ref is a plain-Go float64 forward pass of
// FalconH1ForCausalLM, written from transformers' modular_falcon_h1.py
// (FalconH1DecoderLayer, FalconH1Attention, FalconH1Mixer's torch_forward,
// FalconH1MLP, FalconH1Model), and the tiny checkpoints its tests run.
//
// Per layer, h = input_layernorm(x):
//
//   - the Mamba-2 mixer on h·ssm_in_multiplier, in_proj's output times
//     the mup vector (ssm_multipliers over the gate, x, B, C and dt), the
//     output gated by silu(gate) with or without the grouped RMSNorm,
//     times ssm_out_multiplier (mamba2ref.Mixer);
//   - attention on h·attention_in_multiplier, its keys times
//     key_multiplier before the rotary, softmax scale 1/sqrt(head_dim),
//     times attention_out_multiplier;
//
// both added to x; then x += down(up(h2)·silu(gate(h2)·m_gate))·m_down
// with h2 = pre_ff_layernorm(x). The embeddings are multiplied by
// embedding_multiplier and the logits by lm_head_multiplier; the final
// norm is model.final_layernorm. Everything is float64 and shares no code
// with pipeline/falconh1 or pipeline/nn.
package falconh1ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// FalconH1 describes a tiny Falcon-H1.
type FalconH1 struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim             int
	// The mixer: MambaHeads of MambaHeadDim (mamba_d_ssm their product),
	// MambaGroups, MambaState, MambaConv; the biases of conv1d, in_proj
	// (mamba_proj_bias) and out_proj (projectors_bias).
	MambaHeads, MambaHeadDim, MambaGroups, MambaState, MambaConv int
	ConvBias, InBias, OutBias                                    bool
	// RMSNorm is mamba_rms_norm, NormBeforeGate mamba_norm_before_gate.
	RMSNorm, NormBeforeGate bool
	// DtMax > 0 writes time_step_limit [0, DtMax].
	DtMax float64
	// AttnBias is attention_bias (q, k, v and o), MLPBias mlp_bias.
	AttnBias, MLPBias bool
	Theta, Eps        float64
	Tied              bool
	Chunk             int
	// The multipliers.
	Embedding, LMHead, Key, AttnIn, AttnOut, SSMIn, SSMOut float64
	MLP                                                    [2]float64
	SSM                                                    [5]float64
	Seed                                                   uint64
}

// Tiny is a small Falcon-H1 with every multiplier other than 1: 2 layers,
// hidden 32, 4 heads of 8 over 2, the mixer 4 heads of 8 in 2 groups of
// state 8, the grouped RMSNorm before the gate.
func Tiny() FalconH1 {
	return FalconH1{
		Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		MambaHeads: 4, MambaHeadDim: 8, MambaGroups: 2, MambaState: 8, MambaConv: 4, ConvBias: true,
		RMSNorm: true, NormBeforeGate: true, Theta: 10000, Eps: 1e-5, Chunk: 4,
		Embedding: 5, LMHead: 0.5, Key: 1.7, AttnIn: 0.8, AttnOut: 1.3, SSMIn: 1.2, SSMOut: 0.7,
		MLP: [2]float64{0.6, 1.4}, SSM: [5]float64{0.9, 1.1, 0.8, 1.25, 3}, Seed: 60,
	}
}

// TinyPlain is Tiny without the mixer's norm (mamba_rms_norm false, the
// releases' setting: y·silu(gate)), with every bias, tied, dt capped.
func TinyPlain() FalconH1 {
	c := Tiny()
	c.RMSNorm, c.NormBeforeGate = false, false
	c.InBias, c.OutBias, c.AttnBias, c.MLPBias, c.Tied, c.DtMax = true, true, true, true, true, 0.02
	c.Seed = 61
	return c
}

// Inner is mamba_d_ssm.
func (c FalconH1) Inner() int { return c.MambaHeads * c.MambaHeadDim }

func (c FalconH1) convDim() int { return c.Inner() + 2*c.MambaGroups*c.MambaState }

// tensor is one checkpoint tensor.
type tensor struct {
	name  string
	shape []int
	init  string
}

func (c FalconH1) tensors() []tensor {
	H, D := c.Hidden, c.HeadDim
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "qk", c.Heads*D, H)
		add("self_attn.k_proj.weight", "qk", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		if c.AttnBias {
			add("self_attn.q_proj.bias", "bias", c.Heads*D)
			add("self_attn.k_proj.bias", "bias", c.KVHeads*D)
			add("self_attn.v_proj.bias", "bias", c.KVHeads*D)
			add("self_attn.o_proj.bias", "bias", H)
		}
		add("pre_ff_layernorm.weight", "norm", H)
		I, conv, nh := c.Inner(), c.convDim(), c.MambaHeads
		add("mamba.in_proj.weight", "linear", I+conv+nh, H)
		if c.InBias {
			add("mamba.in_proj.bias", "bias", I+conv+nh)
		}
		add("mamba.conv1d.weight", "linear", conv, 1, c.MambaConv)
		if c.ConvBias {
			add("mamba.conv1d.bias", "bias", conv)
		}
		add("mamba.dt_bias", "dt_bias", nh)
		add("mamba.A_log", "A_log", nh)
		add("mamba.D", "D", nh)
		if c.RMSNorm {
			add("mamba.norm.weight", "norm", I)
		}
		add("mamba.out_proj.weight", "linear", H, I)
		if c.OutBias {
			add("mamba.out_proj.bias", "bias", H)
		}
		add("feed_forward.gate_proj.weight", "linear", c.Intermediate, H)
		add("feed_forward.up_proj.weight", "linear", c.Intermediate, H)
		add("feed_forward.down_proj.weight", "linear", H, c.Intermediate)
		if c.MLPBias {
			add("feed_forward.gate_proj.bias", "bias", c.Intermediate)
			add("feed_forward.up_proj.bias", "bias", c.Intermediate)
			add("feed_forward.down_proj.bias", "bias", H)
		}
	}
	out = append(out, tensor{"model.final_layernorm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with FalconH1Config's names.
func (c FalconH1) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"FalconH1ForCausalLM"}, "model_type": "falcon_h1",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate,
		"num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"mamba_d_ssm": c.Inner(), "mamba_n_heads": c.MambaHeads, "mamba_d_head": c.MambaHeadDim, "mamba_n_groups": c.MambaGroups,
		"mamba_d_state": c.MambaState, "mamba_d_conv": c.MambaConv, "mamba_expand": 2, "mamba_chunk_size": c.Chunk,
		"mamba_conv_bias": c.ConvBias, "mamba_proj_bias": c.InBias, "projectors_bias": c.OutBias,
		"mamba_rms_norm": c.RMSNorm, "mamba_norm_before_gate": c.NormBeforeGate,
		"attention_bias": c.AttnBias, "mlp_bias": c.MLPBias, "hidden_act": "silu",
		"rope_theta": c.Theta, "rms_norm_eps": c.Eps, "tie_word_embeddings": c.Tied,
		"max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
		"embedding_multiplier": c.Embedding, "lm_head_multiplier": c.LMHead, "key_multiplier": c.Key,
		"attention_in_multiplier": c.AttnIn, "attention_out_multiplier": c.AttnOut,
		"ssm_in_multiplier": c.SSMIn, "ssm_out_multiplier": c.SSMOut,
		"mlp_multipliers": c.MLP[:], "ssm_multipliers": c.SSM[:],
	}
	if c.DtMax > 0 {
		j["time_step_limit"] = []float64{0, c.DtMax}
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c FalconH1) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mamba2ref.Fill(r, t.shape, t.init, 0.25, "falconh1ref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C FalconH1
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c FalconH1) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "falconh1ref"}
	for _, t := range c.tensors() {
		chk.Shaped(t.name, t.shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("falconh1ref: no tensor %q", name))
	}
	return v
}

func (m *Model) opt(on bool, name string) []float64 {
	if !on {
		return nil
	}
	return m.get(name)
}

// Mixer is layer l's FalconH1Mixer as a mamba2ref.Mixer.
func (m *Model) Mixer(l int) mamba2ref.Mixer {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.mamba.", l)
	return mamba2ref.Mixer{
		Heads: c.MambaHeads, HeadDim: c.MambaHeadDim, Groups: c.MambaGroups, State: c.MambaState, Kernel: c.MambaConv,
		InProj: m.get(p + "in_proj.weight"), InBias: m.opt(c.InBias, p+"in_proj.bias"),
		Conv: m.get(p + "conv1d.weight"), ConvBias: m.opt(c.ConvBias, p+"conv1d.bias"),
		DtBias: m.get(p + "dt_bias"), ALog: m.get(p + "A_log"), D: m.get(p + "D"),
		Norm: m.opt(c.RMSNorm, p+"norm.weight"), OutProj: m.get(p + "out_proj.weight"), OutBias: m.opt(c.OutBias, p+"out_proj.bias"),
		NormGroups: c.MambaGroups, NormBeforeGate: c.NormBeforeGate, Eps: c.Eps,
		Mup: c.SSM[:], DtMax: c.DtMax, NoNorm: !c.RMSNorm,
	}
}

// Attention is layer l's FalconH1Attention on h [T][hidden] (already
// times attention_in_multiplier): keys times key_multiplier, then the
// rotary; causal softmax of q·k/sqrt(head_dim); o_proj.
func (m *Model) Attention(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.HeadDim
	heads := func(x []float64, name string, n, pos int, mult float64, rot bool) [][]float64 {
		all := lmckpt.Linear64(x, m.get(p+name+".weight"), m.opt(c.AttnBias, p+name+".bias"))
		out := make([][]float64, n)
		for i := range out {
			head := make([]float64, D)
			for j := range head {
				head[j] = all[i*D+j] * mult
			}
			if rot {
				head = lmckpt.RotateHalf64(head, pos, c.Theta, len(head))
			}
			out[i] = head
		}
		return out
	}
	q, k, v := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		q[t] = heads(h[t], "q_proj", c.Heads, t, 1, true)
		k[t] = heads(h[t], "k_proj", c.KVHeads, t, c.Key, true)
		v[t] = heads(h[t], "v_proj", c.KVHeads, t, 1, false)
	}
	att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), m.opt(c.AttnBias, p+"o_proj.bias"))
	}
	return out
}

func scaled(x []float64, s float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * s
	}
	return out
}

// Logits runs the sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = scaled(emb[id*H:(id+1)*H], c.Embedding)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		hs, ha := make([][]float64, len(x)), make([][]float64, len(x))
		for t := range x {
			h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
			hs[t], ha[t] = scaled(h, c.SSMIn), scaled(h, c.AttnIn)
		}
		mix := m.Mixer(l).Forward(hs)
		att := m.Attention(l, ha)
		for t := range x {
			for i := range x[t] {
				x[t][i] += mix[t][i]*c.SSMOut + att[t][i]*c.AttnOut
			}
		}
		f := p + "feed_forward."
		for t := range x {
			h := lmckpt.RMSNorm64(x[t], m.get(p+"pre_ff_layernorm.weight"), c.Eps)
			gate := lmckpt.Linear64(h, m.get(f+"gate_proj.weight"), m.opt(c.MLPBias, f+"gate_proj.bias"))
			up := lmckpt.Linear64(h, m.get(f+"up_proj.weight"), m.opt(c.MLPBias, f+"up_proj.bias"))
			for i := range gate {
				gate[i] = up[i] * lmckpt.SiLU64(gate[i]*c.MLP[0])
			}
			y := lmckpt.Linear64(gate, m.get(f+"down_proj.weight"), m.opt(c.MLPBias, f+"down_proj.bias"))
			for i := range x[t] {
				x[t][i] += y[i] * c.MLP[1]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get("model.final_layernorm.weight"), c.Eps)
		out[t] = scaled(lmckpt.Linear64(h, m.get(head), nil), c.LMHead)
	}
	return out
}
