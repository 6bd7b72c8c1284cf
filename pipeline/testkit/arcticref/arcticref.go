// Package arcticref is a plain-Go float64 forward pass of
// ArcticForCausalLM (Snowflake Arctic), written from vLLM's
// models/arctic.py and the checkpoints' modeling_arctic.py
// (ArcticDecoderLayer: with parallel_attn_mlp_res the sparse block on
// post_attention_layernorm of the layer's input, the residual_mlp on
// residual_layernorm of the stream after the attention; ArcticMoE's
// _moe_foreward: the softmax's top k divided by their sum, one expert's
// by itself), and the tiny checkpoints its tests run. It shares no code with pipeline/arctic,
// pipeline/qwen3moe or pipeline/llama.
package arcticref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Arctic describes a tiny Arctic by the fields of its config.json.
type Arctic struct {
	Vocab, Hidden, Inter, Layers, Heads, KVHeads int
	// Experts of width Inter, TopK of them a token, on the layers i with
	// (i+1) % Freq == 0; Residual is use_residual and
	// parallel_attn_mlp_res.
	Experts, TopK, Freq int
	Residual            bool
	Theta, Eps          float64
	Seed                uint64
}

// Tiny is the releases' layout: every layer sparse, beside the attention,
// with the residual MLP; 8 experts of which 2 run, grouped-query
// attention.
func Tiny() Arctic {
	return Arctic{Vocab: 64, Hidden: 32, Inter: 24, Layers: 3, Heads: 4, KVHeads: 2, Experts: 8, TopK: 2, Freq: 1, Residual: true,
		Theta: 10000, Eps: 1e-5, Seed: 160}
}

// Sequential is ArcticConfig's defaults' layout: a sparse block on every
// second layer after the attention (Mixtral's), a dense ArcticMLP on the
// others, one expert a token (its weight divided by itself: 1).
func Sequential() Arctic {
	return Arctic{Vocab: 64, Hidden: 32, Inter: 24, Layers: 4, Heads: 4, KVHeads: 4, Experts: 4, TopK: 1, Freq: 2,
		Theta: 10000, Eps: 1e-5, Seed: 161}
}

// ParallelEveryOther is the releases' parallel block on every second
// layer only, dense layers between (no residual MLP there).
func ParallelEveryOther() Arctic {
	c := Tiny()
	c.Layers, c.Freq, c.Seed = 4, 2, 162
	return c
}

// Sparse reports layer i a mixture of experts.
func (c Arctic) Sparse(i int) bool { return (i+1)%c.Freq == 0 }

func (c Arctic) headDim() int { return c.Hidden / c.Heads }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Arctic) tensors() []tensor {
	H, D := c.Hidden, c.headDim()
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		mlp := func(prefix string, width int) {
			add(prefix+".w1.weight", "linear", width, H)
			add(prefix+".w3.weight", "linear", width, H)
			add(prefix+".w2.weight", "linear", H, width)
		}
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("post_attention_layernorm.weight", "norm", H)
		if !c.Sparse(l) {
			mlp("block_sparse_moe.mlp", c.Inter)
			continue
		}
		add("block_sparse_moe.gate.weight", "router", c.Experts, H)
		for e := 0; e < c.Experts; e++ {
			mlp(fmt.Sprintf("block_sparse_moe.experts.%d", e), c.Inter)
		}
		if c.Residual {
			add("residual_layernorm.weight", "norm", H)
			mlp("residual_mlp", H)
		}
	}
	return append(out, tensor{"model.norm.weight", []int{H}, "norm"}, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
}

// ConfigJSON is the config.json with ArcticConfig's names.
func (c Arctic) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"ArcticForCausalLM"}, "model_type": "arctic",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Inter, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "num_local_experts": c.Experts,
		"num_experts_per_tok": c.TopK, "moe_layer_frequency": c.Freq, "parallel_attn_mlp_res": c.Residual,
		"use_residual": c.Residual, "hidden_act": "silu", "rms_norm_eps": c.Eps, "rope_theta": c.Theta,
		"max_position_embeddings": 256, "tie_word_embeddings": false, "sliding_window": nil, "router_aux_loss_coef": 0.001,
		"moe_train_capacity_factor": 1, "moe_eval_capacity_factor": 1, "enable_expert_tensor_parallelism": false,
		"bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Arctic) Write(dir string) error {
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

// Model is a description plus its weights in float64. MoEAfterAttention
// runs the sparse block on the stream after the attention even with
// Residual, for tests that a model reading it so fails.
type Model struct {
	C                 Arctic
	W                 map[string][]float64
	MoEAfterAttention bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Arctic) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "arcticref"}
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
		panic(fmt.Sprintf("arcticref: no tensor %q", name))
	}
	return v
}

// swiglu is ArcticMLP under prefix p: w2(silu(w1·x) · w3·x).
func (m *Model) swiglu(p string, x []float64) []float64 {
	return lmckpt.SwiGLU64(x, m.get(p+".w1.weight"), m.get(p+".w3.weight"), m.get(p+".w2.weight"))
}

// moe is ArcticMoE on one token.
func (m *Model) moe(p string, x []float64) []float64 {
	c := m.C
	probs := lmckpt.Softmax64(lmckpt.Linear64(x, m.get(p+"block_sparse_moe.gate.weight"), nil))
	top := lmckpt.TopK64(probs, c.TopK)
	sum := 0.0
	for _, e := range top {
		sum += probs[e]
	}
	out := make([]float64, c.Hidden)
	for _, e := range top {
		w := probs[e] / sum
		for i, v := range m.swiglu(fmt.Sprintf("%sblock_sparse_moe.experts.%d", p, e), x) {
			out[i] += w * v
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
			in := x[t]
			a := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			mid := make([]float64, H) // residual_attn
			for i := range mid {
				mid[i] = in[i] + a[i]
			}
			out := append([]float64(nil), mid...)
			switch {
			case !c.Sparse(l):
				for i, v := range m.swiglu(p+"block_sparse_moe.mlp", norm(mid, p+"post_attention_layernorm.weight")) {
					out[i] += v
				}
			case c.Residual:
				for i, v := range m.swiglu(p+"residual_mlp", norm(mid, p+"residual_layernorm.weight")) {
					out[i] += v
				}
				src := in
				if m.MoEAfterAttention {
					src = mid
				}
				for i, v := range m.moe(p, norm(src, p+"post_attention_layernorm.weight")) {
					out[i] += v
				}
			default:
				for i, v := range m.moe(p, norm(mid, p+"post_attention_layernorm.weight")) {
					out[i] += v
				}
			}
			x[t] = out
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(norm(x[t], "model.norm.weight"), m.get("lm_head.weight"), nil)
	}
	return out
}
