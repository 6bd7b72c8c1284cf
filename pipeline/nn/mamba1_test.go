package nn

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
)

// TestMamba1ScanChunks: the chunked scan (Hillis-Steele within chunks of
// 1, 4 and 16, the carry between them, T not a multiple of the chunk)
// gives every token's output and the final state of the recurrence run
// one token at a time, with decays from near 1 to near 0.
func TestMamba1ScanChunks(t *testing.T) {
	be := dnBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	const bs, tt, d, n = 2, 37, 5, 3
	_, xT := dnRand(r, 1, 0, bs, tt, d)
	_, dtT := dnRand(r, 0.99, 1, bs, tt, d) // steps in [0.01, 1.99]
	_, aT := dnRand(r, 3.9, -4, d, n)       // decays in [-7.9, -0.1]
	_, bT := dnRand(r, 1, 0, bs, tt, n)
	_, cT := dnRand(r, 1, 0, bs, tt, n)
	_, sT := dnRand(r, 0.5, 0, bs, d, n)
	want := MustExecOnceN(be, func(in []*Node) []*Node {
		state := in[5]
		var ys []*Node
		for i := 0; i < tt; i++ {
			one := func(v *Node) *Node { return SliceAxis(v, 1, AxisElem(i)) }
			var y *Node
			y, state = Mamba1Scan(one(in[0]), one(in[1]), in[2], one(in[3]), one(in[4]), state, 16)
			ys = append(ys, y)
		}
		return []*Node{Concatenate(ys, 1), state}
	}, xT, dtT, aT, bT, cT, sT)
	for _, chunk := range []int{1, 4, 16} {
		got := MustExecOnceN(be, func(in []*Node) []*Node {
			y, s := Mamba1Scan(in[0], in[1], in[2], in[3], in[4], in[5], chunk)
			return []*Node{y, s}
		}, xT, dtT, aT, bT, cT, sT)
		for i, what := range []string{"output", "state"} {
			if e := dnRel64(dnFlat(t, got[i]), f64(dnFlat(t, want[i]))); e > 1e-5 {
				t.Errorf("chunk %d: %s relative error %.3g", chunk, what, e)
			}
		}
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
