package nn

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/lm"
)

// Mamba's (Mamba-1's) selective state space layer ("Mamba: Linear-Time
// Sequence Modeling with Selective State Spaces", Gu and Dao, 2023,
// arXiv:2312.00752), as transformers' MambaMixer computes it
// (slow_forward). Every channel d of Inner has a state of State numbers
// n, each with its own decay A[d, n] < 0; per token the channel's step
// dt_t,d > 0 and the token's B_t and C_t [State] (shared by the channels)
// run
//
//	h[d, n] ← exp(dt·A[d, n])·h[d, n] + dt·B_t[n]·x_t[d]
//	y_t[d] = Σ_n h[d, n]·C_t[n] + D[d]·x_t[d]

// KindMamba1 is the layer kind of Mamba-1 layers.
const KindMamba1 = "mamba1"

// Mamba1Dims are the sizes of a Mamba-1 mixer.
type Mamba1Dims struct {
	Inner      int // intermediate_size: expand × hidden_size
	State      int // state_size
	Rank       int // time_step_rank
	ConvKernel int // conv_kernel
}

// Mamba1State is one Mamba-1 layer's fixed-size state: "conv", the
// causal convolution's last ConvKernel-1 inputs [B, ConvKernel-1, Inner]
// in the compute dtype, and "ssm" [B, Inner, State] in float32.
func Mamba1State(d Mamba1Dims, batch int) []lm.StateSpec {
	return []lm.StateSpec{
		{Name: "conv", Shape: []int{batch, d.ConvKernel - 1, d.Inner}, SlotAxis: lm.NoSlots},
		{Name: "ssm", Shape: []int{batch, d.Inner, d.State}, DType: dtypes.Float32, SlotAxis: lm.NoSlots},
	}
}

// Mamba1Params are one Mamba-1 mixer's tensors, as MambaMixer names them:
// in_proj [2·Inner, H] (and its bias), conv1d [Inner, 1, K] (and its
// bias), x_proj [Rank + 2·State, Inner], dt_proj [Inner, Rank] and its
// bias, A_log [Inner, State], D [Inner], out_proj [H, Inner] (and its
// bias). Biases may be nil, except dt_proj's.
type Mamba1Params struct {
	InProj, InProjBias, Conv, ConvBias, XProj, DtProj, DtProjBias, ALog, D, OutProj, OutProjBias *Node
}

// Mamba1Weights lists a Mamba-1 mixer's tensors under prefix (the
// mixer's scope and a dot), with conv1d's bias and in_proj's and
// out_proj's (use_bias) when the config says. The mixer stays whole on
// every device under --tp.
func Mamba1Weights(prefix string, d Mamba1Dims, hidden int, convBias, projBias bool) []lm.WeightSpec {
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: prefix + name, Shape: shape, Matmul: matmul, TP: lm.Replicated})
	}
	add("in_proj.weight", true, 2*d.Inner, hidden)
	if projBias {
		add("in_proj.bias", false, 2*d.Inner)
	}
	add("conv1d.weight", false, d.Inner, 1, d.ConvKernel)
	if convBias {
		add("conv1d.bias", false, d.Inner)
	}
	add("x_proj.weight", true, d.Rank+2*d.State, d.Inner)
	add("dt_proj.weight", true, d.Inner, d.Rank)
	add("dt_proj.bias", false, d.Inner)
	add("A_log", false, d.Inner, d.State)
	add("D", false, d.Inner)
	add("out_proj.weight", true, hidden, d.Inner)
	if projBias {
		add("out_proj.bias", false, hidden)
	}
	return ws
}

// Mamba1ParamsOf reads the tensors Mamba1Weights lists from the mixer's
// scope p.
func Mamba1ParamsOf(p *lm.Params, convBias, projBias bool) Mamba1Params {
	opt := func(name string, on bool) *Node {
		if !on {
			return nil
		}
		return p.Get(name)
	}
	return Mamba1Params{
		InProj: p.Get("in_proj.weight"), InProjBias: opt("in_proj.bias", projBias),
		Conv: p.Get("conv1d.weight"), ConvBias: opt("conv1d.bias", convBias),
		XProj: p.Get("x_proj.weight"), DtProj: p.Get("dt_proj.weight"), DtProjBias: p.Get("dt_proj.bias"),
		ALog: p.Get("A_log"), D: p.Get("D"),
		OutProj: p.Get("out_proj.weight"), OutProjBias: opt("out_proj.bias", projBias),
	}
}

// Mamba1Chunk is the prefill scan's chunk: 16 tokens, 4 rounds of the
// prefix scan over [16, inner, state] float32 tensors.
const Mamba1Chunk = 16

// Mamba1Options are a Mamba-1 mixer's settings beyond its sizes.
type Mamba1Options struct {
	// Act is hidden_act (the convolution's and the gate's).
	Act func(*Node) *Node
	// RMSEps > 0 normalizes dt's low-rank input, B and C by their RMS
	// without weights before use (FalconMamba's mixer_rms_eps).
	RMSEps float64
	// Chunk is the scan's chunk for several tokens, rounded up to a
	// power of two (Mamba1Chunk unless a test varies it).
	Chunk int
	// DtNorm, BNorm and CNorm, when set, are RMSNorm weights for dt's
	// low-rank input, B and C (Jamba's dt_layernorm, b_layernorm,
	// c_layernorm), with eps NormEps.
	DtNorm, BNorm, CNorm *Node
	NormEps              float64
}

// rmsNoWeight is FalconMamba's rms_forward: x over its RMS in float32,
// cast back.
func rmsNoWeight(x *Node, eps float64) *Node {
	xf := ConvertDType(x, dtypes.Float32)
	ms := ReduceAndKeep(Square(xf), ReduceMean, -1)
	return ConvertDType(Mul(xf, Rsqrt(AddScalar(ms, eps))), x.DType())
}

// Mamba1 is a Mamba-1 mixer (MambaMixer, FalconMambaMixer) on x [B, T,
// H] continued from its state (conv, ssm; Mamba1State), returning [B, T,
// H] and the new state: in_proj gives x and the gate; the causal
// convolution (summed in float32, rounded once) and the activation give
// x; x_proj gives dt's low-rank input, B and C (FalconMamba: each normed
// by its RMS); dt = softplus(dt_proj(·)) in float32; the scan in float32
// (Mamba1Scan) with the D skip; times act(gate); out_proj. Left padding
// (step.Positions < 0) is zeroed before in_proj and around the
// convolution and takes no step (dt 0), so a padded row's state stays
// zero until its first token.
func Mamba1(d Mamba1Dims, w Mamba1Params, x, conv, ssm *Node, step *lm.Step, o Mamba1Options) (*Node, *Node, *Node) {
	dtype := x.DType()
	f32 := dtypes.Float32
	isReal := RealTokens(step, dtype) // [B, T, 1]
	x = Mul(x, isReal)

	proj := Linear(x, w.InProj, w.InProjBias) // [B, T, 2·Inner]
	xs := Mul(SliceAxis(proj, 2, AxisRange(0, d.Inner)), isReal)
	gate := SliceAxis(proj, 2, AxisRange(d.Inner, 2*d.Inner))

	xf, convF := CausalConv1D(ConvertDType(xs, f32), ConvertDType(conv, f32), w.Conv)
	conv = ConvertDType(convF, conv.DType())
	if w.ConvBias != nil {
		xf = Add(xf, ExpandLeftToRank(ConvertDType(w.ConvBias, f32), 3))
	}
	xs = Mul(o.Act(ConvertDType(xf, dtype)), isReal) // [B, T, Inner]

	sp := Linear(xs, w.XProj, nil) // [B, T, Rank + 2·State]
	low := SliceAxis(sp, 2, AxisRange(0, d.Rank))
	bm := SliceAxis(sp, 2, AxisRange(d.Rank, d.Rank+d.State))
	cm := SliceAxis(sp, 2, AxisRange(d.Rank+d.State, d.Rank+2*d.State))
	if o.RMSEps > 0 {
		low, bm, cm = rmsNoWeight(low, o.RMSEps), rmsNoWeight(bm, o.RMSEps), rmsNoWeight(cm, o.RMSEps)
	}
	if o.DtNorm != nil {
		low, bm, cm = RMSNorm(low, o.DtNorm, o.NormEps, false), RMSNorm(bm, o.BNorm, o.NormEps, false), RMSNorm(cm, o.CNorm, o.NormEps, false)
	}
	dt := SoftplusTorch(ConvertDType(Linear(low, w.DtProj, w.DtProjBias), f32)) // [B, T, Inner]
	dt = Mul(dt, ConvertDType(isReal, f32))                                     // no step on padding
	a := Neg(Exp(ConvertDType(w.ALog, f32)))                                    // [Inner, State]

	y, ssm := Mamba1Scan(ConvertDType(xs, f32), dt, a, ConvertDType(bm, f32), ConvertDType(cm, f32), ssm, o.Chunk)
	y = Add(y, Mul(ConvertDType(xs, f32), ExpandLeftToRank(ConvertDType(w.D, f32), 3)))
	y = Mul(ConvertDType(y, dtype), o.Act(gate))
	return Linear(y, w.OutProj, w.OutProjBias), conv, ssm
}

// Mamba1Scan runs the selective scan in float32: x and dt [B, T, D], a
// [D, N] (negative), b and c [B, T, N], state [B, D, N] -> y [B, T, D]
// (without the D skip) and the new state. One token is one step of the
// recurrence. Several run in chunks of chunk tokens (T padded with
// tokens of dt 0, which leave the state as it is): within a chunk the
// pairs (decay, input) of h ← a·h + u combine by a Hillis-Steele prefix
// scan (log2 chunk rounds of (a₂a₁, a₂u₁ + u₂), products of decays in
// (0, 1], so nothing overflows), giving each token's state from a zero
// start and the chunk's decay so far; the chunks' summaries combine by
// the same scan over the chunks, so the graph grows with the logarithm
// of the length, not the length. It holds [B, T, Inner, State] float32
// tensors: a long prefill of a wide model is memory-bound (FalconMamba
// 7B: 512 KiB a token and layer each).
func Mamba1Scan(x, dt, a, b, c, state *Node, chunk int) (*Node, *Node) {
	dims := x.Shape().Dimensions
	bs, t, d := dims[0], dims[1], dims[2]
	n := a.Shape().Dimensions[1]
	decay := Exp(Mul(InsertAxes(dt, -1), ExpandLeftToRank(a, 4))) // [B, T, D, N]
	u := Mul(InsertAxes(Mul(dt, x), -1), InsertAxes(b, 2))        // [B, T, D, N]: dt·x ⊗ B
	if t == 1 {
		state = Add(Mul(state, Squeeze(decay, 1)), Squeeze(u, 1))
		y := DotGeneral(state, []int{2}, []int{0}, Squeeze(c, 1), []int{1}, []int{0}) // [B, D]
		return InsertAxes(y, 1), state
	}
	cs := 1
	for cs < chunk && cs < t {
		cs *= 2
	}
	nc := (t + cs - 1) / cs
	tp := nc * cs
	g := x.Graph()
	if tp > t {
		padAt := func(v *Node, fill float64) *Node {
			pd := v.Shape().Clone()
			pd.Dimensions[1] = tp - t
			return Concatenate([]*Node{v, AddScalar(Zeros(g, pd), fill)}, 1)
		}
		decay, u, c = padAt(decay, 1), padAt(u, 0), padAt(c, 0)
	}
	decay = Reshape(decay, bs, nc, cs, d, n)
	u = Reshape(u, bs, nc, cs, d, n)
	// Hillis-Steele over the chunk axis (2): after the rounds, decay is
	// each token's product of decays since the chunk began and u its
	// state from zero.
	for k := 1; k < cs; k *= 2 {
		shift := func(v *Node, fill float64) *Node {
			pd := v.Shape().Clone()
			pd.Dimensions[2] = k
			head := AddScalar(Zeros(g, pd), fill)
			return Concatenate([]*Node{head, SliceAxis(v, 2, AxisRange(0, cs-k))}, 2)
		}
		prevA, prevU := shift(decay, 1), shift(u, 0)
		u = Add(Mul(decay, prevU), u)
		decay = Mul(decay, prevA)
	}
	// The chunks' summaries, (decay, input) at their last token, scanned
	// over the chunks the same way give each chunk's composition with
	// those before it; shifted by one chunk (the identity first), the
	// state each chunk starts from.
	lastA := Squeeze(SliceAxis(decay, 2, AxisElem(cs-1)), 2) // [B, nc, D, N]
	lastU := Squeeze(SliceAxis(u, 2, AxisElem(cs-1)), 2)
	for k := 1; k < nc; k *= 2 {
		shift := func(v *Node, fill float64) *Node {
			pd := v.Shape().Clone()
			pd.Dimensions[1] = k
			return Concatenate([]*Node{AddScalar(Zeros(g, pd), fill), SliceAxis(v, 1, AxisRange(0, nc-k))}, 1)
		}
		prevA, prevU := shift(lastA, 1), shift(lastU, 0)
		lastU = Add(Mul(lastA, prevU), lastU)
		lastA = Mul(lastA, prevA)
	}
	s0 := InsertAxes(state, 1)         // [B, 1, D, N]
	ends := Add(Mul(lastA, s0), lastU) // [B, nc, D, N]: the state after each chunk
	state = Squeeze(SliceAxis(ends, 1, AxisElem(nc-1)), 1)
	enter := s0
	if nc > 1 {
		enter = Concatenate([]*Node{s0, SliceAxis(ends, 1, AxisRange(0, nc-1))}, 1) // [B, nc, D, N]
	}
	hAll := Add(Mul(decay, InsertAxes(enter, 2)), u) // [B, nc, cs, D, N]
	h := Reshape(hAll, bs, tp, d, n)
	y := Squeeze(DotGeneral(h, []int{3}, []int{0, 1}, InsertAxes(c, -1), []int{2}, []int{0, 1}), -1) // [B, tp, D]
	if tp > t {
		y = SliceAxis(y, 1, AxisRange(0, t))
	}
	return y, state
}
