package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ArithF32 gives the scalar loop's bits for every operation and operand
// layout (both slices, either one a single value, both), every length
// around the vector width, NaN, infinities, zeros of both signs and
// subnormals included, in place too.
func TestArithF32(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 1e-40, -1e-40, math.MaxFloat32, 3e38}
	val := func() float32 {
		if r.IntN(6) == 0 {
			return special[r.IntN(len(special))]
		}
		return float32(r.NormFloat64() * 10)
	}
	same := func(x, y float32) bool {
		return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
	}
	for _, op := range []Arith{ArithAdd, ArithSub, ArithMul, ArithDiv} {
		for _, n := range []int{0, 1, 5, 15, 16, 17, 31, 32, 33, 64, 100, 1024, 1031} {
			for layout := range 4 {
				la, lc := n, n
				if layout&1 != 0 {
					la = 1
				}
				if layout&2 != 0 {
					lc = 1
				}
				if n == 0 {
					la, lc = 0, 0
				}
				a, c := make([]float32, la), make([]float32, lc)
				for i := range a {
					a[i] = val()
				}
				for i := range c {
					c[i] = val()
				}
				want := make([]float32, n)
				arithScalar(op, want, a, c)
				got := make([]float32, n)
				if !ArithF32(op, got, a, c) {
					t.Skip("no vector arithmetic at this level")
				}
				for i := range got {
					if !same(got[i], want[i]) {
						t.Fatalf("op %d, n %d, layout %d: element %d = %v, want %v", op, n, layout, i, got[i], want[i])
					}
				}
				if la == n && n > 0 { // in place over a
					in := append([]float32(nil), a...)
					ArithF32(op, in, in, c)
					for i := range in {
						if !same(in[i], want[i]) {
							t.Fatalf("op %d, n %d, layout %d in place: element %d = %v, want %v", op, n, layout, i, in[i], want[i])
						}
					}
				}
			}
		}
	}
}

func BenchmarkArithF32(b *testing.B) {
	a, c, dst := make([]float32, 4096), make([]float32, 4096), make([]float32, 4096)
	for i := range a {
		a[i], c[i] = float32(i), float32(i%7)+1
	}
	for _, bc := range []struct {
		name string
		run  func()
	}{
		{"vector", func() { ArithF32(ArithMul, dst, a, c) }},
		{"scalar", func() { arithScalar(ArithMul, dst, a, c) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.run()
			}
			b.ReportMetric(float64(len(dst))*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
