// Package lmref is a plain-Go float64 forward pass of the decoder-only
// transformers tputool supports, written in the style of llama2.c's run.c:
// straight loops, no graph, no KV-cache tricks, no padding. Tests compare
// the graph code of pipeline/<arch> (run by compile/) against it.
//
// It is deliberately independent of pipeline/nn and pipeline/llama: it reads
// the checkpoint by Hugging Face names, computes RoPE, attention, norms and
// MLPs itself, and recomputes the whole sequence for every call.
//
// pipeline/testkit/lmckpt writes the checkpoints the tests use.
package lmref

import (
	"fmt"
	"math"
	"strings"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// ----------------------------------------------------------------------------
// Model description

// Config describes a model; it is the description lmckpt writes
// checkpoints from.
type Config = lmckpt.Config

// Model is a config plus its weights in float64.
type Model struct {
	C Config
	W map[string][]float64
	// RouteNormed routes SmallThinker's block from the MLP's normed
	// input, as Mixtral's does, instead of the layer's input: a mutant
	// for the tests that check the router's input matters.
	RouteNormed bool
}

// Load reads every tensor of a checkpoint (file or directory) as float64.
// With c.BitNetQuant, a BitNet-quantized checkpoint's projections (NAME a U8
// [ceil(out/4), in] beside PREFIX.weight_scale) are unpacked as
// transformers' unpack_weights does: output rows s·P .. s·P+P-1 from
// bits 2s..2s+1 of the P stored rows, minus one; then times weight_scale
// (AutoBitLinear) or divided by it (BitLinear, c.BitNetDivide).
func Load(path string, c Config) (*Model, error) {
	w, err := lmckpt.ReadFloat64(path)
	if err != nil {
		return nil, err
	}
	if c.BitNetQuant {
		for name, v := range w {
			sc, ok := w[strings.TrimSuffix(name, "weight")+"weight_scale"]
			if !ok || !strings.HasSuffix(name, ".weight") {
				continue
			}
			scale := sc[0]
			if c.BitNetDivide {
				scale = 1 / scale
			}
			rows := len(v) / bitnetIn(c, name)
			in := len(v) / rows
			out := make([]float64, 4*rows*in)
			for s := 0; s < 4; s++ {
				for j := 0; j < rows; j++ {
					for i := 0; i < in; i++ {
						b := int(v[j*in+i])
						out[(s*rows+j)*in+i] = float64((b>>(2*s))&3-1) * scale
					}
				}
			}
			w[name] = out
		}
	}
	return &Model{C: c, W: w}, nil
}

// bitnetIn is the input width of BitNet projection name in c.
func bitnetIn(c Config, name string) int {
	switch {
	case strings.HasSuffix(name, "o_proj.weight"):
		return c.Heads * c.HeadDim
	case strings.HasSuffix(name, "down_proj.weight"):
		return c.Intermediate
	}
	return c.Hidden
}

// actQuant8 is BitNet's per-token activation quantization of x (a copy):
// s = 127/max(max|x|, 1e-5), round(x·s) (half to even, as torch) clamped
// to [-128, 127], divided by s.
func actQuant8(x []float64) []float64 {
	return actQuantOr(x, false)
}

// actQuantOr is actQuant8, or with float a copy of x as it is (the
// BitNetFloatActs mistake).
func actQuantOr(x []float64, float bool) []float64 {
	if float {
		return append([]float64(nil), x...)
	}
	mx := 0.0
	for _, v := range x {
		mx = math.Max(mx, math.Abs(v))
	}
	s := 127 / math.Max(mx, 1e-5)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Max(-128, math.Min(127, math.RoundToEven(v*s))) / s
	}
	return out
}

func (m *Model) w(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("ref: checkpoint has no tensor %q", name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Math helpers (llama2.c's three, plus the activations)

// rmsnorm writes x normalized by its root mean square and scaled by w (or
// 1+w) to out.
func rmsnorm(out, x, w []float64, eps float64, plusOne bool) {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i := range x {
		g := w[i]
		if plusOne {
			g = 1 + w[i]
		}
		out[i] = x[i] * inv * g
	}
}

// layernorm is a LayerNorm without bias (CohereLayerNorm): x minus its
// mean, over its standard deviation, times w.
func layernorm(out, x, w []float64, eps float64) {
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	ss := 0.0
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i := range x {
		out[i] = (x[i] - mean) * inv * w[i]
	}
}

// norm is the config's norm of x by w: a LayerNorm without bias for
// Cohere, else an RMSNorm (Gemma's weights plus one).
func norm(c Config, out, x, w []float64) {
	if c.Cohere {
		layernorm(out, x, w, c.Eps)
		return
	}
	rmsnorm(out, x, w, c.Eps, c.Gemma)
}

// matmul: out[d] = sum_i W[d, i] * x[i] (+ b[d]) with W [len(out), len(x)].
func matmul(out, x, w, b []float64) {
	n := len(x)
	for d := range out {
		s := 0.0
		row := w[d*n : (d+1)*n]
		for i, v := range x {
			s += row[i] * v
		}
		if b != nil {
			s += b[d]
		}
		out[d] = s
	}
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

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func softcap(x, c float64) float64 {
	if c <= 0 {
		return x
	}
	return c * math.Tanh(x/c)
}

// rope rotates one head vector in place at position pos (rotate-half
// convention: dim i pairs with dim i + D/2).
func rope(v []float64, pos float64, theta float64) {
	d := len(v)
	for i := 0; i < d/2; i++ {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(d))
		a := pos * freq
		c, s := math.Cos(a), math.Sin(a)
		x1, x2 := v[i], v[i+d/2]
		v[i] = x1*c - x2*s
		v[i+d/2] = x2*c + x1*s
	}
}

// yarnRope is rope with YaRN's frequencies (arXiv:2309.00071, as
// transformers' _compute_yarn_parameters has them: each frequency blends
// the interpolated base^(-2i/d)/factor and the original base^(-2i/d) by a
// linear ramp between the dimensions that turn beta_fast and beta_slow
// times over the original context, their bounds truncated to whole
// dimensions). mscale and mscale_all_dim are both 1, so the attention
// factor is 1.
func yarnRope(v []float64, pos, theta float64, y *lmckpt.Yarn) {
	d := len(v)
	corr := func(rot float64) float64 {
		return float64(d) * math.Log(y.Orig/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	low := math.Max(math.Floor(corr(y.BetaFast)), 0)
	high := math.Min(math.Ceil(corr(y.BetaSlow)), float64(d-1))
	if low == high {
		high += 0.001
	}
	for i := 0; i < d/2; i++ {
		base := math.Pow(theta, float64(2*i)/float64(d))
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		keep := 1 - ramp // the share of the original frequency
		freq := (1/(y.Factor*base))*(1-keep) + (1/base)*keep
		a := pos * freq
		c, s := math.Cos(a), math.Sin(a)
		x1, x2 := v[i], v[i+d/2]
		v[i] = x1*c - x2*s
		v[i+d/2] = x2*c + x1*s
	}
}

// pairRope rotates the first rot dims of a head vector in place at
// position pos as GLM does: dims 2i and 2i+1 turn together by the
// frequency theta^(-2i/rot); the rest pass through.
func pairRope(v []float64, pos, theta float64, rot int) {
	for i := 0; i < rot/2; i++ {
		a := pos / math.Pow(theta, float64(2*i)/float64(rot))
		c, s := math.Cos(a), math.Sin(a)
		x1, x2 := v[2*i], v[2*i+1]
		v[2*i] = x1*c - x2*s
		v[2*i+1] = x2*c + x1*s
	}
}

// turn rotates a head of layer l at position pos as c says: YaRN, GLM's
// pairs over the first half, or the layer's plain rotary (pos already
// scaled for OLMo 3's linear rope).
func turn(c Config, v []float64, pos float64, l int) {
	if c.Glm {
		pairRope(v, pos, c.RopeTheta[l], len(v)/2)
		return
	}
	if c.Cohere || c.RopePairs {
		pairRope(v, pos, c.RopeTheta[l], len(v))
		return
	}
	if c.Yarn != nil {
		yarnRope(v, pos, c.RopeTheta[l], c.Yarn)
		return
	}
	theta := c.RopeTheta[l]
	if c.RopeAlpha > 0 { // HunYuan's DynamicNTKAlphaRotary
		d := float64(len(v))
		theta *= math.Pow(c.RopeAlpha, d/(d-2))
	}
	rope(v, pos, theta)
}

// ----------------------------------------------------------------------------
// Forward

// Logits runs the whole sequence and returns the logits after every token
// ([len(tokens)][Vocab]).
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	hidden := m.Hidden(tokens)
	out := make([][]float64, len(hidden))
	for t, h := range hidden {
		out[t] = make([]float64, c.Vocab)
		var hb []float64
		if c.Phi { // Phi's head has a bias; StarCoder2's does not
			hb = m.w("lm_head.bias")
		}
		matmul(out[t], h, m.w(head), hb)
		for i := range out[t] {
			out[t][i] = softcap(out[t][i], c.FinalSoftcap)
			if c.LogitScale != 0 {
				out[t][i] *= c.LogitScale
			}
		}
	}
	return out
}

// Score is a *ForSequenceClassification's logits for the sequence
// (transformers' GenericForSequenceClassification, the sequence taken
// as unpadded): score.weight [Labels, Hidden] times the final normed
// hidden states of its last token ([Labels]).
func (m *Model) Score(tokens []int) []float64 {
	hidden := m.Hidden(tokens)
	last := hidden[len(hidden)-1]
	w := m.w("score.weight")
	out := make([]float64, len(w)/len(last))
	matmul(out, last, w, nil)
	return out
}

// Hidden runs the whole sequence and returns the final normed hidden
// states of every token ([len(tokens)][Hidden]): what the head projects.
func (m *Model) Hidden(tokens []int) [][]float64 {
	c := m.C
	if c.Phi || c.Starcoder2 || c.Nemotron || c.StableLM || c.Olmo1 {
		return m.phiHidden(tokens)
	}
	T, H, D := len(tokens), c.Hidden, c.HeadDim
	qDim, kvDim := c.Heads*D, c.KVHeads*D
	group := c.Heads / c.KVHeads
	scale := c.QueryScale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(D))
	}

	// Embedding.
	x := make([][]float64, T)
	emb := m.w("model.embed_tokens.weight")
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
		if c.Gemma {
			for i := range x[t] {
				x[t][i] *= math.Sqrt(float64(H))
			}
		}
	}

	h := make([]float64, H)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		var in [][]float64 // SmallThinker's router input: the layer's input
		if c.SmallThinker {
			in = make([][]float64, T)
			for t := range x {
				in[t] = append([]float64(nil), x[t]...)
			}
		}
		bias := func(name string) []float64 {
			if !c.QKVBias {
				return nil
			}
			return m.w(p + name)
		}
		// Attention: q, k, v for every position.
		normed := make([][]float64, T) // Cohere: the one norm's output
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			switch {
			case c.Olmo2:
				copy(h, x[t]) // no norm before the attention
			case c.Apertus:
				norm(c, h, x[t], m.w(p+"attention_layernorm.weight"))
			default:
				norm(c, h, x[t], m.w(p+"input_layernorm.weight"))
			}
			if c.Cohere { // the MLP's input too
				normed[t] = append([]float64(nil), h...)
			}
			pos := float64(t)
			if c.RopeLinear > 0 && c.Window[l] == 0 { // OLMo 3: linear scaling on the full-attention layers only
				pos /= c.RopeLinear
			}
			q[t], k[t], v[t] = make([]float64, qDim), make([]float64, kvDim), make([]float64, kvDim)
			hq := h
			if c.BitNetQuant {
				hq = actQuantOr(h, c.BitNetFloatActs)
			}
			matmul(q[t], hq, m.w(p+"self_attn.q_proj.weight"), bias("self_attn.q_proj.bias"))
			matmul(k[t], hq, m.w(p+"self_attn.k_proj.weight"), bias("self_attn.k_proj.bias"))
			matmul(v[t], hq, m.w(p+"self_attn.v_proj.weight"), bias("self_attn.v_proj.bias"))
			if c.Olmo2 && !c.QKNorm { // q_norm and k_norm over the whole projections
				rmsnorm(q[t], append([]float64(nil), q[t]...), m.w(p+"self_attn.q_norm.weight"), c.Eps, false)
				rmsnorm(k[t], append([]float64(nil), k[t]...), m.w(p+"self_attn.k_norm.weight"), c.Eps, false)
			}
			for hd := 0; hd < c.Heads; hd++ {
				head := q[t][hd*D : (hd+1)*D]
				switch {
				case c.Cohere && c.QKNorm: // use_qk_norm: a bias-free LayerNorm over the head, the head's own weight
					layernorm(head, append([]float64(nil), head...), m.w(p + "self_attn.q_norm.weight")[hd*D:(hd+1)*D], c.Eps)
				case (c.QKNorm || c.Gemma) && !c.Gemma2 && !c.Gemma1 && !c.HunYuan:
					rmsnorm(head, append([]float64(nil), head...), m.w(p+"self_attn.q_norm.weight"), c.Eps, c.Gemma)
				}
				if l >= len(c.NoRope) || !c.NoRope[l] {
					turn(c, head, pos, l)
				}
				if c.HunYuan && c.QKNorm { // after the rotary
					rmsnorm(head, append([]float64(nil), head...), m.w(p+"self_attn.query_layernorm.weight"), c.Eps, false)
				}
				if c.Llama4Beta > 0 { // Ministral 3: the queries of every layer, after the rotary
					temp := 1 + c.Llama4Beta*math.Log(1+math.Floor(float64(t)/c.Yarn.Orig))
					for i := range head {
						head[i] *= temp
					}
				}
			}
			for hd := 0; hd < c.KVHeads; hd++ {
				head := k[t][hd*D : (hd+1)*D]
				switch {
				case c.Cohere && c.QKNorm:
					layernorm(head, append([]float64(nil), head...), m.w(p + "self_attn.k_norm.weight")[hd*D:(hd+1)*D], c.Eps)
				case (c.QKNorm || c.Gemma) && !c.Gemma2 && !c.Gemma1 && !c.HunYuan:
					rmsnorm(head, append([]float64(nil), head...), m.w(p+"self_attn.k_norm.weight"), c.Eps, c.Gemma)
				}
				if l >= len(c.NoRope) || !c.NoRope[l] {
					turn(c, head, pos, l)
				}
				if c.HunYuan && c.QKNorm {
					rmsnorm(head, append([]float64(nil), head...), m.w(p+"self_attn.key_layernorm.weight"), c.Eps, false)
				}
			}
		}
		att := make([]float64, qDim)
		o := make([]float64, H)
		for t := 0; t < T; t++ {
			for hd := 0; hd < c.Heads; hd++ {
				kvh := hd / group
				qh := q[t][hd*D : (hd+1)*D]
				lo := 0
				if w := c.Window[l]; w > 0 && t-w+1 > 0 {
					lo = t - w + 1
				}
				scores := make([]float64, t+1-lo)
				for s := lo; s <= t; s++ {
					dot := 0.0
					for i := 0; i < D; i++ {
						dot += qh[i] * k[s][kvh*D+i]
					}
					scores[s-lo] = softcap(dot*scale, c.AttnSoftcap)
				}
				softmax(scores)
				out := att[hd*D : (hd+1)*D]
				for i := range out {
					out[i] = 0
				}
				for s := lo; s <= t; s++ {
					for i := 0; i < D; i++ {
						out[i] += scores[s-lo] * v[s][kvh*D+i]
					}
				}
			}
			var oBias []float64
			if c.OBias || c.Cohere && c.QKVBias {
				oBias = m.w(p + "self_attn.o_proj.bias")
			}
			attIn := att
			if c.BitNet { // attn_sub_norm
				attIn = make([]float64, qDim)
				rmsnorm(attIn, att, m.w(p+"self_attn.attn_sub_norm.weight"), c.Eps, false)
			}
			if c.BitNetQuant { // the int8 input
				attIn = actQuantOr(attIn, c.BitNetFloatActs)
			}
			matmul(o, attIn, m.w(p+"self_attn.o_proj.weight"), oBias)
			switch {
			case c.Gemma && !c.Gemma1 || c.Olmo2:
				rmsnorm(o, append([]float64(nil), o...), m.w(p+"post_attention_layernorm.weight"), c.Eps, c.Gemma)
			case c.Glm4:
				rmsnorm(o, append([]float64(nil), o...), m.w(p+"post_self_attn_layernorm.weight"), c.Eps, false)
			}
			for i := range o {
				x[t][i] += o[i]
			}
		}
		// MLP.
		gate := make([]float64, c.Intermediate)
		up := make([]float64, c.Intermediate)
		for t := 0; t < T; t++ {
			switch {
			case c.Cohere:
				copy(h, normed[t]) // the attention's input, not the sum
			case c.Olmo2:
				copy(h, x[t]) // no norm before the MLP
			case c.Gemma && !c.Gemma1:
				rmsnorm(h, x[t], m.w(p+"pre_feedforward_layernorm.weight"), c.Eps, true)
			case c.Apertus:
				rmsnorm(h, x[t], m.w(p+"feedforward_layernorm.weight"), c.Eps, false)
			default:
				rmsnorm(h, x[t], m.w(p+"post_attention_layernorm.weight"), c.Eps, c.Gemma)
			}
			if c.Experts > 0 && c.HunYuan {
				m.sparseNamed(o, h, p+"mlp.", "gate.wg.weight", qwenExpertNames)
				m.sharedMLP(o, h, p+"mlp.shared_mlp.")
				for i := range o {
					x[t][i] += o[i]
				}
				continue
			}
			if c.Experts > 0 && c.SmallThinker {
				r := in[t]
				if m.RouteNormed {
					r = h
				}
				m.smallThinkerBlock(o, h, r, p+"block_sparse_moe.")
				for i := range o {
					x[t][i] += o[i]
				}
				continue
			}
			if c.Experts > 0 {
				m.sparseBlock(o, h, p+"block_sparse_moe.")
				for i := range o {
					x[t][i] += o[i]
				}
				continue
			}
			if c.Apertus { // NemotronMLP with xIELU: down(xielu(up(h)))
				matmul(up, h, m.w(p+"mlp.up_proj.weight"), nil)
				softplus := func(v float64) float64 { return math.Log1p(math.Exp(v)) }
				beta, eps := m.w(p + "mlp.act_fn.beta")[0], m.w(p + "mlp.act_fn.eps")[0]
				ap, an := softplus(m.w(p + "mlp.act_fn.alpha_p")[0]), beta+softplus(m.w(p + "mlp.act_fn.alpha_n")[0])
				for i, v := range up {
					if v > 0 {
						gate[i] = ap*v*v + beta*v
					} else {
						gate[i] = (math.Expm1(math.Min(v, eps))-v)*an + beta*v
					}
				}
				matmul(o, gate, m.w(p+"mlp.down_proj.weight"), nil)
				for i := range o {
					x[t][i] += o[i]
				}
				continue
			}
			if c.Ungated { // NemotronMLP with relu2: down(relu(up(h))²)
				matmul(up, h, m.w(p+"mlp.up_proj.weight"), nil)
				for i := range up {
					r := math.Max(up[i], 0)
					gate[i] = r * r
				}
				matmul(o, gate, m.w(p+"mlp.down_proj.weight"), nil)
				for i := range o {
					x[t][i] += o[i]
				}
				continue
			}
			if c.Glm { // gate_up_proj: the gate's rows, then the up's
				w, n := m.w(p+"mlp.gate_up_proj.weight"), c.Intermediate*H
				matmul(gate, h, w[:n], nil)
				matmul(up, h, w[n:], nil)
			} else {
				hm := h
				if c.BitNetQuant {
					hm = actQuantOr(h, c.BitNetFloatActs)
				}
				matmul(gate, hm, m.w(p+"mlp.gate_proj.weight"), m.W[p+"mlp.gate_proj.bias"]) // biases where the checkpoint has them (ERNIE 4.5's use_bias)
				matmul(up, hm, m.w(p+"mlp.up_proj.weight"), m.W[p+"mlp.up_proj.bias"])
			}
			for i := range gate {
				switch {
				case c.Gemma:
					gate[i] = geluTanh(gate[i]) * up[i]
				case c.BitNet: // relu²
					r := math.Max(gate[i], 0)
					gate[i] = r * r * up[i]
				default:
					gate[i] = silu(gate[i]) * up[i]
				}
			}
			downIn := gate
			if c.BitNet { // ffn_sub_norm
				downIn = make([]float64, len(gate))
				rmsnorm(downIn, gate, m.w(p+"mlp.ffn_sub_norm.weight"), c.Eps, false)
			}
			if c.BitNetQuant { // the int8 input
				downIn = actQuantOr(downIn, c.BitNetFloatActs)
			}
			matmul(o, downIn, m.w(p+"mlp.down_proj.weight"), m.W[p+"mlp.down_proj.bias"])
			switch {
			case c.Gemma && !c.Gemma1 || c.Olmo2:
				rmsnorm(o, append([]float64(nil), o...), m.w(p+"post_feedforward_layernorm.weight"), c.Eps, c.Gemma)
			case c.Glm4:
				rmsnorm(o, append([]float64(nil), o...), m.w(p+"post_mlp_layernorm.weight"), c.Eps, false)
			}
			for i := range o {
				x[t][i] += o[i]
			}
		}
	}

	// Final norm.
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		out[t] = make([]float64, H)
		norm(c, out[t], x[t], m.w("model.norm.weight"))
	}
	return out
}

// sparseBlock writes Mixtral's sparse MoE block (MixtralSparseMoeBlock,
// under prefix p) on one token h to out: the router's softmax over the
// experts, the TopK most probable (the lowest index first on ties, as
// torch.topk keeps them), their probabilities renormalized to sum to one,
// and the sum of those experts' w2(silu(w1 h) · w3 h) so weighted.
func (m *Model) sparseBlock(out, h []float64, p string) {
	m.sparseNamed(out, h, p, "gate.weight", [3]string{"w1.weight", "w3.weight", "w2.weight"})
}

// qwenExpertNames are the experts' gate, up and down names of Qwen's
// layout (HunYuan's).
var qwenExpertNames = [3]string{"gate_proj.weight", "up_proj.weight", "down_proj.weight"}

// sharedMLP adds to out the SwiGLU under prefix p on h (HunYuan's
// shared_mlp): down(silu(gate h) · up h).
func (m *Model) sharedMLP(out, h []float64, p string) {
	inter := m.C.Intermediate
	gate, up, y := make([]float64, inter), make([]float64, inter), make([]float64, len(out))
	matmul(gate, h, m.w(p+"gate_proj.weight"), nil)
	matmul(up, h, m.w(p+"up_proj.weight"), nil)
	for i := range gate {
		gate[i] = silu(gate[i]) * up[i]
	}
	matmul(y, gate, m.w(p+"down_proj.weight"), nil)
	for i := range out {
		out[i] += y[i]
	}
}

// sparseNamed is sparseBlock with the router named router and the
// experts' gate, up and down matrices named names.
func (m *Model) sparseNamed(out, h []float64, p, router string, names [3]string) {
	c := m.C
	probs := make([]float64, c.Experts)
	matmul(probs, h, m.w(p+router), nil)
	softmax(probs)
	taken := make([]bool, c.Experts)
	ids, ws := make([]int, c.TopK), make([]float64, c.TopK)
	sum := 0.0
	for j := range ids {
		best := -1
		for e, q := range probs {
			if !taken[e] && (best < 0 || q > probs[best]) {
				best = e
			}
		}
		taken[best], ids[j], ws[j] = true, best, probs[best]
		sum += probs[best]
	}
	for i := range out {
		out[i] = 0
	}
	gate, up := make([]float64, c.Intermediate), make([]float64, c.Intermediate)
	y := make([]float64, len(out))
	for j, e := range ids {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		matmul(gate, h, m.w(q+names[0]), nil)
		matmul(up, h, m.w(q+names[1]), nil)
		for i := range gate {
			gate[i] = silu(gate[i]) * up[i]
		}
		matmul(y, gate, m.w(q+names[2]), nil)
		for i := range out {
			out[i] += ws[j] / sum * y[i]
		}
	}
}

// smallThinkerBlock writes SmallThinker's sparse block
// (SmallThinkerMoeBlock, under prefix p) on one token h to out: the
// router's logits from the layer's input r (primary_router), the TopK
// largest (the lowest index first on ties, as torch.topk keeps them),
// weighed by the softmax over those logits or, with SmallThinkerSigmoid,
// by their sigmoids over the sigmoids' sum, and the sum of those
// experts' down(relu(gate h) · up h) so weighted.
func (m *Model) smallThinkerBlock(out, h, r []float64, p string) {
	c := m.C
	logits := make([]float64, c.Experts)
	matmul(logits, r, m.w(p+"primary_router.weight"), nil)
	taken := make([]bool, c.Experts)
	ids, ws := make([]int, c.TopK), make([]float64, c.TopK)
	for j := range ids {
		best := -1
		for e, v := range logits {
			if !taken[e] && (best < 0 || v > logits[best]) {
				best = e
			}
		}
		taken[best], ids[j], ws[j] = true, best, logits[best]
	}
	if c.SmallThinkerSigmoid {
		sum := 0.0
		for j := range ws {
			ws[j] = 1 / (1 + math.Exp(-ws[j]))
			sum += ws[j]
		}
		for j := range ws {
			ws[j] /= sum
		}
	} else {
		softmax(ws)
	}
	for i := range out {
		out[i] = 0
	}
	gate, up := make([]float64, c.Intermediate), make([]float64, c.Intermediate)
	y := make([]float64, len(out))
	for j, e := range ids {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		matmul(gate, h, m.w(q+"gate.weight"), nil)
		matmul(up, h, m.w(q+"up.weight"), nil)
		for i := range gate {
			gate[i] = math.Max(gate[i], 0) * up[i]
		}
		matmul(y, gate, m.w(q+"down.weight"), nil)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
}

// layernormBias is nn.LayerNorm: x minus its mean over its standard
// deviation, times w, plus b.
func layernormBias(out, x, w, b []float64, eps float64) {
	layernorm(out, x, w, eps)
	for i := range out {
		out[i] += b[i]
	}
}

// phiHidden is Hidden for Phi (PhiDecoderLayer): x + attn(ln(x)) +
// mlp(ln(x)) with one biased LayerNorm, every projection biased, the
// rotary over the first PartialRotary of each head (halves), fc2(gelu_new(
// fc1(h))), then model.final_layernorm; and for StarCoder2
// (Starcoder2DecoderLayer) the same sublayers in sequence, each after its
// own biased LayerNorm (input_layernorm, post_attention_layernorm), the
// MLP c_proj(gelu_tanh(c_fc(h))), the rotary over the whole head, every
// layer within Window[0], then model.norm.
func (m *Model) phiHidden(tokens []int) [][]float64 {
	c := m.C
	T, H, D := len(tokens), c.Hidden, c.HeadDim
	rot := int(float64(D) * c.PartialRotary)
	oName, upName, downName, final := "self_attn.dense", "mlp.fc1", "mlp.fc2", "model.final_layernorm"
	switch {
	case c.Starcoder2:
		rot, oName, upName, downName, final = D, "self_attn.o_proj", "mlp.c_fc", "mlp.c_proj", "model.norm"
	case c.Nemotron || c.StableLM:
		oName, upName, downName, final = "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj", "model.norm"
	case c.Olmo1:
		rot, oName, upName, downName, final = D, "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj", "model.norm"
	}
	sequential := c.Starcoder2 || c.Nemotron || c.Olmo1 || c.StableLM && !c.StableLMParallel
	ln := func(out, x []float64, name string) { // biased LayerNorm; Nemotron's LayerNorm1P scales by (1 + w); OLMo 1's has no parameters
		if c.Olmo1 {
			ones := make([]float64, len(x))
			for i := range ones {
				ones[i] = 1
			}
			layernorm(out, x, ones, 1e-5)
			return
		}
		w := m.w(name + ".weight")
		if c.Nemotron {
			w = append([]float64(nil), w...)
			for i := range w {
				w[i]++
			}
		}
		layernormBias(out, x, w, m.w(name+".bias"), c.Eps)
	}
	act := geluTanh
	if c.Nemotron {
		act = func(v float64) float64 { r := math.Max(v, 0); return r * r }
	}
	group := c.Heads / c.KVHeads
	scale := 1 / math.Sqrt(float64(D))
	x := make([][]float64, T)
	emb := m.w("model.embed_tokens.weight")
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		lin := func(out, in []float64, name string) { // biased where the checkpoint has the bias
			matmul(out, in, m.w(p+name+".weight"), m.W[p+name+".bias"])
		}
		hs := make([][]float64, T)
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := 0; t < T; t++ {
			hs[t] = make([]float64, H)
			ln(hs[t], x[t], p+"input_layernorm")
			q[t], k[t], v[t] = make([]float64, c.Heads*D), make([]float64, c.KVHeads*D), make([]float64, c.KVHeads*D)
			lin(q[t], hs[t], "self_attn.q_proj")
			lin(k[t], hs[t], "self_attn.k_proj")
			lin(v[t], hs[t], "self_attn.v_proj")
			if cl := c.ClipQKV; cl > 0 { // OLMo 1's clip_qkv, on the projections
				for _, vec := range [][]float64{q[t], k[t], v[t]} {
					for i := range vec {
						vec[i] = math.Max(-cl, math.Min(cl, vec[i]))
					}
				}
			}
			if c.Phi && c.QKNorm { // PhiAttention's qk_layernorm: one biased LayerNorm over head_dim for the query heads, one for the key heads
				for hd := 0; hd < c.Heads; hd++ {
					head := q[t][hd*D : (hd+1)*D]
					layernormBias(head, append([]float64(nil), head...), m.w(p+"self_attn.q_layernorm.weight"), m.w(p+"self_attn.q_layernorm.bias"), c.Eps)
				}
				for hd := 0; hd < c.KVHeads; hd++ {
					head := k[t][hd*D : (hd+1)*D]
					layernormBias(head, append([]float64(nil), head...), m.w(p+"self_attn.k_layernorm.weight"), m.w(p+"self_attn.k_layernorm.bias"), c.Eps)
				}
			}
			if c.StableLM && c.QKNorm { // qk_layernorm: each head's own bias-free LayerNorm
				for hd := 0; hd < c.Heads; hd++ {
					head := q[t][hd*D : (hd+1)*D]
					layernorm(head, append([]float64(nil), head...), m.w(fmt.Sprintf("%sself_attn.q_layernorm.norms.%d.weight", p, hd)), c.Eps)
				}
				for hd := 0; hd < c.KVHeads; hd++ {
					head := k[t][hd*D : (hd+1)*D]
					layernorm(head, append([]float64(nil), head...), m.w(fmt.Sprintf("%sself_attn.k_layernorm.norms.%d.weight", p, hd)), c.Eps)
				}
			}
			for hd := 0; hd < c.Heads; hd++ {
				rope(q[t][hd*D:hd*D+rot], float64(t), c.RopeTheta[l])
			}
			for hd := 0; hd < c.KVHeads; hd++ {
				rope(k[t][hd*D:hd*D+rot], float64(t), c.RopeTheta[l])
			}
		}
		for t := 0; t < T; t++ {
			att := make([]float64, c.Heads*D)
			lo := 0
			if w := c.Window[l]; sequential && w > 0 && t-w+1 > 0 {
				lo = t - w + 1
			}
			for hd := 0; hd < c.Heads; hd++ {
				kvh := hd / group
				scores := make([]float64, t+1-lo)
				for s := lo; s <= t; s++ {
					for i := 0; i < D; i++ {
						scores[s-lo] += q[t][hd*D+i] * k[s][kvh*D+i]
					}
					scores[s-lo] *= scale
				}
				softmax(scores)
				for s := lo; s <= t; s++ {
					for i := 0; i < D; i++ {
						att[hd*D+i] += scores[s-lo] * v[s][kvh*D+i]
					}
				}
			}
			o := make([]float64, H)
			lin(o, att, oName)
			h := hs[t]
			if sequential { // the MLP reads the attention's sum, normed
				for i := range x[t] {
					x[t][i] += o[i]
					o[i] = 0
				}
				h = make([]float64, H)
				ln(h, x[t], p+"post_attention_layernorm")
			}
			f := make([]float64, c.Intermediate)
			lin(f, h, upName)
			if c.StableLM || c.Olmo1 { // SwiGLU: silu(gate(h)) · up(h)
				g := make([]float64, c.Intermediate)
				lin(g, h, "mlp.gate_proj")
				for i := range f {
					f[i] *= silu(g[i])
				}
			} else {
				for i := range f {
					f[i] = act(f[i])
				}
			}
			y := make([]float64, H)
			lin(y, f, downName)
			for i := range x[t] {
				x[t][i] += o[i] + y[i]
			}
		}
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = make([]float64, H)
		ln(out[t], x[t], final)
	}
	return out
}
