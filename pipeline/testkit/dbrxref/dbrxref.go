// Package dbrxref is a plain-Go float64 forward pass of DbrxForCausalLM,
// written from transformers' models/dbrx (DbrxNormAttentionNorm,
// DbrxAttention with its clamp, DbrxRouter, DbrxExperts' view of
// w1/v1/w2 as [experts, ffn, d_model] and DbrxExpertGLU's
// x·w1ᵀ, x·v1ᵀ, ·w2), and the tiny checkpoints its tests run, under the
// checkpoints' own tensor names. It shares no code with pipeline/dbrx,
// pipeline/qwen3moe or pipeline/llama.
package dbrxref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Dbrx describes a tiny DBRX by the fields of its config.json.
type Dbrx struct {
	Vocab, Hidden, Layers, Heads, KVHeads int
	Experts, TopK, FFN                    int
	// ClipQKV is attn_config.clip_qkv, 0 for null.
	ClipQKV float64
	Theta   float64
	// Unnormalized is moe_normalize_expert_weights null: the top weights
	// are not divided by their sum (1, DbrxFFNConfig's default, otherwise).
	Unnormalized bool
	// DType is the checkpoint's (F32 when empty; BF16 rounds the weights,
	// which Load then reads as stored).
	DType safetensors.DType
	Seed  uint64
}

// Tiny is a small DBRX: 4 experts of which 2 run, grouped-query attention
// (4 heads over 2 key/value heads) whose clamp bites.
func Tiny() Dbrx {
	return Dbrx{Vocab: 64, Hidden: 32, Layers: 3, Heads: 4, KVHeads: 2, Experts: 4, TopK: 2, FFN: 24,
		ClipQKV: 0.6, Theta: 10000, Seed: 140}
}

// Unclipped is Tiny without the clamp, one key/value head (DbrxConfig's
// default kv_n_heads) and the top weights left undivided.
func Unclipped() Dbrx {
	c := Tiny()
	c.ClipQKV, c.KVHeads, c.Unnormalized, c.TopK, c.Seed = 0, 1, true, 3, 141
	return c
}

func (c Dbrx) headDim() int { return c.Hidden / c.Heads }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Dbrx) tensors() []tensor {
	H, D := c.Hidden, c.headDim()
	out := []tensor{{"transformer.wte.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("transformer.blocks.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("norm_attn_norm.norm_1.weight", "norm", H)
		add("norm_attn_norm.attn.Wqkv.weight", "linear", H+2*c.KVHeads*D, H)
		add("norm_attn_norm.attn.out_proj.weight", "linear", H, H)
		add("norm_attn_norm.norm_2.weight", "norm", H)
		add("ffn.router.layer.weight", "router", c.Experts, H)
		add("ffn.experts.mlp.w1", "linear", c.Experts*c.FFN, H)
		add("ffn.experts.mlp.v1", "linear", c.Experts*c.FFN, H)
		add("ffn.experts.mlp.w2", "down", c.Experts*c.FFN, H)
	}
	return append(out, tensor{"transformer.norm_f.weight", []int{H}, "norm"}, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
}

// ConfigJSON is the config.json with DbrxConfig's names, the sizes in
// attn_config and ffn_config as dbrx-instruct's.
func (c Dbrx) ConfigJSON() map[string]any {
	attn := map[string]any{"attn_pdrop": 0, "kv_n_heads": c.KVHeads, "rope_theta": c.Theta, "clip_qkv": nil}
	if c.ClipQKV > 0 {
		attn["clip_qkv"] = c.ClipQKV
	}
	ffn := map[string]any{"ffn_act_fn": map[string]any{"name": "silu"}, "ffn_hidden_size": c.FFN, "moe_jitter_eps": 0.01,
		"moe_loss_weight": 0.05, "moe_num_experts": c.Experts, "moe_top_k": c.TopK, "moe_normalize_expert_weights": 1}
	if c.Unnormalized {
		ffn["moe_normalize_expert_weights"] = nil
	}
	return map[string]any{
		"architectures": []string{"DbrxForCausalLM"}, "model_type": "dbrx",
		"vocab_size": c.Vocab, "d_model": c.Hidden, "n_layers": c.Layers, "n_heads": c.Heads, "max_seq_len": 256,
		"attn_config": attn, "ffn_config": ffn, "emb_pdrop": 0, "resid_pdrop": 0, "initializer_range": 0.02,
		"output_router_logits": false, "tie_word_embeddings": false, "torch_dtype": "float32", "use_cache": true,
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Dbrx) Write(dir string) error {
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
			case "down": // [experts·ffn, d_model], read along its rows
				return u / math.Sqrt(float64(c.FFN))
			}
			return u / math.Sqrt(float64(fan))
		})
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: v})
	}
	if c.DType == "" || c.DType == safetensors.F32 {
		return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{}, ts)
	}
	st := make([]safetensors.Tensor, 0, len(ts))
	for _, t := range ts {
		v, err := safetensors.Float32Tensor(t.Name, c.DType, t.Shape, t.Values)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		st = append(st, v)
	}
	cfg := c.ConfigJSON()
	cfg["torch_dtype"] = map[safetensors.DType]string{safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[c.DType]
	return lmckpt.WriteCheckpoint(dir, cfg, st)
}

// Model is a description plus its weights in float64. The switches read
// the checkpoint otherwise, for tests that a model reading it so fails:
// DownAsOut reads each expert's slice of w2 as [d_model, ffn] (an
// [out, in] matrix, not transposed), Interleaved takes expert e's rows of
// w1, v1 and w2 as the view [ffn, experts, d_model] would (every
// experts-th row), NoClip skips the clamp.
type Model struct {
	C                              Dbrx
	W                              map[string][]float64
	DownAsOut, Interleaved, NoClip bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Dbrx) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "dbrxref"}
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
		panic(fmt.Sprintf("dbrxref: no tensor %q", name))
	}
	return v
}

// row is row f of expert e in a stored [experts·ffn, d_model] matrix.
func (m *Model) row(w []float64, e, f int) []float64 {
	c := m.C
	r := e*c.FFN + f
	if m.Interleaved {
		r = f*c.Experts + e
	}
	return w[r*c.Hidden : (r+1)*c.Hidden]
}

// expert is DbrxExpertGLU of expert e on one token.
func (m *Model) expert(p string, e int, x []float64) []float64 {
	c := m.C
	w1, v1, w2 := m.get(p+"ffn.experts.mlp.w1"), m.get(p+"ffn.experts.mlp.v1"), m.get(p+"ffn.experts.mlp.w2")
	act := make([]float64, c.FFN)
	for f := range act {
		g, u := 0.0, 0.0
		for i, xi := range x {
			g += m.row(w1, e, f)[i] * xi
			u += m.row(v1, e, f)[i] * xi
		}
		act[f] = lmckpt.SiLU64(g) * u
	}
	out := make([]float64, c.Hidden)
	if m.DownAsOut { // the expert's slice read as [d_model, ffn]
		slice := make([]float64, 0, c.FFN*c.Hidden)
		for f := 0; f < c.FFN; f++ {
			slice = append(slice, m.row(w2, e, f)...)
		}
		return lmckpt.Linear64(act, slice, nil)
	}
	for f, a := range act { // intermediate_states.matmul(expert_w2)
		for i, w := range m.row(w2, e, f) {
			out[i] += a * w
		}
	}
	return out
}

// ffn is DbrxFFN on one token: the router's softmax over every expert,
// the top k, divided by their sum unless Unnormalized.
func (m *Model) ffn(p string, x []float64) []float64 {
	c := m.C
	probs := lmckpt.Softmax64(lmckpt.Linear64(x, m.get(p+"ffn.router.layer.weight"), nil))
	top := lmckpt.TopK64(probs, c.TopK)
	sum := 0.0
	for _, e := range top {
		sum += probs[e]
	}
	out := make([]float64, c.Hidden)
	for _, e := range top {
		w := probs[e]
		if !c.Unnormalized {
			w /= sum
		}
		for i, v := range m.expert(p, e, x) {
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
	ln := func(x []float64, name string) []float64 { return lmckpt.LayerNorm64(x, m.get(name), nil, 1e-5) }
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("transformer.wte.weight")[id*H:(id+1)*H]...)
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
		p := fmt.Sprintf("transformer.blocks.%d.", l)
		q, k, v := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
		for t := range x {
			qkv := lmckpt.Linear64(ln(x[t], p+"norm_attn_norm.norm_1.weight"), m.get(p+"norm_attn_norm.attn.Wqkv.weight"), nil)
			if c.ClipQKV > 0 && !m.NoClip {
				for i := range qkv {
					qkv[i] = math.Max(-c.ClipQKV, math.Min(c.ClipQKV, qkv[i]))
				}
			}
			kv := c.KVHeads * D
			q[t] = heads(qkv[:H], c.Heads, t, true)
			k[t] = heads(qkv[H:H+kv], c.KVHeads, t, true)
			v[t] = heads(qkv[H+kv:], c.KVHeads, t, false)
		}
		att := lmckpt.Attention64(q, k, v, 1/math.Sqrt(float64(D)), nil)
		for t := range x {
			a := lmckpt.Linear64(att[t], m.get(p+"norm_attn_norm.attn.out_proj.weight"), nil)
			for i := range x[t] {
				x[t][i] += a[i]
			}
			f := m.ffn(p, ln(x[t], p+"norm_attn_norm.norm_2.weight"))
			for i := range x[t] {
				x[t][i] += f[i]
			}
		}
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(ln(x[t], "transformer.norm_f.weight"), m.get("lm_head.weight"), nil)
	}
	return out
}
