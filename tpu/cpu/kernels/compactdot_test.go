package kernels

import (
	"math/rand/v2"
	"testing"
)

// compactDot is one format's product with bf16 activations under test:
// make draws a random B [n, k] in the format and returns the product
// (GemmXDotNT on it) and B's values decoded to f32 (by the f32 kernels'
// own decoder, tested with them) with, for grouped int4, the mins' part
// apart (nil for none), which the pair kernel does not round.
type compactDot struct {
	name string
	make func(r *rand.Rand, n, k int) (dot func(m int, a []float32, lda int, c []float32, ldc int), vals, mins []float32)
}

func randBytes(r *rand.Rand, n int, ok func(byte) bool) []byte {
	b := make([]byte, n)
	for i := range b {
		for b[i] = byte(r.IntN(256)); ok != nil && !ok(b[i]); b[i] = byte(r.IntN(256)) {
		}
	}
	return b
}

func randRange(r *rand.Rand, n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float32()
	}
	return v
}

func decoded(conv bConverter, n, k int) []float32 {
	dst := make([]float32, n*k)
	conv(dst, 0, n, 0, k)
	return dst
}

var compactDots = []compactDot{
	{"FP8 blocks of 16x32", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		b := randBytes(r, n*k, func(v byte) bool { return v&0x7f != 0x7f })
		sc := (k + 31) / 32
		scales := randRange(r, ((n+15)/16)*sc, 0.05, 0.2)
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmFP8DotNT(m, n, k, a, lda, b, k, scales, 16, 32, c, ldc)
		}, decoded(convFP8(b, k, scales, sc, 16, 32), n, k), nil
	}},
	{"int4", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		packed, codes, table := randBytes(r, n*k/2, nil), randBytes(r, n*k/32, nil), randRange(r, 256, 0.05, 0.25)
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmInt4DotNT(m, n, k, a, lda, packed, codes, table, c, ldc)
		}, decoded(convNibbles(int4Code(table), packed, codes, k), n, k), nil
	}},
	{"NVFP4", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		packed, codes, half := randBytes(r, n*k/2, nil), randBytes(r, n*k/16, nil), randRange(r, 256, 0.02, 0.1)
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmNVFP4DotNT(m, n, k, a, lda, packed, codes, half, c, ldc)
		}, decoded(convNibbles(nvfp4Code(half), packed, codes, k), n, k), nil
	}},
	{"MXFP4", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		blocks, scales := randBytes(r, n*k/2, nil), randBytes(r, n*k/32, func(v byte) bool { return v >= 122 && v <= 130 })
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmMXFP4DotNT(m, n, k, a, lda, blocks, scales, c, ldc)
		}, decoded(convNibbles(&mxfp4Code, blocks, scales, k), n, k), nil
	}},
	{"grouped int4 with mins", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		const g = 32
		packed, scales, mins := randBytes(r, n*k/2, nil), randRange(r, n*k/g, 0.05, 0.25), randRange(r, k/g*n, -0.5, 0.5)
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmInt4GroupsDotNT(m, n, k, a, lda, packed, scales, mins, g, c, ldc)
		}, decoded(convNibbles(int4GroupsCode(scales, k/g, g), packed, int4GroupCodesOf(n, k, g), k), n, k), mins
	}},
	{"grouped FP4 by 16", func(r *rand.Rand, n, k int) (func(int, []float32, int, []float32, int), []float32, []float32) {
		const g = 16
		packed, half := randBytes(r, n*k/2, nil), randRange(r, n*k/g, 0.02, 0.1)
		return func(m int, a []float32, lda int, c []float32, ldc int) {
			GemmFP4GroupsDotNT(m, n, k, a, lda, packed, half, g, c, ldc)
		}, decoded(convNibbles(fp4GroupsCode(half, k/g, g), packed, int4GroupCodesOf(n, k, g), k), n, k), nil
	}},
}

// The bf16-activation products of the formats held compact (FP8, int4,
// NVFP4, MXFP4, grouped int4 with mins, grouped FP4) equal the float64
// product of bf16(A) with B's decoded values, rounded to bf16 on the pair
// kernel's path (16 rows or more with AVX512_BF16; the mins' part is not
// rounded) and exact below it, as GemmInt8DotNT's do.
func TestGemmCompactDotNT(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	forEachLevel(t, func(t *testing.T) {
		for _, f := range compactDots {
			for _, sh := range []shape{{1, 7, 64}, {5, 33, 128}, {16, 20, 96}, {40, 70, 320}, {130, 9, 2112}, {300, 70, 1088}} {
				m, n, k := sh.m, sh.n, sh.k
				lda, ldc := k+2, n+1
				a := randMat(r, m, k, lda)
				c := randMat(r, m, n, ldc)
				dot, vals, mins := f.make(r, n, k)
				dot(m, a, lda, c, ldc)
				ar := make([]float32, len(a))
				for i, v := range a {
					ar[i] = bf16RoundRef(v)
				}
				pairs := m >= int8DotMinM && k >= 32 && hasBF16Dot()
				w := func(_, j, p int) float64 {
					v := vals[j*k+p]
					if pairs {
						v = bf16RoundRef(v)
					}
					if mins != nil {
						return float64(v) + float64(mins[(p/32)*n+j])
					}
					return float64(v)
				}
				checkC(t, f.name, m, n, k, ar, lda, w, c, ldc)
			}
		}
	})
}
