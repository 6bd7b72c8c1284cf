//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math"

	"golang.org/x/sys/cpu"
)

func detectLevel() isaLevel {
	x := cpu.X86
	switch {
	case x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512DQ && x.HasFMA && x.HasF16C:
		return levelAVX512
	case x.HasAVX2 && x.HasFMA && x.HasF16C:
		return levelAVX2
	}
	return levelGeneric
}

// The GEMV kernels run the first k&^15 columns in assembly; the Go side adds
// the remaining columns of each row.

func gemvRowsF32(a, b []float32, ldb int, c []float32) {
	k, km := len(a), len(a)&^15
	if level == levelGeneric || km == 0 || len(c) == 0 {
		gemvRowsF32Generic(a, b, ldb, c)
		return
	}
	_ = b[(len(c)-1)*ldb+k-1]
	if level == levelAVX512 {
		gemvF32AVX512(&a[0], &b[0], ldb*4, km, &c[0], len(c))
	} else {
		gemvF32AVX2(&a[0], &b[0], ldb*4, km, &c[0], len(c))
	}
	if km < k {
		for j := range c {
			c[j] += dotF32(a[km:], b[j*ldb+km:j*ldb+k])
		}
	}
}

func gemvRowsBF16(a []float32, b []uint16, ldb int, c []float32) {
	k, km := len(a), len(a)&^15
	if level == levelGeneric || km == 0 || len(c) == 0 {
		gemvRowsBF16Generic(a, b, ldb, c)
		return
	}
	_ = b[(len(c)-1)*ldb+k-1]
	if level == levelAVX512 {
		gemvBF16AVX512(&a[0], &b[0], ldb*2, km, &c[0], len(c))
	} else {
		gemvBF16AVX2(&a[0], &b[0], ldb*2, km, &c[0], len(c))
	}
	if km < k {
		for j := range c {
			c[j] += dotBF16(a[km:], b[j*ldb+km:j*ldb+k])
		}
	}
}

// smallMBF16 and smallMF16 take gemmSmallM16 on AVX-512 (k >= 16).
func smallMBF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) bool {
	if level == levelAVX2 && k >= 16 && m <= smallM16MaxAVX2 {
		smallM16AVX2(m, n, k, a, lda, b, ldb, c, ldc, false)
		return true
	}
	if level != levelAVX512 || k < 16 {
		return false
	}
	gemmSmallM16(m, n, k, a, lda, b, ldb, c, ldc, false)
	return true
}

func smallMF16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) bool {
	if level == levelAVX2 && k >= 16 && m <= smallM16MaxAVX2 {
		smallM16AVX2(m, n, k, a, lda, b, ldb, c, ldc, true)
		return true
	}
	if level != levelAVX512 || k < 16 {
		return false
	}
	gemmSmallM16(m, n, k, a, lda, b, ldb, c, ldc, true)
	return true
}

// smallM16MaxAVX2 is the most rows of A the AVX2 small-m 16-bit product
// takes (dotBF16X4AVX2: B read once per four rows).
var smallM16MaxAVX2 = 8

// smallM16AVX2 is the small-m product with 16-bit weights on AVX2: each B
// row is widened in registers once per four rows of A (dotBF16X4AVX2,
// dotF16X4AVX2: k beyond the multiple of 16 is added in Go), B rows the
// parallel work.
func smallM16AVX2(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int, f16 bool) {
	k16 := k &^ 15
	_ = b[(n-1)*ldb+k-1]
	smallMRows(m, n, k, 4, a, lda, c, ldc, func(i0 int, rows []*float32, j int, out []float32) {
		bj := b[j*ldb : j*ldb+k]
		if f16 {
			dotF16X4AVX2((*[4]*float32)(rows), &bj[0], k16/16, (*[4]float32)(out))
		} else {
			dotBF16X4AVX2((*[4]*float32)(rows), &bj[0], k16/16, (*[4]float32)(out))
		}
		if k16 == k {
			return
		}
		for i := range min(4, m-i0) { // the columns past the kernel's multiple of 16
			ai := a[(i0+i)*lda+k16 : (i0+i)*lda+k]
			if f16 {
				out[i] += dotF16(ai, bj[k16:])
			} else {
				out[i] += dotBF16(ai, bj[k16:])
			}
		}
	})
}

// smallMRows is the walk the small-m products share: B rows [0, n) are
// the parallel work, each against the rows of A in groups of width (4 or
// 8; a short group repeats its last row), dot(i0, rows, j, out) computing
// B row j against the group from row i0 into out, which goes to C.
func smallMRows(m, n, k, width int, a []float32, lda int, c []float32, ldc int, dot func(i0 int, rows []*float32, j int, out []float32)) {
	Parallel(n, max(1, gemvGrain(k)/max(1, m/width)), func(lo, hi int) {
		var rowsBuf [8]*float32
		var outBuf [8]float32
		rows, out := rowsBuf[:width], outBuf[:width]
		for i0 := 0; i0 < m; i0 += width {
			r := min(width, m-i0)
			for i := range rows {
				rows[i] = &a[(i0+min(i, r-1))*lda]
			}
			for j := lo; j < hi; j++ {
				dot(i0, rows, j, out)
				for i := 0; i < r; i++ {
					c[(i0+i)*ldc+j] = out[i]
				}
			}
		}
	})
}

// gemmSmallM16 is the small-m path over the four-by-four AVX-512
// kernels (bf16, or f16 when f16): blocks of four B rows in parallel, each
// against every group of four A rows (a short group repeats its last row
// into a scratch tile); k beyond the kernel's multiple of 16 and the last
// n % 4 B rows go through dot16 and gemvRows.
func gemmSmallM16(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int,
	f16 bool) {
	// Direct calls (not through a func value) keep ap and tmp on the stack.
	dot := func(ap *[4]*float32, b *uint16, ldb, k int, c *float32, ldc int) {
		if f16 {
			dot4x4F16AVX512(ap, b, ldb, k, c, ldc)
		} else {
			dot4x4BF16AVX512(ap, b, ldb, k, c, ldc)
		}
	}
	dot16, gemvRows := dotBF16, gemvRowsBF16
	if f16 {
		dot16, gemvRows = dotF16, gemvRowsF16
	}
	km := k &^ 15
	nb := n / 4
	_ = a[(m-1)*lda+k-1]
	_ = c[(m-1)*ldc+n-1]
	if nb > 0 {
		_ = b[(4*nb-1)*ldb+k-1]
		Parallel(nb, max(1, gemvGrain(k)/4), func(lo, hi int) {
			var tmp [16]float32
			for jb := lo; jb < hi; jb++ {
				j0 := 4 * jb
				for i0 := 0; i0 < m; i0 += 4 {
					rows := min(4, m-i0)
					var ap [4]*float32
					for r := range ap {
						ap[r] = &a[(i0+min(r, rows-1))*lda]
					}
					if rows == 4 {
						dot(&ap, &b[j0*ldb], ldb*2, km, &c[i0*ldc+j0], ldc*4)
					} else {
						dot(&ap, &b[j0*ldb], ldb*2, km, &tmp[0], 16)
						for r := range rows {
							copy(c[(i0+r)*ldc+j0:(i0+r)*ldc+j0+4], tmp[4*r:4*r+4])
						}
					}
					if km < k {
						for r := range rows {
							ar := a[(i0+r)*lda+km : (i0+r)*lda+k]
							for j := j0; j < j0+4; j++ {
								c[(i0+r)*ldc+j] += dot16(ar, b[j*ldb+km:j*ldb+k])
							}
						}
					}
				}
			}
		})
	}
	if j0 := 4 * nb; j0 < n {
		for i := range m {
			gemvRows(a[i*lda:i*lda+k], b[j0*ldb:], ldb, c[i*ldc+j0:i*ldc+n])
		}
	}
}

func gemvRowsF16(a []float32, b []uint16, ldb int, c []float32) {
	k, km := len(a), len(a)&^15
	if level == levelGeneric || km == 0 || len(c) == 0 {
		gemvRowsF16Generic(a, b, ldb, c)
		return
	}
	_ = b[(len(c)-1)*ldb+k-1]
	if level == levelAVX512 {
		gemvF16AVX512(&a[0], &b[0], ldb*2, km, &c[0], len(c))
	} else {
		gemvF16AVX2(&a[0], &b[0], ldb*2, km, &c[0], len(c))
	}
	if km < k {
		for j := range c {
			c[j] += dotF16(a[km:], b[j*ldb+km:j*ldb+k])
		}
	}
}

// gemvRowsI8 takes the assembly path when the group size is a multiple of 16
// (then so is k); other group sizes run the portable kernel.
func gemvRowsI8(a []float32, b []int8, ldb int, scales []float32, ng, g int, c []float32) {
	k := len(a)
	if level == levelGeneric || g%16 != 0 || k == 0 || len(c) == 0 {
		gemvRowsI8Generic(a, b, ldb, scales, ng, g, c)
		return
	}
	_ = b[(len(c)-1)*ldb+k-1]
	_ = scales[len(c)*ng-1]
	if level == levelAVX512 {
		gemvI8AVX512(&a[0], &b[0], ldb, k, &c[0], len(c), &scales[0], ng*4, g)
	} else {
		gemvI8AVX2(&a[0], &b[0], ldb, k, &c[0], len(c), &scales[0], ng*4, g)
	}
}

var genericMicroKernel = microKernel{mr: genericMR, nr: genericNR, fn: func(kc int, a, b, c []float32, ldc int, acc bool) {
	gemmKernelGeneric(genericMR, genericNR, kc, a, b, c, ldc, acc)
}}

var (
	packedAVX512 = microKernel{mr: 8, nr: 32, fn: func(kc int, a, b, c []float32, ldc int, acc bool) {
		_, _, _ = a[kc*8-1], b[kc*32-1], c[7*ldc+31]
		gemmPack8x32AVX512(kc, &a[0], &b[0], &c[0], ldc*4, boolInt(acc))
	}}
	packedAVX2 = microKernel{mr: 6, nr: 16, fn: func(kc int, a, b, c []float32, ldc int, acc bool) {
		_, _, _ = a[kc*6-1], b[kc*16-1], c[5*ldc+15]
		gemmPack6x16AVX2(kc, &a[0], &b[0], &c[0], ldc*4, boolInt(acc))
	}}
)

func currentMicroKernel() microKernel {
	switch level {
	case levelAVX512:
		return packedAVX512
	case levelAVX2:
		return packedAVX2
	}
	return genericMicroKernel
}

// axpy is y += alpha·x over len(y) elements.
func axpy(alpha float32, x, y []float32) {
	nm := len(y) &^ 15
	if nm == 0 || level == levelGeneric {
		axpyF32(alpha, x, y)
		return
	}
	_ = x[len(y)-1]
	if level == levelAVX512 {
		axpyAVX512(alpha, &x[0], &y[0], nm)
	} else {
		axpyAVX2(alpha, &x[0], &y[0], nm)
	}
	axpyF32(alpha, x[nm:], y[nm:])
}

// Row kernels: assembly over the first len&^15 elements (AVX-512 or AVX2),
// portable Go for the rest and on the generic level.

func sumSquares(x []float32) float32 {
	nm := len(x) &^ 15
	switch {
	case nm == 0 || level == levelGeneric:
		return sumSquaresGeneric(x)
	case level == levelAVX512:
		return sumSquaresAVX512(&x[0], nm) + sumSquaresGeneric(x[nm:])
	}
	return sumSquaresAVX2(&x[0], nm) + sumSquaresGeneric(x[nm:])
}

func scaleMul(dst, x, w []float32, s float32) {
	nm := len(dst) &^ 15
	if nm == 0 || level == levelGeneric {
		scaleMulGeneric(dst, x, w, s)
		return
	}
	_, _ = x[len(dst)-1], w[len(dst)-1]
	if level == levelAVX512 {
		scaleMulAVX512(&dst[0], &x[0], &w[0], nm, s)
	} else {
		scaleMulAVX2(&dst[0], &x[0], &w[0], nm, s)
	}
	scaleMulGeneric(dst[nm:], x[nm:], w[nm:], s)
}

func scaleInPlace(x []float32, s float32) {
	nm := len(x) &^ 15
	if nm == 0 || level == levelGeneric {
		scaleInPlaceGeneric(x, s)
		return
	}
	if level == levelAVX512 {
		scaleInPlaceAVX512(&x[0], nm, s)
	} else {
		scaleInPlaceAVX2(&x[0], nm, s)
	}
	scaleInPlaceGeneric(x[nm:], s)
}

func expSubSum(x []float32, mx float32) float32 {
	nm := len(x) &^ 15
	switch {
	case nm == 0 || level == levelGeneric:
		return expSubSumGeneric(x, mx)
	case level == levelAVX512:
		return expSubSumAVX512(&x[0], nm, mx) + expSubSumGeneric(x[nm:], mx)
	}
	return expSubSumAVX2(&x[0], nm, mx) + expSubSumGeneric(x[nm:], mx)
}

func siluMul(dst, gate, up []float32) {
	nm := len(dst) &^ 15
	if nm == 0 || level == levelGeneric {
		siluMulGeneric(dst, gate, up)
		return
	}
	_, _ = gate[len(dst)-1], up[len(dst)-1]
	if level == levelAVX512 {
		siluMulAVX512(&dst[0], &gate[0], &up[0], nm)
	} else {
		siluMulAVX2(&dst[0], &gate[0], &up[0], nm)
	}
	siluMulGeneric(dst[nm:], gate[nm:], up[nm:])
}

func addInPlace(dst, x []float32) {
	nm := len(dst) &^ 15
	if nm == 0 || level == levelGeneric {
		addInPlaceGeneric(dst, x)
		return
	}
	_ = x[len(dst)-1]
	if level == levelAVX512 {
		addInPlaceAVX512(&dst[0], &x[0], nm)
	} else {
		addInPlaceAVX2(&dst[0], &x[0], nm)
	}
	addInPlaceGeneric(dst[nm:], x[nm:])
}

var (
	ntAVX512 = ntKernel{mr: 4, kstep: 16, dot: dotF32, fn: func(a *[4][]float32, b *[4][]float32, k int, c []float32, ldc int, acc bool) {
		ap := [4]*float32{&a[0][0], &a[1][0], &a[2][0], &a[3][0]}
		bp := [4]*float32{&b[0][0], &b[1][0], &b[2][0], &b[3][0]}
		_ = c[3*ldc+3]
		gemmDot4x4AVX512(&ap, &bp, k, &c[0], ldc*4, boolInt(acc))
	}}
	ntAVX2 = ntKernel{mr: 3, kstep: 8, dot: dotF32, fn: func(a *[4][]float32, b *[4][]float32, k int, c []float32, ldc int, acc bool) {
		ap := [3]*float32{&a[0][0], &a[1][0], &a[2][0]}
		bp := [4]*float32{&b[0][0], &b[1][0], &b[2][0], &b[3][0]}
		_ = c[2*ldc+3]
		gemmDot3x4AVX2(&ap, &bp, k, &c[0], ldc*4, boolInt(acc))
	}}
)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func currentNTKernel() ntKernel {
	switch level {
	case levelAVX512:
		return ntAVX512
	case levelAVX2:
		return ntAVX2
	}
	return ntGeneric
}

func widenBF16(dst []float32, src []uint16) {
	widen16(dst, src, widenBF16AVX2, widenBF16AVX512, widenBF16Generic)
}

func widenF16(dst []float32, src []uint16) {
	widen16(dst, src, widenF16AVX2, widenF16AVX512, widenF16Generic)
}

// widen16 widens 16-bit floats with the kernels of this machine's level:
// AVX2's on a multiple of 8 values, AVX-512's on a multiple of 16, the
// portable one on the rest.
func widen16(dst []float32, src []uint16, avx2, avx512 func(dst *float32, src *uint16, n int), generic func([]float32, []uint16)) {
	if level == levelAVX2 {
		nm := len(dst) &^ 7
		if nm > 0 {
			_ = src[len(dst)-1]
			avx2(&dst[0], &src[0], nm)
		}
		generic(dst[nm:], src[nm:])
		return
	}
	nm := len(dst) &^ 15
	if level != levelAVX512 || nm == 0 {
		generic(dst, src)
		return
	}
	_ = src[len(dst)-1]
	avx512(&dst[0], &src[0], nm)
	generic(dst[nm:], src[nm:])
}

func widenI8(dst []float32, src []int8, s float32) {
	if level == levelAVX2 {
		nm := len(dst) &^ 7
		if nm > 0 {
			_ = src[len(dst)-1]
			widenI8AVX2(&dst[0], &src[0], nm, s)
		}
		widenI8Generic(dst[nm:], src[nm:], s)
		return
	}
	nm := len(dst) &^ 15
	if level != levelAVX512 || nm == 0 {
		widenI8Generic(dst, src, s)
		return
	}
	_ = src[len(dst)-1]
	widenI8AVX512(&dst[0], &src[0], nm, s)
	widenI8Generic(dst[nm:], src[nm:], s)
}

// gemvRowsNibbles computes c[j] = Σ_p a[p]·B[j,p] for the len(c) rows of
// a nibble-coded B of format code with len(a) values a row (blocks and
// scales from row 0, which is row j0 of the matrix). With AVX-512 it
// permutes a and runs gemvRowsNibblesPerm (GemvMulti and gemvNibbles
// permute once for all their rows and call that directly); on AVX2 a row
// at a time (the Go code for a split format).
func gemvRowsNibbles(code *nibbleCode, j0 int, a []float32, blocks, scales []byte, c []float32) {
	k := len(a)
	nb := k / nibbleBlock
	switch {
	case level == levelGeneric || nb == 0 || len(c) == 0 || code.split && level == levelAVX2:
		gemvRowsNibblesGeneric(code, j0, a, blocks, scales, c)
	case level == levelAVX2:
		_, _ = blocks[len(c)*k/2-1], scales[len(c)*nb-1]
		for j := range c {
			rc := code.at(j0 + j)
			c[j] = dotNibblesAVX2(&a[0], &blocks[j*k/2], &scales[j*nb], nb, rc.lut, &rc.half[0])
		}
	default:
		buf, ap := f32Scratch(k)
		permuteBlocks(ap, a)
		gemvRowsNibblesPerm(code, j0, ap, blocks, scales, c)
		f32Pool.Put(buf)
	}
}

// gemvNibbles is gemmNibbles at m = 1: c[j] = Σ_p a[p]·B[j,p] for the n
// rows of B. With AVX-512 the activations are permuted once
// (permuteBlocks), and dotNibblesPermAVX512 reads each worker's rows in
// one call, with no interleaving of a block's nibbles.
//
// A split format (two codes a block) takes dotNibblesPerm16AVX512: a
// permuted block's first eight lanes of each half are its values 0–15.
func gemvNibbles(code *nibbleCode, n, k int, a []float32, blocks, scales []byte, c []float32) {
	nb := k / nibbleBlock
	nc := k / code.codeSpan()
	if level != levelAVX512 || nb == 0 {
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRowsNibbles(code, lo, a, blocks[lo*k/2:], scales[lo*nc:], c[lo:hi])
		})
		return
	}
	_, _ = blocks[n*k/2-1], scales[n*nc-1]
	buf, ap := f32Scratch(k)
	permuteBlocks(ap, a)
	Parallel(n, gemvGrain(k), func(lo, hi int) {
		rc := code.at(lo)
		if code.split {
			dotNibblesPerm16AVX512(&ap[0], &blocks[lo*k/2], &scales[lo*nc], nb, hi-lo, code.vals, &rc.half[0], code.rowStride(), &c[lo])
			return
		}
		dotNibblesPermAVX512(&ap[0], &blocks[lo*k/2], &scales[lo*nb], nb, hi-lo, code.vals, &rc.half[0], code.rowStride(), &c[lo])
	})
	f32Pool.Put(buf)
}

// nibblesPermuted reports whether gemvRowsNibblesPerm runs (AVX-512), for
// rows of k values.
func nibblesPermuted(k int) bool { return level == levelAVX512 && k >= nibbleBlock }

// gemvRowsNibblesPerm is gemvRowsNibbles on the activations permuted by
// permuteBlocks (ap): each call's rows in one dotNibblesPerm(16)AVX512.
func gemvRowsNibblesPerm(code *nibbleCode, j0 int, ap []float32, blocks, scales []byte, c []float32) {
	k := len(ap)
	nb := k / nibbleBlock
	nc := k / code.codeSpan()
	if len(c) == 0 {
		return
	}
	_, _ = blocks[len(c)*k/2-1], scales[len(c)*nc-1]
	rc := code.at(j0)
	if code.split {
		dotNibblesPerm16AVX512(&ap[0], &blocks[0], &scales[0], nb, len(c), code.vals, &rc.half[0], code.rowStride(), &c[0])
		return
	}
	dotNibblesPermAVX512(&ap[0], &blocks[0], &scales[0], nb, len(c), code.vals, &rc.half[0], code.rowStride(), &c[0])
}

// widenNibbles decodes whole blocks (len(dst)/32 of them) into dst.
func widenNibbles(code *nibbleCode, dst []float32, blocks, scales []byte) {
	nb := len(dst) / nibbleBlock
	if level == levelGeneric || nb == 0 || code.split && level != levelAVX512 {
		widenNibblesGeneric(code, dst, blocks, scales)
		return
	}
	if code.split {
		_, _ = blocks[nb*nibbleBlock/2-1], scales[2*nb-1]
		widenNibbles16AVX512(&dst[0], &blocks[0], &scales[0], nb, code.lut, &code.half[0])
		return
	}
	_, _ = blocks[nb*nibbleBlock/2-1], scales[nb-1]
	if level == levelAVX2 {
		widenNibblesAVX2(&dst[0], &blocks[0], &scales[0], nb, code.lut, &code.half[0])
		return
	}
	widenNibblesAVX512(&dst[0], &blocks[0], &scales[0], nb, code.lut, &code.half[0])
}

// smallMNibbles is the small-m product: every B row is decoded in
// registers once for up to eight rows of A, two rows at a time
// (dotNibblesx8x2AVX512, with the matrix's table or each row's own), with
// no f32 copy of B. It reports false (and does nothing) without AVX-512.
// A split format takes dotNibblesx8x2x16AVX512.
func smallMNibbles(code *nibbleCode, m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) bool {
	if level != levelAVX512 {
		return false
	}
	nb := k / nibbleBlock
	nc := k / code.codeSpan()
	_, _ = blocks[n*k/2-1], scales[n*nc-1]
	Parallel((n+1)/2, max(1, gemvGrain(k)/2), func(lo, hi int) {
		var ap [8]*float32
		for i := range ap {
			ap[i] = &a[min(i, m-1)*lda]
		}
		var tmp [16]float32
		for jb := lo; jb < hi; jb++ {
			j0 := 2 * jb
			cols := min(2, n-j0)
			j1 := j0 + cols - 1
			bp := [2]*byte{&blocks[j0*k/2], &blocks[j1*k/2]}
			sp := [2]*byte{&scales[j0*nc], &scales[j1*nc]}
			var hp [2]*float32
			if code.rows != nil {
				hp = [2]*float32{&code.rows[j0*code.stride], &code.rows[j1*code.stride]}
			} else {
				hp = [2]*float32{&code.half[0], &code.half[0]}
			}
			if code.split {
				dotNibblesx8x2x16AVX512(&ap, &bp, &sp, nb, code.lut, &hp, &tmp)
			} else {
				dotNibblesx8x2AVX512(&ap, &bp, &sp, nb, code.lut, &hp, &tmp)
			}
			for i := range m {
				for j := range cols {
					c[i*ldc+j0+j] = tmp[4*(i%4)+2*(i/4)+j]
				}
			}
		}
	})
	return true
}

// hasVNNI reports whether the int8-activation kernel's VPDPBUSD (AVX512
// VNNI on 256-bit registers) can run.
func hasVNNI() bool { return level == levelAVX512 && cpu.X86.HasAVX512VNNI }

// dotInt4Q8 computes c[j] for the len(c) int4 rows of packed and codes
// (k/2 bytes and k/32 codes a row) against r, the first row being row j0
// of a matrix of format code (one table, or one a row).
func dotInt4Q8(r *q8Row, code *nibbleCode, j0 int, packed, codes []byte, c []float32) {
	np := len(r.corr) / 8
	if len(c) == 0 || np == 0 {
		return
	}
	_, _, _, _ = packed[32*np*len(c)-1], codes[2*np*len(c)-1], r.q[64*np-1], r.sa[8*np-1]
	rc := code.at(j0)
	dotInt4Q8VNNI(&r.q[0], &r.corr[0], &r.sa[0], &packed[0], &codes[0], np, len(c), &rc.half[0], code.rowStride(), &c[0])
}

// dotInt4Q8x4 computes, for the n int4 rows of packed and codes (k/2
// bytes and k/32 codes a row; the first is row j0 of a matrix of format
// code), their products with the four rows of b into c[r·ldc + j].
func dotInt4Q8x4(b *q8Rows4, code *nibbleCode, j0 int, packed, codes []byte, c []float32, ldc, n int) {
	k := len(b.rows[0].q)
	np := k / 64
	if n == 0 || np == 0 {
		return
	}
	_, _, _ = packed[32*np*n-1], codes[2*np*n-1], c[3*ldc+n-1]
	rc := code.at(j0)
	dotInt4Q8x4VNNI(&b.q[0], &b.corr[0], &b.sa[0], k, 32*np, &packed[0], &codes[0], np, n, &rc.half[0], code.rowStride(), &c[0], 4*ldc)
}

// hasBF16Dot reports whether the bf16-activation kernel's VDPBF16PS
// (AVX512_BF16) can run.
func hasBF16Dot() bool { return level == levelAVX512 && cpu.X86.HasAVX512BF16 }

// ntBF16Dot is the 4×4 NT kernel over bf16 rows of A and B.
var ntBF16Dot = ntKernelOf[uint16]{mr: 4, kstep: 32, dot: dotBF16Pairs, fn: func(a *[4][]uint16, b *[4][]uint16, k int, c []float32, ldc int, acc bool) {
	ap := [4]*uint16{&a[0][0], &a[1][0], &a[2][0], &a[3][0]}
	bp := [4]*uint16{&b[0][0], &b[1][0], &b[2][0], &b[3][0]}
	_ = c[3*ldc+3]
	dotBF16x4x4AVX512(&ap, &bp, k, &c[0], ldc*4, boolInt(acc))
}}

// dotBF16x8x2 is the 8×2 tile of the few-row bf16 product: c[4·(i%4) +
// 2·(i/4) + j] = Σ_{p<k} a[i][p]·b[j][p], k a positive multiple of 32.
func dotBF16x8x2(a *[8]*uint16, b *[2]*uint16, k int, c *[16]float32) {
	dotBF16x8x2AVX512(a, b, k, c)
}

// roundBF16 writes src's values rounded to bfloat16 bits into dst.
func roundBF16(dst []uint16, src []float32) {
	nm := 0
	if hasBF16Dot() {
		nm = len(dst) &^ 15
	}
	if nm > 0 {
		_ = src[nm-1]
		roundBF16AVX512(&dst[0], &src[0], nm)
	}
	roundBF16Generic(dst[nm:], src[nm:])
}

// Logistic writes dst[i] = 1/(1 + e^-src[i]) with the AVX-512 exp of the
// row kernels and reports true, or reports false (nothing written) below
// AVX-512, where the caller's scalar loop runs. Every element takes the
// vector path (a short tail is padded to 16), so an element's value does
// not depend on where a slice starts or ends. dst may alias src.
func Logistic(dst, src []float32) bool {
	if level != levelAVX512 {
		return false
	}
	src = src[:len(dst)]
	nm := len(dst) &^ 15
	if nm > 0 {
		logisticAVX512(&dst[0], &src[0], nm)
	}
	if nm < len(dst) {
		var tmp [16]float32
		copy(tmp[:], src[nm:])
		logisticAVX512(&tmp[0], &tmp[0], 16)
		copy(dst[nm:], tmp[:])
	}
	return true
}

// Erf writes dst[i] = erf(src[i]) with the AVX-512 exp of the row
// kernels (Abramowitz and Stegun's 7.1.26, as the backend's scalar erf:
// absolute error below 5e-7) and reports true, or reports false (nothing
// written) below AVX-512. As Logistic, a short tail is padded to 16, so an
// element's value does not depend on the slice; dst may alias src.
func Erf(dst, src []float32) bool {
	return rowsAVX512(dst, src, erfAVX512)
}

// Tanh writes dst[i] = tanh(src[i]) (within 3e-7 relative of float64's:
// the odd Taylor series below |x| 0.5, 1 - 2/(e^(2|x|)+1) above) and
// reports true, or reports false (nothing written) below AVX-512, as Erf.
func Tanh(dst, src []float32) bool {
	return rowsAVX512(dst, src, tanhAVX512)
}

// rowsAVX512 runs an elementwise AVX-512 kernel over src into dst, the
// tail padded to 16; false below AVX-512.
func rowsAVX512(dst, src []float32, k func(dst, src *float32, n int)) bool {
	if level != levelAVX512 {
		return false
	}
	src = src[:len(dst)]
	nm := len(dst) &^ 15
	if nm > 0 {
		k(&dst[0], &src[0], nm)
	}
	if nm < len(dst) {
		var tmp [16]float32
		copy(tmp[:], src[nm:])
		k(&tmp[0], &tmp[0], 16)
		copy(dst[nm:], tmp[:])
	}
	return true
}

// ArithF32 computes dst = a op c elementwise, a and c of dst's length or
// one value (broadcast), with AVX-512 over the first len(dst)&^15
// elements and Go over the rest, and reports true; below AVX-512 it
// reports false and writes nothing (the caller's loop runs). Each element
// is the one IEEE operation, so the results are the scalar loop's bits.
// dst may alias a or c.
func ArithF32(op Arith, dst, a, c []float32) bool {
	if level != levelAVX512 {
		return false
	}
	n := len(dst)
	nm := n &^ 15
	if nm > 0 {
		switch {
		case len(a) == 1 && len(c) == 1:
			nm = 0 // a constant: the Go loop
		case len(c) == 1:
			_ = a[nm-1]
			vs := [...]func(*float32, *float32, float32, int){addVSAVX512, subVSAVX512, mulVSAVX512, divVSAVX512}[op]
			vs(&dst[0], &a[0], c[0], nm)
		case len(a) == 1:
			_ = c[nm-1]
			switch op {
			case ArithAdd:
				addVSAVX512(&dst[0], &c[0], a[0], nm)
			case ArithMul:
				mulVSAVX512(&dst[0], &c[0], a[0], nm)
			case ArithSub:
				subSVAVX512(&dst[0], a[0], &c[0], nm)
			default:
				divSVAVX512(&dst[0], a[0], &c[0], nm)
			}
		default:
			_, _ = a[n-1], c[n-1]
			vv := [...]func(*float32, *float32, *float32, int){addVVAVX512, subVVAVX512, mulVVAVX512, divVVAVX512}[op]
			vv(&dst[0], &a[0], &c[0], nm)
		}
	}
	if nm < n {
		ta, tc := a, c
		if len(a) > 1 {
			ta = a[nm:n]
		}
		if len(c) > 1 {
			tc = c[nm:n]
		}
		arithScalar(op, dst[nm:], ta, tc)
	}
	return true
}

// gemvRowsFP8 computes c[j] = Σ_p a[p]·e4m3(b[j, p]) for the len(c) rows
// of b (stride ldb), with a the activations lifted by fp8Lift (fp8.go).
// The AVX-512 and AVX2 kernels sum the lifted activations times the E4M3
// values ·2^-120 over the first k&^15 columns; the sums are scaled by
// 2^120/fp8Lift and the tail added.
func gemvRowsFP8(a []float32, b []byte, ldb int, c []float32) {
	k, km := len(a), len(a)&^15
	if level == levelGeneric || km == 0 || len(c) == 0 {
		gemvRowsFP8Generic(a, b, ldb, c)
		return
	}
	_ = b[(len(c)-1)*ldb+k-1]
	if level == levelAVX2 {
		gemvFP8AVX2(&a[0], &b[0], ldb, km, &c[0], len(c))
	} else {
		gemvFP8AVX512(&a[0], &b[0], ldb, km, &c[0], len(c))
	}
	for j := range c {
		c[j] *= 0x1p120 / fp8Lift
		if km < k {
			c[j] += dotFP8(a[km:], b[j*ldb+km:j*ldb+k]) / fp8Lift
		}
	}
}

// smallMFP8 is GemmFP8NT's product for 2 to fp8SmallM rows of A on
// AVX-512: two B rows at a time against each group of eight rows of A
// (dotFP8x8x2AVX512; four against up to four rows, dotFP8x4x4AVX512),
// each weight widened and scaled in registers once for all the rows, with
// no f32 copy of B. Each weight is the product of
// its byte's value and its scale rounded once, as the dequantised weight
// is, so the sums are those of the f32 product on the dequantised matrix
// in this kernel's order. The scale blocks must span whole vectors: a
// block width (or, with one scale across a row, k) that is a multiple of
// 16 and divides k, and scales below 2^7 (times the widening's 2^120 they
// must stay finite). It reports false (and does nothing) otherwise.
func smallMFP8(m, n, k int, a []float32, lda int, b []byte, ldb int, scales []float32, sc, b0, b1 int, c []float32, ldc int) bool {
	g := b1
	if sc == 1 {
		g = k
	}
	if level != levelAVX512 || m > fp8SmallM || g%16 != 0 || k%g != 0 {
		return false
	}
	for _, v := range scales[:(n+b0-1)/b0*sc] {
		if !(math.Abs(float64(v)) < 0x1p7) {
			return false
		}
	}
	ng := k / g
	_ = b[(n-1)*ldb+k-1]
	if m <= 4 {
		smallMFP8x4(m, n, k, a, lda, b, ldb, scales, sc, b0, ng, g, c, ldc)
		return true
	}
	Parallel((n+1)/2, max(1, gemvGrain(k)/2/((m+7)/8)), func(lo, hi int) {
		buf, s2 := f32Scratch(2 * ng)
		defer f32Pool.Put(buf)
		r0, r1 := -1, -1
		var ap [8]*float32
		var tmp [16]float32
		for jb := lo; jb < hi; jb++ {
			j0 := 2 * jb
			cols := min(2, n-j0)
			j1 := j0 + cols - 1
			// The two rows' scales, times 2^120, when their block rows change.
			if j0/b0 != r0 || j1/b0 != r1 {
				r0, r1 = j0/b0, j1/b0
				for q := range ng {
					s2[q] = scales[r0*sc+q] * 0x1p120
					s2[ng+q] = scales[r1*sc+q] * 0x1p120
				}
			}
			bp := [2]*byte{&b[j0*ldb], &b[j1*ldb]}
			sp := [2]*float32{&s2[0], &s2[ng]}
			rowGroups8x2(&ap, &tmp, m, a, lda, c[j0:], ldc, cols, func(ap *[8]*float32, tmp *[16]float32) {
				dotFP8x8x2AVX512(ap, &bp, &sp, ng, g/16, tmp)
			})
		}
	})
	return true
}

// rowGroups8x2 runs an 8×2 few-row kernel (kern: A's row pointers in,
// the tile c[4·(i%4) + 2·(i/4) + j] out) over m rows of A in groups of
// eight, a short group repeating its last row, and stores each tile's
// cols columns into C (c from the pair's first column). The groups after
// the first run on B rows still in L1. ap and tmp are the worker's (kern
// is a func value, so they would not stay on this call's stack).
func rowGroups8x2(ap *[8]*float32, tmp *[16]float32, m int, a []float32, lda int, c []float32, ldc, cols int, kern func(ap *[8]*float32, tmp *[16]float32)) {
	for i0 := 0; i0 < m; i0 += 8 {
		rows := min(8, m-i0)
		for i := range ap {
			ap[i] = &a[(i0+min(i, rows-1))*lda]
		}
		kern(ap, tmp)
		for i := range rows {
			for j := range cols {
				c[(i0+i)*ldc+j] = tmp[4*(i%4)+2*(i/4)+j]
			}
		}
	}
}

// smallMFP8x4 is smallMFP8 for two to four rows of A: four B rows at a
// time (the last block repeating its last row), dotFP8x4x4AVX512, each
// row's ng scales times 2^120 refreshed when its block row changes.
func smallMFP8x4(m, n, k int, a []float32, lda int, b []byte, ldb int, scales []float32, sc, b0, ng, g int, c []float32, ldc int) {
	Parallel((n+3)/4, max(1, gemvGrain(k)/4), func(lo, hi int) {
		buf, s4 := f32Scratch(4 * ng)
		defer f32Pool.Put(buf)
		rb := [4]int{-1, -1, -1, -1}
		var ap [4]*float32
		for i := range ap {
			ap[i] = &a[min(i, m-1)*lda]
		}
		var bp [4]*byte
		var sp [4]*float32
		var tmp [16]float32
		for jb := lo; jb < hi; jb++ {
			j0 := 4 * jb
			cols := min(4, n-j0)
			for j := range 4 {
				r := j0 + min(j, cols-1)
				if r/b0 != rb[j] {
					rb[j] = r / b0
					for q := range ng {
						s4[j*ng+q] = scales[rb[j]*sc+q] * 0x1p120
					}
				}
				bp[j], sp[j] = &b[r*ldb], &s4[j*ng]
			}
			dotFP8x4x4AVX512(&ap, &bp, &sp, ng, g/16, &tmp)
			for i := range m {
				copy(c[i*ldc+j0:i*ldc+j0+cols], tmp[4*i:4*i+cols])
			}
		}
	})
}

// fp8SmallM is the most rows of A smallMFP8 takes (groups of eight rows
// run on the same two B rows while they are in L1; beyond, the blocked
// GEMM widens B once per tile).
const fp8SmallM = 16

// widenFP8 writes e4m3(src[i])·s to dst.
func widenFP8(dst []float32, src []byte, s float32) {
	nm := len(dst) &^ 15
	if level == levelGeneric || nm == 0 {
		widenFP8Generic(dst, src, s)
		return
	}
	_ = src[len(dst)-1]
	if level == levelAVX2 {
		widenFP8AVX2(&dst[0], &src[0], nm, s*256)
	} else {
		widenFP8AVX512(&dst[0], &src[0], nm, s*256)
	}
	widenFP8Generic(dst[nm:], src[nm:], s)
}

// dotInt8Q8 computes c[j] for the len(c) int8 rows of b (stride ldb,
// groups of 64 with ng = k/64 scales a row in sw, rows contiguous) against
// r.
func dotInt8Q8(r *q8Lanes, b []int8, ldb int, sw []float32, ng int, c []float32) {
	k := len(r.q)
	if len(c) == 0 || k == 0 {
		return
	}
	if ng != k/64 {
		panic(fmt.Sprintf("kernels: dotInt8Q8: %d scales a row, want k/64 = %d", ng, k/64))
	}
	_, _ = b[(len(c)-1)*ldb+k-1], sw[(len(c)-1)*ng+k/64-1]
	dotInt8Q8VNNI(&r.q[0], &r.sc[0], &b[0], ldb, k, len(c), &sw[0], 4*ng, &c[0])
}

// smallMInt8x4 is smallMInt8 for two to four rows of A: four B rows at a
// time (the last block repeating its last row), dotInt8x4x4AVX512.
func smallMInt8x4(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, ng, g int, c []float32, ldc int) {
	Parallel((n+3)/4, max(1, gemvGrain(k)/4), func(lo, hi int) {
		var ap [4]*float32
		for i := range ap {
			ap[i] = &a[min(i, m-1)*lda]
		}
		var tmp [16]float32
		var bp [4]*int8
		var sp [4]*float32
		for jb := lo; jb < hi; jb++ {
			j0 := 4 * jb
			cols := min(4, n-j0)
			for j := range 4 {
				r := j0 + min(j, cols-1)
				bp[j], sp[j] = &b[r*ldb], &scales[r*ng]
			}
			dotInt8x4x4AVX512(&ap, &bp, &sp, ng, g/16, &tmp)
			for i := range m {
				copy(c[i*ldc+j0:i*ldc+j0+cols], tmp[4*i:4*i+cols])
			}
		}
	})
}

// smallMInt8 is GemmInt8NT's small-m product: each weight row is widened
// and scaled in registers once for all of A's rows, with no f32 copy of B
// (on AVX-512 two B rows at a time against each group of eight rows of
// A, dotInt8x8x2AVX512, or four against up to four rows,
// dotInt8x4x4AVX512; on AVX2 one against four, dotInt8X4AVX2). It reports
// false (and does nothing) without AVX2, for groups that are no multiple
// of 16, or beyond int8SmallM (int8SmallMAVX2) rows.
func smallMInt8(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, ng, g int, c []float32, ldc int) bool {
	most := int8SmallM
	if level == levelAVX2 {
		most = int8SmallMAVX2
	}
	if level == levelGeneric || g%16 != 0 || m > most {
		return false
	}
	_, _ = b[(n-1)*ldb+k-1], scales[n*ng-1]
	if level == levelAVX2 {
		smallMRows(m, n, k, 4, a, lda, c, ldc, func(_ int, rows []*float32, j int, out []float32) {
			dotInt8X4AVX2((*[4]*float32)(rows), &b[j*ldb], &scales[j*ng], ng, g/16, (*[4]float32)(out))
		})
		return true
	}
	if m <= 4 {
		smallMInt8x4(m, n, k, a, lda, b, ldb, scales, ng, g, c, ldc)
		return true
	}
	Parallel((n+1)/2, max(1, gemvGrain(k)/2/((m+7)/8)), func(lo, hi int) {
		var ap [8]*float32
		var tmp [16]float32
		for jb := lo; jb < hi; jb++ {
			j0 := 2 * jb
			cols := min(2, n-j0)
			j1 := j0 + cols - 1
			bp := [2]*int8{&b[j0*ldb], &b[j1*ldb]}
			sp := [2]*float32{&scales[j0*ng], &scales[j1*ng]}
			rowGroups8x2(&ap, &tmp, m, a, lda, c[j0:], ldc, cols, func(ap *[8]*float32, tmp *[16]float32) {
				dotInt8x8x2AVX512(ap, &bp, &sp, ng, g/16, tmp)
			})
		}
	})
	return true
}
