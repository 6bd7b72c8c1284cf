package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16RoundRef rounds through float64 arithmetic: the nearest bfloat16
// (ties to even) of a normal f32, signed zero for denormals, a quiet NaN
// for NaN. It is written apart from bf16Round, by value rather than bits.
func bf16RoundRef(f float32) float32 {
	switch {
	case math.IsNaN(float64(f)):
		return f
	case f != 0 && math.Abs(float64(f)) < 0x1p-126:
		return float32(math.Copysign(0, float64(f)))
	case math.IsInf(float64(f), 0) || f == 0:
		return f
	}
	// ulp of bf16 at f's binade: 2^(e-7) for f in [2^e, 2^(e+1)).
	_, e := math.Frexp(float64(f))
	ulp := math.Ldexp(1, e-1-7)
	q := float64(f) / ulp
	r := math.RoundToEven(q)
	v := r * ulp
	if math.Abs(v) > math.MaxFloat32 {
		return float32(math.Copysign(math.Inf(1), float64(f)))
	}
	return float32(v)
}

// roundBF16 (VCVTNEPS2BF16 where the CPU has it) and bf16Round equal the
// value-based reference on edge values (ties either way, carries into the
// exponent, overflow to infinity, denormals, NaN) and random ones.
func TestRoundBF16(t *testing.T) {
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.01171875, 1.0078125 + 1.0/(1<<16),
		math.Float32frombits(0x3f80_8000), math.Float32frombits(0x3f81_8000), math.Float32frombits(0x3fff_ffff),
		math.MaxFloat32, -math.MaxFloat32, math.Float32frombits(0x7f7f_7fff), math.SmallestNonzeroFloat32,
		-math.Float32frombits(0x007f_ffff), math.Float32frombits(0x0080_0000), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x7f80_0001)}
	r := rand.New(rand.NewPCG(21, 22))
	for len(src) < 1000 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	forEachLevel(t, func(t *testing.T) {
		dst := make([]uint16, len(src))
		roundBF16(dst, src)
		for i, v := range src {
			got := bf16ToF32(dst[i])
			want := bf16RoundRef(v)
			if math.IsNaN(float64(want)) {
				if !math.IsNaN(float64(got)) || dst[i]&0x40 == 0 {
					t.Fatalf("round(%#08x) = %#04x, want a quiet NaN", math.Float32bits(v), dst[i])
				}
				continue
			}
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("round(%#08x = %g) = %#04x (%g), want %g", math.Float32bits(v), v, dst[i], got, want)
			}
			if b := bf16Round(v); b != dst[i] {
				t.Fatalf("bf16Round(%#08x) = %#04x, roundBF16 gave %#04x", math.Float32bits(v), b, dst[i])
			}
		}
		// RoundBF16 gives the same values as f32 (in place too).
		f := append([]float32(nil), src...)
		RoundBF16(f, f)
		for i := range f {
			if math.Float32bits(f[i]) != uint32(dst[i])<<16 {
				t.Fatalf("RoundBF16(%#08x) = %#08x, want %#04x<<16", math.Float32bits(src[i]), math.Float32bits(f[i]), dst[i])
			}
		}
	})
}

// GemmBF16DotNT equals the float64 product of bf16(A) with B, at every
// dispatch level and over the shapes of the other GEMMs (k around the
// kernel's 32, the tile edges, k in chunks); and it does round A: against
// the f32 A it differs by about what bf16 activations cost.
func TestGemmBF16DotNT(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	t.Logf("AVX512_BF16: %v", hasBF16Dot())
	shapes := testShapes(r)
	shapes = append(shapes, shape{4, 4, 32}, shape{5, 7, 33}, shape{16, 64, 1024}, shape{130, 70, 2100}, shape{3, 9, 2047},
		shape{2, 5, 96}, shape{6, 3, 200}, shape{8, 31, 1024}, shape{7, 1, 64}, shape{8, 2, 32})
	forEachLevel(t, func(t *testing.T) {
		for _, sh := range shapes {
			m, n, k := sh.m, sh.n, sh.k
			lda, ldb, ldc := k+3, k+1, n+2
			a := randMat(r, m, k, lda)
			f := randMat(r, n, k, ldb)
			b := make([]uint16, len(f))
			for i, v := range f {
				b[i] = uint16(math.Float32bits(v) >> 16)
			}
			c := randMat(r, m, n, ldc)
			GemmBF16DotNT(m, n, k, a, lda, b, ldb, c, ldc)
			ar := make([]float32, len(a))
			for i, v := range a {
				ar[i] = bf16RoundRef(v)
			}
			checkC(t, "GemmBF16DotNT", m, n, k, ar, lda, func(i, j, p int) float64 { return float64(bf16ToF32(b[j*ldb+p])) }, c, ldc)
			if k < 256 || m < 2 {
				continue
			}
			// Against the unrounded A the result moves by bf16's
			// relative error (2⁻⁹) spread over k terms.
			var dev, norm float64
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var exact float64
					for p := 0; p < k; p++ {
						exact += float64(a[i*lda+p]) * float64(bf16ToF32(b[j*ldb+p]))
					}
					d := float64(c[i*ldc+j]) - exact
					dev += d * d
					norm += exact * exact
				}
			}
			if rel := math.Sqrt(dev / norm); rel < 1e-4 || rel > 1e-2 {
				t.Errorf("m=%d n=%d k=%d: relative RMS difference from f32 A %.2g, want bf16's (1e-4..1e-2)", m, n, k, rel)
			}
		}
	})
}

// GemmInt8DotNT equals the float64 product of bf16(A) with the int8
// weights dequantised, rounded to bf16 on the pair kernel's path (16 rows
// or more with AVX512_BF16) and exact below it.
func TestGemmInt8DotNT(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	forEachLevel(t, func(t *testing.T) {
		for _, sh := range []shape{{1, 7, 64}, {5, 33, 128}, {16, 20, 96}, {40, 70, 320}, {130, 9, 2112}, {17, 5, 40}} {
			m, n, k := sh.m, sh.n, sh.k
			g := 32
			if k%64 == 0 {
				g = 64
			}
			if k%g != 0 {
				g = k
			}
			lda, ldc := k+2, n+1
			a := randMat(r, m, k, lda)
			q, sc := QuantizeInt8(randMat(r, n, k, k), n, k, g)
			c := randMat(r, m, n, ldc)
			GemmInt8DotNT(m, n, k, a, lda, q, k, sc, g, c, ldc)
			ar := make([]float32, len(a))
			for i, v := range a {
				ar[i] = bf16RoundRef(v)
			}
			pairs := m >= int8DotMinM && k >= 32 && hasBF16Dot()
			w := func(_, j, p int) float64 {
				v := float32(q[j*k+p]) * sc[j*(k/g)+p/g]
				if pairs {
					v = bf16RoundRef(v)
				}
				return float64(v)
			}
			checkC(t, "GemmInt8DotNT", m, n, k, ar, lda, w, c, ldc)
		}
	})
}
