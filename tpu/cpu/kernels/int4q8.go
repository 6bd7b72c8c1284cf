package kernels

import (
	"fmt"
	"math"
	"sync"
)

// Int4 weights with int8 activations (the CPU engine's opt-in
// "int8 activations"). Each row of A is quantised per block of 32 values
// as llama.cpp quantises activations for its integer dot products:
// s = max|a|/127, q = round(a·(1/s)) (halves away from zero), so that
// a ≈ q·s. A block's product with an int4 block is then exact in
// integers, Σ (nibble − 8)·q, and scaled once in f32 by the weight's
// scale times s. With AVX512-VNNI (VPDPBUSD) that takes about a third of
// the vector instructions the f32 kernels take; elsewhere, or for more
// than q8VNNIMaxM rows, A is quantised and dequantised (q·s in f32) and the
// f32 kernels run on it: the same activations, so the same results up to
// the order of f32 sums.

// q8VNNIMaxM is the most rows of A the VNNI path takes (one GEMV at one
// row, four rows a pass from two (dotInt4Q8x4VNNI); beyond, the blocked
// f32 GEMM on the dequantised rows decodes B once).
const q8VNNIMaxM = 8

// q8Row is one row of A quantised for dotInt4Q8VNNI, by pairs of blocks
// (A = 2p, B = 2p+1): q holds 64 bytes a pair, A's even values, B's even
// values, A's odd values, B's odd values (the order of the weights' low
// nibbles, then high nibbles, for two blocks); corr 8 dwords a pair, −8
// times the sum of the activations each VPDPBUSD lane multiplies (four
// lanes a block); sa 8 floats a pair, each block's scale in its four
// lanes.
type q8Row struct {
	q    []int8
	corr []int32
	sa   []float32
}

var q8Pool = sync.Pool{New: func() any { return new(q8Row) }}

// quantizeQ8 quantises a (len a multiple of 64) into r.
func (r *q8Row) quantizeQ8(a []float32) {
	k := len(a)
	np := k / 64
	if cap(r.q) < k {
		r.q, r.corr, r.sa = make([]int8, k), make([]int32, 8*np), make([]float32, 8*np)
	}
	r.q, r.corr, r.sa = r.q[:k], r.corr[:8*np], r.sa[:8*np]
	for p := 0; p < np; p++ {
		for h := 0; h < 2; h++ { // block A, then B
			src := a[64*p+32*h : 64*p+32*h+32]
			s := q8Scale(src)
			inv := q8Inverse(s)
			var sum [4]int32
			for i := 0; i < 16; i++ {
				e, o := q8Round(src[2*i], inv), q8Round(src[2*i+1], inv)
				r.q[64*p+16*h+i] = e
				r.q[64*p+32+16*h+i] = o
				sum[i/4] += int32(e) + int32(o)
			}
			for l := 0; l < 4; l++ {
				r.corr[8*p+4*h+l] = -8 * sum[l]
				r.sa[8*p+4*h+l] = s
			}
		}
	}
}

// q8Rows4 is four rows of A quantised for dotInt4Q8x4VNNI: each row a
// q8Row over its share of q, corr and sa, a fixed stride apart (k bytes
// of q, 8 values of corr and sa a pair); out holds the four rows'
// products before they go to C.
type q8Rows4 struct {
	q    []int8
	corr []int32
	sa   []float32
	rows [4]q8Row
	out  []float32
}

var q8x4Pool = sync.Pool{New: func() any { return new(q8Rows4) }}

// quantize quantises rows 1 to 4 of a (stride lda, k values, a multiple
// of 64); rows past m repeat row m−1 (their products are not used).
func (b *q8Rows4) quantize(a []float32, lda, m, k int) {
	np := k / 64
	if cap(b.q) < 4*k {
		b.q, b.corr, b.sa = make([]int8, 4*k), make([]int32, 32*np), make([]float32, 32*np)
	}
	b.q, b.corr, b.sa = b.q[:4*k], b.corr[:32*np], b.sa[:32*np]
	for r := range b.rows {
		row := &b.rows[r]
		row.q, row.corr, row.sa = b.q[r*k:(r+1)*k], b.corr[r*8*np:(r+1)*8*np], b.sa[r*8*np:(r+1)*8*np]
		if r < m {
			row.quantizeQ8(a[r*lda : r*lda+k])
		} else {
			copy(row.q, b.rows[m-1].q)
			copy(row.corr, b.rows[m-1].corr)
			copy(row.sa, b.rows[m-1].sa)
		}
	}
}

// q8Scale is a block's activation scale: its largest finite magnitude
// over 127 (0 for a block of zeros).
func q8Scale(x []float32) float32 { return amax(x) / 127 }

// q8Inverse is 1/s, or 0 for a zero scale (a block of zeros).
func q8Inverse(s float32) float32 {
	if s == 0 {
		return 0
	}
	return 1 / s
}

// q8Round is v·inv rounded (halves away from zero) and clamped to ±127;
// NaN gives 0.
func q8Round(v, inv float32) int8 {
	x := float64(v * inv)
	if x != x { // NaN
		return 0
	}
	x = math.Trunc(x + math.Copysign(0.5, x)) // exact: x has 24 significant bits
	return int8(max(-127, min(127, x)))
}

// FakeQuantizeQ8 replaces each block of 32 values of a (len a multiple of
// 32) by its int8 quantisation times its scale: the activations the int8
// path multiplies.
func FakeQuantizeQ8(a []float32) {
	if len(a)%32 != 0 {
		panic(fmt.Sprintf("kernels: FakeQuantizeQ8: %d values, want a multiple of 32", len(a)))
	}
	for b := 0; b+32 <= len(a); b += 32 {
		x := a[b : b+32]
		s := q8Scale(x)
		inv := q8Inverse(s)
		for i, v := range x {
			x[i] = float32(q8Round(v, inv)) * s
		}
	}
}

// GemmInt4Q8NT is GemmInt4NT with A's rows quantised to int8 per block of
// 32 (above). C is overwritten. It panics as GemmInt4NT does.
func GemmInt4Q8NT(m, n, k int, a []float32, lda int, packed, codes []byte, table []float32, c []float32, ldc int) {
	checkMat("GemmInt4Q8NT A", m, k, lda, len(a))
	checkMat("GemmInt4Q8NT C", m, n, ldc, len(c))
	checkNibbles("GemmInt4Q8NT", n, k, len(packed), len(codes))
	checkInt4Table("GemmInt4Q8NT", table)
	if m == 0 || n == 0 {
		return
	}
	gemmNibblesQ8(int4Code(table), m, n, k, a, lda, packed, codes, c, ldc)
}

// gemmNibblesQ8 is gemmNibbles of an int4 format (one table, or one a
// row) with A's rows quantised to int8 per block of 32: VNNI where it
// runs, else the f32 kernels on the rows quantised and dequantised: it
// returns those rows [m, k] (FakeQuantizeQ8's) where it made them, nil on
// VNNI.
func gemmNibblesQ8(code *nibbleCode, m, n, k int, a []float32, lda int, packed, codes []byte, c []float32, ldc int) (aq []float32) {
	if hasVNNI() && !code.split && code.lut == &int4LUT && k%64 == 0 && k > 0 && m > 1 && m <= q8VNNIMaxM {
		// Rows by fours: each weight row is read once for the four.
		b := q8x4Pool.Get().(*q8Rows4)
		if cap(b.out) < 4*n {
			b.out = make([]float32, 4*n)
		}
		out := b.out[:4*n]
		for i0 := 0; i0 < m; i0 += 4 {
			r := min(4, m-i0)
			b.quantize(a[i0*lda:], lda, r, k)
			Parallel(n, gemvGrain(k), func(lo, hi int) {
				dotInt4Q8x4(b, code, lo, packed[lo*k/2:hi*k/2], codes[lo*k/32:hi*k/32], out[lo:], n, hi-lo)
			})
			for i := 0; i < r; i++ {
				copy(c[(i0+i)*ldc:(i0+i)*ldc+n], out[i*n:(i+1)*n])
			}
		}
		q8x4Pool.Put(b)
		return nil
	}
	if hasVNNI() && !code.split && code.lut == &int4LUT && k%64 == 0 && k > 0 && m <= q8VNNIMaxM {
		r := q8Pool.Get().(*q8Row)
		for i := 0; i < m; i++ {
			r.quantizeQ8(a[i*lda : i*lda+k])
			ci := c[i*ldc : i*ldc+n]
			Parallel(n, gemvGrain(k), func(lo, hi int) {
				dotInt4Q8(r, code, lo, packed[lo*k/2:hi*k/2], codes[lo*k/32:hi*k/32], ci[lo:hi])
			})
		}
		q8Pool.Put(r)
		return nil
	}
	aq = make([]float32, m*k)
	fakeQuantizeRows(aq, a, lda, m, k)
	gemmNibbles(code, m, n, k, aq, k, packed, codes, c, ldc)
	return aq
}
