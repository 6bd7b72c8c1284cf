// Package ernieref is a plain-Go float64 forward pass of
// Ernie4_5_MoeForCausalLM (Baidu's ERNIE-4.5-21B-A3B-PT and
// ERNIE-4.5-300B-A47B-PT) written from transformers'
// models/ernie4_5_moe/modular_ernie4_5_moe.py and
// configuration_ernie4_5_moe.py, and from the rotary of
// models/ernie4_5/modeling_ernie4_5.py that it imports (eager path): a
// Llama decoder (RMSNorm, grouped-query attention without biases, head_dim
// read from the config) whose rotary turns ADJACENT pairs (2j, 2j+1) of
// every query and key head, not the halves (j, j+D/2) of Llama's; dense
// SwiGLU layers mixed with sparse MoE layers
// (Ernie4_5_MoeSparseMoeBlock) placed by moe_layer_start_index,
// moe_layer_end_index and moe_layer_interval. The router takes the softmax
// of its logits, chooses the top moe_k experts by those scores plus a
// per-expert correction bias (moe_statics.e_score_correction_bias) but
// weighs them by the unbiased scores divided by max(their sum,
// moe_norm_min); optional shared experts are added for every token. It
// follows the style of pipeline/testkit/olmoeref: straight loops over one
// sequence, no caches, no padding, and no code shared with pipeline/nn or
// the architecture packages it checks.
//
// It also writes the tiny checkpoints the tests use: a config.json with
// the fields of baidu/ERNIE-4.5-21B-A3B-PT's and a float32
// model.safetensors with the exact tensor names of the release and
// deterministic pseudo-random weights, the correction bias large enough
// to change which experts win.
//
// What transformers computes in float32 whatever the model's dtype (the
// router: gate and moe_statics are kept in float32, the hidden state is
// cast up before mlp.gate, and the softmax, the biased top-k, the gather
// and the clamped division all run in float32 before the weights go back
// to the model's dtype; the rotary: cos and sin in float32, q and k cast
// up, turned and cast back) is float64 here like everything else.
package ernieref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Ernie describes an Ernie4_5_MoeForCausalLM by the fields of its
// config.json. use_bias is always false: this package refuses biases.
type Ernie struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers. Intermediate (intermediate_size) is the width of
	// the dense layers' MLP, MoEIntermediate (moe_intermediate_size) that
	// of every routed expert.
	Vocab, Hidden, Intermediate, MoEIntermediate, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads:
	// query head h reads key/value head h/(Heads/KVHeads).
	Heads, KVHeads int
	// HeadDim is head_dim, the width of every query, key and value head;
	// 0 means Hidden/Heads (transformers' fallback when config.json has
	// no head_dim). It need not be Hidden/Heads: q_proj is
	// Heads·HeadDim wide.
	HeadDim int
	// Experts and TopK are moe_num_experts and moe_k.
	Experts, TopK int
	// Shared is moe_num_shared_experts: when positive, every sparse layer
	// adds one SwiGLU MLP (mlp.shared_experts) of width
	// MoEIntermediate·Shared to the routed experts' sum.
	Shared int
	// StartIndex, EndIndex and Interval are moe_layer_start_index,
	// moe_layer_end_index and moe_layer_interval: layer i is sparse when
	// (i+1) % Interval == 0 and StartIndex <= i <= EndIndex, EndIndex -1
	// meaning Layers-1 (see Sparse).
	StartIndex, EndIndex, Interval int
	// NormMin is moe_norm_min: the chosen experts' scores are divided by
	// max(their sum, NormMin). The default is 1e-12.
	NormMin float64
	// Theta is rope_theta (transformers' default 500000); Eps is
	// rms_norm_eps, the eps of every RMSNorm of the model.
	Theta, Eps float64
	// Tied reuses model.embed_tokens.weight as the output head
	// (tie_word_embeddings, true by default and in the releases).
	Tied bool
	// VL makes it an Ernie4_5_VLMoeForConditionalGeneration (ERNIE 4.5
	// VL) in the Hub's layout and config: each sparse layer also holds
	// Experts vision experts of width VisionIntermediate
	// (mlp.experts.Experts… after the text ones) and their router
	// mlp.gate.weight_1; both routers are stored transposed [Hidden,
	// Experts]; moe_statics holds a row of correction biases a modality
	// [2, Experts]; the vision tower and resampler have tensors
	// (vision_model.*, model.resampler_model.*). The config's moe_* sizes
	// and indices are lists, one entry a modality. The text model reads
	// the text half alone: a text token never reaches the vision experts.
	VL                 bool
	VisionIntermediate int
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyErnieVL is TinyErnie as an ERNIE 4.5 VL: 8 vision experts of width
// 8 beside the text ones, and an end index past the last layer (written
// as the per-modality list [Layers+1, Layers], as the releases' run past
// it: ERNIE-4.5-VL-28B-A3B's 28 layers end at [29, 28]).
func TinyErnieVL() Ernie {
	c := TinyErnie()
	c.VL, c.VisionIntermediate, c.EndIndex, c.Seed = true, 8, c.Layers, 452
	return c
}

// TinyErnie is a small ERNIE-4.5-21B-A3B: hidden 32, 3 layers of which
// layer 0 is dense (SwiGLU of width 48) and layers 1 and 2 sparse (start
// index 1, end index -1, interval 1, as the release), grouped-query
// attention of 4 query heads on 2 key/value heads of head_dim 12 (not
// 32/4 = 8), 8 routed experts of width 16 of which 2 are chosen, 1
// shared expert (width 16), norm_min 1e-12, rope_theta 500000, eps 1e-5,
// vocabulary 96, tied embeddings.
func TinyErnie() Ernie {
	return Ernie{
		Vocab: 96, Hidden: 32, Intermediate: 48, MoEIntermediate: 16, Layers: 3,
		Heads: 4, KVHeads: 2, HeadDim: 12, Experts: 8, TopK: 2, Shared: 1,
		StartIndex: 1, EndIndex: -1, Interval: 1, NormMin: 1e-12,
		Theta: 500000, Eps: 1e-5, Tied: true, Seed: 450,
	}
}

// TinyErnieSparse is TinyErnie on the other paths: 4 layers with start
// index 0, end index 2 and interval 2, so only layer 1 is sparse (layer 3
// has (3+1) % 2 == 0 but lies past the end index; layers 0 and 2 fail the
// interval), no shared experts, the top 3 of 8 experts, rope_theta
// 10000, an untied head.
func TinyErnieSparse() Ernie {
	c := TinyErnie()
	c.Layers, c.StartIndex, c.EndIndex, c.Interval = 4, 0, 2, 2
	c.Shared, c.TopK, c.Theta, c.Tied, c.Seed = 0, 3, 10000, false, 451
	return c
}

// headDim is HeadDim, or Hidden/Heads when HeadDim is 0.
func (c Ernie) headDim() int {
	if c.HeadDim != 0 {
		return c.HeadDim
	}
	return c.Hidden / c.Heads
}

// Sparse reports whether layer i holds Ernie4_5_MoeSparseMoeBlock, as
// Ernie4_5_MoeDecoderLayer decides: (i+1) % moe_layer_interval == 0 and
// moe_layer_start_index <= i <= moe_layer_end_index, where an end index
// of -1 is read as num_hidden_layers-1 (Ernie4_5_MoeConfig replaces -1
// alone; any other negative end index leaves every layer dense).
// Otherwise the layer has a dense Ernie4_5_MoeMLP of intermediate_size.
func (c Ernie) Sparse(i int) bool {
	end := c.EndIndex
	if end == -1 {
		end = c.Layers - 1
	}
	return (i+1)%c.Interval == 0 && i >= c.StartIndex && i <= end
}

// check reports a description transformers could not build (or this
// package could not compute).
func (c Ernie) check() error {
	switch {
	case c.Heads <= 0 || (c.HeadDim == 0 && c.Hidden%c.Heads != 0):
		return fmt.Errorf("ernieref: hidden size %d is not a multiple of %d heads", c.Hidden, c.Heads)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("ernieref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.headDim() <= 0 || c.headDim()%2 != 0:
		return fmt.Errorf("ernieref: head dim %d is not a positive even number", c.headDim())
	case c.Interval <= 0:
		return fmt.Errorf("ernieref: moe_layer_interval %d", c.Interval)
	case c.TopK <= 0 || c.TopK > c.Experts:
		return fmt.Errorf("ernieref: top %d of %d experts", c.TopK, c.Experts)
	case c.Shared < 0:
		return fmt.Errorf("ernieref: %d shared experts", c.Shared)
	case c.NormMin < 0:
		return fmt.Errorf("ernieref: moe_norm_min %g", c.NormMin)
	case c.Theta <= 0:
		return fmt.Errorf("ernieref: rope_theta %g", c.Theta)
	}
	return nil
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	// Init decides the values, see fill.
	Init string
}

// Tensors lists the checkpoint tensors with the names of the Hub release
// (baidu/ERNIE-4.5-21B-A3B-PT: one gate_proj, up_proj and down_proj per
// routed expert), in the order Write draws them. A dense layer has
// mlp.{gate,up,down}_proj of width Intermediate; a sparse one the router
// mlp.gate [Experts, Hidden], the correction bias
// mlp.moe_statics.e_score_correction_bias [1, Experts] (one expert group),
// mlp.experts.E.{gate,up,down}_proj of width MoEIntermediate and, when
// Shared > 0, mlp.shared_experts.{gate,up,down}_proj of width
// MoEIntermediate·Shared. lm_head.weight only when untied.
func (c Ernie) Tensors() []Tensor {
	H, D := c.Hidden, c.headDim()
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		swiglu := func(q string, width int) {
			add(q+"gate_proj.weight", "linear", width, H)
			add(q+"up_proj.weight", "linear", width, H)
			add(q+"down_proj.weight", "linear", H, width)
		}
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*D, H)
		add("self_attn.k_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*D, H)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*D)
		add("post_attention_layernorm.weight", "norm", H)
		if !c.Sparse(l) {
			swiglu("mlp.", c.Intermediate)
			continue
		}
		if c.VL {
			add("mlp.gate.weight", "routerT", H, c.Experts)
			add("mlp.gate.weight_1", "routerT", H, c.Experts)
			add("mlp.moe_statics.e_score_correction_bias", "bias", 2, c.Experts)
		} else {
			add("mlp.gate.weight", "router", c.Experts, H)
			add("mlp.moe_statics.e_score_correction_bias", "bias", 1, c.Experts)
		}
		for e := 0; e < c.Experts; e++ {
			swiglu(fmt.Sprintf("mlp.experts.%d.", e), c.MoEIntermediate)
		}
		for e := 0; c.VL && e < c.Experts; e++ {
			swiglu(fmt.Sprintf("mlp.experts.%d.", c.Experts+e), c.VisionIntermediate)
		}
		if c.Shared > 0 {
			swiglu("mlp.shared_experts.", c.MoEIntermediate*c.Shared)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	if c.VL {
		out = append(out, Tensor{"vision_model.patch_embed.proj.weight", []int{8, 12}, "linear"},
			Tensor{"model.resampler_model.mlp.weight", []int{H, 8}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in)     (activations stay O(1))
//	embed   uniform
//	norm    1 ± 0.2                    (so every norm's weights matter)
//	router  uniform · sqrt(6/fan-in)   (logits of standard deviation about
//	                                    1.4 on a normed input: the softmax
//	                                    over 8 experts is far from flat and
//	                                    far from one-hot)
//	bias    uniform · 0.15             (±0.15 next to scores of about 1/8:
//	                                    it changes the choice for some
//	                                    tokens but not for all)
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	n, fan := 1, 1
	for i, d := range t.Shape {
		n *= d
		if i > 0 {
			fan *= d
		}
	}
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch t.Init {
		case "linear":
			v[i] = float32(u / math.Sqrt(float64(fan)))
		case "embed":
			v[i] = float32(u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "router":
			v[i] = float32(u * math.Sqrt(6/float64(fan)))
		case "routerT": // a router stored transposed [Hidden, Experts]: its fan-in is the rows
			v[i] = float32(u * math.Sqrt(6/float64(t.Shape[0])))
		case "bias":
			v[i] = float32(0.15 * u)
		default:
			panic("ernieref: unknown init " + t.Init)
		}
	}
	return v
}

// ConfigJSON returns the config.json, its fields named as in
// baidu/ERNIE-4.5-21B-A3B-PT's (the moe_* fields, head_dim written out,
// top-level rope_theta, use_bias false, silu, bos 1, eos 2, pad 0) but
// max_position_embeddings 256 and float32; fields of the release that
// Ernie4_5_MoeConfig does not read are left out. moe_layer_end_index is
// written as given (-1 stays -1; Ernie4_5_MoeConfig resolves it).
func (c Ernie) ConfigJSON() map[string]any {
	j := c.configJSON()
	if c.VL {
		j["architectures"] = []string{"Ernie4_5_VLMoeForConditionalGeneration"}
		j["model_type"] = "ernie4_5_moe_vl"
		j["moe_num_experts"] = []int{c.Experts, c.Experts}
		j["moe_intermediate_size"] = []int{c.MoEIntermediate, c.VisionIntermediate}
		j["moe_layer_start_index"] = []int{c.StartIndex, c.StartIndex}
		j["moe_layer_end_index"] = []int{c.EndIndex + 1, c.EndIndex}
		j["vision_config"] = map[string]any{"depth": 1, "hidden_size": 12, "num_heads": 2, "patch_size": 2}
	}
	return j
}

func (c Ernie) configJSON() map[string]any {
	return map[string]any{
		"architectures":           []string{"Ernie4_5_MoeForCausalLM"},
		"model_type":              "ernie4_5_moe",
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.headDim(),
		"max_position_embeddings": 256,
		"rope_theta":              c.Theta,
		"rms_norm_eps":            c.Eps,
		"tie_word_embeddings":     c.Tied,
		"use_bias":                false,
		"moe_num_experts":         c.Experts,
		"moe_k":                   c.TopK,
		"moe_intermediate_size":   c.MoEIntermediate,
		"moe_num_shared_experts":  c.Shared,
		"moe_layer_start_index":   c.StartIndex,
		"moe_layer_end_index":     c.EndIndex,
		"moe_layer_interval":      c.Interval,
		"moe_norm_min":            c.NormMin,
		"hidden_act":              "silu",
		"bos_token_id":            1,
		"eos_token_id":            2,
		"pad_token_id":            0,
		"torch_dtype":             "float32",
	}
}

// Write writes dir/config.json, dir/generation_config.json (bos 1, eos 2,
// pad 0, as config.json says) and dir/model.safetensors in float32, with
// values drawn from lmckpt.NewRand(Seed) in the order of Tensors.
func (c Ernie) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C Ernie
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64

	// moeInput, when set, sees each sparse block's input (layer, h); the
	// package's tests read the routing of real activations through it.
	moeInput func(layer int, h []float64)
	// Mistakes switches on mistakes the tests (this package's and the
	// model's) must tell apart; the zero value is none.
	Mistakes Mistakes
}

// Mistakes are deliberate departures from Ernie 4.5, one switch each:
// HalfRotary turns the pairs (j, j+D/2) (Llama's rotate_half) instead of
// the adjacent (2j, 2j+1); BiasedWeights weighs the chosen experts by
// their biased scores; UnbiasedChoice chooses them without the correction
// bias; NoRenorm keeps the chosen scores as they are; NoShared leaves the
// shared experts out.
type Mistakes struct {
	HalfRotary, BiasedWeights, UnbiasedChoice, NoRenorm, NoShared bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c Ernie) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "ernieref"}
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
		panic(fmt.Sprintf("ernieref: checkpoint has no tensor %q", name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Rotary embedding

// RopeFreqs returns the inverse frequencies [HeadDim/2],
// rope_theta^(-2i/HeadDim) (default rope, attention factor 1), over the
// whole head.
func (c Ernie) RopeFreqs() []float64 {
	d := c.headDim()
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Theta, float64(2*i)/float64(d))
	}
	return inv
}

// rotatePairs is Ernie 4.5's apply_rotary_pos_emb on one head x
// [2·len(inv)] at position pos. transformers builds cos and sin of
// cat(freqs, freqs), keeps their first half and repeat-interleaves it, so
// entries 2j and 2j+1 both see angle pos·inv_j; its rotate_half sends
// (x[2j], x[2j+1]) to (-x[2j+1], x[2j]). Together: the adjacent pair
// turns as the complex number x[2j] + i·x[2j+1] times e^{i·pos·inv_j}.
func rotatePairs(x []float64, pos int, inv []float64) []float64 {
	out := make([]float64, len(x))
	for j, f := range inv {
		cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[2*j], x[2*j+1]
		out[2*j] = a*cs - b*sn
		out[2*j+1] = b*cs + a*sn
	}
	return out
}

// rotateHalf is the Llama rotary (entry j turns with entry j+D/2), which
// Ernie 4.5 does not use: only the HalfRotary mistake reaches it.
func rotateHalf(x []float64, pos int, inv []float64) []float64 {
	half := len(inv)
	out := make([]float64, len(x))
	for j, f := range inv {
		cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[j], x[half+j]
		out[j] = a*cs - b*sn
		out[half+j] = b*cs + a*sn
	}
	return out
}

// ----------------------------------------------------------------------------
// Router and MoE block

// Route is Ernie4_5_MoeSparseMoeBlock's routing of one token: logits are
// its router logits (mlp.gate(h), [Experts]) and bias the layer's
// e_score_correction_bias ([Experts]; nil means zeros). The scores are
// the softmax of all the logits; the TopK experts are those with the
// largest score + bias (the lower index on ties), in decreasing order of
// score + bias; their weights are their unbiased scores divided by
// max(the sum of those scores, NormMin).
func (c Ernie) Route(logits, bias []float64) (ids []int, weights []float64) {
	return c.route(logits, bias, false, false)
}

// route is Route with two of the tests' mistakes: weighing by the biased
// scores, and not dividing by the sum.
func (c Ernie) route(logits, bias []float64, biasedWeights, noRenorm bool) (ids []int, weights []float64) {
	scores := lmckpt.Softmax64(logits)
	biased := make([]float64, len(scores))
	for e, s := range scores {
		biased[e] = s
		if bias != nil {
			biased[e] += bias[e]
		}
	}
	taken := make([]bool, len(scores))
	sum := 0.0
	for range c.TopK {
		best := -1
		for e, s := range biased {
			if !taken[e] && (best < 0 || s > biased[best]) {
				best = e
			}
		}
		taken[best] = true
		ids = append(ids, best)
		w := scores[best]
		if biasedWeights {
			w = biased[best]
		}
		weights = append(weights, w)
		sum += w
	}
	if !noRenorm {
		div := math.Max(sum, c.NormMin)
		for j := range weights {
			weights[j] /= div
		}
	}
	return ids, weights
}

// routeLayer is Route on the router logits and correction bias of layer
// l for input h, with the model's mistakes.
func (m *Model) routeLayer(l int, h []float64) ([]int, []float64) {
	p := fmt.Sprintf("model.layers.%d.mlp.", l)
	var logits []float64
	if m.C.VL { // the text router, stored [Hidden, Experts]
		g := m.get(p + "gate.weight")
		logits = make([]float64, m.C.Experts)
		for i, x := range h {
			for e := range logits {
				logits[e] += x * g[i*m.C.Experts+e]
			}
		}
	} else {
		logits = lmckpt.Linear64(h, m.get(p+"gate.weight"), nil)
	}
	var bias []float64
	if !m.Mistakes.UnbiasedChoice {
		bias = m.get(p + "moe_statics.e_score_correction_bias")[:m.C.Experts] // the text row
	}
	return m.C.route(logits, bias, m.Mistakes.BiasedWeights, m.Mistakes.NoRenorm)
}

// Experts returns the ids of the experts that the sparse block of layer
// l chooses for its input h (the post_attention_layernorm output,
// [Hidden]) and their weights, as Route gives them from the layer's
// mlp.gate.weight and correction bias.
func (m *Model) Experts(l int, h []float64) (ids []int, weights []float64) {
	return m.routeLayer(l, h)
}

// swiglu is Ernie4_5_MoeMLP under prefix q (…mlp., …mlp.experts.E.,
// …mlp.shared_experts.) on h: down_proj(silu(gate_proj(h)) · up_proj(h)),
// no biases.
func (m *Model) swiglu(q string, h []float64) []float64 {
	g := lmckpt.Linear64(h, m.get(q+"gate_proj.weight"), nil)
	u := lmckpt.Linear64(h, m.get(q+"up_proj.weight"), nil)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return lmckpt.Linear64(g, m.get(q+"down_proj.weight"), nil)
}

// moe is Ernie4_5_MoeSparseMoeBlock on one token h:
// Σ_j w_j expert_{e_j}(h) over the experts Route picks, plus
// shared_experts(h) when the model has shared experts.
func (m *Model) moe(l int, h []float64) []float64 {
	p := fmt.Sprintf("model.layers.%d.mlp.", l)
	ids, ws := m.routeLayer(l, h)
	out := make([]float64, len(h))
	for j, e := range ids {
		y := m.swiglu(fmt.Sprintf("%sexperts.%d.", p, e), h)
		for i := range out {
			out[i] += ws[j] * y[i]
		}
	}
	if m.C.Shared > 0 && !m.Mistakes.NoShared {
		y := m.swiglu(p+"shared_experts.", h)
		for i := range out {
			out[i] += y[i]
		}
	}
	return out
}

// ----------------------------------------------------------------------------
// Attention

// project is Ernie4_5_MoeAttention up to the rotary on one input h (the
// input_layernorm output) at position pos: q_proj, k_proj and v_proj (no
// biases) cut into heads of HeadDim, q and k turned by rotatePairs. It
// returns the query heads [Heads][HeadDim] and the key and value heads
// [KVHeads][HeadDim].
func (m *Model) project(p string, h []float64, pos int, inv []float64) (q, k, v [][]float64) {
	c := m.C
	D := c.headDim()
	rot := rotatePairs
	if m.Mistakes.HalfRotary {
		rot = rotateHalf
	}
	heads := func(name string, n int, turn bool) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+"self_attn."+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
			if turn {
				out[i] = rot(out[i], pos, inv)
			}
		}
		return out
	}
	return heads("q_proj", c.Heads, true), heads("k_proj", c.KVHeads, true), heads("v_proj", c.KVHeads, false)
}

// attention is Ernie4_5_MoeAttention (input_layernorm included) on the
// residual stream x [T][Hidden] at positions start, start+1, …: it
// returns every position's per-head outputs concatenated,
// [T][Heads·HeadDim], before o_proj. Scale HeadDim^-0.5, causal, query
// head h reading key/value head h/(Heads/KVHeads) (repeat_kv).
func (m *Model) attention(p string, x [][]float64, start int) [][]float64 {
	c := m.C
	D := c.headDim()
	inv := c.RopeFreqs()
	scale := 1 / math.Sqrt(float64(D))
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		h := lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		query[t], key[t], value[t] = m.project(p, h, start+t, inv)
	}
	return lmckpt.Attention64(query, key, value, scale, nil)
}

// ----------------------------------------------------------------------------
// Decoder

// Logits runs the whole sequence (positions 0..len-1, causal attention)
// and returns the logits [len(tokens)][Vocab] after every token.
func (m *Model) Logits(tokens []int) [][]float64 { return m.logits(tokens, 0) }

// logits is Logits with the tokens at positions start, start+1, …: the
// embedding; per layer x += o_proj(attention(x)), then
// x += mlp(post_attention_layernorm(x)), mlp being the sparse block or
// the dense SwiGLU as Sparse says; model.norm; the head (lm_head, or the
// embedding when tied).
func (m *Model) logits(tokens []int, start int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("ernieref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		att := m.attention(p, x, start)
		for t := range x {
			o := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			for i := range o {
				x[t][i] += o[i]
			}
			h := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			var y []float64
			if c.Sparse(l) {
				if m.moeInput != nil {
					m.moeInput(l, h)
				}
				y = m.moe(l, h)
			} else {
				y = m.swiglu(p+"mlp.", h)
			}
			for i := range y {
				x[t][i] += y[i]
			}
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
