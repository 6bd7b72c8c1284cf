// Package bloomref is a plain-Go float64 forward pass of BloomForCausalLM,
// written from transformers' models/bloom (BloomModel's word_embeddings
// and word_embeddings_layernorm, build_alibi_tensor, BloomBlock with
// BloomAttention's fused query_key_value viewed [heads, 3, head_dim] and
// its scores alibi + q·k/sqrt(head_dim), BloomMLP with bloom_gelu, ln_f
// and the tied head), and the tiny checkpoints its tests run, under the
// checkpoints' own tensor names. It shares no code with pipeline/llama,
// pipeline/nn or pipeline/bloom.
package bloomref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Bloom describes a tiny BLOOM by the fields of its config.json.
type Bloom struct {
	Vocab, Hidden, Layers, Heads int
	Eps                          float64
	// Prefix is the tensors' prefix: "" (BloomModel's, as
	// bigscience/bloom-560m stores them) or "transformer.".
	Prefix string
	Seed   uint64
}

// Tiny is a small BLOOM: 3 layers, hidden 48, 6 heads of 8 (not a power of
// two, so the slopes take build_alibi_tensor's extra odd powers).
func Tiny() Bloom {
	return Bloom{Vocab: 64, Hidden: 48, Layers: 3, Heads: 6, Eps: 1e-5, Seed: 140}
}

func (c Bloom) tensors() []lmckpt.Spec {
	H, p0 := c.Hidden, c.Prefix
	out := []lmckpt.Spec{
		lmckpt.NewSpec(p0+"word_embeddings.weight", []int{c.Vocab, H}, "embed"),
		lmckpt.NewSpec(p0+"word_embeddings_layernorm.weight", []int{H}, "norm"),
		lmckpt.NewSpec(p0+"word_embeddings_layernorm.bias", []int{H}, "bias"),
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("%sh.%d.", p0, l)
		add := func(name, init string, shape ...int) { out = append(out, lmckpt.NewSpec(p+name, shape, init)) }
		add("input_layernorm.weight", "norm", H)
		add("input_layernorm.bias", "bias", H)
		add("self_attention.query_key_value.weight", "linear", 3*H, H)
		add("self_attention.query_key_value.bias", "bias", 3*H)
		add("self_attention.dense.weight", "linear", H, H)
		add("self_attention.dense.bias", "bias", H)
		add("post_attention_layernorm.weight", "norm", H)
		add("post_attention_layernorm.bias", "bias", H)
		add("mlp.dense_h_to_4h.weight", "linear", 4*H, H)
		add("mlp.dense_h_to_4h.bias", "bias", 4*H)
		add("mlp.dense_4h_to_h.weight", "linear", H, 4*H)
		add("mlp.dense_4h_to_h.bias", "bias", H)
	}
	return append(out, lmckpt.NewSpec(p0+"ln_f.weight", []int{H}, "norm"), lmckpt.NewSpec(p0+"ln_f.bias", []int{H}, "bias"))
}

// ConfigJSON is the config.json with BloomConfig's names, as
// bigscience/bloom-560m's has them.
func (c Bloom) ConfigJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"BloomForCausalLM"}, "model_type": "bloom",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "n_layer": c.Layers, "n_head": c.Heads, "n_inner": nil,
		"layer_norm_epsilon": c.Eps, "apply_residual_connection_post_layernorm": false, "attention_softmax_in_fp32": true,
		"pretraining_tp": 1, "slow_but_exact": false, "offset_alibi": 100, "bos_token_id": 1, "eos_token_id": 2,
		"pad_token_id": 3, "unk_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Bloom) Write(dir string) error {
	ts := lmckpt.DrawSpecs(c.Seed, c.tensors(), func(init string, u float64, fan int) float64 {
		switch init {
		case "embed":
			return u
		case "norm":
			return 1 + 0.2*u
		case "bias":
			return 0.3 * u
		}
		return 2 * u / math.Sqrt(float64(fan))
	})
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Bloom
	W map[string][]float64
	// NoALiBi is a mutant for the tests: the scores without the linear
	// biases.
	NoALiBi bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Bloom) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "bloomref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[m.C.Prefix+name]
	if !ok {
		panic(fmt.Sprintf("bloomref: no tensor %q", m.C.Prefix+name))
	}
	return v
}

// Slopes are build_alibi_tensor's: closest_power_of_2 = 2^floor(log2 n),
// base = 2^(-(2^-(log2(closest) - 3))), slopes base^1..base^closest, then
// extra_base = 2^(-(2^-(log2(2·closest) - 3))) to the odd powers 1, 3, ...
// for the heads past closest.
func Slopes(n int) []float64 {
	closest := 1
	for closest*2 <= n {
		closest *= 2
	}
	base := math.Pow(2, -math.Pow(2, -(math.Log2(float64(closest))-3)))
	var s []float64
	for i := 1; i <= closest; i++ {
		s = append(s, math.Pow(base, float64(i)))
	}
	if closest != n {
		extra := math.Pow(2, -math.Pow(2, -(math.Log2(float64(2*closest))-3)))
		for i := 0; i < n-closest; i++ {
			s = append(s, math.Pow(extra, float64(1+2*i)))
		}
	}
	return s
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token: word_embeddings_layernorm(word_embeddings), each block x +
// dense(attn(input_layernorm(x))), then + mlp(post_attention_layernorm(x)),
// then ln_f and the head tied to word_embeddings.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.Hidden/c.Heads
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	emb := m.get("word_embeddings.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = ln(emb[id*H:(id+1)*H], "word_embeddings_layernorm")
	}
	slopes := Slopes(c.Heads)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("h.%d.", l)
		q, k, v := make([][]float64, len(x)), make([][]float64, len(x)), make([][]float64, len(x))
		for t := range x {
			qkv := lmckpt.Linear64(ln(x[t], p+"input_layernorm"), m.get(p+"self_attention.query_key_value.weight"),
				m.get(p+"self_attention.query_key_value.bias"))
			// view(B, T, heads, 3, head_dim): head h's query, key and value
			// lie together.
			for h := 0; h < c.Heads; h++ {
				row := qkv[h*3*D : (h+1)*3*D]
				q[t] = append(q[t], row[:D]...)
				k[t] = append(k[t], row[D:2*D]...)
				v[t] = append(v[t], row[2*D:]...)
			}
		}
		for t := range x {
			ctx := make([]float64, H)
			for h := 0; h < c.Heads; h++ {
				scores := make([]float64, t+1)
				for s := 0; s <= t; s++ {
					dot := 0.0
					for i := 0; i < D; i++ {
						dot += q[t][h*D+i] * k[s][h*D+i]
					}
					scores[s] = dot / math.Sqrt(float64(D)) // baddbmm: alpha = 1/sqrt(head_dim)
					if !m.NoALiBi {
						scores[s] += slopes[h] * float64(s) // beta = 1: alibi, the key's position times the slope
					}
				}
				for s, pr := range lmckpt.Softmax64(scores) {
					for i := 0; i < D; i++ {
						ctx[h*D+i] += pr * v[s][h*D+i]
					}
				}
			}
			a := lmckpt.Linear64(ctx, m.get(p+"self_attention.dense.weight"), m.get(p+"self_attention.dense.bias"))
			for i := range x[t] {
				x[t][i] += a[i]
			}
			f := lmckpt.Linear64(ln(x[t], p+"post_attention_layernorm"), m.get(p+"mlp.dense_h_to_4h.weight"), m.get(p+"mlp.dense_h_to_4h.bias"))
			for i := range f {
				f[i] = bloomGELU(f[i])
			}
			y := lmckpt.Linear64(f, m.get(p+"mlp.dense_4h_to_h.weight"), m.get(p+"mlp.dense_4h_to_h.bias"))
			for i := range x[t] {
				x[t][i] += y[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "ln_f"), emb, nil)
	}
	return out
}

// bloomGELU is BLOOM's bloom_gelu_forward: the tanh approximation with
// sqrt(2/pi) written as 0.79788456.
func bloomGELU(x float64) float64 {
	return x * 0.5 * (1 + math.Tanh(0.79788456*x*(1+0.044715*x*x)))
}
