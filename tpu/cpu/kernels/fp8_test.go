package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fp8Long decodes an E4M3 byte the long way, for the table.
func fp8Long(b byte) float64 {
	s := 1.0
	if b&0x80 != 0 {
		s = -1
	}
	e, m := int(b>>3)&15, float64(b&7)
	if e == 15 && m == 7 {
		return math.NaN()
	}
	if e == 0 {
		return s * m / 8 / 64
	}
	return s * (1 + m/8) * math.Ldexp(1, e-7)
}

// Every byte: the table against the long decode, and the widening kernels
// (the half trick on AVX-512) against the table, NaN bytes aside.
func TestFP8Values(t *testing.T) {
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i)
		want := fp8Long(byte(i))
		if got := float64(FP8Value(byte(i))); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("byte %#x: %v, want %v", i, got, want)
		}
	}
	if FP8Value(0x7e) != 448 || FP8Value(0x01) != float32(math.Ldexp(1, -9)) || FP8Value(0x80) != 0 {
		t.Fatal("E4M3 landmarks")
	}
	forEachLevel(t, func(t *testing.T) {
		dst := make([]float32, 256)
		widenFP8(dst, src, 0.375)
		for i, v := range dst {
			if b := byte(i); b&0x7f != 0x7f && v != FP8Value(b)*0.375 {
				t.Fatalf("byte %#x widened to %v, want %v", i, v, FP8Value(b)*0.375)
			}
		}
	})
}

// Every byte through the GEMV exactly: row j of B holds byte j in one
// column of 32 (zeros elsewhere), so C[j] is one product, which the
// kernels' power-of-two liftings must leave exact: the byte's value times
// the activation times the scale, for activations and scales of very
// different sizes (a subnormal byte times 2^-20 included). A wrong shift
// or mask in the widening, or a lifting that underflows, fails it.
func TestGemvFP8EveryByte(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		const n, k = 256, 32
		for _, c := range []struct {
			act, scale float32
			b0, b1     int // one scale a row block (b1 = k), or two across k
		}{{1.5, 1, 1, k}, {0x1p-20 * 1.25, 0.375, 128, 16}, {3000, 0x1p-12, 16, k}, {-0.7, 2, 256, 16}, {0x1p-30, 0x1p-20, 8, 16}} {
			b := make([]byte, n*k)
			for j := range n {
				b[j*k+(j*7)%k] = byte(j)
			}
			a := make([]float32, k)
			for p := range a {
				a[p] = c.act * float32(1+p%3)
			}
			scales := make([]float32, ((n+c.b0-1)/c.b0)*(k/c.b1))
			for i := range scales {
				scales[i] = c.scale
			}
			got := make([]float32, n)
			GemmFP8NT(1, n, k, a, k, b, k, scales, c.b0, c.b1, got, n)
			for j := range n {
				if j&0x7f == 0x7f {
					continue // NaN bytes: 480 in the kernels, NaN in the table
				}
				want := a[(j*7)%k] * c.scale * FP8Value(byte(j))
				if got[j] != want {
					t.Fatalf("%+v: byte %#x: %v, want %v", c, j, got[j], want)
				}
			}
		}
	})
}

// fp8Case is a random FP8 matrix [n, k] (stride ldb, no NaN bytes), its
// block scales and the dense f32 matrix they stand for.
func fp8Case(r *rand.Rand, n, k, ldb, b0, b1 int) (b []byte, scales, dense []float32) {
	b = make([]byte, n*ldb)
	for i := range b {
		for b[i] = byte(r.IntN(256)); b[i]&0x7f == 0x7f; b[i] = byte(r.IntN(256)) {
		}
	}
	sr, sc := (n+b0-1)/b0, (k+b1-1)/b1
	scales = make([]float32, sr*sc)
	for i := range scales {
		scales[i] = float32(math.Ldexp(0.5+r.Float64(), -r.IntN(10)))
	}
	dense = make([]float32, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			dense[j*k+p] = FP8Value(b[j*ldb+p]) * scales[(j/b0)*sc+p/b1]
		}
	}
	return b, scales, dense
}

func TestGemmFP8NT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, c := range []struct{ m, n, k, pad, b0, b1 int }{
			{1, 7, 32, 0, 16, 8}, {1, 300, 1056, 3, 128, 128}, {1, 130, 37, 1, 7, 5}, {2, 9, 64, 0, 16, 8},
			{5, 70, 1056, 0, 128, 128}, {12, 20, 96, 5, 4, 32}, {70, 33, 200, 0, 128, 128},
			// a scale a row (per channel), one for the whole matrix (per
			// tensor), a row by a group
			{1, 45, 160, 0, 1, 160}, {3, 45, 160, 2, 1, 160}, {1, 30, 96, 0, 30, 96}, {1, 19, 128, 0, 1, 64},
			// 2 to 16 rows (smallMFP8): a k tail, a new block every pair,
			// two groups of rows, per tensor, and an odd block height
			// (left to the blocked GEMM)
			{4, 11, 200, 1, 128, 128}, {16, 9, 96, 0, 2, 32}, {9, 5, 40, 0, 8, 16}, {6, 30, 96, 0, 30, 96}, {3, 10, 64, 0, 3, 32},
			{2, 130, 256, 0, 128, 128}, {7, 131, 256, 0, 128, 128},
		} {
			b, scales, dense := fp8Case(r, c.n, c.k, c.k+c.pad, c.b0, c.b1)
			a := randMat(r, c.m, c.k, c.k)
			want := make([]float32, c.m*c.n)
			GemmF32NT(c.m, c.n, c.k, a, c.k, dense, c.k, want, c.n)
			got := make([]float32, c.m*c.n)
			for i := range got {
				got[i] = float32(math.NaN()) // overwritten
			}
			GemmFP8NT(c.m, c.n, c.k, a, c.k, b, c.k+c.pad, scales, c.b0, c.b1, got, c.n)
			scale := 1.0
			for _, v := range want {
				scale = max(scale, math.Abs(float64(v)))
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5*scale) {
					t.Fatalf("%+v: C[%d] = %v, want %v", c, i, got[i], want[i])
				}
			}
		}
	})
}

func TestGemmFP8Panics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
		want string
	}{
		{"short scales", func() {
			GemmFP8NT(1, 4, 8, make([]float32, 8), 8, make([]byte, 32), 8, make([]float32, 1), 2, 8, make([]float32, 4), 4)
		}, "scales"},
		{"short B", func() {
			GemmFP8NT(1, 4, 8, make([]float32, 8), 8, make([]byte, 31), 8, make([]float32, 2), 2, 8, make([]float32, 4), 4)
		}, "GemmFP8NT B"},
		{"block", func() {
			GemmFP8NT(1, 4, 8, make([]float32, 8), 8, make([]byte, 32), 8, make([]float32, 2), 0, 8, make([]float32, 4), 4)
		}, "block"},
	} {
		wantPanic(t, c.name, c.want, c.f)
	}
}
