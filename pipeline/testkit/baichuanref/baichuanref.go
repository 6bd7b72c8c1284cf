// Package baichuanref is a plain-Go float64 forward pass of Baichuan's
// models, written from the modeling_baichuan.py files their releases ship
// (Baichuan-7B's and Baichuan 2 7B's rotary attention, Baichuan-13B's and
// Baichuan 2 13B's _gen_alibi_mask and _get_interleave slopes, W_pack's
// unflatten into q, k and v, Baichuan 2's NormHead), and the tiny
// checkpoints its tests run, under the checkpoints' own tensor names. It
// shares no code with pipeline/llama or pipeline/baichuan.
package baichuanref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Baichuan describes a tiny Baichuan by the fields of its config.json and
// the code beside it.
type Baichuan struct {
	// Arch is the class: BaichuanForCausalLM or BaiChuanForCausalLM.
	Arch                              string
	Vocab, Hidden, FFN, Layers, Heads int
	Eps                               float64
	// ALiBi: the 13B modeling file (linear biases, no rotary); else the
	// 7B one's rotary. NormHead: Baichuan 2's normalized head.
	ALiBi, NormHead bool
	Seed            uint64
}

// Baichuan2_13B is a small Baichuan 2 13B: ALiBi over 6 heads (the
// slopes' extra odd powers, as 13B's 40 heads have them), NormHead over
// Baichuan 2's vocabulary of 125,696.
func Baichuan2_13B() Baichuan {
	return Baichuan{Arch: "BaichuanForCausalLM", Vocab: 125696, Hidden: 48, FFN: 96, Layers: 2, Heads: 6, Eps: 0.02, ALiBi: true, NormHead: true, Seed: 190}
}

// Baichuan13B is a small Baichuan-13B: ALiBi, a plain head.
func Baichuan13B() Baichuan {
	return Baichuan{Arch: "BaichuanForCausalLM", Vocab: 64, Hidden: 48, FFN: 96, Layers: 3, Heads: 6, Eps: 0.02, ALiBi: true, Seed: 191}
}

// Baichuan7B is a small Baichuan-7B: the rotary, a plain head.
func Baichuan7B() Baichuan {
	return Baichuan{Arch: "BaiChuanForCausalLM", Vocab: 64, Hidden: 32, FFN: 80, Layers: 3, Heads: 4, Eps: 0.02, Seed: 192}
}

func (c Baichuan) headDim() int { return c.Hidden / c.Heads }

func (c Baichuan) tensors() []lmckpt.Spec {
	H := c.Hidden
	out := []lmckpt.Spec{lmckpt.NewSpec("model.embed_tokens.weight", []int{c.Vocab, H}, "embed")}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		out = append(out,
			lmckpt.NewSpec(p+"input_layernorm.weight", []int{H}, "norm"),
			lmckpt.NewSpec(p+"self_attn.W_pack.weight", []int{3 * H, H}, "linear"),
			lmckpt.NewSpec(p+"self_attn.o_proj.weight", []int{H, H}, "linear"),
			lmckpt.NewSpec(p+"post_attention_layernorm.weight", []int{H}, "norm"),
			lmckpt.NewSpec(p+"mlp.gate_proj.weight", []int{c.FFN, H}, "linear"),
			lmckpt.NewSpec(p+"mlp.up_proj.weight", []int{c.FFN, H}, "linear"),
			lmckpt.NewSpec(p+"mlp.down_proj.weight", []int{H, c.FFN}, "linear"))
	}
	// NormHead's rows are stored unnormalized (the releases save the
	// trained weight; the first forward normalizes it): rows of lengths
	// far from 1, so that a head read without normalizing differs.
	return append(out, lmckpt.NewSpec("model.norm.weight", []int{H}, "norm"), lmckpt.NewSpec("lm_head.weight", []int{c.Vocab, H}, "head"))
}

// ConfigJSON is the config.json with BaichuanConfig's names: the 13B
// models' model_max_length, the 7B models' max_position_embeddings.
func (c Baichuan) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{c.Arch}, "model_type": "baichuan", "vocab_size": c.Vocab, "hidden_size": c.Hidden,
		"intermediate_size": c.FFN, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "hidden_act": "silu",
		"rms_norm_eps": c.Eps, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
		"torch_dtype": "float32",
	}
	if c.ALiBi {
		j["model_max_length"] = 256
	} else {
		j["max_position_embeddings"] = 256
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Baichuan) Write(dir string) error {
	ts := lmckpt.DrawSpecs(c.Seed, c.tensors(), func(init string, u float64, fan int) float64 {
		switch init {
		case "embed":
			return u
		case "norm":
			return 1 + 0.2*u
		case "head":
			return 3 * u
		}
		return u / math.Sqrt(float64(fan))
	})
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Baichuan
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Baichuan) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadSpecs(dir, "baichuanref", c.tensors())
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("baichuanref: no tensor %q", name))
	}
	return v
}

// slopes is _get_interleave(n): the power-of-two slopes of the closest
// power of two below n, then every other slope of twice that.
func slopes(n int) []float64 {
	pow2 := func(n int) []float64 {
		start := math.Pow(2, -math.Pow(2, -(math.Log2(float64(n))-3)))
		out := make([]float64, n)
		for i := range out {
			out[i] = start * math.Pow(start, float64(i))
		}
		return out
	}
	if l := math.Log2(float64(n)); l == math.Floor(l) {
		return pow2(n)
	}
	closest := 1 << int(math.Floor(math.Log2(float64(n))))
	out := pow2(closest)
	extra := slopes(2 * closest)
	for i := 0; i < 2*closest && len(out) < n; i += 2 {
		out = append(out, extra[i])
	}
	return out
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H, D := c.Hidden, c.headDim()
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("model.embed_tokens.weight")[id*H:(id+1)*H]...)
	}
	sl := slopes(c.Heads)
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
			proj := lmckpt.Linear64(h, m.get(p+"self_attn.W_pack.weight"), nil) // unflatten(-1, (3, hidden))
			for i := range c.Heads {
				qh, kh, vh := proj[i*D:(i+1)*D], proj[H+i*D:H+(i+1)*D], proj[2*H+i*D:2*H+(i+1)*D]
				if !c.ALiBi {
					qh, kh = lmckpt.RotateHalf64(qh, t, 10000, D), lmckpt.RotateHalf64(kh, t, 10000, D)
				}
				q[t], k[t], v[t] = append(q[t], qh), append(k[t], kh), append(v[t], vh)
			}
		}
		att := make([][]float64, len(x))
		for t := range x {
			att[t] = make([]float64, H)
			for i := range c.Heads {
				scores := make([]float64, t+1)
				for s := 0; s <= t; s++ {
					dot := 0.0
					for j := range D {
						dot += q[t][i][j] * k[s][i][j]
					}
					scores[s] = dot / math.Sqrt(float64(D))
					if c.ALiBi { // the mask's slope × key position, after the scaling
						scores[s] += sl[i] * float64(s)
					}
				}
				for s, pr := range lmckpt.Softmax64(scores) {
					for j := range D {
						att[t][i*D+j] += pr * v[s][i][j]
					}
				}
			}
		}
		for t := range x {
			a := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			for i := range x[t] {
				x[t][i] += a[i]
			}
			h := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			y := lmckpt.SwiGLU64(h, m.get(p+"mlp.gate_proj.weight"), m.get(p+"mlp.up_proj.weight"), m.get(p+"mlp.down_proj.weight"))
			for i := range x[t] {
				x[t][i] += y[i]
			}
		}
	}
	head := m.get("lm_head.weight")
	if c.NormHead { // F.normalize(weight): each row over its L2 length
		n := make([]float64, len(head))
		for r := 0; r < c.Vocab; r++ {
			row := head[r*H : (r+1)*H]
			ss := 0.0
			for _, w := range row {
				ss += w * w
			}
			for i, w := range row {
				n[r*H+i] = w / math.Max(math.Sqrt(ss), 1e-12)
			}
		}
		head = n
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.norm.weight"), c.Eps), head, nil)
	}
	return out
}
