// Package bambaref is a plain-Go float64 forward pass of BambaForCausalLM,
// written from transformers' modular_bamba.py (BambaDecoderLayer,
// BambaMixer's torch_forward on mamba2ref's mixer, BambaAttention with
// the rotary over the first half of each head, BambaMLP), and the tiny
// checkpoints its tests run. It shares no code with pipeline/nn or
// pipeline/bamba.
package bambaref

import (
	"fmt"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// Bamba describes a tiny Bamba.
type Bamba struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads                      int
	MambaHeads, MambaGroups, MambaState int
	Attn                                []int // attn_layer_indices
	Theta, Eps                          float64
	// Rotary is the rotated share of each head (0.5, BambaConfig's);
	// the tests vary it to show it matters.
	Rotary float64
	// ProjBias gives in_proj and out_proj biases (mamba_proj_bias).
	ProjBias bool
	Seed     uint64
}

// Tiny is a small Bamba: 3 layers, attention at 1, hidden 32, 4 heads of
// 8 over 2, the mixer 4 heads of 16 in 2 groups of state 8.
func Tiny() Bamba {
	return Bamba{Vocab: 64, Hidden: 32, Intermediate: 48, Layers: 3, Heads: 4, KVHeads: 2, MambaHeads: 4, MambaGroups: 2, MambaState: 8,
		Attn: []int{1}, Theta: 10000, Eps: 1e-5, Rotary: 0.5, Seed: 90}
}

// TinyBias is Tiny with mamba_proj_bias: in_proj and out_proj biases,
// and the attention layer first.
func TinyBias() Bamba {
	c := Tiny()
	c.ProjBias, c.Attn, c.Seed = true, []int{0}, 91
	return c
}

func (c Bamba) attention(l int) bool {
	for _, i := range c.Attn {
		if i == l {
			return true
		}
	}
	return false
}

func (c Bamba) inner() int { return 2 * c.Hidden }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Bamba) tensors() []tensor {
	H, I := c.Hidden, c.inner()
	hd := H / c.Heads
	conv := I + 2*c.MambaGroups*c.MambaState
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		if c.attention(l) {
			add("self_attn.q_proj.weight", "qk", c.Heads*hd, H)
			add("self_attn.k_proj.weight", "qk", c.KVHeads*hd, H)
			add("self_attn.v_proj.weight", "linear", c.KVHeads*hd, H)
			add("self_attn.o_proj.weight", "linear", H, c.Heads*hd)
		} else {
			add("mamba.in_proj.weight", "linear", I+conv+c.MambaHeads, H)
			if c.ProjBias {
				add("mamba.in_proj.bias", "bias", I+conv+c.MambaHeads)
			}
			add("mamba.conv1d.weight", "linear", conv, 1, 4)
			add("mamba.conv1d.bias", "bias", conv)
			add("mamba.dt_bias", "dt_bias", c.MambaHeads)
			add("mamba.A_log", "A_log", c.MambaHeads)
			add("mamba.D", "D", c.MambaHeads)
			add("mamba.norm.weight", "norm", I)
			add("mamba.out_proj.weight", "linear", H, I)
			if c.ProjBias {
				add("mamba.out_proj.bias", "bias", H)
			}
		}
		add("pre_ff_layernorm.weight", "norm", H)
		add("feed_forward.gate_proj.weight", "linear", c.Intermediate, H)
		add("feed_forward.up_proj.weight", "linear", c.Intermediate, H)
		add("feed_forward.down_proj.weight", "linear", H, c.Intermediate)
	}
	out = append(out, tensor{"model.final_layernorm.weight", []int{H}, "norm"}, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	return out
}

// ConfigJSON is the config.json with BambaConfig's names.
func (c Bamba) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"BambaForCausalLM"}, "model_type": "bamba",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "attn_layer_indices": c.Attn,
		"mamba_n_heads": c.MambaHeads, "mamba_d_head": "auto", "mamba_n_groups": c.MambaGroups, "mamba_d_state": c.MambaState,
		"mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 4, "mamba_conv_bias": true, "mamba_proj_bias": c.ProjBias,
		"hidden_act": "silu", "rms_norm_eps": c.Eps, "rope_theta": c.Theta, "tie_word_embeddings": false,
		"max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Bamba) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mamba2ref.Fill(r, t.shape, t.init, 0.5, "bambaref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Bamba
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Bamba) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "bambaref"}
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
		panic(fmt.Sprintf("bambaref: no tensor %q", name))
	}
	return v
}

// mixer is layer l's BambaMixer: the gated norm over the whole width.
func (m *Model) mixer(l int) mamba2ref.Mixer {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.mamba.", l)
	mx := mamba2ref.Mixer{
		Heads: c.MambaHeads, HeadDim: c.inner() / c.MambaHeads, Groups: c.MambaGroups, State: c.MambaState, Kernel: 4,
		InProj: m.get(p + "in_proj.weight"), Conv: m.get(p + "conv1d.weight"), ConvBias: m.get(p + "conv1d.bias"),
		DtBias: m.get(p + "dt_bias"), ALog: m.get(p + "A_log"), D: m.get(p + "D"),
		Norm: m.get(p + "norm.weight"), OutProj: m.get(p + "out_proj.weight"), NormGroups: 1, Eps: c.Eps,
	}
	if c.ProjBias {
		mx.InBias, mx.OutBias = m.get(p+"in_proj.bias"), m.get(p+"out_proj.bias")
	}
	return mx
}

// attn is layer l's BambaAttention on h.
func (m *Model) attn(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.Hidden / c.Heads
	rot := int(float64(D) * c.Rotary)
	return lmckpt.RopeAttention64(h, m.get, p, c.Heads, c.KVHeads, D, rot, c.Theta)
}

// Logits runs the sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		}
		var y [][]float64
		if c.attention(l) {
			y = m.attn(l, h)
		} else {
			y = m.mixer(l).Forward(h)
		}
		f := p + "feed_forward."
		for t := range x {
			for i := range x[t] {
				x[t][i] += y[t][i]
			}
			h2 := lmckpt.RMSNorm64(x[t], m.get(p+"pre_ff_layernorm.weight"), c.Eps)
			d := lmckpt.SwiGLU64(h2, m.get(f+"gate_proj.weight"), m.get(f+"up_proj.weight"), m.get(f+"down_proj.weight"))
			for i := range x[t] {
				x[t][i] += d[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.final_layernorm.weight"), c.Eps), m.get("lm_head.weight"), nil)
	}
	return out
}
