// Package jambaref is a plain-Go float64 forward pass of JambaForCausalLM,
// written from transformers' modular_jamba.py (JambaMambaMixer's
// slow_forward token by token, JambaAttention without position
// embeddings, JambaSparseMoeBlock's top k not renormalized, JambaMLP),
// and the tiny checkpoints its tests run. It shares no code with
// pipeline/nn or pipeline/jamba.
package jambaref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
)

// Jamba describes a tiny Jamba.
type Jamba struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads                      int
	State, Rank, Kernel, Expand         int
	Experts, TopK                       int
	AttnPeriod, AttnOffset              int
	ExpertPeriod, ExpertOffset          int
	Eps                                 float64
	Tied                                bool
	Seed                                uint64
}

// Tiny is a small Jamba of 4 layers: attention at layer 2 (period 4,
// offset 2), the others Mamba; experts at layers 1 and 3 (period 2,
// offset 1: 6 experts, top 2), dense MLPs at 0 and 2.
func Tiny() Jamba {
	return Jamba{Vocab: 64, Hidden: 32, Intermediate: 24, Layers: 4, Heads: 4, KVHeads: 2, State: 8, Rank: 3, Kernel: 4, Expand: 2,
		Experts: 6, TopK: 2, AttnPeriod: 4, AttnOffset: 2, ExpertPeriod: 2, ExpertOffset: 1, Eps: 1e-6, Seed: 80}
}

func (c Jamba) attention(l int) bool { return l%c.AttnPeriod == c.AttnOffset }
func (c Jamba) sparse(l int) bool    { return c.Experts > 1 && l%c.ExpertPeriod == c.ExpertOffset }
func (c Jamba) inner() int           { return c.Expand * c.Hidden }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Jamba) tensors() []tensor {
	H, D, N, R, I := c.Hidden, c.inner(), c.State, c.Rank, c.Intermediate
	hd := H / c.Heads
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
			add("mamba.in_proj.weight", "linear", 2*D, H)
			add("mamba.conv1d.weight", "linear", D, 1, c.Kernel)
			add("mamba.conv1d.bias", "bias", D)
			add("mamba.x_proj.weight", "linear", R+2*N, D)
			add("mamba.dt_proj.weight", "linear", D, R)
			add("mamba.dt_proj.bias", "dt_bias", D)
			add("mamba.A_log", "A_log", D, N)
			add("mamba.D", "D", D)
			add("mamba.out_proj.weight", "linear", H, D)
			add("mamba.dt_layernorm.weight", "norm", R)
			add("mamba.b_layernorm.weight", "norm", N)
			add("mamba.c_layernorm.weight", "norm", N)
		}
		add("pre_ff_layernorm.weight", "norm", H)
		if c.sparse(l) {
			add("feed_forward.router.weight", "router", c.Experts, H)
			for e := range c.Experts {
				q := fmt.Sprintf("feed_forward.experts.%d.", e)
				add(q+"gate_proj.weight", "linear", I, H)
				add(q+"up_proj.weight", "linear", I, H)
				add(q+"down_proj.weight", "linear", H, I)
			}
		} else {
			add("feed_forward.gate_proj.weight", "linear", I, H)
			add("feed_forward.up_proj.weight", "linear", I, H)
			add("feed_forward.down_proj.weight", "linear", H, I)
		}
	}
	out = append(out, tensor{"model.final_layernorm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with JambaConfig's names.
func (c Jamba) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"JambaForCausalLM"}, "model_type": "jamba",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "hidden_act": "silu", "rms_norm_eps": c.Eps,
		"num_experts": c.Experts, "num_experts_per_tok": c.TopK, "expert_layer_period": c.ExpertPeriod, "expert_layer_offset": c.ExpertOffset,
		"attn_layer_period": c.AttnPeriod, "attn_layer_offset": c.AttnOffset,
		"mamba_d_state": c.State, "mamba_d_conv": c.Kernel, "mamba_expand": c.Expand, "mamba_dt_rank": c.Rank,
		"mamba_conv_bias": true, "mamba_proj_bias": false, "use_mamba_kernels": false,
		"tie_word_embeddings": c.Tied, "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
		"torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Jamba) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mambaref.Fill(r, t.shape, t.init, "jambaref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, ts)
}

// Model is a description plus its weights in float64; Renorm is a
// mistake the tests check the model does not make (renormalizing the
// top k).
type Model struct {
	C      Jamba
	W      map[string][]float64
	Renorm bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Jamba) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "jambaref"}
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
		panic(fmt.Sprintf("jambaref: no tensor %q", name))
	}
	return v
}

// mamba is layer l's JambaMambaMixer on h [T][hidden], token by token.
func (m *Model) mamba(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.mamba.", l)
	return mambaref.Mixer1{
		Inner: c.inner(), State: c.State, Rank: c.Rank, Kernel: c.Kernel,
		InProj: m.get(p + "in_proj.weight"), Conv: m.get(p + "conv1d.weight"), ConvBias: m.get(p + "conv1d.bias"),
		XProj: m.get(p + "x_proj.weight"), DtProj: m.get(p + "dt_proj.weight"), DtBias: m.get(p + "dt_proj.bias"),
		ALog: m.get(p + "A_log"), D: m.get(p + "D"), OutProj: m.get(p + "out_proj.weight"),
		Normed: true, DtNorm: m.get(p + "dt_layernorm.weight"), BNorm: m.get(p + "b_layernorm.weight"), CNorm: m.get(p + "c_layernorm.weight"),
		NormEps: c.Eps,
	}.Forward(h)
}

// attention is layer l's JambaAttention on h: no position embedding.
func (m *Model) attention(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.Hidden / c.Heads
	heads := func(x []float64, name string, n int) [][]float64 {
		all := lmckpt.Linear64(x, m.get(p+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
		}
		return out
	}
	q, k, v := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		q[t], k[t], v[t] = heads(h[t], "q_proj", c.Heads), heads(h[t], "k_proj", c.KVHeads), heads(h[t], "v_proj", c.KVHeads)
	}
	att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), nil)
	}
	return out
}

// feedForward is layer l's JambaMLP or JambaSparseMoeBlock on one token.
func (m *Model) feedForward(l int, h []float64) []float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.feed_forward.", l)
	if !c.sparse(l) {
		return lmckpt.SwiGLU64(h, m.get(p+"gate_proj.weight"), m.get(p+"up_proj.weight"), m.get(p+"down_proj.weight"))
	}
	probs := lmckpt.Softmax64(lmckpt.Linear64(h, m.get(p+"router.weight"), nil))
	taken := make([]bool, len(probs))
	out := make([]float64, len(h))
	var ids []int
	sum := 0.0
	for range c.TopK {
		best := -1
		for e, v := range probs {
			if !taken[e] && (best < 0 || v > probs[best]) {
				best = e
			}
		}
		taken[best] = true
		ids = append(ids, best)
		sum += probs[best]
	}
	for _, e := range ids {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		w := probs[e]
		if m.Renorm {
			w /= sum
		}
		y := lmckpt.SwiGLU64(h, m.get(q+"gate_proj.weight"), m.get(q+"up_proj.weight"), m.get(q+"down_proj.weight"))
		for i := range out {
			out[i] += w * y[i]
		}
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
			y = m.attention(l, h)
		} else {
			y = m.mamba(l, h)
		}
		for t := range x {
			for i := range x[t] {
				x[t][i] += y[t][i]
			}
			f := m.feedForward(l, lmckpt.RMSNorm64(x[t], m.get(p+"pre_ff_layernorm.weight"), c.Eps))
			for i := range x[t] {
				x[t][i] += f[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.final_layernorm.weight"), c.Eps), m.get(head), nil)
	}
	return out
}
