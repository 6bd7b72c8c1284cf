package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// GemmInt8Q8NT against GemmInt8NT on the activations quantised and
// dequantised (FakeQuantizeQ8): the integer path (VNNI, group 64, up to
// q8VNNIMaxM rows) and the fallbacks (per-channel scales, more rows, no
// VNNI) give the same products up to the order of f32 sums.
func TestGemmInt8Q8NT(t *testing.T) {
	t.Logf("VNNI: %v", hasVNNI())
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for _, c := range []struct{ m, n, k, g, pad int }{
			{1, 7, 64, 64, 0}, {1, 130, 2880, 64, 5}, {3, 33, 1024, 64, 0}, {8, 20, 128, 64, 3},
			{9, 17, 256, 64, 0}, {2, 9, 96, 96, 0}, {20, 9, 640, 64, 0},
		} {
			ldb := c.k + c.pad
			w := make([]int8, c.n*ldb)
			for i := range w {
				w[i] = int8(r.IntN(255) - 127)
			}
			sc := make([]float32, c.n*c.k/c.g)
			for i := range sc {
				sc[i] = float32(0.001 + r.Float64()/100)
			}
			a := randMat(r, c.m, c.k, c.k)
			aq := append([]float32(nil), a...)
			FakeQuantizeQ8(aq)
			want := make([]float32, c.m*c.n)
			GemmInt8NT(c.m, c.n, c.k, aq, c.k, w, ldb, sc, c.g, want, c.n)
			got := make([]float32, c.m*c.n)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			GemmInt8Q8NT(c.m, c.n, c.k, a, c.k, w, ldb, sc, c.g, got, c.n)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-4*(1+math.Abs(float64(want[i])))) {
					t.Fatalf("%+v: C[%d] = %v, want %v", c, i, got[i], want[i])
				}
			}
		}
	})
}
