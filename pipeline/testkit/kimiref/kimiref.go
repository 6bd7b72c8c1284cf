// Package kimiref is a plain-Go float64 forward pass of
// KimiLinearForCausalLM (Kimi Linear), written from the releases'
// modeling_kimi.py and the flash-linear-attention operators it calls:
// KimiDeltaAttention (three ShortConvolutions with SiLU, fused_kda_gate
// -exp(A_log)·softplus(f + dt_bias) a key channel, β = sigmoid(b_proj),
// fla's naive_recurrent_kda token by token on L2-normed q and k with q
// scaled by head_dim^-0.5, FusedRMSNormGated with a sigmoid gate),
// KimiMLAAttention (q_proj, the latent through kv_a_layernorm and
// kv_b_proj expanded into every head's keys and values, no rotary:
// mla_use_nope), KimiMoEGate (sigmoid or softmax scores, the correction
// bias choosing within the best groups, the unbiased scores weighing,
// divided when more than one is chosen and moe_renormalize, times
// routed_scaling_factor) and KimiSparseMoeBlock with its shared experts.
// On one point it follows vLLM's kimi_linear.py and DeepSeek-V3's router
// rather than the release's code: modeling_kimi.py adds the bias into
// the scores in place (scores_for_choice is a view of scores), so under
// transformers the chosen experts are weighed by biased scores; vLLM,
// DeepSeek-V3 and Kimi K3's later code weigh by the unbiased ones.
// Model.BiasedWeights gives the release code's reading.
// Straight loops over one sequence, no caches, no padding; it shares no
// code with pipeline/kimilinear, pipeline/deepseek or pipeline/nn.
package kimiref

import (
	"fmt"
	"math"
	"slices"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Kimi describes a tiny Kimi Linear by the fields of its config.json.
type Kimi struct {
	Vocab, Hidden, Inter, Layers int
	// Heads, KVLora, QKNope, QKRope and VHead are the MLA's sizes
	// (q_lora_rank null).
	Heads, KVLora, QKNope, QKRope, VHead int
	// KDALayers are linear_attn_config.kda_layers (1-based); the others
	// are MLA. KDAHeads, KDADim and Conv are its num_heads, head_dim and
	// short_conv_kernel_size.
	KDALayers              []int
	KDAHeads, KDADim, Conv int
	// Experts of width MoEInter, TopK a token, Shared shared ones; the
	// layers from FirstDense on whose index Freq divides are sparse.
	// Groups and TopKGroup are num_expert_group and topk_group; Softmax
	// scores by softmax instead of sigmoid; Renorm is moe_renormalize;
	// Scale routed_scaling_factor.
	Experts, TopK, Shared, MoEInter, FirstDense, Freq, Groups, TopKGroup int
	Softmax, Renorm                                                      bool
	Scale, Eps                                                           float64
	Tied                                                                 bool
	Seed                                                                 uint64
}

// Tiny is the releases' layout at a small scale: KDA, KDA, MLA, KDA
// (Kimi-Linear-48B-A3B's three to one), a dense first layer, sigmoid
// routing over one group with a shared expert and a routed scale.
func Tiny() Kimi {
	return Kimi{Vocab: 64, Hidden: 32, Inter: 48, Layers: 4,
		Heads: 4, KVLora: 16, QKNope: 8, QKRope: 4, VHead: 6,
		KDALayers: []int{1, 2, 4}, KDAHeads: 2, KDADim: 8, Conv: 4,
		Experts: 8, TopK: 2, Shared: 1, MoEInter: 16, FirstDense: 1, Freq: 1, Groups: 1, TopKGroup: 1,
		Renorm: true, Scale: 2.446, Eps: 1e-5, Seed: 170}
}

// Other switches everything Tiny leaves at the releases' values: MLA
// first, softmax scores in two groups of which one is kept, one expert a
// token (never divided), no shared expert, sparse layers every other
// one from the first, a tied head, three KDA heads of 4 and a
// convolution of 3 taps. Its seed keeps the router's choices at least
// 0.08 apart on the tests' prompts, so that bfloat16's rounding does not
// choose another expert than the float64 reference.
func Other() Kimi {
	return Kimi{Vocab: 64, Hidden: 24, Inter: 40, Layers: 4,
		Heads: 3, KVLora: 12, QKNope: 6, QKRope: 2, VHead: 5,
		KDALayers: []int{2, 4}, KDAHeads: 3, KDADim: 4, Conv: 3,
		Experts: 6, TopK: 1, Shared: 0, MoEInter: 12, FirstDense: 0, Freq: 2, Groups: 2, TopKGroup: 1,
		Softmax: true, Renorm: true, Scale: 1.5, Eps: 1e-6, Tied: true, Seed: 174}
}

// KDA reports layer i (0-based) Kimi Delta Attention.
func (c Kimi) KDA(i int) bool { return slices.Contains(c.KDALayers, i+1) }

// Sparse reports layer i a sparse block.
func (c Kimi) Sparse(i int) bool { return c.Experts > 0 && i >= c.FirstDense && i%c.Freq == 0 }

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Kimi) tensors() []tensor {
	H := c.Hidden
	out := []tensor{{"model.embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		if c.KDA(l) {
			hd := c.KDAHeads * c.KDADim
			for _, n := range []string{"q", "k", "v"} {
				add("self_attn."+n+"_proj.weight", "linear", hd, H)
				add("self_attn."+n+"_conv1d.weight", "conv", hd, 1, c.Conv)
			}
			add("self_attn.A_log", "alog", 1, 1, c.KDAHeads, 1)
			add("self_attn.f_a_proj.weight", "linear", c.KDADim, H)
			add("self_attn.f_b_proj.weight", "linear", hd, c.KDADim)
			add("self_attn.dt_bias", "bias", hd)
			add("self_attn.b_proj.weight", "linear", c.KDAHeads, H)
			add("self_attn.g_a_proj.weight", "linear", c.KDADim, H)
			add("self_attn.g_b_proj.weight", "linear", hd, c.KDADim)
			add("self_attn.o_norm.weight", "norm", c.KDADim)
			add("self_attn.o_proj.weight", "linear", H, hd)
		} else {
			add("self_attn.q_proj.weight", "linear", c.Heads*(c.QKNope+c.QKRope), H)
			add("self_attn.kv_a_proj_with_mqa.weight", "linear", c.KVLora+c.QKRope, H)
			add("self_attn.kv_a_layernorm.weight", "norm", c.KVLora)
			add("self_attn.kv_b_proj.weight", "linear", c.Heads*(c.QKNope+c.VHead), c.KVLora)
			add("self_attn.o_proj.weight", "linear", H, c.Heads*c.VHead)
		}
		add("post_attention_layernorm.weight", "norm", H)
		mlp := func(prefix, gate, up, down string, width int) {
			add(prefix+gate+".weight", "linear", width, H)
			add(prefix+up+".weight", "linear", width, H)
			add(prefix+down+".weight", "linear", H, width)
		}
		if !c.Sparse(l) {
			mlp("mlp.", "gate_proj", "up_proj", "down_proj", c.Inter)
			continue
		}
		add("block_sparse_moe.gate.weight", "router", c.Experts, H)
		add("block_sparse_moe.gate.e_score_correction_bias", "ebias", c.Experts)
		for e := 0; e < c.Experts; e++ {
			mlp(fmt.Sprintf("block_sparse_moe.experts.%d.", e), "w1", "w3", "w2", c.MoEInter)
		}
		if c.Shared > 0 {
			mlp("block_sparse_moe.shared_experts.", "gate_proj", "up_proj", "down_proj", c.Shared*c.MoEInter)
		}
	}
	out = append(out, tensor{"model.norm.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with KimiLinearConfig's names.
func (c Kimi) ConfigJSON() map[string]any {
	full := []int{}
	for l := 1; l <= c.Layers; l++ {
		if !slices.Contains(c.KDALayers, l) {
			full = append(full, l)
		}
	}
	act := "sigmoid"
	if c.Softmax {
		act = "softmax"
	}
	return map[string]any{
		"architectures": []string{"KimiLinearForCausalLM"}, "model_type": "kimi_linear",
		"auto_map":   map[string]string{"AutoConfig": "configuration_kimi.KimiLinearConfig", "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM"},
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Inter, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.Heads, "head_dim": 72, "hidden_act": "silu",
		"q_lora_rank": nil, "kv_lora_rank": c.KVLora, "qk_nope_head_dim": c.QKNope, "qk_rope_head_dim": c.QKRope,
		"v_head_dim": c.VHead, "mla_use_nope": true, "rope_theta": 10000.0, "rope_scaling": nil,
		"num_experts": c.Experts, "num_experts_per_token": c.TopK, "num_shared_experts": c.Shared,
		"moe_intermediate_size": c.MoEInter, "first_k_dense_replace": c.FirstDense, "moe_layer_freq": c.Freq,
		"moe_renormalize": c.Renorm, "moe_router_activation_func": act, "routed_scaling_factor": c.Scale,
		"use_grouped_topk": true, "num_expert_group": c.Groups, "topk_group": c.TopKGroup,
		"num_nextn_predict_layers": 0, "rms_norm_eps": c.Eps, "tie_word_embeddings": c.Tied,
		"linear_attn_config": map[string]any{"kda_layers": c.KDALayers, "full_attn_layers": full,
			"head_dim": c.KDADim, "num_heads": c.KDAHeads, "short_conv_kernel_size": c.Conv},
		"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
	}
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32). A_log draws exp(A_log) in [0.05, 0.8] and
// dt_bias in [-1, 1], so that the channels' decays differ by up to two
// orders of magnitude without erasing the state within a token or two.
func (c Kimi) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		v := lmckpt.Fill(r, t.shape, func(u float64, fan int) float64 {
			switch t.init {
			case "embed", "bias":
				return u
			case "norm":
				return 1 + 0.2*u
			case "conv":
				return 0.5 * u
			case "alog":
				return math.Log(0.425 + 0.375*u)
			case "ebias":
				return 0.1 * u
			case "router":
				return 3 * u / math.Sqrt(float64(fan))
			}
			return u / math.Sqrt(float64(fan))
		})
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: v})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 1, "eos_token_id": 2}, ts)
}

// Model is a description plus its weights in float64. The switches give
// references that must differ from the model: ScalarDecay decays each
// KDA head by its channels' mean log-decay (Gated DeltaNet's one gate a
// head); SiLUGate gates o_norm by silu instead of sigmoid (Qwen3-Next's
// norm); Rope turns the MLA's qk_rope dims (rotate-half, base 10000).
type Model struct {
	C                           Kimi
	W                           map[string][]float64
	ScalarDecay, SiLUGate, Rope bool
	// BiasedWeights weighs the chosen experts by their scores plus the
	// correction bias (modeling_kimi.py's in-place add).
	BiasedWeights bool
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Kimi) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "kimiref"}
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
		panic(fmt.Sprintf("kimiref: no tensor %q", name))
	}
	return v
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// softplus is torch's, threshold 20.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// l2norm is fla's l2norm: x / sqrt(Σx² + 1e-6).
func l2norm(x []float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v / math.Sqrt(ss+1e-6)
	}
	return out
}

// swiglu is an MLP under prefix p with the named matrices:
// down(silu(gate·x) · up·x).
func (m *Model) swiglu(p, gate, up, down string, x []float64) []float64 {
	return lmckpt.SwiGLU64(x, m.get(p+gate+".weight"), m.get(p+up+".weight"), m.get(p+down+".weight"))
}

// moe is KimiSparseMoeBlock on one token under prefix p.
func (m *Model) moe(p string, x []float64) []float64 {
	c := m.C
	logits := lmckpt.Linear64(x, m.get(p+"gate.weight"), nil)
	scores := make([]float64, len(logits))
	if c.Softmax {
		scores = lmckpt.Softmax64(logits)
	} else {
		for i, v := range logits {
			scores[i] = sigmoid(v)
		}
	}
	bias := m.get(p + "gate.e_score_correction_bias")
	choice := make([]float64, c.Experts)
	for i := range choice {
		choice[i] = scores[i] + bias[i]
	}
	// Groups ranked by the sum of their two best choices; the others'
	// choices set to 0 (masked_fill).
	per := c.Experts / c.Groups
	groupScore := make([]float64, c.Groups)
	for g := range groupScore {
		top := lmckpt.TopK64(choice[g*per:(g+1)*per], min(2, per))
		for _, j := range top {
			groupScore[g] += choice[g*per+j]
		}
	}
	kept := lmckpt.TopK64(groupScore, c.TopKGroup)
	masked := make([]float64, c.Experts)
	for _, g := range kept {
		copy(masked[g*per:(g+1)*per], choice[g*per:(g+1)*per])
	}
	top := lmckpt.TopK64(masked, c.TopK)
	weights := make([]float64, len(top))
	sum := 0.0
	for i, e := range top {
		weights[i] = scores[e]
		if m.BiasedWeights {
			weights[i] = choice[e]
		}
		sum += weights[i]
	}
	for i := range weights {
		if c.TopK > 1 && c.Renorm {
			weights[i] /= sum + 1e-20
		}
		weights[i] *= c.Scale
	}
	out := make([]float64, c.Hidden)
	for i, e := range top {
		for j, v := range m.swiglu(fmt.Sprintf("%sexperts.%d.", p, e), "w1", "w3", "w2", x) {
			out[j] += weights[i] * v
		}
	}
	if c.Shared > 0 {
		for j, v := range m.swiglu(p+"shared_experts.", "gate_proj", "up_proj", "down_proj", x) {
			out[j] += v
		}
	}
	return out
}

// kda is KimiDeltaAttention over a sequence of normed inputs h [T][H].
func (m *Model) kda(p string, h [][]float64) [][]float64 {
	c := m.C
	heads, D, K := c.KDAHeads, c.KDADim, c.Conv
	hd := heads * D
	T := len(h)
	// ShortConvolution: a causal depthwise convolution of each projection
	// over time (zeros before the first token), then SiLU.
	conv := func(name string) [][]float64 {
		raw := make([][]float64, T)
		for t := range h {
			raw[t] = lmckpt.Linear64(h[t], m.get(p+name+"_proj.weight"), nil)
		}
		w := m.get(p + name + "_conv1d.weight") // [hd, 1, K]
		out := make([][]float64, T)
		for t := range out {
			out[t] = make([]float64, hd)
			for ch := 0; ch < hd; ch++ {
				s := 0.0
				for j := 0; j < K; j++ {
					if src := t - (K - 1) + j; src >= 0 {
						s += w[ch*K+j] * raw[src][ch]
					}
				}
				out[t][ch] = lmckpt.SiLU64(s)
			}
		}
		return out
	}
	q, k, v := conv("q"), conv("k"), conv("v")
	aLog, dtBias, normW := m.get(p+"A_log"), m.get(p+"dt_bias"), m.get(p+"o_norm.weight")
	S := make([][]float64, heads) // [heads][D(k)·D(v)]
	for i := range S {
		S[i] = make([]float64, D*D)
	}
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		f := lmckpt.Linear64(lmckpt.Linear64(h[t], m.get(p+"f_a_proj.weight"), nil), m.get(p+"f_b_proj.weight"), nil)
		bl := lmckpt.Linear64(h[t], m.get(p+"b_proj.weight"), nil)
		gate := lmckpt.Linear64(lmckpt.Linear64(h[t], m.get(p+"g_a_proj.weight"), nil), m.get(p+"g_b_proj.weight"), nil)
		o := make([]float64, hd)
		for hh := 0; hh < heads; hh++ {
			g := make([]float64, D)
			mean := 0.0
			for d := 0; d < D; d++ {
				g[d] = -math.Exp(aLog[hh]) * softplus(f[hh*D+d]+dtBias[hh*D+d])
				mean += g[d] / float64(D)
			}
			if m.ScalarDecay {
				for d := range g {
					g[d] = mean
				}
			}
			beta := sigmoid(bl[hh])
			qh := l2norm(q[t][hh*D : (hh+1)*D])
			kh := l2norm(k[t][hh*D : (hh+1)*D])
			vh := v[t][hh*D : (hh+1)*D]
			s := S[hh]
			for i := 0; i < D; i++ { // S = diag(exp(g)) S
				for j := 0; j < D; j++ {
					s[i*D+j] *= math.Exp(g[i])
				}
			}
			for j := 0; j < D; j++ { // S += β k (v - Sᵀk)ᵀ
				mem := 0.0
				for i := 0; i < D; i++ {
					mem += s[i*D+j] * kh[i]
				}
				delta := beta * (vh[j] - mem)
				for i := 0; i < D; i++ {
					s[i*D+j] += kh[i] * delta
				}
			}
			oh := make([]float64, D) // Sᵀ (q / sqrt(D))
			for j := 0; j < D; j++ {
				for i := 0; i < D; i++ {
					oh[j] += s[i*D+j] * qh[i] / math.Sqrt(float64(D))
				}
			}
			oh = lmckpt.RMSNorm64(oh, normW, c.Eps)
			for j := range oh {
				gt := gate[hh*D+j]
				if m.SiLUGate {
					oh[j] *= lmckpt.SiLU64(gt)
				} else {
					oh[j] *= sigmoid(gt)
				}
			}
			copy(o[hh*D:], oh)
		}
		out[t] = lmckpt.Linear64(o, m.get(p+"o_proj.weight"), nil)
	}
	return out
}

// mla is KimiMLAAttention over normed inputs h [T][H], kv_b_proj
// expanded into every head's keys and values.
func (m *Model) mla(p string, h [][]float64) [][]float64 {
	c := m.C
	dq := c.QKNope + c.QKRope
	T := len(h)
	q, k, v := make([][][]float64, T), make([][][]float64, T), make([][][]float64, T)
	for t := range h {
		qa := lmckpt.Linear64(h[t], m.get(p+"q_proj.weight"), nil)
		ckv := lmckpt.Linear64(h[t], m.get(p+"kv_a_proj_with_mqa.weight"), nil)
		latent := lmckpt.RMSNorm64(ckv[:c.KVLora], m.get(p+"kv_a_layernorm.weight"), 1e-6)
		kRot := ckv[c.KVLora:]
		if m.Rope {
			kRot = lmckpt.RotateHalf64(kRot, t, 10000, c.QKRope)
		}
		kv := lmckpt.Linear64(latent, m.get(p+"kv_b_proj.weight"), nil) // [heads·(nope + v)]
		q[t], k[t], v[t] = make([][]float64, c.Heads), make([][]float64, c.Heads), make([][]float64, c.Heads)
		for hh := 0; hh < c.Heads; hh++ {
			qh := append([]float64(nil), qa[hh*dq:(hh+1)*dq]...)
			if m.Rope {
				copy(qh[c.QKNope:], lmckpt.RotateHalf64(qh[c.QKNope:], t, 10000, c.QKRope))
			}
			q[t][hh] = qh
			row := kv[hh*(c.QKNope+c.VHead) : (hh+1)*(c.QKNope+c.VHead)]
			k[t][hh] = append(append([]float64(nil), row[:c.QKNope]...), kRot...)
			v[t][hh] = row[c.QKNope:]
		}
	}
	// Causal softmax attention, each head over its own keys and values
	// (the values narrower than the keys).
	out := make([][]float64, T)
	for t := range out {
		att := make([]float64, c.Heads*c.VHead)
		for hh := 0; hh < c.Heads; hh++ {
			scores := make([]float64, t+1)
			for s := range scores {
				for i, qi := range q[t][hh] {
					scores[s] += qi * k[s][hh][i]
				}
				scores[s] /= math.Sqrt(float64(dq))
			}
			for s, w := range lmckpt.Softmax64(scores) {
				for i, vi := range v[s][hh] {
					att[hh*c.VHead+i] += w * vi
				}
			}
		}
		out[t] = lmckpt.Linear64(att, m.get(p+"o_proj.weight"), nil)
	}
	return out
}

// Logits runs tokens (positions 0, 1, ...) and returns the logits after
// every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), m.get("model.embed_tokens.weight")[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
		}
		var a [][]float64
		if c.KDA(l) {
			a = m.kda(p+"self_attn.", h)
		} else {
			a = m.mla(p+"self_attn.", h)
		}
		for t := range x {
			for i := range x[t] {
				x[t][i] += a[t][i]
			}
			hn := lmckpt.RMSNorm64(x[t], m.get(p+"post_attention_layernorm.weight"), c.Eps)
			var y []float64
			if c.Sparse(l) {
				y = m.moe(p+"block_sparse_moe.", hn)
			} else {
				y = m.swiglu(p+"mlp.", "gate_proj", "up_proj", "down_proj", hn)
			}
			for i := range x[t] {
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
