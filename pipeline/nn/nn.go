// Package nn is tputool's one library of graph operations, shared by the
// text-generation architectures and the diffusion components, one function
// per torch / transformers module idea and named after it: Linear,
// Embedding, RMSNorm, LayerNorm, GroupNorm, the activations (one
// Activation for every config name), the rotary embedding (rope.go),
// attention over a static KV cache and the multi-head attention of the
// diffusion models (attention.go), 2D convolution and nearest upsampling
// (conv.go), the gated MLPs, Gated DeltaNet (deltanet.go) and the MoE
// router and experts (moe.go). Modules that exist only in diffusers
// (resnet and transformer blocks, samplers, timestep embeddings) live in
// pipeline/diffusion/blocks.
//
// Everything here builds GoMLX graph nodes; nothing runs. Functions panic on
// shape errors, as GoMLX graph code does; executors recover the panics into
// errors at the exec boundary.
//
// Weights keep the Hugging Face layout: a linear weight is [out, in] and
// Linear contracts the last axis of x with axis 1 of the weight; no weight
// is ever transposed to [in, out]. On the pure-Go backend executors hand
// [out, in] weights in a blocked layout (rows split in parts, columns in
// blocks of 64, see Blocked), which Linear and Embedding accept and which
// that backend's matmul kernel runs in parallel at memory speed (see
// docs/compile.md).
package nn

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/loader/safetensors"
)

// Linear is torch.nn.Linear: x [..., in] · wᵀ + b -> [..., out], with an
// optional bias b [out] (nil for none). w is [out, in], or the blocked
// layout [J, P, rows, C] of the same matrix (see Blocked).
func Linear(x, w, b *Node) *Node {
	dims := x.Shape().Dimensions
	in := dims[x.Rank()-1]
	lead := dims[:x.Rank()-1]
	var y *Node
	switch w.Rank() {
	case 2:
		if w.Shape().Dimensions[1] != in {
			panic(fmt.Errorf("Linear: x %s and weight %s disagree on the input size", x.Shape(), w.Shape()))
		}
		y = DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil) // [..., out]
	case 4:
		d := w.Shape().Dimensions
		if d[0]*d[3] != in {
			panic(fmt.Errorf("Linear: x %s and blocked weight %s disagree on the input size", x.Shape(), w.Shape()))
		}
		n := 1
		for _, v := range lead {
			n *= v
		}
		y = blockedMatmul(Reshape(x, n, in), w)                        // [N, out]
		y = Reshape(y, append(append([]int{}, lead...), d[1]*d[2])...) // [..., out]
	default:
		panic(fmt.Errorf("Linear: weight must be [out, in] or blocked [J, P, rows, C], got %s", w.Shape()))
	}
	if b != nil {
		y = Add(y, ExpandLeftToRank(b, y.Rank()))
	}
	return y
}

// Blocked describes the blocked layout [J, P, rows, C] of a [out, in]
// matrix W, with P*rows = out and J*C = in: element (j, p, r, c) is
// W[p*rows + r, j*C + c]. The rows are split into P parts and the input
// axis into J blocks of C columns, each block keeping the rows' order.
//
// Executors use it on the pure-Go backend (see docs/compile.md), whose
// small-matrix DotGeneral kernel parallelizes only over batch axes and
// walks the contracting axis in blocks of 64: with C = 64 each (j, p)
// block is one contiguous stream for a matrix-vector product, instead of 64
// interleaved row streams, and all J*P blocks run in parallel.
type Blocked struct{ J, P, Rows, C int }

// blockedDirectRows is the largest number of input rows multiplied with
// the blocked weight directly; larger inputs (prefill) first copy the
// weight into [P, rows, in], because the direct form keeps J partial
// products of the whole output.
const blockedDirectRows = 16

// blockedMatmul is x [N, in] · Wᵀ for W in the blocked layout -> [N, out].
func blockedMatmul(x, w *Node) *Node {
	d := w.Shape().Dimensions
	j, p, rows, c := d[0], d[1], d[2], d[3]
	n := x.Shape().Dimensions[0]
	if j > 1 && n > blockedDirectRows {
		w = Reshape(TransposeAllDims(w, 1, 2, 0, 3), 1, p, rows, j*c) // [1, P, rows, in]
		j, c = 1, j*c
	}
	// Moving an axis of size 1 is a reshape: a one-row input (decode at
	// batch 1) needs no transposes, one part no broadcast.
	var xb *Node
	if n == 1 || j == 1 {
		xb = Reshape(x, j, 1, n, c) // [J, 1, N, C]
	} else {
		xb = InsertAxes(TransposeAllDims(Reshape(x, n, j, c), 1, 0, 2), 1) // [J, 1, N, C]
	}
	if p > 1 {
		xb = BroadcastToDims(xb, j, p, n, c) // [J, P, N, C]
	}
	y := DotGeneral(xb, []int{3}, []int{0, 1}, w, []int{3}, []int{0, 1}) // [J, P, N, rows]
	if j > 1 {
		y = ReduceSum(y, 0) // [P, N, rows]
	}
	if n > 1 && p > 1 {
		y = TransposeAllDims(Reshape(y, p, n, rows), 1, 0, 2) // [N, P, rows]
	}
	return Reshape(y, n, p*rows) // [N, out]
}

// Embedding is torch.nn.Embedding: ids [...] (integer) -> rows of w [V, H]
// (or of its blocked layout [J, P, V/P, C]) -> [..., H]. When w is a
// ConvertDType of a narrower weight (an executor holding the table in its
// checkpoint dtype), the rows are gathered first and only they are
// converted: the same values, without converting the whole table.
//
// Likewise for a table in DequantizeInt8's or DequantizeInt4's form: the
// quantised rows and their scales (or scale codes) are gathered and only
// they are dequantised.
func Embedding(w, ids *Node) *Node {
	if w.Type() == NodeTypeConvertDType && w.Rank() == 2 {
		return ConvertDType(Embedding(w.Inputs()[0], ids), w.DType())
	}
	if packed, codes, table, ok := dequantizeInt4Parts(w); ok {
		rows := Gather(packed, InsertAxes(ids, -1))          // [..., groups, 16]
		crows := Gather(codes, InsertAxes(ids, -1))          // [..., groups]
		return DequantizeInt4(rows, crows, table, w.DType()) // [..., H]
	}
	if q, scales, ok := dequantizeInt8Parts(w); ok {
		d := q.Shape().Dimensions
		rows := Gather(q, InsertAxes(ids, -1))       // [..., groups, G]
		srows := Gather(scales, InsertAxes(ids, -1)) // [..., groups, 1]
		y := Mul(ConvertDType(rows, dtypes.Float32), BroadcastToDims(srows, rows.Shape().Dimensions...))
		return Reshape(y, append(ids.Shape().Clone().Dimensions, d[1]*d[2])...) // [..., H]
	}
	switch w.Rank() {
	case 2:
		return Gather(w, InsertAxes(ids, -1)) // [..., H]
	case 4:
		d := w.Shape().Dimensions
		j, rows, c := d[0], d[2], d[3]
		g := ids.Graph()
		ids = ConvertDType(ids, dtypes.Int32)
		dims := append(append([]int{}, ids.Shape().Dimensions...), j)
		r := Scalar(g, dtypes.Int32, rows)
		part := BroadcastToDims(InsertAxes(Div(ids, r), -1), dims...)     // [..., J]
		row := BroadcastToDims(InsertAxes(Rem(ids, r), -1), dims...)      // [..., J]
		block := Iota(g, shapes.Make(dtypes.Int32, dims...), len(dims)-1) // [..., J]
		rowsOut := Gather(w, Stack([]*Node{block, part, row}, -1))        // [..., J, C]
		return Reshape(rowsOut, append(dims[:len(dims)-1:len(dims)-1], j*c)...)
	default:
		panic(fmt.Errorf("Embedding: weight must be [V, H] or blocked [J, P, V/P, C], got %s", w.Shape()))
	}
}

// DequantizeInt8 is the weight-only int8 dequantisation q · scale as a
// [out, in] matrix of dtype: q is int8 [out, in/G, G] and scales is f32
// [out, in/G, 1], one scale per group of G consecutive input columns
// (G = in: one per output channel). The form is fixed, Reshape(Mul(
// ConvertDType(q, f32), BroadcastInDim(scales))), so that a backend can
// recognise it under a DotGeneral and multiply the int8 weight directly
// (tputool's cpu backend does: tpu/cpu/quant.go); elsewhere it is computed
// as written.
func DequantizeInt8(q, scales *Node, dtype dtypes.DType) *Node {
	d := q.Shape().Dimensions
	r := len(d)
	want := append(slices.Clone(d[:max(r-1, 0)]), 1)
	if r < 3 || q.DType() != dtypes.Int8 || scales.DType() != dtypes.Float32 || !slices.Equal(scales.Shape().Dimensions, want) {
		panic(fmt.Errorf("DequantizeInt8: want int8 [..., out, groups, G] and float32 [..., out, groups, 1], got %s and %s", q.Shape(), scales.Shape()))
	}
	w := Reshape(Mul(ConvertDType(q, dtypes.Float32), BroadcastToDims(scales, d...)), append(slices.Clone(d[:r-2]), d[r-2]*d[r-1])...)
	if dtype != dtypes.Float32 {
		w = ConvertDType(w, dtype)
	}
	return w
}

// dequantizeInt8Parts returns q and scales when w is DequantizeInt8's
// f32 form (of a matrix or of a stack of them).
func dequantizeInt8Parts(w *Node) (q, scales *Node, ok bool) {
	if w.Type() != NodeTypeReshape || w.Rank() < 2 || w.DType() != dtypes.Float32 {
		return nil, nil, false
	}
	m := w.Inputs()[0]
	if m.Type() != NodeTypeMul || m.Rank() != w.Rank()+1 {
		return nil, nil, false
	}
	c, b := m.Inputs()[0], m.Inputs()[1]
	if c.Type() != NodeTypeConvertDType || c.Inputs()[0].DType() != dtypes.Int8 || b.Type() != NodeTypeBroadcastInDim {
		return nil, nil, false
	}
	q, scales = c.Inputs()[0], b.Inputs()[0]
	d := q.Shape().Dimensions
	if scales.DType() != dtypes.Float32 || !slices.Equal(scales.Shape().Dimensions, append(slices.Clone(d[:len(d)-1]), 1)) {
		return nil, nil, false
	}
	return q, scales, true
}

// RMSNorm normalizes over the last axis in float32, as transformers does,
// and scales by w [H]. With plusOne it is Gemma's variant: the scale is
// (1 + w) and is applied before casting back to the input dtype; otherwise
// it is Llama's: cast back, then multiply by w. A nil w scales by
// nothing (Llama 4's Llama4TextL2Norm of queries and keys).
func RMSNorm(x, w *Node, eps float64, plusOne bool) *Node {
	dtype := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	ms := ReduceAndKeep(Square(xf), ReduceMean, -1) // [..., 1]
	y := Mul(xf, Rsqrt(AddScalar(ms, eps)))         // [..., H]
	if w == nil {
		return ConvertDType(y, dtype)
	}
	wb := ExpandLeftToRank(w, x.Rank()) // [1, ..., H]
	if plusOne {
		y = Mul(y, OnePlus(ConvertDType(wb, dtypes.Float32)))
		return ConvertDType(y, dtype)
	}
	return Mul(ConvertDType(y, dtype), ConvertDType(wb, dtype))
}

// RMSNormF32Scale is RMSNorm scaled by w in float32 before the result is
// cast back to x's dtype (GptOssRMSNorm, AfmoeRMSNorm), where Llama's
// casts first and scales in x's dtype. In float32 the two are the same.
func RMSNormF32Scale(x, w *Node, eps float64) *Node {
	dtype := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	ms := ReduceAndKeep(Square(xf), ReduceMean, -1)
	y := Mul(Mul(xf, Rsqrt(AddScalar(ms, eps))), ExpandLeftToRank(ConvertDType(w, dtypes.Float32), x.Rank()))
	return ConvertDType(y, dtype)
}

// LayerNorm is torch.nn.LayerNorm over the last axis, with optional
// (nil) gamma and beta [H]. A 16-bit x is normalized in f32 and the
// result rounded back, as torch's kernels accumulate a bf16 or f16
// LayerNorm in f32 (a bf16 mean and variance over 768 values lose the
// small differences the norm divides by).
func LayerNorm(x, gamma, beta *Node, eps float64) *Node {
	if dt := x.DType(); dt == dtypes.BFloat16 || dt == dtypes.Float16 {
		f32 := func(n *Node) *Node {
			if n == nil {
				return nil
			}
			return ConvertDType(n, dtypes.Float32)
		}
		return ConvertDType(LayerNorm(f32(x), f32(gamma), f32(beta), eps), dt)
	}
	mean := ReduceAndKeep(x, ReduceMean, -1)
	centered := Sub(x, mean)
	variance := ReduceAndKeep(Square(centered), ReduceMean, -1)
	normed := Mul(centered, Rsqrt(AddScalar(variance, eps)))
	if gamma != nil {
		normed = Mul(normed, ExpandLeftToRank(gamma, x.Rank()))
	}
	if beta != nil {
		normed = Add(normed, ExpandLeftToRank(beta, x.Rank()))
	}
	return normed
}

// GroupNorm is torch.nn.GroupNorm on x [B, C, ...]: statistics over each
// group of C/groups channels and all trailing axes, then the per-channel
// affine transform by gamma and beta [C].
func GroupNorm(x, gamma, beta *Node, groups int, eps float64) *Node {
	dims := x.Shape().Dimensions
	b, c := dims[0], dims[1]
	if c%groups != 0 {
		panic(fmt.Errorf("GroupNorm: %d channels are not divisible into %d groups", c, groups))
	}
	g := Reshape(x, b, groups, -1) // [B, G, C/G * spatial]
	mean := ReduceAndKeep(g, ReduceMean, 2)
	centered := Sub(g, mean)
	variance := ReduceAndKeep(Square(centered), ReduceMean, 2)
	normed := Mul(centered, Rsqrt(AddScalar(variance, eps)))
	normed = Reshape(normed, dims...)
	// gamma, beta: [C] -> [1, C, 1, ...]
	affine := make([]int, len(dims))
	for i := range affine {
		affine[i] = 1
	}
	affine[1] = c
	return Add(Mul(normed, Reshape(gamma, affine...)), Reshape(beta, affine...))
}

// SiLU is x * sigmoid(x) (transformers' "silu").
func SiLU(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// GELU is the exact (erf) GELU of torch.nn.functional.gelu.
func GELU(x *Node) *Node {
	return Mul(MulScalar(x, 0.5), OnePlus(Erf(MulScalar(x, 1/math.Sqrt2))))
}

// GELUTanh is the tanh approximation of GELU (gelu(approximate="tanh"),
// transformers' "gelu_pytorch_tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))).
func GELUTanh(x *Node) *Node {
	inner := MulScalar(Add(x, MulScalar(Mul(x, Square(x)), 0.044715)), math.Sqrt(2/math.Pi))
	return Mul(MulScalar(x, 0.5), OnePlus(Tanh(inner)))
}

// XIELU is the xIELU activation (Huang et al., 2024, arXiv:2411.13010;
// transformers' XIELUActivation) with its learned scalars, each [1] or []
// in any float dtype: alpha_p a = softplus(alphaP), alpha_n
// b = beta + softplus(alphaN); a·x² + beta·x where x > 0, else
// (expm1(min(x, eps)) − x)·b + beta·x. Computed in x's dtype.
func XIELU(x, alphaP, alphaN, beta, eps *Node) *Node {
	scalar := func(n *Node) *Node { return Reshape(ConvertDType(n, x.DType())) }
	bt, ep := scalar(beta), scalar(eps)
	a, b := SoftplusTorch(scalar(alphaP)), Add(bt, SoftplusTorch(scalar(alphaN)))
	bx := Mul(x, bt)
	pos := Add(Mul(Mul(x, x), a), bx)
	neg := Add(Mul(Sub(Expm1(Min(x, BroadcastToShape(ep, x.Shape()))), x), b), bx)
	return Where(GreaterThan(x, ZerosLike(x)), pos, neg)
}

// QuickGELU is CLIP's x * sigmoid(1.702 x).
func QuickGELU(x *Node) *Node { return Mul(x, Sigmoid(MulScalar(x, 1.702))) }

// ReLU is max(x, 0).
func ReLU(x *Node) *Node { return Max(x, ZerosLike(x)) }

// ReLU2 is relu(x)² (transformers' "relu2", Primer's squared ReLU).
func ReLU2(x *Node) *Node { return Square(ReLU(x)) }

// Mish is x · tanh(softplus(x)).
func Mish(x *Node) *Node { return Mul(x, Tanh(Softplus(x))) }

// activations maps the names configs use (transformers' hidden_act or
// hidden_activation, as its ACT2FN names them; diffusers' act_fn) to the
// activation functions. ("gelu_accurate" is the tanh approximation
// written another way, the same function.)
var activations = map[string]func(*Node) *Node{
	"silu": SiLU, "swish": SiLU,
	"gelu":              GELU,
	"gelu_pytorch_tanh": GELUTanh, "gelu_tanh": GELUTanh, "gelu_new": GELUTanh, "gelu_fast": GELUTanh, "gelu_accurate": GELUTanh,
	"quick_gelu": QuickGELU,
	"relu":       ReLU, "relu2": ReLU2,
	"sigmoid": Sigmoid, "tanh": Tanh, "mish": Mish,
}

// Activation returns the activation a config names ("silu"/"swish",
// "gelu", "gelu_pytorch_tanh"/"gelu_tanh"/"gelu_new"/"gelu_fast"/
// "gelu_accurate", "quick_gelu", "relu", "relu2", "sigmoid", "tanh",
// "mish"), or nil when it is unknown.
func Activation(name string) func(*Node) *Node { return activations[name] }

// KnownActivation reports whether Activation knows name; configs check it
// when they are read, so that an unknown activation is an error naming it
// before any graph is built.
func KnownActivation(name string) bool { return activations[name] != nil }

// ActivationNames lists the names Activation knows, sorted, for error
// messages.
func ActivationNames() []string { return slices.Sorted(maps.Keys(activations)) }

// Activate applies the activation named name to x. It panics on an unknown
// name, which the config check (KnownActivation) reports first.
func Activate(name string, x *Node) *Node {
	act := activations[name]
	if act == nil {
		panic(fmt.Errorf("unsupported activation %q", name))
	}
	return act(x)
}

// GatedMLP is the Llama/Gemma MLP: down(act(gate(x)) * up(x)). With act =
// SiLU it is SwiGLU, with GELUTanh it is GeGLU. Biases may be nil.
func GatedMLP(x, gate, gateB, up, upB, down, downB *Node, act func(*Node) *Node) *Node {
	return Linear(Mul(act(Linear(x, gate, gateB)), Linear(x, up, upB)), down, downB)
}

// Softcap is cap * tanh(x / cap) (Gemma's logit soft-capping); cap <= 0
// returns x.
func Softcap(x *Node, cap float64) *Node {
	if cap <= 0 {
		return x
	}
	return MulScalar(Tanh(DivScalar(x, cap)), cap)
}

// RoundTo rounds a host constant to what it becomes in dtype (round to
// nearest even), so a constant multiplied in the graph equals the one
// PyTorch uses after `.to(dtype)`.
func RoundTo(v float64, dtype dtypes.DType) float64 {
	switch dtype {
	case dtypes.BFloat16:
		return float64(math.Float32frombits(uint32(safetensors.Float32ToBF16(float32(v))) << 16))
	case dtypes.Float32:
		return float64(float32(v))
	}
	return v
}

// iotaInt returns an int32 iota of the given dimensions along axis.
func iotaInt(g *Graph, axis int, dims ...int) *Node {
	return Iota(g, shapes.Make(dtypes.Int32, dims...), axis)
}
