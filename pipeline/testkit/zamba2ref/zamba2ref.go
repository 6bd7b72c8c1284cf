// Package zamba2ref is a plain-Go float64 forward pass of Zamba2
// (Zamba2ForCausalLM) written from transformers' models/zamba2/
// modeling_zamba2.py: one sequence, no caches, the Mamba-2 mixer
// mamba2ref's, and no code shared with pipeline/zamba2. It also writes
// the tiny checkpoints the tests use, with the real tensor names (the
// shared blocks under their first hybrid layer, the adapters of every
// hybrid layer that runs a block under that block).
package zamba2ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// Config describes a tiny Zamba2.
type Config struct {
	Vocab, Hidden, Intermediate int
	Types                       []string // "m" Mamba, "h" hybrid
	Heads, KVHeads              int
	Blocks, Rank                int
	AttnAdapters, Rope          bool
	MambaHeads, State, Groups   int
	Eps                         float64
	Seed                        uint64
	// Mutations, for tests that show a check can fail.
	ScaleByHeadDim, OrigFirst, BlockByLayer, ResidualInBlock bool
}

// Tiny is shaped like Zamba2-2.7B: two shared blocks taken in turn by
// four hybrid layers (1, 3, 4 and 6 of 7), MLP adapters, no rotary; the
// mixer 4 heads of 16 in 2 groups of state 8.
func Tiny() Config {
	return Config{Vocab: 64, Hidden: 32, Intermediate: 48, Types: []string{"m", "h", "m", "h", "h", "m", "h"}, Heads: 4, KVHeads: 2,
		Blocks: 2, Rank: 4, MambaHeads: 4, State: 8, Groups: 2, Eps: 1e-5, Seed: 41}
}

// TinyRope is shaped like Zamba2-1.2B: one shared block, the rotary and
// q/k/v adapters (KV heads equal to heads).
func TinyRope() Config {
	c := Tiny()
	c.Blocks, c.Rope, c.AttnAdapters, c.KVHeads, c.Seed = 1, true, true, 4, 42
	return c
}

func (c Config) hybrid() []int {
	var out []int
	for i, t := range c.Types {
		if t == "h" {
			out = append(out, i)
		}
	}
	return out
}

func (c Config) inner() int { return 2 * c.Hidden }

// owner is the layer under whose name hybrid ordinal p's block is stored.
func (c Config) owner(p int) int { return c.hybrid()[p%c.Blocks] }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Config) mamba(p string) []tensor {
	H, I := c.Hidden, c.inner()
	conv := I + 2*c.Groups*c.State
	return []tensor{
		{p + "in_proj.weight", []int{I + conv + c.MambaHeads, H}, "linear"},
		{p + "conv1d.weight", []int{conv, 1, 4}, "linear"},
		{p + "conv1d.bias", []int{conv}, "bias"},
		{p + "dt_bias", []int{c.MambaHeads}, "dt_bias"},
		{p + "A_log", []int{c.MambaHeads}, "A_log"},
		{p + "D", []int{c.MambaHeads}, "D"},
		{p + "norm.weight", []int{I}, "norm"},
		{p + "out_proj.weight", []int{H, I}, "linear"},
	}
}

func (c Config) tensors() []tensor {
	H, W, hd := c.Hidden, 2*c.Hidden, 2*c.Hidden/c.Heads
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	hyb := c.hybrid()
	for i, t := range c.Types {
		p := fmt.Sprintf("model.layers.%d.", i)
		if t == "m" {
			out = append(out, tensor{p + "input_layernorm.weight", []int{H}, "norm"})
			out = append(out, c.mamba(p+"mamba.")...)
			continue
		}
		out = append(out, tensor{p + "mamba_decoder.input_layernorm.weight", []int{H}, "norm"})
		out = append(out, c.mamba(p+"mamba_decoder.mamba.")...)
		out = append(out, tensor{p + "linear.weight", []int{H, H}, "linear"})
		ord := -1
		for k, j := range hyb {
			if j == i {
				ord = k
			}
		}
		if ord >= c.Blocks { // the block is stored under its owner only
			continue
		}
		b := p + "shared_transformer."
		add := func(name, init string, shape ...int) { out = append(out, tensor{b + name, shape, init}) }
		add("input_layernorm.weight", "norm", W)
		add("self_attn.q_proj.weight", "linear", c.Heads*hd, W)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*hd, W)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*hd, W)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*hd)
		add("pre_ff_layernorm.weight", "norm", H)
		add("feed_forward.gate_up_proj.weight", "linear", 2*c.Intermediate, H)
		add("feed_forward.down_proj.weight", "linear", H, c.Intermediate)
		for q := ord; q < len(hyb); q += c.Blocks { // the adapters of every hybrid layer that runs this block
			add(fmt.Sprintf("feed_forward.gate_up_proj_adapter_list.%d.0.weight", q), "linear", c.Rank, H)
			add(fmt.Sprintf("feed_forward.gate_up_proj_adapter_list.%d.1.weight", q), "linear", 2*c.Intermediate, c.Rank)
			if c.AttnAdapters {
				for _, n := range []string{"q", "k", "v"} {
					add(fmt.Sprintf("self_attn.linear_%s_adapter_list.%d.0.weight", n, q), "linear", c.Rank, W)
					add(fmt.Sprintf("self_attn.linear_%s_adapter_list.%d.1.weight", n, q), "linear", W, c.Rank)
				}
			}
		}
	}
	return append(out, tensor{"model.final_layernorm.weight", []int{H}, "norm"})
}

// ConfigJSON is config.json with Zamba2Config's names.
func (c Config) ConfigJSON() map[string]any {
	types := make([]string, len(c.Types))
	for i, t := range c.Types {
		types[i] = map[string]string{"m": "mamba", "h": "hybrid"}[t]
	}
	return map[string]any{
		"architectures": []string{"Zamba2ForCausalLM"}, "model_type": "zamba2", "vocab_size": c.Vocab, "hidden_size": c.Hidden,
		"intermediate_size": c.Intermediate, "num_hidden_layers": len(c.Types), "layers_block_type": types,
		"hybrid_layer_ids": c.hybrid(), "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"attention_hidden_size": 2 * c.Hidden, "attention_head_dim": 2 * c.Hidden / c.Heads,
		"mamba_d_state": c.State, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": c.Groups, "n_mamba_heads": c.MambaHeads,
		"mamba_headdim": c.inner() / c.MambaHeads, "use_conv_bias": true, "add_bias_linear": false, "chunk_size": 4,
		"time_step_min": 0.001, "time_step_max": 0.1, "num_mem_blocks": c.Blocks, "use_shared_attention_adapter": c.AttnAdapters,
		"use_shared_mlp_adapter": true, "adapter_rank": c.Rank, "use_mem_rope": c.Rope, "rope_theta": 10000.0,
		"hidden_act": "gelu", "rms_norm_eps": c.Eps, "max_position_embeddings": 256, "tie_word_embeddings": true,
		"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Config) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mamba2ref.Fill(r, t.shape, t.init, 0.5, "zamba2ref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Config
	W map[string][]float64
}

// Load reads a checkpoint Write wrote.
func (c Config) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("zamba2ref: no tensor %q", name))
	}
	return v
}

func (m *Model) mixer(p string) mamba2ref.Mixer {
	c := m.C
	return mamba2ref.Mixer{
		Heads: c.MambaHeads, HeadDim: c.inner() / c.MambaHeads, Groups: c.Groups, State: c.State, Kernel: 4,
		InProj: m.get(p + "in_proj.weight"), Conv: m.get(p + "conv1d.weight"), ConvBias: m.get(p + "conv1d.bias"),
		DtBias: m.get(p + "dt_bias"), ALog: m.get(p + "A_log"), D: m.get(p + "D"),
		Norm: m.get(p + "norm.weight"), OutProj: m.get(p + "out_proj.weight"), NormGroups: c.Groups, Eps: 1e-5, DtMin: 0.001,
	}
}

func (m *Model) norm(x []float64, name string) []float64 {
	return lmckpt.RMSNorm64(x, m.get(name), m.C.Eps)
}

// Logits runs the whole sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	T, H := len(tokens), c.Hidden
	emb := m.get("model.embed_tokens.weight")
	h := make([][]float64, T)
	orig := make([][]float64, T)
	for t, id := range tokens {
		h[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
		orig[t] = append([]float64(nil), h[t]...)
	}
	ord := 0
	for i, typ := range c.Types {
		p := fmt.Sprintf("model.layers.%d.", i)
		if typ == "m" {
			in := make([][]float64, T)
			for t := range h {
				in[t] = m.norm(h[t], p+"input_layernorm.weight")
			}
			y := m.mixer(p + "mamba.").Forward(in)
			for t := range h {
				for j := range h[t] {
					h[t][j] += y[t][j]
				}
			}
			continue
		}
		tr := m.block(ord, i, h, orig)
		in := make([][]float64, T)
		for t := range h {
			lin := lmckpt.Linear64(tr[t], m.get(p+"linear.weight"), nil)
			sum := make([]float64, H)
			for j := range sum {
				sum[j] = h[t][j] + lin[j]
			}
			in[t] = m.norm(sum, p+"mamba_decoder.input_layernorm.weight")
		}
		y := m.mixer(p + "mamba_decoder.mamba.").Forward(in)
		for t := range h {
			for j := range h[t] {
				h[t][j] += y[t][j]
			}
		}
		ord++
	}
	out := make([][]float64, T)
	for t := range h {
		out[t] = lmckpt.Linear64(m.norm(h[t], "model.final_layernorm.weight"), emb, nil)
	}
	return out
}

// block is Zamba2AttentionDecoderLayer for hybrid ordinal q (layer i):
// the shared block its ordinal picks, with its adapters.
func (m *Model) block(q, i int, h, orig [][]float64) [][]float64 {
	c := m.C
	T, D := len(h), 2*c.Hidden/c.Heads
	owner := c.owner(q)
	if c.BlockByLayer { // mutation: the block picked by the layer's index
		owner = c.hybrid()[i%c.Blocks]
	}
	b := fmt.Sprintf("model.layers.%d.shared_transformer.", owner)
	ab := fmt.Sprintf("model.layers.%d.shared_transformer.", c.owner(q)) // the adapters' owner
	lora := func(x []float64, name string) []float64 {
		return lmckpt.Linear64(lmckpt.Linear64(x, m.get(name+"0.weight"), nil), m.get(name+"1.weight"), nil)
	}
	query := make([][][]float64, T)
	key := make([][][]float64, T)
	value := make([][][]float64, T)
	for t := range h {
		cat := append(append([]float64(nil), h[t]...), orig[t]...)
		if c.OrigFirst {
			cat = append(append([]float64(nil), orig[t]...), h[t]...)
		}
		x := m.norm(cat, b+"input_layernorm.weight")
		proj := func(n string, heads int) [][]float64 {
			y := lmckpt.Linear64(x, m.get(b+"self_attn."+n+"_proj.weight"), nil)
			if c.AttnAdapters {
				a := lora(x, fmt.Sprintf("%sself_attn.linear_%s_adapter_list.%d.", ab, n, q))
				for j := range y {
					y[j] += a[j]
				}
			}
			out := make([][]float64, heads)
			for hd := range out {
				out[hd] = y[hd*D : (hd+1)*D]
				if c.Rope && n != "v" {
					out[hd] = rope(out[hd], t, 10000)
				}
			}
			return out
		}
		query[t], key[t], value[t] = proj("q", c.Heads), proj("k", c.KVHeads), proj("v", c.KVHeads)
	}
	scale := 1 / math.Sqrt(float64(D)/2)
	if c.ScaleByHeadDim {
		scale = 1 / math.Sqrt(float64(D))
	}
	att := lmckpt.Attention64(query, key, value, scale, nil)
	out := make([][]float64, T)
	for t := range h {
		a := lmckpt.Linear64(att[t], m.get(b+"self_attn.o_proj.weight"), nil)
		if c.ResidualInBlock { // mutation: a residual around the attention
			for j := range a {
				a[j] += h[t][j]
			}
		}
		x := m.norm(a, b+"pre_ff_layernorm.weight")
		gu := lmckpt.Linear64(x, m.get(b+"feed_forward.gate_up_proj.weight"), nil)
		ad := lora(x, fmt.Sprintf("%sfeed_forward.gate_up_proj_adapter_list.%d.", ab, q))
		I := c.Intermediate
		mid := make([]float64, I)
		for j := range mid {
			g, u := gu[j]+ad[j], gu[I+j]+ad[I+j]
			mid[j] = lmckpt.GELU64(g) * u
		}
		out[t] = lmckpt.Linear64(mid, m.get(b+"feed_forward.down_proj.weight"), nil)
	}
	return out
}

// rope is the rotary over the whole head (rotate_half: pair i with
// i + D/2, turning at theta^(−2i/D)).
func rope(v []float64, pos int, theta float64) []float64 {
	out := append([]float64(nil), v...)
	half := len(v) / 2
	for i := 0; i < half; i++ {
		f := float64(pos) * math.Pow(theta, -float64(2*i)/float64(len(v)))
		c, s := math.Cos(f), math.Sin(f)
		out[i] = v[i]*c - v[i+half]*s
		out[i+half] = v[i+half]*c + v[i]*s
	}
	return out
}
