package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// mxfp4Case is a random MXFP4 matrix [n, k] and its values decoded the
// long way (nibble by nibble, 2^(s−127) by math.Ldexp).
func mxfp4Case(r *rand.Rand, n, k int) (blocks, scales []byte, dense []float32) {
	blocks, scales = make([]byte, n*k/2), make([]byte, n*k/32)
	for i := range blocks {
		blocks[i] = byte(r.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(120 + r.IntN(10))
	}
	fp4 := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}
	dense = make([]float32, n*k)
	for i := range dense {
		b := blocks[i/2]
		nib := b & 15
		if i%2 == 1 {
			nib = b >> 4
		}
		dense[i] = float32(math.Ldexp(fp4[nib], int(scales[i/32])-127))
	}
	return blocks, scales, dense
}

// TestGemmMXFP4NT compares the MXFP4 GEMM (GEMV at m = 1, the blocked
// GEMM above, with k chunks that start mid-byte and mid-block) with the
// f32 GEMM on the decoded weights, and GemvMulti's MXFP4 products with it.
func TestGemmMXFP4NT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, sz := range [][3]int{{1, 7, 32}, {1, 130, 2880}, {2, 9, 64}, {5, 70, 1056}, {12, 20, 96}, {70, 33, 2080}} {
			m, n, k := sz[0], sz[1], sz[2]
			blocks, scales, dense := mxfp4Case(r, n, k)
			a := make([]float32, m*k)
			for i := range a {
				a[i] = float32(r.NormFloat64())
			}
			want := make([]float32, m*n)
			GemmF32NT(m, n, k, a, k, dense, k, want, n)
			got := make([]float32, m*n)
			GemmMXFP4NT(m, n, k, a, k, blocks, scales, got, n)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("m=%d n=%d k=%d: C[%d] = %v, want %v", m, n, k, i, got[i], want[i])
				}
			}
			if m != 1 {
				continue
			}
			c := make([]float32, n)
			gemvRowsNibblesGeneric(&mxfp4Code, 0, a, blocks, scales, c) // the portable path, whatever this CPU runs
			for j := range c {
				if d := math.Abs(float64(c[j] - want[j])); d > 1e-4*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("generic n=%d k=%d: C[%d] = %v, want %v", n, k, j, c[j], want[j])
				}
			}
			GemvMulti(k, []Gemv{{A: a, C: c, N: n, MXFP4: blocks, MXScales: scales}})
			for j := range c {
				if d := math.Abs(float64(c[j] - want[j])); d > 1e-4*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("GemvMulti n=%d k=%d: C[%d] = %v, want %v", n, k, j, c[j], want[j])
				}
			}
		}
	})
}

// TestGemmMXFP4Panics: k not a multiple of 32, short blocks or scales.
func TestGemmMXFP4Panics(t *testing.T) {
	for name, f := range map[string]func(){
		"k": func() {
			GemmMXFP4NT(1, 1, 16, make([]float32, 16), 16, make([]byte, 8), make([]byte, 1), make([]float32, 1), 1)
		},
		"blocks": func() {
			GemmMXFP4NT(1, 2, 32, make([]float32, 32), 32, make([]byte, 31), make([]byte, 2), make([]float32, 2), 2)
		},
		"scales": func() {
			GemmMXFP4NT(1, 2, 32, make([]float32, 32), 32, make([]byte, 32), make([]byte, 1), make([]float32, 2), 2)
		},
		"multi": func() {
			GemvMulti(32, []Gemv{{A: make([]float32, 32), C: make([]float32, 2), N: 2, MXFP4: make([]byte, 32), MXScales: make([]byte, 1)}})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// BenchmarkGemvMXFP4 is one GPT-OSS-20B expert's gate_up GEMV (5760 rows
// of 2880) against its bf16 form: MXFP4 reads 0.53 bytes a weight, bf16 2.
func BenchmarkGemvMXFP4(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	n, k := 5760, 2880
	blocks, scales, dense := mxfp4Case(r, n, k)
	a := make([]float32, k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	c := make([]float32, n)
	b.Run("mxfp4", func(b *testing.B) {
		b.SetBytes(int64(len(blocks) + len(scales)))
		for range b.N {
			GemmMXFP4NT(1, n, k, a, k, blocks, scales, c, n)
		}
	})
	bf := make([]uint16, n*k)
	for i, v := range dense {
		bf[i] = uint16(math.Float32bits(v) >> 16)
	}
	b.Run("bf16", func(b *testing.B) {
		b.SetBytes(int64(2 * len(bf)))
		for range b.N {
			GemmBF16NT(1, n, k, a, k, bf, k, c, n)
		}
	})
}

// BenchmarkGemmMXFP4 compares, for a few rows of A against one expert's
// gate_up (5760×2880), the small-m path (B decoded in registers per eight
// rows) with the blocked GEMM (B decoded once into the f32 scratch): the
// crossover sets smallMNibblesMax.
func BenchmarkGemmMXFP4(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	n, k := 5760, 2880
	blocks, scales, _ := mxfp4Case(r, n, k)
	for _, m := range []int{4, 16, 32, 64, 128} {
		a := make([]float32, m*k)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		c := make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d/small", m), func(b *testing.B) {
			for range b.N {
				if !smallMNibbles(&mxfp4Code, m, n, k, a, k, blocks, scales, c, n) {
					b.Skip("no small-m MXFP4 kernel on this CPU")
				}
			}
		})
		b.Run(fmt.Sprintf("m%d/gemm", m), func(b *testing.B) {
			for range b.N {
				gemmNT(m, n, k, a, k, nil, 0, convNibbles(&mxfp4Code, blocks, scales, k), c, n)
			}
		})
	}
}
