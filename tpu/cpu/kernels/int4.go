package kernels

import (
	"fmt"
	"math"
)

// Int4 weights (--quantize int4), a nibble format (nibble.go): B [n, k]
// is held as packed, n rows of k/2 bytes, two signed 4-bit values a byte
// (the low nibble first, value = nibble − 8, so -8..7), and codes, n rows
// of k/32 bytes, one per block of 32 values, each an index into the
// matrix's own table of 256 f32 scales:
//
//	B[j, p] = (nibble − 8) · table[codes[j, p/32]]
//
// The table is geometric between the smallest and largest scale the
// matrix's blocks want (Int4Table), entry 0 is zero (all-zero blocks), and
// QuantizeInt4 picks each block's entry by least squared error. A weight
// takes 17/32 of a byte (as MXFP4, a little under llama.cpp's Q4_0 at
// 18/32), plus 1 KiB a matrix.

// Int4Block is the number of values that share one scale code.
const Int4Block = nibbleBlock

// int4LUT and int4Pairs are the format's values: a nibble's, and a
// byte's two (low nibble first).
var (
	int4LUT   = [16]int8{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	int4Vals  = lutValues(&int4LUT)
	int4Pairs [256][2]float32
)

func init() {
	for b := range int4Pairs {
		int4Pairs[b] = [2]float32{float32(b&15) - 8, float32(b>>4) - 8}
	}
}

// int4Code is the nibble format of a matrix with scale table table.
func int4Code(table []float32) *nibbleCode {
	t := table[:256]
	return &nibbleCode{lut: &int4LUT, vals: int4Vals, half: t, pairs: &int4Pairs, scale: t}
}

// int4Span is the widest ratio between a table's largest and smallest
// nonzero entries: blocks whose largest magnitude is below 1/int4Span of
// the matrix's largest take the smallest entry (their values are then
// quantised coarsely, and are that small against the rest). 2^12 keeps
// consecutive entries 3.3% apart.
const int4Span = 1 << 12

// Int4Range returns the smallest nonzero and the largest of the blocks'
// largest magnitudes over w, an f32 matrix [n, k] (row-major, no padding;
// k a multiple of 32), ignoring NaN and ±Inf; both are 0 for a matrix of
// zeros. Ranges of several parts of one matrix combine by min and max
// (MergeInt4Range).
func Int4Range(w []float32, n, k int) (lo, hi float32) {
	checkInt4Shape("Int4Range", w, n, k)
	for q := 0; q < n*k/Int4Block; q++ {
		a := amax(w[q*Int4Block : (q+1)*Int4Block])
		if a == 0 {
			continue
		}
		if lo == 0 || a < lo {
			lo = a
		}
		hi = max(hi, a)
	}
	return lo, hi
}

// MergeInt4Range combines two ranges from Int4Range.
func MergeInt4Range(lo1, hi1, lo2, hi2 float32) (lo, hi float32) {
	switch {
	case lo1 == 0:
		lo = lo2
	case lo2 == 0:
		lo = lo1
	default:
		lo = min(lo1, lo2)
	}
	return lo, max(hi1, hi2)
}

// Int4Table is the scale table for a matrix whose blocks' largest
// magnitudes range over [lo, hi] (Int4Range): entry 0 is 0, and entries 1
// to 255 rise geometrically from lo/8 (a block of lo maps its extreme
// to -8) to hi/7 (a block of hi maps its extreme to 7), the ratio capped
// at int4Span.
func Int4Table(lo, hi float32) []float32 {
	t := make([]float32, 256)
	if hi == 0 || math.IsNaN(float64(hi)) {
		return t
	}
	top := float64(hi) / 7
	bottom := max(float64(lo)/8, top/int4Span)
	r := math.Log(top / bottom)
	for i := 1; i < 256; i++ {
		t[i] = float32(bottom * math.Exp(r*float64(i-1)/254))
	}
	return t
}

// QuantizeInt4 quantises w, an f32 matrix [n, k] (k a multiple of 32),
// with scale table table (Int4Table over w's range) into packed [n·k/2]
// and codes [n·k/32], GemmInt4NT's layout. Each block takes, among up to
// five of the table's entries between its largest magnitude over 8 and
// over 7, the one whose rounded values (clamped to -8..7) are nearest the
// block in squared error. NaN weights quantise to 0, ±Inf to the
// extremes. It panics on a bad shape or a table not of 256 entries.
func QuantizeInt4(w []float32, n, k int, table []float32) (packed, codes []byte) {
	checkInt4Shape("QuantizeInt4", w, n, k)
	if len(table) != 256 {
		panic(fmt.Sprintf("kernels: QuantizeInt4: table of %d entries, want 256", len(table)))
	}
	nb := n * k / Int4Block
	packed = make([]byte, n*k/2)
	codes = make([]byte, nb)
	Parallel(nb, max(1, 4096/Int4Block), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			src := (*[Int4Block]float32)(w[q*Int4Block:])
			codes[q] = int4Choose(src, table)
			inv := float32(0)
			if s := table[codes[q]]; s != 0 {
				inv = 1 / s
			}
			dst := packed[q*Int4Block/2 : (q+1)*Int4Block/2]
			for i := range dst {
				dst[i] = byte(int4RoundInv(src[2*i], inv)+8) | byte(int4RoundInv(src[2*i+1], inv)+8)<<4
			}
		}
	})
	return packed, codes
}

// int4Choose picks block x's table entry: the best of up to five entries
// spread from its largest magnitude over 8 (the extreme maps to -8) to
// over 7 (it maps to ±7); 0 for a block of zeros. NaN values count for
// nothing, and ±Inf alike for every entry.
func int4Choose(x *[Int4Block]float32, table []float32) byte {
	a := amax(x[:])
	if a == 0 || table[255] == 0 {
		return 0
	}
	// The first entries at or above a/8 and a/7, by bisection (the table
	// rises), one lower for the first.
	first := func(v float32) int { return 1 + sortSearch(255, func(i int) bool { return table[1+i] >= v }) }
	lo, hi := max(1, first(a/8)-1), min(255, first(a/7))
	step := max(1, (hi-lo+3)/4) // up to five entries
	best, bestErr := byte(0), float32(math.Inf(1))
	for c := lo; c <= hi; c += step {
		s := table[c]
		inv := 1 / s
		var e float32
		for _, v := range x {
			d := v - int4Rounded(v, inv)*s
			if d-d == 0 { // finite (not NaN, not ±Inf)
				e += d * d
			}
		}
		if e < bestErr {
			best, bestErr = byte(c), e
		}
	}
	return best
}

// int4Magic is 1.5·2^23: adding and subtracting it rounds an f32 of
// magnitude below 2^22 to an integer (halves to even), without a branch.
const int4Magic = 12582912

// int4Rounded is v·inv clamped to -8..7 and rounded (halves to even), as
// an f32; NaN stays NaN.
func int4Rounded(v, inv float32) float32 {
	x := min(max(v*inv, -8), 7)
	return (x + int4Magic) - int4Magic
}

// sortSearch is sort.Search without the import: the smallest i in [0, n)
// with f(i), or n.
func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// int4Round is v/s clamped to -8..7 and rounded (halves to even); NaN
// and a zero scale give 0.
func int4Round(v, s float32) int {
	if s == 0 {
		return 0
	}
	return int4RoundInv(v, 1/s)
}

// int4RoundInv is v·inv clamped to -8..7 and rounded (halves to even);
// NaN gives 0.
func int4RoundInv(v, inv float32) int {
	r := int4Rounded(v, inv)
	if r != r {
		return 0
	}
	return int(r)
}

// amax is the largest finite magnitude in x (0 if none).
func amax(x []float32) float32 {
	var m float32
	for _, v := range x {
		a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
		if a > m && a <= math.MaxFloat32 {
			m = a
		}
	}
	return m
}

func checkInt4Shape(name string, w []float32, n, k int) {
	if n < 0 || k < 0 || k%Int4Block != 0 {
		panic(fmt.Sprintf("kernels: %s: shape %dx%d: want k a multiple of %d", name, n, k, Int4Block))
	}
	checkMat(name+" w", n, k, k, len(w))
}

// DequantizeInt4 decodes an int4 matrix [n, k] (packed, codes, table as
// GemmInt4NT takes them) into f32.
func DequantizeInt4(n, k int, packed, codes []byte, table []float32) []float32 {
	checkNibbles("DequantizeInt4", n, k, len(packed), len(codes))
	checkInt4Table("DequantizeInt4", table)
	out := make([]float32, n*k)
	widenNibblesGeneric(int4Code(table), out, packed, codes)
	return out
}

func checkInt4Table(name string, table []float32) {
	if len(table) != 256 {
		panic(fmt.Sprintf("kernels: %s: table of %d entries, want 256", name, len(table)))
	}
}

// GemmInt4NT is GemmF32NT with an int4 B (packed and codes as above, rows
// contiguous, and the matrix's 256-entry scale table). C is overwritten.
// It panics if k is not a multiple of 32, a slice is too short or the
// table is not 256 entries.
func GemmInt4NT(m, n, k int, a []float32, lda int, packed, codes []byte, table []float32, c []float32, ldc int) {
	checkMat("GemmInt4NT A", m, k, lda, len(a))
	checkMat("GemmInt4NT C", m, n, ldc, len(c))
	checkNibbles("GemmInt4NT", n, k, len(packed), len(codes))
	checkInt4Table("GemmInt4NT", table)
	gemmNibbles(int4Code(table), m, n, k, a, lda, packed, codes, c, ldc)
}
