// Package falconref is a plain-Go float64 forward pass of
// FalconForCausalLM, written from transformers' models/falcon
// (FalconAttention._split_heads for the three layouts of
// query_key_value, FalconDecoderLayer's parallel and sequential blocks,
// FalconMLP), and the tiny checkpoints its tests run, under the
// checkpoints' own tensor names. It shares no code with pipeline/llama or
// pipeline/falcon.
package falconref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/bloomref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Falcon describes a tiny Falcon by the fields of its config.json.
type Falcon struct {
	Vocab, Hidden, FFN, Layers, Heads int
	// NewArch is new_decoder_architecture with KVHeads num_kv_heads and
	// NumLn num_ln_in_parallel_attn (1 or 2); else MultiQuery (one
	// key/value head) or a key/value head per head, and Parallel
	// (parallel_attn).
	NewArch        bool
	KVHeads, NumLn int
	MultiQuery     bool
	Parallel       bool
	Bias           bool
	Theta, Eps     float64
	Tied           bool
	// Alibi (Falcon-RW) replaces the rotary with BLOOM's linear biases,
	// added to q·k before both are scaled.
	Alibi bool
	Seed  uint64
}

// New40B is a small Falcon-40B: the new architecture, 8 heads over 2
// key/value heads, two LayerNorms in parallel, a tied head.
func New40B() Falcon {
	return Falcon{Vocab: 64, Hidden: 32, FFN: 128, Layers: 3, Heads: 8, NewArch: true, KVHeads: 2, NumLn: 2, Parallel: true,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 120}
}

// Falcon2 is New40B with one LayerNorm before both (Falcon 2 11B's
// num_ln_in_parallel_attn 1) and an untied head.
func Falcon2() Falcon {
	c := New40B()
	c.NumLn, c.Tied, c.Seed = 1, false, 121
	return c
}

// Falcon7B is a small Falcon-7B: multi-query, one LayerNorm in parallel.
func Falcon7B() Falcon {
	return Falcon{Vocab: 64, Hidden: 32, FFN: 128, Layers: 3, Heads: 4, MultiQuery: true, Parallel: true,
		Theta: 10000, Eps: 1e-5, Tied: true, Seed: 122}
}

// Sequential has a key/value head per head, the sequential block and
// biases on every projection.
func Sequential() Falcon {
	return Falcon{Vocab: 64, Hidden: 32, FFN: 96, Layers: 3, Heads: 4, Bias: true, Theta: 10000, Eps: 1e-5, Seed: 123}
}

// RW is a small Falcon-RW: Sequential's layout with 6 heads and alibi.
func RW() Falcon {
	return Falcon{Vocab: 64, Hidden: 48, FFN: 96, Layers: 3, Heads: 6, Bias: true, Theta: 10000, Eps: 1e-5, Tied: true, Alibi: true, Seed: 124}
}

// RWMultiQuery is RW with one key/value head for the 6 query heads
// (multi_query), so that each query head's slope is read across a group.
func RWMultiQuery() Falcon {
	c := RW()
	c.MultiQuery, c.Seed = true, 125
	return c
}

func (c Falcon) headSize() int { return c.Hidden / c.Heads }

// kv is the number of key/value heads.
func (c Falcon) kv() int {
	switch {
	case c.NewArch:
		return c.KVHeads
	case c.MultiQuery:
		return 1
	}
	return c.Heads
}

func (c Falcon) tensors() []lmckpt.Spec {
	H := c.Hidden
	qkv := (c.Heads + 2*c.kv()) * c.headSize()
	out := []lmckpt.Spec{lmckpt.NewSpec("transformer.word_embeddings.weight", []int{c.Vocab, H}, "embed")}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.h.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, lmckpt.NewSpec(p+name, shape, init)) }
		ln := func(name string) {
			add(name+".weight", "norm", H)
			add(name+".bias", "bias", H)
		}
		switch {
		case c.NewArch && c.NumLn == 2:
			ln("ln_attn")
			ln("ln_mlp")
		case c.NewArch || c.Parallel:
			ln("input_layernorm")
		default:
			ln("input_layernorm")
			ln("post_attention_layernorm")
		}
		lin := func(name string, rows, cols int) {
			add(name+".weight", "linear", rows, cols)
			if c.Bias {
				add(name+".bias", "bias", rows)
			}
		}
		lin("self_attention.query_key_value", qkv, H)
		lin("self_attention.dense", H, H)
		lin("mlp.dense_h_to_4h", c.FFN, H)
		lin("mlp.dense_4h_to_h", H, c.FFN)
	}
	out = append(out, lmckpt.NewSpec("transformer.ln_f.weight", []int{H}, "norm"), lmckpt.NewSpec("transformer.ln_f.bias", []int{H}, "bias"))
	if !c.Tied {
		out = append(out, lmckpt.NewSpec("lm_head.weight", []int{c.Vocab, H}, "linear"))
	}
	return out
}

// ConfigJSON is the config.json with FalconConfig's names.
func (c Falcon) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"FalconForCausalLM"}, "model_type": "falcon",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "ffn_hidden_size": c.FFN, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "new_decoder_architecture": c.NewArch, "multi_query": c.MultiQuery,
		"parallel_attn": c.Parallel, "bias": c.Bias, "alibi": c.Alibi, "rope_theta": c.Theta, "layer_norm_epsilon": c.Eps,
		"tie_word_embeddings": c.Tied, "activation": "gelu", "max_position_embeddings": 256,
		"bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
	}
	if c.NewArch {
		j["num_kv_heads"], j["num_ln_in_parallel_attn"] = c.KVHeads, c.NumLn
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Falcon) Write(dir string) error {
	ts := lmckpt.DrawSpecs(c.Seed, c.tensors(), func(init string, u float64, fan int) float64 {
		switch init {
		case "embed":
			return u
		case "norm":
			return 1 + 0.2*u
		case "bias":
			return 0.3 * u
		}
		return u / math.Sqrt(float64(fan))
	})
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Falcon
	W map[string][]float64
	// UnscaledAlibi is a mutant for the tests: alibi added after the
	// scores are scaled (BLOOM's order).
	UnscaledAlibi bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Falcon) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "falconref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("falconref: no tensor %q", name))
	}
	return v
}

// linear is the projection name of x, with its bias under Bias.
func (m *Model) linear(x []float64, name string) []float64 {
	var b []float64
	if m.C.Bias {
		b = m.get(name + ".bias")
	}
	return lmckpt.Linear64(x, m.get(name+".weight"), b)
}

// split is FalconAttention._split_heads of one token's fused projection:
// the query heads [Heads][D] and the key and value heads [kv][D].
func (c Falcon) split(qkv []float64) (q, k, v [][]float64) {
	D := c.headSize()
	head := func(i int) []float64 { return qkv[i*D : (i+1)*D] }
	switch {
	case c.NewArch: // [kv, Heads/kv + 2, D]
		per := c.Heads / c.KVHeads
		for g := 0; g < c.KVHeads; g++ {
			base := g * (per + 2)
			for j := 0; j < per; j++ {
				q = append(q, head(base+j))
			}
			k, v = append(k, head(base+per)), append(v, head(base+per+1))
		}
	case c.MultiQuery: // [Heads + 2, D]
		for h := 0; h < c.Heads; h++ {
			q = append(q, head(h))
		}
		k, v = [][]float64{head(c.Heads)}, [][]float64{head(c.Heads + 1)}
	default: // [Heads, 3, D]
		for h := 0; h < c.Heads; h++ {
			q, k, v = append(q, head(3*h)), append(k, head(3*h+1)), append(v, head(3*h+2))
		}
	}
	return q, k, v
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	ln := func(x []float64, name string) []float64 {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), c.Eps)
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("transformer.word_embeddings.weight")[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.h.%d.", l)
		attnNorm := "input_layernorm"
		if c.NewArch && c.NumLn == 2 {
			attnNorm = "ln_attn"
		}
		h := make([][]float64, len(x))
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h[t] = ln(x[t], p+attnNorm)
			qs, ks, vs := c.split(m.linear(h[t], p+"self_attention.query_key_value"))
			for i := range qs {
				if !c.Alibi {
					qs[i] = lmckpt.RotateHalf64(qs[i], t, c.Theta, len(qs[i]))
				}
			}
			for i := range ks {
				if !c.Alibi {
					ks[i] = lmckpt.RotateHalf64(ks[i], t, c.Theta, len(ks[i]))
				}
			}
			q[t], k[t], v[t] = qs, ks, vs
		}
		var att [][]float64
		if c.Alibi {
			att = alibiAttention(q, k, v, c.headSize(), m.UnscaledAlibi)
		} else {
			att = lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(c.headSize())), nil)
		}
		mlp := func(in []float64) []float64 {
			f := m.linear(in, p+"mlp.dense_h_to_4h")
			for i := range f {
				f[i] = lmckpt.GELU64(f[i])
			}
			return m.linear(f, p+"mlp.dense_4h_to_h")
		}
		for t := range x {
			a := m.linear(att[t], p+"self_attention.dense")
			var y []float64
			switch {
			case c.NewArch && c.NumLn == 2:
				y = mlp(ln(x[t], p+"ln_mlp"))
			case c.NewArch || c.Parallel:
				y = mlp(h[t])
			default: // sequential: the MLP on the attention's sum
				for i := range x[t] {
					x[t][i] += a[i]
					a[i] = 0
				}
				y = mlp(ln(x[t], p+"post_attention_layernorm"))
			}
			for i := range x[t] {
				x[t][i] += a[i] + y[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "transformer.word_embeddings.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "transformer.ln_f"), m.get(head), nil)
	}
	return out
}

// alibiAttention is FalconAttention with alibi: each head's scores are
// (q·k + slope·key position) / sqrt(head_dim), BLOOM's slopes, causal;
// with unscaled, q·k / sqrt(head_dim) + slope·key position.
func alibiAttention(q, k, v [][][]float64, d int, unscaled bool) [][]float64 {
	heads := len(q[0])
	slopes := bloomref.Slopes(heads)
	group := heads / len(k[0])
	out := make([][]float64, len(q))
	for t := range q {
		out[t] = make([]float64, heads*d)
		for h := 0; h < heads; h++ {
			scores := make([]float64, t+1)
			for s := 0; s <= t; s++ {
				dot := 0.0
				for i := 0; i < d; i++ {
					dot += q[t][h][i] * k[s][h/group][i]
				}
				scores[s] = (dot + slopes[h]*float64(s)) / math.Sqrt(float64(d))
				if unscaled {
					scores[s] = dot/math.Sqrt(float64(d)) + slopes[h]*float64(s)
				}
			}
			for s, p := range lmckpt.Softmax64(scores) {
				for i := 0; i < d; i++ {
					out[t][h*d+i] += p * v[s][h/group][i]
				}
			}
		}
	}
	return out
}
