package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// int4GroupsCase is a random grouped int4 matrix [n, k]: nibbles,
// scales of 16-bit precision (as checkpoints store them) and, with asym,
// the mins of zero points 0..15, as a GPTQ/AWQ checkpoint's W = s·(q − z);
// dense is W computed the checkpoint's way, in float64.
func int4GroupsCase(r *rand.Rand, n, k, group int, asym bool) (packed []byte, scales, mins, dense []float32) {
	ng := k / group
	packed = make([]byte, n*k/2)
	for i := range packed {
		packed[i] = byte(r.IntN(256))
	}
	scales = make([]float32, n*ng)
	zeros := make([]int, n*ng)
	for i := range scales {
		// 11 significant bits, as an f16 scale has.
		s := math.Ldexp(float64(1024+r.IntN(1024)), -10-r.IntN(8))
		scales[i] = float32(s)
		zeros[i] = 8
		if asym {
			zeros[i] = r.IntN(16)
		}
	}
	if asym {
		mins = make([]float32, n*ng) // [ng, n]
		for j := 0; j < n; j++ {
			for g := 0; g < ng; g++ {
				mins[g*n+j] = scales[j*ng+g] * float32(8-zeros[j*ng+g])
			}
		}
	}
	dense = make([]float32, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			q := int(packed[(j*k+p)/2] & 15)
			if p%2 == 1 {
				q = int(packed[(j*k+p)/2] >> 4)
			}
			g := j*ng + p/group
			dense[j*k+p] = float32(float64(scales[g]) * float64(q-zeros[g]))
		}
	}
	return packed, scales, mins, dense
}

// DequantizeInt4Groups gives W = s·(q − z) to the bit, and the products
// (GEMV at m = 1, the small-m product, the blocked GEMM with chunks that
// start mid-block), with and without mins, agree with the f32 GEMM on it
// at every instruction level; with int8 activations
// (GemmInt4GroupsQ8NT: VNNI up to 8 rows where k is a multiple of 64),
// with the f32 GEMM on the quantised activations.
func TestGemmInt4GroupsNT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		for _, c := range []struct{ m, n, k, group int }{
			{1, 7, 32, 32}, {1, 130, 2048, 128}, {1, 33, 8192, 32}, {1, 45, 192, 192}, {2, 9, 128, 64},
			{5, 70, 1024, 128}, {8, 40, 256, 32}, {12, 20, 384, 128}, {70, 33, 2048, 64},
			// groups of 16: two scale codes a block
			{1, 7, 32, 16}, {1, 130, 2048, 16}, {3, 21, 512, 16}, {8, 40, 256, 16}, {70, 33, 1024, 16},
		} {
			for _, asym := range []bool{false, true} {
				packed, scales, mins, dense := int4GroupsCase(r, c.n, c.k, c.group, asym)
				got := DequantizeInt4Groups(c.n, c.k, packed, scales, mins, c.group)
				for i := range dense {
					if got[i] != dense[i] {
						t.Fatalf("%+v asym=%v: DequantizeInt4Groups[%d] = %v, want %v", c, asym, i, got[i], dense[i])
					}
				}
				a := randMat(r, c.m, c.k, c.k)
				want := make([]float32, c.m*c.n)
				GemmF32NT(c.m, c.n, c.k, a, c.k, dense, c.k, want, c.n)
				// The mins' part is summed apart from the rest and may cancel
				// much of it: the bound is relative to the largest output.
				scale := 1.0
				for _, v := range want {
					scale = max(scale, math.Abs(float64(v)))
				}
				out := make([]float32, c.m*c.n)
				GemmInt4GroupsNT(c.m, c.n, c.k, a, c.k, packed, scales, mins, c.group, out, c.n)
				for i := range want {
					if d := math.Abs(float64(out[i] - want[i])); d > 1e-4*scale {
						t.Fatalf("%+v asym=%v: C[%d] = %v, want %v", c, asym, i, out[i], want[i])
					}
				}
				// int8 activations: the product of the activations
				// quantised and dequantised (FakeQuantizeQ8).
				aq := append([]float32(nil), a...)
				FakeQuantizeQ8(aq)
				GemmF32NT(c.m, c.n, c.k, aq, c.k, dense, c.k, want, c.n)
				GemmInt4GroupsQ8NT(c.m, c.n, c.k, a, c.k, packed, scales, mins, c.group, out, c.n)
				for i := range want {
					if d := math.Abs(float64(out[i] - want[i])); d > 1e-4*scale {
						t.Fatalf("%+v asym=%v, int8 activations: C[%d] = %v, want %v", c, asym, i, out[i], want[i])
					}
				}
			}
		}
	})
}

// A row's scales are its own: moving every scale one group along (or one
// row down) changes the product.
func TestInt4GroupsRowTables(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(17, 18))
		const n, k = 24, 512
		for _, group := range []int{128, 16} {
			packed, scales, _, dense := int4GroupsCase(r, n, k, group, false)
			a := randMat(r, 1, k, k)
			want := make([]float32, n)
			GemmF32NT(1, n, k, a, k, dense, k, want, n)
			shifted := append(scales[1:], scales[0])
			got := make([]float32, n)
			GemmInt4GroupsNT(1, n, k, a, k, packed, shifted, nil, group, got, n)
			same := 0
			for j := range want {
				if math.Abs(float64(got[j]-want[j])) <= 1e-4*(1+math.Abs(float64(want[j]))) {
					same++
				}
			}
			if same > n/4 {
				t.Errorf("groups of %d: with the scales moved one group, %d of %d outputs still match", group, same, n)
			}
		}
	})
}

func TestGemmInt4GroupsPanics(t *testing.T) {
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		{"group", "want 16 or a positive multiple of 32", func() {
			GemmInt4GroupsNT(1, 1, 64, make([]float32, 64), 64, make([]byte, 32), make([]float32, 8), nil, 8, make([]float32, 1), 1)
		}},
		{"whole blocks", "not a whole number of blocks of 32", func() {
			GemmInt4GroupsNT(1, 1, 48, make([]float32, 48), 48, make([]byte, 24), make([]float32, 3), nil, 16, make([]float32, 1), 1)
		}},
		{"whole groups", "not a whole number of groups", func() {
			GemmInt4GroupsNT(1, 1, 96, make([]float32, 96), 96, make([]byte, 48), make([]float32, 2), nil, 64, make([]float32, 1), 1)
		}},
		{"too many groups", "at most 256", func() {
			GemmInt4GroupsNT(1, 1, 32*257, make([]float32, 32*257), 32*257, make([]byte, 16*257), make([]float32, 257), nil, 32, make([]float32, 1), 1)
		}},
		{"scales", "need 4", func() {
			GemmInt4GroupsNT(1, 2, 64, make([]float32, 64), 64, make([]byte, 64), make([]float32, 3), nil, 32, make([]float32, 2), 2)
		}},
		{"mins", "need 4", func() {
			GemmInt4GroupsNT(1, 2, 64, make([]float32, 64), 64, make([]byte, 64), make([]float32, 4), make([]float32, 2), 32, make([]float32, 2), 2)
		}},
	} {
		wantPanic(t, c.name, c.want, c.f)
	}
}

// BenchmarkGemvInt4Groups is a 4096x4096 GEMV in grouped int4 (groups of
// 128, with and without mins; groups of 16) against --quantize int4's
// format and NVFP4.
func BenchmarkGemvInt4Groups(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, k, group = 4096, 4096, 128
	a := randMat(r, 1, k, k)
	c := make([]float32, n)
	packed, scales, mins, _ := int4GroupsCase(r, n, k, group, true)
	ip, codes, table, _ := int4Case(r, n, k)
	p16, s16, _, _ := int4GroupsCase(r, n, k, 16, false)
	np, nc, nh, _, _ := nvfp4Case(r, n, k)
	b.Run("groups", func(b *testing.B) {
		for b.Loop() {
			GemmInt4GroupsNT(1, n, k, a, k, packed, scales, nil, group, c, n)
		}
	})
	b.Run("groups16", func(b *testing.B) {
		for b.Loop() {
			GemmInt4GroupsNT(1, n, k, a, k, p16, s16, nil, 16, c, n)
		}
	})
	b.Run("nvfp4", func(b *testing.B) {
		for b.Loop() {
			GemmNVFP4NT(1, n, k, a, k, np, nc, nh, c, n)
		}
	})
	b.Run("groups+mins", func(b *testing.B) {
		for b.Loop() {
			GemmInt4GroupsNT(1, n, k, a, k, packed, scales, mins, group, c, n)
		}
	})
	b.Run("int4", func(b *testing.B) {
		for b.Loop() {
			GemmInt4NT(1, n, k, a, k, ip, codes, table, c, n)
		}
	})
}
