// Package nemotronhref is a plain-Go float64 forward pass of
// NemotronHForCausalLM: NVIDIA's Nemotron-H (8B, 47B, 56B), Nemotron Nano 2
// (NVIDIA-Nemotron-Nano-9B-v2, 12B-v2) and the mixture-of-experts Nemotron 3
// Nano (NVIDIA-Nemotron-3-Nano-30B-A3B) and Super (with moe_latent_size). It is
// written from transformers' models/nemotron_h (modular_nemotron_h.py,
// configuration_nemotron_h.py, modeling_nemotron_h.py), whose parts come from
// Zamba2MambaMixer.torch_forward and Zamba2RMSNormGated (models/zamba2),
// DeepseekV3TopkRouter and DeepseekV3MoE.route_tokens_to_experts
// (models/deepseek_v3), JambaAttention (models/jamba) and NemotronMLP
// (models/nemotron).
//
// The model, as this package reads transformers, on one unpadded sequence
// without a cache:
//
//   - x = backbone.embeddings(ids), no scaling.
//   - Every layer i is one block: h = RMSNorm(x) with
//     backbone.layers.i.norm.weight and layer_norm_epsilon, then
//     x += mixer(h), the mixer chosen by the layer's type (layers_block_type,
//     or the older hybrid_override_pattern string, one character a layer):
//     "mamba" ("linear_attention", M), "attention" ("full_attention", *),
//     "mlp" (-) or "moe" (E).
//   - backbone.norm_f, then lm_head (untied in every release).
//   - The Mamba-2 mixer: I = mamba_num_heads·mamba_head_dim (NOT
//     expand·hidden_size: Nemotron Nano 2 has 128 heads of 80 on a hidden
//     size of 4480), conv_dim = I + 2·n_groups·ssm_state_size. in_proj
//     (bias when use_bias) gives [gate | xBC | dt] of widths [I, conv_dim,
//     heads]; xBC goes through the depthwise causal conv1d of conv_kernel
//     (bias when use_conv_bias) and SiLU (mamba_hidden_act), and is cut into
//     x [I] (heads of P = mamba_head_dim), B [G·N] and C [G·N]; head h reads
//     group h/(heads/G). dt = softplus(dt + dt_bias) (threshold 20), then
//     clamped from below at time_step_min (torch_forward's
//     torch.clamp(dt, self.time_step_min)); A = -exp(A_log). The state
//     S_h [P, N] starts at zero; S_h ← exp(dt_h·A_h)·S_h + dt_h·x_h ⊗ B_g,
//     y_h = S_h·C_g + D_h·x_h, computed token by token by
//     pipeline/testkit/mamba2ref (torch_forward computes the same sums in
//     the chunked SSD form of chunk_size; mamba2ref's tests check the two
//     agree). Then Zamba2RMSNormGated: z = y·silu(gate),
//     cut into n_groups groups of I/n_groups, each group scaled by
//     rsqrt(mean(z²)+eps) on its own, times norm.weight, eps
//     layer_norm_epsilon; then out_proj (bias when use_bias).
//   - Attention (JambaAttention): q_proj, k_proj, v_proj, o_proj without
//     biases, head_dim from the config (not hidden/heads), grouped-query
//     heads, scores q·k/sqrt(head_dim), causal softmax, and no positional
//     embedding at all.
//   - MLP (NemotronMLP): down_proj(relu2(up_proj(h))), relu2(v) = relu(v)²,
//     width intermediate_size, no gate.
//   - MoE (NemotronHMoE = DeepseekV3MoE with NemotronH's experts): router
//     logits gate.weight·h (float32 in torch); scores = sigmoid(logits);
//     choice = scores + gate.e_score_correction_bias; the experts cut into
//     n_group groups, each scored by the sum of its two largest choices, the
//     topk_group best groups kept and the others' choices set to -inf; the
//     num_experts_per_tok largest choices picked; their weights are the
//     UNBIASED scores, divided by (their sum + 1e-20) when norm_topk_prob,
//     times routed_scaling_factor. Expert e is
//     experts.e.down_proj(relu2(experts.e.up_proj(v))), no gate, on
//     v = fc1_latent_proj(h) when moe_latent_size is set (the weighted sum
//     then goes through fc2_latent_proj) or on h itself. The shared expert
//     shared_experts.{up,down}_proj, a relu2 MLP of
//     moe_shared_expert_intermediate_size, runs on h and is added.
//
// Where transformers is ambiguous, or other implementations read it
// differently:
//
//   - The gated norm is per group here, in the remote code the releases ship
//     (mamba_ssm's rmsnorm_fn with group_size I/n_groups) and in vLLM
//     (Mixer2RMSNormGated), unlike transformers' GraniteMoeHybrid and Bamba,
//     which normalize over all of I. Mistakes.NormWhole is that reading.
//   - dt: transformers' torch_forward clamps softplus(dt + dt_bias) from
//     below at time_step_min (0.001); its CUDA path, the releases' remote code
//     and vLLM clamp to time_step_limit, (0, inf) by default, which does
//     nothing. The tiny models keep dt above 0.004 on the tests' prompt, so
//     the readings agree on them.
//   - The group limit: transformers fills the choices of the experts outside
//     the kept groups with -inf, the releases' remote code with 0.0; they
//     differ only when a kept expert's biased choice is negative. The tiny
//     models' correction biases are non-negative, so every choice is positive.
//   - tie_word_embeddings: transformers' NemotronHForCausalLM declares no tied
//     weights and vLLM builds a separate lm_head, so neither ties; this
//     package reads the embeddings as the head when Tied (no lm_head.weight).
//   - attention_bias and mlp_bias are written false, as in every release;
//     transformers' attention never has biases whatever attention_bias says.
//   - Tensor names are the releases' (backbone.*, one tensor per expert):
//     transformers renames backbone to model and fuses the experts into
//     experts.up_proj [E, I, in] and experts.down_proj [E, in, I] on loading;
//     vLLM maps backbone to model, embeddings to embed_tokens and A_log to A.
//   - torch computes the SSM, the norms' statistics and the router in float32;
//     everything is float64 here. torch.topk does not promise which of two
//     equal values wins; here the lower index does.
//
// It follows the style of pipeline/testkit/granitehref: straight loops over
// one sequence, no caches, no padding, and no code shared with pipeline/nn or
// the architecture packages it checks. The Mamba-2 mixer's arithmetic is
// mamba2ref's, shared with granitehref; this package chooses its readings
// (dt clamped at time_step_min, the norm per group) in Model.Mixer. It also
// writes the tiny checkpoints the tests use: a config.json with
// NemotronHConfig's fields and a float32 model.safetensors with the
// releases' tensor names and deterministic pseudo-random weights.
package nemotronhref

import (
	"fmt"
	"math"
	"strings"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// The block types, as Layers holds them (transformers' MIXER_TYPES keys).
const (
	Mamba     = "mamba"
	Attention = "attention"
	MLP       = "mlp"
	MoE       = "moe"
)

// patternChar is hybrid_override_pattern's character of each block type.
var patternChar = map[string]byte{Mamba: 'M', Attention: '*', MLP: '-', MoE: 'E'}

// blockTypeName is layers_block_type's name of each block type (the names
// configuration_nemotron_h.py writes now).
var blockTypeName = map[string]string{Mamba: "linear_attention", Attention: "full_attention", MLP: "mlp", MoE: "moe"}

// NemotronH describes a NemotronHForCausalLM by the fields of its
// config.json.
type NemotronH struct {
	// Vocab and Hidden are vocab_size and hidden_size.
	Vocab, Hidden int
	// Layers is one block type a layer: Mamba, Attention, MLP or MoE.
	Layers []string
	// Heads, KVHeads and HeadDim are num_attention_heads,
	// num_key_value_heads and head_dim.
	Heads, KVHeads, HeadDim int
	// Intermediate is intermediate_size, the width of the "mlp" blocks.
	Intermediate int
	// MambaHeads, MambaHeadDim, State, Groups and ConvKernel are
	// mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups and
	// conv_kernel. Chunk is chunk_size (it only matters to chunked
	// implementations, not to this one).
	MambaHeads, MambaHeadDim, State, Groups, ConvKernel, Chunk int
	// ConvBias is use_conv_bias (conv1d.bias); UseBias is use_bias
	// (in_proj.bias and out_proj.bias).
	ConvBias, UseBias bool
	// TimeStepMin is time_step_min, the floor of dt.
	TimeStepMin float64
	// Experts, TopK, MoEIntermediate and SharedIntermediate are
	// n_routed_experts, num_experts_per_tok, moe_intermediate_size and
	// moe_shared_expert_intermediate_size.
	Experts, TopK, MoEIntermediate, SharedIntermediate int
	// RoutedScale is routed_scaling_factor; NGroup and TopKGroup are n_group
	// and topk_group; NormTopK is norm_topk_prob.
	RoutedScale       float64
	NGroup, TopKGroup int
	NormTopK          bool
	// Latent is moe_latent_size, 0 for none (null).
	Latent int
	// Eps is layer_norm_epsilon, the eps of every norm, the gated one
	// included.
	Eps float64
	// Tied reuses backbone.embeddings.weight as the output head.
	Tied bool
	// Pattern writes the layers as hybrid_override_pattern (the releases'
	// form, e.g. "M-M-M*-") instead of layers_block_type.
	Pattern bool
	// Seed makes the weights reproducible.
	Seed uint64
}

// TinyNano is a small Nemotron 3 Nano (30B-A3B): vocabulary 96, hidden 32,
// 5 layers "ME*ME" (mamba, moe, attention, mamba, moe: a Mamba layer after
// the attention one, so routing at earlier tokens reaches the last one),
// attention of 4 query heads on 2 key/value heads of head_dim 8, Mamba-2
// mixers of 8 heads of 8 (I 64), state 8, 4 groups (group size 16, so the
// per-group norm matters), kernel 4 with conv bias, no projection biases,
// chunk 4; 8 experts of width 16 in 2 groups, top 3 from the best
// topk_group 1 group (so the group limit matters), a shared expert of 24,
// routed_scaling_factor 2.5, norm_topk_prob; layer_norm_epsilon 1e-5, an
// untied head, written as hybrid_override_pattern.
func TinyNano() NemotronH {
	return NemotronH{
		Vocab: 96, Hidden: 32,
		Layers: []string{Mamba, MoE, Attention, Mamba, MoE},
		Heads:  4, KVHeads: 2, HeadDim: 8, Intermediate: 0,
		MambaHeads: 8, MambaHeadDim: 8, State: 8, Groups: 4, ConvKernel: 4, Chunk: 4,
		ConvBias: true, UseBias: false, TimeStepMin: 0.001,
		Experts: 8, TopK: 3, MoEIntermediate: 16, SharedIntermediate: 24,
		RoutedScale: 2.5, NGroup: 2, TopKGroup: 1, NormTopK: true,
		Eps: 1e-5, Tied: false, Pattern: true, Seed: 5000,
	}
}

// TinyH is a small dense Nemotron-H 8B: vocabulary 96, hidden 32, 6 layers
// "M-M*-M" (mamba, mlp, mamba, attention, mlp, mamba), attention of 4 query
// heads on 1 key/value head of head_dim 12 (4·12 = 48, not the hidden size),
// relu2 MLPs of 48, Mamba-2 mixers of 8 heads of 6 (I 48, not
// expand·hidden = 64), state 8, 2 groups (group size 24), kernel 4 with conv
// bias, in_proj and out_proj biases (use_bias), chunk 4; no experts;
// layer_norm_epsilon 1e-6, an untied head, written as layers_block_type with
// the new names ("linear_attention", "mlp", "full_attention").
func TinyH() NemotronH {
	return NemotronH{
		Vocab: 96, Hidden: 32,
		Layers: []string{Mamba, MLP, Mamba, Attention, MLP, Mamba},
		Heads:  4, KVHeads: 1, HeadDim: 12, Intermediate: 48,
		MambaHeads: 8, MambaHeadDim: 6, State: 8, Groups: 2, ConvKernel: 4, Chunk: 4,
		ConvBias: true, UseBias: true, TimeStepMin: 0.001,
		Eps: 1e-6, Tied: false, Pattern: false, Seed: 5001,
	}
}

// TinyLatent is TinyNano with moe_latent_size 16 (Nemotron 3 Super's latent
// experts): the routed experts read fc1_latent_proj(h) [16] and their
// weighted sum goes through fc2_latent_proj back to the hidden size; the
// shared expert still reads h. Its weights come from another seed.
func TinyLatent() NemotronH {
	c := TinyNano()
	c.Latent = 16
	c.Seed = 5002
	return c
}

// MambaInner is the mixer's intermediate size, mamba_num_heads·mamba_head_dim.
func (c NemotronH) MambaInner() int { return c.MambaHeads * c.MambaHeadDim }

// ConvDim is the conv1d's channel count, MambaInner + 2·n_groups·state.
func (c NemotronH) ConvDim() int { return c.MambaInner() + 2*c.Groups*c.State }

// ExpertIn is the routed experts' input width: moe_latent_size, or the
// hidden size without one.
func (c NemotronH) ExpertIn() int {
	if c.Latent > 0 {
		return c.Latent
	}
	return c.Hidden
}

// Has reports whether some layer is of block type typ.
func (c NemotronH) Has(typ string) bool {
	for _, t := range c.Layers {
		if t == typ {
			return true
		}
	}
	return false
}

// PatternString is the layers as hybrid_override_pattern.
func (c NemotronH) PatternString() string {
	var b strings.Builder
	for _, t := range c.Layers {
		b.WriteByte(patternChar[t])
	}
	return b.String()
}

// blockTypes is the layers as layers_block_type (the new names).
func (c NemotronH) blockTypes() []string {
	out := make([]string, len(c.Layers))
	for i, t := range c.Layers {
		out[i] = blockTypeName[t]
	}
	return out
}

// check reports a description transformers could not build (or this
// package could not compute).
func (c NemotronH) check() error {
	switch {
	case len(c.Layers) == 0 || c.Hidden <= 0 || c.Vocab <= 0:
		return fmt.Errorf("nemotronhref: %d layers, hidden %d, vocabulary %d", len(c.Layers), c.Hidden, c.Vocab)
	case c.Eps <= 0:
		return fmt.Errorf("nemotronhref: layer_norm_epsilon %g", c.Eps)
	}
	for l, t := range c.Layers {
		if _, ok := patternChar[t]; !ok {
			return fmt.Errorf("nemotronhref: layer %d has block type %q", l, t)
		}
	}
	if c.Has(Attention) {
		switch {
		case c.Heads <= 0 || c.HeadDim <= 0:
			return fmt.Errorf("nemotronhref: %d attention heads of %d", c.Heads, c.HeadDim)
		case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
			return fmt.Errorf("nemotronhref: %d query heads on %d key/value heads", c.Heads, c.KVHeads)
		}
	}
	if c.Has(MLP) && c.Intermediate <= 0 {
		return fmt.Errorf("nemotronhref: intermediate_size %d", c.Intermediate)
	}
	if c.Has(Mamba) {
		switch {
		case c.MambaHeads <= 0 || c.MambaHeadDim <= 0:
			return fmt.Errorf("nemotronhref: %d mamba heads of %d", c.MambaHeads, c.MambaHeadDim)
		case c.Groups <= 0 || c.MambaHeads%c.Groups != 0:
			return fmt.Errorf("nemotronhref: %d mamba heads in %d groups", c.MambaHeads, c.Groups)
		case c.State <= 0 || c.ConvKernel <= 0:
			return fmt.Errorf("nemotronhref: ssm_state_size %d, conv_kernel %d", c.State, c.ConvKernel)
		case c.TimeStepMin < 0:
			return fmt.Errorf("nemotronhref: time_step_min %g", c.TimeStepMin)
		}
	}
	if c.Has(MoE) {
		switch {
		case c.Experts <= 0 || c.MoEIntermediate <= 0 || c.SharedIntermediate <= 0:
			return fmt.Errorf("nemotronhref: %d experts of %d, shared expert of %d", c.Experts, c.MoEIntermediate, c.SharedIntermediate)
		case c.NGroup <= 0 || c.Experts%c.NGroup != 0 || c.Experts/c.NGroup < 2:
			// group_scores takes the top 2 of every group.
			return fmt.Errorf("nemotronhref: %d experts in %d groups", c.Experts, c.NGroup)
		case c.TopKGroup <= 0 || c.TopKGroup > c.NGroup:
			return fmt.Errorf("nemotronhref: topk_group %d of %d groups", c.TopKGroup, c.NGroup)
		case c.TopK <= 0 || c.TopK > c.TopKGroup*(c.Experts/c.NGroup):
			return fmt.Errorf("nemotronhref: top %d of the %d experts of %d groups", c.TopK, c.TopKGroup*(c.Experts/c.NGroup), c.TopKGroup)
		case c.Latent < 0:
			return fmt.Errorf("nemotronhref: moe_latent_size %d", c.Latent)
		}
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

// Tensors lists the checkpoint tensors with the releases' names, in the
// order Write draws them: backbone.embeddings.weight; per layer
// backbone.layers.i.norm.weight, then the mixer's —
//
//   - mamba: mixer.in_proj.weight [I + ConvDim + heads, hidden] (and
//     mixer.in_proj.bias with UseBias), mixer.conv1d.weight [ConvDim, 1,
//     kernel] (and mixer.conv1d.bias with ConvBias), mixer.dt_bias,
//     mixer.A_log, mixer.D [heads], mixer.norm.weight [I],
//     mixer.out_proj.weight [hidden, I] (and mixer.out_proj.bias);
//   - attention: mixer.q_proj.weight [heads·head_dim, hidden],
//     mixer.k_proj.weight and mixer.v_proj.weight [kv·head_dim, hidden],
//     mixer.o_proj.weight [hidden, heads·head_dim];
//   - mlp: mixer.up_proj.weight [intermediate, hidden],
//     mixer.down_proj.weight [hidden, intermediate];
//   - moe: mixer.gate.weight [E, hidden], mixer.gate.e_score_correction_bias
//     [E], mixer.fc1_latent_proj.weight [latent, hidden] and
//     mixer.fc2_latent_proj.weight [hidden, latent] (Latent only),
//     mixer.experts.e.up_proj.weight [moe_intermediate, in] and
//     mixer.experts.e.down_proj.weight [in, moe_intermediate] for every e
//     (in = ExpertIn), mixer.shared_experts.up_proj.weight [shared, hidden]
//     and mixer.shared_experts.down_proj.weight [hidden, shared];
//
// backbone.norm_f.weight; lm_head.weight only when untied.
func (c NemotronH) Tensors() []Tensor {
	H := c.Hidden
	out := []Tensor{{"backbone.embeddings.weight", []int{c.Vocab, H}, "embed"}}
	for l, typ := range c.Layers {
		p := fmt.Sprintf("backbone.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, Tensor{p + name, shape, init}) }
		add("norm.weight", "norm", H)
		switch typ {
		case Mamba:
			I, conv, nh := c.MambaInner(), c.ConvDim(), c.MambaHeads
			add("mixer.in_proj.weight", "linear", I+conv+nh, H)
			if c.UseBias {
				add("mixer.in_proj.bias", "bias", I+conv+nh)
			}
			add("mixer.conv1d.weight", "linear", conv, 1, c.ConvKernel)
			if c.ConvBias {
				add("mixer.conv1d.bias", "bias", conv)
			}
			add("mixer.dt_bias", "dt_bias", nh)
			add("mixer.A_log", "A_log", nh)
			add("mixer.D", "D", nh)
			add("mixer.norm.weight", "norm", I)
			add("mixer.out_proj.weight", "linear", H, I)
			if c.UseBias {
				add("mixer.out_proj.bias", "bias", H)
			}
		case Attention:
			D := c.HeadDim
			add("mixer.q_proj.weight", "qk", c.Heads*D, H)
			add("mixer.k_proj.weight", "qk", c.KVHeads*D, H)
			add("mixer.v_proj.weight", "linear", c.KVHeads*D, H)
			add("mixer.o_proj.weight", "linear", H, c.Heads*D)
		case MLP:
			add("mixer.up_proj.weight", "up", c.Intermediate, H)
			add("mixer.down_proj.weight", "linear", H, c.Intermediate)
		case MoE:
			in := c.ExpertIn()
			add("mixer.gate.weight", "router", c.Experts, H)
			add("mixer.gate.e_score_correction_bias", "correction", c.Experts)
			if c.Latent > 0 {
				add("mixer.fc1_latent_proj.weight", "linear", c.Latent, H)
				add("mixer.fc2_latent_proj.weight", "linear", H, c.Latent)
			}
			for e := 0; e < c.Experts; e++ {
				add(fmt.Sprintf("mixer.experts.%d.up_proj.weight", e), "up", c.MoEIntermediate, in)
				add(fmt.Sprintf("mixer.experts.%d.down_proj.weight", e), "linear", in, c.MoEIntermediate)
			}
			add("mixer.shared_experts.up_proj.weight", "up", c.SharedIntermediate, H)
			add("mixer.shared_experts.down_proj.weight", "linear", H, c.SharedIntermediate)
		}
	}
	out = append(out, Tensor{"backbone.norm_f.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, Tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// fill returns deterministic values for a tensor, u uniform in [-1, 1) and
// fan-in the product of the dimensions after the first:
//
//	linear      u / sqrt(fan-in)         (conv1d: fan-in the kernel width)
//	qk          2u / sqrt(fan-in)        (q_proj, k_proj: scores of a few
//	                                      units after 1/sqrt(head_dim), so
//	                                      the attention is not uniform)
//	up          1.5u / sqrt(fan-in)      (the up_proj before relu2: on a
//	                                      normed input of rms 1 the
//	                                      pre-activations have rms about
//	                                      0.87 and relu2 of them about 0.9)
//	embed       u                        (the residual stream starts at rms
//	                                      0.58, of the order of the mixers'
//	                                      outputs)
//	norm        1 + 0.2u                 (every norm's weights matter)
//	router      u · sqrt(6/fan-in)       (logits of rms about 1.4: sigmoid
//	                                      scores spread over 0.1-0.9)
//	correction  0.2 + 0.2u               (e_score_correction_bias: spreads
//	                                      of 0.4, enough to change the
//	                                      choices, and non-negative so every
//	                                      choice stays positive)
//	bias        0.2u                     (in_proj, out_proj, conv1d biases)
//	dt_bias     -4 + 3·f + 0.25u         (f = h/(heads-1) for head h, so
//	                                      softplus(dt + dt_bias) runs from
//	                                      about 0.02 on head 0 (never under
//	                                      0.004, four times time_step_min,
//	                                      on the tests' prompt) to about 1
//	                                      on the last head)
//	A_log       log(1 + 3·f + 0.25u)     (A from about -1 on head 0 to -4 on
//	                                      the last: on the tiny models'
//	                                      activations the decays exp(dt·A)
//	                                      run from about 0.99 on head 0 (a
//	                                      memory of dozens of tokens) down
//	                                      to 0.01-0.15 on the last heads)
//	D           1 + 0.3u
func fill(r *lmckpt.Rand, t Tensor) []float32 {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	fan := n / t.Shape[0]
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		var x float64
		switch t.Init {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "up":
			x = 1.5 * u / math.Sqrt(float64(fan))
		case "embed":
			x = u
		case "norm":
			x = 1 + 0.2*u
		case "router":
			x = u * math.Sqrt(6/float64(fan))
		case "correction":
			x = 0.2 + 0.2*u
		case "bias":
			x = 0.2 * u
		case "dt_bias":
			x = -4 + 3*spread(i, n) + 0.25*u
		case "A_log":
			x = math.Log(1 + 3*spread(i, n) + 0.25*u)
		case "D":
			x = 1 + 0.3*u
		default:
			panic("nemotronhref: unknown init " + t.Init)
		}
		v[i] = float32(x)
	}
	return v
}

// spread is i/(n-1), 0 for n = 1.
func spread(i, n int) float64 {
	if n <= 1 {
		return 0
	}
	return float64(i) / float64(n-1)
}

// ConfigJSON returns the config.json with NemotronHConfig's field names:
// architectures [NemotronHForCausalLM], model_type nemotron_h, the sizes,
// hybrid_override_pattern (Pattern) or layers_block_type (the new names
// "linear_attention", "full_attention", "mlp", "moe"), num_hidden_layers,
// the attention's head_dim, intermediate_size and mlp_hidden_act relu2,
// the Mamba-2 fields (mamba_num_heads, mamba_head_dim, ssm_state_size,
// n_groups, conv_kernel, chunk_size, use_conv_bias, use_bias,
// mamba_hidden_act silu, time_step_min, time_step_max 0.1, expand 2, which
// the mixer does not use), the MoE fields (n_routed_experts,
// num_experts_per_tok, moe_intermediate_size,
// moe_shared_expert_intermediate_size, n_shared_experts 1, moe_latent_size
// or null, routed_scaling_factor, n_group, topk_group, norm_topk_prob),
// layer_norm_epsilon, tie_word_embeddings, attention_bias and mlp_bias
// false, bos 1, eos 2 and pad 0, max_position_embeddings 256 and float32.
// time_step_limit is left to its default (0, inf), which JSON cannot
// write.
func (c NemotronH) ConfigJSON() map[string]any {
	var latent any
	if c.Latent > 0 {
		latent = c.Latent
	}
	cfg := map[string]any{
		"architectures":                       []string{"NemotronHForCausalLM"},
		"model_type":                          "nemotron_h",
		"vocab_size":                          c.Vocab,
		"hidden_size":                         c.Hidden,
		"num_hidden_layers":                   len(c.Layers),
		"num_attention_heads":                 c.Heads,
		"num_key_value_heads":                 c.KVHeads,
		"head_dim":                            c.HeadDim,
		"attention_bias":                      false,
		"attention_dropout":                   0.0,
		"max_position_embeddings":             256,
		"intermediate_size":                   c.Intermediate,
		"mlp_hidden_act":                      "relu2",
		"mlp_bias":                            false,
		"mamba_num_heads":                     c.MambaHeads,
		"mamba_head_dim":                      c.MambaHeadDim,
		"ssm_state_size":                      c.State,
		"n_groups":                            c.Groups,
		"conv_kernel":                         c.ConvKernel,
		"chunk_size":                          c.Chunk,
		"expand":                              2,
		"use_conv_bias":                       c.ConvBias,
		"use_bias":                            c.UseBias,
		"mamba_hidden_act":                    "silu",
		"time_step_min":                       c.TimeStepMin,
		"time_step_max":                       0.1,
		"n_routed_experts":                    c.Experts,
		"num_experts_per_tok":                 c.TopK,
		"moe_intermediate_size":               c.MoEIntermediate,
		"moe_shared_expert_intermediate_size": c.SharedIntermediate,
		"n_shared_experts":                    1,
		"moe_latent_size":                     latent,
		"routed_scaling_factor":               c.RoutedScale,
		"n_group":                             c.NGroup,
		"topk_group":                          c.TopKGroup,
		"norm_topk_prob":                      c.NormTopK,
		"layer_norm_epsilon":                  c.Eps,
		"tie_word_embeddings":                 c.Tied,
		"use_cache":                           true,
		"bos_token_id":                        1,
		"eos_token_id":                        2,
		"pad_token_id":                        0,
		"torch_dtype":                         "float32",
	}
	if c.Pattern {
		cfg["hybrid_override_pattern"] = c.PatternString()
	} else {
		cfg["layers_block_type"] = c.blockTypes()
	}
	return cfg
}

// Write writes dir/config.json, dir/generation_config.json (bos 1, eos 2,
// pad 0) and dir/model.safetensors, every tensor in float32 (the
// e_score_correction_bias too), with values drawn from
// lmckpt.NewRand(Seed) in the order of Tensors.
func (c NemotronH) Write(dir string) error {
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
// Reading a config

// FromConfig reads a config.json (decoded by encoding/json) the way
// NemotronHConfig does: the layers from layers_block_type (new names
// "linear_attention", "full_attention", "mlp", "moe", or the older "mamba",
// "attention") or else from hybrid_override_pattern (Pattern set);
// NemotronHConfig's defaults for absent fields (head_dim from the older
// attention_head_dim, or hidden/heads; time_step_min 0.001; n_group and
// topk_group 1; norm_topk_prob true; layer_norm_epsilon 1e-5); the legacy
// names mamba_n_groups, mamba_d_conv, mamba_conv_bias, mamba_chunk_size and
// mamba_dt_min; moe_latent_size null as 0. Seed is 0.
func FromConfig(cfg map[string]any) (NemotronH, error) {
	var err error
	num := func(def float64, keys ...string) float64 {
		for _, k := range keys {
			switch v := cfg[k].(type) {
			case float64:
				return v
			case nil:
				continue
			default:
				if err == nil {
					err = fmt.Errorf("nemotronhref: config %s = %v", k, v)
				}
				return def
			}
		}
		return def
	}
	integer := func(def int, keys ...string) int { return int(num(float64(def), keys...)) }
	flag := func(def bool, keys ...string) bool {
		for _, k := range keys {
			if v, ok := cfg[k].(bool); ok {
				return v
			}
		}
		return def
	}
	c := NemotronH{
		Vocab: integer(131072, "vocab_size"), Hidden: integer(4096, "hidden_size"),
		Heads: integer(32, "num_attention_heads"), KVHeads: integer(8, "num_key_value_heads"),
		Intermediate: integer(21504, "intermediate_size"),
		MambaHeads:   integer(128, "mamba_num_heads"), MambaHeadDim: integer(64, "mamba_head_dim"),
		State: integer(128, "ssm_state_size"), Groups: integer(8, "n_groups", "mamba_n_groups"),
		ConvKernel: integer(4, "conv_kernel", "mamba_d_conv"), Chunk: integer(128, "chunk_size", "mamba_chunk_size"),
		ConvBias: flag(true, "use_conv_bias", "mamba_conv_bias"), UseBias: flag(false, "use_bias"),
		TimeStepMin: num(0.001, "time_step_min", "mamba_dt_min"),
		Experts:     integer(8, "n_routed_experts"), TopK: integer(2, "num_experts_per_tok"),
		MoEIntermediate: integer(7688, "moe_intermediate_size"), SharedIntermediate: integer(7688, "moe_shared_expert_intermediate_size"),
		RoutedScale: num(1, "routed_scaling_factor"), NGroup: integer(1, "n_group"), TopKGroup: integer(1, "topk_group"),
		NormTopK: flag(true, "norm_topk_prob"), Latent: integer(0, "moe_latent_size"),
		Eps: num(1e-5, "layer_norm_epsilon"), Tied: flag(false, "tie_word_embeddings"),
	}
	c.HeadDim = integer(0, "head_dim", "attention_head_dim")
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if err != nil {
		return NemotronH{}, err
	}
	names := map[string]string{
		"linear_attention": Mamba, "mamba": Mamba, "full_attention": Attention, "attention": Attention,
		"mlp": MLP, "moe": MoE,
	}
	chars := map[rune]string{'M': Mamba, '*': Attention, '-': MLP, 'E': MoE}
	switch list, pattern := cfg["layers_block_type"], cfg["hybrid_override_pattern"]; {
	case list != nil:
		items, ok := list.([]any)
		if !ok {
			return NemotronH{}, fmt.Errorf("nemotronhref: layers_block_type = %v", list)
		}
		for _, v := range items {
			s, _ := v.(string)
			t, ok := names[s]
			if !ok {
				return NemotronH{}, fmt.Errorf("nemotronhref: block type %v", v)
			}
			c.Layers = append(c.Layers, t)
		}
	case pattern != nil:
		s, ok := pattern.(string)
		if !ok {
			return NemotronH{}, fmt.Errorf("nemotronhref: hybrid_override_pattern = %v", pattern)
		}
		for _, ch := range s {
			t, ok := chars[ch]
			if !ok {
				return NemotronH{}, fmt.Errorf("nemotronhref: hybrid_override_pattern has %q", ch)
			}
			c.Layers = append(c.Layers, t)
		}
		c.Pattern = true
	default:
		// NemotronHConfig's default layers_block_type.
		c.Layers = []string{Mamba, MoE, Attention, MLP}
	}
	return c, nil
}

// ----------------------------------------------------------------------------
// Model

// Model is a description plus its weights in float64.
type Model struct {
	C NemotronH
	// W holds every tensor of the checkpoint by its Hugging Face name.
	W map[string][]float64
	// Mistakes switches on mistakes the tests (this package's and the
	// model's) must tell apart; the zero value is none.
	Mistakes Mistakes
}

// Mistakes are deliberate departures from NemotronH, one switch each, which
// a comparison against this package must detect:
//
//   - NormWhole normalizes y·silu(gate) over all I entries at once
//     (transformers' GraniteMoeHybrid and Bamba reading) instead of over each
//     of the n_groups groups of I/n_groups; no change with one group.
//   - NormBeforeGate normalizes y first and then multiplies by silu(gate)
//     (rmsnorm(y)·w·silu(gate), mamba_ssm's norm_before_gate=True) instead of
//     rmsnorm(y·silu(gate))·w.
//   - NoD drops the D skip term D_h·x_h.
//   - GatedExperts runs the routed experts with SiLU in place of relu2
//     (down(silu(up(v))), reading them as gated-family experts); the shared
//     expert and the dense MLPs keep relu2.
//   - NoCorrectionBias chooses the experts (and their groups) by the raw
//     sigmoid scores, without e_score_correction_bias.
//   - BiasedWeights weighs the chosen experts by their biased choice scores
//     (score + correction bias) instead of the unbiased scores.
//   - NoGroupLimit chooses among all experts, ignoring n_group and
//     topk_group; no change with one group.
//   - NoRoutedScale leaves out routed_scaling_factor.
//   - SiLUMLP uses SiLU instead of relu2 in the dense "mlp" blocks.
//   - NoSharedExpert leaves the shared expert's output out of the MoE blocks.
type Mistakes struct {
	NormWhole, NormBeforeGate, NoD, GatedExperts, NoCorrectionBias, BiasedWeights, NoGroupLimit, NoRoutedScale, SiLUMLP, NoSharedExpert bool
}

// Load reads a checkpoint written by Write (or any with the same tensor
// names) as float64, checking that every tensor of Tensors is there with
// its size.
func (c NemotronH) Load(dir string) (*Model, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "nemotronhref"}
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
		panic(fmt.Sprintf("nemotronhref: checkpoint has no tensor %q", name))
	}
	return v
}

// opt is get when present is true, else nil.
func (m *Model) opt(present bool, name string) []float64 {
	if !present {
		return nil
	}
	return m.get(name)
}

func mixer(l int) string { return fmt.Sprintf("backbone.layers.%d.mixer.", l) }

// ----------------------------------------------------------------------------
// Activations

// ReLU2 is transformers' relu2 (ReLUSquaredActivation): relu(x)².
func ReLU2(x float64) float64 {
	if x <= 0 {
		return 0
	}
	return x * x
}

// Sigmoid is 1/(1+exp(-x)).
func Sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// ----------------------------------------------------------------------------
// Mamba-2 mixer

// Mixer is layer l's NemotronHMamba2Mixer as a mamba2ref.Mixer: its
// mixer.* tensors (the biases as ConvBias and UseBias say), dt clamped from
// below at time_step_min (DtMin, as transformers' torch_forward) and the
// gated norm per group (NormGroups = n_groups, Zamba2RMSNormGated), with
// the mixer's Mistakes applied: NormWhole takes one norm group, NoD leaves
// D out, NormBeforeGate passes through.
func (m *Model) Mixer(l int) mamba2ref.Mixer {
	c, mk := m.C, m.Mistakes
	p := mixer(l)
	mx := mamba2ref.Mixer{
		Heads: c.MambaHeads, HeadDim: c.MambaHeadDim, Groups: c.Groups, State: c.State, Kernel: c.ConvKernel,
		InProj: m.get(p + "in_proj.weight"), InBias: m.opt(c.UseBias, p+"in_proj.bias"),
		Conv: m.get(p + "conv1d.weight"), ConvBias: m.opt(c.ConvBias, p+"conv1d.bias"),
		DtBias: m.get(p + "dt_bias"), ALog: m.get(p + "A_log"), D: m.opt(!mk.NoD, p+"D"),
		Norm: m.get(p + "norm.weight"), OutProj: m.get(p + "out_proj.weight"), OutBias: m.opt(c.UseBias, p+"out_proj.bias"),
		DtMin: c.TimeStepMin, NormGroups: c.Groups, NormBeforeGate: mk.NormBeforeGate, Eps: c.Eps,
	}
	if mk.NormWhole {
		mx.NormGroups = 1
	}
	return mx
}

// Mamba is layer l's NemotronHMamba2Mixer on h, the block norm's output
// [T][hidden]: Mixer(l).Forward. It returns [T][hidden].
func (m *Model) Mamba(l int, h [][]float64) [][]float64 { return m.Mixer(l).Forward(h) }

// ----------------------------------------------------------------------------
// Attention

// Attention is layer l's NemotronHAttention (JambaAttention) on h, the
// block norm's output [T][hidden]: q_proj, k_proj, v_proj (no biases) cut
// into heads of head_dim, no positional embedding, scores q·k/sqrt(head_dim),
// causal softmax, grouped-query heads, o_proj. It returns [T][hidden].
func (m *Model) Attention(l int, h [][]float64) [][]float64 {
	c := m.C
	p := mixer(l)
	D := c.HeadDim
	heads := func(x []float64, name string, n int) [][]float64 {
		all := lmckpt.Linear64(x, m.get(p+name+".weight"), nil)
		out := make([][]float64, n)
		for i := range out {
			out[i] = all[i*D : (i+1)*D]
		}
		return out
	}
	query, key, value := make([][][]float64, len(h)), make([][][]float64, len(h)), make([][][]float64, len(h))
	for t := range h {
		query[t] = heads(h[t], "q_proj", c.Heads)
		key[t] = heads(h[t], "k_proj", c.KVHeads)
		value[t] = heads(h[t], "v_proj", c.KVHeads)
	}
	att := lmckpt.Attention64(query, key, value, 1/math.Sqrt(float64(D)), nil)
	out := make([][]float64, len(h))
	for t := range att {
		out[t] = lmckpt.Linear64(att[t], m.get(p+"o_proj.weight"), nil)
	}
	return out
}

// ----------------------------------------------------------------------------
// MLP, router, experts

// mlp is down(act(up(x))) without biases.
func mlp(x, up, down []float64, act func(float64) float64) []float64 {
	a := lmckpt.Linear64(x, up, nil)
	for i, v := range a {
		a[i] = act(v)
	}
	return lmckpt.Linear64(a, down, nil)
}

// MLP is layer l's NemotronHMLP on one token h: down_proj(relu2(up_proj(h)))
// (SiLU with the SiLUMLP mistake).
func (m *Model) MLP(l int, h []float64) []float64 {
	p := mixer(l)
	act := ReLU2
	if m.Mistakes.SiLUMLP {
		act = lmckpt.SiLU64
	}
	return mlp(h, m.get(p+"up_proj.weight"), m.get(p+"down_proj.weight"), act)
}

// Route is NemotronHMoE.route_tokens_to_experts on one token's router
// logits [Experts] and the e_score_correction_bias [Experts]: scores =
// sigmoid(logits), choice = scores + bias; with NGroup groups of
// Experts/NGroup, each group scored by the sum of its two largest choices,
// only the TopKGroup best groups stay (the others' choices -inf); the TopK
// largest choices are picked (in decreasing order, the lower index on ties)
// and weighed by their scores, divided by (their sum + 1e-20) when
// NormTopK, times RoutedScale. The mistakes NoCorrectionBias,
// BiasedWeights, NoGroupLimit and NoRoutedScale change it as they say.
func (m *Model) Route(logits, bias []float64) (ids []int, weights []float64) {
	c, mk := m.C, m.Mistakes
	E := len(logits)
	scores := make([]float64, E)
	choice := make([]float64, E)
	for e, v := range logits {
		scores[e] = Sigmoid(v)
		choice[e] = scores[e]
		if !mk.NoCorrectionBias {
			choice[e] += bias[e]
		}
	}
	biased := append([]float64(nil), choice...)
	if !mk.NoGroupLimit && c.NGroup > 1 {
		size := E / c.NGroup
		groupScore := make([]float64, c.NGroup)
		for g := range groupScore {
			top := lmckpt.TopK64(choice[g*size:(g+1)*size], 2)
			groupScore[g] = choice[g*size+top[0]] + choice[g*size+top[1]]
		}
		keep := make([]bool, c.NGroup)
		for _, g := range lmckpt.TopK64(groupScore, c.TopKGroup) {
			keep[g] = true
		}
		for e := range choice {
			if !keep[e/size] {
				choice[e] = math.Inf(-1)
			}
		}
	}
	ids = lmckpt.TopK64(choice, c.TopK)
	sum := 0.0
	for _, e := range ids {
		w := scores[e]
		if mk.BiasedWeights {
			w = biased[e]
		}
		weights = append(weights, w)
		sum += w
	}
	scale := c.RoutedScale
	if mk.NoRoutedScale {
		scale = 1
	}
	for j := range weights {
		if c.NormTopK {
			weights[j] /= sum + 1e-20
		}
		weights[j] *= scale
	}
	return ids, weights
}

// Experts returns the ids and weights of the experts layer l's MoE chooses
// for h (the block norm's output), from mixer.gate.weight and
// mixer.gate.e_score_correction_bias.
func (m *Model) Experts(l int, h []float64) (ids []int, weights []float64) {
	p := mixer(l)
	return m.Route(lmckpt.Linear64(h, m.get(p+"gate.weight"), nil), m.get(p+"gate.e_score_correction_bias"))
}

// MoE is layer l's NemotronHMoE on one token h: v = fc1_latent_proj(h) (or h
// without a latent), Σ_j w_j·down_j(relu2(up_j(v))) over the chosen experts
// (SiLU with GatedExperts), through fc2_latent_proj with a latent, plus the
// shared expert's relu2 MLP on h (not with NoSharedExpert).
func (m *Model) MoE(l int, h []float64) []float64 {
	c := m.C
	p := mixer(l)
	ids, ws := m.Experts(l, h)
	v := h
	if c.Latent > 0 {
		v = lmckpt.Linear64(h, m.get(p+"fc1_latent_proj.weight"), nil)
	}
	act := ReLU2
	if m.Mistakes.GatedExperts {
		act = lmckpt.SiLU64
	}
	routed := make([]float64, c.ExpertIn())
	for j, e := range ids {
		ep := fmt.Sprintf("%sexperts.%d.", p, e)
		for i, y := range mlp(v, m.get(ep+"up_proj.weight"), m.get(ep+"down_proj.weight"), act) {
			routed[i] += ws[j] * y
		}
	}
	if c.Latent > 0 {
		routed = lmckpt.Linear64(routed, m.get(p+"fc2_latent_proj.weight"), nil)
	}
	if !m.Mistakes.NoSharedExpert {
		for i, y := range mlp(h, m.get(p+"shared_experts.up_proj.weight"), m.get(p+"shared_experts.down_proj.weight"), ReLU2) {
			routed[i] += y
		}
	}
	return routed
}

// ----------------------------------------------------------------------------
// Decoder

// Hidden runs the embeddings and the first n layers on the whole sequence
// and returns the residual stream [len(tokens)][Hidden] after them (n =
// len(Layers) for the stream before norm_f).
func (m *Model) Hidden(tokens []int, n int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("backbone.embeddings.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		if id < 0 || id >= c.Vocab {
			panic(fmt.Sprintf("nemotronhref: token %d outside the vocabulary of %d", id, c.Vocab))
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < n; l++ {
		norm := m.get(fmt.Sprintf("backbone.layers.%d.norm.weight", l))
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], norm, c.Eps)
		}
		var out [][]float64
		switch c.Layers[l] {
		case Mamba:
			out = m.Mamba(l, h)
		case Attention:
			out = m.Attention(l, h)
		case MLP:
			for t := range h {
				out = append(out, m.MLP(l, h[t]))
			}
		case MoE:
			for t := range h {
				out = append(out, m.MoE(l, h[t]))
			}
		default:
			panic(fmt.Sprintf("nemotronhref: layer %d has block type %q", l, c.Layers[l]))
		}
		for t := range x {
			for i, v := range out[t] {
				x[t][i] += v
			}
		}
	}
	return x
}

// Logits runs the whole sequence and returns the logits
// [len(tokens)][Vocab] after every token: every layer, norm_f, lm_head (the
// embeddings when Tied).
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	x := m.Hidden(tokens, len(c.Layers))
	head := "lm_head.weight"
	if c.Tied {
		head = "backbone.embeddings.weight"
	}
	normF, W := m.get("backbone.norm_f.weight"), m.get(head)
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], normF, c.Eps), W, nil)
	}
	return out
}
