package kernels

import (
	"fmt"
	"sync"
)

// Nibble-coded weights: the layout MXFP4 and int4 share. B [n, k] is held
// as n rows of k/2 bytes, two 4-bit codes a byte (the low nibble first),
// and n rows of k/32 one-byte scale codes, one per block of 32 values:
//
//	B[j, p] = value(nibble) · scale(codes[j, p/32])
//
// A format is its two lookup tables (nibbleCode). The kernels decode the
// values in registers (GEMV, the small-m product) or block by block into
// the GEMM's f32 scratch; products and sums are in f32, and the weight is
// never widened in memory.

// nibbleBlock is the number of values that share one scale code.
const nibbleBlock = 32

// nibbleCode is a nibble format's tables, in the two forms the kernels
// use. The assembly looks a nibble up as an int8 (lut) and scales by
// half[code], so lut[v]·half[s] must equal pairs' value times scale[s];
// the portable code reads pairs (a byte's two values, low nibble first)
// and scale. A scale code indexes half and scale, so they hold at least
// as many entries as the largest code (256 for a matrix's own table).
//
// A format with a table per row (grouped int4: each row's own group
// scales, int4groups.go) sets rows: row j's half and scale are then
// rows[j·stride : (j+1)·stride] (at), and the kernels take each row's
// table from there.
//
// A format with split set has two scale codes a block, one per half of
// 16 values (grouped int4 in groups of 16): n rows of k/16 codes, value p
// scaled by codes[j, p/16].
type nibbleCode struct {
	lut   *[16]int8
	vals  *[16]float32 // lut as f32 (the GEMV's lookup)
	half  []float32
	pairs *[256][2]float32
	scale []float32

	rows   []float32
	stride int
	split  bool
}

// codeSpan is the number of values that share a scale code: a block, or
// half of one where the format is split.
func (code *nibbleCode) codeSpan() int {
	if code.split {
		return nibbleBlock / 2
	}
	return nibbleBlock
}

// at is the format of row j: code itself, or with row j's table where
// each row has its own.
func (code *nibbleCode) at(j int) nibbleCode {
	r := *code
	if code.rows != nil {
		r.half = code.rows[j*code.stride : (j+1)*code.stride]
		r.scale = r.half
	}
	return r
}

// rowStride is the bytes from one row's table to the next (0: one table
// for the matrix), as the multi-row GEMV walks them.
func (code *nibbleCode) rowStride() int {
	if code.rows == nil {
		return 0
	}
	return 4 * code.stride
}

// lutValues is lut as f32.
func lutValues(lut *[16]int8) *[16]float32 {
	var v [16]float32
	for i, x := range lut {
		v[i] = float32(x)
	}
	return &v
}

// checkNibbles checks a nibble-coded matrix of n rows of k values.
func checkNibbles(name string, n, k, nBlocks, nScales int) {
	if k%nibbleBlock != 0 {
		panic(fmt.Sprintf("kernels: %s: k=%d is not a multiple of %d", name, k, nibbleBlock))
	}
	if nBlocks < n*k/2 || nScales < n*k/nibbleBlock {
		panic(fmt.Sprintf("kernels: %s: %d bytes of blocks and %d scales, need %d and %d (n=%d, k=%d)", name, nBlocks, nScales, n*k/2, n*k/nibbleBlock, n, k))
	}
}

// gemmNibbles is GemmF32NT with a nibble-coded B of format code (blocks
// and scales with rows contiguous). C is overwritten; the shapes are
// checked by the caller.
func gemmNibbles(code *nibbleCode, m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) {
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	if m == 1 {
		gemvNibbles(code, n, k, a[:k], blocks, scales, c)
		return
	}
	if m <= smallMNibblesMax && smallMNibbles(code, m, n, k, a, lda, blocks, scales, c, ldc) {
		return
	}
	gemmNT(m, n, k, a, lda, nil, 0, convNibbles(code, blocks, scales, k), c, ldc)
}

// smallMNibblesMax is the most rows of A the small-m path takes (an
// expert's few routed rows at batched decode, a short prompt): decoding B
// in registers once per eight rows beats decoding it once into the f32
// scratch only that far (BenchmarkGemmMXFP4 on a 2-core AVX-512 VM: 1.33
// against 1.45 ms at m = 4, 4.6 against 2.4 ms at m = 16).
const smallMNibblesMax = 8

// convNibbles decodes rows [j0, j0+nb), values [p0, p0+kc) of a
// nibble-coded B with k values a row.
func convNibbles(code *nibbleCode, blocks, scales []byte, k int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			rc := code.at(j0 + j)
			row := blocks[(j0+j)*k/2:]
			span := code.codeSpan()
			sc := scales[(j0+j)*k/span:]
			d := dst[j*kc : j*kc+kc]
			if p0%nibbleBlock == 0 && kc%nibbleBlock == 0 { // whole blocks (the usual chunking)
				widenNibbles(&rc, d, row[p0/2:], sc[p0/span:])
				continue
			}
			p := 0
			for ; p < kc && (p0+p)%2 != 0; p++ { // an odd start: one high nibble
				d[p] = rc.pairs[row[(p0+p)/2]][1] * rc.scale[sc[(p0+p)/span]]
			}
			for ; p+1 < kc; p += 2 { // a pair never straddles two codes (spans are even)
				q := p0 + p
				s := rc.scale[sc[q/span]]
				v := &rc.pairs[row[q/2]]
				d[p], d[p+1] = v[0]*s, v[1]*s
			}
			if p < kc {
				q := p0 + p
				d[p] = rc.pairs[row[q/2]][0] * rc.scale[sc[q/span]]
			}
		}
	}
}

// widenNibblesGeneric decodes whole blocks (len(dst)/32 of them) into dst.
func widenNibblesGeneric(code *nibbleCode, dst []float32, blocks, scales []byte) {
	span := code.codeSpan()
	for q := 0; q < len(dst)/span; q++ {
		s := code.scale[scales[q]]
		d := dst[q*span : (q+1)*span]
		for i, b := range blocks[q*span/2 : (q+1)*span/2] {
			v := &code.pairs[b]
			d[2*i], d[2*i+1] = v[0]*s, v[1]*s
		}
	}
}

// gemvRowsNibblesGeneric is gemvRowsNibbles in Go.
func gemvRowsNibblesGeneric(code *nibbleCode, j0 int, a []float32, blocks, scales []byte, c []float32) {
	k := len(a)
	nc := k / code.codeSpan()
	for j := range c {
		rc := code.at(j0 + j)
		c[j] = dotNibbles(&rc, a, blocks[j*k/2:(j+1)*k/2], scales[j*nc:(j+1)*nc])
	}
}

// dotNibbles is Σ_p a[p]·w[p] for one nibble-coded row w (len(scales)
// codes, each of codeSpan values).
func dotNibbles(code *nibbleCode, a []float32, blocks, scales []byte) float32 {
	var sum float32
	span := code.codeSpan()
	for q, s := range scales {
		x := a[q*span : (q+1)*span]
		blk := blocks[q*span/2 : (q+1)*span/2]
		var s0, s1, s2, s3 float32
		for i := 0; i < span/2; i += 2 {
			v, w := &code.pairs[blk[i]], &code.pairs[blk[i+1]]
			s0 += x[2*i] * v[0]
			s1 += x[2*i+1] * v[1]
			s2 += x[2*i+2] * w[0]
			s3 += x[2*i+3] * w[1]
		}
		sum += (s0 + s1 + s2 + s3) * code.scale[s]
	}
	return sum
}

// permuteBlocks writes a's blocks of 32 into dst with each block's even
// values first, then its odd ones: the order of a block's low nibbles,
// then its high ones (the GEMV's layout of the activations).
func permuteBlocks(dst, a []float32) {
	for q := 0; q+nibbleBlock <= len(a); q += nibbleBlock {
		src := (*[nibbleBlock]float32)(a[q:])
		d := (*[nibbleBlock]float32)(dst[q:])
		for i := 0; i < nibbleBlock/2; i++ {
			d[i], d[nibbleBlock/2+i] = src[2*i], src[2*i+1]
		}
	}
}

// f32Pool holds scratch rows of float32 between calls: the GEMV's
// permuted activations, FP8's scaled ones, the quantised rows of int4's
// mins.
var f32Pool = sync.Pool{New: func() any { return new([]float32) }}

// f32Scratch takes a buffer from f32Pool and returns it with its first n
// entries; the caller puts the buffer back.
func f32Scratch(n int) (*[]float32, []float32) {
	buf := f32Pool.Get().(*[]float32)
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	return buf, (*buf)[:n]
}
