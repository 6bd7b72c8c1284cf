// Package gemma3nref is a plain-Go float64 forward pass of the Gemma 3n
// text model written from transformers' models/gemma3n/modeling_gemma3n.py
// (Gemma3nTextModel, Gemma3nTextDecoderLayer, Gemma3nTextAltUp,
// Gemma3nTextLaurelBlock, Gemma3nTextMLP's Gaussian top-k): one sequence,
// no caches, no padding, the AltUp streams as a [N][T][H] array, and no
// code shared with pipeline/gemma3n. It also writes the tiny checkpoints
// the tests use, with the real tensor names (model.language_model.* under
// a text_config, or model.* for Gemma3nForCausalLM).
package gemma3nref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Config describes a tiny Gemma 3n.
type Config struct {
	Vocab, PLEVocab, Hidden int
	Intermediate            []int // one a layer
	Heads, KVHeads, HeadDim int
	Types                   []string // "s" sliding, "f" full
	Window                  int
	SlidingTheta, FullTheta float64
	SharedLayers            int
	PLE                     int
	Streams, Laurel         int
	CoefClip                float64
	Sparsity                []float64 // one a layer
	Softcap, Eps            float64
	CausalLM                bool // Gemma3nForCausalLM, flat config, model.* names
	Seed                    uint64
}

// Tiny is shaped like E2B: 4 sliding layers to 1 full, the last two
// layers sharing the keys and values of layers 3 (sliding) and 4 (full),
// the first two layers' MLPs sparse, layer widths that differ, a
// per-layer vocabulary smaller than the model's, and an altup_coef_clip
// (0.25) that some coefficients pass.
func Tiny() Config {
	return Config{
		Vocab: 96, PLEVocab: 80, Hidden: 32, Intermediate: []int{48, 48, 40, 48, 48, 48, 48},
		Heads: 4, KVHeads: 2, HeadDim: 16,
		Types:  []string{"s", "s", "s", "s", "f", "s", "f"},
		Window: 3, SlidingTheta: 10000, FullTheta: 1e6, SharedLayers: 2, PLE: 8, Streams: 4, Laurel: 4,
		CoefClip: 0.25, Sparsity: []float64{0.95, 0.8, 0, 0, 0, 0, 0}, Softcap: 30, Eps: 1e-6, Seed: 3,
	}
}

func (c Config) layers() int { return len(c.Types) }

// source is the layer whose keys and values layer i reads (the last
// unshared layer of its kind), or -1.
func (c Config) source(i int) int {
	first := c.layers() - c.SharedLayers
	if first <= 0 || i < first {
		return -1
	}
	for j := first - 1; j >= 0; j-- {
		if c.Types[j] == c.Types[i] {
			return j
		}
	}
	return -1
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
	H, L, N := c.Hidden, c.layers(), c.Streams
	p := c.prefix()
	out := []tensor{
		{p + "embed_tokens.weight", []int{c.Vocab, H}, "embed"},
		{p + "embed_tokens_per_layer.weight", []int{c.PLEVocab, L * c.PLE}, "embed"},
		{p + "per_layer_model_projection.weight", []int{L * c.PLE, H}, "linear"},
		{p + "per_layer_projection_norm.weight", []int{c.PLE}, "norm"},
	}
	for k := 0; k < N-1; k++ {
		out = append(out, tensor{fmt.Sprintf("%saltup_projections.%d.weight", p, k), []int{H, H}, "linear"})
	}
	for k := 0; k < N-1; k++ {
		out = append(out, tensor{fmt.Sprintf("%saltup_unembed_projections.%d.weight", p, k), []int{H, H}, "linear"})
	}
	for i := 0; i < L; i++ {
		q := fmt.Sprintf("%slayers.%d.", p, i)
		add := func(name, init string, shape ...int) { out = append(out, tensor{q + name, shape, init}) }
		add("altup.correct_output_scale", "norm", H)
		add("altup.correction_coefs.weight", "coef", N, N)
		add("altup.prediction_coefs.weight", "coef", N*N, N)
		add("altup.modality_router.weight", "router", N, H)
		add("altup.router_norm.weight", "norm", H)
		add("input_layernorm.weight", "norm", H)
		add("laurel.linear_left.weight", "linear", c.Laurel, H)
		add("laurel.linear_right.weight", "linear", H, c.Laurel)
		add("laurel.post_laurel_norm.weight", "norm", H)
		add("self_attn.q_proj.weight", "linear", c.Heads*c.HeadDim, H)
		add("self_attn.q_norm.weight", "norm", c.HeadDim)
		// The releases hold k/v weights on the sharing layers too.
		add("self_attn.k_proj.weight", "linear", c.KVHeads*c.HeadDim, H)
		add("self_attn.v_proj.weight", "linear", c.KVHeads*c.HeadDim, H)
		add("self_attn.k_norm.weight", "norm", c.HeadDim)
		add("self_attn.o_proj.weight", "linear", H, c.Heads*c.HeadDim)
		add("post_attention_layernorm.weight", "norm", H)
		add("pre_feedforward_layernorm.weight", "norm", H)
		add("mlp.gate_proj.weight", "linear", c.Intermediate[i], H)
		add("mlp.up_proj.weight", "linear", c.Intermediate[i], H)
		add("mlp.down_proj.weight", "linear", H, c.Intermediate[i])
		add("post_feedforward_layernorm.weight", "norm", H)
		add("per_layer_input_gate.weight", "linear", c.PLE, H)
		add("per_layer_projection.weight", "linear", H, c.PLE)
		add("post_per_layer_input_norm.weight", "norm", H)
	}
	out = append(out, tensor{p + "norm.weight", []int{H}, "norm"})
	if !c.CausalLM {
		out = append(out, tensor{"model.vision_tower.timm_model.conv_stem.conv.weight", []int{4, 4}, "linear"},
			tensor{"model.embed_audio.embedding.weight", []int{4, 4}, "linear"})
	}
	return out
}

// ConfigJSON is config.json in the layout of the releases (the legacy
// rope_theta and rope_local_base_freq keys, intermediate_size a list).
func (c Config) ConfigJSON() map[string]any {
	types := make([]string, c.layers())
	for i, t := range c.Types {
		types[i] = map[string]string{"s": "sliding_attention", "f": "full_attention"}[t]
	}
	text := map[string]any{
		"model_type": "gemma3n_text", "vocab_size": c.Vocab, "vocab_size_per_layer_input": c.PLEVocab, "hidden_size": c.Hidden,
		"hidden_size_per_layer_input": c.PLE, "intermediate_size": c.Intermediate, "num_hidden_layers": c.layers(),
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 512, "rms_norm_eps": c.Eps,
		"sliding_window": c.Window, "layer_types": types, "final_logit_softcapping": c.Softcap,
		"num_kv_shared_layers": c.SharedLayers, "altup_num_inputs": c.Streams, "altup_active_idx": 0,
		"altup_coef_clip": c.CoefClip, "altup_correct_scale": true, "laurel_rank": c.Laurel,
		"activation_sparsity_pattern": c.Sparsity, "rope_theta": c.FullTheta, "rope_local_base_freq": c.SlidingTheta,
		"rope_scaling": nil, "query_pre_attn_scalar": c.HeadDim, "attention_bias": false,
		"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
	}
	if c.CausalLM {
		text["architectures"] = []string{"Gemma3nForCausalLM"}
		return text
	}
	return map[string]any{
		"architectures": []string{"Gemma3nForConditionalGeneration"}, "model_type": "gemma3n",
		"text_config": text, "vision_config": map[string]any{"hidden_size": 4}, "audio_config": map[string]any{"hidden_size": 4},
	}
}

// Write writes the checkpoint to dir (float32).
func (c Config) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
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
			case "coef": // small mixing coefficients, as trained ones are
				v[i] = float32(0.3 * u)
			case "router":
				v[i] = float32(2 * u)
			}
		}
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: v})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}, ts)
}

// Model is a loaded reference.
type Model struct {
	C Config
	W map[string][]float64
	// Mutations, for tests that show a check can fail.
	NoSparsity, NoLaurel, PLEOnFirstStream, PredictTransposed, NoCorrectScale, ClipPrediction, NoClip bool
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
		panic(fmt.Sprintf("gemma3nref: no tensor %q", m.C.prefix()+name))
	}
	return v
}

func (m *Model) norm(x []float64, w string) []float64 {
	var wv []float64
	if w != "" {
		wv = m.get(w)
	}
	return lmckpt.RMSNorm64(x, wv, m.C.Eps)
}

// Logits runs the whole sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	T, H, L, N, P := len(tokens), c.Hidden, c.layers(), c.Streams, c.PLE
	emb := m.get("embed_tokens.weight")
	x0 := make([][]float64, T)
	for t, id := range tokens {
		x0[t] = scale(emb[id*H:(id+1)*H], math.Sqrt(float64(H)))
	}
	// Per-layer inputs (Gemma3nModel masks ids past the per-layer vocabulary to 0).
	tab := m.get("embed_tokens_per_layer.weight")
	ple := make([][]float64, T)
	for t, id := range tokens {
		if id >= c.PLEVocab {
			id = 0
		}
		proj := scale(lmckpt.Linear64(x0[t], m.get("per_layer_model_projection.weight"), nil), 1/math.Sqrt(float64(H)))
		ple[t] = make([]float64, L*P)
		for l := 0; l < L; l++ {
			n := m.norm(proj[l*P:(l+1)*P], "per_layer_projection_norm.weight")
			for i := 0; i < P; i++ {
				ple[t][l*P+i] = (n[i] + tab[id*L*P+l*P+i]*math.Sqrt(float64(P))) / math.Sqrt2
			}
		}
	}
	// The streams: the embedding, and its projections at its magnitude.
	hs := make([][][]float64, N)
	hs[0] = x0
	for k := 1; k < N; k++ {
		hs[k] = make([][]float64, T)
		for t := range x0 {
			hs[k][t] = magnitude(lmckpt.Linear64(x0[t], m.get(fmt.Sprintf("altup_projections.%d.weight", k-1)), nil), x0[t])
		}
	}
	kvOf := map[int][2][][][]float64{} // layer -> its keys and values [T][KV][D]
	for li := 0; li < L; li++ {
		hs = m.layer(li, hs, ple, kvOf)
	}
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		avg := append([]float64(nil), hs[0][t]...)
		for k := 1; k < N; k++ {
			u := magnitude(lmckpt.Linear64(hs[k][t], m.get(fmt.Sprintf("altup_unembed_projections.%d.weight", k-1)), nil), hs[0][t])
			for i := range avg {
				avg[i] += u[i]
			}
		}
		for i := range avg {
			avg[i] /= float64(N)
		}
		lg := lmckpt.Linear64(m.norm(avg, "norm.weight"), emb, nil)
		for i := range lg {
			lg[i] = c.Softcap * math.Tanh(lg[i]/c.Softcap)
		}
		out[t] = lg
	}
	return out
}

// router is compute_router_modalities: tanh(modality_router(router_norm(x) / H)).
func (m *Model) router(p string, x []float64) []float64 {
	r := scale(m.norm(x, p+"altup.router_norm.weight"), 1/float64(m.C.Hidden))
	y := lmckpt.Linear64(r, m.get(p+"altup.modality_router.weight"), nil)
	for i := range y {
		y[i] = math.Tanh(y[i])
	}
	return y
}

func (m *Model) clip(w []float64) []float64 {
	out := append([]float64(nil), w...)
	if c := m.C.CoefClip; !m.NoClip {
		for i := range out {
			out[i] = math.Max(-c, math.Min(c, out[i]))
		}
	}
	return out
}

// layer is Gemma3nTextDecoderLayer over every position.
func (m *Model) layer(li int, hs [][][]float64, ple [][]float64, kvOf map[int][2][][][]float64) [][][]float64 {
	c := m.C
	T, H, N, P, D := len(ple), c.Hidden, c.Streams, c.PLE, c.HeadDim
	p := fmt.Sprintf("layers.%d.", li)
	// predict
	pred := make([][][]float64, N)
	for j := range pred {
		pred[j] = make([][]float64, T)
	}
	for t := 0; t < T; t++ {
		pw := m.get(p + "altup.prediction_coefs.weight") // clamped only in training
		if m.ClipPrediction {
			pw = m.clip(pw)
		}
		cf := lmckpt.Linear64(m.router(p, hs[0][t]), pw, nil) // [N*N]
		for j := 0; j < N; j++ {
			v := append([]float64(nil), hs[j][t]...)
			for i := 0; i < N; i++ {
				w := cf[j*N+i]
				if m.PredictTransposed {
					w = cf[i*N+j]
				}
				for d := range v {
					v[d] += w * hs[i][t][d]
				}
			}
			pred[j][t] = v
		}
	}
	// attention on the first stream's prediction
	an := make([][]float64, T)
	q := make([][][]float64, T)
	k := make([][][]float64, T)
	v := make([][][]float64, T)
	theta := c.SlidingTheta
	if c.Types[li] == "f" {
		theta = c.FullTheta
	}
	src := c.source(li)
	for t := 0; t < T; t++ {
		an[t] = m.norm(pred[0][t], p+"input_layernorm.weight")
		qf := lmckpt.Linear64(an[t], m.get(p+"self_attn.q_proj.weight"), nil)
		q[t] = make([][]float64, c.Heads)
		for h := 0; h < c.Heads; h++ {
			q[t][h] = rope(m.norm(qf[h*D:(h+1)*D], p+"self_attn.q_norm.weight"), t, theta)
		}
		if src >= 0 {
			continue
		}
		kf := lmckpt.Linear64(an[t], m.get(p+"self_attn.k_proj.weight"), nil)
		vf := lmckpt.Linear64(an[t], m.get(p+"self_attn.v_proj.weight"), nil)
		k[t], v[t] = make([][]float64, c.KVHeads), make([][]float64, c.KVHeads)
		for h := 0; h < c.KVHeads; h++ {
			k[t][h] = rope(m.norm(kf[h*D:(h+1)*D], p+"self_attn.k_norm.weight"), t, theta)
			v[t][h] = m.norm(vf[h*D:(h+1)*D], "")
		}
	}
	if src >= 0 {
		k, v = kvOf[src][0], kvOf[src][1]
	} else {
		kvOf[li] = [2][][][]float64{k, v}
	}
	var sees func(t, s int) bool
	if c.Types[li] == "s" {
		sees = func(t, s int) bool { return t-s < c.Window }
	}
	att := lmckpt.Attention64(q, k, v, 1, sees)
	out := make([][][]float64, N)
	for j := range out {
		out[j] = make([][]float64, T)
	}
	for t := 0; t < T; t++ {
		a := m.norm(lmckpt.Linear64(att[t], m.get(p+"self_attn.o_proj.weight"), nil), p+"post_attention_layernorm.weight")
		lr := m.norm(lmckpt.Linear64(lmckpt.Linear64(an[t], m.get(p+"laurel.linear_left.weight"), nil), m.get(p+"laurel.linear_right.weight"), nil), p+"laurel.post_laurel_norm.weight")
		mixed := make([]float64, H)
		for i := range mixed {
			gated := pred[0][t][i] + a[i]
			laurel := an[t][i] + lr[i]
			if m.NoLaurel {
				mixed[i] = gated
			} else {
				mixed[i] = (gated + laurel) / math.Sqrt2
			}
		}
		f := m.norm(m.mlp(p, li, m.norm(mixed, p+"pre_feedforward_layernorm.weight")), p+"post_feedforward_layernorm.weight")
		act := make([]float64, H)
		for i := range act {
			act[i] = mixed[i] + f[i]
		}
		// correct
		cc := lmckpt.Linear64(m.router(p, act), m.clip(m.get(p+"altup.correction_coefs.weight")), nil)
		for j := 0; j < N; j++ {
			o := make([]float64, H)
			for i := range o {
				o[i] = pred[j][t][i] + (cc[j]+1)*(act[i]-pred[0][t][i])
			}
			out[j][t] = o
		}
		// the per-layer input, into streams 1..N-1
		g := append([]float64(nil), out[0][t]...)
		if !m.NoCorrectScale {
			cs := m.get(p + "altup.correct_output_scale")
			for i := range g {
				g[i] *= cs[i]
			}
		}
		gate := lmckpt.Linear64(g, m.get(p+"per_layer_input_gate.weight"), nil)
		for i := range gate {
			gate[i] = gelu(gate[i]) * ple[t][li*P+i]
		}
		y := m.norm(lmckpt.Linear64(gate, m.get(p+"per_layer_projection.weight"), nil), p+"post_per_layer_input_norm.weight")
		from, to := 1, N
		if m.PLEOnFirstStream {
			from, to = 0, 1
		}
		for j := from; j < to; j++ {
			for i := range y {
				out[j][t][i] += y[i]
			}
		}
	}
	return out
}

// mlp is Gemma3nTextMLP: the gate cut by the Gaussian top-k on a sparse
// layer (population std, Φ⁻¹ of the sparsity), GELU (tanh), times up,
// down.
func (m *Model) mlp(p string, li int, x []float64) []float64 {
	c := m.C
	g := lmckpt.Linear64(x, m.get(p+"mlp.gate_proj.weight"), nil)
	u := lmckpt.Linear64(x, m.get(p+"mlp.up_proj.weight"), nil)
	if s := c.Sparsity[li]; s > 0 && !m.NoSparsity {
		mean, sq := 0.0, 0.0
		for _, v := range g {
			mean += v
		}
		mean /= float64(len(g))
		for _, v := range g {
			sq += (v - mean) * (v - mean)
		}
		std := math.Sqrt(sq / float64(len(g)))
		cut := mean + std*math.Sqrt2*math.Erfinv(2*s-1)
		for i, v := range g {
			g[i] = math.Max(v-cut, 0)
		}
	}
	for i := range g {
		g[i] = gelu(g[i]) * u[i]
	}
	return lmckpt.Linear64(g, m.get(p+"mlp.down_proj.weight"), nil)
}

// magnitude is y times x's RMS over y's, y's mean square floored at 1e-5.
func magnitude(y, x []float64) []float64 {
	ms := func(v []float64) float64 {
		s := 0.0
		for _, a := range v {
			s += a * a
		}
		return s / float64(len(v))
	}
	r := math.Sqrt(ms(x)) / math.Sqrt(math.Max(ms(y), 1e-5))
	return scale(y, r)
}

func scale(v []float64, s float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * s
	}
	return out
}

// gelu is the tanh approximation (gelu_pytorch_tanh).
func gelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// rope is the default rotary over the whole head at pos (rotate_half:
// pair i with i + D/2, turning at theta^(−2i/D)).
func rope(v []float64, pos int, theta float64) []float64 {
	out := append([]float64(nil), v...)
	half := len(v) / 2
	for i := 0; i < half; i++ {
		f := float64(pos) * math.Pow(theta, -float64(2*i)/float64(len(v)))
		c, s := math.Cos(f), math.Sin(f)
		out[i] = v[i]*c - v[i+half]*s
		out[i+half] = v[i+half]*c + v[i]*s
	}
	return out
}
