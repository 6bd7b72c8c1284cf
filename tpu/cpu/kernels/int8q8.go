package kernels

import (
	"sync"
)

// Int8 weights with int8 activations (the CPU engine's opt-in "int8
// activations" with --quantize int8). A's rows are quantised per block of
// 32 as for int4 weights (int4q8.go: s = max|a|/127, q = round(a/s)). A
// weight group of 64 (lm.QuantGroup) then covers two activation blocks,
// and its product is, in integers, Σ w·q per block: with AVX512-VNNI one
// VPDPBUSD a group. VPDPBUSD multiplies unsigned by signed bytes, so the
// weights go in as w+128 (a XOR of the sign bit); the lanes are converted
// to f32, scaled by their block's activation scale and summed into the row
// scaled by the group's weight scale. What the offset adds to a lane, 128
// times its four activations, is the same for every row: each lane's
// scaled lanes start from minus that times its scale (q8Lanes.sc), one
// FMA.
// Without VNNI, for other group sizes, or beyond q8VNNIMaxM rows, A is
// quantised and dequantised and the f32 kernel runs on it: the same
// activations, so the same results up to the order of f32 sums.

// q8Lanes is one row of A quantised for dotInt8Q8VNNI: q in the row's
// order, and per 64 values 32 floats sc: the 16 VPDPBUSD lanes' scales
// (each block's in its eight lanes), then the lanes' corrections, −128
// times the lane's scale times the sum of its four activations.
type q8Lanes struct {
	q  []int8
	sc []float32
}

var q8LanesPool = sync.Pool{New: func() any { return new(q8Lanes) }}

// quantize quantises a (len a multiple of 64) into r.
func (r *q8Lanes) quantize(a []float32) {
	k := len(a)
	if cap(r.q) < k {
		r.q, r.sc = make([]int8, k), make([]float32, k/2)
	}
	r.q, r.sc = r.q[:k], r.sc[:k/2]
	for b := 0; b < k/32; b++ {
		src := a[32*b : 32*b+32]
		s := q8Scale(src)
		inv := q8Inverse(s)
		g, h := b/2, b%2 // group, and which half of its lanes
		for l := 0; l < 8; l++ {
			var sum int32
			for i := 4 * l; i < 4*l+4; i++ {
				q := q8Round(src[i], inv)
				r.q[32*b+i] = q
				sum += int32(q)
			}
			r.sc[32*g+8*h+l] = s
			r.sc[32*g+16+8*h+l] = -128 * float32(sum) * s
		}
	}
}

// GemmInt8Q8NT is GemmInt8NT with A's rows quantised to int8 per block of
// 32 (above). C is overwritten. It panics as GemmInt8NT does.
func GemmInt8Q8NT(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, groupSize int, c []float32, ldc int) {
	checkMat("GemmInt8Q8NT A", m, k, lda, len(a))
	checkMat("GemmInt8Q8NT B", n, k, ldb, len(b))
	checkMat("GemmInt8Q8NT C", m, n, ldc, len(c))
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	ng := checkGroups("GemmInt8Q8NT", n, k, groupSize, len(scales))
	if hasVNNI() && groupSize == 64 && m <= q8VNNIMaxM {
		r := q8LanesPool.Get().(*q8Lanes)
		for i := 0; i < m; i++ {
			r.quantize(a[i*lda : i*lda+k])
			ci := c[i*ldc : i*ldc+n]
			Parallel(n, gemvGrain(k), func(lo, hi int) {
				dotInt8Q8(r, b[lo*ldb:], ldb, scales[lo*ng:], ng, ci[lo:hi])
			})
		}
		q8LanesPool.Put(r)
		return
	}
	aq := make([]float32, m*k)
	fakeQuantizeRows(aq, a, lda, m, k)
	GemmInt8NT(m, n, k, aq, k, b, ldb, scales, groupSize, c, ldc)
}

// fakeQuantizeRows copies m rows of k values of a (stride lda) into aq
// (stride k), each quantised and dequantised per block of 32
// (FakeQuantizeQ8); k a multiple of 32.
func fakeQuantizeRows(aq, a []float32, lda, m, k int) {
	Parallel(m, max(1, 8192/k), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := aq[i*k : (i+1)*k]
			copy(row, a[i*lda:i*lda+k])
			FakeQuantizeQ8(row)
		}
	})
}
