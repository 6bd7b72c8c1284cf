package mamba2ref

import (
	"math"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// Fill draws the values of a tensor of shape for the Mamba-2 hybrids'
// tiny checkpoints (falconh1ref, bambaref, zamba2ref), u uniform in
// [-1, 1), f the element's place from 0 to 1: linear u/sqrt(fan-in), qk
// 2u/sqrt(fan-in), embed embed·u, norm 1+0.2u, bias 0.2u, dt_bias from
// about -4.5 to -1.5 across the heads, A_log log(1 to 4), D 1+0.3u (as
// granitehref draws them, so the decays span slow to fast). who names
// the caller in the panic on an unknown kind.
func Fill(r *lmckpt.Rand, shape []int, kind string, embed float64, who string) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	fan := n / shape[0]
	v := make([]float32, n)
	for i := range v {
		u := r.Uniform()
		f := 0.0
		if n > 1 {
			f = float64(i) / float64(n-1)
		}
		var x float64
		switch kind {
		case "linear":
			x = u / math.Sqrt(float64(fan))
		case "qk":
			x = 2 * u / math.Sqrt(float64(fan))
		case "embed":
			x = embed * u
		case "norm":
			x = 1 + 0.2*u
		case "bias":
			x = 0.2 * u
		case "dt_bias":
			x = -4.5 + 3*f + 0.25*u
		case "A_log":
			x = math.Log(1 + 3*f + 0.25*u)
		case "D":
			x = 1 + 0.3*u
		default:
			panic(who + ": unknown init " + kind)
		}
		v[i] = float32(x)
	}
	return v
}
