// Package lmckpt writes small and benchmark-sized checkpoints for tests and
// benchmarks: a real config.json for one of the supported architectures and
// a model.safetensors with exact Hugging Face tensor names and deterministic
// pseudo-random weights. Nothing here is a trained model.
package lmckpt

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tputool/tputool/loader/safetensors"
)

// Config describes a model by the features that distinguish the supported
// architectures (pipeline/testkit/lmref runs the same description in
// float64).
type Config struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim             int
	Eps                                 float64
	// Gemma selects Gemma 3: (1+w) norms, sandwich norms, tanh-GELU MLP,
	// embeddings scaled by sqrt(Hidden), q/k norms.
	Gemma bool
	// QKVBias adds q/k/v projection biases (Qwen2); OBias an o_proj bias
	// (Seed-OSS's attention_out_bias).
	QKVBias, OBias bool
	// MLPBias adds gate_proj, up_proj and down_proj biases (with QKVBias
	// and OBias: ERNIE 4.5's use_bias).
	MLPBias bool
	// RopePairs turns adjacent pairs of each head's dims, the whole head
	// (ERNIE 4.5's dense rotary).
	RopePairs bool
	// BitNet selects BitNet's layer (BitNetForCausalLM): Llama's with
	// self_attn.attn_sub_norm before o_proj and mlp.ffn_sub_norm before
	// down_proj, relu² as the MLP's activation. BitNetQuant has lmref
	// read a BitNet-quantized copy (WriteBitNetCopy, of a BitNet or a
	// Llama): the projections unpacked, their inputs rounded to int8 per
	// token, with BitNetDivide set as the copy's linear_class says (true:
	// bitlinear).
	BitNet, BitNetQuant, BitNetDivide bool
	// BitNetFloatActs is a reference's mistake for the tests: a BitNet
	// whose projections' inputs stay float.
	BitNetFloatActs bool
	// QKNorm applies per-head RMSNorm to q and k (Qwen3; always on for Gemma).
	QKNorm bool
	// Tied reuses the embedding matrix as the output head.
	Tied bool
	// RopeTheta is each layer's RoPE base (default RoPE, full head dim).
	RopeTheta []float64
	// Window is each layer's sliding window (0: full causal attention).
	Window []int
	// Gemma1 (with Gemma) selects Gemma 1 (GemmaForCausalLM): Llama's
	// two norms a layer (input_layernorm, post_attention_layernorm before
	// the MLP) with Gemma's (1+w) scale, no q/k norms, no soft-capping.
	Gemma1 bool
	// Gemma2 (with Gemma) selects Gemma 2: Gemma 3's layer without the
	// q/k norms, one rope_theta for every layer (the RopeTheta entries
	// must be equal: config.json holds one).
	Gemma2 bool
	// Olmo2 selects OLMo 2: no norm before the attention or the MLP, their
	// outputs normed (post_attention_layernorm, post_feedforward_layernorm)
	// before the residual, q_norm and k_norm over the whole q and k
	// projections (heads·head_dim wide), before the rotary; with QKNorm,
	// per head instead (EXAONE 4.0).
	Olmo2 bool
	// RopeLinear > 0 writes rope_scaling linear with that factor: OLMo 3
	// (Arch Olmo3ForCausalLM, Olmo2 set) scales its full-attention layers'
	// positions by it and leaves its sliding layers' unscaled.
	RopeLinear float64
	// NoRope[l] leaves layer l's queries and keys unrotated (SmolLM3's
	// NoPE layers, written as no_rope_layers); nil rotates every layer.
	NoRope []bool
	// Glm selects GLM's layer (GlmForCausalLM): the rotary over the
	// first half of each head turning adjacent pairs, the MLP's gate and
	// up in one mlp.gate_up_proj [2·Intermediate, Hidden], gate first;
	// with Glm4, GLM-4-0414's (Glm4ForCausalLM) four norms:
	// input_layernorm and post_self_attn_layernorm around the
	// attention, post_attention_layernorm and post_mlp_layernorm around
	// the MLP. QKVBias is attention_bias.
	Glm, Glm4 bool
	// Cohere selects Cohere's layer (CohereForCausalLM; with windows,
	// Cohere2ForCausalLM, whose other layers must be NoRope): one
	// input_layernorm, a LayerNorm without bias, feeding the attention
	// and the MLP side by side, the rotary over adjacent pairs of the
	// whole head, the logits multiplied by LogitScale. QKVBias is
	// attention_bias (every projection's, o_proj's too).
	Cohere     bool
	LogitScale float64
	// Ungated makes the MLP down_proj(relu(up_proj(x))²), with no
	// gate_proj (ArceeForCausalLM).
	Ungated bool
	// Phi selects Phi's layer (PhiForCausalLM): one input_layernorm, a
	// LayerNorm with a bias, feeding the attention and the MLP side by
	// side; biases on every projection and the head; self_attn.dense, an
	// ungated mlp.fc1/fc2 with gelu_new, model.final_layernorm; the rotary
	// over the first PartialRotary of each head (halves).
	Phi           bool
	PartialRotary float64
	// Starcoder2 selects StarCoder2's layer (Starcoder2ForCausalLM):
	// Llama's with LayerNorms that have a bias, biases on every projection,
	// an ungated mlp.c_fc/c_proj with the tanh GELU, Window[0] on every
	// layer.
	Starcoder2 bool
	// Nemotron selects Nemotron's layer (NemotronForCausalLM): StarCoder2's
	// sequence of norms, but LayerNorm1P ((1 + w), with a bias), no
	// projection biases, an ungated relu² up_proj/down_proj, the rotary
	// over the first PartialRotary of each head.
	Nemotron bool
	// StableLM selects StableLM's layer (StableLmForCausalLM): biased
	// LayerNorms, q/k/v biases when QKVBias, a gated SwiGLU MLP without
	// biases, the rotary over the first PartialRotary of each head; with
	// StableLMParallel, use_parallel_residual (one norm, both sublayers
	// side by side).
	StableLM, StableLMParallel bool
	// Olmo1 selects OLMo 1's layer (OlmoForCausalLM): StableLM's
	// sequence with LayerNorms that have no parameters, q, k and v
	// clamped to ±ClipQKV when it is not 0, the rotary over the whole head.
	Olmo1   bool
	ClipQKV float64
	// Apertus selects Apertus's layer (ApertusForCausalLM, with QKNorm):
	// attention_layernorm and feedforward_layernorm, and an ungated MLP
	// whose xIELU reads each layer's mlp.act_fn.alpha_p, alpha_n [1],
	// beta and eps [].
	Apertus bool
	// Yarn, when not nil, scales every layer's rotary by YaRN (written as
	// rope_parameters rope_type yarn, with mscale and mscale_all_dim 1).
	Yarn *Yarn
	// Llama4Beta > 0 (Ministral 3's llama_4_scaling_beta, with Yarn)
	// multiplies every layer's queries, after the rotary, by
	// 1 + Llama4Beta·log(1 + floor(position / Yarn.Orig)).
	Llama4Beta float64
	// QueryScale multiplies q·k (0: 1/sqrt(HeadDim)).
	QueryScale float64
	// AttnSoftcap and FinalSoftcap are Gemma's soft-capping values (0: off).
	AttnSoftcap, FinalSoftcap float64
	// HunYuan (with QKNorm) selects HunYuan's layer
	// (HunYuanDenseV1ForCausalLM): the per-head q/k RMSNorms after the
	// rotary, self_attn.query_layernorm and self_attn.key_layernorm; with
	// Experts, HunYuanMoEV1ForCausalLM's sparse block instead of
	// Mixtral's: the router mlp.gate.wg.weight, experts
	// mlp.experts.E.{gate,up,down}_proj.weight and an unrouted
	// mlp.shared_mlp of width Intermediate.
	HunYuan bool
	// RopeAlpha > 0 writes rope_scaling {"type": "dynamic", "alpha":
	// RopeAlpha}: HunYuan's rotary base theta · alpha^(d/(d−2)).
	RopeAlpha float64
	// Experts > 0 replaces every layer's MLP by Mixtral's sparse block
	// (MixtralForCausalLM): the router block_sparse_moe.gate.weight
	// [Experts, Hidden] and Experts SwiGLU experts of width Intermediate,
	// block_sparse_moe.experts.E.{w1,w3,w2}.weight (gate, up, down), of
	// which each token takes the TopK most probable, renormalized.
	Experts, TopK int
	// SmallThinker (with Experts) selects SmallThinker's sparse block
	// (SmallThinkerForCausalLM) instead of Mixtral's: the router
	// block_sparse_moe.primary_router.weight reads the layer's input (the
	// residual before input_layernorm), ReGLU experts
	// block_sparse_moe.experts.E.{gate,up,down}.weight; the TopK largest
	// logits weighed by their softmax, or with SmallThinkerSigmoid by
	// their sigmoids over the sum.
	SmallThinker, SmallThinkerSigmoid bool
}

// Yarn is a YaRN rotary's factor, original_max_position_embeddings and
// beta_fast and beta_slow.
type Yarn struct {
	Factor, Orig, BetaFast, BetaSlow float64
}

// Tiny describes a generated checkpoint.
type Tiny struct {
	// Arch is the transformers class: LlamaForCausalLM, Qwen2ForCausalLM,
	// Qwen3ForCausalLM, MistralForCausalLM, MinistralForCausalLM (the
	// layers with a window slide), Ministral3ForCausalLM,
	// SmolLM3ForCausalLM, SeedOssForCausalLM, ArceeForCausalLM (Ungated
	// set), ApertusForCausalLM (Apertus and QKNorm set), PhiForCausalLM
	// (Phi set), Starcoder2ForCausalLM (Starcoder2 set),
	// NemotronForCausalLM (Nemotron set), StableLmForCausalLM (StableLM
	// set), OlmoForCausalLM (Olmo1 set), CohereForCausalLM and Cohere2ForCausalLM
	// (Cohere set), GlmForCausalLM and Glm4ForCausalLM (Glm, and
	// Glm4, set), Exaone4ForCausalLM (Olmo2 and QKNorm set; the
	// layers with a window slide, the others take no rotary: NoRope must
	// say so),
	// Olmo2ForCausalLM, Olmo3ForCausalLM, Gemma3ForCausalLM or
	// Gemma2ForCausalLM, or with
	// Labels one of their *ForSequenceClassification
	// (Gemma3TextForSequenceClassification for Gemma 3).
	Arch   string
	Config Config
	// Seed makes the weights reproducible.
	Seed uint64
	// DType of the stored weights (default F32).
	DType safetensors.DType
	// MaxPositions is max_position_embeddings (default 256).
	MaxPositions int
	// Stacked writes a Mixtral's sparse blocks as transformers v5 holds
	// them (MixtralSparseMoeBlock renamed mlp, MixtralExperts):
	// mlp.gate.weight, mlp.experts.gate_up_proj [E, 2I, H] (expert e's w1
	// rows, then its w3 rows) and mlp.experts.down_proj [E, H, I] (the
	// w2s), holding the values the per-expert layout holds.
	Stacked bool
	// Labels makes the checkpoint a *ForSequenceClassification's
	// (transformers' GenericForSequenceClassification): score.weight
	// [Labels, Hidden] instead of lm_head.weight, and id2label with
	// Labels entries in config.json. The other tensors, and their
	// values, are the causal LM's of the same Seed. 0: a causal LM.
	Labels int
}

// CausalArch is the causal LM class a *ForSequenceClassification is
// built on (arch itself for a causal LM).
func CausalArch(arch string) string {
	if arch == "Gemma3TextForSequenceClassification" {
		return "Gemma3ForCausalLM"
	}
	return strings.Replace(arch, "ForSequenceClassification", "ForCausalLM", 1)
}

// Rand is splitmix64: tiny, fast, reproducible. The checkpoint writers
// (here and in pipeline/testkit/qwenref) draw weights from it.
type Rand struct{ s uint64 }

// Fill draws a tensor of shape from r, element by element in row-major
// order: value(u, fan) of a uniform u in [-1, 1) (Rand.Uniform), fan the
// product of the dimensions after the first. The references' checkpoint
// writers give value as their initializations by kind.
func Fill(r *Rand, shape []int, value func(u float64, fan int) float64) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	fan := n / shape[0]
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(value(r.Uniform(), fan))
	}
	return v
}

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) *Rand { return &Rand{s: seed} }

// Next returns the next 64 random bits.
func (r *Rand) Next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uniform returns a value in [-1, 1).
func (r *Rand) Uniform() float64 { return float64(r.Next()>>11)/float64(1<<52) - 1 }

// Tensor is one named weight to write.
type Tensor struct {
	Name  string
	Shape []int
	// Kind decides the initial values: "linear" (uniform scaled by
	// 1/sqrt(fan-in)), "norm" (around 1, or around 0 for Gemma's (1+w)),
	// "bias" and "embed".
	Kind string
}

// Tensors lists the checkpoint tensors of a tiny model, with Hugging Face
// names.
func (t Tiny) Tensors() []Tensor {
	c := t.Config
	if c.Phi || c.Starcoder2 || c.Nemotron || c.StableLM || c.Olmo1 {
		return t.phiTensors()
	}
	H, D := c.Hidden, c.HeadDim
	q, kv := c.Heads*D, c.KVHeads*D
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, kind string, shape ...int) { out = append(out, Tensor{p + name, shape, kind}) }
		switch {
		case c.Apertus:
			add("attention_layernorm.weight", "norm", H)
		case !c.Olmo2:
			add("input_layernorm.weight", "norm", H)
		}
		add("self_attn.q_proj.weight", "linear", q, H)
		add("self_attn.k_proj.weight", "linear", kv, H)
		add("self_attn.v_proj.weight", "linear", kv, H)
		add("self_attn.o_proj.weight", "linear", H, q)
		if c.QKVBias {
			add("self_attn.q_proj.bias", "bias", q)
			add("self_attn.k_proj.bias", "bias", kv)
			add("self_attn.v_proj.bias", "bias", kv)
		}
		if c.OBias || c.Cohere && c.QKVBias {
			add("self_attn.o_proj.bias", "bias", H)
		}
		switch {
		case c.Olmo2 && !c.QKNorm:
			add("self_attn.q_norm.weight", "norm", q)
			add("self_attn.k_norm.weight", "norm", kv)
		case c.Cohere && c.QKNorm: // use_qk_norm: a weight per head
			add("self_attn.q_norm.weight", "norm", c.Heads, D)
			add("self_attn.k_norm.weight", "norm", c.KVHeads, D)
		case c.HunYuan && c.QKNorm:
			add("self_attn.query_layernorm.weight", "norm", D)
			add("self_attn.key_layernorm.weight", "norm", D)
		case (c.QKNorm || c.Gemma) && !c.Gemma2 && !c.Gemma1:
			add("self_attn.q_norm.weight", "norm", D)
			add("self_attn.k_norm.weight", "norm", D)
		}
		switch {
		case c.Apertus:
			add("feedforward_layernorm.weight", "norm", H)
		case !c.Cohere:
			add("post_attention_layernorm.weight", "norm", H)
		}
		if c.Glm4 {
			add("post_self_attn_layernorm.weight", "norm", H)
			add("post_mlp_layernorm.weight", "norm", H)
		}
		if c.Gemma && !c.Gemma1 {
			add("pre_feedforward_layernorm.weight", "norm", H)
		}
		if c.Gemma && !c.Gemma1 || c.Olmo2 {
			add("post_feedforward_layernorm.weight", "norm", H)
		}
		if c.Experts > 0 && c.HunYuan {
			add("mlp.gate.wg.weight", "linear", c.Experts, H)
			for e := range c.Experts {
				q := fmt.Sprintf("mlp.experts.%d.", e)
				add(q+"gate_proj.weight", "linear", c.Intermediate, H)
				add(q+"up_proj.weight", "linear", c.Intermediate, H)
				add(q+"down_proj.weight", "linear", H, c.Intermediate)
			}
			add("mlp.shared_mlp.gate_proj.weight", "linear", c.Intermediate, H)
			add("mlp.shared_mlp.up_proj.weight", "linear", c.Intermediate, H)
			add("mlp.shared_mlp.down_proj.weight", "linear", H, c.Intermediate)
			continue
		}
		if c.Experts > 0 && c.SmallThinker {
			add("block_sparse_moe.primary_router.weight", "linear", c.Experts, H)
			for e := range c.Experts {
				q := fmt.Sprintf("block_sparse_moe.experts.%d.", e)
				add(q+"up.weight", "linear", c.Intermediate, H)
				add(q+"gate.weight", "linear", c.Intermediate, H)
				add(q+"down.weight", "linear", H, c.Intermediate)
			}
			continue
		}
		if c.Experts > 0 {
			add("block_sparse_moe.gate.weight", "linear", c.Experts, H)
			for e := range c.Experts {
				q := fmt.Sprintf("block_sparse_moe.experts.%d.", e)
				add(q+"w1.weight", "linear", c.Intermediate, H)
				add(q+"w2.weight", "linear", H, c.Intermediate)
				add(q+"w3.weight", "linear", c.Intermediate, H)
			}
			continue
		}
		switch {
		case c.Apertus:
			add("mlp.act_fn.alpha_p", "xielu-alpha", 1)
			add("mlp.act_fn.alpha_n", "xielu-alpha", 1)
			add("mlp.act_fn.beta", "xielu-beta")
			add("mlp.act_fn.eps", "xielu-eps")
			add("mlp.up_proj.weight", "linear", c.Intermediate, H)
		case c.Ungated:
			add("mlp.up_proj.weight", "linear", c.Intermediate, H)
		case c.Glm:
			add("mlp.gate_up_proj.weight", "linear", 2*c.Intermediate, H)
		default:
			add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
			add("mlp.up_proj.weight", "linear", c.Intermediate, H)
		}
		add("mlp.down_proj.weight", "linear", H, c.Intermediate)
		if c.BitNet {
			add("self_attn.attn_sub_norm.weight", "norm", q)
			add("mlp.ffn_sub_norm.weight", "norm", c.Intermediate)
		}
		if c.MLPBias {
			add("mlp.gate_proj.bias", "bias", c.Intermediate)
			add("mlp.up_proj.bias", "bias", c.Intermediate)
			add("mlp.down_proj.bias", "bias", H)
		}
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, "norm"})
	switch {
	case t.Labels > 0:
		out = append(out, Tensor{"score.weight", []int{t.Labels, H}, "linear"})
	case !c.Tied:
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// phiTensors are a Phi or StarCoder2 checkpoint's tensors, in their
// classes' names: biased LayerNorms and projections.
func (t Tiny) phiTensors() []Tensor {
	c := t.Config
	H, D := c.Hidden, c.HeadDim
	q, kv := c.Heads*D, c.KVHeads*D
	out := []Tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	o, up, down, final := "self_attn.dense", "mlp.fc1", "mlp.fc2", "model.final_layernorm"
	norms := []string{"input_layernorm"}
	switch {
	case c.Starcoder2:
		o, up, down, final = "self_attn.o_proj", "mlp.c_fc", "mlp.c_proj", "model.norm"
		norms = append(norms, "post_attention_layernorm")
	case c.Nemotron:
		o, up, down, final = "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj", "model.norm"
		norms = append(norms, "post_attention_layernorm")
	case c.StableLM:
		o, up, down, final = "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj", "model.norm"
		if !c.StableLMParallel {
			norms = append(norms, "post_attention_layernorm")
		}
	case c.Olmo1: // norms without parameters
		o, up, down, final, norms = "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj", "", nil
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, kind string, shape ...int) { out = append(out, Tensor{p + name, shape, kind}) }
		for _, n := range norms {
			add(n+".weight", "norm", H)
			add(n+".bias", "bias", H)
		}
		for _, pr := range []struct {
			name    string
			out, in int
		}{{"self_attn.q_proj", q, H}, {"self_attn.k_proj", kv, H}, {"self_attn.v_proj", kv, H}, {o, H, q}, {up, c.Intermediate, H}, {down, H, c.Intermediate}} {
			add(pr.name+".weight", "linear", pr.out, pr.in)
			if !c.Nemotron && (!c.StableLM && !c.Olmo1 || c.QKVBias && pr.name != up && pr.name != down && (c.Olmo1 || pr.name != o)) { // StableLM: q, k, v; OLMo 1's attention_bias: o_proj too
				add(pr.name+".bias", "bias", pr.out)
			}
		}
		if c.StableLM || c.Olmo1 {
			add("mlp.gate_proj.weight", "linear", c.Intermediate, H)
		}
		if c.Phi && c.QKNorm { // qk_layernorm: one biased LayerNorm for every query head, one for every key head
			for _, n := range []string{"q_layernorm", "k_layernorm"} {
				add("self_attn."+n+".weight", "norm", D)
				add("self_attn."+n+".bias", "bias", D)
			}
		}
		if c.StableLM && c.QKNorm { // qk_layernorm: a LayerNorm a head, each its own tensor
			for h := range c.Heads {
				add(fmt.Sprintf("self_attn.q_layernorm.norms.%d.weight", h), "norm", D)
			}
			for h := range c.KVHeads {
				add(fmt.Sprintf("self_attn.k_layernorm.norms.%d.weight", h), "norm", D)
			}
		}
	}
	if final != "" {
		out = append(out, Tensor{final + ".weight", []int{H}, "norm"}, Tensor{final + ".bias", []int{H}, "bias"})
	}
	switch {
	case c.Phi:
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"}, Tensor{"lm_head.bias", []int{c.Vocab}, "bias"})
	case !c.Tied:
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// values fills a tensor deterministically.
func (t Tiny) values(r *Rand, w Tensor) []float32 {
	n := 1
	for _, d := range w.Shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch w.Kind {
		case "linear":
			v[i] = float32(u / math.Sqrt(float64(w.Shape[len(w.Shape)-1])))
		case "norm":
			if t.Config.Gemma || t.Config.Nemotron { // (1 + w) norms store w about 0
				v[i] = float32(0.2 * u)
			} else {
				v[i] = float32(1 + 0.2*u)
			}
		case "bias":
			v[i] = float32(0.1 * u)
		case "embed":
			v[i] = float32(u)
		case "xielu-alpha": // softplus⁻¹ of values about 0.8, as XIELUActivation starts them
			v[i] = float32(math.Log(math.Expm1(0.8 + 0.3*u)))
		case "xielu-beta": // about XIELUActivation's 0.5, each layer's its own
			v[i] = float32(0.5 + 0.2*u)
		case "xielu-eps": // far enough below 0 that min(x, eps) is seen
			v[i] = float32(-0.2 + 0.05*u)
		}
	}
	return v
}

// ConfigJSON returns the config.json of the tiny model.
func (t Tiny) ConfigJSON() map[string]any {
	c := t.Config
	maxPos := t.MaxPositions
	if maxPos == 0 {
		maxPos = 256
	}
	j := map[string]any{
		"architectures":           []string{t.Arch},
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"max_position_embeddings": maxPos,
		"rms_norm_eps":            c.Eps,
		"tie_word_embeddings":     c.Tied,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"rope_theta":              c.RopeTheta[0],
		"torch_dtype":             "float32",
	}
	if t.Labels > 0 {
		labels := map[string]string{}
		for i := range t.Labels {
			labels[fmt.Sprint(i)] = fmt.Sprintf("LABEL_%d", i)
		}
		j["id2label"] = labels
	}
	switch CausalArch(t.Arch) {
	case "LlamaForCausalLM":
		j["model_type"], j["hidden_act"] = "llama", "silu"
	case "Qwen2ForCausalLM":
		j["model_type"], j["hidden_act"], j["use_sliding_window"] = "qwen2", "silu", false
	case "Qwen3ForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"] = "qwen3", "silu", false
	case "MistralForCausalLM", "MixtralForCausalLM":
		j["model_type"], j["hidden_act"] = "mistral", "silu"
		j["sliding_window"] = nil
		if c.Window[0] > 0 {
			j["sliding_window"] = c.Window[0]
		}
		if c.Experts > 0 {
			j["model_type"] = "mixtral"
			j["num_local_experts"], j["num_experts_per_tok"] = c.Experts, c.TopK
			j["router_jitter_noise"], j["output_router_logits"], j["router_aux_loss_coef"] = 0.0, false, 0.02
		}
	case "Olmo2ForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"] = "olmo2", "silu", false
	case "Olmo3ForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"] = "olmo3", "silu", false
		types := make([]string, c.Layers)
		j["sliding_window"] = nil
		for l := range types {
			types[l] = "full_attention"
			if c.Window[l] > 0 {
				types[l] = "sliding_attention"
				j["sliding_window"] = c.Window[l]
			}
		}
		j["layer_types"] = types
		if c.RopeLinear > 0 {
			j["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": c.RopeLinear}
		}
	case "Starcoder2ForCausalLM":
		j["model_type"], j["hidden_act"], j["norm_epsilon"], j["use_bias"], j["sliding_window"] = "starcoder2", "gelu_pytorch_tanh", c.Eps, true, nil
		if c.Window[0] > 0 {
			j["sliding_window"] = c.Window[0]
		}
		delete(j, "rms_norm_eps")
	case "OlmoForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"], j["clip_qkv"] = "olmo", "silu", c.QKVBias, nil
		if c.ClipQKV > 0 {
			j["clip_qkv"] = c.ClipQKV
		}
		delete(j, "rms_norm_eps")
	case "StableLmForCausalLM":
		j["model_type"], j["hidden_act"], j["layer_norm_eps"], j["partial_rotary_factor"] = "stablelm", "silu", c.Eps, c.PartialRotary
		j["use_qkv_bias"], j["qk_layernorm"], j["use_parallel_residual"] = c.QKVBias, c.QKNorm, c.StableLMParallel
		delete(j, "rms_norm_eps")
	case "NemotronForCausalLM":
		j["model_type"], j["hidden_act"], j["norm_eps"], j["partial_rotary_factor"] = "nemotron", "relu2", c.Eps, c.PartialRotary
		j["attention_bias"], j["mlp_bias"] = false, false
		delete(j, "rms_norm_eps")
	case "PhiForCausalLM":
		j["model_type"], j["hidden_act"], j["layer_norm_eps"], j["partial_rotary_factor"] = "phi", "gelu_new", c.Eps, c.PartialRotary
		j["qk_layernorm"] = c.QKNorm
		delete(j, "rms_norm_eps")
	case "ApertusForCausalLM":
		// rope_scaling named, or ApertusConfig's Llama 3 scaling applies.
		j["model_type"], j["hidden_act"], j["rope_scaling"] = "apertus", "xielu", map[string]any{"rope_type": "default"}
	case "ArceeForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"], j["mlp_bias"] = "arcee", "relu2", c.QKVBias, false
	case "BitNetForCausalLM":
		if !c.BitNet || c.QKVBias || c.MLPBias || c.Heads*c.HeadDim != c.Hidden {
			panic("lmckpt: BitNet's layer has its sub norms, no biases here, and heads × head_dim = hidden_size")
		}
		j["model_type"], j["hidden_act"] = "bitnet", "relu2"
	case "HunYuanDenseV1ForCausalLM", "HunYuanMoEV1ForCausalLM":
		if !c.HunYuan || !c.QKNorm || c.MLPBias || c.QKVBias != c.OBias || (c.Experts > 0) != (t.Arch == "HunYuanMoEV1ForCausalLM") {
			panic("lmckpt: HunYuan's layer has its q/k norms, no MLP biases, attention_bias on q, k, v and o alike, and experts exactly when it is the MoE class")
		}
		j["model_type"], j["hidden_act"], j["attention_bias"], j["mlp_bias"] = "hunyuan_v1_dense", "silu", c.QKVBias, false
		j["use_qk_norm"], j["use_cla"], j["eod_token_id"] = true, false, 3
		if c.RopeAlpha > 0 {
			j["rope_scaling"] = map[string]any{"type": "dynamic", "alpha": c.RopeAlpha, "factor": 1.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
		}
		if c.Experts > 0 { // Hunyuan-A13B's per-layer lists, as its config.json writes them
			j["model_type"] = "hunyuan_v1_moe"
			topk, inter, shared := make([]int, c.Layers), make([]int, c.Layers), make([]int, c.Layers)
			for l := range topk {
				topk[l], inter[l], shared[l] = c.TopK, c.Intermediate, 1
			}
			j["num_experts"], j["moe_topk"], j["moe_intermediate_size"], j["num_shared_expert"] = c.Experts, topk, inter, shared
			j["use_mixed_mlp_moe"], j["moe_drop_tokens"], j["moe_random_routing_dropped_token"] = true, false, false
		}
	case "HeliumForCausalLM":
		if !c.RopePairs || c.OBias || c.Heads*c.HeadDim != c.Hidden {
			panic("lmckpt: Helium's rotary turns pairs, its o_proj has no bias and maps hidden_size to hidden_size")
		}
		j["model_type"], j["hidden_act"], j["attention_bias"], j["mlp_bias"] = "helium", "silu", c.QKVBias, c.MLPBias
	case "Ernie4_5ForCausalLM":
		if c.QKVBias != c.OBias || c.QKVBias != c.MLPBias || !c.RopePairs {
			panic("lmckpt: ERNIE 4.5's use_bias covers every projection, and its rotary turns pairs")
		}
		j["model_type"], j["hidden_act"], j["use_bias"] = "ernie4_5", "silu", c.QKVBias
	case "SeedOssForCausalLM":
		j["model_type"], j["hidden_act"], j["mlp_bias"] = "seed_oss", "silu", false
		j["attention_bias"], j["attention_out_bias"] = c.QKVBias, c.OBias
	case "CohereForCausalLM", "Cohere2ForCausalLM":
		j["model_type"], j["hidden_act"], j["layer_norm_eps"], j["logit_scale"] = "cohere", "silu", c.Eps, c.LogitScale
		j["attention_bias"], j["use_qk_norm"] = c.QKVBias, c.QKNorm
		delete(j, "rms_norm_eps")
		if t.Arch == "Cohere2ForCausalLM" {
			j["model_type"], j["sliding_window"] = "cohere2", nil
			types := make([]string, c.Layers)
			for l := range types {
				types[l] = "full_attention"
				if c.Window[l] > 0 {
					types[l] = "sliding_attention"
					j["sliding_window"] = c.Window[l]
				}
			}
			j["layer_types"] = types
		}
	case "GlmForCausalLM", "Glm4ForCausalLM":
		j["model_type"], j["hidden_act"], j["attention_bias"], j["partial_rotary_factor"] = "glm", "silu", c.QKVBias, 0.5
		if c.Glm4 {
			j["model_type"] = "glm4"
		}
	case "MinistralForCausalLM":
		j["model_type"], j["hidden_act"], j["sliding_window"] = "ministral", "silu", nil
		types := make([]string, c.Layers)
		for l := range types {
			types[l] = "full_attention"
			if c.Window[l] > 0 {
				types[l] = "sliding_attention"
				j["sliding_window"] = c.Window[l]
			}
		}
		j["layer_types"] = types
	case "Exaone4ForCausalLM":
		j["model_type"], j["hidden_act"], j["sliding_window"] = "exaone4", "silu", nil
		types := make([]string, c.Layers)
		for l := range types {
			types[l] = "full_attention"
			if c.Window[l] > 0 {
				types[l] = "sliding_attention"
				j["sliding_window"] = c.Window[l]
			}
		}
		j["layer_types"] = types
	case "Ministral3ForCausalLM":
		j["model_type"], j["hidden_act"], j["sliding_window"] = "ministral3", "silu", nil
		delete(j, "rope_theta")
		rp := map[string]any{"rope_type": "default", "rope_theta": c.RopeTheta[0]}
		if y := c.Yarn; y != nil {
			rp = map[string]any{"rope_type": "yarn", "type": "yarn", "rope_theta": c.RopeTheta[0], "factor": y.Factor,
				"original_max_position_embeddings": y.Orig, "beta_fast": y.BetaFast, "beta_slow": y.BetaSlow,
				"mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": c.Llama4Beta}
		}
		j["rope_parameters"] = rp
	case "SmallThinkerForCausalLM":
		// rope_layout: 1 turns, 0 is a NoPE layer; sliding_window_layout:
		// 1 slides within sliding_window_size. No hidden_act, no
		// intermediate_size: the experts are ReGLU of moe_ffn_hidden_size.
		j["model_type"] = "smallthinker"
		delete(j, "intermediate_size")
		rope, windows := make([]int, c.Layers), make([]int, c.Layers)
		j["sliding_window_size"] = 4096
		for l := range rope {
			if l >= len(c.NoRope) || !c.NoRope[l] {
				rope[l] = 1
			}
			if c.Window[l] > 0 {
				windows[l] = 1
				j["sliding_window_size"] = c.Window[l]
			}
		}
		j["rope_layout"], j["sliding_window_layout"] = rope, windows
		j["moe_num_primary_experts"], j["moe_num_active_primary_experts"], j["moe_ffn_hidden_size"] = c.Experts, c.TopK, c.Intermediate
		j["moe_primary_router_apply_softmax"] = !c.SmallThinkerSigmoid
		j["norm_topk_prob"] = true // in the releases' config.json; the modeling code does not read it
	case "SmolLM3ForCausalLM":
		// no_rope_layers: 1 turns, 0 is a NoPE layer; a window makes
		// use_sliding_window and layer_types say which layers have it.
		j["model_type"], j["hidden_act"] = "smollm3", "silu"
		rope, types := make([]int, c.Layers), make([]string, c.Layers)
		j["use_sliding_window"], j["sliding_window"] = false, nil
		for l := range rope {
			if l >= len(c.NoRope) || !c.NoRope[l] {
				rope[l] = 1
			}
			types[l] = "full_attention"
			if c.Window[l] > 0 {
				types[l] = "sliding_attention"
				j["use_sliding_window"], j["sliding_window"] = true, c.Window[l]
			}
		}
		j["no_rope_layers"], j["layer_types"] = rope, types
	case "GemmaForCausalLM":
		j["model_type"], j["hidden_act"], j["hidden_activation"] = "gemma", "gelu", "gelu_pytorch_tanh"
	case "Gemma3ForCausalLM", "Gemma2ForCausalLM":
		j["model_type"], j["hidden_activation"] = "gemma3_text", "gelu_pytorch_tanh"
		if c.Gemma2 {
			j["model_type"] = "gemma2"
		}
		if c.QueryScale > 0 {
			j["query_pre_attn_scalar"] = 1 / (c.QueryScale * c.QueryScale)
		} else {
			j["query_pre_attn_scalar"] = c.HeadDim
		}
		types := make([]string, c.Layers)
		for l := range types {
			types[l] = "full_attention"
			switch {
			case c.Window[l] > 0:
				types[l] = "sliding_attention"
				j["sliding_window"] = c.Window[l]
				if !c.Gemma2 {
					j["rope_local_base_freq"] = c.RopeTheta[l]
				}
			default:
				j["rope_theta"] = c.RopeTheta[l]
			}
		}
		j["layer_types"] = types
		j["attn_logit_softcapping"] = nil
		if c.AttnSoftcap > 0 {
			j["attn_logit_softcapping"] = c.AttnSoftcap
		}
		j["final_logit_softcapping"] = nil
		if c.FinalSoftcap > 0 {
			j["final_logit_softcapping"] = c.FinalSoftcap
		}
	}
	return j
}

// Write writes dir/config.json, dir/generation_config.json and
// dir/model.safetensors.
func (t Tiny) Write(dir string) error {
	ts, err := t.encoded()
	if err != nil {
		return err
	}
	return WriteCheckpoint(dir, t.ConfigJSON(), ts)
}

// encoded returns the checkpoint tensors Write writes.
func (t Tiny) encoded() ([]safetensors.Tensor, error) {
	dt := t.DType
	if dt == "" {
		dt = safetensors.F32
	}
	r := NewRand(t.Seed)
	var ts []safetensors.Tensor
	experts := map[string][]float32{} // the per-expert values Stacked stacks
	for _, w := range t.Tensors() {
		v := t.values(r, w)
		if t.Stacked && strings.Contains(w.Name, ".block_sparse_moe.") {
			experts[w.Name] = v
			continue
		}
		st, err := safetensors.Float32Tensor(w.Name, dt, w.Shape, v)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		ts = append(ts, st)
	}
	c := t.Config
	for l := 0; l < c.Layers && len(experts) > 0; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		var gateUp, down []float32
		for e := range c.Experts {
			q := fmt.Sprintf("%sblock_sparse_moe.experts.%d.", p, e)
			gateUp = append(append(gateUp, experts[q+"w1.weight"]...), experts[q+"w3.weight"]...)
			down = append(down, experts[q+"w2.weight"]...)
		}
		for _, v := range []struct {
			name  string
			shape []int
			v     []float32
		}{
			{p + "mlp.gate.weight", []int{c.Experts, c.Hidden}, experts[p+"block_sparse_moe.gate.weight"]},
			{p + "mlp.experts.gate_up_proj", []int{c.Experts, 2 * c.Intermediate, c.Hidden}, gateUp},
			{p + "mlp.experts.down_proj", []int{c.Experts, c.Hidden, c.Intermediate}, down},
		} {
			st, err := safetensors.Float32Tensor(v.name, dt, v.shape, v.v)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", v.name, err)
			}
			ts = append(ts, st)
		}
	}
	return ts, nil
}

// WriteCheckpoint writes dir/config.json from config, a
// generation_config.json with bos_token_id 1 and eos_token_id 2, and the
// tensors as dir/model.safetensors.
func WriteCheckpoint(dir string, config map[string]any, tensors []safetensors.Tensor) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cj, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return err
	}
	gen := []byte(`{"bos_token_id": 1, "eos_token_id": 2}`)
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), gen, 0o644); err != nil {
		return err
	}
	return safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}

// F32Tensor is one float32 tensor a reference generates.
type F32Tensor struct {
	Name   string
	Shape  []int
	Values []float32
}

// WriteF32 is WriteCheckpoint of float32 tensors, its
// generation_config.json holding gen instead (the references' token ids).
func WriteF32(dir string, config, gen map[string]any, tensors []F32Tensor) error {
	st := make([]safetensors.Tensor, 0, len(tensors))
	for _, t := range tensors {
		v, err := safetensors.Float32Tensor(t.Name, safetensors.F32, t.Shape, t.Values)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		st = append(st, v)
	}
	if err := WriteCheckpoint(dir, config, st); err != nil {
		return err
	}
	g, err := json.Marshal(gen)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "generation_config.json"), g, 0o644)
}

// ReadFloat64 reads every tensor of a checkpoint (file or directory) as
// float64, for the float64 references.
func ReadFloat64(path string) (map[string][]float64, error) {
	ck, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	w := map[string][]float64{}
	for _, name := range ck.Names() {
		v, err := ck.Float32(name)
		if err != nil {
			return nil, err
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		w[name] = f
	}
	return w, nil
}

// LlamaShape returns a Llama checkpoint description with default RoPE and
// no sliding window, e.g. LlamaShape(768, 12, 12, 2048, 32000) for the
// ~110M-parameter benchmark model (tied embeddings).
func LlamaShape(hidden, layers, heads, intermediate, vocab int) Tiny {
	theta := make([]float64, layers)
	window := make([]int, layers)
	for i := range theta {
		theta[i] = 10000
	}
	return Tiny{
		Arch: "LlamaForCausalLM",
		Config: Config{
			Vocab: vocab, Hidden: hidden, Intermediate: intermediate, Layers: layers,
			Heads: heads, KVHeads: heads, HeadDim: hidden / heads, Eps: 1e-5, Tied: true,
			RopeTheta: theta, Window: window,
		},
		Seed:         42,
		MaxPositions: 4096,
	}
}
