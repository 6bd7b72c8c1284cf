package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// GemmInt4Q8NT equals the f32 GEMM of the quantised-then-dequantised
// activations (FakeQuantizeQ8) with the decoded weights, on the VNNI path
// (m ≤ 8, k a multiple of 64) and on the f32 fallback (more rows, k an odd
// number of blocks); and it does quantise: against the f32 activations it
// differs, by about what int8 activations cost.
func TestGemmInt4Q8NT(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	t.Logf("VNNI: %v", hasVNNI())
	for _, sz := range [][3]int{{1, 7, 64}, {1, 130, 2880}, {1, 40, 96}, {3, 33, 1024}, {8, 20, 128}, {9, 17, 256}, {20, 9, 640}} {
		m, n, k := sz[0], sz[1], sz[2]
		packed, codes, table, dense := int4Case(r, n, k)
		a := randMat(r, m, k, k)
		a[3] = 0 // a zero and a block of zeros
		if k >= 64 {
			clear(a[32:64])
		}
		aq := append([]float32(nil), a...)
		FakeQuantizeQ8(aq)
		want := make([]float32, m*n)
		GemmF32NT(m, n, k, aq, k, dense, k, want, n)
		exact := make([]float32, m*n)
		GemmF32NT(m, n, k, a, k, dense, k, exact, n)
		got := make([]float32, m*n)
		GemmInt4Q8NT(m, n, k, a, k, packed, codes, table, got, n)
		var dev, norm float64
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 2e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("m=%d n=%d k=%d: C[%d] = %v, want %v", m, n, k, i, got[i], want[i])
			}
			d := float64(got[i] - exact[i])
			dev += d * d
			norm += float64(exact[i]) * float64(exact[i])
		}
		rel := math.Sqrt(dev / norm)
		if rel < 1e-5 || rel > 0.02 {
			t.Errorf("m=%d n=%d k=%d: relative RMS difference from f32 activations %.2g, want int8's (1e-5..0.02)", m, n, k, rel)
		}
	}
}
