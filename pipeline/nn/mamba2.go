package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/lm"
)

// Mamba-2's selective state space layer ("Transformers are SSMs:
// Generalized Models and Efficient Algorithms Through Structured State
// Space Duality", Dao and Gu, 2024, arXiv:2405.21060), as transformers'
// Mamba2Mixer and BambaMixer compute it (torch_forward). Per head h of
// HeadDim channels, with a scalar decay a_h < 0, a step dt_t,h > 0 and
// the head's group g's B_t and C_t of State numbers, a state S [HeadDim,
// State] runs
//
//	S ← exp(dt·a)·S + dt · x_t ⊗ B_t
//	y_t = S·C_t + D_h·x_t
//
// The D skip is the caller's (it is a per-head scale of x).

// KindMamba is the layer kind of Mamba-2 layers (GraniteMoeHybrid's
// layer_types "mamba").
const KindMamba = "mamba"

// Mamba2Dims are the sizes of a Mamba-2 mixer.
type Mamba2Dims struct {
	Heads, HeadDim int // mamba_n_heads, mamba_d_head
	State          int // mamba_d_state
	Groups         int // mamba_n_groups: heads share B and C within a group
	ConvKernel     int // mamba_d_conv
}

// Inner is the width of x and of the gate: Heads·HeadDim.
func (d Mamba2Dims) Inner() int { return d.Heads * d.HeadDim }

// ConvDim is the number of channels of the causal convolution (x, B, C).
func (d Mamba2Dims) ConvDim() int { return d.Inner() + 2*d.Groups*d.State }

// ProjDim is the width of in_proj: the gate, the convolution's channels
// and one step per head.
func (d Mamba2Dims) ProjDim() int { return d.Inner() + d.ConvDim() + d.Heads }

// Mamba2Names are the config fields a family spells Mamba2Dims with,
// for the errors Validate returns.
type Mamba2Names struct{ Heads, HeadDim, State, Groups, ConvKernel string }

// Validate checks that the sizes fit together; where names the config
// and n its fields.
func (d Mamba2Dims) Validate(where string, n Mamba2Names) error {
	switch {
	case d.Heads <= 0 || d.HeadDim <= 0 || d.State <= 0 || d.Groups <= 0:
		return fmt.Errorf("%s: %s %d, %s %d, %s %d and %s %d must be positive", where, n.Heads, d.Heads, n.HeadDim, d.HeadDim, n.State, d.State, n.Groups, d.Groups)
	case d.Heads%d.Groups != 0:
		return fmt.Errorf("%s: %s %d must divide %s %d", where, n.Groups, d.Groups, n.Heads, d.Heads)
	case d.ConvKernel < 2:
		return fmt.Errorf("%s: %s %d must be at least 2", where, n.ConvKernel, d.ConvKernel)
	}
	return nil
}

// Mamba2State returns the fixed-size state of one Mamba-2 layer: "conv",
// the causal convolution's last ConvKernel-1 inputs [B, ConvKernel-1,
// ConvDim] in the compute dtype, and "ssm", the state [B, Heads, HeadDim,
// State] in float32. Neither depends on the sequence length.
func Mamba2State(d Mamba2Dims, batch int) []lm.StateSpec {
	return []lm.StateSpec{
		{Name: "conv", Shape: []int{batch, d.ConvKernel - 1, d.ConvDim()}, SlotAxis: lm.NoSlots},
		{Name: "ssm", Shape: []int{batch, d.Heads, d.HeadDim, d.State}, DType: dtypes.Float32, SlotAxis: lm.NoSlots},
	}
}

// groupsToHeads turns a group's [B, G, ..., N] into its heads' [B, H,
// ..., N] (each group's rows repeated for its H/G heads).
func groupsToHeads(x *Node, heads int) *Node {
	dims := x.Shape().Dimensions
	g := dims[1]
	rest := dims[2:]
	ex := InsertAxes(x, 2) // [B, G, 1, ...]
	bd := append([]int{dims[0], g, heads / g}, rest...)
	return Reshape(BroadcastToDims(ex, bd...), append([]int{dims[0], heads}, rest...)...)
}

// RecurrentSSD runs the state space recurrence token by token
// (transformers' cached decode step, used for one-token steps): x
// [B, T, H, P], dt [B, T, H] float32 (after the softplus), a [H] float32
// (negative), b and c [B, T, G, N], state [B, H, P, N] float32 -> y
// [B, T, H, P] float32 (without the D skip) and the new state.
func RecurrentSSD(x, dt, a, b, c, state *Node) (*Node, *Node) {
	f32 := dtypes.Float32
	dims := x.Shape().Dimensions
	t, h := dims[1], dims[2]
	x, b, c = ConvertDType(x, f32), ConvertDType(b, f32), ConvertDType(c, f32)
	at := func(v *Node, i int) *Node { return Squeeze(SliceAxis(v, 1, AxisElem(i)), 1) }
	decay := Exp(Mul(dt, ExpandLeftToRank(a, 3))) // [B, T, H]
	outs := make([]*Node, t)
	for i := 0; i < t; i++ {
		xt := at(x, i)                                                                                // [B, H, P]
		dtt := at(dt, i)                                                                              // [B, H]
		bt, ct := groupsToHeads(at(b, i), h), groupsToHeads(at(c, i), h)                              // [B, H, N]
		state = Mul(state, InsertAxes(at(decay, i), -1, -1))                                          // decay
		dx := Mul(xt, InsertAxes(dtt, -1))                                                            // [B, H, P]: dt·x
		state = Add(state, Mul(InsertAxes(dx, -1), InsertAxes(bt, 2)))                                // S += dt·x ⊗ B
		outs[i] = DotGeneral(state, []int{3}, []int{0, 1}, InsertAxes(ct, -1), []int{2}, []int{0, 1}) // [B, H, P, 1]
		outs[i] = Squeeze(outs[i], -1)
	}
	return Stack(outs, 1), state // [B, T, H, P]
}

// ChunkSSD runs the state space recurrence in chunks of chunk tokens
// (Mamba-2's SSD algorithm, transformers' torch_forward without a
// cache; used for several-token steps). Shapes as in RecurrentSSD. chunk
// is capped at the power of two >= T; T is padded with zero tokens (no
// step: no decay, no update) to a whole number of chunks. Within a chunk,
// with cumulative log-decays γ_i = Σ_{j<=i} dt_j·a and Γ_ij = exp(γ_i -
// γ_j) for j <= i (0 above the diagonal), and the carried state S:
//
//	Y  = (C Bᵀ ∘ Γ)(dt·x) + exp(γ) ∘ (C Sᵀ)
//	S ← exp(γ_C)·S + Σ_j exp(γ_C - γ_j) (dt·x)_j ⊗ B_j
//
// The in-chunk products run for every chunk at once and only the carried
// state is passed from chunk to chunk, unrolled (GoMLX has no While op).
// Every exponent is a decay (<= 0), so nothing overflows.
func ChunkSSD(x, dt, a, b, c, state *Node, chunk int) (*Node, *Node) {
	f32 := dtypes.Float32
	dims := x.Shape().Dimensions
	bs, t, h, p := dims[0], dims[1], dims[2], dims[3]
	g, n := b.Shape().Dimensions[2], b.Shape().Dimensions[3]
	r := h / g
	cs := 1
	for cs < chunk && cs < t {
		cs *= 2
	}
	nc := (t + cs - 1) / cs
	tp := nc * cs
	gr := x.Graph()
	pad := func(v *Node) *Node { // [B, T, ...] float32, padded to tp tokens with zeros
		v = ConvertDType(v, f32)
		if tp > t {
			pd := v.Shape().Clone()
			pd.Dimensions[1] = tp - t
			v = Concatenate([]*Node{v, Zeros(gr, pd)}, 1)
		}
		return v
	}
	// Heads and groups first: x·dt [B, H, nc, cs, P], B and C [B, G, nc, cs, N], log-decays [B, H, nc, cs].
	dtp := pad(dt)
	xdt := Mul(pad(x), InsertAxes(dtp, -1))
	xdt = Reshape(TransposeAllDims(xdt, 0, 2, 1, 3), bs, h, nc, cs, p)
	bc := Reshape(TransposeAllDims(pad(b), 0, 2, 1, 3), bs, g, nc, cs, n)
	cc := Reshape(TransposeAllDims(pad(c), 0, 2, 1, 3), bs, g, nc, cs, n)
	la := Reshape(TransposeAllDims(Mul(dtp, ExpandLeftToRank(a, 3)), 0, 2, 1), bs, h, nc, cs)

	cum, decay := chunkDecays(la) // γ [B, H, nc, cs], Γ [B, H, nc, cs, cs]

	// In-chunk outputs: (C Bᵀ per group, times each head's Γ) applied to x·dt.
	cb := DotGeneral(cc, []int{4}, []int{0, 1, 2}, bc, []int{4}, []int{0, 1, 2}) // [B, G, nc, cs, cs]
	m := Mul(Reshape(decay, bs, g, r, nc, cs, cs), InsertAxes(cb, 2))            // [B, G, R, nc, cs, cs]
	m = Reshape(m, bs, h, nc, cs, cs)
	yDiag := DotGeneral(m, []int{4}, []int{0, 1, 2}, xdt, []int{3}, []int{0, 1, 2}) // [B, H, nc, cs, P]

	// Each chunk's own contribution to the state at its end.
	last := SliceAxis(cum, 3, AxisElem(cs-1))                                         // [B, H, nc, 1]
	toEnd := Mul(xdt, InsertAxes(Exp(Sub(last, cum)), -1))                            // [B, H, nc, cs, P]
	toEnd6 := Reshape(toEnd, bs, g, r, nc, cs, p)                                     // [B, G, R, nc, cs, P]
	own := DotGeneral(toEnd6, []int{4}, []int{0, 1, 3}, bc, []int{3}, []int{0, 1, 2}) // [B, G, nc, R, P, N]
	own = Reshape(TransposeAllDims(own, 0, 1, 3, 2, 4, 5), bs, h, nc, p, n)           // [B, H, nc, P, N]
	chunkDecay := Exp(last)                                                           // [B, H, nc, 1]
	expCum := Exp(cum)                                                                // [B, H, nc, cs]

	at := func(v *Node, i int) *Node { return Squeeze(SliceAxis(v, 2, AxisElem(i)), 2) }
	outs := make([]*Node, nc)
	for i := 0; i < nc; i++ {
		s5 := Reshape(state, bs, g, r, p, n)
		cs5 := DotGeneral(at(cc, i), []int{3}, []int{0, 1}, s5, []int{4}, []int{0, 1}) // [B, G, cs, R, P]: C·S
		cs5 = Reshape(TransposeAllDims(cs5, 0, 1, 3, 2, 4), bs, h, cs, p)              // [B, H, cs, P]
		outs[i] = Add(at(yDiag, i), Mul(cs5, InsertAxes(at(expCum, i), -1)))
		state = Add(Mul(state, InsertAxes(at(chunkDecay, i), -1)), at(own, i)) // [B, H, P, N]
	}
	y := Reshape(Stack(outs, 2), bs, h, tp, p) // [B, H, tp, P]
	if tp > t {
		y = SliceAxis(y, 2, AxisRange(0, t))
	}
	return TransposeAllDims(y, 0, 2, 1, 3), state // [B, T, H, P]
}

// GatedRMSNormFirst is Mamba-2's gated RMSNorm (MambaRMSNormGated,
// norm_before_gate false): in float32, z = x·silu(gate) normalized over
// each of groups equal parts of its last axis, times w: x, gate [..., D],
// w [D] -> [..., D] float32. Transformers' GraniteMoeHybrid and Bamba
// normalize over the whole axis (groups 1); mamba_ssm's kernels over
// D/ngroups.
func GatedRMSNormFirst(x, gate, w *Node, eps float64, groups int) *Node {
	f32 := dtypes.Float32
	return groupRMSNorm(Mul(ConvertDType(x, f32), SiLU(ConvertDType(gate, f32))), w, eps, groups)
}

// GatedRMSNormAfter is the gated RMSNorm with norm_before_gate true
// (Falcon-H1's mamba_norm_before_gate): in float32, x normalized over
// each of groups equal parts of its last axis, times w, times
// silu(gate). Shapes as GatedRMSNormFirst's.
func GatedRMSNormAfter(x, gate, w *Node, eps float64, groups int) *Node {
	f32 := dtypes.Float32
	return Mul(groupRMSNorm(ConvertDType(x, f32), w, eps, groups), SiLU(ConvertDType(gate, f32)))
}

// groupRMSNorm is z [..., D] float32 normalized over each of groups equal
// parts of its last axis, times w [D].
func groupRMSNorm(z, w *Node, eps float64, groups int) *Node {
	f32 := dtypes.Float32
	dims := z.Shape().Dimensions
	d := dims[len(dims)-1]
	zg := Reshape(z, append(append([]int(nil), dims[:len(dims)-1]...), groups, d/groups)...)
	ms := ReduceAndKeep(Square(zg), ReduceMean, -1)
	z = Reshape(Mul(zg, Rsqrt(AddScalar(ms, eps))), dims...)
	return Mul(ExpandLeftToRank(ConvertDType(w, f32), z.Rank()), z)
}

// Mamba2Params are one Mamba-2 mixer's tensors, as transformers' mixers
// name them: in_proj [ProjDim, H] (and its bias), conv1d [ConvDim, 1, K]
// (and its bias), dt_bias, A_log and D [Heads], norm [Inner], out_proj
// [H, Inner] (and its bias). The biases may be nil.
type Mamba2Params struct {
	InProj, InProjBias, Conv, ConvBias, DtBias, ALog, D, Norm, OutProj, OutProjBias *Node
}

// Mamba2Weights lists a Mamba-2 mixer's tensors under prefix (the
// mixer's scope and a dot: "model.layers.3.mamba."), for hidden states
// of hidden, with the convolution's bias and in_proj's and out_proj's
// when the config says. The mixer stays whole on every device under
// --tp, as Qwen3.5's DeltaNet does: its state is not split by head.
func Mamba2Weights(prefix string, d Mamba2Dims, hidden int, convBias, projBias bool) []lm.WeightSpec {
	return Mamba2Layout{ConvBias: convBias, InBias: projBias, OutBias: projBias}.Weights(prefix, d, hidden)
}

// Mamba2ParamsOf reads the tensors Mamba2Weights lists from the mixer's
// scope p.
func Mamba2ParamsOf(p *lm.Params, convBias, projBias bool) Mamba2Params {
	return Mamba2Layout{ConvBias: convBias, InBias: projBias, OutBias: projBias}.Params(p)
}

// Mamba2Layout says which of a Mamba-2 mixer's optional tensors a
// checkpoint has: the biases of conv1d, in_proj and out_proj, and (unless
// NoNorm) the gated norm's norm.weight.
type Mamba2Layout struct {
	ConvBias, InBias, OutBias, NoNorm bool
}

// Weights lists the mixer's tensors under prefix (as Mamba2Weights).
func (l Mamba2Layout) Weights(prefix string, d Mamba2Dims, hidden int) []lm.WeightSpec {
	var ws []lm.WeightSpec
	add := func(name string, matmul bool, shape ...int) {
		ws = append(ws, lm.WeightSpec{Name: prefix + name, Shape: shape, Matmul: matmul, TP: lm.Replicated})
	}
	add("in_proj.weight", true, d.ProjDim(), hidden)
	if l.InBias {
		add("in_proj.bias", false, d.ProjDim())
	}
	add("conv1d.weight", false, d.ConvDim(), 1, d.ConvKernel)
	if l.ConvBias {
		add("conv1d.bias", false, d.ConvDim())
	}
	add("dt_bias", false, d.Heads)
	add("A_log", false, d.Heads)
	add("D", false, d.Heads)
	if !l.NoNorm {
		add("norm.weight", false, d.Inner())
	}
	add("out_proj.weight", true, hidden, d.Inner())
	if l.OutBias {
		add("out_proj.bias", false, hidden)
	}
	return ws
}

// Params reads the tensors Weights lists from the mixer's scope p.
func (l Mamba2Layout) Params(p *lm.Params) Mamba2Params {
	opt := func(name string, on bool) *Node {
		if !on {
			return nil
		}
		return p.Get(name)
	}
	return Mamba2Params{
		InProj: p.Get("in_proj.weight"), InProjBias: opt("in_proj.bias", l.InBias),
		Conv: p.Get("conv1d.weight"), ConvBias: opt("conv1d.bias", l.ConvBias),
		DtBias: p.Get("dt_bias"), ALog: p.Get("A_log"), D: p.Get("D"), Norm: opt("norm.weight", !l.NoNorm),
		OutProj: p.Get("out_proj.weight"), OutProjBias: opt("out_proj.bias", l.OutBias),
	}
}

// Mamba2Norm is how a Mamba-2 mixer gates (and normalizes) its output y
// by the gate before out_proj.
type Mamba2Norm int

const (
	// Mamba2GateFirst normalizes y·silu(gate) (GatedRMSNormFirst:
	// Mamba2Mixer, Bamba, Granite 4.0-H, NemotronH).
	Mamba2GateFirst Mamba2Norm = iota
	// Mamba2NormFirst normalizes y, then multiplies by silu(gate)
	// (GatedRMSNormAfter: Falcon-H1's mamba_norm_before_gate).
	Mamba2NormFirst
	// Mamba2NoNorm is y·silu(gate) without a norm (Falcon-H1 without
	// mamba_rms_norm).
	Mamba2NoNorm
)

// Mamba2Options are a Mamba-2 mixer's settings beyond its sizes.
type Mamba2Options struct {
	// Eps is the gated norm's eps; NormGroups the parts it normalizes
	// apart; Chunk the SSD chunk for several tokens.
	Eps        float64
	NormGroups int
	Chunk      int
	Norm       Mamba2Norm
	// Mup, when not nil, multiplies in_proj's output part by part: five
	// factors for the gate, x, B, C and dt (Falcon-H1's ssm_multipliers,
	// its mup_vector), rounded to the compute dtype as the model's buffer
	// is.
	Mup []float64
	// DtMin and DtMax clamp dt after the softplus (time_step_limit) where
	// DtMin > 0 and DtMax is finite (0 or +Inf: no bound).
	DtMin, DtMax float64
}

// Mamba2 is a Mamba-2 mixer (Mamba2Mixer, BambaMixer) on x [B, T, H]
// continued from its state (conv, ssm; Mamba2State), returning [B, T, H]
// and the new state. in_proj gives the gate, the convolution's inputs
// and a step per head; the convolution (plus its bias, summed in float32
// and rounded once) and SiLU give x, B and C; dt = softplus(step +
// dt_bias) in float32, as mamba_ssm's kernels and vLLM compute it
// (transformers' torch_forward computes it in the model's dtype); the
// recurrence runs in float32 (chunked for several tokens, token by token
// for one) with the D skip; the output goes through the gated RMSNorm
// (normGroups parts) and out_proj.
//
// Left padding (step.Positions < 0) is zeroed before in_proj and before
// and after the convolution, so a padded row's states stay zero until
// its first token, as they are for the same row unpadded (transformers
// zeroes in_proj's input and the convolution's output only, which leaves
// a row's first tokens seeing the in_proj bias of its padding).
func Mamba2(d Mamba2Dims, w Mamba2Params, x, conv, ssm *Node, step *lm.Step, eps float64, normGroups, chunk int) (*Node, *Node, *Node) {
	return Mamba2With(d, w, x, conv, ssm, step, Mamba2Options{Eps: eps, NormGroups: normGroups, Chunk: chunk})
}

// Mamba2With is Mamba2 with the options o: Falcon-H1's multipliers on
// in_proj's output, dt clamped, the gate applied after the norm or
// without one.
func Mamba2With(d Mamba2Dims, w Mamba2Params, x, conv, ssm *Node, step *lm.Step, o Mamba2Options) (*Node, *Node, *Node) {
	eps, normGroups, chunk := o.Eps, o.NormGroups, o.Chunk
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	dtype := x.DType()
	f32 := dtypes.Float32
	isReal := RealTokens(step, dtype) // [B, T, 1]
	x = Mul(x, isReal)

	proj := Linear(x, w.InProj, w.InProjBias) // [B, T, ProjDim]
	inner, convDim := d.Inner(), d.ConvDim()
	if o.Mup != nil {
		gn := d.Groups * d.State
		vec := make([]float32, d.ProjDim())
		for i := range vec {
			part := 4 // dt
			switch {
			case i < inner:
				part = 0 // the gate
			case i < 2*inner:
				part = 1 // x
			case i < 2*inner+gn:
				part = 2 // B
			case i < 2*inner+2*gn:
				part = 3 // C
			}
			vec[i] = float32(o.Mup[part])
		}
		proj = Mul(proj, ExpandLeftToRank(ConvertDType(Const(proj.Graph(), vec), dtype), 3))
	}
	gate := SliceAxis(proj, 2, AxisRange(0, inner))
	xbc := Mul(SliceAxis(proj, 2, AxisRange(inner, inner+convDim)), isReal)
	dt := SliceAxis(proj, 2, AxisRange(inner+convDim, inner+convDim+d.Heads)) // [B, T, Heads]

	// The convolution sums its taps and bias in float32 and rounds once,
	// as torch's conv1d does; the state keeps its dtype.
	xf, convF := CausalConv1D(ConvertDType(xbc, f32), ConvertDType(conv, f32), w.Conv)
	conv = ConvertDType(convF, conv.DType())
	if w.ConvBias != nil {
		xf = Add(xf, ExpandLeftToRank(ConvertDType(w.ConvBias, f32), 3))
	}
	xbc = Mul(SiLU(ConvertDType(xf, dtype)), isReal)
	gn := d.Groups * d.State
	xs := Reshape(SliceAxis(xbc, 2, AxisRange(0, inner)), b, t, d.Heads, d.HeadDim)
	bm := Reshape(SliceAxis(xbc, 2, AxisRange(inner, inner+gn)), b, t, d.Groups, d.State)
	cm := Reshape(SliceAxis(xbc, 2, AxisRange(inner+gn, inner+2*gn)), b, t, d.Groups, d.State)

	dt = SoftplusTorch(Add(ConvertDType(dt, f32), ExpandLeftToRank(ConvertDType(w.DtBias, f32), 3)))
	if o.DtMin > 0 {
		dt = MaxScalar(dt, o.DtMin)
	}
	if o.DtMax > 0 && !math.IsInf(o.DtMax, 1) {
		dt = MinScalar(dt, o.DtMax)
	}
	dt = Mul(dt, ConvertDType(isReal, f32))  // [B, T, Heads]: no step on padding
	a := Neg(Exp(ConvertDType(w.ALog, f32))) // [Heads]

	var y *Node
	if t == 1 {
		y, ssm = RecurrentSSD(xs, dt, a, bm, cm, ssm)
	} else {
		y, ssm = ChunkSSD(xs, dt, a, bm, cm, ssm, chunk)
	}
	skip := Mul(ConvertDType(xs, f32), Reshape(ConvertDType(w.D, f32), 1, 1, d.Heads, 1))
	y = Reshape(Add(y, skip), b, t, inner)
	switch o.Norm {
	case Mamba2NormFirst:
		y = GatedRMSNormAfter(y, gate, w.Norm, eps, normGroups)
	case Mamba2NoNorm: // y (float32) times silu(gate) in the gate's dtype, as torch promotes them
		y = Mul(y, ConvertDType(SiLU(gate), f32))
	default:
		y = GatedRMSNormFirst(y, gate, w.Norm, eps, normGroups)
	}
	return Linear(ConvertDType(y, dtype), w.OutProj, w.OutProjBias), conv, ssm
}
