// Package phi3ref is a plain-Go float64 forward pass of Microsoft's
// Phi-3 (Phi3ForCausalLM) and Phi-3.5-MoE (PhimoeForCausalLM), written
// from transformers' models/phi3/modeling_phi3.py,
// models/phimoe/modeling_phimoe.py and modeling_rope_utils.py's LongRoPE
// apart from pipeline/phi3, plus a writer of tiny checkpoints under the
// releases' tensor names.
//
// The model, as this package reads transformers, on one unpadded sequence
// of T tokens:
//
//	x = embed_tokens[token]
//	per layer:  x += o_proj(attention(norm(x)·input_layernorm))
//	            x += mlp(norm(x)·post_attention_layernorm)
//	logits = lm_head(norm(x)·model.norm) (+ lm_head.bias)
//
// where
//
//   - norm is an RMSNorm (Phi-3) or a LayerNorm with a bias (Phi-3.5-MoE),
//     eps rms_norm_eps.
//   - attention: Phi-3's qkv_proj product cut into queries (heads·D),
//     keys and values (kv_heads·D each), in that order, D = hidden/heads;
//     Phi-3.5-MoE's q_proj, k_proj, v_proj and o_proj with biases when
//     attention_bias. The first rot = D·partial_rotary_factor dims of each
//     query and key head turn by rotate_half at frequencies
//     1/(ext_i·theta^(2i/rot)), ext the short_factor, or the long_factor
//     when T > original_max_position_embeddings (all ones without
//     LongRoPE); cos and sin times the attention factor
//     sqrt(1 + ln(max/original)/ln(original)) (Phi-3) or the
//     short_mscale or long_mscale (Phi-3.5-MoE). Causal softmax of
//     q·k/sqrt(D) over the last sliding_window keys when it is set,
//     grouped-query heads.
//   - Phi-3's mlp: down_proj(up · silu(gate)), gate and up the halves of
//     gate_up_proj's product, gate first.
//   - Phi-3.5-MoE's: sparsemixer over the logits of block_sparse_moe.gate
//     (two rounds, each the largest remaining logit m weighed by its
//     softmax among the logits s with (m − s)/max(|s|, m) ≤
//     2·router_jitter_noise; the first winner out of the second round),
//     Σ w_j · w2_j(silu(w1_j·h) · w3_j·h).
package phi3ref

import (
	"fmt"
	"math"
	"strings"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Phi3 describes a tiny Phi-3 or Phi-3.5-MoE.
type Phi3 struct {
	MoE                                   bool
	Vocab, Hidden, Layers, Heads, KVHeads int
	Intermediate                          int // intermediate_size (each expert's with MoE)
	Eps, Theta                            float64
	Partial                               float64 // partial_rotary_factor; 0 writes none (1)
	Window                                int     // sliding_window; 0 writes null
	MaxPositions                          int
	// LongRope writes rope_scaling type RopeType ("longrope", or "su")
	// with Short and Long (rot/2 each) over OriginalMax positions; the
	// MoE's also ShortMScale and LongMScale.
	LongRope                bool
	RopeType                string
	OriginalMax             int
	Short, Long             []float64
	ShortMScale, LongMScale float64
	Tied                    bool
	// The MoE's: Experts, the router's jitter, attention_bias and
	// lm_head_bias; Stacked writes transformers v5's names
	// (mlp.router.weight, mlp.experts.gate_up_proj and down_proj).
	Experts            int
	Jitter             float64
	AttnBias, HeadBias bool
	Stacked            bool
	Seed               uint64
}

// TinyDense is a small Phi-3 in Phi-4-mini's shape: a partial rotary
// embedding (6 of 8 dims), LongRoPE switching past 12 positions, tied
// embeddings, GQA 4 over 2 and a window of 7 on every layer.
func TinyDense() Phi3 {
	return Phi3{Vocab: 96, Hidden: 32, Layers: 3, Heads: 4, KVHeads: 2, Intermediate: 24, Eps: 1e-5, Theta: 10000,
		Partial: 0.75, Window: 7, MaxPositions: 96, LongRope: true, RopeType: "longrope", OriginalMax: 12,
		Short: []float64{1, 1.3, 1.9}, Long: []float64{1.5, 2.5, 4}, Tied: true, Seed: 5}
}

// TinyMoE is a small Phi-3.5-MoE: 6 experts of width 24, LayerNorms,
// biases on the attention and the head, LongRoPE with mscales switching
// past 12 positions, and a router jitter of 0.15, so that near logits
// share the weight of their winner.
func TinyMoE() Phi3 {
	return Phi3{MoE: true, Vocab: 96, Hidden: 32, Layers: 3, Heads: 4, KVHeads: 2, Intermediate: 24, Eps: 1e-5, Theta: 1e6,
		MaxPositions: 128, LongRope: true, RopeType: "longrope", OriginalMax: 12,
		Short: []float64{1, 1.1, 1.2, 1.5}, Long: []float64{2, 3, 5, 8}, ShortMScale: 1.2, LongMScale: 1.4,
		Experts: 6, Jitter: 0.15, AttnBias: true, HeadBias: true, Seed: 9}
}

// HeadDim is hidden/heads.
func (c Phi3) HeadDim() int { return c.Hidden / c.Heads }

// Rot is the rotary dims of a head.
func (c Phi3) Rot() int {
	if c.Partial == 0 {
		return c.HeadDim()
	}
	return int(float64(c.HeadDim()) * c.Partial)
}

func (c Phi3) check() error {
	if c.Hidden%c.Heads != 0 || c.Heads%c.KVHeads != 0 || c.Rot()%2 != 0 {
		return fmt.Errorf("phi3ref: hidden %d, heads %d, kv heads %d and rotary dims %d do not fit", c.Hidden, c.Heads, c.KVHeads, c.Rot())
	}
	if c.LongRope && (len(c.Short) != c.Rot()/2 || len(c.Long) != c.Rot()/2) {
		return fmt.Errorf("phi3ref: %d short and %d long factors for %d rotary dims", len(c.Short), len(c.Long), c.Rot())
	}
	if c.MoE && c.Experts < 2 {
		return fmt.Errorf("phi3ref: %d experts", c.Experts)
	}
	return nil
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	Init  string
}

// Tensors lists the checkpoint tensors under the releases' names, in the
// order Write draws them: model.embed_tokens.weight; per layer
// input_layernorm.weight (and .bias with MoE), Phi-3's
// self_attn.qkv_proj.weight [(heads + 2·kv)·D, H] or the MoE's q_proj,
// k_proj, v_proj (and their biases), then o_proj (and its bias);
// post_attention_layernorm; Phi-3's mlp.gate_up_proj.weight [2I, H] and
// mlp.down_proj.weight, or the MoE's block_sparse_moe.gate.weight [E, H]
// and each expert's block_sparse_moe.experts.e.w1, w3 and w2;
// model.norm; lm_head.weight unless Tied, and lm_head.bias with
// HeadBias.
func (c Phi3) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim()
	q, kv := c.Heads*D, c.KVHeads*D
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	norm := func(add func(string, string, ...int), name string) {
		add(name+".weight", "norm", H)
		if c.MoE {
			add(name+".bias", "bias", H)
		}
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		norm(add, "input_layernorm")
		if c.MoE {
			for _, m := range []struct {
				name string
				n    int
			}{{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}} {
				add("self_attn."+m.name+".weight", "qk", m.n, H)
				if c.AttnBias {
					add("self_attn."+m.name+".bias", "bias", m.n)
				}
			}
		} else {
			add("self_attn.qkv_proj.weight", "qk", q+2*kv, H)
		}
		add("self_attn.o_proj.weight", "linear", H, q)
		if c.MoE && c.AttnBias {
			add("self_attn.o_proj.bias", "bias", H)
		}
		norm(add, "post_attention_layernorm")
		if !c.MoE {
			add("mlp.gate_up_proj.weight", "linear", 2*c.Intermediate, H)
			add("mlp.down_proj.weight", "linear", H, c.Intermediate)
			continue
		}
		add("block_sparse_moe.gate.weight", "router", c.Experts, H)
		for e := range c.Experts {
			add(fmt.Sprintf("block_sparse_moe.experts.%d.w1.weight", e), "linear", c.Intermediate, H)
			add(fmt.Sprintf("block_sparse_moe.experts.%d.w3.weight", e), "linear", c.Intermediate, H)
			add(fmt.Sprintf("block_sparse_moe.experts.%d.w2.weight", e), "linear", H, c.Intermediate)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if c.MoE {
		out = append(out, Tensor{"model.norm.bias", []int{H}, "bias"})
	}
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.HeadBias {
		out = append(out, Tensor{"lm_head.bias", []int{c.Vocab}, "bias"})
	}
	return out
}

// fill returns deterministic values for a tensor, u uniform in [-1, 1)
// and fan-in the product of the dimensions after the first:
//
//	linear  u / sqrt(fan-in)
//	qk      2u / sqrt(fan-in)   (scores that are not uniform)
//	embed   u
//	norm    1 + 0.2u
//	bias    0.2u
//	router  3u / sqrt(fan-in)   (logits spread wide enough that some
//	                             rows have one winner, others several
//	                             within the jitter)
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	return lmckpt.Fill(r, t.Shape, func(u float64, fan int) float64 {
		var x float64
		switch t.Init {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "embed":
			x = u
		case "norm":
			x = 1 + 0.2*u
		case "bias":
			x = 0.2 * u
		case "router":
			x = 3 * u / math.Sqrt(float64(fan))
		default:
			panic("phi3ref: unknown init " + t.Init)
		}
		return x
	})
}

// ConfigJSON returns the config.json: Phi3ForCausalLM (model_type phi3)
// or PhiMoEForCausalLM, the release's spelling (phimoe), the sizes,
// rms_norm_eps, rope_theta, partial_rotary_factor, sliding_window,
// max_position_embeddings and original_max_position_embeddings,
// rope_scaling, tie_word_embeddings, the MoE's expert and bias fields;
// bos 1, eos 7 (not Phi's 32000, so a reader that ignores it is caught),
// float32.
func (c Phi3) ConfigJSON() map[string]any {
	cfg := map[string]any{
		"vocab_size":                       c.Vocab,
		"hidden_size":                      c.Hidden,
		"intermediate_size":                c.Intermediate,
		"num_hidden_layers":                c.Layers,
		"num_attention_heads":              c.Heads,
		"num_key_value_heads":              c.KVHeads,
		"max_position_embeddings":          c.MaxPositions,
		"original_max_position_embeddings": c.OriginalMax,
		"rms_norm_eps":                     c.Eps,
		"rope_theta":                       c.Theta,
		"tie_word_embeddings":              c.Tied,
		"hidden_act":                       "silu",
		"bos_token_id":                     1,
		"eos_token_id":                     7,
		"use_cache":                        true,
		"torch_dtype":                      "float32",
	}
	if c.Partial != 0 {
		cfg["partial_rotary_factor"] = c.Partial
	}
	if c.Window > 0 {
		cfg["sliding_window"] = c.Window
	} else {
		cfg["sliding_window"] = nil
	}
	if c.LongRope {
		s := map[string]any{"type": c.RopeType, "short_factor": c.Short, "long_factor": c.Long}
		if c.MoE {
			s["short_mscale"], s["long_mscale"] = c.ShortMScale, c.LongMScale
			s["original_max_position_embeddings"] = c.OriginalMax
		}
		cfg["rope_scaling"] = s
	} else {
		cfg["rope_scaling"] = nil
	}
	if c.MoE {
		cfg["architectures"] = []string{"PhiMoEForCausalLM"}
		cfg["model_type"] = "phimoe"
		cfg["num_local_experts"] = c.Experts
		cfg["num_experts_per_tok"] = 2
		cfg["router_jitter_noise"] = c.Jitter
		cfg["input_jitter_noise"] = 0.01
		cfg["attention_bias"] = c.AttnBias
		cfg["lm_head_bias"] = c.HeadBias
	} else {
		cfg["architectures"] = []string{"Phi3ForCausalLM"}
		cfg["model_type"] = "phi3"
	}
	return cfg
}

// Write writes dir/config.json, dir/generation_config.json (bos 1, eos 7)
// and dir/model.safetensors in float32, values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors; with Stacked each layer's
// router is written as mlp.router.weight and its experts as
// mlp.experts.gate_up_proj [E, 2I, H] (each expert's w1 rows, then its w3
// rows) and mlp.experts.down_proj [E, H, I], the same values.
func (c Phi3) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		name := t.Name
		if c.Stacked {
			name = strings.Replace(name, ".block_sparse_moe.gate.weight", ".mlp.router.weight", 1)
		}
		ts = append(ts, lmckpt.F32Tensor{Name: name, Shape: t.Shape, Values: fill(r, t)})
	}
	for l := range c.Layers {
		if c.Stacked {
			p := fmt.Sprintf("model.layers.%d.", l)
			ts = lmckpt.StackExperts(ts, p+"block_sparse_moe.experts.", p+"mlp.experts.", lm.MixtralExperts, c.Experts, c.Intermediate, c.Hidden)
		}
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 7}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C Phi3
	// W holds every tensor by its release name (a v5 save's router and
	// stacks read back under them).
	W        map[string][]float64
	Mistakes Mistakes
}

// Mistakes are deliberate departures from Phi-3, one switch each, which a
// comparison against this package must detect:
//
//   - UpFirst reads gate_up_proj's first half as the up projection.
//   - KVSwapped cuts qkv_proj's product as queries, values, keys.
//   - ShortOnly keeps the short factors past original_max_position_embeddings.
//   - NoRopeScale leaves cos and sin unscaled (no attention factor or
//     mscale).
//   - WholeHead turns every dim of each head, not the partial rotary
//     dims.
//   - NoWindow attends to every earlier key.
//   - TopKSoftmax routes the MoE as Mixtral does: the softmax's top 2,
//     renormalized.
//   - RMSNorms normalizes the MoE by RMSNorms (their weights, no bias).
//   - NoHeadBias leaves out lm_head.bias.
type Mistakes struct {
	UpFirst, KVSwapped, ShortOnly, NoRopeScale, WholeHead, NoWindow, TopKSoftmax, RMSNorms, NoHeadBias bool
}

// Load reads a checkpoint written by Write as float64, checking that
// every tensor of Tensors is there (or its stack) with its size.
func (c Phi3) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		if r, ok := w[p+"mlp.router.weight"]; ok {
			w[p+"block_sparse_moe.gate.weight"] = r
		}
		lmckpt.Unstack(w, p+"mlp.experts.", p+"block_sparse_moe.experts.", lm.MixtralExperts, c.Experts, c.Intermediate, c.Hidden)
	}
	chk := lmckpt.Weights64{M: w, Kit: "phi3ref"}
	for _, t := range c.Tensors() {
		chk.Shaped(t.Name, t.Shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("phi3ref: checkpoint has no tensor %q", name))
	}
	return v
}

// norm is the norm name on x: an RMSNorm, or the MoE's LayerNorm.
func (m *Model) norm(name string, x []float64) []float64 {
	if m.C.MoE && !m.Mistakes.RMSNorms {
		return lmckpt.LayerNorm64(x, m.get(name+".weight"), m.get(name+".bias"), m.C.Eps)
	}
	return lmckpt.RMSNorm64(x, m.get(name+".weight"), m.C.Eps)
}

// rope rotates head v at position pos of a sequence of n tokens.
func (m *Model) rope(v []float64, pos, n int) []float64 {
	c, mk := m.C, m.Mistakes
	rot := c.Rot()
	if mk.WholeHead {
		rot = len(v)
	}
	long := c.LongRope && n > c.OriginalMax && !mk.ShortOnly
	scale := 1.0
	switch {
	case mk.NoRopeScale || !c.LongRope:
	case c.MoE && long:
		scale = c.LongMScale
	case c.MoE:
		scale = c.ShortMScale
	default:
		if f := float64(c.MaxPositions) / float64(c.OriginalMax); f > 1 {
			scale = math.Sqrt(1 + math.Log(f)/math.Log(float64(c.OriginalMax)))
		}
	}
	out := append([]float64(nil), v...)
	for i := 0; i < rot/2; i++ {
		ext := 1.0
		if c.LongRope && i < len(c.Short) {
			ext = c.Short[i]
			if long {
				ext = c.Long[i]
			}
		}
		ang := float64(pos) / (ext * math.Pow(c.Theta, float64(2*i)/float64(rot)))
		cs, sn := scale*math.Cos(ang), scale*math.Sin(ang)
		out[i] = v[i]*cs - v[i+rot/2]*sn
		out[i+rot/2] = v[i+rot/2]*cs + v[i]*sn
	}
	return out
}

// attention is layer l's attention on h [T][hidden].
func (m *Model) attention(l int, h [][]float64) [][]float64 {
	c, mk := m.C, m.Mistakes
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D, T := c.HeadDim(), len(h)
	nq, nkv := c.Heads*D, c.KVHeads*D
	bias := func(name string) []float64 {
		if c.MoE && c.AttnBias {
			return m.get(p + name + ".bias")
		}
		return nil
	}
	split := func(all []float64, n int, turn bool, pos int) [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if turn {
				out[i] = m.rope(out[i], pos, T)
			}
		}
		return out
	}
	query, key, value := make([][][]float64, T), make([][][]float64, T), make([][][]float64, T)
	for t := range h {
		var q, k, v []float64
		if c.MoE {
			q = lmckpt.Linear64(h[t], m.get(p+"q_proj.weight"), bias("q_proj"))
			k = lmckpt.Linear64(h[t], m.get(p+"k_proj.weight"), bias("k_proj"))
			v = lmckpt.Linear64(h[t], m.get(p+"v_proj.weight"), bias("v_proj"))
		} else {
			qkv := lmckpt.Linear64(h[t], m.get(p+"qkv_proj.weight"), nil)
			q, k, v = qkv[:nq], qkv[nq:nq+nkv], qkv[nq+nkv:]
			if mk.KVSwapped {
				v, k = qkv[nq:nq+nkv], qkv[nq+nkv:]
			}
		}
		query[t], key[t], value[t] = split(q, c.Heads, true, t), split(k, c.KVHeads, true, t), split(v, c.KVHeads, false, t)
	}
	var sees func(t, s int) bool
	if c.Window > 0 && !mk.NoWindow {
		sees = func(t, s int) bool { return t-s < c.Window }
	}
	att := lmckpt.Attention64(query, key, value, 1/math.Sqrt(float64(D)), sees)
	out := make([][]float64, T)
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), bias("o_proj"))
	}
	return out
}

// SparseMixer is sparsemixer at inference on one token's router logits:
// the two chosen experts, in order, and their weights.
func SparseMixer(logits []float64, eps float64) (ids [2]int, weights [2]float64) {
	out := make([]bool, len(logits))
	for r := range 2 {
		best := -1
		for e, v := range logits {
			if !out[e] && (best < 0 || v > logits[best]) {
				best = e
			}
		}
		top := logits[best]
		sum := 0.0
		for e, v := range logits {
			if out[e] || (top-v)/math.Max(math.Abs(v), top) > 2*eps {
				continue
			}
			sum += math.Exp(v - top)
		}
		ids[r], weights[r] = best, 1/sum
		out[best] = true
	}
	return ids, weights
}

// route picks the MoE's two experts for one token's logits.
func (m *Model) route(logits []float64) ([2]int, [2]float64) {
	if !m.Mistakes.TopKSoftmax {
		return SparseMixer(logits, m.C.Jitter)
	}
	probs := lmckpt.Softmax64(logits)
	var ids [2]int
	var ws [2]float64
	taken := make([]bool, len(probs))
	for j := range 2 {
		best := -1
		for e, v := range probs {
			if !taken[e] && (best < 0 || v > probs[best]) {
				best = e
			}
		}
		taken[best] = true
		ids[j], ws[j] = best, probs[best]
	}
	s := ws[0] + ws[1]
	return ids, [2]float64{ws[0] / s, ws[1] / s}
}

// mlp is layer l's MLP on one token h.
func (m *Model) mlp(l int, h []float64) []float64 {
	c := m.C
	p := fmt.Sprintf("model.layers.%d.", l)
	swiglu := func(gate, up []float64, down string) []float64 {
		for i := range gate {
			gate[i] = lmckpt.SiLU64(gate[i]) * up[i]
		}
		return lmckpt.Linear64(gate, m.get(down), nil)
	}
	if !c.MoE {
		gu := lmckpt.Linear64(h, m.get(p+"mlp.gate_up_proj.weight"), nil)
		gate, up := gu[:c.Intermediate], gu[c.Intermediate:]
		if m.Mistakes.UpFirst {
			gate, up = up, gate
		}
		return swiglu(gate, up, p+"mlp.down_proj.weight")
	}
	ids, ws := m.route(lmckpt.Linear64(h, m.get(p+"block_sparse_moe.gate.weight"), nil))
	out := make([]float64, len(h))
	for j, e := range ids {
		q := fmt.Sprintf("%sblock_sparse_moe.experts.%d.", p, e)
		y := swiglu(lmckpt.Linear64(h, m.get(q+"w1.weight"), nil), lmckpt.Linear64(h, m.get(q+"w3.weight"), nil), q+"w2.weight")
		for i, v := range y {
			out[i] += ws[j] * v
		}
	}
	return out
}

// Logits runs the whole sequence as one forward (LongRoPE's choice made
// by its length) and returns the logits [T][Vocab].
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("phi3ref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = m.norm(p+"input_layernorm", x[t])
		}
		att := m.attention(l, h)
		for t := range x {
			for i, v := range att[t] {
				x[t][i] += v
			}
			for i, v := range m.mlp(l, m.norm(p+"post_attention_layernorm", x[t])) {
				x[t][i] += v
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	var hb []float64
	if c.HeadBias && !m.Mistakes.NoHeadBias {
		hb = m.get("lm_head.bias")
	}
	logits := make([][]float64, len(x))
	for t := range x {
		logits[t] = lmckpt.Linear64(m.norm("model.norm", x[t]), m.get(head), hb)
	}
	return logits
}
