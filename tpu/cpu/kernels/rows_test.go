package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(t *testing.T, what string, i int, got float32, want, tol float64) {
	t.Helper()
	if d := math.Abs(float64(got) - want); !(d <= tol) {
		t.Fatalf("%s[%d] = %v, want %v (diff %.3g > %.3g)", what, i, got, want, d, tol)
	}
}

var rowSizes = []int{1, 3, 15, 16, 17, 31, 64, 100, 768, 1001}

func TestRMSNorm(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, cols := range rowSizes {
			for _, addOne := range []bool{false, true} {
				rows := 1 + r.IntN(5)
				x := randMat(r, rows, cols, cols)
				w := randMat(r, 1, cols, cols)
				dst := make([]float32, rows*cols)
				RMSNorm(dst, x, w, rows, cols, 1e-5, addOne)
				for i := 0; i < rows; i++ {
					var ss float64
					for j := 0; j < cols; j++ {
						ss += float64(x[i*cols+j]) * float64(x[i*cols+j])
					}
					inv := 1 / math.Sqrt(ss/float64(cols)+1e-5)
					for j := 0; j < cols; j++ {
						s := float64(w[j])
						if addOne {
							s += 1
						}
						want := float64(x[i*cols+j]) * inv * s
						near(t, "RMSNorm", i*cols+j, dst[i*cols+j], want, 1e-5*(math.Abs(want)+1e-3))
					}
				}
				// In place gives the same.
				RMSNorm(x, x, w, rows, cols, 1e-5, addOne)
				for i := range x {
					if x[i] != dst[i] {
						t.Fatalf("in-place RMSNorm differs at %d", i)
					}
				}
			}
		}
	})
}

func TestSoftmaxRows(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for _, cols := range rowSizes {
			rows := 1 + r.IntN(4)
			x := randMat(r, rows, cols, cols)
			for i := range x {
				x[i] *= 8
			}
			x[0] = float32(math.Inf(-1)) // a masked entry
			ref := append([]float32(nil), x...)
			SoftmaxRows(x, rows, cols)
			for i := 0; i < rows; i++ {
				mx := math.Inf(-1)
				for j := 0; j < cols; j++ {
					mx = math.Max(mx, float64(ref[i*cols+j]))
				}
				var s float64
				for j := 0; j < cols; j++ {
					s += math.Exp(float64(ref[i*cols+j]) - mx)
				}
				for j := 0; j < cols; j++ {
					want := math.Exp(float64(ref[i*cols+j])-mx) / s
					if math.IsInf(mx, -1) {
						want = 0
					}
					near(t, "softmax", i*cols+j, x[i*cols+j], want, 2e-6*want+1e-7)
				}
			}
		}
		// A fully masked row gives zeros, not NaN.
		x := []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}
		SoftmaxRows(x, 1, 2)
		if x[0] != 0 || x[1] != 0 {
			t.Fatalf("masked row: %v, want zeros", x)
		}
	})
}

// TestSoftmaxScaleBiasRows: at every instruction level, each row equals
// SoftmaxRows of the row times the scale plus its bias row (both rounded
// to f32, as the separate ops round them), in a new slice and in place,
// with bias rows shared and out of order.
func TestSoftmaxScaleBiasRows(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		for _, cols := range rowSizes {
			rows := 2 + r.IntN(4)
			x := randMat(r, rows, cols, cols)
			bias := randMat(r, 2, cols, cols)
			bias[1] = -1e30 // masked
			offs := make([]int, rows)
			for i := range offs {
				offs[i] = cols * ((i + 1) % 2)
			}
			const scale = 0.37
			want := make([]float32, len(x))
			for i := range rows {
				for j := range cols {
					want[i*cols+j] = float32(x[i*cols+j]*scale) + bias[offs[i]+j]
				}
			}
			SoftmaxRows(want, rows, cols)
			got := make([]float32, len(x))
			SoftmaxScaleBiasRows(got, x, rows, cols, scale, bias, offs)
			SoftmaxScaleBiasRows(x, x, rows, cols, scale, bias, offs) // in place
			for i := range want {
				if got[i] != want[i] || x[i] != want[i] {
					t.Fatalf("cols %d, element %d: %g (in place %g), want %g", cols, i, got[i], x[i], want[i])
				}
			}
		}
	})
}

// TestSoftmaxScaleBiasRowsSpan: masked entries at a bias row's ends get
// probability exactly 0, and the visible span's values equal the softmax
// of the span alone (a sequence that starts at slot p sums as one that
// starts at slot 0), at every instruction level; a row masked everywhere
// is the full row's softmax. Masked scores are NaN, to show they are
// never read.
func TestSoftmaxScaleBiasRowsSpan(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(17, 18))
		nan := float32(math.NaN())
		for _, cols := range rowSizes {
			for _, span := range [][2]int{{0, cols}, {cols / 3, cols}, {0, (cols + 1) / 2}, {cols / 4, cols - cols/4}, {0, 0}} {
				lo, hi := span[0], span[1]
				if lo >= hi && !(lo == 0 && hi == 0) {
					continue
				}
				x := randMat(r, 1, cols, cols)
				bias := randMat(r, 1, cols, cols)
				for j := range cols {
					if j < lo || j >= hi {
						bias[j] = MaskedBias
						if hi > lo {
							x[j] = nan
						}
					}
				}
				if lo+1 < hi-1 {
					bias[lo+1] = -1e30 // masked inside the span: computed, not skipped
				}
				if gl, gh := VisibleSpan(bias); hi > lo && (gl != lo || gh != hi) {
					t.Fatalf("cols %d: VisibleSpan %d..%d, want %d..%d", cols, gl, gh, lo, hi)
				}
				const scale = 0.37
				if hi == lo { // all masked: the whole row, as SoftmaxRows gives it
					lo, hi = 0, cols
				}
				want := make([]float32, hi-lo)
				for j := range want {
					want[j] = float32(x[lo+j]*scale) + bias[lo+j]
				}
				SoftmaxRows(want, 1, hi-lo)
				got := make([]float32, cols)
				for j := range got {
					got[j] = 7 // recycled memory
				}
				SoftmaxScaleBiasRows(got, x, 1, cols, scale, bias, []int{0})
				for j := range cols {
					w := float32(0)
					if j >= lo && j < hi {
						w = want[j-lo]
					}
					if got[j] != w {
						t.Fatalf("cols %d, span %v, element %d: %g, want %g", cols, span, j, got[j], w)
					}
				}
			}
		}
	})
}

func TestSiLUMulAndAdd(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		for _, n := range append(rowSizes, 100003) {
			g := randMat(r, 1, n, n)
			u := randMat(r, 1, n, n)
			for i := range g {
				g[i] *= 6
			}
			g[0] = -100 // exp overflow range
			if n > 1 {
				g[1] = 100
			}
			dst := make([]float32, n)
			SiLUMul(dst, g, u)
			for i := range dst {
				gv := float64(g[i])
				want := gv / (1 + math.Exp(-gv)) * float64(u[i])
				near(t, "SiLUMul", i, dst[i], want, 2e-6*math.Abs(want)+1e-30)
			}
			ref := append([]float32(nil), dst...)
			AddInPlace(dst, u)
			for i := range dst {
				if dst[i] != ref[i]+u[i] {
					t.Fatalf("AddInPlace[%d] = %v, want %v", i, dst[i], ref[i]+u[i])
				}
			}
		}
	})
}
