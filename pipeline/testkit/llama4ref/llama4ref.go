// Package llama4ref is a plain-Go float64 forward pass of Meta's Llama 4
// text model: transformers' Llama4ForCausalLM, and the language_model of
// Llama4ForConditionalGeneration (the Hub releases
// meta-llama/Llama-4-Scout-17B-16E(-Instruct) and
// Llama-4-Maverick-17B-128E(-Instruct)), written from transformers'
// models/llama4/modeling_llama4.py and configuration_llama4.py (eager
// path), with the "llama3" inverse frequencies of modeling_rope_utils.py
// and the chunked mask of masking_utils.py. It follows the style of
// pipeline/testkit/olmoeref: straight loops over one unpadded sequence
// starting at position 0, no caches, and no code shared with pipeline/nn or
// the architecture packages it checks.
//
// What a Llama 4 decoder layer computes, as this package reads
// transformers:
//
//   - x += o_proj(attention(input_layernorm(x))), then
//     x += feed_forward(post_attention_layernorm(x)); RMSNorm is
//     x·rsqrt(mean(x²)+eps)·w with eps rms_norm_eps; model.norm and
//     lm_head (or the tied embedding) at the end.
//   - Layer i uses the rotary ("RoPE layer") unless (i+1) is a multiple of
//     no_rope_layer_interval ("NoPE layer"): the default no_rope_layers,
//     whose entry 1 means "uses rope". The rotary turns ADJACENT pairs
//     (2j, 2j+1) of every query and key head as one complex number
//     (view_as_complex on a reshape(..., -1, 2)) by pos·inv_freq[j].
//   - On RoPE layers with use_qk_norm, q and k are L2-normed per head
//     AFTER the rotary (Llama4TextL2Norm: x·rsqrt(mean(x²)+eps), no
//     weight, eps rms_norm_eps). NoPE layers have no qk_norm at all.
//   - On NoPE layers with attn_temperature_tuning, q is multiplied by
//     log1p(floor((pos+1)/floor_scale))·attn_scale + 1 (pos the cache
//     position), after the (absent) rotary and norm.
//   - Scale head_dim^-0.5; grouped-query attention (query head h reads
//     key/value head h/(Heads/KVHeads)); RoPE layers are
//     "chunked_attention" (query i sees key j iff j <= i and
//     j/attention_chunk_size == i/attention_chunk_size), NoPE layers
//     "full_attention" (plain causal): the default layer_types.
//   - Layer i is sparse (Llama4TextMoe) iff i is in the default
//     moe_layers, range(interleave_moe_layer_step-1, num_hidden_layers,
//     interleave_moe_layer_step); otherwise it has a dense SwiGLU
//     (Llama4TextMLP) of intermediate_size_mlp. The sparse block takes the
//     router's top num_experts_per_tok logits, scores each chosen expert
//     by the sigmoid of its logit (0 for the others: sigmoid(-inf)),
//     feeds each chosen expert score·h (the score scales the expert's
//     INPUT, not its output) and sums their outputs with the shared
//     expert's output on the unscaled h.
//
// Checkpoints: Llama4ForCausalLM names its tensors model.* and lm_head.weight.
// Llama4ForConditionalGeneration holds the text model as the attribute
// language_model (a Llama4ForCausalLM) beside vision_model and
// multi_modal_projector, and neither the class (no
// _checkpoint_conversion_mapping; base_model_prefix "model" is not a
// module of it) nor transformers' conversion_mapping.py (no "llama4"
// entry, llama4 not among the VLMS) renames anything, so its checkpoints
// hold language_model.model.* and language_model.lm_head.weight, as the
// Scout release does. The routed experts are stacked parameters of
// Llama4TextExperts, not nn.Linear layers: feed_forward.experts.gate_up_proj
// [E, hidden, 2·intermediate] (x @ gate_up_proj[e]; the first half of
// the result is the gate, the second the up projection) and
// feed_forward.experts.down_proj [E, intermediate, hidden]; the router is
// feed_forward.router.weight [E, hidden] and the shared expert
// feed_forward.shared_expert.{gate,up,down}_proj.weight in nn.Linear
// layout.
//
// Where transformers is ambiguous or differs between versions:
//
//   - attention_chunk_size null: every transformers version fails on it
//     (masking_utils.create_chunked_causal_mask raises a ValueError, and
//     the 4.51 _update_causal_mask compares positions against None), as
//     Llama4TextModel builds the chunked mask whenever it runs. This
//     package reads ChunkSize 0 (written as null) as "no chunking": every
//     layer attends causally in full, as a null chunk size plainly means
//     and as vLLM and Meta's llama-models read it.
//   - transformers 4.51 (the release's version) hard-codes the rope and
//     chunked layers as (i+1) % 4 != 0 instead of reading
//     no_rope_layer_interval; with an interval of 4 (the releases and the
//     tiny models here) both agree.
//   - The release writes "no_rope_layers": [] in text_config; configuration
//     reads an empty list as "use the default" (it tests the list's
//     truthiness), so ConfigJSON writes [] too and leaves moe_layers and
//     layer_types out (the release has neither).
//   - The release writes "attn_temperature_tuning": 4, an int that
//     transformers 4.x uses as a truth value (the strict, typed configs of
//     transformers 5.4+ want a bool there; Unsloth patches the 4 into
//     true). ConfigJSON writes 4 when TempTuning is set, as the release
//     does, and false otherwise, so a loader must accept the int.
//   - The Scout release as saved by transformers 4.51.0 has rope_scaling
//     llama3 with factor 8, low_freq_factor 1, high_freq_factor 4,
//     original 8192; Meta later changed Scout's scaling to factor 16
//     (meta-llama/llama-models PR 322), which other mirrors of the config
//     show with low = high = 1. Both are accepted here.
//   - transformers computes the inverse frequencies and the rotary in
//     float32, the router's sigmoid in float32 and everything else in the
//     model's dtype; all of it is float64 here. torch.topk does not
//     promise which of two equal logits wins; here the lower index does.
package llama4ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Llama4 describes a Llama 4 text model by the fields of its config.json
// (the text_config of a Llama4ForConditionalGeneration).
type Llama4 struct {
	// Vocab, Hidden and Layers are vocab_size, hidden_size and
	// num_hidden_layers.
	Vocab, Hidden, Layers int
	// Heads and KVHeads are num_attention_heads and num_key_value_heads;
	// HeadDim is head_dim, the width of every query, key and value head
	// (q_proj is Heads·HeadDim wide, whatever Hidden/Heads is).
	Heads, KVHeads, HeadDim int
	// Intermediate is intermediate_size: the width of each routed expert
	// and of the shared expert.
	Intermediate int
	// IntermediateMLP is intermediate_size_mlp: the width of the dense
	// layers' MLP (unused when every layer is sparse).
	IntermediateMLP int
	// Experts and TopK are num_local_experts and num_experts_per_tok.
	Experts, TopK int
	// InterleaveMoE is interleave_moe_layer_step: layers
	// InterleaveMoE-1, 2·InterleaveMoE-1, … are sparse (moe_layers left to
	// its default), the others dense.
	InterleaveMoE int
	// NoRopeInterval is no_rope_layer_interval: layers NoRopeInterval-1,
	// 2·NoRopeInterval-1, … are NoPE layers (no_rope_layers left to its
	// default).
	NoRopeInterval int
	// UseQKNorm is use_qk_norm: the L2 norm of q and k on RoPE layers.
	UseQKNorm bool
	// TempTuning is attn_temperature_tuning: the query scaling on NoPE
	// layers by AttnTemperature.
	TempTuning bool
	// FloorScale and AttnScale are floor_scale and attn_scale.
	FloorScale, AttnScale float64
	// ChunkSize is attention_chunk_size, the chunk of the RoPE layers'
	// attention; 0 writes null and means no chunking (see the package
	// comment).
	ChunkSize int
	// Theta is rope_theta; Eps is rms_norm_eps, the eps of every RMSNorm
	// and of the q/k L2 norm.
	Theta, Eps float64
	// Llama3 is a rope_scaling of rope_type "llama3"; nil for none
	// (rope_scaling null: the default rotary).
	Llama3 *Llama3Scaling
	// Tied reuses the embedding as the output head (tie_word_embeddings).
	Tied bool
	// Multimodal writes (and reads) a Llama4ForConditionalGeneration
	// checkpoint: config.json with text_config and vision_config, the
	// text tensors named language_model.*, and a few small vision_model.*
	// and multi_modal_projector.* tensors the text model must skip.
	// Otherwise a Llama4ForCausalLM checkpoint: a flat config.json of
	// model_type llama4_text and model.* names.
	Multimodal bool
	// Seed makes the weights reproducible.
	Seed uint64
	// Mistakes switches on mistakes the tests (this package's and the
	// model's) must tell apart; the zero value is none.
	Mistakes Mistakes
}

// Llama3Scaling is a rope_scaling of rope_type "llama3": factor,
// low_freq_factor, high_freq_factor and original_max_position_embeddings.
type Llama3Scaling struct {
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalMax                           int
}

// Mistakes are deliberate departures from Llama 4, one switch each, which
// a comparison against this package must detect:
//
//   - RopeHalves turns the pairs (j, j+D/2) (Llama's rotate_half) instead
//     of the adjacent (2j, 2j+1).
//   - WeightAfter multiplies each chosen expert's OUTPUT by its router
//     score instead of its input.
//   - NoChunk lets the chunked layers attend causally in full.
//   - NoTempTuning leaves out the NoPE layers' query temperature.
//   - QKNormOnNoPE applies the q/k L2 norm on NoPE layers too.
//   - SoftmaxRouter weighs the chosen experts by the softmax of all the
//     router logits instead of the sigmoid of each chosen logit.
//
// Norming q and k before the rotary instead of after is no mistake worth a
// switch: the L2 norm of a head commutes with a rotation.
type Mistakes struct {
	RopeHalves, WeightAfter, NoChunk, NoTempTuning, QKNormOnNoPE, SoftmaxRouter bool
}

// TinyScout is a small Llama-4-Scout-17B-16E: 4 layers, all sparse
// (interleave 1) with 4 experts of width 16 of which 1 is chosen plus the
// shared expert; layers 0-2 RoPE layers with qk_norm and chunked attention
// (chunks of 4), layer 3 a NoPE layer with temperature tuning (floor_scale
// 4, attn_scale 0.1, so positions 3 and 7 of a short prompt step the
// temperature); 4 query heads on 2 key/value heads of head_dim 8;
// rope_theta 500000 with llama3 scaling (factor 8, low 1, high 4, original
// 16, so the highest frequency is smoothed and the others divided);
// untied, written as a Llama4ForConditionalGeneration.
func TinyScout() Llama4 {
	return Llama4{
		Vocab: 96, Hidden: 32, Layers: 4,
		Heads: 4, KVHeads: 2, HeadDim: 8,
		Intermediate: 16, IntermediateMLP: 24,
		Experts: 4, TopK: 1, InterleaveMoE: 1, NoRopeInterval: 4,
		UseQKNorm: true, TempTuning: true, FloorScale: 4, AttnScale: 0.1,
		ChunkSize: 4, Theta: 500000, Eps: 1e-5,
		Llama3:     &Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMax: 16},
		Multimodal: true, Seed: 40,
	}
}

// TinyMaverick is TinyScout on the other paths, as
// Llama-4-Maverick-17B-128E: dense layers 0 and 2 (SwiGLU of width 24)
// alternating with sparse layers 1 and 3 (interleave 2); no qk_norm; the
// top 2 of 4 experts (the releases choose 1; 2 shows that each chosen
// expert gets its own input scaling); chunks of 6; floor_scale 3; the
// default rotary; a tied head; written as a Llama4ForCausalLM.
func TinyMaverick() Llama4 {
	c := TinyScout()
	c.InterleaveMoE, c.UseQKNorm, c.TopK, c.ChunkSize, c.FloorScale = 2, false, 2, 6, 3
	c.Llama3, c.Tied, c.Multimodal, c.Seed = nil, true, false, 41
	return c
}

// UsesRope reports whether layer i is a RoPE layer: the default
// no_rope_layers[i] = int((i+1) % no_rope_layer_interval != 0).
func (c Llama4) UsesRope(i int) bool { return (i+1)%c.NoRopeInterval != 0 }

// MoE reports whether layer i is sparse: i in the default moe_layers,
// range(InterleaveMoE-1, Layers, InterleaveMoE).
func (c Llama4) MoE(i int) bool {
	return i >= c.InterleaveMoE-1 && (i-(c.InterleaveMoE-1))%c.InterleaveMoE == 0
}

// Chunked reports whether layer i uses chunked attention: the default
// layer_types make the RoPE layers "chunked_attention" and the NoPE
// layers "full_attention"; ChunkSize 0 chunks nothing.
func (c Llama4) Chunked(i int) bool { return c.ChunkSize > 0 && c.UsesRope(i) }

// Attends reports whether the query at position q sees the key at
// position k in layer l: causal (k <= q), and on chunked layers in the
// same chunk (k/ChunkSize == q/ChunkSize, masking_utils.chunked_overlay
// without left padding). Mistakes.NoChunk drops the chunk condition.
func (c Llama4) Attends(l, q, k int) bool {
	if k > q {
		return false
	}
	if c.Chunked(l) && !c.Mistakes.NoChunk {
		return k/c.ChunkSize == q/c.ChunkSize
	}
	return true
}

// AttnTemperature is the factor the NoPE layers' queries at cache
// position pos are multiplied by when attn_temperature_tuning is on:
// log1p(floor((pos+1)/floor_scale))·attn_scale + 1.
func (c Llama4) AttnTemperature(pos int) float64 {
	return math.Log1p(math.Floor((float64(pos)+1)/c.FloorScale))*c.AttnScale + 1
}

// RopeFreqs returns the inverse frequencies [HeadDim/2]:
// rope_theta^(-2j/HeadDim), and with Llama3 scaling
// (_compute_llama3_parameters) each one of wavelength 2π/f above
// original/low_freq_factor divided by factor, each below
// original/high_freq_factor kept, and those in between (both bounds
// included) interpolated as (1-s)·f/factor + s·f with
// s = (original/wavelength - low)/(high - low). The attention factor is 1
// in both cases. high_freq_factor may equal low_freq_factor (Meta's later
// Scout rope scaling, factor 16 with both factors 1): the smoothed band is
// then the single wavelength original/low, where transformers (and this
// package) compute 0/0.
func (c Llama4) RopeFreqs() []float64 {
	d := c.HeadDim
	inv := make([]float64, d/2)
	for j := range inv {
		inv[j] = 1 / math.Pow(c.Theta, float64(2*j)/float64(d))
	}
	s := c.Llama3
	if s == nil {
		return inv
	}
	old := float64(s.OriginalMax)
	lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
	for j, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[j] = f / s.Factor
		default:
			sm := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			inv[j] = (1-sm)*f/s.Factor + sm*f
		}
	}
	return inv
}

// check reports a description transformers could not build (or this
// package could not compute).
func (c Llama4) check() error {
	switch {
	case c.Vocab <= 0 || c.Hidden <= 0 || c.Layers <= 0:
		return fmt.Errorf("llama4ref: vocab %d, hidden %d, %d layers", c.Vocab, c.Hidden, c.Layers)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("llama4ref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("llama4ref: head dim %d is not a positive even number", c.HeadDim)
	case c.Experts <= 0 || c.TopK <= 0 || c.TopK > c.Experts:
		return fmt.Errorf("llama4ref: top %d of %d experts", c.TopK, c.Experts)
	case c.Intermediate <= 0 || c.IntermediateMLP <= 0:
		return fmt.Errorf("llama4ref: intermediate sizes %d and %d", c.Intermediate, c.IntermediateMLP)
	case c.InterleaveMoE <= 0:
		return fmt.Errorf("llama4ref: interleave_moe_layer_step %d", c.InterleaveMoE)
	case c.NoRopeInterval <= 0:
		return fmt.Errorf("llama4ref: no_rope_layer_interval %d", c.NoRopeInterval)
	case c.ChunkSize < 0:
		return fmt.Errorf("llama4ref: attention_chunk_size %d", c.ChunkSize)
	case c.TempTuning && c.FloorScale <= 0:
		return fmt.Errorf("llama4ref: floor_scale %g", c.FloorScale)
	case c.Theta <= 0:
		return fmt.Errorf("llama4ref: rope_theta %g", c.Theta)
	}
	if s := c.Llama3; s != nil && (s.Factor <= 0 || s.LowFreqFactor <= 0 || s.HighFreqFactor < s.LowFreqFactor || s.OriginalMax <= 0) {
		return fmt.Errorf("llama4ref: llama3 rope_scaling %+v", *s)
	}
	return nil
}

// ----------------------------------------------------------------------------
// Checkpoint writing

// Tensor is one checkpoint tensor to generate.
type Tensor struct {
	Name  string
	Shape []int
	// Init decides the values and Fan the fan-in they are scaled by, see
	// fill.
	Init string
	Fan  int
}

// Prefix is the prefix of the text model's tensor names:
// "language_model." for a Llama4ForConditionalGeneration, "" for a
// Llama4ForCausalLM.
func (c Llama4) Prefix() string {
	if c.Multimodal {
		return "language_model."
	}
	return ""
}

// The small vision tower ConfigJSON describes for a Multimodal checkpoint.
const (
	visionHidden = 16
	visionPatch  = 14
	visionOutput = 16
)

// Tensors lists the checkpoint tensors with the names of the Hub releases,
// in the order Write draws them: model.embed_tokens.weight; per layer
// input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm and
// the feed-forward (a sparse layer's feed_forward.router.weight
// [E, Hidden], feed_forward.experts.gate_up_proj [E, Hidden, 2·I],
// feed_forward.experts.down_proj [E, I, Hidden] and
// feed_forward.shared_expert.{gate,up,down}_proj.weight; a dense layer's
// feed_forward.{gate,up,down}_proj.weight of width IntermediateMLP);
// model.norm.weight; lm_head.weight unless Tied. All of them carry Prefix.
// A Multimodal checkpoint adds a few vision tensors of the release's names
// (vision_model.class_embedding, vision_model.patch_embedding.linear.weight,
// vision_model.layernorm_pre.{weight,bias},
// multi_modal_projector.linear_1.weight) that the text model never reads.
func (c Llama4) Tensors() []Tensor {
	H, D, I, E := c.Hidden, c.HeadDim, c.Intermediate, c.Experts
	p := c.Prefix()
	var out []Tensor
	add := func(name, init string, fan int, shape ...int) {
		out = append(out, Tensor{name, shape, init, fan})
	}
	add(p+"model.embed_tokens.weight", "embed", 1, c.Vocab, H)
	for l := 0; l < c.Layers; l++ {
		q := fmt.Sprintf("%smodel.layers.%d.", p, l)
		add(q+"input_layernorm.weight", "norm", 1, H)
		add(q+"self_attn.q_proj.weight", "linear", H, c.Heads*D, H)
		add(q+"self_attn.k_proj.weight", "linear", H, c.KVHeads*D, H)
		add(q+"self_attn.v_proj.weight", "linear", H, c.KVHeads*D, H)
		add(q+"self_attn.o_proj.weight", "linear", c.Heads*D, H, c.Heads*D)
		add(q+"post_attention_layernorm.weight", "norm", 1, H)
		ff := q + "feed_forward."
		if !c.MoE(l) {
			add(ff+"gate_proj.weight", "linear", H, c.IntermediateMLP, H)
			add(ff+"up_proj.weight", "linear", H, c.IntermediateMLP, H)
			add(ff+"down_proj.weight", "linear", c.IntermediateMLP, H, c.IntermediateMLP)
			continue
		}
		add(ff+"router.weight", "router", H, E, H)
		add(ff+"experts.gate_up_proj", "linear", H, E, H, 2*I)
		add(ff+"experts.down_proj", "linear", I, E, I, H)
		add(ff+"shared_expert.gate_proj.weight", "linear", H, I, H)
		add(ff+"shared_expert.up_proj.weight", "linear", H, I, H)
		add(ff+"shared_expert.down_proj.weight", "linear", I, H, I)
	}
	add(p+"model.norm.weight", "norm", 1, H)
	if !c.Tied {
		add(p+"lm_head.weight", "linear", H, c.Vocab, H)
	}
	if c.Multimodal {
		add("vision_model.class_embedding", "linear", visionHidden, visionHidden)
		add("vision_model.patch_embedding.linear.weight", "linear", 3*visionPatch*visionPatch, visionHidden, 3*visionPatch*visionPatch)
		add("vision_model.layernorm_pre.weight", "norm", 1, visionHidden)
		add("vision_model.layernorm_pre.bias", "linear", 1, visionHidden)
		add("multi_modal_projector.linear_1.weight", "linear", visionOutput, H, visionOutput)
	}
	return out
}

// fill returns deterministic values for a tensor:
//
//	linear  uniform / sqrt(fan-in)      (activations stay O(1))
//	embed   uniform
//	norm    1 ± 0.2                     (so every norm's weights matter)
//	router  uniform · sqrt(6/fan-in)    (logits of standard deviation about
//	                                     1.4 on a normed input: the top-k
//	                                     choice and the sigmoid scores of the
//	                                     chosen logits vary by token)
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		switch t.Init {
		case "linear":
			v[i] = float32(u / math.Sqrt(float64(t.Fan)))
		case "embed":
			v[i] = float32(u)
		case "norm":
			v[i] = float32(1 + 0.2*u)
		case "router":
			v[i] = float32(u * math.Sqrt(6/float64(t.Fan)))
		default:
			panic("llama4ref: unknown init " + t.Init)
		}
	}
	return v
}

// textConfig returns the text settings of config.json in the layout of the
// Scout release's text_config (transformers 4.51.0): bos 0, eos 1, pad 1,
// max_position_embeddings 256, float32; attention_chunk_size null when
// ChunkSize is 0; attn_temperature_tuning 4 (the release's int) or false;
// rope_scaling the llama3 dict or null; "no_rope_layers": [] as the
// release (empty: the default applies); no moe_layers or layer_types
// (the release has neither); no_rope_layer_interval only when it is not
// the default 4 (the release, saved before the field existed, has none).
func (c Llama4) textConfig() map[string]any {
	var chunk, scaling, tuning any
	if c.ChunkSize > 0 {
		chunk = c.ChunkSize
	}
	if s := c.Llama3; s != nil {
		scaling = map[string]any{
			"rope_type":                        "llama3",
			"factor":                           s.Factor,
			"low_freq_factor":                  s.LowFreqFactor,
			"high_freq_factor":                 s.HighFreqFactor,
			"original_max_position_embeddings": s.OriginalMax,
		}
	}
	tuning = false
	if c.TempTuning {
		tuning = 4
	}
	j := map[string]any{
		"model_type":                "llama4_text",
		"vocab_size":                c.Vocab,
		"hidden_size":               c.Hidden,
		"num_hidden_layers":         c.Layers,
		"num_attention_heads":       c.Heads,
		"num_key_value_heads":       c.KVHeads,
		"head_dim":                  c.HeadDim,
		"intermediate_size":         c.Intermediate,
		"intermediate_size_mlp":     c.IntermediateMLP,
		"num_local_experts":         c.Experts,
		"num_experts_per_tok":       c.TopK,
		"interleave_moe_layer_step": c.InterleaveMoE,
		"no_rope_layers":            []int{},
		"use_qk_norm":               c.UseQKNorm,
		"attn_temperature_tuning":   tuning,
		"floor_scale":               c.FloorScale,
		"attn_scale":                c.AttnScale,
		"attention_chunk_size":      chunk,
		"rope_theta":                c.Theta,
		"rope_scaling":              scaling,
		"rms_norm_eps":              c.Eps,
		"max_position_embeddings":   256,
		"hidden_act":                "silu",
		"attention_bias":            false,
		"attention_dropout":         0.0,
		"initializer_range":         0.02,
		"output_router_logits":      false,
		"router_aux_loss_coef":      0.001,
		"router_jitter_noise":       0.0,
		"for_llm_compressor":        false,
		"tie_word_embeddings":       c.Tied,
		"use_cache":                 true,
		"bos_token_id":              0,
		"eos_token_id":              1,
		"pad_token_id":              1,
		"torch_dtype":               "float32",
	}
	if c.NoRopeInterval != 4 {
		j["no_rope_layer_interval"] = c.NoRopeInterval
	}
	return j
}

// visionConfig is a small vision_config of the release's fields, matching
// the vision tensors of Tensors.
func visionConfig() map[string]any {
	return map[string]any{
		"model_type":                     "llama4_vision_model",
		"hidden_size":                    visionHidden,
		"hidden_act":                     "gelu",
		"num_hidden_layers":              1,
		"num_attention_heads":            2,
		"num_channels":                   3,
		"intermediate_size":              32,
		"image_size":                     28,
		"patch_size":                     visionPatch,
		"vision_output_dim":              visionOutput,
		"projector_input_dim":            visionOutput,
		"projector_output_dim":           visionOutput,
		"pixel_shuffle_ratio":            0.5,
		"projector_dropout":              0.0,
		"attention_dropout":              0.0,
		"multi_modal_projector_bias":     false,
		"norm_eps":                       1e-5,
		"rope_theta":                     10000,
		"initializer_range":              0.02,
		"vision_feature_layer":           -1,
		"vision_feature_select_strategy": "default",
	}
}

// ConfigJSON returns the whole config.json. Multimodal: the layout of
// meta-llama/Llama-4-Scout-17B-16E-Instruct's, architectures
// ["Llama4ForConditionalGeneration"], model_type "llama4", the text
// settings under text_config (model_type "llama4_text", see textConfig),
// a small vision_config, boi/eoi/image token indices 90/91/92 (inside the
// tiny vocabulary), tie_word_embeddings at both levels. Otherwise the
// text settings flat, architectures ["Llama4ForCausalLM"].
func (c Llama4) ConfigJSON() map[string]any {
	text := c.textConfig()
	if !c.Multimodal {
		text["architectures"] = []string{"Llama4ForCausalLM"}
		return text
	}
	return map[string]any{
		"architectures":        []string{"Llama4ForConditionalGeneration"},
		"model_type":           "llama4",
		"text_config":          text,
		"vision_config":        visionConfig(),
		"boi_token_index":      90,
		"eoi_token_index":      91,
		"image_token_index":    92,
		"tie_word_embeddings":  c.Tied,
		"torch_dtype":          "float32",
		"transformers_version": "4.51.0",
	}
}

// Write writes dir/config.json, dir/generation_config.json (bos 0, eos 1,
// pad 1, as config.json says) and dir/model.safetensors in float32, with
// values drawn from lmckpt.NewRand(Seed) in the order of Tensors.
func (c Llama4) Write(dir string) error {
	if err := c.check(); err != nil {
		return err
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.Tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.Name, Shape: t.Shape, Values: fill(r, t)})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}, ts)
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C Llama4
	// W holds every tensor of the checkpoint by its stored name (with
	// Prefix; a Multimodal checkpoint's vision tensors too, unused).
	W map[string][]float64

	// moeInput, when set, sees each sparse block's input (layer, h); the
	// package's tests read the routing of real activations through it.
	moeInput func(layer int, h []float64)
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c Llama4) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "llama4ref"}
	for _, t := range c.Tensors() {
		chk.Shaped(t.Name, t.Shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &Model{C: c, W: w}, nil
}

// get returns the text model's tensor name (without Prefix).
func (m *Model) get(name string) []float64 {
	v, ok := m.W[m.C.Prefix()+name]
	if !ok {
		panic(fmt.Sprintf("llama4ref: checkpoint has no tensor %q", m.C.Prefix()+name))
	}
	return v
}

// ----------------------------------------------------------------------------
// Rotary embedding and norms

// rotatePairs is apply_rotary_emb on one head x [2·len(inv)] at position
// pos: the adjacent pair (x[2j], x[2j+1]) turns as the complex number
// x[2j] + i·x[2j+1] times e^{i·pos·inv_j}.
func rotatePairs(x []float64, pos int, inv []float64) []float64 {
	out := make([]float64, len(x))
	for j, f := range inv {
		cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[2*j], x[2*j+1]
		out[2*j] = a*cs - b*sn
		out[2*j+1] = a*sn + b*cs
	}
	return out
}

// rotateHalves is the RopeHalves mistake: Llama's rotate_half, entry j
// paired with entry len(x)/2+j.
func rotateHalves(x []float64, pos int, inv []float64) []float64 {
	half := len(inv)
	out := make([]float64, len(x))
	for j, f := range inv {
		cs, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[j], x[half+j]
		out[j] = a*cs - b*sn
		out[half+j] = a*sn + b*cs
	}
	return out
}

// ----------------------------------------------------------------------------
// Router and feed-forward

// Route is Llama4Router on one token's router logits [Experts]: the TopK
// largest logits (the lower index on ties), in decreasing order, each
// scored by its sigmoid (the unchosen experts' scores are
// sigmoid(-inf) = 0). With Mistakes.SoftmaxRouter the same experts are
// scored by the softmax of all the logits instead.
func (c Llama4) Route(logits []float64) (ids []int, scores []float64) {
	taken := make([]bool, len(logits))
	for range c.TopK {
		best := -1
		for e, v := range logits {
			if !taken[e] && (best < 0 || v > logits[best]) {
				best = e
			}
		}
		taken[best] = true
		ids = append(ids, best)
		scores = append(scores, 1/(1+math.Exp(-logits[best])))
	}
	if c.Mistakes.SoftmaxRouter {
		p := lmckpt.Softmax64(logits)
		for j, e := range ids {
			scores[j] = p[e]
		}
	}
	return ids, scores
}

// route is Route on the router logits of layer l for input h.
func (m *Model) route(l int, h []float64) ([]int, []float64) {
	w := m.get(fmt.Sprintf("model.layers.%d.feed_forward.router.weight", l))
	return m.C.Route(lmckpt.Linear64(h, w, nil))
}

// Experts returns the ids of the experts the sparse block of layer l
// chooses for its input h (the post_attention_layernorm output,
// [Hidden]), in decreasing order of router logit; nil for a dense layer.
func (m *Model) Experts(l int, h []float64) []int {
	if !m.C.MoE(l) {
		return nil
	}
	ids, _ := m.route(l, h)
	return ids
}

// mlp is Llama4TextMLP with the tensors under prefix p:
// down_proj(lmckpt.SiLU64(gate_proj(x)) * up_proj(x)).
func (m *Model) mlp(p string, x []float64) []float64 {
	return lmckpt.SwiGLU64(x, m.get(p+"gate_proj.weight"), m.get(p+"up_proj.weight"), m.get(p+"down_proj.weight"))
}

// expert is routed expert e of layer l (Llama4TextExperts) on x [Hidden]:
// gu = x @ gate_up_proj[e] [2I], a = lmckpt.SiLU64(gu[:I]) * gu[I:],
// y = a @ down_proj[e] [Hidden].
func (m *Model) expert(l, e int, x []float64) []float64 {
	H, I := m.C.Hidden, m.C.Intermediate
	p := fmt.Sprintf("model.layers.%d.feed_forward.experts.", l)
	gu := m.get(p + "gate_up_proj")[e*H*2*I : (e+1)*H*2*I]
	down := m.get(p + "down_proj")[e*I*H : (e+1)*I*H]
	a := make([]float64, 2*I)
	for i, xi := range x {
		row := gu[i*2*I : (i+1)*2*I]
		for k := range a {
			a[k] += xi * row[k]
		}
	}
	for k := 0; k < I; k++ {
		a[k] = lmckpt.SiLU64(a[k]) * a[I+k]
	}
	y := make([]float64, H)
	for k := 0; k < I; k++ {
		row := down[k*H : (k+1)*H]
		for o := range y {
			y[o] += a[k] * row[o]
		}
	}
	return y
}

// moe is Llama4TextMoe on one token h: shared_expert(h) + Σ over the
// chosen experts e of expert_e(score_e · h) (Mistakes.WeightAfter:
// score_e · expert_e(h)).
func (m *Model) moe(l int, h []float64) []float64 {
	out := m.mlp(fmt.Sprintf("model.layers.%d.feed_forward.shared_expert.", l), h)
	ids, scores := m.route(l, h)
	for j, e := range ids {
		var y []float64
		if m.C.Mistakes.WeightAfter {
			y = m.expert(l, e, h)
			for i := range y {
				y[i] *= scores[j]
			}
		} else {
			in := make([]float64, len(h))
			for i, v := range h {
				in[i] = scores[j] * v
			}
			y = m.expert(l, e, in)
		}
		for i := range out {
			out[i] += y[i]
		}
	}
	return out
}

// feedForward is layer l's feed_forward on h: the sparse block or the
// dense Llama4TextMLP of width IntermediateMLP.
func (m *Model) feedForward(l int, h []float64) []float64 {
	if m.C.MoE(l) {
		return m.moe(l, h)
	}
	return m.mlp(fmt.Sprintf("model.layers.%d.feed_forward.", l), h)
}

// ----------------------------------------------------------------------------
// Attention

// project is Llama4TextAttention up to the attention itself on one input h
// (the input_layernorm output) of layer l at position pos: q, k and v
// projected and cut into heads; on a RoPE layer q and k turned (adjacent
// pairs) and, with UseQKNorm, L2-normed per head; on a NoPE layer with
// TempTuning, q multiplied by AttnTemperature(pos). It returns the query
// heads [Heads][HeadDim] and the key and value heads [KVHeads][HeadDim].
func (m *Model) project(l int, h []float64, pos int, inv []float64) (q, k, v [][]float64) {
	c := m.C
	D := c.HeadDim
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	rope := c.UsesRope(l)
	norm := c.UseQKNorm && (rope || c.Mistakes.QKNormOnNoPE)
	temp := 1.0
	if c.TempTuning && !rope && !c.Mistakes.NoTempTuning {
		temp = c.AttnTemperature(pos)
	}
	rot := rotatePairs
	if c.Mistakes.RopeHalves {
		rot = rotateHalves
	}
	heads := func(name string, n int, qk bool, scale float64) [][]float64 {
		all := lmckpt.Linear64(h, m.get(p+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			x := all[i*D : (i+1)*D]
			if qk && rope {
				x = rot(x, pos, inv)
			}
			if qk && norm {
				x = lmckpt.RMSNorm64(x, nil, c.Eps)
			}
			if scale != 1 {
				x = append([]float64(nil), x...)
				for j := range x {
					x[j] *= scale
				}
			}
			out[i] = x
		}
		return out
	}
	return heads("q_proj", c.Heads, true, temp), heads("k_proj", c.KVHeads, true, 1), heads("v_proj", c.KVHeads, false, 1)
}

// attention is Llama4TextAttention (input_layernorm included, o_proj
// not) of layer l on the residual stream x [T][Hidden] at positions
// 0…T-1: every position's per-head outputs concatenated,
// [T][Heads·HeadDim]. Scale HeadDim^-0.5; query t sees key s where
// Attends(l, t, s); query head h reads key/value head h/(Heads/KVHeads).
func (m *Model) attention(l int, x [][]float64) [][]float64 {
	c := m.C
	D := c.HeadDim
	inv := c.RopeFreqs()
	scale := 1 / math.Sqrt(float64(D))
	ln := m.get(fmt.Sprintf("model.layers.%d.input_layernorm.weight", l))
	query, key, value := make([][][]float64, len(x)), make([][][]float64, len(x)), make([][][]float64, len(x))
	for t := range x {
		query[t], key[t], value[t] = m.project(l, lmckpt.RMSNorm64(x[t], ln, c.Eps), t, inv)
	}
	return lmckpt.Attention64(query, key, value, scale, func(t, s int) bool { return c.Attends(l, t, s) })
}

// ----------------------------------------------------------------------------
// Decoder

// Logits runs one unpadded sequence at positions 0…len-1 and returns the
// logits [len(tokens)][Vocab] after every token: the embedding; per layer
// x += o_proj(attention(x)), then
// x += feed_forward(post_attention_layernorm(x)); model.norm; lm_head (or
// the embedding when Tied).
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("model.embed_tokens.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("llama4ref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		att := m.attention(l, x)
		for t := range x {
			o := lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil)
			for i := range o {
				x[t][i] += o[i]
			}
			h := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			if m.moeInput != nil && c.MoE(l) {
				m.moeInput(l, h)
			}
			y := m.feedForward(l, h)
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
