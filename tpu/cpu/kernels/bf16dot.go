package kernels

import (
	"math"
	"sync"
)

// Products with bf16 activations: the opt-in path for bf16 weights in which
// A is rounded to bfloat16 too, so that both operands are bf16 and
// AVX512_BF16's VDPBF16PS multiplies 32 pairs an instruction (twice the
// multiply-adds of an f32 FMA) into f32 sums. llama.cpp's BF16 and F16
// weights take their activations to 16 bits the same way. The default
// (GemmBF16NT) keeps A in f32; this path trades A's last 16 bits of
// mantissa for the speed of compute-bound products (prefill, batched
// decode).

// GemmBF16DotNT is GemmBF16NT with A's values rounded to bfloat16 (to
// nearest even, NaN kept, denormals to signed zero, as VCVTNEPS2BF16 does)
// before they multiply: C[m,n] = bf16(A)·Bᵀ, products exact, sums in f32.
// With AVX512_BF16, k ≥ 32 and at least bf16DotMinM rows the product goes
// through the VDPBF16PS kernels; otherwise (one row, a GEMV bound by
// streaming B) the rounded A goes through GemmBF16NT's kernels: the same
// products, summed in another order. It panics if a slice is too short
// for its shape.
func GemmBF16DotNT(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkMat("GemmBF16DotNT A", m, k, lda, len(a))
	checkMat("GemmBF16DotNT B", n, k, ldb, len(b))
	checkMat("GemmBF16DotNT C", m, n, ldc, len(c))
	if m == 0 || n == 0 {
		return
	}
	buf := bf16Scratch.Get().(*bf16Buf)
	defer bf16Scratch.Put(buf)
	if m < bf16DotMinM || k < 32 || !hasBF16Dot() {
		gemm16NT(m, n, k, buf.asF32(a, lda, m, k), k, b, ldb, c, ldc, gemvRowsBF16, convBF16, smallMBF16)
		return
	}
	if m <= bf16DotFewMax {
		gemmBF16DotFewRows(m, n, k, buf.asBF16(a, lda, m, k, fewRowsStride(k)), b, ldb, c, ldc)
		return
	}
	ab := buf.asBF16(a, lda, m, k, k)
	if m <= bf16DotSmallMax {
		gemmBF16DotSmallM(ntBF16Dot, m, n, k, ab, b, ldb, c, ldc)
		return
	}
	ntDrive(ntBF16Dot, m, n, k, ab, k, inPlaceB(b, ldb), false, c, ldc)
}

// One row is a GEMV, bound by streaming B, which the f32 kernels on the
// rounded A do as fast. Up to bf16DotFewMax rows the few-row kernel streams
// B once into all of them; up to bf16DotSmallMax the small-m order (blocks
// of four B rows against groups of four A rows) wins, beyond it ntDrive's
// tiles (BenchmarkGEMMSmallM's bf16act cases against small). With int8
// weights, whose widening to bf16 costs a pass over each tile, the pair
// kernel pays from int8DotMinM rows.
const (
	bf16DotMinM     = 2
	bf16DotFewMax   = 8
	bf16DotSmallMax = 64
	int8DotMinM     = 16
)

// GemmInt8DotNT is GemmInt8NT with bf16 activations: from int8DotMinM rows
// on (with AVX512_BF16 and k ≥ 32), each worker widens its tile's B block
// to bf16 (q·scale rounded to bf16, once per block and reused by every row
// of the tile) and the pair kernel multiplies it with A rounded to bf16;
// fewer rows, where streaming the int8 B bounds the time, take GemmInt8NT
// on the rounded A. The weights' rounding to bf16 (2⁻⁹ of each, well
// under int8's own step) is the price of the pair kernel on this path.
func GemmInt8DotNT(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, groupSize int, c []float32, ldc int) {
	checkMat("GemmInt8DotNT A", m, k, lda, len(a))
	checkMat("GemmInt8DotNT B", n, k, ldb, len(b))
	checkMat("GemmInt8DotNT C", m, n, ldc, len(c))
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	ng := checkGroups("GemmInt8DotNT", n, k, groupSize, len(scales))
	buf := bf16Scratch.Get().(*bf16Buf)
	defer bf16Scratch.Put(buf)
	if m < int8DotMinM || k < 32 || !hasBF16Dot() {
		GemmInt8NT(m, n, k, buf.asF32(a, lda, m, k), k, b, ldb, scales, groupSize, c, ldc)
		return
	}
	gemmWidenedDot(m, n, k, buf.asBF16(a, lda, m, k, k), convI8(b, ldb, scales, ng, groupSize), c, ldc)
}

// gemmWidenedDot is the pair kernel's product of ab, A's m rows of k
// rounded to bf16 (stride k), with a B that widen decodes to f32: each
// worker decodes its tile's B block once, rounds it to bf16 and reuses it
// for every row of the tile (GemmInt8DotNT's way, for every format held
// compact).
func gemmWidenedDot(m, n, k int, ab []uint16, widen bConverter, c []float32, ldc int) {
	ntDrive(ntBF16Dot, m, n, k, ab, k, func() (ntBlock[uint16], func()) {
		s := i8Scratch.Get().(*i8Block)
		return func(j0, nb, p0, kc int) ([]uint16, int, int) {
			f := grow(&s.f32, nb*kc)
			widen(f, j0, nb, p0, kc)
			u := grow(&s.u16, nb*kc)
			roundBF16(u, f)
			return u, 0, kc
		}, func() { i8Scratch.Put(s) }
	}, true, c, ldc)
}

// pairRows reports whether a product of m rows over k with bf16
// activations and a B held compact goes through the pair kernel
// (gemmWidenedDot): AVX512_BF16, k ≥ 32 and int8DotMinM rows or more.
func pairRows(m, k int) bool { return m >= int8DotMinM && k >= 32 && hasBF16Dot() }

// GemmFP8DotNT is GemmFP8NT with bf16 activations, as GemmInt8DotNT is
// GemmInt8NT's: from int8DotMinM rows the pair kernel on each block of B
// decoded (code · scale) and rounded to bf16, with A rounded to bf16;
// fewer rows take GemmFP8NT on the rounded A.
func GemmFP8DotNT(m, n, k int, a []float32, lda int, b []byte, ldb int, scales []float32, b0, b1 int, c []float32, ldc int) {
	checkMat("GemmFP8DotNT A", m, k, lda, len(a))
	checkMat("GemmFP8DotNT C", m, n, ldc, len(c))
	checkFP8("GemmFP8DotNT", n, k, ldb, len(b), b0, b1, len(scales))
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	buf := bf16Scratch.Get().(*bf16Buf)
	defer bf16Scratch.Put(buf)
	if !pairRows(m, k) {
		GemmFP8NT(m, n, k, buf.asF32(a, lda, m, k), k, b, ldb, scales, b0, b1, c, ldc)
		return
	}
	gemmWidenedDot(m, n, k, buf.asBF16(a, lda, m, k, k), convFP8(b, ldb, scales, (k+b1-1)/b1, b0, b1), c, ldc)
}

// gemmNibblesDot is gemmNibbles with bf16 activations (GemmInt8DotNT's
// way): the pair kernel on each block of B decoded and rounded to bf16
// from int8DotMinM rows, gemmNibbles on the rounded A below.
func gemmNibblesDot(code *nibbleCode, m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) {
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	buf := bf16Scratch.Get().(*bf16Buf)
	defer bf16Scratch.Put(buf)
	if !pairRows(m, k) {
		gemmNibbles(code, m, n, k, buf.asF32(a, lda, m, k), k, blocks, scales, c, ldc)
		return
	}
	gemmWidenedDot(m, n, k, buf.asBF16(a, lda, m, k, k), convNibbles(code, blocks, scales, k), c, ldc)
}

// GemmInt4DotNT is GemmInt4NT with bf16 activations (gemmNibblesDot).
func GemmInt4DotNT(m, n, k int, a []float32, lda int, packed, codes []byte, table []float32, c []float32, ldc int) {
	checkMat("GemmInt4DotNT A", m, k, lda, len(a))
	checkMat("GemmInt4DotNT C", m, n, ldc, len(c))
	checkNibbles("GemmInt4DotNT", n, k, len(packed), len(codes))
	checkInt4Table("GemmInt4DotNT", table)
	gemmNibblesDot(int4Code(table), m, n, k, a, lda, packed, codes, c, ldc)
}

// GemmNVFP4DotNT is GemmNVFP4NT with bf16 activations (gemmNibblesDot).
func GemmNVFP4DotNT(m, n, k int, a []float32, lda int, packed, codes []byte, half []float32, c []float32, ldc int) {
	checkMat("GemmNVFP4DotNT A", m, k, lda, len(a))
	checkMat("GemmNVFP4DotNT C", m, n, ldc, len(c))
	checkNibbles("GemmNVFP4DotNT", n, k, len(packed), len(codes)/2)
	checkInt4Table("GemmNVFP4DotNT", half)
	gemmNibblesDot(nvfp4Code(half), m, n, k, a, lda, packed, codes, c, ldc)
}

// GemmMXFP4DotNT is GemmMXFP4NT with bf16 activations (gemmNibblesDot).
func GemmMXFP4DotNT(m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) {
	checkMat("GemmMXFP4DotNT A", m, k, lda, len(a))
	checkMat("GemmMXFP4DotNT C", m, n, ldc, len(c))
	checkMXFP4("GemmMXFP4DotNT", n, k, len(blocks), len(scales))
	gemmNibblesDot(&mxfp4Code, m, n, k, a, lda, blocks, scales, c, ldc)
}

// GemmInt4GroupsDotNT is GemmInt4GroupsNT with bf16 activations
// (gemmNibblesDot; the mins' part, which is not rounded, from the
// rounded A).
func GemmInt4GroupsDotNT(m, n, k int, a []float32, lda int, packed []byte, scales, mins []float32, group int, c []float32, ldc int) {
	gemmGroupsDot(&[3]string{"GemmInt4GroupsDotNT A", "GemmInt4GroupsDotNT C", "GemmInt4GroupsDotNT"}, int4GroupsCode, m, n, k, a, lda, packed, scales, mins, group, c, ldc)
}

// GemmFP4GroupsDotNT is GemmFP4GroupsNT with bf16 activations
// (gemmNibblesDot).
func GemmFP4GroupsDotNT(m, n, k int, a []float32, lda int, packed []byte, half []float32, group int, c []float32, ldc int) {
	gemmGroupsDot(&[3]string{"GemmFP4GroupsDotNT A", "GemmFP4GroupsDotNT C", "GemmFP4GroupsDotNT"}, fp4GroupsCode, m, n, k, a, lda, packed, half, nil, group, c, ldc)
}

// gemmGroupsDot is gemmGroups with bf16 activations: A rounded to bf16,
// the nibbles' part by gemmNibblesDot, the mins' part from the rounded A.
func gemmGroupsDot(names *[3]string, code func(scales []float32, ng, group int) *nibbleCode,
	m, n, k int, a []float32, lda int, packed []byte, scales, mins []float32, group int, c []float32, ldc int) {
	checkMat(names[0], m, k, lda, len(a))
	checkMat(names[1], m, n, ldc, len(c))
	if k == 0 || n == 0 {
		emptyProduct(m, n, k, c, ldc)
		return
	}
	checkInt4Groups(names[2], n, k, packed, scales, mins, group)
	buf := bf16Scratch.Get().(*bf16Buf)
	defer bf16Scratch.Put(buf)
	ar := buf.asF32(a, lda, m, k) // exact in bf16 now: the pair kernel's rounding of it changes nothing
	gemmNibblesDot(code(scales, k/group, group), m, n, k, ar, k, packed, int4GroupCodesOf(n, k, group), c, ldc)
	if mins != nil {
		addGroupMins(m, n, k, ar, k, mins, group, c, ldc)
	}
}

// i8Block is a worker's int8 B block, widened to f32 and rounded to bf16.
type i8Block struct {
	f32 []float32
	u16 []uint16
}

var i8Scratch = sync.Pool{New: func() any { return new(i8Block) }}

// bf16Buf holds a product's rounded A between calls.
type bf16Buf struct {
	u16 []uint16
	f32 []float32
}

var bf16Scratch = sync.Pool{New: func() any { return new(bf16Buf) }}

// roundScratch holds RoundBF16's bf16 bits.
var roundScratch = sync.Pool{New: func() any { return new([512]uint16) }}

// asBF16 returns the m rows of k of a (stride lda) rounded to bf16 bits,
// at stride ld (≥ k), in buf.
func (buf *bf16Buf) asBF16(a []float32, lda, m, k, ld int) []uint16 {
	ab := grow(&buf.u16, (m-1)*ld+k)
	for i := 0; i < m; i++ {
		roundBF16(ab[i*ld:i*ld+k], a[i*lda:i*lda+k])
	}
	return ab
}

// fewRowsStride is the stride of the few-row product's A rows: k and one
// cache line, so that rows whose length is a multiple of 4 KiB do not all
// fall in the same L1 sets (eight of them and the B rows streaming
// through would overflow an 8-way set).
func fewRowsStride(k int) int { return k + 32 }

// asF32 is asBF16 with the rounded values as f32, for the f32 kernels.
func (buf *bf16Buf) asF32(a []float32, lda, m, k int) []float32 {
	ar := grow(&buf.f32, m*k)
	for i := 0; i < m; i++ {
		RoundBF16(ar[i*k:(i+1)*k], a[i*lda:i*lda+k])
	}
	return ar
}

// grow returns (*s)[:n], reallocating when the capacity is short.
func grow[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	return (*s)[:n]
}

// bf16Round is one value's rounding to bfloat16 bits: to nearest even,
// NaN kept (made quiet), zero and denormals to signed zero.
func bf16Round(f float32) uint16 {
	u := math.Float32bits(f)
	switch {
	case u&0x7f800000 == 0:
		return uint16(u>>16) & 0x8000
	case u&0x7fffffff > 0x7f800000:
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func roundBF16Generic(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = bf16Round(v)
	}
}

// RoundBF16 writes src's values rounded to bfloat16 (as GemmBF16DotNT
// rounds A) into dst, as f32: rounded to bf16 bits and widened back by the
// vector kernels, a pooled buffer at a time (one on the stack would move
// to the heap, since the kernels are called through variables: an
// allocation a call, a few a row of every bf16 product). dst may alias
// src.
func RoundBF16(dst, src []float32) {
	src = src[:len(dst)]
	tmp := roundScratch.Get().(*[512]uint16)
	defer roundScratch.Put(tmp)
	for i := 0; i < len(dst); i += len(tmp) {
		n := min(len(tmp), len(dst)-i)
		roundBF16(tmp[:n], src[i:i+n])
		widenBF16(dst[i:i+n], tmp[:n])
	}
}

// dotBF16Pairs is the plain bf16·bf16 dot product (the kernel's tail).
func dotBF16Pairs(a, b []uint16) float32 {
	b = b[:len(a)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(a); i += 2 {
		s0 += bf16ToF32(a[i]) * bf16ToF32(b[i])
		s1 += bf16ToF32(a[i+1]) * bf16ToF32(b[i+1])
	}
	for ; i < len(a); i++ {
		s0 += bf16ToF32(a[i]) * bf16ToF32(b[i])
	}
	return s0 + s1
}

// gemmBF16DotFewRows is the bf16 product for 2 to 8 rows of A (a, m rows
// of k at stride fewRowsStride(k)): B streams from memory once, two rows
// at a time, each multiplied into all of A's rows by dotBF16x8x2 (whose
// missing rows repeat the last one).
func gemmBF16DotFewRows(m, n, k int, a, b []uint16, ldb int, c []float32, ldc int) {
	kFull := k / 32 * 32
	lda := fewRowsStride(k)
	var ap [8]*uint16
	for i := range ap {
		ap[i] = &a[min(i, m-1)*lda]
	}
	Parallel((n+1)/2, max(1, gemvGrain(k)/2), func(lo, hi int) {
		var tmp [16]float32
		for jb := lo; jb < hi; jb++ {
			j0 := 2 * jb
			cols := min(2, n-j0)
			bp := [2]*uint16{&b[j0*ldb], &b[(j0+cols-1)*ldb]}
			_ = b[(j0+cols-1)*ldb+k-1]
			dotBF16x8x2(&ap, &bp, kFull, &tmp)
			for i := range m {
				for j := range cols {
					v := tmp[4*(i%4)+2*(i/4)+j]
					if kFull < k {
						o := (j0 + j) * ldb
						v += dotBF16Pairs(a[i*lda+kFull:i*lda+k], b[o+kFull:o+k])
					}
					c[i*ldc+j0+j] = v
				}
			}
		}
	})
}

// gemmBF16DotSmallM is the small-m order of the bf16 product (a is m rows
// of k, packed): blocks of four B rows in parallel, each against every
// group of four A rows while it is in L1, so B streams from memory once
// and the A rows (m·k·2 bytes) stay in cache. A short group or block
// repeats its last row into a scratch tile.
func gemmBF16DotSmallM(kern ntKernelOf[uint16], m, n, k int, a, b []uint16, ldb int, c []float32, ldc int) {
	kFull := k / kern.kstep * kern.kstep
	Parallel((n+3)/4, max(1, gemvGrain(k)/4), func(lo, hi int) {
		var tmp [16]float32
		var ar, br [4][]uint16
		for jb := lo; jb < hi; jb++ {
			j0 := 4 * jb
			cols := min(4, n-j0)
			for j := range 4 {
				o := (j0 + min(j, cols-1)) * ldb
				br[j] = b[o : o+k]
			}
			for i0 := 0; i0 < m; i0 += 4 {
				rows := min(4, m-i0)
				for i := range 4 {
					o := (i0 + min(i, rows-1)) * k
					ar[i] = a[o : o+k]
				}
				cOff := i0*ldc + j0
				if rows == 4 && cols == 4 {
					kern.fn(&ar, &br, kFull, c[cOff:cOff+3*ldc+4], ldc, false)
				} else {
					kern.fn(&ar, &br, kFull, tmp[:], 4, false)
					for i := range rows {
						copy(c[cOff+i*ldc:cOff+i*ldc+cols], tmp[4*i:4*i+cols])
					}
				}
				if kFull < k {
					for i := range rows {
						for j := range cols {
							c[cOff+i*ldc+j] += kern.dot(ar[i][kFull:], br[j][kFull:])
						}
					}
				}
			}
		}
	})
}
