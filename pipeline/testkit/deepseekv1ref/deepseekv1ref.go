// Package deepseekv1ref is a plain-Go float64 forward pass of
// DeepseekForCausalLM (deepseek-moe-16b), written from vLLM's
// models/deepseek.py (the layer, shared experts added ungated) and the
// MoEGate of the checkpoints' remote code (the softmax's top k, divided
// by their sum only with norm_topk_prob and more than one), and the
// tiny checkpoints its tests run. It shares no code
// with pipeline/deepseekv1, pipeline/qwen3moe or pipeline/llama.
package deepseekv1ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Deepseek describes a tiny DeepSeek MoE by the fields of its config.json.
type Deepseek struct {
	Vocab, Hidden, Inter, Layers, Heads, KVHeads int
	// Experts routed experts of width MoEInter, TopK of them a token;
	// Shared always-on experts; sparse layers from FirstDense on that
	// Freq divides; Norm is norm_topk_prob.
	Experts, TopK, MoEInter, Shared, FirstDense, Freq int
	Norm                                              bool
	Theta, Eps                                        float64
	Seed                                              uint64
}

// Tiny is deepseek-moe-16b's layout: a dense first layer, then every
// layer sparse, 8 experts of which 3 run, undivided, 2 shared.
func Tiny() Deepseek {
	return Deepseek{Vocab: 64, Hidden: 32, Inter: 48, Layers: 3, Heads: 4, KVHeads: 4, Experts: 8, TopK: 3, MoEInter: 16,
		Shared: 2, FirstDense: 1, Freq: 1, Theta: 10000, Eps: 1e-6, Seed: 150}
}

// EveryOther has a sparse block on every second layer (moe_layer_freq
// 2), grouped-query attention, the top 2 divided by their sum and no
// shared experts.
func EveryOther() Deepseek {
	return Deepseek{Vocab: 64, Hidden: 32, Inter: 48, Layers: 4, Heads: 4, KVHeads: 2, Experts: 4, TopK: 2, MoEInter: 24,
		Freq: 2, Norm: true, Theta: 10000, Eps: 1e-6, Seed: 151}
}

// Sparse reports layer i a mixture of experts.
func (c Deepseek) Sparse(i int) bool { return i >= c.FirstDense && i%c.Freq == 0 }

func (c Deepseek) headDim() int { return c.Hidden / c.Heads }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Deepseek) tensors() []tensor {
	H, D := c.Hidden, c.headDim()
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		mlp := func(prefix string, width int) {
			add(prefix+".gate_proj.weight", "linear", width, H)
			add(prefix+".up_proj.weight", "linear", width, H)
			add(prefix+".down_proj.weight", "linear", H, width)
		}
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("post_attention_layernorm.weight", "norm", H)
		if !c.Sparse(l) {
			mlp("mlp", c.Inter)
			continue
		}
		add("mlp.gate.weight", "router", c.Experts, H)
		for e := 0; e < c.Experts; e++ {
			mlp(fmt.Sprintf("mlp.experts.%d", e), c.MoEInter)
		}
		if c.Shared > 0 {
			mlp("mlp.shared_experts", c.MoEInter*c.Shared)
		}
	}
	return append(out, tensor{"model.norm.weight", []int{H}, "norm"}, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
}

// ConfigJSON is the config.json with DeepseekConfig's names, as
// deepseek-moe-16b writes them.
func (c Deepseek) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"DeepseekForCausalLM"}, "model_type": "deepseek",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Inter, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "n_routed_experts": c.Experts,
		"num_experts_per_tok": c.TopK, "moe_intermediate_size": c.MoEInter, "moe_layer_freq": c.Freq,
		"first_k_dense_replace": c.FirstDense, "norm_topk_prob": c.Norm, "scoring_func": "softmax", "aux_loss_alpha": 0.001,
		"seq_aux": true, "hidden_act": "silu", "rms_norm_eps": c.Eps, "rope_theta": c.Theta, "rope_scaling": nil,
		"attention_bias": false, "max_position_embeddings": 256, "tie_word_embeddings": false, "pretraining_tp": 1,
		"bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
	j["n_shared_experts"] = nil
	if c.Shared > 0 {
		j["n_shared_experts"] = c.Shared
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Deepseek) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		v := lmckpt.Fill(r, t.shape, func(u float64, fan int) float64 {
			switch t.init {
			case "embed":
				return u
			case "norm":
				return 1 + 0.2*u
			case "router":
				return 3 * u / math.Sqrt(float64(fan))
			}
			return u / math.Sqrt(float64(fan))
		})
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: v})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Deepseek
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Deepseek) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "deepseekv1ref"}
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
		panic(fmt.Sprintf("deepseekv1ref: no tensor %q", name))
	}
	return v
}

// swiglu is DeepseekMLP under prefix p on one token.
func (m *Model) swiglu(p string, x []float64) []float64 {
	return lmckpt.SwiGLU64(x, m.get(p+".gate_proj.weight"), m.get(p+".up_proj.weight"), m.get(p+".down_proj.weight"))
}

// moe is DeepseekMoE on one token: the softmax's TopK (ties to the lower
// index), divided by their sum with Norm and TopK > 1, the chosen
// experts weighed, plus the shared experts.
func (m *Model) moe(p string, x []float64) []float64 {
	c := m.C
	probs := lmckpt.Softmax64(lmckpt.Linear64(x, m.get(p+"mlp.gate.weight"), nil))
	top := lmckpt.TopK64(probs, c.TopK)
	sum := 0.0
	for _, e := range top {
		sum += probs[e]
	}
	out := make([]float64, c.Hidden)
	for _, e := range top {
		w := probs[e]
		if c.Norm && c.TopK > 1 {
			w /= sum
		}
		for i, v := range m.swiglu(fmt.Sprintf("%smlp.experts.%d", p, e), x) {
			out[i] += w * v
		}
	}
	if c.Shared > 0 {
		for i, v := range m.swiglu(p+"mlp.shared_experts", x) {
			out[i] += v
		}
	}
	return out
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.headDim()
	norm := func(x []float64, name string) []float64 { return lmckpt.RMSNorm64(x, m.get(name), c.Eps) }
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("model.embed_tokens.weight")[id*H:(id+1)*H]...)
	}
	heads := func(v []float64, n, pos int, rot bool) [][]float64 {
		out := make([][]float64, n)
		for h := range out {
			out[h] = v[h*D : (h+1)*D]
			if rot {
				out[h] = lmckpt.RotateHalf64(out[h], pos, c.Theta, len(out[h]))
			}
		}
		return out
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h := norm(x[t], p+"input_layernorm.weight")
			q[t] = heads(lmckpt.Linear64(h, m.get(p+"self_attn.q_proj.weight"), nil), c.Heads, t, true)
			k[t] = heads(lmckpt.Linear64(h, m.get(p+"self_attn.k_proj.weight"), nil), c.KVHeads, t, true)
			v[t] = heads(lmckpt.Linear64(h, m.get(p+"self_attn.v_proj.weight"), nil), c.KVHeads, t, false)
		}
		att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
		for t := range x {
			a := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			for i := range x[t] {
				x[t][i] += a[i]
			}
			h := norm(x[t], p+"post_attention_layernorm.weight")
			var f []float64
			if c.Sparse(l) {
				f = m.moe(p, h)
			} else {
				f = m.swiglu(p+"mlp", h)
			}
			for i := range x[t] {
				x[t][i] += f[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(norm(x[t], "model.norm.weight"), m.get("lm_head.weight"), nil)
	}
	return out
}
