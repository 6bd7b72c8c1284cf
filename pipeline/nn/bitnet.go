package nn

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// ActQuant8 is BitNet's activation quantization (transformers'
// AutoBitLinear ActQuant and BitLinear activation_quant, which agree):
// per vector of the last axis, in float32, s = 127 / max(max|x|, 1e-5),
// x rounded to round(x·s) clamped to [-128, 127], divided by s, cast back
// to x's dtype. GoMLX's Round may round a tie (an exact half) away from
// zero where torch rounds it to even; a float activation is almost never
// one.
func ActQuant8(x *Node) *Node {
	dt := x.DType()
	f := ConvertDType(x, dtypes.Float32)
	s := Div(Scalar(x.Graph(), dtypes.Float32, 127), Max(ReduceAndKeep(Abs(f), ReduceMax, -1), Scalar(x.Graph(), dtypes.Float32, 1e-5)))
	q := ClipScalar(Round(Mul(f, s)), -128, 127)
	return ConvertDType(Div(q, s), dt)
}
