package nn

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/pipeline/lm"
)

// Gated DeltaNet ("Gated Delta Networks: Improving Mamba2 with Delta Rule",
// Yang, Kautz and Hatamizadeh, 2024, arXiv:2412.06464), the linear-attention
// token mixer of Qwen3-Next and Qwen3.5, following transformers'
// models/qwen3_5/modeling_qwen3_5.py (Qwen3_5GatedDeltaNet and its torch
// fallbacks torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule)
// and flash-linear-attention's chunk_gated_delta_rule.
//
// Per value head, with a state S [Dk, Dv] and per token t:
//
//	S   = exp(g_t) S                       (gating: decay, g_t <= 0)
//	S  += k_t ⊗ β_t (v_t - Sᵀ k_t)         (delta rule, learning rate β_t)
//	o_t = Sᵀ q_t
//
// with q and k L2-normalized and q scaled by 1/sqrt(Dk). The recurrent form
// runs that loop; the chunked form processes chunks of C tokens with
// matmuls (the WY/UT representation) and carries S between chunks only.

// KindLinearAttention is the layer kind of Gated DeltaNet layers
// (transformers' layer_types "linear_attention").
const KindLinearAttention = "linear_attention"

// DeltaNetDims are the sizes of a Gated DeltaNet layer.
type DeltaNetDims struct {
	// KHeads and VHeads are linear_num_key_heads and linear_num_value_heads
	// (VHeads a multiple of KHeads: each query/key head serves
	// VHeads/KHeads consecutive value heads).
	KHeads, VHeads int
	// KDim and VDim are linear_key_head_dim and linear_value_head_dim.
	KDim, VDim int
	// ConvKernel is linear_conv_kernel_dim.
	ConvKernel int
}

// KeyDim is the width of the query and key projections.
func (d DeltaNetDims) KeyDim() int { return d.KHeads * d.KDim }

// ValueDim is the width of the value projection.
func (d DeltaNetDims) ValueDim() int { return d.VHeads * d.VDim }

// ConvDim is the number of channels of the causal convolution (q, k and v).
func (d DeltaNetDims) ConvDim() int { return 2*d.KeyDim() + d.ValueDim() }

// Validate checks that the sizes fit together; where names the config.
func (d DeltaNetDims) Validate(where string) error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"linear_num_key_heads", d.KHeads}, {"linear_num_value_heads", d.VHeads},
		{"linear_key_head_dim", d.KDim}, {"linear_value_head_dim", d.VDim}, {"linear_conv_kernel_dim", d.ConvKernel},
	} {
		if f.v <= 0 { // in a fixed order: a map would name a different field on each run
			return fmt.Errorf("%s: %s must be positive, got %d", where, f.name, f.v)
		}
	}
	if d.VHeads%d.KHeads != 0 {
		return fmt.Errorf("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", where, d.VHeads, d.KHeads)
	}
	return nil
}

// DeltaNetState returns the fixed-size state of one Gated DeltaNet layer:
// "conv", the last ConvKernel-1 inputs of the causal convolution [B,
// ConvKernel-1, ConvDim] in the compute dtype, and "recurrent", the delta
// rule state [B, VHeads, KDim, VDim] in float32 (transformers keeps it in
// float32, mamba_ssm_dtype). Neither depends on the sequence length.
func DeltaNetState(d DeltaNetDims, batch int) []lm.StateSpec {
	return []lm.StateSpec{
		{Name: "conv", Shape: []int{batch, d.ConvKernel - 1, d.ConvDim()}, SlotAxis: lm.NoSlots},
		{Name: "recurrent", Shape: []int{batch, d.VHeads, d.KDim, d.VDim}, DType: dtypes.Float32, SlotAxis: lm.NoSlots},
	}
}

// CausalConv1D is the depthwise causal convolution of Qwen3_5GatedDeltaNet
// (torch Conv1d with groups = channels, padding K-1, no bias) continued
// from a state: x [B, T, C], state [B, K-1, C] (the previous K-1 inputs,
// zeros at the start), w [C, 1, K] (the checkpoint layout) ->
// out [B, T, C], newState [B, K-1, C] (the last K-1 inputs).
//
//	out[t, c] = Σ_j w[c, 0, j] · [state; x][t + j, c]
//
// The concatenation replaces the Pad op, which not every backend has.
func CausalConv1D(x, state, w *Node) (*Node, *Node) {
	dims := x.Shape().Dimensions
	t, c := dims[1], dims[2]
	k := w.Shape().Dimensions[2]
	if w.Shape().Dimensions[0] != c || state.Shape().Dimensions[1] != k-1 {
		panic(fmt.Errorf("CausalConv1D: x %s, state %s and weight %s disagree", x.Shape(), state.Shape(), w.Shape()))
	}
	w2 := ConvertDType(Reshape(w, c, k), x.DType())                    // [C, K]
	full := Concatenate([]*Node{ConvertDType(state, x.DType()), x}, 1) // [B, K-1+T, C]
	var out *Node
	for j := 0; j < k; j++ {
		tap := Reshape(SliceAxis(w2, 1, AxisElem(j)), 1, 1, c)  // [1, 1, C]
		term := Mul(SliceAxis(full, 1, AxisRange(j, j+t)), tap) // [B, T, C]
		if out == nil {
			out = term
		} else {
			out = Add(out, term)
		}
	}
	newState := SliceAxis(full, 1, AxisRange(t, t+k-1)) // [B, K-1, C]
	return out, newState
}

// L2NormEps is flash-linear-attention's l2norm over the last axis:
// x / sqrt(Σx² + eps).
func L2NormEps(x *Node, eps float64) *Node {
	return Mul(x, Rsqrt(AddScalar(ReduceAndKeep(Square(x), ReduceSum, -1), eps)))
}

// SoftplusTorch is torch.nn.functional.softplus with its default threshold
// 20: log(1 + exp(x)), and x itself above the threshold.
func SoftplusTorch(x *Node) *Node {
	return Where(GreaterThan(x, Scalar(x.Graph(), x.DType(), 20)), x, Log1p(Exp(x)))
}

// GatedRMSNorm is Qwen3_5RMSNormGated: x normalized over its last axis in
// float32, cast back and scaled by w (a plain weight, not 1+w), then
// multiplied by silu(gate) in float32: x, gate [..., D], w [D] -> [..., D]
// in x's dtype.
func GatedRMSNorm(x, gate, w *Node, eps float64) *Node {
	dtype := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	ms := ReduceAndKeep(Square(xf), ReduceMean, -1)
	y := ConvertDType(Mul(xf, Rsqrt(AddScalar(ms, eps))), dtype)
	y = Mul(ConvertDType(ExpandLeftToRank(w, x.Rank()), dtype), y)
	y = Mul(ConvertDType(y, dtypes.Float32), SiLU(ConvertDType(gate, dtypes.Float32)))
	return ConvertDType(y, dtype)
}

// SigmoidGatedRMSNorm is flash-linear-attention's FusedRMSNormGated with
// activation "sigmoid" (Kimi Delta Attention's o_norm), computed in
// float32 as its kernel computes: x normalized over its last axis, times
// the plain weight w, times sigmoid(gate): x, gate [..., D], w [D] ->
// [..., D] in x's dtype.
func SigmoidGatedRMSNorm(x, gate, w *Node, eps float64) *Node {
	dtype := x.DType()
	f32 := dtypes.Float32
	xf := ConvertDType(x, f32)
	y := Mul(xf, Rsqrt(AddScalar(ReduceAndKeep(Square(xf), ReduceMean, -1), eps)))
	y = Mul(y, ExpandLeftToRank(ConvertDType(w, f32), x.Rank()))
	return ConvertDType(Mul(y, Sigmoid(ConvertDType(gate, f32))), dtype)
}

// DeltaRuleInputs prepares queries and keys for the delta rule the way
// transformers' use_qk_l2norm_in_kernel path does: cast to float32, repeat
// each of the KHeads query/key heads for its VHeads/KHeads value heads,
// L2-normalize (eps 1e-6) and scale queries by 1/sqrt(Dk).
// q, k [B, T, KHeads, Dk] -> [B, T, VHeads, Dk] float32.
func DeltaRuleInputs(q, k *Node, vHeads int) (*Node, *Node) {
	prep := func(x *Node) *Node {
		dims := x.Shape().Dimensions
		b, t, h, d := dims[0], dims[1], dims[2], dims[3]
		x = ConvertDType(x, dtypes.Float32)
		if vHeads != h {
			rep := vHeads / h
			x = BroadcastToDims(InsertAxes(x, 3), b, t, h, rep, d) // [B, T, Hk, rep, D]
			x = Reshape(x, b, t, vHeads, d)                        // value head h*rep+r uses key head h
		}
		return L2NormEps(x, 1e-6)
	}
	q, k = prep(q), prep(k)
	d := q.Shape().Dimensions[3]
	return MulScalar(q, 1/math.Sqrt(float64(d))), k
}

// RecurrentGatedDeltaRule runs the delta rule token by token (transformers'
// torch_recurrent_gated_delta_rule; used for decode steps): q, k
// [B, T, H, Dk] and v [B, T, H, Dv] (prepared by DeltaRuleInputs; v cast
// to float32 here), beta [B, T, H] float32, state [B, H, Dk, Dv]
// float32 -> out [B, T, H, Dv] float32 and the new state. The log-decays
// g are one a head, [B, T, H] (Gated DeltaNet), or one a key channel,
// [B, T, H, Dk] (Kimi Delta Attention: S = diag(exp(g_t)) S decays each
// row of the state by its own gate; flash-linear-attention's
// naive_recurrent_kda).
func RecurrentGatedDeltaRule(q, k, v, g, beta, state *Node) (*Node, *Node) {
	t := q.Shape().Dimensions[1]
	v = ConvertDType(v, dtypes.Float32)
	at := func(x *Node, i int) *Node { return Squeeze(SliceAxis(x, 1, AxisElem(i)), 1) }
	perChannel := g.Rank() == 4
	outs := make([]*Node, t)
	for i := 0; i < t; i++ {
		qt, kt, vt := at(q, i), at(k, i), at(v, i) // [B, H, D]
		gt, bt := at(g, i), at(beta, i)            // [B, H] ([B, H, Dk] per channel)
		if perChannel {
			state = Mul(state, InsertAxes(Exp(gt), -1)) // decay each key channel's row
		} else {
			state = Mul(state, InsertAxes(Exp(gt), -1, -1)) // decay
		}
		mem := DotGeneral(kt, []int{2}, []int{0, 1}, state, []int{2}, []int{0, 1})    // [B, H, Dv]: Sᵀk
		delta := Mul(Sub(vt, mem), InsertAxes(bt, -1))                                // [B, H, Dv]
		state = Add(state, Mul(InsertAxes(kt, -1), InsertAxes(delta, 2)))             // S += k ⊗ delta
		outs[i] = DotGeneral(qt, []int{2}, []int{0, 1}, state, []int{2}, []int{0, 1}) // [B, H, Dv]: Sᵀq
	}
	return Stack(outs, 1), state // [B, T, H, Dv]
}

// ChunkGatedDeltaRule runs the delta rule in chunks of chunk tokens
// (transformers' torch_chunk_gated_delta_rule, flash-linear-attention's
// chunk_gated_delta_rule; used for prefill). Shapes as in
// RecurrentGatedDeltaRule. chunk is rounded down to a power of two and
// capped at the next power of two >= T; T is padded with zero tokens (no
// decay, no update) to a whole number of chunks, which are unrolled (GoMLX
// has no While op).
//
// Within a chunk, with cumulative log-decays γ_i = Σ_{j<=i} g_j and
// Γ_ij = exp(γ_i - γ_j) for j <= i (0 above the diagonal):
//
//	A   = I + strictlyLower((β k) kᵀ ∘ Γ)        (the UT system)
//	U   = A⁻¹ (β v),  W = A⁻¹ (β k ∘ exp(γ))
//	V'  = U - W S                                (new values given the carried state)
//	O   = (q ∘ exp(γ)) S + (q kᵀ ∘ Γ) V'
//	S  ← exp(γ_C) S + (k ∘ exp(γ_C - γ))ᵀ V'
//
// A⁻¹ is computed by recursive doubling of inverted diagonal blocks (the
// block form of forward substitution, as fla's solve_tril does). With
// log-decays one a key channel (g [B, T, H, Dk]), γ and Γ are a key
// channel's too, and the products over the key channels above weigh
// each channel by its own (channelDecays).
func ChunkGatedDeltaRule(q, k, v, g, beta, state *Node, chunk int) (*Node, *Node) {
	dims := q.Shape().Dimensions
	b, t, h := dims[0], dims[1], dims[2]
	dv := v.Shape().Dimensions[3]
	cs := 1
	for cs*2 <= chunk {
		cs *= 2
	}
	for cs/2 >= t && cs > 1 {
		cs /= 2
	}
	nc := (t + cs - 1) / cs
	tp := nc * cs
	gr := q.Graph()
	f32 := dtypes.Float32

	// [B, T, H, D] -> [B, H, T, D] (float32), padded to tp tokens with zeros.
	heads := func(x *Node) *Node {
		x = ConvertDType(x, f32)
		if x.Rank() == 3 {
			x = TransposeAllDims(x, 0, 2, 1) // [B, H, T]
		} else {
			x = TransposeAllDims(x, 0, 2, 1, 3) // [B, H, T, D]
		}
		if tp > t {
			pd := x.Shape().Clone()
			pd.Dimensions[2] = tp - t
			x = Concatenate([]*Node{x, Zeros(gr, pd)}, 2)
		}
		return x
	}
	qh, kh, vh, gh, bh := heads(q), heads(k), heads(v), heads(g), heads(beta)
	vb := Mul(vh, InsertAxes(bh, -1)) // β v
	kb := Mul(kh, InsertAxes(bh, -1)) // β k
	chunked := func(x *Node) *Node {  // [B, H, tp, D] -> [B, H, nc, cs, D]
		d := x.Shape().Dimensions[3]
		return Reshape(x, b, h, nc, cs, d)
	}
	qc, kc, vbc, kbc := chunked(qh), chunked(kh), chunked(vb), chunked(kb)

	// The decays within each chunk: γ, the cumulative log-decays, and Γ.
	// ut is (βk)kᵀ ∘ Γ and intra qkᵀ ∘ Γ [B, H, nc, cs, cs]; wIn is βk ∘
	// exp(γ), qd q ∘ exp(γ) and kd k ∘ exp(γ_C - γ) [B, H, nc, cs, Dk];
	// chunkDecay exp(γ_C), broadcastable against the state [B, H, Dk, Dv]
	// once a chunk is picked.
	var ut, intra, wIn, qd, kd, chunkDecay *Node
	batch := []int{0, 1, 2}
	if g.Rank() == 4 {
		ut, intra, wIn, qd, kd, chunkDecay = channelDecays(gh, qc, kc, kbc, nc, cs)
	} else {
		cum, decay := chunkDecays(Reshape(gh, b, h, nc, cs)) // γ [B, H, nc, cs], Γ [B, H, nc, cs, cs]
		ut = Mul(DotGeneral(kbc, []int{4}, batch, kc, []int{4}, batch), decay)
		intra = Mul(DotGeneral(qc, []int{4}, batch, kc, []int{4}, batch), decay)
		expCum := InsertAxes(Exp(cum), -1) // [B, H, nc, cs, 1]
		wIn, qd = Mul(kbc, expCum), Mul(qc, expCum)
		last := SliceAxis(cum, 3, AxisElem(cs-1))         // [B, H, nc, 1]
		kd = Mul(kc, InsertAxes(Exp(Sub(last, cum)), -1)) // k ∘ exp(γ_C - γ)
		chunkDecay = InsertAxes(Exp(last), -1)            // [B, H, nc, 1, 1]
	}

	below := LessThan(Iota(gr, shapes.Make(dtypes.Int32, cs, cs), 1), Iota(gr, shapes.Make(dtypes.Int32, cs, cs), 0)) // j < i at (i, j)
	strict := Where(BroadcastToDims(ExpandLeftToRank(below, 5), b, h, nc, cs, cs), ut, ZerosLike(ut))
	inv := Reshape(unitLowerInverse(Reshape(strict, b*h*nc, cs, cs)), b, h, nc, cs, cs) // A⁻¹
	u := DotGeneral(inv, []int{4}, batch, vbc, []int{3}, batch)                         // [B, H, nc, cs, Dv]
	w := DotGeneral(inv, []int{4}, batch, wIn, []int{3}, batch)                         // [B, H, nc, cs, Dk]

	at := func(x *Node, i int) *Node { return Squeeze(SliceAxis(x, 2, AxisElem(i)), 2) }
	hb := []int{0, 1}
	outs := make([]*Node, nc)
	for i := 0; i < nc; i++ {
		vNew := Sub(at(u, i), DotGeneral(at(w, i), []int{3}, hb, state, []int{2}, hb))   // [B, H, cs, Dv]
		inter := DotGeneral(at(qd, i), []int{3}, hb, state, []int{2}, hb)                // [B, H, cs, Dv]
		outs[i] = Add(inter, DotGeneral(at(intra, i), []int{3}, hb, vNew, []int{2}, hb)) // [B, H, cs, Dv]
		update := DotGeneral(at(kd, i), []int{2}, hb, vNew, []int{2}, hb)                // [B, H, Dk, Dv]
		state = Add(Mul(state, at(chunkDecay, i)), update)                               // [B, H, Dk, Dv]
	}
	out := Reshape(Stack(outs, 2), b, h, tp, dv) // [B, H, tp, Dv]
	if tp > t {
		out = SliceAxis(out, 2, AxisRange(0, t))
	}
	return TransposeAllDims(out, 0, 2, 1, 3), state // [B, T, H, Dv]
}

// channelDecays is ChunkGatedDeltaRule's chunk algebra for log-decays
// one a key channel (Kimi Delta Attention; the KDA paper's chunkwise
// form, flash-linear-attention's naive_chunk_kda): gh [B, H, tp, Dk] is
// chunked like qc, kc and kbc [B, H, nc, cs, Dk], and every product over
// the key channels weighs channel d by its own decay between the two
// positions, Γ_ijd = exp(γ_id - γ_jd):
//
//	ut_ij    = Σ_d (βk)_id k_jd Γ_ijd,   intra_ij = Σ_d q_id k_jd Γ_ijd
//
// For j <= i each exponent is a sum of log-decays, <= 0: nothing
// overflows, however strong the decay (the factored form k ∘ exp(-γ)
// would, which is why fla splits chunks into sub-chunks). Above the
// diagonal the exponent is capped at 0 (min(·, 0) also absorbs a
// rounding of the scan above 0 below it); those entries of ut are never
// read (the UT system takes its strictly lower part) and intra's are
// cleared here, on the [cs, cs] products rather than on Γ. The cost is
// cs·Dk exponentials a token and head, so KDA's chunks are short.
// chunkDecay is returned as [B, H, nc, Dk, 1], a chunk's rows of the
// state decayed each by its channel's.
func channelDecays(gh, qc, kc, kbc *Node, nc, cs int) (ut, intra, wIn, qd, kd, chunkDecay *Node) {
	dims := gh.Shape().Dimensions
	b, h, dk := dims[0], dims[1], dims[3]
	cum := scanSum(Reshape(gh, b, h, nc, cs, dk), 3) // γ [B, H, nc, cs, Dk]
	// Γ [B, H, nc, cs(i), cs(j), Dk]
	decay := Exp(MinScalar(Sub(InsertAxes(cum, 4), InsertAxes(cum, 3)), 0))
	// pair is Σ_d a_id c_jd Γ_ijd [B, H, nc, cs, cs].
	pair := func(a, c *Node) *Node { return ReduceSum(Mul(Mul(InsertAxes(a, 4), InsertAxes(c, 3)), decay), -1) }
	ut = pair(kbc, kc)
	lowerIncl := BroadcastToDims(ExpandLeftToRank(LowerTriangular(gh.Graph(), cs), 5), b, h, nc, cs, cs) // j <= i at (i, j)
	intra = pair(qc, kc)
	intra = Where(lowerIncl, intra, ZerosLike(intra))
	expCum := Exp(cum)
	wIn, qd = Mul(kbc, expCum), Mul(qc, expCum)
	last := SliceAxis(cum, 3, AxisElem(cs-1)) // [B, H, nc, 1, Dk]: γ_C
	kd = Mul(kc, Exp(Sub(last, cum)))
	chunkDecay = TransposeAllDims(Exp(last), 0, 1, 2, 4, 3) // [B, H, nc, Dk, 1]
	return ut, intra, wIn, qd, kd, chunkDecay
}

// scanSum is the cumulative sum of x along axis: a scan of shifted adds
// (log2 of the axis's length of them), exact float32 additions on every
// backend (see chunkDecays).
func scanSum(x *Node, axis int) *Node {
	n := x.Shape().Dimensions[axis]
	cum := x
	for s := 1; s < n; s *= 2 { // Hillis–Steele: after the step of s, each entry sums the 2s before it
		pd := cum.Shape().Clone()
		pd.Dimensions[axis] = s
		shifted := Concatenate([]*Node{Zeros(x.Graph(), pd), SliceAxis(cum, axis, AxisRange(0, n-s))}, axis)
		cum = Add(cum, shifted)
	}
	return cum
}

// chunkDecays returns, for log-decays g [..., cs] (chunks of cs
// tokens on the last axis), their cumulative sums γ_i = Σ_{j<=i} g_j
// [..., cs] and the decays between positions Γ_ij = exp(γ_i - γ_j) for j
// <= i, 0 above the diagonal [..., cs, cs]. The sums are a scan of
// shifted adds (log2(cs) of them), exact float32 additions on every
// backend: a matmul with a triangle of ones would be the same sum, but
// XLA runs float32 products at the device's default precision (bf16
// passes on a TPU, TF32 on NVIDIA), whose error the exponentials of
// long sums would magnify. Every exponent is <= 0 where g is, so nothing
// overflows.
func chunkDecays(g *Node) (cum, decay *Node) {
	dims := g.Shape().Dimensions
	r := len(dims)
	cs := dims[r-1]
	cum = scanSum(g, r-1)
	lowerIncl := LowerTriangular(g.Graph(), cs)                                                  // [cs, cs]: j <= i at (i, j)
	diff := Sub(InsertAxes(cum, -1), InsertAxes(cum, r-1))                                       // [..., cs(i), cs(j)]: γ_i - γ_j
	mask := BroadcastToDims(ExpandLeftToRank(lowerIncl, r+1), append(slices.Clone(dims), cs)...) //
	decay = Where(mask, Exp(Where(mask, diff, ZerosLike(diff))), ZerosLike(diff))                // Γ
	return cum, decay
}

// unitLowerInverse returns (I + L)⁻¹ for L [N, n, n] strictly lower
// triangular, n a power of two. The inverses of the diagonal blocks are
// doubled in size log2(n) times:
//
//	[A 0; C D]⁻¹ = [A⁻¹ 0; -D⁻¹ C A⁻¹  D⁻¹]
//
// with every block pair of a level handled as one batched matmul.
func unitLowerInverse(l *Node) *Node {
	dims := l.Shape().Dimensions
	n, size := dims[0], dims[1]
	if size&(size-1) != 0 {
		panic(fmt.Errorf("unitLowerInverse: size %d is not a power of two", size))
	}
	g := l.Graph()
	dtype := l.DType()
	inv := Ones(g, shapes.Make(dtype, n, size, 1, 1)) // inverses of the size 1x1 diagonal blocks
	for s := 1; s < size; s *= 2 {
		p := size / (2 * s)
		// The p diagonal blocks of size 2s of L: [N, p, 2s, 2s].
		l5 := Reshape(l, n, p, 2*s, p, 2*s)
		eye := ConvertDType(Diagonal(g, p), dtype)                                  // [p, p]
		sel := Reshape(eye, 1, p, 1, p, 1)                                          // [1, p, 1, p, 1]
		blocks := ReduceSum(Mul(l5, sel), 3)                                        // [N, p, 2s, 2s]
		c := SliceAxis(SliceAxis(blocks, 2, AxisRange(s, 2*s)), 3, AxisRange(0, s)) // [N, p, s, s]
		pairs := Reshape(inv, n, p, 2, s, s)
		a := Squeeze(SliceAxis(pairs, 2, AxisElem(0)), 2)                          // A⁻¹ [N, p, s, s]
		d := Squeeze(SliceAxis(pairs, 2, AxisElem(1)), 2)                          // D⁻¹ [N, p, s, s]
		dc := DotGeneral(d, []int{3}, []int{0, 1}, c, []int{2}, []int{0, 1})       // D⁻¹C
		ll := Neg(DotGeneral(dc, []int{3}, []int{0, 1}, a, []int{2}, []int{0, 1})) // -D⁻¹CA⁻¹
		top := Concatenate([]*Node{a, ZerosLike(a)}, 3)                            // [N, p, s, 2s]
		bottom := Concatenate([]*Node{ll, d}, 3)                                   // [N, p, s, 2s]
		inv = Concatenate([]*Node{top, bottom}, 2)                                 // [N, p, 2s, 2s]
	}
	return Reshape(inv, n, size, size)
}
