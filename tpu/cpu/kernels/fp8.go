package kernels

import (
	"fmt"
	"math"
)

// FP8 weights with block scales, as the Hub's FP8 checkpoints store them
// (quant_method "fp8" with weight_block_size [b0, b1]): B [n, k] one E4M3
// byte a weight (sign, 4 exponent bits of bias 7, 3 mantissa bits,
// subnormals at exponent 0, no infinities, 0x7F and 0xFF NaN) and scales
// [⌈n/b0⌉, ⌈k/b1⌉] f32 (the checkpoint's weight_scale_inv), so that
// B[j, p] = e4m3(b[j, p]) · scales[j/b0, p/b1].
//
// An E4M3 byte is an IEEE half with its bits moved: the sign to bit 15,
// exponent and mantissa to bits 7..13. That half's value is the E4M3 value
// times 2^-8 exactly, subnormals included (both formats' subnormals are
// linear, and the half's exponent bias is 8 more). Moved to bits 31 and
// 20..26 instead, it is an IEEE single whose value is the E4M3 value times
// 2^-120 exactly (the single's bias is 120 more; E4M3's subnormals become
// the single's). The GEMV kernels widen that way (VPMOVSXBD, a shift, a
// mask: three integer ops, no conversion) against activations lifted by
// fp8Lift = 2^64, so that no product of realistic size leaves the
// singles' normal range, and scale the sums by 2^56; the GEMM's widening
// goes through the half (VPMOVSXBW, a shift, a mask, VCVTPH2PS) with 2^8
// folded into the scales. Both scalings are powers of two, so both are
// exact. The Go fallback reads a 256-entry table. A NaN byte is NaN in the
// table and 480·scale in the vector kernels: checkpoints hold none, and
// the loader refuses to hold a weight in FP8 that has any.
//
// The GEMV multiplies the activations by each block's scale (and fp8Lift)
// once per block of b0 rows, then runs a plain FP8 dot over those rows;
// the GEMM widens blocks of B into the NT driver's f32 scratch
// (gemm_nt.go).

// fp8Lift is the factor gemvRowsFP8's activations carry (above).
const fp8Lift = 0x1p64

// fp8Values are the E4M3 values of the 256 bytes.
var fp8Values = func() (t [256]float32) {
	for b := range t {
		e, m := (b>>3)&15, float64(b&7)
		v := (1 + m/8) * math.Ldexp(1, e-7)
		if e == 0 {
			v = m / 8 * math.Ldexp(1, -6)
		}
		if b&0x80 != 0 {
			v = -v
		}
		if b&0x7f == 0x7f {
			v = math.NaN() // either sign: the same NaN, as the loader decodes it
		}
		t[b] = float32(v)
	}
	return t
}()

// FP8Value is the E4M3 value of byte b.
func FP8Value(b byte) float32 { return fp8Values[b] }

// checkFP8 checks an FP8 matrix of n rows of k values (stride ldb) and its
// scales in blocks of b0×b1.
func checkFP8(name string, n, k, ldb, nb, b0, b1, ns int) {
	if b0 <= 0 || b1 <= 0 {
		panic(fmt.Sprintf("kernels: %s: block %dx%d", name, b0, b1))
	}
	checkMat(name+" B", n, k, ldb, nb)
	if need := ((n + b0 - 1) / b0) * ((k + b1 - 1) / b1); ns < need {
		panic(fmt.Sprintf("kernels: %s: %d scales, need %d (n=%d, k=%d in blocks of %dx%d)", name, ns, need, n, k, b0, b1))
	}
}

// GemmFP8NT is GemmF32NT with an FP8 B (above): B rows of k bytes, stride
// ldb, and its block scales [⌈n/b0⌉, ⌈k/b1⌉]. C is overwritten. It panics
// if a slice is too short or a block side is not positive.
func GemmFP8NT(m, n, k int, a []float32, lda int, b []byte, ldb int, scales []float32, b0, b1 int, c []float32, ldc int) {
	checkMat("GemmFP8NT A", m, k, lda, len(a))
	checkMat("GemmFP8NT C", m, n, ldc, len(c))
	checkFP8("GemmFP8NT", n, k, ldb, len(b), b0, b1, len(scales))
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	sc := (k + b1 - 1) / b1
	if m == 1 {
		gemvFP8(n, k, a[:k], b, ldb, scales, sc, b0, b1, c)
		return
	}
	if smallMFP8(m, n, k, a, lda, b, ldb, scales, sc, b0, b1, c, ldc) {
		return
	}
	gemmNT(m, n, k, a, lda, nil, 0, convFP8(b, ldb, scales, sc, b0, b1), c, ldc)
}

// gemvFP8 is GemmFP8NT at m = 1. Each worker walks its rows by blocks of
// b0: the activations times the block row's scales (as[p] = a[p]·s[p/b1])
// once, then the plain dot over the block's rows. With one scale a row
// (one block across k: per-channel and per-tensor scales) the dots are
// scaled instead.
func gemvFP8(n, k int, a []float32, b []byte, ldb int, scales []float32, sc, b0, b1 int, c []float32) {
	if sc == 1 {
		buf, as := f32Scratch(k)
		copy(as, a)
		scaleInPlace(as, fp8Lift)
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRowsFP8(as, b[lo*ldb:], ldb, c[lo:hi])
			for j := lo; j < hi; j++ {
				c[j] *= scales[j/b0]
			}
		})
		f32Pool.Put(buf)
		return
	}
	Parallel(n, gemvGrain(k), func(lo, hi int) {
		buf, as := f32Scratch(k)
		for j := lo; j < hi; {
			jb := j / b0
			end := min(hi, (jb+1)*b0)
			s := scales[jb*sc : jb*sc+sc]
			copy(as, a)
			for q, v := range s {
				scaleInPlace(as[q*b1:min(k, (q+1)*b1)], v*fp8Lift)
			}
			gemvRowsFP8(as, b[j*ldb:], ldb, c[j:end])
			j = end
		}
		f32Pool.Put(buf)
	})
}

// convFP8 widens blocks of an FP8 B for the NT driver, scaled.
func convFP8(b []byte, ldb int, scales []float32, sc, b0, b1 int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			row := b[(j0+j)*ldb:]
			s := scales[((j0+j)/b0)*sc:]
			d := dst[j*kc : j*kc+kc]
			for p := 0; p < kc; { // the scale blocks that overlap [p0, p0+kc)
				q := (p0 + p) / b1
				end := min(kc, (q+1)*b1-p0)
				widenFP8(d[p:end], row[p0+p:p0+end], s[q])
				p = end
			}
		}
	}
}

// gemvRowsFP8Generic is gemvRowsFP8 (a lifted by fp8Lift) by the table.
func gemvRowsFP8Generic(a []float32, b []byte, ldb int, c []float32) {
	for j := range c {
		c[j] = dotFP8(a, b[j*ldb:j*ldb+len(a)]) / fp8Lift
	}
}

func dotFP8(a []float32, b []byte) float32 {
	var s float32
	for p, v := range b[:len(a)] {
		s += a[p] * fp8Values[v]
	}
	return s
}

func widenFP8Generic(dst []float32, src []byte, s float32) {
	for i, v := range src[:len(dst)] {
		dst[i] = fp8Values[v] * s
	}
}
