package nn

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// ActQuant8 is BitNet's activation quantization (transformers'
// AutoBitLinear ActQuant; BitLinear's activation_quant with its division
// by the scale moved before the product, which is the same in float32):
// per vector of the last axis, in float32, s = 127 / max(max|x|, 1e-5),
// x rounded to round(x·s) clamped to [-128, 127], divided by s, cast back
// to x's dtype. BitLinear computes s and x·s in x's own dtype (no cast to
// float32) and divides after the product, so at 16-bit compute a value
// near a rounding boundary may land one level apart. The go and cpu
// backends round a tie (an exact half) away from zero where torch (and
// XLA) round it to even; a float activation is almost never one.
func ActQuant8(x *Node) *Node {
	dt := x.DType()
	f := ConvertDType(x, dtypes.Float32)
	s := Div(Scalar(x.Graph(), dtypes.Float32, 127), Max(ReduceAndKeep(Abs(f), ReduceMax, -1), Scalar(x.Graph(), dtypes.Float32, 1e-5)))
	q := ClipScalar(Round(Mul(f, s)), -128, 127)
	return ConvertDType(Div(q, s), dt)
}
