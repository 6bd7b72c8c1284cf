// Package mamba2ref is the plain-Go float64 Mamba-2 mixer that the hybrid
// references share: granitehref (GraniteMoeHybridMambaLayer, the Granite 4.0-H
// releases) and nemotronhref (NemotronHMamba2Mixer, from Zamba2MambaMixer).
// Both are transformers' torch_forward of the same layer; they differ only in
// where dt is clamped and over what the gated norm takes its mean, which is
// why Mixer has a field for each rather than a family switch.
//
// The mixer, on one unpadded sequence without a cache, I = heads·P:
//
//   - in_proj (bias or none) gives [gate | xBC | dt] of widths [I, I+2·G·N,
//     heads] (G groups, state N); xBC goes through the depthwise causal
//     conv1d (bias or none) and SiLU and is cut into x [I], B [G·N] and
//     C [G·N]; head h reads group h/(heads/G) (repeat_interleave).
//   - dt = max(softplus(dt + dt_bias), DtMin) with torch's softplus
//     (threshold 20); A = -exp(A_log).
//   - Scan: the state S_h [P, N] starts at zero; at every token
//     S_h ← exp(dt_h·A_h)·S_h + dt_h·x_h ⊗ B_g and y_h = S_h·C_g + D_h·x_h,
//     token by token. torch_forward computes the same sums in the chunked
//     SSD form of chunk_size; the tests check the two agree.
//   - GatedNorm: z = y·silu(gate), each of NormGroups equal slices scaled by
//     rsqrt(mean(z²)+eps) over its own entries, times norm.weight; then
//     out_proj (bias or none).
//
// torch computes the SSM and the norm's statistics in float32; all of it is
// float64 here. Like the references that use it, the package shares no code
// with pipeline/nn or the architecture packages it checks.
package mamba2ref

import (
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Mixer is one Mamba-2 mixer: its sizes, its tensors as float64 (by the
// names every release gives them under the layer's mamba. or mixer.), and
// the readings on which the families differ. A nil bias is an absent one.
type Mixer struct {
	// Heads, HeadDim (P), Groups (G), State (N) and Kernel are the number
	// of heads, their width, n_groups, the state size and the conv1d's
	// kernel width. I = Heads·HeadDim.
	Heads, HeadDim, Groups, State, Kernel int
	// InProj is in_proj.weight [I + ConvDim + Heads, hidden] and InBias
	// in_proj.bias; the rows are read as [gate | xBC | dt].
	InProj, InBias []float64
	// Conv is conv1d.weight [ConvDim, 1, Kernel] and ConvBias conv1d.bias.
	Conv, ConvBias []float64
	// DtBias is dt_bias [Heads] (nil adds nothing), ALog A_log [Heads], D
	// the skip D [Heads] (nil: no skip term).
	DtBias, ALog, D []float64
	// Norm is norm.weight [I]; OutProj is out_proj.weight [hidden, I] and
	// OutBias out_proj.bias.
	Norm, OutProj, OutBias []float64
	// DtMin is the floor of dt after the softplus: time_step_min for
	// NemotronH (transformers' torch_forward, Zamba2's), 0 for
	// GraniteMoeHybrid, whose clamp to time_step_limit (0, inf) does
	// nothing to a softplus.
	DtMin float64
	// NormGroups is how many equal slices of I the gated norm takes its
	// means over: 1 (GraniteMoeHybridRMSNormGated, Bamba's, Mamba2's in
	// transformers) or Groups (Zamba2RMSNormGated, mamba_ssm's RMSNormGated
	// with group_size I/n_groups, vLLM, llama.cpp).
	NormGroups int
	// NormBeforeGate normalizes y and then multiplies by silu(gate)
	// (mamba_ssm's norm_before_gate=True) instead of normalizing
	// y·silu(gate): neither family does, both references offer it as a
	// mistake.
	NormBeforeGate bool
	// Eps is the gated norm's eps.
	Eps float64
	// Mup, when not nil, multiplies in_proj's output part by part: five
	// factors for the gate, x, B, C and dt (Falcon-H1's ssm_multipliers).
	Mup []float64
	// DtMax > 0 caps dt after the softplus (Falcon-H1's time_step_limit).
	DtMax float64
	// NoNorm gates y by silu(gate) without a norm (Falcon-H1 without
	// mamba_rms_norm); Norm is then unused.
	NoNorm bool
}

// Inner is I, Heads·HeadDim: the width of the gate, x, y and the norm.
func (m Mixer) Inner() int { return m.Heads * m.HeadDim }

// ConvDim is the conv1d's channel count, I + 2·Groups·State.
func (m Mixer) ConvDim() int { return m.Inner() + 2*m.Groups*m.State }

// Parts is what the mixer computes before its scan, per token: Gate [T][I],
// X [T][I], B and C [T][G·N] (after the conv and SiLU), Dt [T][heads] (after
// softplus and the clamp), and the per-head A and D (zeros without D).
type Parts struct {
	Gate, X, B, C, Dt [][]float64
	A, D              []float64
}

// Inputs runs the mixer up to the scan on h [T][hidden], the layer's
// normed input: in_proj cut into gate, xBC and dt; CausalConv and SiLU on
// xBC cut into x, B and C; dt = max(Softplus(dt + dt_bias), DtMin);
// A = -exp(A_log); D.
func (m Mixer) Inputs(h [][]float64) Parts {
	I, conv, GN := m.Inner(), m.ConvDim(), m.Groups*m.State
	var out Parts
	xbc := make([][]float64, len(h))
	for t := range h {
		z := lmckpt.Linear64(h[t], m.InProj, m.InBias)
		if m.Mup != nil {
			bounds := []int{I, 2 * I, 2*I + GN, 2*I + 2*GN, len(z)}
			part := 0
			for i := range z {
				for i >= bounds[part] {
					part++
				}
				z[i] *= m.Mup[part]
			}
		}
		out.Gate = append(out.Gate, z[:I])
		xbc[t] = z[I : I+conv]
		out.Dt = append(out.Dt, z[I+conv:I+conv+m.Heads])
	}
	act := CausalConv(xbc, m.Conv, m.ConvBias, m.Kernel)
	for t := range act {
		for i, v := range act[t] {
			act[t][i] = lmckpt.SiLU64(v)
		}
		out.X = append(out.X, act[t][:I])
		out.B = append(out.B, act[t][I:I+GN])
		out.C = append(out.C, act[t][I+GN:])
	}
	for t := range out.Dt {
		for i, v := range out.Dt[t] {
			if m.DtBias != nil {
				v += m.DtBias[i]
			}
			out.Dt[t][i] = math.Max(Softplus(v), m.DtMin)
			if m.DtMax > 0 {
				out.Dt[t][i] = math.Min(out.Dt[t][i], m.DtMax)
			}
		}
	}
	out.A = make([]float64, m.Heads)
	out.D = make([]float64, m.Heads)
	for i, v := range m.ALog {
		out.A[i] = -math.Exp(v)
	}
	copy(out.D, m.D)
	return out
}

// Forward is the whole mixer on h [T][hidden]: Inputs, Scan, GatedNorm with
// Norm, out_proj. It returns [T][hidden], before any residual scaling.
func (m Mixer) Forward(h [][]float64) [][]float64 {
	in := m.Inputs(h)
	y := Scan(in.X, in.B, in.C, in.Dt, in.A, in.D, m.Groups)
	out := make([][]float64, len(h))
	for t := range y {
		if m.NoNorm {
			g := make([]float64, len(y[t]))
			for i, v := range y[t] {
				g[i] = v * lmckpt.SiLU64(in.Gate[t][i])
			}
			out[t] = lmckpt.Linear64(g, m.OutProj, m.OutBias)
			continue
		}
		out[t] = lmckpt.Linear64(GatedNorm(y[t], in.Gate[t], m.Norm, m.Eps, m.NormGroups, m.NormBeforeGate), m.OutProj, m.OutBias)
	}
	return out
}

// Softplus is torch.nn.functional.softplus with beta 1 and threshold 20:
// x itself above 20, log1p(exp(x)) otherwise.
func Softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// CausalConv is the mixer's depthwise causal conv1d (nn.Conv1d with groups =
// channels and padding K-1, cut to the sequence length) on xs [T][C]:
// out[t][c] = b[c] + Σ_j w[c·K+j]·xs[t-(K-1)+j][c], zeros before t = 0, with
// w the conv1d.weight [C, 1, K] and b the bias or nil. No activation.
func CausalConv(xs [][]float64, w, b []float64, K int) [][]float64 {
	out := make([][]float64, len(xs))
	for t := range xs {
		C := len(xs[t])
		out[t] = make([]float64, C)
		for ch := 0; ch < C; ch++ {
			s := 0.0
			if b != nil {
				s = b[ch]
			}
			for j := 0; j < K; j++ {
				if tt := t - (K - 1) + j; tt >= 0 {
					s += w[ch*K+j] * xs[tt][ch]
				}
			}
			out[t][ch] = s
		}
	}
	return out
}

// Scan is the Mamba-2 selective state space recurrence, token by token, on
// one sequence: x [T][heads·P], B and C [T][G·N], dt [T][heads] (already
// through softplus and any clamp), A [heads] (negative), D [heads]. Head h
// reads group g = h/(heads/G) of B and C. Its state S_h [P][N] starts at
// zero; at every token S_h ← exp(dt_h·A_h)·S_h + dt_h·x_h ⊗ B_g and
// y_h = S_h·C_g + D_h·x_h. It returns y [T][heads·P].
func Scan(x, B, C, dt [][]float64, A, D []float64, G int) [][]float64 {
	heads := len(A)
	if len(x) == 0 {
		return nil
	}
	P := len(x[0]) / heads
	N := len(B[0]) / G
	per := heads / G
	S := make([][]float64, heads*P)
	for i := range S {
		S[i] = make([]float64, N)
	}
	y := make([][]float64, len(x))
	for t := range x {
		y[t] = make([]float64, heads*P)
		for h := 0; h < heads; h++ {
			g := h / per
			b, cc := B[t][g*N:(g+1)*N], C[t][g*N:(g+1)*N]
			decay := math.Exp(dt[t][h] * A[h])
			for p := 0; p < P; p++ {
				xv := x[t][h*P+p]
				row := S[h*P+p]
				s := 0.0
				for n := range row {
					row[n] = decay*row[n] + dt[t][h]*xv*b[n]
					s += row[n] * cc[n]
				}
				y[t][h*P+p] = s + D[h]*xv
			}
		}
	}
	return y
}

// GatedNorm is the gated RMSNorm on one token's y and gate [I]: z =
// y·silu(gate), cut into groups equal slices (1 for the whole width), each
// scaled by rsqrt(mean(z²)+eps) over its own entries, times w [I]. With
// beforeGate it normalizes y the same way and multiplies by silu(gate)
// afterwards.
func GatedNorm(y, gate, w []float64, eps float64, groups int, beforeGate bool) []float64 {
	z := make([]float64, len(y))
	for i := range y {
		z[i] = y[i]
		if !beforeGate {
			z[i] *= lmckpt.SiLU64(gate[i])
		}
	}
	size := len(z) / groups
	out := make([]float64, 0, len(z))
	for g := 0; g < groups; g++ {
		out = append(out, lmckpt.RMSNorm64(z[g*size:(g+1)*size], w[g*size:(g+1)*size], eps)...)
	}
	if beforeGate {
		for i := range out {
			out[i] *= lmckpt.SiLU64(gate[i])
		}
	}
	return out
}
