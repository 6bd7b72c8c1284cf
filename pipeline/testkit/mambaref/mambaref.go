// Package mambaref is a plain-Go float64 forward pass of MambaForCausalLM
// and FalconMambaForCausalLM, written from transformers' MambaMixer and
// FalconMambaMixer slow_forward (the recurrence token by token), and the
// tiny checkpoints its tests run. It shares no code with pipeline/nn or
// pipeline/mamba.
package mambaref

import (
	"fmt"
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/mamba2ref"
)

// Mamba describes a tiny Mamba-1 model.
type Mamba struct {
	Vocab, Hidden, Layers, Inner, State, Rank, Kernel int
	ConvBias, ProjBias, Tied                          bool
	// Falcon selects FalconMambaForCausalLM: dt's input, B and C normed by
	// their RMS (RMSEps).
	Falcon bool
	Eps    float64
	RMSEps float64
	Seed   uint64
}

// Tiny is a small Mamba: 2 layers, hidden 24, inner 48, state 8, rank 3,
// kernel 4, tied.
func Tiny() Mamba {
	return Mamba{Vocab: 64, Hidden: 24, Layers: 2, Inner: 48, State: 8, Rank: 3, Kernel: 4, ConvBias: true, Tied: true, Eps: 1e-5, Seed: 70}
}

// TinyFalcon is a small FalconMamba: Tiny's sizes with the mixer's RMS
// norms, in_proj and out_proj biases, untied.
func TinyFalcon() Mamba {
	c := Tiny()
	c.Falcon, c.RMSEps, c.ProjBias, c.Tied, c.Seed = true, 1e-6, true, false, 71
	return c
}

type tensor struct {
	name  string
	shape []int
	init  string
}

func (c Mamba) tensors() []tensor {
	H, D, N, R := c.Hidden, c.Inner, c.State, c.Rank
	out := []tensor{{"backbone.embeddings.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("backbone.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, tensor{p + name, shape, init}) }
		add("norm.weight", "norm", H)
		add("mixer.in_proj.weight", "linear", 2*D, H)
		if c.ProjBias {
			add("mixer.in_proj.bias", "bias", 2*D)
		}
		add("mixer.conv1d.weight", "linear", D, 1, c.Kernel)
		if c.ConvBias {
			add("mixer.conv1d.bias", "bias", D)
		}
		add("mixer.x_proj.weight", "linear", R+2*N, D)
		add("mixer.dt_proj.weight", "linear", D, R)
		add("mixer.dt_proj.bias", "dt_bias", D)
		add("mixer.A_log", "A_log", D, N)
		add("mixer.D", "D", D)
		add("mixer.out_proj.weight", "linear", H, D)
		if c.ProjBias {
			add("mixer.out_proj.bias", "bias", H)
		}
	}
	out = append(out, tensor{"backbone.norm_f.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, tensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// Fill draws the values of a tensor of shape for the Mamba-1 tiny
// checkpoints (mambaref, jambaref), u uniform in [-1, 1): linear
// u/sqrt(fan-in), qk 2u/sqrt(fan-in), router u·sqrt(6/fan-in), embed
// 0.5u, norm 1+0.2u, bias 0.2u, dt_bias from about -4.5 to -1 across the
// channels (dt from about 0.01 to 0.3), A_log log(1 to 16) across each
// channel's states (the S4D-real initialization's range, so decays run
// from slow to fast), D 1+0.3u. who names the caller in the panic on an
// unknown kind.
func Fill(r *lmckpt.Rand, shape []int, kind, who string) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	fan := n / shape[0]
	last := shape[len(shape)-1]
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		var x float64
		switch kind {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "router":
			x = u * math.Sqrt(6/float64(fan))
		case "embed":
			x = 0.5 * u
		case "norm":
			x = 1 + 0.2*u
		case "bias":
			x = 0.2 * u
		case "dt_bias":
			x = -4.5 + 3.5*float64(i)/float64(max(n-1, 1)) + 0.25*u
		case "A_log":
			x = math.Log(1 + 15*float64(i%last)/float64(max(last-1, 1)))
		case "D":
			x = 1 + 0.3*u
		default:
			panic(who + ": unknown init " + kind)
		}
		v[i] = float32(x)
	}
	return v
}

// ConfigJSON is the config.json with MambaConfig's names.
func (c Mamba) ConfigJSON() map[string]any {
	arch, typ := "MambaForCausalLM", "mamba"
	if c.Falcon {
		arch, typ = "FalconMambaForCausalLM", "falcon_mamba"
	}
	j := map[string]any{
		"architectures": []string{arch}, "model_type": typ,
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "state_size": c.State,
		"expand": c.Inner / c.Hidden, "intermediate_size": c.Inner, "conv_kernel": c.Kernel, "time_step_rank": c.Rank,
		"use_bias": c.ProjBias, "use_conv_bias": c.ConvBias, "hidden_act": "silu", "layer_norm_epsilon": c.Eps,
		"tie_word_embeddings": c.Tied, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "torch_dtype": "float32",
		"residual_in_fp32": true,
	}
	if c.Falcon {
		j["mixer_rms_eps"] = c.RMSEps
	}
	return j
}

// Write writes dir/config.json, generation_config.json and
// model.safetensors (float32).
func (c Mamba) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: Fill(r, t.shape, t.init, "mambaref")})
	}
	return lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}, ts)
}

// Model is a description plus its weights in float64.
type Model struct {
	C Mamba
	W map[string][]float64
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c Mamba) Load(dir string) (*Model, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "mambaref"}
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
		panic(fmt.Sprintf("mambaref: no tensor %q", name))
	}
	return v
}

func (m *Model) opt(on bool, name string) []float64 {
	if !on {
		return nil
	}
	return m.get(name)
}

// Mixer is layer l's MambaMixer on h [T][hidden] (Mixer1, FalconMamba's
// dt, B and C over their RMS without weights).
func (m *Model) Mixer(l int, h [][]float64) [][]float64 {
	c := m.C
	p := fmt.Sprintf("backbone.layers.%d.mixer.", l)
	return Mixer1{
		Inner: c.Inner, State: c.State, Rank: c.Rank, Kernel: c.Kernel,
		InProj: m.get(p + "in_proj.weight"), InBias: m.opt(c.ProjBias, p+"in_proj.bias"),
		Conv: m.get(p + "conv1d.weight"), ConvBias: m.opt(c.ConvBias, p+"conv1d.bias"),
		XProj: m.get(p + "x_proj.weight"), DtProj: m.get(p + "dt_proj.weight"), DtBias: m.get(p + "dt_proj.bias"),
		ALog: m.get(p + "A_log"), D: m.get(p + "D"),
		OutProj: m.get(p + "out_proj.weight"), OutBias: m.opt(c.ProjBias, p+"out_proj.bias"),
		Normed: c.Falcon, NormEps: c.RMSEps,
	}.Forward(h)
}

// Mixer1 is one Mamba-1 mixer (MambaMixer, JambaMambaMixer) as float64
// tensors by their names under the layer's mixer (mamba. in Jamba); a nil
// bias is an absent one.
type Mixer1 struct {
	Inner, State, Rank, Kernel                                                       int
	InProj, InBias, Conv, ConvBias, XProj, DtProj, DtBias, ALog, D, OutProj, OutBias []float64
	// Normed puts dt's low-rank input, B and C each over its RMS before
	// use, times DtNorm, BNorm and CNorm where they are not nil
	// (FalconMamba's rms_forward has none, Jamba's dt_layernorm,
	// b_layernorm and c_layernorm do), with eps NormEps.
	Normed               bool
	DtNorm, BNorm, CNorm []float64
	NormEps              float64
}

// Forward runs the mixer on h [T][hidden]: in_proj cut into x and the
// gate; the causal conv1d and SiLU on x; x_proj cut into dt's input, B and
// C (normed when Normed); dt = softplus(dt_proj(·)); the recurrence
// h[d][n] ← exp(dt[d]·A[d][n])·h[d][n] + dt[d]·B[n]·x[d] from zero,
// y[d] = Σ_n h[d][n]·C[n] + D[d]·x[d]; times silu(gate); out_proj.
func (m Mixer1) Forward(h [][]float64) [][]float64 {
	D, N, R := m.Inner, m.State, m.Rank
	xs, gates := make([][]float64, len(h)), make([][]float64, len(h))
	for t := range h {
		z := lmckpt.Linear64(h[t], m.InProj, m.InBias)
		xs[t], gates[t] = z[:D], z[D:]
	}
	xs = mamba2ref.CausalConv(xs, m.Conv, m.ConvBias, m.Kernel)
	state := make([]float64, D*N)
	out := make([][]float64, len(h))
	for t := range xs {
		for i, v := range xs[t] {
			xs[t][i] = lmckpt.SiLU64(v)
		}
		sp := lmckpt.Linear64(xs[t], m.XProj, nil)
		low, B, C := sp[:R], sp[R:R+N], sp[R+N:]
		if m.Normed {
			low, B, C = lmckpt.RMSNorm64(low, m.DtNorm, m.NormEps), lmckpt.RMSNorm64(B, m.BNorm, m.NormEps), lmckpt.RMSNorm64(C, m.CNorm, m.NormEps)
		}
		dt := lmckpt.Linear64(low, m.DtProj, m.DtBias)
		y := make([]float64, D)
		for d := 0; d < D; d++ {
			step := mamba2ref.Softplus(dt[d])
			for n := 0; n < N; n++ {
				a := -math.Exp(m.ALog[d*N+n])
				state[d*N+n] = math.Exp(step*a)*state[d*N+n] + step*B[n]*xs[t][d]
				y[d] += state[d*N+n] * C[n]
			}
			y[d] += m.D[d] * xs[t][d]
			y[d] *= lmckpt.SiLU64(gates[t][d])
		}
		out[t] = lmckpt.Linear64(y, m.OutProj, m.OutBias)
	}
	return out
}

// Logits runs the sequence and returns the logits after every token.
func (m *Model) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("backbone.embeddings.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(fmt.Sprintf("backbone.layers.%d.norm.weight", l)), c.Eps)
		}
		y := m.Mixer(l, h)
		for t := range x {
			for i := range x[t] {
				x[t][i] += y[t][i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "backbone.embeddings.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("backbone.norm_f.weight"), c.Eps), m.get(head), nil)
	}
	return out
}
