// Package gemma4ref is a plain-Go float64 forward pass of the Gemma 4 text
// model written from transformers' models/gemma4/modeling_gemma4.py and
// its proportional RoPE (modeling_rope_utils.py), in the style of
// pipeline/testkit/qwenref: one sequence, no caches, no padding, the KV
// sharing done as transformers does it (a dict of the feeding layers'
// keys and values), and no code shared with pipeline/nn or
// pipeline/gemma4. It also writes the tiny checkpoints the tests use, with
// the real tensor names (model.language_model.* under a text_config, or
// model.* for Gemma4ForCausalLM).
package gemma4ref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Config describes a tiny Gemma 4.
type Config struct {
	Vocab, Hidden, Intermediate      int
	Heads, KVHeads, HeadDim          int
	GlobalHeadDim, GlobalKVHeads     int
	Types                            []string // "s" sliding, "f" full
	Window                           int
	SlidingTheta, FullTheta, FullPRF float64
	KEqV                             bool
	SharedLayers                     int
	DoubleWide                       bool
	PLE                              int // hidden_size_per_layer_input (0: none)
	Experts, TopK, MoEIntermediate   int
	Softcap, Eps                     float64
	CausalLM                         bool // Gemma4ForCausalLM, flat config, model.* names
	PerLayerConfig                   bool // write the per_layer_config form
	Seed                             uint64
	DType                            safetensors.DType
}

// TinyE is shaped like E2B/E4B: per-layer embeddings, the last two layers
// sharing the keys and values of layers 2 (full) and 3 (sliding), double-
// wide MLPs there, one KV head.
func TinyE() Config {
	return Config{
		Vocab: 96, Hidden: 32, Intermediate: 48, Heads: 4, KVHeads: 1, HeadDim: 16, GlobalHeadDim: 32,
		Types: []string{"s", "s", "f", "s", "s", "f"}, Window: 3, SlidingTheta: 10000, FullTheta: 1e6, FullPRF: 0.25,
		SharedLayers: 2, DoubleWide: true, PLE: 8, Softcap: 30, Eps: 1e-6, Seed: 4,
	}
}

// TinyMoE is shaped like 26B-A4B: routed experts beside the dense MLP, k=v
// on full layers with their own KV heads, no PLE, no sharing.
func TinyMoE() Config {
	return Config{
		Vocab: 96, Hidden: 32, Intermediate: 24, Heads: 4, KVHeads: 2, HeadDim: 16, GlobalHeadDim: 32, GlobalKVHeads: 1,
		Types: []string{"s", "f", "s", "f"}, Window: 3, SlidingTheta: 10000, FullTheta: 1e6, FullPRF: 0.25,
		KEqV: true, Experts: 6, TopK: 2, MoEIntermediate: 16, Softcap: 30, Eps: 1e-6, Seed: 26,
	}
}

func (c Config) layers() int { return len(c.Types) }

// layer is one layer's resolved shape.
type layer struct {
	full        bool
	headDim, kv int
	keqv        bool
	source      int // -1 unless KV-shared
	feeds       bool
	inter       int
}

func (c Config) shape() []layer {
	L := c.layers()
	first := L - c.SharedLayers
	out := make([]layer, L)
	for i := range out {
		l := layer{full: c.Types[i] == "f", headDim: c.HeadDim, kv: c.KVHeads, source: -1, inter: c.Intermediate}
		if l.full {
			l.headDim, l.keqv = c.GlobalHeadDim, c.KEqV
			if c.KEqV && c.GlobalKVHeads > 0 {
				l.kv = c.GlobalKVHeads
			}
		}
		if i >= first {
			for j := first - 1; j >= 0; j-- {
				if c.Types[j] == c.Types[i] {
					l.source = j
					break
				}
			}
			l.headDim, l.kv = out[l.source].headDim, out[l.source].kv
			out[l.source].feeds = true
			if c.DoubleWide {
				l.inter *= 2
			}
		}
		out[i] = l
	}
	return out
}

func (c Config) prefix() string {
	if c.CausalLM {
		return "model."
	}
	return "model.language_model."
}

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Config) tensors() []tensor {
	H, L := c.Hidden, c.layers()
	p := c.prefix()
	out := []tensor{{p + "embed_tokens.weight", []int{c.Vocab, H}, "embed"}}
	if c.PLE > 0 {
		out = append(out,
			tensor{p + "embed_tokens_per_layer.weight", []int{c.Vocab, L * c.PLE}, "embed"},
			tensor{p + "per_layer_model_projection.weight", []int{L * c.PLE, H}, "linear"},
			tensor{p + "per_layer_projection_norm.weight", []int{c.PLE}, "norm"})
	}
	for i, l := range c.shape() {
		q := fmt.Sprintf("%slayers.%d.", p, i)
		add := func(name, init string, shape ...int) { out = append(out, tensor{q + name, shape, init}) }
		add("input_layernorm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*l.headDim, H)
		add("self_attn.q_norm.weight", "norm", l.headDim)
		if l.source < 0 {
			add("self_attn.k_proj.weight", "linear", l.kv*l.headDim, H)
			if !l.keqv {
				add("self_attn.v_proj.weight", "linear", l.kv*l.headDim, H)
			}
			add("self_attn.k_norm.weight", "norm", l.headDim)
		}
		add("self_attn.o_proj.weight", "linear", H, c.Heads*l.headDim)
		add("post_attention_layernorm.weight", "norm", H)
		add("pre_feedforward_layernorm.weight", "norm", H)
		add("mlp.gate_proj.weight", "linear", l.inter, H)
		add("mlp.up_proj.weight", "linear", l.inter, H)
		add("mlp.down_proj.weight", "linear", H, l.inter)
		add("post_feedforward_layernorm.weight", "norm", H)
		if c.Experts > 0 {
			add("router.proj.weight", "embed", c.Experts, H)
			add("router.scale", "norm", H)
			add("router.per_expert_scale", "norm", c.Experts)
			add("experts.gate_up_proj", "linear", c.Experts, 2*c.MoEIntermediate, H)
			add("experts.down_proj", "linear", c.Experts, H, c.MoEIntermediate)
			add("pre_feedforward_layernorm_2.weight", "norm", H)
			add("post_feedforward_layernorm_1.weight", "norm", H)
			add("post_feedforward_layernorm_2.weight", "norm", H)
		}
		if c.PLE > 0 {
			add("per_layer_input_gate.weight", "linear", c.PLE, H)
			add("per_layer_projection.weight", "linear", H, c.PLE)
			add("post_per_layer_input_norm.weight", "norm", H)
		}
		add("layer_scalar", "scalar", 1)
	}
	out = append(out, tensor{p + "norm.weight", []int{H}, "norm"})
	if !c.CausalLM {
		out = append(out, tensor{"model.vision_tower.encoder.layers.0.mlp.up_proj.weight", []int{4, 4}, "linear"})
	}
	return out
}

// ConfigJSON is config.json in the layout of the real ones.
func (c Config) ConfigJSON() map[string]any {
	types := make([]string, c.layers())
	for i, t := range c.Types {
		types[i] = map[string]string{"s": "sliding_attention", "f": "full_attention"}[t]
	}
	text := map[string]any{
		"model_type": "gemma4_text", "vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate,
		"num_hidden_layers": c.layers(), "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 512,
		"rms_norm_eps": c.Eps, "sliding_window": c.Window, "layer_types": types, "final_logit_softcapping": c.Softcap,
		"attention_k_eq_v": c.KEqV, "num_kv_shared_layers": c.SharedLayers, "use_double_wide_mlp": c.DoubleWide,
		"enable_moe_block": c.Experts > 0, "tie_word_embeddings": true, "attention_bias": false,
		"rope_parameters": map[string]any{
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": c.SlidingTheta},
			"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": c.FullPRF, "rope_theta": c.FullTheta},
		},
		"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
	}
	if c.PLE > 0 {
		text["hidden_size_per_layer_input"], text["vocab_size_per_layer_input"] = c.PLE, c.Vocab
	} else {
		text["hidden_size_per_layer_input"] = nil
	}
	if c.Experts > 0 {
		text["num_experts"], text["top_k_experts"], text["moe_intermediate_size"] = c.Experts, c.TopK, c.MoEIntermediate
	}
	if c.PerLayerConfig {
		plc := map[string]any{}
		for i, l := range c.shape() {
			if l.full {
				o := map[string]any{"head_dim": c.GlobalHeadDim}
				if c.KEqV && c.GlobalKVHeads > 0 {
					o["num_key_value_heads"] = c.GlobalKVHeads
				}
				plc[fmt.Sprint(i)] = o
			}
		}
		text["per_layer_config"] = plc
	} else {
		text["global_head_dim"] = c.GlobalHeadDim
		if c.GlobalKVHeads > 0 {
			text["num_global_key_value_heads"] = c.GlobalKVHeads
		}
	}
	if c.CausalLM {
		text["architectures"] = []string{"Gemma4ForCausalLM"}
		return text
	}
	return map[string]any{
		"architectures": []string{"Gemma4ForConditionalGeneration"}, "model_type": "gemma4",
		"text_config": text, "vision_config": map[string]any{"hidden_size": 4}, "tie_word_embeddings": true,
	}
}

// Write writes the checkpoint to dir.
func (c Config) Write(dir string) error {
	dt := c.DType
	if dt == "" {
		dt = safetensors.F32
	}
	r := lmckpt.NewRand(c.Seed)
	var ts []safetensors.Tensor
	for _, t := range c.tensors() {
		n := 1
		for _, d := range t.shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			u := r.Uniform()
			switch t.init {
			case "linear":
				v[i] = float32(u / math.Sqrt(float64(t.shape[len(t.shape)-1])))
			case "embed":
				v[i] = float32(u)
			case "norm":
				v[i] = float32(1 + 0.2*u)
			case "scalar":
				v[i] = float32(0.8 + 0.1*u)
			}
		}
		st, err := safetensors.Float32Tensor(t.name, dt, t.shape, v)
		if err != nil {
			return err
		}
		ts = append(ts, st)
	}
	return lmckpt.WriteCheckpoint(dir, c.ConfigJSON(), ts)
}

// Model is a loaded reference.
type Model struct {
	C Config
	W map[string][]float64
	// Mutations, for tests that show a check can fail.
	NoSharing, FirstDimsRope, NoPLE, NoPerExpertScale bool
}

// Load reads a checkpoint written by Write.
func Load(dir string, c Config) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	return &Model{C: c, W: w}, nil
}

func (m *Model) get(name string) []float64 {
	v, ok := m.W[m.C.prefix()+name]
	if !ok {
		panic(fmt.Sprintf("gemma4ref: no tensor %q", m.C.prefix()+name))
	}
	return v
}

// Logits runs the whole sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	T, H, L := len(tokens), c.Hidden, c.layers()
	emb := m.get("embed_tokens.weight")
	x := make([][]float64, T)
	for t, id := range tokens {
		x[t] = scale(emb[id*H:(id+1)*H], math.Sqrt(float64(H)))
	}
	var ple [][]float64 // [T][L*P]
	if c.PLE > 0 && !m.NoPLE {
		P := c.PLE
		tab := m.get("embed_tokens_per_layer.weight")
		ple = make([][]float64, T)
		for t, id := range tokens {
			proj := scale(linear(x[t], m.get("per_layer_model_projection.weight"), L*P), 1/math.Sqrt(float64(H)))
			ple[t] = make([]float64, L*P)
			for l := 0; l < L; l++ {
				n := rmsnorm(proj[l*P:(l+1)*P], m.get("per_layer_projection_norm.weight"), c.Eps)
				for i := 0; i < P; i++ {
					ple[t][l*P+i] = (n[i] + tab[id*L*P+l*P+i]*math.Sqrt(float64(P))) / math.Sqrt2
				}
			}
		}
	}
	shared := map[bool][2][][]float64{} // kind (full?) -> keys, values [T][KV*D] of the feeding layer
	for li, l := range c.shape() {
		p := fmt.Sprintf("layers.%d.", li)
		D := l.headDim
		inv := m.invFreq(l)
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range x {
			h := rmsnorm(x[t], m.get(p+"input_layernorm.weight"), c.Eps)
			q[t] = linear(h, m.get(p+"self_attn.q_proj.weight"), c.Heads*D)
			for hd := 0; hd < c.Heads; hd++ {
				head := q[t][hd*D : (hd+1)*D]
				copy(head, rmsnorm(head, m.get(p+"self_attn.q_norm.weight"), c.Eps))
				rope(head, t, inv)
			}
			if l.source >= 0 { // shares the feeding layer's keys and values
				continue
			}
			k[t] = linear(h, m.get(p+"self_attn.k_proj.weight"), l.kv*D)
			if l.keqv {
				v[t] = append([]float64(nil), k[t]...)
			} else {
				v[t] = linear(h, m.get(p+"self_attn.v_proj.weight"), l.kv*D)
			}
			for hd := 0; hd < l.kv; hd++ {
				kh := k[t][hd*D : (hd+1)*D]
				copy(kh, rmsnorm(kh, m.get(p+"self_attn.k_norm.weight"), c.Eps))
				rope(kh, t, inv)
				vh := v[t][hd*D : (hd+1)*D]
				copy(vh, rmsnorm(vh, nil, c.Eps))
			}
		}
		if l.source >= 0 {
			kv := shared[l.full]
			k, v = kv[0], kv[1]
			if m.NoSharing { // mutation: attend over zero keys and values instead
				k, v = zeros(T, l.kv*D), zeros(T, l.kv*D)
			}
		} else if l.feeds {
			shared[l.full] = [2][][]float64{k, v}
		}
		window := 0
		if !l.full {
			window = c.Window
		}
		a := attend(q, k, v, c.Heads, l.kv, D, window)
		for t := range x {
			o := linear(a[t], m.get(p+"self_attn.o_proj.weight"), H)
			o = rmsnorm(o, m.get(p+"post_attention_layernorm.weight"), c.Eps)
			for i := range o {
				x[t][i] += o[i]
			}
			res := append([]float64(nil), x[t]...)
			f := m.mlp(p, rmsnorm(res, m.get(p+"pre_feedforward_layernorm.weight"), c.Eps), l.inter)
			if c.Experts > 0 {
				f = rmsnorm(f, m.get(p+"post_feedforward_layernorm_1.weight"), c.Eps)
				e := m.moe(p, res)
				for i := range f {
					f[i] += e[i]
				}
			}
			f = rmsnorm(f, m.get(p+"post_feedforward_layernorm.weight"), c.Eps)
			for i := range f {
				x[t][i] = res[i] + f[i]
			}
			if c.PLE > 0 {
				P := c.PLE
				g := linear(x[t], m.get(p+"per_layer_input_gate.weight"), P)
				for i := range g {
					g[i] = gelu(g[i])
					if ple != nil {
						g[i] *= ple[t][li*P+i]
					} else {
						g[i] = 0
					}
				}
				y := rmsnorm(linear(g, m.get(p+"per_layer_projection.weight"), H), m.get(p+"post_per_layer_input_norm.weight"), c.Eps)
				for i := range y {
					x[t][i] += y[i]
				}
			}
			s := m.get(p + "layer_scalar")[0]
			for i := range x[t] {
				x[t][i] *= s
			}
		}
	}
	out := make([][]float64, T)
	for t := range x {
		lg := linear(rmsnorm(x[t], m.get("norm.weight"), c.Eps), emb, c.Vocab)
		for i := range lg {
			lg[i] = c.Softcap * math.Tanh(lg[i]/c.Softcap)
		}
		out[t] = lg
	}
	return out
}

// invFreq is the layer's inverse frequencies over head_dim/2 pairs:
// default RoPE for sliding layers, proportional for full ones (the first
// int(prf·D/2) pairs at base^(−2i/D), the rest zero).
func (m *Model) invFreq(l layer) []float64 {
	c := m.C
	D := l.headDim
	inv := make([]float64, D/2)
	if !l.full {
		for i := range inv {
			inv[i] = math.Pow(c.SlidingTheta, -float64(2*i)/float64(D))
		}
		return inv
	}
	n := int(math.Floor(c.FullPRF * float64(D) / 2))
	for i := 0; i < n; i++ {
		if m.FirstDimsRope { // mutation: partial RoPE over the first dims' own width instead
			inv[i] = math.Pow(c.FullTheta, -float64(2*i)/float64(2*n))
		} else {
			inv[i] = math.Pow(c.FullTheta, -float64(2*i)/float64(D))
		}
	}
	return inv
}

func (m *Model) mlp(p string, x []float64, inter int) []float64 {
	g := linear(x, m.get(p+"mlp.gate_proj.weight"), inter)
	u := linear(x, m.get(p+"mlp.up_proj.weight"), inter)
	for i := range g {
		g[i] = gelu(g[i]) * u[i]
	}
	return linear(g, m.get(p+"mlp.down_proj.weight"), len(x))
}

// moe is Gemma4TextRouter plus Gemma4TextExperts on one token's residual,
// through pre_feedforward_layernorm_2 and post_feedforward_layernorm_2.
func (m *Model) moe(p string, res []float64) []float64 {
	c := m.C
	H, E, I := c.Hidden, c.Experts, c.MoEIntermediate
	r := rmsnorm(res, nil, c.Eps)
	sc := m.get(p + "router.scale")
	for i := range r {
		r[i] *= sc[i] / math.Sqrt(float64(H))
	}
	probs := linear(r, m.get(p+"router.proj.weight"), E)
	softmax(probs)
	taken := make([]bool, E)
	ids, ws := make([]int, c.TopK), make([]float64, c.TopK)
	sum := 0.0
	for j := range ids {
		best := -1
		for e, v := range probs {
			if !taken[e] && (best < 0 || v > probs[best]) {
				best = e
			}
		}
		taken[best], ids[j], ws[j] = true, best, probs[best]
		sum += probs[best]
	}
	pes := m.get(p + "router.per_expert_scale")
	xin := rmsnorm(res, m.get(p+"pre_feedforward_layernorm_2.weight"), c.Eps)
	gu, dn := m.get(p+"experts.gate_up_proj"), m.get(p+"experts.down_proj")
	out := make([]float64, H)
	for j, e := range ids {
		w := ws[j] / sum
		if !m.NoPerExpertScale {
			w *= pes[e]
		}
		y := linear(xin, gu[e*2*I*H:(e+1)*2*I*H], 2*I)
		hid := make([]float64, I)
		for i := range hid {
			hid[i] = gelu(y[i]) * y[I+i]
		}
		d := linear(hid, dn[e*H*I:(e+1)*H*I], H)
		for i := range out {
			out[i] += w * d[i]
		}
	}
	return rmsnorm(out, m.get(p+"post_feedforward_layernorm_2.weight"), c.Eps)
}

func scale(v []float64, s float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * s
	}
	return out
}

func zeros(t, n int) [][]float64 {
	out := make([][]float64, t)
	for i := range out {
		out[i] = make([]float64, n)
	}
	return out
}

// rmsnorm is Gemma4RMSNorm: x / sqrt(mean(x²) + eps), times w when given.
func rmsnorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := math.Pow(ss/float64(len(x))+eps, -0.5)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * inv
		if w != nil {
			out[i] *= w[i]
		}
	}
	return out
}

func linear(x, w []float64, out int) []float64 {
	n := len(x)
	y := make([]float64, out)
	for o := range y {
		s := 0.0
		for i, v := range x {
			s += w[o*n+i] * v
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

// gelu is the tanh approximation (gelu_pytorch_tanh).
func gelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// rope is apply_rotary_pos_emb on one head: rotate_half pairs i with
// i + D/2, each pair turning at inv[i].
func rope(v []float64, pos int, inv []float64) {
	half := len(inv)
	for i, f := range inv {
		c, s := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		x1, x2 := v[i], v[i+half]
		v[i] = x1*c - x2*s
		v[i+half] = x2*c + x1*s
	}
}

// attend is causal attention, scale 1.0, with a window on sliding layers.
func attend(q, k, v [][]float64, heads, kvHeads, d, window int) [][]float64 {
	group := heads / kvHeads
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
				scores, at = append(scores, dot), append(at, s)
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
