package kernels

import (
	"math"
	"sync"
)

// bf16ToF32 widens raw bfloat16 bits to float32 (exact).
func bf16ToF32(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// f16ToF32 widens raw IEEE half-precision bits to float32 (exact), including
// subnormals, infinities and NaN.
func f16ToF32(u uint16) float32 {
	sign := uint32(u>>15) << 31
	exp := uint32(u>>10) & 0x1f
	mant := uint32(u) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0: // zero
		return math.Float32frombits(sign)
	}
	// Subnormal: value = mant * 2^-24.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

var (
	f16TableOnce sync.Once
	f16Table     []float32 // all 65536 halves widened, built on first use
)

// f16Lookup returns the widening table (256 KiB), built once on first use by
// the portable packing code.
func f16Lookup() []float32 {
	f16TableOnce.Do(func() {
		t := make([]float32, 1<<16)
		for i := range t {
			t[i] = f16ToF32(uint16(i))
		}
		f16Table = t
	})
	return f16Table
}

// convertGrain is the number of values worth a thread in a conversion.
const convertGrain = 1 << 14

// ToBF16 writes src's values as bfloat16 bits into dst, rounded to nearest
// even (NaN kept quiet, denormals to signed zero, as VCVTNEPS2BF16 rounds
// and as GemmBF16DotNT rounds its activations), over the pool.
func ToBF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	Parallel(len(dst), convertGrain, func(lo, hi int) { roundBF16(dst[lo:hi], src[lo:hi]) })
}

// FromBF16 widens bfloat16 bits to float32 (exact), over the pool.
func FromBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	Parallel(len(dst), convertGrain, func(lo, hi int) { widenBF16(dst[lo:hi], src[lo:hi]) })
}
