package blocks

import (
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TimestepSinusoid is diffusers' get_timestep_embedding on t [N] (float32
// timesteps): [N, dim] of sin/cos at frequencies
// exp(-ln(10000) * i / (dim/2 - shift)), cos first when flip.
func TimestepSinusoid(t *Node, dim int, flip bool, shift float64) *Node {
	g := t.Graph()
	half := dim / 2
	freqs := make([]float32, half)
	for i := range freqs {
		// torch computes the exponent and exp in float32.
		e := float32(-math.Log(10000)) * float32(i)
		e /= float32(float64(half) - shift)
		freqs[i] = float32(math.Exp(float64(e)))
	}
	n := t.Shape().Dimensions[0]
	arg := Mul(Reshape(t, n, 1), Reshape(Const(g, freqs), 1, half)) // [N, half]
	sin, cos := Sin(arg), Cos(arg)
	var emb *Node
	if flip {
		emb = Concatenate([]*Node{cos, sin}, 1)
	} else {
		emb = Concatenate([]*Node{sin, cos}, 1)
	}
	if dim%2 == 1 {
		emb = Concatenate([]*Node{emb, Zeros(g, shapes.Make(emb.DType(), n, 1))}, 1)
	}
	return emb
}
