package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unaryInputs are the edge values and a spread of normal ones for the
// elementwise kernels' tests.
func unaryInputs(seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.25, -0.25, 0.5, -0.5, 0.4999999, 0.5000001, -0.5000001, 1e-3, -1e-3, 1e-20, -1e-20,
		1e-40, -1e-40, 3, -3, 5, -5, 9, -9, 10, -10, 20, -20, 88, -88, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for len(src) < 4003 {
		switch len(src) % 4 {
		case 3: // around the switch between tanh's two forms
			src = append(src, float32(0.25+r.Float64()*0.5))
		case 0:
			src = append(src, float32(r.NormFloat64()))
		case 1:
			src = append(src, float32(r.NormFloat64()*4))
		default:
			src = append(src, float32((r.Float64()*2-1)*0.3))
		}
	}
	return src
}

// checkUnary holds a vector kernel to a float64 function within abs +
// rel·|want|, NaN kept, and checks that an element's value does not
// depend on the slice it is in.
func checkUnary(t *testing.T, name string, k func(dst, src []float32) bool, f func(float64) float64, abs, rel float64) {
	t.Helper()
	src := unaryInputs(41)
	dst := make([]float32, len(src))
	if !k(dst, src) {
		t.Skipf("no vector %s at this level", name)
	}
	for i, x := range src {
		got := float64(dst[i])
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(got) {
				t.Fatalf("%s(NaN) = %v", name, got)
			}
			continue
		}
		want := f(float64(x))
		if d := math.Abs(got - want); !(d <= abs+rel*math.Abs(want)) {
			t.Errorf("%s(%v) = %v, want %v (off by %.3g)", name, x, got, want, d)
		}
		if math.Signbit(got) != math.Signbit(float64(x)) && want != 0 {
			t.Errorf("%s(%v) = %v: wrong sign", name, x, got)
		}
	}
	for lo := 0; lo < 20; lo++ {
		for _, n := range []int{1, 7, 16, 17, 40} {
			part := make([]float32, n)
			k(part, src[lo:lo+n])
			for i := range part {
				if math.Float32bits(part[i]) != math.Float32bits(dst[lo+i]) {
					t.Fatalf("%s(src[%d]) in a slice [%d:%d] = %v, whole %v", name, lo+i, lo, lo+n, part[i], dst[lo+i])
				}
			}
		}
	}
	// In place.
	in := append([]float32(nil), src...)
	k(in, in)
	for i := range in {
		if math.Float32bits(in[i]) != math.Float32bits(dst[i]) {
			t.Fatalf("%s in place: element %d %v, want %v", name, i, in[i], dst[i])
		}
	}
}

// Erf is within 5e-7 of float64's erf (Abramowitz and Stegun's 7.1.26
// alone is within 1.5e-7), odd, saturating to ±1, NaN kept.
func TestErf(t *testing.T) {
	checkUnary(t, "erf", Erf, math.Erf, 5e-7, 0)
}

// Tanh is within 3e-7 relative (1e-38 absolute) of float64's tanh, tiny
// values included (the series), saturating to ±1.
func TestTanh(t *testing.T) {
	checkUnary(t, "tanh", Tanh, math.Tanh, 1e-38, 3e-7)
}

func BenchmarkErf(b *testing.B) {
	src := unaryInputs(7)[:4000]
	dst := make([]float32, len(src))
	for b.Loop() {
		Erf(dst, src)
	}
	b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}
