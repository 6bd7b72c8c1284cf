// Package minimaxref is a plain-Go float64 forward pass of MiniMax-Text-01
// and MiniMax-M1 (MiniMaxForCausalLM and the releases' own
// MiniMaxText01ForCausalLM), written from transformers' modular_minimax.py
// (MiniMaxLightningAttention's cached step, token by token, for every
// token; MiniMaxAttention with the rotary embedding on rotary_dim dims as
// the releases turn it; MiniMaxSparseMoeBlock; MiniMaxDecoderLayer's
// weighed residuals), and the tiny checkpoints its tests run. It shares
// no code with pipeline/nn or pipeline/minimax.
package minimaxref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mambaref"
)

// MiniMax describes a tiny MiniMax-Text-01.
type MiniMax struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim, RotaryDim  int
	Experts, TopK, BlockSize            int
	// Lightning[l] makes layer l lightning attention.
	Lightning []bool
	// The residual factors, x·Alpha + sublayer·Beta.
	FullAlpha, FullBeta, LinearAlpha, LinearBeta, MLPAlpha, MLPBeta float64
	// Original writes the releases' config (MiniMaxText01ForCausalLM,
	// attn_type_list, the layernorm_* factors, postnorm) instead of
	// transformers'.
	Original bool
	// Postnorm takes each residual's x after the norm (always so for
	// MiniMaxForCausalLM).
	Postnorm   bool
	Theta, Eps float64
	Tied       bool
	Seed       uint64
}

// Tiny is a small MiniMax in transformers' config: 4 layers, softmax
// attention at layer 1 and lightning at 0, 2 and 3, 4 heads of 8 dims
// over 2 KV heads turning 4 of each head's dims, the top 2 of 6 experts,
// six different residual factors, lightning chunks of 8 tokens.
func Tiny() MiniMax {
	return MiniMax{Vocab: 64, Hidden: 32, Intermediate: 24, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 4,
		Experts: 6, TopK: 2, BlockSize: 8, Lightning: []bool{true, false, true, true},
		FullAlpha: 1.7, FullBeta: 0.8, LinearAlpha: 1.4, LinearBeta: 1.1, MLPAlpha: 1.6, MLPBeta: 0.9,
		Postnorm: true, Theta: 10000, Eps: 1e-5, Seed: 91}
}

// TinyOriginal is Tiny in the releases' config, without postnorm (the
// residuals add the stream before each norm), with a tied head and 6
// heads over 3 KV heads: a head count whose ALiBi slopes (the releases')
// are not transformers' powers.
func TinyOriginal() MiniMax {
	c := Tiny()
	c.Original, c.Postnorm, c.Tied, c.Seed = true, false, true, 92
	c.Heads, c.KVHeads = 6, 3
	return c
}

// slope is head h's decay rate in layer l: transformers' get_slope_rate,
// or with Original the releases' _build_slope_tensor (ALiBi's get_slopes)
// and layer factor.
func (c MiniMax) slope(l, h int) float64 {
	if c.Original {
		return alibi(c.Heads)[h] * (1 - float64(l)/float64(c.Layers-1) + 1e-5)
	}
	base := 1 / math.Pow(2, 8/float64(c.Heads))
	return math.Pow(base, float64(h+1)) * (1 - float64(l)/(float64(c.Layers-1)+1e-5) + 1e-5)
}

// alibi is get_slopes(n) of the releases' code.
func alibi(n int) []float64 {
	powerOf2 := func(n int) []float64 {
		start := math.Pow(2, -math.Pow(2, -(math.Log2(float64(n))-3)))
		out := []float64{}
		for i := range n {
			out = append(out, start*math.Pow(start, float64(i)))
		}
		return out
	}
	if l := math.Log2(float64(n)); l == math.Floor(l) {
		return powerOf2(n)
	}
	closest := 1 << int(math.Floor(math.Log2(float64(n))))
	out := powerOf2(closest)
	double := alibi(2 * closest)
	for i := 0; i < len(double) && len(out) < n; i += 2 {
		out = append(out, double[i])
	}
	return out
}

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c MiniMax) tensors() []tensor {
	H, I, D := c.Hidden, c.Intermediate, c.HeadDim
	inner := c.Heads * D
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		if c.Lightning[l] {
			add("self_attn.qkv_proj.weight", "qk", 3*inner, H)
			add("self_attn.output_gate.weight", "linear", inner, H)
			add("self_attn.norm.weight", "norm", inner)
			add("self_attn.out_proj.weight", "linear", H, inner)
		} else {
			add("self_attn.q_proj.weight", "qk", c.Heads*D, H)
			add("self_attn.k_proj.weight", "qk", c.KVHeads*D, H)
			add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
			add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		}
		add("post_attention_layernorm.weight", "norm", H)
		add("block_sparse_moe.gate.weight", "router", c.Experts, H)
		for e := range c.Experts {
			q := fmt.Sprintf("block_sparse_moe.experts.%d.", e)
			add(q+"w1.weight", "linear", I, H)
			add(q+"w3.weight", "linear", I, H)
			add(q+"w2.weight", "linear", H, I)
		}
	}
	out = append(out, tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json: MiniMaxConfig's names, or the releases'
// with Original.
func (c MiniMax) ConfigJSON() map[string]any {
	cfg := map[string]any{
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "rotary_dim": c.RotaryDim,
		"hidden_act": "silu", "rms_norm_eps": c.Eps, "rope_theta": c.Theta, "block_size": c.BlockSize,
		"num_local_experts": c.Experts, "num_experts_per_tok": c.TopK, "sliding_window": nil, "shared_intermediate_size": 0,
		"tie_word_embeddings": c.Tied, "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2,
		"torch_dtype": "float32",
	}
	if c.Original {
		types := make([]int, c.Layers)
		for l, lin := range c.Lightning {
			if !lin {
				types[l] = 1
			}
		}
		cfg["architectures"], cfg["model_type"] = []string{"MiniMaxText01ForCausalLM"}, "minimax_text_01"
		cfg["attn_type_list"], cfg["postnorm"] = types, c.Postnorm
		cfg["layernorm_full_attention_alpha"], cfg["layernorm_full_attention_beta"] = c.FullAlpha, c.FullBeta
		cfg["layernorm_linear_attention_alpha"], cfg["layernorm_linear_attention_beta"] = c.LinearAlpha, c.LinearBeta
		cfg["layernorm_mlp_alpha"], cfg["layernorm_mlp_beta"] = c.MLPAlpha, c.MLPBeta
		return cfg
	}
	types := make([]string, c.Layers)
	for l, lin := range c.Lightning {
		types[l] = "full_attention"
		if lin {
			types[l] = "linear_attention"
		}
	}
	cfg["architectures"], cfg["model_type"] = []string{"MiniMaxForCausalLM"}, "minimax"
	cfg["layer_types"], cfg["postnorm"] = types, true
	cfg["full_attn_alpha_factor"], cfg["full_attn_beta_factor"] = c.FullAlpha, c.FullBeta
	cfg["linear_attn_alpha_factor"], cfg["linear_attn_beta_factor"] = c.LinearAlpha, c.LinearBeta
	cfg["mlp_alpha_factor"], cfg["mlp_beta_factor"] = c.MLPAlpha, c.MLPBeta
	return cfg
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32). In transformers' config the lightning
// layers' buffers are written too, slope_rate, query_decay, key_decay
// and diagonal_decay, as a transformers save holds them.
func (c MiniMax) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: mambaref.Fill(r, t.shape, t.init, "minimaxref")})
	}
	for l := 0; l < c.Layers && !c.Original; l++ {
		if !c.Lightning[l] {
			continue
		}
		p, H, B := fmt.Sprintf("model.layers.%d.self_attn.", l), c.Heads, c.BlockSize
		slope, query, key, diag := make([]float32, H), make([]float32, H*B), make([]float32, H*B), make([]float32, H*B*B)
		for h := range H {
			s := c.slope(l, h)
			slope[h] = float32(s)
			for i := range B {
				query[h*B+i] = float32(math.Exp(-s * float64(i+1)))
				key[h*B+i] = float32(math.Exp(-s * float64(B-i-1)))
				for j := 0; j <= i; j++ {
					diag[(h*B+i)*B+j] = float32(math.Exp(-s * float64(i-j)))
				}
			}
		}
		ts = append(ts, lmckpt.F32Tensor{Name: p + "slope_rate", Shape: []int{H, 1, 1}, Values: slope},
			lmckpt.F32Tensor{Name: p + "query_decay", Shape: []int{H, B, 1}, Values: query},
			lmckpt.F32Tensor{Name: p + "key_decay", Shape: []int{H, B, 1}, Values: key},
			lmckpt.F32Tensor{Name: p + "diagonal_decay", Shape: []int{1, H, B, B}, Values: diag})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2}, ts)
}

// Model is a description plus its weights in float64. The switches are
// mistakes the tests check the model does not make: WholeRotary turns
// every dim of each head (transformers' MiniMaxConfig's reading),
// FlatSlopes gives every layer the first layer's decays, NoPostnorm adds
// the stream before each norm where the config says postnorm,
// PowerSlopes gives the releases' architectures transformers' slopes.
type Model struct {
	C                                                MiniMax
	W                                                map[string][]float64
	WholeRotary, FlatSlopes, NoPostnorm, PowerSlopes bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c MiniMax) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "minimaxref"}
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
		panic(fmt.Sprintf("minimaxref: no tensor %q", name))
	}
	return v
}

// lightning is layer l's MiniMaxLightningAttention on h [T][hidden], one
// token at a time from a zero state.
func (m *Model) lightning(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.HeadDim
	state := make([][]float64, c.Heads) // [head][k·D + v]
	decay := make([]float64, c.Heads)
	for j := range state {
		state[j] = make([]float64, D*D)
		sl, sc := l, c
		if m.FlatSlopes {
			sl = 0
		}
		sc.Original = sc.Original && !m.PowerSlopes
		decay[j] = math.Exp(-sc.slope(sl, j))
	}
	out := make([][]float64, len(h))
	for t := range h {
		qkv := lmckpt.Linear64(h[t], m.get(p+"qkv_proj.weight"), nil)
		for i := range qkv {
			qkv[i] = lmckpt.SiLU64(qkv[i])
		}
		o := make([]float64, c.Heads*D)
		for j := range c.Heads {
			q, k, v := qkv[j*3*D:j*3*D+D], qkv[j*3*D+D:j*3*D+2*D], qkv[j*3*D+2*D:j*3*D+3*D]
			s := state[j]
			for a := range D {
				for b := range D {
					s[a*D+b] = decay[j]*s[a*D+b] + k[a]*v[b]
				}
			}
			for b := range D {
				sum := 0.0
				for a := range D {
					sum += q[a] * s[a*D+b]
				}
				o[j*D+b] = sum
			}
		}
		o = lmckpt.RMSNorm64(o, m.get(p+"norm.weight"), 1e-6)
		gate := lmckpt.Linear64(h[t], m.get(p+"output_gate.weight"), nil)
		for i := range o {
			o[i] *= 1 / (1 + math.Exp(-gate[i]))
		}
		out[t] = lmckpt.Linear64(o, m.get(p+"out_proj.weight"), nil)
	}
	return out
}

// attention is layer l's MiniMaxAttention on h, the rotary on the first
// rotary_dim dims of each head.
func (m *Model) attention(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D := c.HeadDim
	rot := c.RotaryDim
	if m.WholeRotary {
		rot = D
	}
	return lmckpt.RopeAttention64(h, m.get, p, c.Heads, c.KVHeads, D, rot, c.Theta)
}

// experts is layer l's MiniMaxSparseMoeBlock on one token: the softmax's
// top k, renormalized.
func (m *Model) experts(l int, h []float64) []float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.block_sparse_moe.", l)
	probs := lmckpt.Softmax64(lmckpt.Linear64(h, m.get(p+"gate.weight"), nil))
	ids := lmckpt.TopK64(probs, c.TopK)
	sum := 0.0
	for _, e := range ids {
		sum += probs[e]
	}
	out := make([]float64, len(h))
	for _, e := range ids {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		y := lmckpt.SwiGLU64(h, m.get(q+"w1.weight"), m.get(q+"w3.weight"), m.get(q+"w2.weight"))
		for i := range out {
			out[i] += probs[e] / sum * y[i]
		}
	}
	return out
}

// Logits runs the sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	post := c.Postnorm && !m.NoPostnorm
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	weigh := func(res, y []float64, alpha, beta float64) []float64 {
		out := make([]float64, len(res))
		for i := range out {
			out[i] = res[i]*alpha + y[i]*beta
		}
		return out
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		}
		res := x
		if post {
			res = h
		}
		var y [][]float64
		alpha, beta := c.FullAlpha, c.FullBeta
		if c.Lightning[l] {
			y, alpha, beta = m.lightning(l, h), c.LinearAlpha, c.LinearBeta
		} else {
			y = m.attention(l, h)
		}
		for t := range x {
			x[t] = weigh(res[t], y[t], alpha, beta)
			g := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			r := x[t]
			if post {
				r = g
			}
			x[t] = weigh(r, m.experts(l, g), c.MLPAlpha, c.MLPBeta)
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("model.norm.weight"), c.Eps), m.get(head), nil)
	}
	return out
}
