package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// nvfp4Case is a random NVFP4 matrix [n, k]: E2M1 nibbles, a scale code
// per 16 values, and a table of half-scales with 11 significant bits;
// dense is W = fp4 · 2 · half[code] in float64, and coarse the same with
// one code per 32 values (the first of each block's two), which a
// product reading a code per block would give.
func nvfp4Case(r *rand.Rand, n, k int) (packed, codes []byte, half, dense, coarse []float32) {
	packed = make([]byte, n*k/2)
	for i := range packed {
		packed[i] = byte(r.IntN(256))
	}
	codes = make([]byte, n*k/NVFP4Group)
	for i := range codes {
		codes[i] = byte(r.IntN(256))
	}
	half = make([]float32, 256)
	for i := range half {
		half[i] = float32(math.Ldexp(float64(1024+r.IntN(1024)), -14-r.IntN(6)))
	}
	fp4 := [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	dense, coarse = make([]float32, n*k), make([]float32, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			b := packed[(j*k+p)/2]
			v := fp4[b&15]
			if p%2 == 1 {
				v = fp4[b>>4]
			}
			dense[j*k+p] = float32(v * 2 * float64(half[codes[j*k/16+p/16]]))
			coarse[j*k+p] = float32(v * 2 * float64(half[codes[j*k/16+p/32*2]]))
		}
	}
	return packed, codes, half, dense, coarse
}

// GemmNVFP4NT (GEMV, small m, blocked GEMM) agrees with the f32 GEMM on
// the decoded weight at every instruction level, and not with the weight
// a code a block would give; GemmNVFP4Q8NT with the f32 GEMM on the
// activations FakeQuantizeQ8 gives.
func TestGemmNVFP4NT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(41, 42))
		for _, c := range []struct{ m, n, k int }{
			{1, 7, 32}, {1, 130, 2048}, {1, 33, 512}, {2, 9, 128}, {5, 70, 1024}, {8, 40, 256}, {12, 20, 384}, {70, 33, 1024},
		} {
			packed, codes, half, dense, coarse := nvfp4Case(r, c.n, c.k)
			a := randMat(r, c.m, c.k, c.k)
			want := make([]float32, c.m*c.n)
			GemmF32NT(c.m, c.n, c.k, a, c.k, dense, c.k, want, c.n)
			wrong := make([]float32, c.m*c.n)
			GemmF32NT(c.m, c.n, c.k, a, c.k, coarse, c.k, wrong, c.n)
			got := make([]float32, c.m*c.n)
			GemmNVFP4NT(c.m, c.n, c.k, a, c.k, packed, codes, half, got, c.n)
			far := 0
			for i := range want {
				tol := 1e-4 * (1 + math.Abs(float64(want[i])))
				near(t, fmt.Sprintf("%+v", c), i, got[i], float64(want[i]), tol)
				if math.Abs(float64(wrong[i]-want[i])) > tol {
					far++
				}
			}
			if far == 0 {
				t.Fatalf("%+v: a code a block gives the same product: the case does not tell them apart", c)
			}
			if c.m == 1 { // GemvMulti, each product with its own table (twice the first's)
				twice := make([]float32, 256)
				for i, h := range half {
					twice[i] = 2 * h
				}
				ps := []Gemv{
					{A: a, C: make([]float32, c.n), N: c.n, Int4: packed, Int4Codes: codes, Int4Table: half, NVFP4: true},
					{A: a, C: make([]float32, c.n), N: c.n, Int4: packed, Int4Codes: codes, Int4Table: twice, NVFP4: true},
				}
				GemvMulti(c.k, ps)
				for i := range want {
					near(t, fmt.Sprintf("%+v, GemvMulti", c), i, ps[0].C[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
					near(t, fmt.Sprintf("%+v, GemvMulti, doubled table", c), i, ps[1].C[i], 2*float64(want[i]), 2e-4*(1+math.Abs(float64(want[i]))))
				}
			}
			aq := append([]float32(nil), a...)
			FakeQuantizeQ8(aq)
			GemmF32NT(c.m, c.n, c.k, aq, c.k, dense, c.k, want, c.n)
			GemmNVFP4Q8NT(c.m, c.n, c.k, a, c.k, packed, codes, half, got, c.n)
			for i := range want {
				near(t, fmt.Sprintf("%+v, int8 activations", c), i, got[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
			}
			if c.m == 1 {
				g := Gemv{A: a, C: make([]float32, c.n), N: c.n, Int4: packed, Int4Codes: codes, Int4Table: half, NVFP4: true, Int4Q8: true}
				GemvMulti(c.k, []Gemv{g})
				for i := range want {
					near(t, fmt.Sprintf("%+v, GemvMulti, int8 activations", c), i, g.C[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
				}
			}
		}
	})
}

func TestGemmNVFP4Panics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"codes", func() {
			GemmNVFP4NT(1, 2, 32, make([]float32, 32), 32, make([]byte, 32), make([]byte, 2), make([]float32, 256), make([]float32, 2), 2)
		}},
		{"table", func() {
			GemmNVFP4NT(1, 1, 32, make([]float32, 32), 32, make([]byte, 16), make([]byte, 2), make([]float32, 255), make([]float32, 1), 1)
		}},
		{"k", func() {
			GemmNVFP4NT(1, 1, 16, make([]float32, 16), 16, make([]byte, 8), make([]byte, 1), make([]float32, 256), make([]float32, 1), 1)
		}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			c.f()
		}()
	}
}

// GemmFP4GroupsNT, with each group's half-scale where NVFP4 has a code,
// agrees with the f32 GEMM on the decoded weight at every instruction
// level (GEMV, small m, GEMM), as does GemvMulti's Int4FP4 product, and
// GemmFP4GroupsQ8NT with the quantised activations'.
func TestGemmFP4GroupsNT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(43, 44))
		for _, c := range []struct{ m, n, k int }{{1, 7, 32}, {1, 130, 2048}, {3, 21, 512}, {8, 40, 256}, {70, 33, 1024}} {
			packed, codes, half, dense, _ := nvfp4Case(r, c.n, c.k)
			scales := make([]float32, len(codes))
			for i, code := range codes {
				scales[i] = half[code]
			}
			a := randMat(r, c.m, c.k, c.k)
			want := make([]float32, c.m*c.n)
			GemmF32NT(c.m, c.n, c.k, a, c.k, dense, c.k, want, c.n)
			got := make([]float32, c.m*c.n)
			GemmFP4GroupsNT(c.m, c.n, c.k, a, c.k, packed, scales, NVFP4Group, got, c.n)
			for i := range want {
				near(t, fmt.Sprintf("%+v", c), i, got[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
			}
			if c.m == 1 {
				g := Gemv{A: a, C: make([]float32, c.n), N: c.n, Int4: packed, Int4Scales: scales, Int4Group: NVFP4Group, Int4FP4: true}
				GemvMulti(c.k, []Gemv{g})
				for i := range want {
					near(t, fmt.Sprintf("%+v, GemvMulti", c), i, g.C[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
				}
			}
			aq := append([]float32(nil), a...)
			FakeQuantizeQ8(aq)
			GemmF32NT(c.m, c.n, c.k, aq, c.k, dense, c.k, want, c.n)
			GemmFP4GroupsQ8NT(c.m, c.n, c.k, a, c.k, packed, scales, NVFP4Group, got, c.n)
			for i := range want {
				near(t, fmt.Sprintf("%+v, int8 activations", c), i, got[i], float64(want[i]), 1e-4*(1+math.Abs(float64(want[i]))))
			}
		}
	})
}
