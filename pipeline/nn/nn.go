// Package nn holds the graph blocks that the text-generation architectures
// share, one function per transformers module idea and named after it:
// Linear, Embedding, RMSNorm, the rotary embedding (rope.go), attention over
// a static KV cache (attention.go), and the gated MLPs.
//
// Everything here builds GoMLX graph nodes; nothing runs. Functions panic on
// shape errors, as GoMLX graph code does; executors recover the panics into
// errors at the exec boundary.
//
// Weights keep the Hugging Face layout: a linear weight is [out, in] and
// Linear contracts the last axis of x with axis 1 of the weight, so no
// weight is ever transposed. Executors may hand a [out, in] weight in the
// row-split layout [parts, out/parts, in] (the same bytes): Linear and
// Embedding then compute the same result as parts independent matmuls,
// which the pure-Go backend runs in parallel (see docs/compile.md).
package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/loader/safetensors"
)

// Linear is torch.nn.Linear: x [..., in] · wᵀ + b -> [..., out], with w
// [out, in] (or row-split [parts, out/parts, in]) and an optional bias b
// [out] (nil for none).
func Linear(x, w, b *Node) *Node {
	in := x.Shape().Dimensions[x.Rank()-1]
	var y *Node
	switch w.Rank() {
	case 2:
		if w.Shape().Dimensions[1] != in {
			panic(fmt.Errorf("Linear: x %s and weight %s disagree on the input size", x.Shape(), w.Shape()))
		}
		y = DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil) // [..., out]
	case 3:
		parts, rows := w.Shape().Dimensions[0], w.Shape().Dimensions[1]
		if w.Shape().Dimensions[2] != in {
			panic(fmt.Errorf("Linear: x %s and row-split weight %s disagree on the input size", x.Shape(), w.Shape()))
		}
		lead := x.Shape().Dimensions[:x.Rank()-1]
		n := 1
		for _, d := range lead {
			n *= d
		}
		flat := Reshape(x, n, in)                                       // [N, in]
		xb := BroadcastToDims(InsertAxes(flat, 0), parts, n, in)        // [parts, N, in]
		y = DotGeneral(xb, []int{2}, []int{0}, w, []int{2}, []int{0})   // [parts, N, rows]
		y = TransposeAllDims(y, 1, 0, 2)                                // [N, parts, rows]
		y = Reshape(y, append(append([]int{}, lead...), parts*rows)...) // [..., out]
	default:
		panic(fmt.Errorf("Linear: weight must be [out, in] or [parts, out/parts, in], got %s", w.Shape()))
	}
	if b != nil {
		y = Add(y, ExpandLeftToRank(b, y.Rank()))
	}
	return y
}

// Embedding is torch.nn.Embedding: ids [...] (integer) -> rows of w [V, H]
// (or row-split [parts, V/parts, H]) -> [..., H].
func Embedding(w, ids *Node) *Node {
	switch w.Rank() {
	case 2:
		return Gather(w, InsertAxes(ids, -1)) // [..., H]
	case 3:
		rows := w.Shape().Dimensions[1]
		ids = ConvertDType(ids, dtypes.Int32)
		r := Scalar(ids.Graph(), dtypes.Int32, rows)
		idx := Stack([]*Node{Div(ids, r), Rem(ids, r)}, -1) // [..., 2]: (part, row)
		return Gather(w, idx)                               // [..., H]
	default:
		panic(fmt.Errorf("Embedding: weight must be [V, H] or [parts, V/parts, H], got %s", w.Shape()))
	}
}

// RMSNorm normalizes over the last axis in float32, as transformers does,
// and scales by w [H]. With plusOne it is Gemma's variant: the scale is
// (1 + w) and is applied before casting back to the input dtype; otherwise
// it is Llama's: cast back, then multiply by w.
func RMSNorm(x, w *Node, eps float64, plusOne bool) *Node {
	dtype := x.DType()
	xf := ConvertDType(x, dtypes.Float32)
	ms := ReduceAndKeep(Square(xf), ReduceMean, -1) // [..., 1]
	y := Mul(xf, Rsqrt(AddScalar(ms, eps)))         // [..., H]
	wb := ExpandLeftToRank(w, x.Rank())             // [1, ..., H]
	if plusOne {
		y = Mul(y, OnePlus(ConvertDType(wb, dtypes.Float32)))
		return ConvertDType(y, dtype)
	}
	return Mul(ConvertDType(y, dtype), ConvertDType(wb, dtype))
}

// SiLU is x * sigmoid(x) (transformers' "silu").
func SiLU(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// GeluTanh is the tanh approximation of GELU (transformers'
// "gelu_pytorch_tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
func GeluTanh(x *Node) *Node {
	inner := MulScalar(Add(x, MulScalar(Mul(x, Square(x)), 0.044715)), math.Sqrt(2/math.Pi))
	return Mul(MulScalar(x, 0.5), OnePlus(Tanh(inner)))
}

// Activation returns the activation named by a config's hidden_act or
// hidden_activation field, or nil when it is unknown.
func Activation(name string) func(*Node) *Node {
	switch name {
	case "silu", "swish":
		return SiLU
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast":
		return GeluTanh
	}
	return nil
}

// GatedMLP is the Llama/Gemma MLP: down(act(gate(x)) * up(x)). With act =
// SiLU it is SwiGLU, with GeluTanh it is GeGLU. Biases may be nil.
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
