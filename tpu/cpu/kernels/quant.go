package kernels

import (
	"fmt"
	"math"
)

// QuantizeInt8 computes symmetric weight-only int8 quantisation of w, an f32
// matrix [n, k] (row-major, no padding), in groups of groupSize consecutive
// input columns: scale = max|w| / 127 over the group, q = round(w / scale)
// clamped to [-127, 127]. It returns q [n, k] and scales [n, k/groupSize],
// the layout GemmInt8NT reads. groupSize == k gives one scale per output
// channel. An all-zero group gets scale 0 and zero weights; NaN weights
// quantise to 0. It panics if groupSize does not divide k or w is too short.
func QuantizeInt8(w []float32, n, k, groupSize int) (q []int8, scales []float32) {
	if n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels: QuantizeInt8: negative shape %dx%d", n, k))
	}
	if k == 0 {
		return []int8{}, []float32{}
	}
	if groupSize <= 0 || k%groupSize != 0 {
		panic(fmt.Sprintf("kernels: QuantizeInt8: group size %d does not divide k=%d", groupSize, k))
	}
	checkMat("QuantizeInt8 w", n, k, k, len(w))
	ng := k / groupSize
	q = make([]int8, n*k)
	scales = make([]float32, n*ng)
	Parallel(n, max(1, 65536/k), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			for g := 0; g < ng; g++ {
				src := w[j*k+g*groupSize : j*k+(g+1)*groupSize]
				dst := q[j*k+g*groupSize : j*k+(g+1)*groupSize]
				var amax float32
				for _, v := range src {
					// |v| by clearing the sign bit; NaN fails both
					// comparisons and +Inf the second.
					a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
					if a > amax && a <= math.MaxFloat32 {
						amax = a
					}
				}
				if amax == 0 {
					continue
				}
				s := amax / 127
				scales[j*ng+g] = s
				inv := 1 / s
				for i, v := range src {
					dst[i] = roundClamp127(v * inv)
				}
			}
		}
	})
	return q, scales
}

// roundClamp127 rounds x to the nearest integer, halves away from zero (as
// math.Round), clamps it to [-127, 127] and maps NaN to 0.
func roundClamp127(x float32) int8 {
	switch {
	case x >= 127:
		return 127
	case x <= -127:
		return -127
	case x != x:
		return 0
	}
	return int8(math.Round(float64(x)))
}
