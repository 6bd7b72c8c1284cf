package kernels

import (
	"fmt"
	"math"
)

// rowGrain is the fewest elements a row-kernel worker takes.
const rowGrain = 32768

// RMSNorm writes dst[r,:] = x[r,:] / sqrt(mean(x[r,:]²) + eps) · w for each of
// rows rows of cols columns (contiguous, stride cols). With addOne the scale
// is (1 + w), Gemma's convention. Sums are in f32 over a SIMD tree. dst may be
// x. It panics if a slice is too short.
func RMSNorm(dst, x, w []float32, rows, cols int, eps float32, addOne bool) {
	checkMat("RMSNorm x", rows, cols, cols, len(x))
	checkMat("RMSNorm dst", rows, cols, cols, len(dst))
	checkMat("RMSNorm w", 1, cols, cols, len(w))
	if rows == 0 || cols == 0 {
		return
	}
	w = w[:cols]
	var ws []float32
	if addOne {
		ws = make([]float32, cols)
		for i, v := range w {
			ws[i] = 1 + v
		}
	} else {
		ws = w
	}
	Parallel(rows, max(1, rowGrain/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*cols : r*cols+cols]
			ss := sumSquares(xr)
			inv := float32(1 / math.Sqrt(float64(ss/float32(cols)+eps)))
			scaleMul(dst[r*cols:r*cols+cols], xr, ws, inv)
		}
	})
}

// SoftmaxRows replaces each of rows rows of cols columns of x (contiguous)
// with its softmax, computed stably (max subtracted first). A row whose
// entries are all -Inf becomes all zeros rather than NaN (a fully masked
// attention row). It panics if x is too short.
func SoftmaxRows(x []float32, rows, cols int) {
	checkMat("SoftmaxRows x", rows, cols, cols, len(x))
	if rows == 0 || cols == 0 {
		return
	}
	Parallel(rows, max(1, rowGrain/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(x[r*cols : r*cols+cols])
		}
	})
}

// MaskedBias is the bias at or below which an attention slot counts as
// masked: pipeline/nn's masks add -1e30, and transformers' the dtype's
// lowest value. Its probability is 0 in exact arithmetic and at most
// 2⁻¹⁴⁹ from the exp kernels (clamped at -103) for any score under 10²⁹
// in magnitude, below f32's resolution of any sum it could join.
const MaskedBias = float32(-1e30)

// VisibleSpan returns the span [lo, hi) of bias row b between its first
// and last entries above MaskedBias; lo == hi when every entry is masked.
// It reads only the masked ends and one entry each side.
func VisibleSpan(b []float32) (lo, hi int) {
	for lo < len(b) && b[lo] <= MaskedBias {
		lo++
	}
	hi = len(b)
	for hi > lo && b[hi-1] <= MaskedBias {
		hi--
	}
	return lo, hi
}

// SoftmaxScaleBiasRows is SoftmaxRows of x·scale + bias: row r of dst
// (rows rows of cols columns, contiguous) becomes the softmax of
// x[r]·scale + bias[biasOff[r] : biasOff[r]+cols], each product rounded to
// f32 before the sum, as a multiplication followed by an addition would
// round them (attention's scaled, masked scores). The masked entries at
// either end of a bias row (VisibleSpan) get probability 0 and their x is
// not read: a decode step's row sees [pad, next) of the cache, and the
// rest is neither read nor summed (the sum starts at the span, so a row
// whose sequence starts at slot p sums as one starting at slot 0 would).
// dst may be x. It panics if a slice is too short.
func SoftmaxScaleBiasRows(dst, x []float32, rows, cols int, scale float32, bias []float32, biasOff []int) {
	checkMat("SoftmaxScaleBiasRows dst", rows, cols, cols, len(dst))
	checkMat("SoftmaxScaleBiasRows x", rows, cols, cols, len(x))
	if len(biasOff) < rows {
		panic(fmt.Sprintf("kernels: SoftmaxScaleBiasRows: %d bias offsets for %d rows", len(biasOff), rows))
	}
	if rows == 0 || cols == 0 {
		return
	}
	Parallel(rows, max(1, rowGrain/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			d, xr := dst[r*cols:r*cols+cols], x[r*cols:r*cols+cols]
			br := bias[biasOff[r] : biasOff[r]+cols]
			vlo, vhi := VisibleSpan(br)
			if vlo == vhi { // all masked: as the full row would be, uniform
				vlo, vhi = 0, cols
			}
			clear(d[:vlo])
			clear(d[vhi:])
			d, xr, br = d[vlo:vhi], xr[vlo:vhi], br[vlo:vhi]
			if &d[0] != &xr[0] {
				copy(d, xr)
			}
			scaleInPlace(d, scale)
			addInPlace(d, br)
			softmaxRow(d)
		}
	})
}

func softmaxRow(xr []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range xr {
		if v > mx {
			mx = v
		}
	}
	if math.IsInf(float64(mx), -1) {
		clear(xr)
		return
	}
	s := expSubSum(xr, mx)
	inv := 1 / s
	scaleInPlace(xr, inv)
}

// SiLUMul writes dst[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^-g),
// over len(dst) elements: the SwiGLU step of a gated MLP in one pass. dst may
// alias gate or up. It panics if gate or up is shorter than dst.
func SiLUMul(dst, gate, up []float32) {
	if len(gate) < len(dst) || len(up) < len(dst) {
		panic(fmt.Sprintf("kernels: SiLUMul: dst %d, gate %d, up %d elements", len(dst), len(gate), len(up)))
	}
	n := len(dst)
	Parallel(n, rowGrain, func(lo, hi int) {
		siluMul(dst[lo:hi], gate[lo:hi], up[lo:hi])
	})
}

// AddInPlace does dst[i] += x[i] over len(dst) elements: the residual add.
// It panics if x is shorter than dst.
func AddInPlace(dst, x []float32) {
	if len(x) < len(dst) {
		panic(fmt.Sprintf("kernels: AddInPlace: dst %d, x %d elements", len(dst), len(x)))
	}
	n := len(dst)
	Parallel(n, 4*rowGrain, func(lo, hi int) {
		addInPlace(dst[lo:hi], x[lo:hi])
	})
}

// Portable row helpers.

func sumSquaresGeneric(x []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * x[i]
		s1 += x[i+1] * x[i+1]
		s2 += x[i+2] * x[i+2]
		s3 += x[i+3] * x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func scaleMulGeneric(dst, x, w []float32, s float32) {
	x = x[:len(dst)]
	w = w[:len(dst)]
	for i := range dst {
		dst[i] = x[i] * s * w[i]
	}
}

func scaleInPlaceGeneric(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func expSubSumGeneric(x []float32, mx float32) float32 {
	var s float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - mx)))
		x[i] = e
		s += e
	}
	return s
}

func siluMulGeneric(dst, gate, up []float32) {
	gate = gate[:len(dst)]
	up = up[:len(dst)]
	for i := range dst {
		g := gate[i]
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

func addInPlaceGeneric(dst, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += x[i]
	}
}
