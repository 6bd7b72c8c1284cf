// Package afmoeref is a plain-Go float64 forward pass of Arcee's AFMoE
// (AfmoeForCausalLM, the Trinity models), written from transformers'
// models/afmoe/modular_afmoe.py apart from pipeline/afmoe, plus a writer
// of tiny checkpoints under the releases' tensor names.
//
// The model, as this package reads transformers, on one unpadded sequence
// of T tokens:
//
//	x = embed_tokens[token] (· sqrt(hidden) with mup_enabled)
//	per layer:  x += norm(attention(norm(x)·input_layernorm))·post_attention_layernorm
//	            x += norm(mlp(norm(x)·pre_mlp_layernorm))·post_mlp_layernorm
//	logits = lm_head(norm(x)·model.norm)
//
// where
//
//   - norm is an RMSNorm, eps rms_norm_eps.
//   - attention: q_proj, k_proj, v_proj (no biases) into heads of
//     head_dim D; each query and key head RMSNormed by q_norm or k_norm
//     [D]; on the sliding-window layers only (layer_types) both turn by
//     rotate_half at frequencies theta^(−2i/D); causal softmax of
//     q·k/sqrt(D), over the last sliding_window keys on those layers,
//     grouped-query heads; the heads' output times sigmoid(gate_proj(h)),
//     then o_proj.
//   - mlp: on the first num_dense_layers layers down(silu(gate·h) ·
//     up·h) of intermediate_size; on the others the experts: scores
//     s = sigmoid(router.gate·h), the top num_experts_per_tok by s +
//     expert_bias, weighed by s_j/(Σ s + 1e-20)·route_scale, each expert
//     a SwiGLU of moe_intermediate_size, plus the shared MLP
//     (shared_experts, num_shared_experts·moe_intermediate_size wide).
package afmoeref

import (
	"fmt"
	"math"
	"sort"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// AFMoE describes a tiny AFMoE.
type AFMoE struct {
	Vocab, Hidden, Layers, Heads, KVHeads, HeadDim int
	Intermediate, MoEIntermediate                  int
	Experts, TopK, Shared, DenseLayers             int
	RouteScale                                     float64
	Eps, Theta                                     float64
	// Window is sliding_window; GlobalEvery is global_attn_every_n_layers
	// (LayerTypes, when set, is written instead and wins).
	Window, GlobalEvery int
	LayerTypes          []string
	Mup, Tied           bool
	MaxPositions        int
	// Stacked writes each layer's experts as transformers v5 stacks them
	// (mlp.experts.gate_up_proj and down_proj).
	Stacked bool
	Seed    uint64
}

// Tiny is a small AFMoE: 4 layers (three sliding-window layers of 5
// positions, then one full-attention layer, as global_attn_every_n_layers
// 4 places them), the first dense; 8 experts of width 16 (top 3, route
// scale 2.5) plus one shared; GQA 4 over 2 with head_dim 12 (not
// hidden/heads), mup scaling.
func Tiny() AFMoE {
	return AFMoE{Vocab: 96, Hidden: 32, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 12, Intermediate: 48, MoEIntermediate: 16,
		Experts: 8, TopK: 3, Shared: 1, DenseLayers: 1, RouteScale: 2.5, Eps: 1e-5, Theta: 10000,
		Window: 5, GlobalEvery: 4, Mup: true, MaxPositions: 128, Seed: 11}
}

// Kinds are the layers' attention kinds.
func (c AFMoE) Kinds() []string {
	if c.LayerTypes != nil {
		return c.LayerTypes
	}
	out := make([]string, c.Layers)
	for i := range out {
		out[i] = "full_attention"
		if (i+1)%c.GlobalEvery != 0 {
			out[i] = "sliding_attention"
		}
	}
	return out
}

func (c AFMoE) check() error {
	if c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 || c.TopK > c.Experts || len(c.Kinds()) != c.Layers {
		return fmt.Errorf("afmoeref: heads %d, kv heads %d, head_dim %d, top %d of %d experts or %d layer types for %d layers do not fit",
			c.Heads, c.KVHeads, c.HeadDim, c.TopK, c.Experts, len(c.Kinds()), c.Layers)
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
// input_layernorm, self_attn.{q,k,v}_proj, q_norm, k_norm, gate_proj and
// o_proj, post_attention_layernorm, pre_mlp_layernorm, then the dense
// mlp.{gate,up,down}_proj or mlp.router.gate.weight [E, H],
// mlp.expert_bias [E], each expert's mlp.experts.E.{gate,up,down}_proj
// and mlp.shared_experts.{gate,up,down}_proj; post_mlp_layernorm;
// model.norm; lm_head.weight unless Tied.
func (c AFMoE) Tensors() []Tensor {
	H, D := c.Hidden, c.HeadDim
	q, kv := c.Heads*D, c.KVHeads*D
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		mlp := func(prefix string, n int) {
			add(prefix+"gate_proj.weight", "linear", n, H)
			add(prefix+"up_proj.weight", "linear", n, H)
			add(prefix+"down_proj.weight", "linear", H, n)
		}
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "qk", q, H)
		add("self_attn.k_proj.weight", "qk", kv, H)
		add("self_attn.v_proj.weight", "linear", kv, H)
		add("self_attn.q_norm.weight", "norm", D)
		add("self_attn.k_norm.weight", "norm", D)
		add("self_attn.gate_proj.weight", "gate", q, H)
		add("self_attn.o_proj.weight", "linear", H, q)
		add("post_attention_layernorm.weight", "norm", H)
		add("pre_mlp_layernorm.weight", "norm", H)
		if l < c.DenseLayers {
			mlp("mlp.", c.Intermediate)
		} else {
			add("mlp.router.gate.weight", "router", c.Experts, H)
			add("mlp.expert_bias", "ebias", c.Experts)
			for e := range c.Experts {
				mlp(fmt.Sprintf("mlp.experts.%d.", e), c.MoEIntermediate)
			}
			if c.Shared > 0 {
				mlp("mlp.shared_experts.", c.Shared*c.MoEIntermediate)
			}
		}
		add("post_mlp_layernorm.weight", "norm", H)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor, u uniform in [-1, 1)
// and fan-in the product of the dimensions after the first:
//
//	linear  u / sqrt(fan-in)
//	qk      2u / sqrt(fan-in)   (scores that are not uniform)
//	gate    3u / sqrt(fan-in)   (sigmoids spread over (0, 1))
//	embed   u
//	norm    1 + 0.2u
//	router  3u / sqrt(fan-in)
//	ebias   0.15u               (enough to change some choices)
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	return lmckpt.Fill(r, t.Shape, func(u float64, fan int) float64 {
		var x float64
		switch t.Init {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "gate", "router":
			x = 3 * u / math.Sqrt(float64(fan))
		case "embed":
			x = u
		case "norm":
			x = 1 + 0.2*u
		case "ebias":
			x = 0.15 * u
		default:
			panic("afmoeref: unknown init " + t.Init)
		}
		return x
	})
}

// ConfigJSON returns the config.json: AfmoeForCausalLM (model_type
// afmoe), the sizes, head_dim, the MoE fields, sliding_window and
// global_attn_every_n_layers (or layer_types), mup_enabled,
// rms_norm_eps, rope_theta, tie_word_embeddings; bos 1, eos 7, float32.
func (c AFMoE) ConfigJSON() map[string]any {
	cfg := map[string]any{
		"architectures":              []string{"AfmoeForCausalLM"},
		"model_type":                 "afmoe",
		"vocab_size":                 c.Vocab,
		"hidden_size":                c.Hidden,
		"intermediate_size":          c.Intermediate,
		"moe_intermediate_size":      c.MoEIntermediate,
		"num_hidden_layers":          c.Layers,
		"num_dense_layers":           c.DenseLayers,
		"num_attention_heads":        c.Heads,
		"num_key_value_heads":        c.KVHeads,
		"head_dim":                   c.HeadDim,
		"num_experts":                c.Experts,
		"num_experts_per_tok":        c.TopK,
		"num_shared_experts":         c.Shared,
		"route_scale":                c.RouteScale,
		"global_attn_every_n_layers": c.GlobalEvery,
		"sliding_window":             c.Window,
		"mup_enabled":                c.Mup,
		"max_position_embeddings":    c.MaxPositions,
		"rms_norm_eps":               c.Eps,
		"rope_theta":                 c.Theta,
		"tie_word_embeddings":        c.Tied,
		"hidden_act":                 "silu",
		"bos_token_id":               1,
		"eos_token_id":               7,
		"torch_dtype":                "float32",
	}
	if c.LayerTypes != nil {
		cfg["layer_types"] = c.LayerTypes
	}
	return cfg
}

// Write writes dir/config.json, dir/generation_config.json (bos 1, eos 7)
// and dir/model.safetensors in float32, values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors; with Stacked each MoE
// layer's experts are written as mlp.experts.gate_up_proj [E, 2I, H]
// (each expert's gate rows, then its up rows) and mlp.experts.down_proj
// [E, H, I], the same values.
func (c AFMoE) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	if c.Stacked {
		for l := c.DenseLayers; l < c.Layers; l++ {
			p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
			ts = lmckpt.StackExperts(ts, p, p, lm.QwenExperts, c.Experts, c.MoEIntermediate, c.Hidden)
		}
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 7}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C        AFMoE
	W        map[string][]float64
	Mistakes Mistakes
}

// Mistakes are deliberate departures from AFMoE, one switch each, which a
// comparison against this package must detect:
//
//   - RopeEverywhere turns the full-attention layers too.
//   - NormAfterRope norms queries and keys after the rotary embedding.
//   - NoGate leaves out the attention's sigmoid gate.
//   - NoPostNorms joins each sublayer's output to the residual un-normed
//     (Llama's pre-norm layer, pre_mlp_layernorm as its second norm).
//   - BiasedWeights weighs the experts by their biased scores.
//   - SoftmaxScores scores the experts by a softmax of the logits.
//   - NoRouteScale leaves out route_scale.
//   - NoShared leaves out the shared MLP.
//   - NoMup leaves the embeddings unscaled.
//   - NoWindow attends to every earlier key on the sliding layers.
type Mistakes struct {
	RopeEverywhere, NormAfterRope, NoGate, NoPostNorms, BiasedWeights, SoftmaxScores, NoRouteScale, NoShared, NoMup, NoWindow bool
}

// Load reads a checkpoint written by Write as float64, checking that
// every tensor of Tensors is there (or its stack) with its size.
func (c AFMoE) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	for l := c.DenseLayers; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
		lmckpt.Unstack(w, p, p, lm.QwenExperts, c.Experts, c.MoEIntermediate, c.Hidden)
	}
	chk := lmckpt.Weights64{M: w, Kit: "afmoeref"}
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
		panic(fmt.Sprintf("afmoeref: checkpoint has no tensor %q", name))
	}
	return v
}

func (m *Model) norm(name string, x []float64) []float64 {
	return lmckpt.RMSNorm64(x, m.get(name), m.C.Eps)
}

// rope rotates head v at position pos by rotate_half.
func (m *Model) rope(v []float64, pos int) []float64 {
	D := len(v)
	out := append([]float64(nil), v...)
	for i := 0; i < D/2; i++ {
		ang := float64(pos) / math.Pow(m.C.Theta, float64(2*i)/float64(D))
		cs, sn := math.Cos(ang), math.Sin(ang)
		out[i] = v[i]*cs - v[i+D/2]*sn
		out[i+D/2] = v[i+D/2]*cs + v[i]*sn
	}
	return out
}

// attention is layer l's attention on h [T][hidden].
func (m *Model) attention(l int, h [][]float64) [][]float64 {
	c, mk := m.C, m.Mistakes
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	D, T := c.HeadDim, len(h)
	sliding := c.Kinds()[l] == "sliding_attention"
	turns := sliding || mk.RopeEverywhere
	heads := func(all []float64, n int, normName string, pos int) [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			v := all[i*D : (i+1)*D]
			if normName != "" && !mk.NormAfterRope {
				v = m.norm(p+normName, v)
			}
			if normName != "" && turns {
				v = m.rope(v, pos)
			}
			if normName != "" && mk.NormAfterRope {
				v = m.norm(p+normName, v)
			}
			out[i] = v
		}
		return out
	}
	query, key, value := make([][][]float64, T), make([][][]float64, T), make([][][]float64, T)
	for t := range h {
		query[t] = heads(lmckpt.Linear64(h[t], m.get(p+"q_proj.weight"), nil), c.Heads, "q_norm.weight", t)
		key[t] = heads(lmckpt.Linear64(h[t], m.get(p+"k_proj.weight"), nil), c.KVHeads, "k_norm.weight", t)
		value[t] = heads(lmckpt.Linear64(h[t], m.get(p+"v_proj.weight"), nil), c.KVHeads, "", t)
	}
	var sees func(t, s int) bool
	if sliding && !mk.NoWindow {
		sees = func(t, s int) bool { return t-s < c.Window }
	}
	att := lmckpt.Attention64(query, key, value, 1/math.Sqrt(float64(D)), sees)
	out := make([][]float64, T)
	for t := range att {
		if !mk.NoGate {
			g := lmckpt.Linear64(h[t], m.get(p+"gate_proj.weight"), nil)
			for i := range att[t] {
				att[t][i] *= 1 / (1 + math.Exp(-g[i]))
			}
		}
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), nil)
	}
	return out
}

func (m *Model) swiglu(prefix string, h []float64) []float64 {
	gate := lmckpt.Linear64(h, m.get(prefix+"gate_proj.weight"), nil)
	up := lmckpt.Linear64(h, m.get(prefix+"up_proj.weight"), nil)
	for i := range gate {
		gate[i] = lmckpt.SiLU64(gate[i]) * up[i]
	}
	return lmckpt.Linear64(gate, m.get(prefix+"down_proj.weight"), nil)
}

// pick is AfmoeTokenChoiceRouter after its scores: the top k experts by
// score plus bias, best first, weighed by their scores (with biased,
// the biased ones) over their sum plus 1e-20, times scale.
func pick(scores, bias []float64, k int, scale float64, biased bool) (ids []int, weights []float64) {
	order := make([]int, len(scores))
	for e := range order {
		order[e] = e
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]]+bias[order[a]] > scores[order[b]]+bias[order[b]] })
	ids = order[:k]
	sum := 0.0
	for _, e := range ids {
		w := scores[e]
		if biased {
			w += bias[e]
		}
		weights = append(weights, w)
		sum += w
	}
	for j := range weights {
		weights[j] = weights[j] / (sum + 1e-20) * scale
	}
	return ids, weights
}

// mlp is layer l's MLP on one token h.
func (m *Model) mlp(l int, h []float64) []float64 {
	c, mk := m.C, m.Mistakes
	p := fmt.Sprintf("model.layers.%d.mlp.", l)
	if l < c.DenseLayers {
		return m.swiglu(p, h)
	}
	logits := lmckpt.Linear64(h, m.get(p+"router.gate.weight"), nil)
	scale := c.RouteScale
	if mk.NoRouteScale {
		scale = 1
	}
	scores := make([]float64, len(logits))
	if mk.SoftmaxScores {
		scores = lmckpt.Softmax64(logits)
	} else {
		for e, v := range logits {
			scores[e] = 1 / (1 + math.Exp(-v))
		}
	}
	ids, ws := pick(scores, m.get(p+"expert_bias"), c.TopK, scale, mk.BiasedWeights)
	out := make([]float64, len(h))
	for j, e := range ids {
		for i, v := range m.swiglu(fmt.Sprintf("%sexperts.%d.", p, e), h) {
			out[i] += ws[j] * v
		}
	}
	if c.Shared > 0 && !mk.NoShared {
		for i, v := range m.swiglu(p+"shared_experts.", h) {
			out[i] += v
		}
	}
	return out
}

// Logits runs the whole sequence and returns the logits [T][Vocab].
func (m *Model) Logits(tokens []int) [][]float64 {
	c, mk := m.C, m.Mistakes
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	scale := 1.0
	if c.Mup && !mk.NoMup {
		scale = math.Sqrt(float64(H))
	}
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("afmoeref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = make([]float64, H)
		for i, v := range emb[id*H : (id+1)*H] {
			x[t][i] = v * scale
		}
	}
	post := func(name string, v []float64) []float64 {
		if mk.NoPostNorms {
			return v
		}
		return m.norm(name, v)
	}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = m.norm(p+"input_layernorm.weight", x[t])
		}
		att := m.attention(l, h)
		for t := range x {
			for i, v := range post(p+"post_attention_layernorm.weight", att[t]) {
				x[t][i] += v
			}
			for i, v := range post(p+"post_mlp_layernorm.weight", m.mlp(l, m.norm(p+"pre_mlp_layernorm.weight", x[t]))) {
				x[t][i] += v
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "model.embed_tokens.weight"
	}
	logits := make([][]float64, len(x))
	for t := range x {
		logits[t] = lmckpt.Linear64(m.norm("model.norm.weight", x[t]), m.get(head), nil)
	}
	return logits
}
