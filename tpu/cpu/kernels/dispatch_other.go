//go:build !amd64 || purego

package kernels

// Without the amd64 assembly every kernel is the portable Go version.

func detectLevel() isaLevel { return levelGeneric }

func gemvRowsF32(a, b []float32, ldb int, c []float32) { gemvRowsF32Generic(a, b, ldb, c) }

func gemvRowsBF16(a []float32, b []uint16, ldb int, c []float32) {
	gemvRowsBF16Generic(a, b, ldb, c)
}

func gemvRowsF16(a []float32, b []uint16, ldb int, c []float32) {
	gemvRowsF16Generic(a, b, ldb, c)
}

// No small-m 16-bit kernels without the assembly: the blocked GEMM runs.
func smallMBF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) bool {
	return false
}

func smallMF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) bool {
	return false
}

func gemvRowsI8(a []float32, b []int8, ldb int, scales []float32, ng, g int, c []float32) {
	gemvRowsI8Generic(a, b, ldb, scales, ng, g, c)
}

var genericMicroKernel = microKernel{mr: genericMR, nr: genericNR, fn: func(kc int, a, b, c []float32, ldc int, acc bool) {
	gemmKernelGeneric(genericMR, genericNR, kc, a, b, c, ldc, acc)
}}

func currentMicroKernel() microKernel { return genericMicroKernel }

func axpy(alpha float32, x, y []float32) { axpyF32(alpha, x, y) }

func sumSquares(x []float32) float32            { return sumSquaresGeneric(x) }
func scaleMul(dst, x, w []float32, s float32)   { scaleMulGeneric(dst, x, w, s) }
func scaleInPlace(x []float32, s float32)       { scaleInPlaceGeneric(x, s) }
func expSubSum(x []float32, mx float32) float32 { return expSubSumGeneric(x, mx) }
func siluMul(dst, gate, up []float32)           { siluMulGeneric(dst, gate, up) }
func addInPlace(dst, x []float32)               { addInPlaceGeneric(dst, x) }

func currentNTKernel() ntKernel { return ntGeneric }

func widenBF16(dst []float32, src []uint16)        { widenBF16Generic(dst, src) }
func widenF16(dst []float32, src []uint16)         { widenF16Generic(dst, src) }
func widenI8(dst []float32, src []int8, s float32) { widenI8Generic(dst, src, s) }

func gemvRowsNibbles(code *nibbleCode, j0 int, a []float32, blocks, scales []byte, c []float32) {
	gemvRowsNibblesGeneric(code, j0, a, blocks, scales, c)
}

func gemvNibbles(code *nibbleCode, n, k int, a []float32, blocks, scales []byte, c []float32) {
	nc := k / code.codeSpan()
	Parallel(n, gemvGrain(k), func(lo, hi int) {
		gemvRowsNibbles(code, lo, a, blocks[lo*k/2:], scales[lo*nc:], c[lo:hi])
	})
}

func nibblesPermuted(k int) bool { return false }

func gemvRowsNibblesPerm(code *nibbleCode, j0 int, ap []float32, blocks, scales []byte, c []float32) {
	panic("kernels: gemvRowsNibblesPerm without AVX-512")
}

func widenNibbles(code *nibbleCode, dst []float32, blocks, scales []byte) {
	widenNibblesGeneric(code, dst, blocks, scales)
}

func smallMNibbles(code *nibbleCode, m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) bool {
	return false
}

func hasVNNI() bool { return false }

func dotInt4Q8x4(b *q8Rows4, code *nibbleCode, j0 int, packed, codes []byte, c []float32, ldc, n int) {
	panic("kernels: dotInt4Q8x4 without VNNI")
}

func dotInt4Q8(r *q8Row, code *nibbleCode, j0 int, packed, codes []byte, c []float32) {
	panic("kernels: dotInt4Q8 without VNNI")
}

func hasBF16Dot() bool { return false }

// ntBF16Dot is never reached without the assembly (hasBF16Dot is false).
var ntBF16Dot = ntKernelOf[uint16]{mr: 4, kstep: 1, dot: dotBF16Pairs, fn: func(a *[4][]uint16, b *[4][]uint16, k int, c []float32, ldc int, acc bool) {
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			s := dotBF16Pairs(a[i][:k], b[j])
			if acc {
				c[i*ldc+j] += s
			} else {
				c[i*ldc+j] = s
			}
		}
	}
}}

func dotBF16x8x2(a *[8]*uint16, b *[2]*uint16, k int, c *[16]float32) {
	panic("kernels: dotBF16x8x2 without AVX512_BF16")
}

func roundBF16(dst []uint16, src []float32) { roundBF16Generic(dst, src) }

// Logistic has no portable kernel: the caller's scalar loop runs.
func Logistic(dst, src []float32) bool { return false }

// Erf has no portable kernel: the caller's scalar loop runs.
func Erf(dst, src []float32) bool { return false }

// Tanh has no portable kernel: the caller's scalar loop runs.
func Tanh(dst, src []float32) bool { return false }

func gemvRowsFP8(a []float32, b []byte, ldb int, c []float32) { gemvRowsFP8Generic(a, b, ldb, c) }

func widenFP8(dst []float32, src []byte, s float32) { widenFP8Generic(dst, src, s) }

func smallMFP8(m, n, k int, a []float32, lda int, b []byte, ldb int, scales []float32, sc, b0, b1 int, c []float32, ldc int) bool {
	return false
}

func dotInt8Q8(r *q8Lanes, b []int8, ldb int, sw []float32, ng int, c []float32) {
	panic("kernels: dotInt8Q8 without VNNI")
}

func smallMInt8(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, ng, g int, c []float32, ldc int) bool {
	return false
}

// ArithF32 has no portable kernel: the caller's loop runs.
func ArithF32(op Arith, dst, a, c []float32) bool { return false }
