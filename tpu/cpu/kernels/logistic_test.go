package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Logistic is within 4e-7 relative (1e-38 absolute) of float64's
// 1/(1+e^-x) over the whole range, saturates to 0 and 1, keeps NaN, and
// gives an element the same value whatever slice it is in.
func TestLogistic(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	src := []float32{0, -0, 1, -1, 20, -20, 88, -88, 89, -89, 103, -103, 200, -200,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30}
	for len(src) < 1003 {
		src = append(src, float32(r.NormFloat64()*8))
	}
	dst := make([]float32, len(src))
	if !Logistic(dst, src) {
		t.Skip("no vector logistic at this level")
	}
	for i, x := range src {
		want := 1 / (1 + math.Exp(-float64(x)))
		got := float64(dst[i])
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(got) {
				t.Fatalf("logistic(NaN) = %v", got)
			}
			continue
		}
		if d := math.Abs(got - want); d > 4e-7*want+1e-38 {
			t.Errorf("logistic(%v) = %v, want %v", x, got, want)
		}
	}
	// Every offset and length gives the same per-element values.
	for lo := 0; lo < 20; lo++ {
		for _, n := range []int{1, 7, 16, 17, 40} {
			part := make([]float32, n)
			Logistic(part, src[lo:lo+n])
			for i := range part {
				if math.Float32bits(part[i]) != math.Float32bits(dst[lo+i]) {
					t.Fatalf("logistic(src[%d]) in a slice [%d:%d] = %v, whole %v", lo+i, lo, lo+n, part[i], dst[lo+i])
				}
			}
		}
	}
}
