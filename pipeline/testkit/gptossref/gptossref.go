// Package gptossref is a plain-Go float64 forward pass of GptOssForCausalLM
// written from transformers' models/gpt_oss/modeling_gpt_oss.py, its
// YaRN rotary parameters (modeling_rope_utils.py,
// _compute_yarn_parameters) and its MXFP4 dequantisation
// (integrations/mxfp4.py, convert_moe_packed_tensors). It follows the style
// of pipeline/testkit/qwenref: straight loops over one sequence, no
// caches, no padding, and no code shared with pipeline/nn, pipeline/gptoss
// or loader/quant.
//
// It also writes the tiny checkpoints the tests use, with the tensor names
// of the real ones, in the three forms GPT-OSS checkpoints take: the
// experts in MXFP4 (the official releases), as transformers' bf16
// parameters (re-saves), or in float32.
package gptossref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Form is how a checkpoint stores the experts.
type Form int

const (
	// MXFP4 stores gate_up_proj and down_proj as _blocks and _scales
	// [E, out, in/32, 16] and [E, out, in/32], everything else in DType.
	MXFP4 Form = iota
	// Params stores them as transformers' parameters, input-major:
	// gate_up_proj [E, H, 2I] and down_proj [E, I, H].
	Params
)

// Config describes a tiny GPT-OSS.
type Config struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim             int
	Experts, TopK                       int
	// Window is the sliding window of the even layers (layer_types
	// alternate sliding, full).
	Window int
	// Theta is rope_theta; YaRN runs with Factor over OrigMax positions,
	// MaxPositions being max_position_embeddings.
	Theta                 float64
	Factor                float64
	OrigMax, MaxPositions int
	Eps, Limit, Alpha     float64
	Seed                  uint64
	Form                  Form
	// DType stores the non-MXFP4 tensors (default F32).
	DType safetensors.DType
}

// Tiny is a small GPT-OSS: 3 layers (sliding, full, sliding) with a
// window of 4, 8 experts of width 32, top 2, YaRN factor 8 over 64
// positions. Hidden and width are multiples of 32 for MXFP4.
func Tiny() Config {
	return Config{
		Vocab: 96, Hidden: 64, Intermediate: 32, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 16,
		Experts: 8, TopK: 2, Window: 4, Theta: 150000, Factor: 8, OrigMax: 64, MaxPositions: 512,
		Eps: 1e-5, Limit: 7, Alpha: 1.702, Seed: 77,
	}
}

// sliding reports a sliding_attention layer.
func (c Config) sliding(l int) bool { return l%2 == 0 }

// ConfigJSON is the config.json, in the layout of openai/gpt-oss-20b's.
func (c Config) ConfigJSON() map[string]any {
	types := make([]string, c.Layers)
	for l := range types {
		types[l] = "full_attention"
		if c.sliding(l) {
			types[l] = "sliding_attention"
		}
	}
	j := map[string]any{
		"architectures":           []string{"GptOssForCausalLM"},
		"model_type":              "gpt_oss",
		"attention_bias":          true,
		"attention_dropout":       0.0,
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"num_local_experts":       c.Experts,
		"num_experts_per_tok":     c.TopK,
		"experts_per_token":       c.TopK,
		"sliding_window":          c.Window,
		"layer_types":             types,
		"max_position_embeddings": c.MaxPositions,
		"initial_context_length":  c.OrigMax,
		"rms_norm_eps":            c.Eps,
		"rope_theta":              c.Theta,
		"rope_scaling": map[string]any{
			"rope_type": "yarn", "factor": c.Factor, "beta_fast": 32.0, "beta_slow": 1.0,
			"original_max_position_embeddings": c.OrigMax, "truncate": false,
		},
		"swiglu_limit":        c.Limit,
		"tie_word_embeddings": false,
		"bos_token_id":        1,
		"eos_token_id":        2,
		"pad_token_id":        0,
		"torch_dtype":         "bfloat16",
	}
	if c.Form == MXFP4 {
		j["quantization_config"] = map[string]any{
			"quant_method":           "mxfp4",
			"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"},
		}
	}
	return j
}

// tensor is one checkpoint tensor: its name, shape and initialisation
// (linear: uniform/sqrt(fan-in), embed: uniform, norm: 1±0.2, bias: ±0.1,
// sink: ±1).
type tensor struct {
	name  string
	shape []int
	init  string
}

// tensors lists every tensor in the float layout; the experts' are in the
// Linear layout [E, out, in] (Write converts them to the Form).
func (c Config) tensors() []tensor {
	H, D, E, I := c.Hidden, c.HeadDim, c.Experts, c.Intermediate
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.q_proj.bias", "bias", c.Heads*D)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.k_proj.bias", "bias", c.KVHeads*D)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.bias", "bias", c.KVHeads*D)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("self_attn.o_proj.bias", "bias", H)
		add("self_attn.sinks", "sink", c.Heads)
		add("post_attention_layernorm.weight", "norm", H)
		add("mlp.router.weight", "embed", E, H)
		add("mlp.router.bias", "bias", E)
		add("mlp.experts.gate_up_proj", "expert", E, 2*I, H)
		add("mlp.experts.gate_up_proj_bias", "bias", E, 2*I)
		add("mlp.experts.down_proj", "expert", E, H, I)
		add("mlp.experts.down_proj_bias", "bias", E, H)
	}
	out = append(out, tensor{"model.norm.weight", []int{H}, "norm"}, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	return out
}

func (t tensor) values(r *lmckpt.Rand) []float32 {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch t.init {
		case "linear", "expert":
			v[i] = float32(u / math.Sqrt(float64(t.shape[len(t.shape)-1])))
		case "embed":
			v[i] = float32(u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "bias":
			v[i] = float32(0.1 * u)
		case "sink":
			v[i] = float32(u)
		}
	}
	return v
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors.
func (c Config) Write(dir string) error {
	dt := c.DType
	if dt == "" {
		dt = safetensors.F32
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []safetensors.Tensor
	for _, t := range c.tensors() {
		v := t.values(r)
		if t.init != "expert" {
			st, err := safetensors.Float32Tensor(t.name, dt, t.shape, v)
			if err != nil {
				return err
			}
			ts = append(ts, st)
			continue
		}
		e, out, in := t.shape[0], t.shape[1], t.shape[2]
		switch c.Form {
		case MXFP4:
			blocks, scales := packMXFP4(v)
			ts = append(ts,
				safetensors.Tensor{Name: t.name + "_blocks", DType: safetensors.U8, Shape: []int{e, out, in / 32, 16}, Data: blocks},
				safetensors.Tensor{Name: t.name + "_scales", DType: safetensors.U8, Shape: []int{e, out, in / 32}, Data: scales})
		case Params:
			tr := make([]float32, len(v))
			for x := 0; x < e; x++ {
				for o := 0; o < out; o++ {
					for i := 0; i < in; i++ {
						tr[(x*in+i)*out+o] = v[(x*out+o)*in+i]
					}
				}
			}
			st, err := safetensors.Float32Tensor(t.name, dt, []int{e, in, out}, tr)
			if err != nil {
				return err
			}
			ts = append(ts, st)
		}
	}
	return lmckpt.WriteCheckpoint(dir, c.ConfigJSON(), ts)
}

// fp4 are the E2M1 values by nibble, as transformers' FP4_VALUES.
var fp4 = []float64{+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0}

// packMXFP4 quantises v (rows of a multiple of 32 values) as OpenAI's
// checkpoints are packed: per block of 32, the exponent that brings the
// largest magnitude within 6, each value rounded to the nearest FP4
// value, two a byte, the even-indexed value in the low nibble.
func packMXFP4(v []float32) (blocks, scales []byte) {
	nb := len(v) / 32
	blocks, scales = make([]byte, nb*16), make([]byte, nb)
	for b := 0; b < nb; b++ {
		top := 0.0
		for _, x := range v[b*32 : (b+1)*32] {
			top = math.Max(top, math.Abs(float64(x)))
		}
		e := 0
		if top > 0 {
			e = int(math.Ceil(math.Log2(top / 6)))
		}
		scales[b] = byte(e + 127)
		for i := 0; i < 32; i++ {
			x := float64(v[b*32+i]) / math.Ldexp(1, e)
			best := 0
			for k, f := range fp4 {
				if math.Abs(f-x) < math.Abs(fp4[best]-x) {
					best = k
				}
			}
			blocks[b*16+i/2] |= byte(best) << (4 * (i % 2))
		}
	}
	return blocks, scales
}

// Model is a loaded reference model.
type Model struct {
	C Config
	W map[string][]float64
	// The experts as transformers holds them: [E, in, out].
	gateUp, down [][]float64
	// Mutations, for tests that show a check can fail.
	NoSinks, SwapNibbles, NoInterleave, NoYaRN bool
}

// Load reads a checkpoint written by Write (any Form).
func Load(dir string, c Config) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("gptossref: checkpoint has no tensor %q", name))
	}
	return v
}

// Experts returns layer l's gate_up [E][H*2I] and down [E][I*H] in
// transformers' parameter layout (x @ W), dequantising MXFP4 as
// convert_moe_packed_tensors does: lut[low nibble] at even positions,
// lut[high nibble] at odd, times 2^(scale-127), reshaped to [E, out, in]
// and transposed to [E, in, out].
func (m *Model) Experts(l int, name string, out, in int) [][]float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.mlp.experts.%s", l, name)
	res := make([][]float64, c.Experts)
	if blocks, ok := m.W[p+"_blocks"]; ok {
		scales := m.get(p + "_scales")
		for e := range res {
			lin := make([]float64, out*in) // [out, in]
			for b := 0; b < out*in/32; b++ {
				f := math.Ldexp(1, int(scales[e*out*in/32+b])-127)
				for j := 0; j < 16; j++ {
					byt := int(blocks[(e*out*in/32+b)*16+j])
					lo, hi := byt&0x0F, byt>>4
					if m.SwapNibbles {
						lo, hi = hi, lo
					}
					lin[b*32+2*j] = fp4[lo] * f
					lin[b*32+2*j+1] = fp4[hi] * f
				}
			}
			res[e] = make([]float64, in*out)
			for o := 0; o < out; o++ {
				for i := 0; i < in; i++ {
					res[e][i*out+o] = lin[o*in+i]
				}
			}
		}
		return res
	}
	all := m.get(p) // [E, in, out]
	for e := range res {
		res[e] = all[e*in*out : (e+1)*in*out]
	}
	return res
}

// yarn is _compute_yarn_parameters for the config: inv_freq [D/2] and the
// attention factor.
func (c Config) yarn() ([]float64, float64) {
	dim := float64(c.HeadDim)
	base := c.Theta
	factor := c.Factor // the config's, as transformers reads it
	att := 0.1*math.Log(factor) + 1
	corr := func(rot float64) float64 {
		return dim * math.Log(float64(c.OrigMax)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := math.Max(corr(32), 0), math.Min(corr(1), dim-1) // truncate false
	if low == high {
		high += 0.001
	}
	inv := make([]float64, c.HeadDim/2)
	for i := range inv {
		pos := math.Pow(base, float64(2*i)/dim)
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		extra := 1 - ramp
		inv[i] = 1/(factor*pos)*(1-extra) + 1/pos*extra
	}
	return inv, att
}

// Logits runs the whole sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	T, H, D, I := len(tokens), c.Hidden, c.HeadDim, c.Intermediate
	inv, att := c.yarn()
	if m.NoYaRN {
		for i := range inv {
			inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(D))
		}
		att = 1
	}
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, T)
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range x {
			h := rmsnorm(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
			q[t] = linear(h, m.get(p+"self_attn.q_proj.weight"), m.get(p+"self_attn.q_proj.bias"))
			k[t] = linear(h, m.get(p+"self_attn.k_proj.weight"), m.get(p+"self_attn.k_proj.bias"))
			v[t] = linear(h, m.get(p+"self_attn.v_proj.weight"), m.get(p+"self_attn.v_proj.bias"))
			for hd := 0; hd < c.Heads; hd++ {
				rope(q[t][hd*D:(hd+1)*D], t, inv, att)
			}
			for hd := 0; hd < c.KVHeads; hd++ {
				rope(k[t][hd*D:(hd+1)*D], t, inv, att)
			}
		}
		window := 0
		if c.sliding(l) {
			window = c.Window
		}
		var sinks []float64
		if !m.NoSinks {
			sinks = m.get(p + "self_attn.sinks")
		}
		a := attend(q, k, v, c.Heads, c.KVHeads, D, window, sinks)
		gateUp := m.Experts(l, "gate_up_proj", 2*I, H)
		down := m.Experts(l, "down_proj", H, I)
		for t := range x {
			o := linear(a[t], m.get(p+"self_attn.o_proj.weight"), m.get(p+"self_attn.o_proj.bias"))
			for i := range o {
				x[t][i] += o[i]
			}
			h := rmsnorm(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			y := m.moe(p+"mlp.", h, gateUp, down)
			for i := range y {
				x[t][i] += y[i]
			}
		}
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = linear(rmsnorm(x[t], m.get("model.norm.weight"), c.Eps), m.get("lm_head.weight"), nil)
	}
	return out
}

// moe is GptOssMLP on one token: the router's top-k logits softmaxed,
// then Σ_j w_j (expert_{e_j}(h) + its down bias).
func (m *Model) moe(p string, h []float64, gateUp, down [][]float64) []float64 {
	c := m.C
	I, H := c.Intermediate, c.Hidden
	logits := linear(h, m.get(p+"router.weight"), m.get(p+"router.bias"))
	ids := make([]int, c.TopK)
	vals := make([]float64, c.TopK)
	taken := make([]bool, c.Experts)
	for j := range ids {
		best := -1
		for e, v := range logits {
			if !taken[e] && (best < 0 || v > logits[best]) {
				best = e
			}
		}
		taken[best] = true
		ids[j], vals[j] = best, logits[best]
	}
	softmax(vals)
	gub, db := m.get(p+"experts.gate_up_proj_bias"), m.get(p+"experts.down_proj_bias")
	out := make([]float64, H)
	for j, e := range ids {
		gu := make([]float64, 2*I) // h @ gate_up[e] + bias
		for o := range gu {
			s := gub[e*2*I+o]
			for i, v := range h {
				s += v * gateUp[e][i*2*I+o]
			}
			gu[o] = s
		}
		act := make([]float64, I)
		for i := range act {
			g, u := gu[2*i], gu[2*i+1]
			if m.NoInterleave {
				g, u = gu[i], gu[I+i]
			}
			g = math.Min(g, c.Limit)
			u = math.Max(math.Min(u, c.Limit), -c.Limit)
			act[i] = (u + 1) * g / (1 + math.Exp(-c.Alpha*g))
		}
		for o := 0; o < H; o++ {
			s := db[e*H+o]
			for i, a := range act {
				s += a * down[e][i*H+o]
			}
			out[o] += vals[j] * s
		}
	}
	return out
}

func rmsnorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = w[i] * v * inv
	}
	return out
}

// linear is x Wᵀ (+ b) for W [out, len(x)].
func linear(x, w, b []float64) []float64 {
	n := len(x)
	y := make([]float64, len(w)/n)
	for o := range y {
		s := 0.0
		for i, v := range x {
			s += w[o*n+i] * v
		}
		if b != nil {
			s += b[o]
		}
		y[o] = s
	}
	return y
}

func softmax(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	sum := 0.0
	for i, v := range x {
		x[i] = math.Exp(v - mx)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// rope is _apply_rotary_emb on one head: halves (x1, x2) become
// (x1 cos − x2 sin, x2 cos + x1 sin), cos and sin scaled by att.
func rope(v []float64, pos int, inv []float64, att float64) {
	half := len(inv)
	for i, f := range inv {
		c, s := math.Cos(float64(pos)*f)*att, math.Sin(float64(pos)*f)*att
		x1, x2 := v[i], v[i+half]
		v[i] = x1*c - x2*s
		v[i+half] = x2*c + x1*s
	}
}

// attend is eager_attention_forward with sinks: position t attends to
// positions s ≤ t (and t − s < window when window > 0); the head's sink
// logit joins the softmax and is dropped.
func attend(q, k, v [][]float64, heads, kvHeads, d, window int, sinks []float64) [][]float64 {
	group := heads / kvHeads
	scale := 1 / math.Sqrt(float64(d))
	out := make([][]float64, len(q))
	for t := range q {
		out[t] = make([]float64, heads*d)
		for h := 0; h < heads; h++ {
			kv := h / group
			var scores []float64
			var at []int
			for s := 0; s <= t; s++ {
				if window > 0 && t-s >= window {
					continue
				}
				dot := 0.0
				for i := 0; i < d; i++ {
					dot += q[t][h*d+i] * k[s][kv*d+i]
				}
				scores = append(scores, dot*scale)
				at = append(at, s)
			}
			if sinks != nil {
				scores = append(scores, sinks[h])
			}
			softmax(scores)
			for j, s := range at {
				for i := 0; i < d; i++ {
					out[t][h*d+i] += scores[j] * v[s][kv*d+i]
				}
			}
		}
	}
	return out
}
