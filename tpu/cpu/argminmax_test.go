package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// refArgRows is the former argRows, kept as the reference: for each row
// the index of the first extreme value, a NaN winning (the first one).
func refArgRows[T number](idx []int64, x []T, rows, cols int, isMin bool) {
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		best := 0
		for i := 1; i < len(row); i++ {
			v, b := row[i], row[best]
			if b != b {
				break
			}
			if v != v || (isMin && v < b) || (!isMin && v > b) {
				best = i
			}
		}
		idx[r] = int64(best)
	}
}

// argCols are the row lengths tried: small and odd ones around the
// unrolling, and long ones around the parallel and segment thresholds.
var argCols = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 31, 33, 64, 100, 1023,
	8191, 8192, 8193, 16383, 16384, 16385, 24575, 32000, 32767, 32768, 32769, 49152, 65535, 65537, 69999, 70000}

// argFill fills x with values of one of several kinds (mode), then puts
// ties to the extremes, infinities and NaNs (floats only) at random places.
func argFill[T number](r *rand.Rand, x []T, mode int) {
	var z T
	_, isFloat := any(z).(float32)
	if _, ok := any(z).(float64); ok {
		isFloat = true
	}
	n := len(x)
	if n == 0 {
		return
	}
	switch mode % 6 {
	case 0: // spread values
		for i := range x {
			x[i] = T(r.NormFloat64() * 1000)
		}
	case 1: // few distinct values: many ties
		for i := range x {
			x[i] = T(r.IntN(5) - 2)
		}
	case 2: // increasing (every element a new max)
		for i := range x {
			x[i] = T(i / 3)
		}
	case 3: // decreasing (every element a new min)
		for i := range x {
			x[i] = T(-i / 3)
		}
	case 4: // constant
		c := T(r.IntN(7) - 3)
		for i := range x {
			x[i] = c
		}
	case 5: // ±0 for floats, small values for integers
		for i := range x {
			x[i] = 0
			if isFloat && r.IntN(2) == 0 {
				x[i] = any(negZero[T]()).(T)
			}
		}
	}
	// Ties: copy the extremes to a few random places.
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	for range r.IntN(4) {
		x[r.IntN(n)] = hi
		x[r.IntN(n)] = lo
	}
	if !isFloat {
		if r.IntN(4) == 0 {
			x[r.IntN(n)] = highest[T]()
			x[r.IntN(n)] = lowest[T]()
		}
		return
	}
	if r.IntN(3) == 0 {
		for range 1 + r.IntN(3) {
			x[r.IntN(n)] = highest[T]()
			x[r.IntN(n)] = lowest[T]()
		}
	}
	switch r.IntN(5) {
	case 0: // one NaN
		x[r.IntN(n)] = nanOf[T]()
	case 1: // several NaNs: the first must win
		for range 2 + r.IntN(3) {
			x[r.IntN(n)] = nanOf[T]()
		}
	case 2: // NaN at an end
		if r.IntN(2) == 0 {
			x[0] = nanOf[T]()
		} else {
			x[n-1] = nanOf[T]()
		}
	}
}

func nanOf[T number]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(float32(math.NaN())).(T)
	case float64:
		return any(math.NaN()).(T)
	}
	panic("no NaN")
}

func negZero[T number]() any {
	var z T
	switch any(z).(type) {
	case float32:
		return float32(math.Copysign(0, -1))
	case float64:
		return math.Copysign(0, -1)
	}
	return z
}

// checkArgRows compares argRows with refArgRows on random [rows, cols]
// inputs of every fill mode, for max and min.
func checkArgRows[T number](t *testing.T, r *rand.Rand, name string) {
	t.Helper()
	for _, cols := range append(argCols, r.IntN(70000)+1, r.IntN(200)+1) {
		for rows := 1; rows <= 9; rows++ {
			if cols > 20000 && rows%3 != 1 && rows != 2 && rows != 8 {
				continue // keep the long rows' cases few
			}
			x := make([]T, rows*cols)
			for mode := range 6 {
				for rr := range rows {
					argFill(r, x[rr*cols:(rr+1)*cols], mode+rr)
				}
				for _, isMin := range []bool{false, true} {
					want := make([]int64, rows)
					got := make([]int64, rows)
					for i := range got {
						got[i] = -7 // argRows must write every row
					}
					refArgRows(want, x, rows, cols, isMin)
					argRows(got, x, rows, cols, isMin)
					for rr := range rows {
						if got[rr] != want[rr] {
							t.Fatalf("%s [%d,%d] mode %d isMin %v row %d: got %d, want %d",
								name, rows, cols, mode, isMin, rr, got[rr], want[rr])
						}
					}
				}
			}
		}
	}
}

func TestArgRows(t *testing.T) {
	defer kernels.SetThreads(kernels.Threads())
	// 1 thread: serial; 2: rows in parallel (even row counts) or rows of
	// ≥16K cut in two; 7: up to 7 segments per row (8K each at least).
	for _, threads := range []int{1, 2, 7} {
		kernels.SetThreads(threads)
		r := rand.New(rand.NewPCG(uint64(threads), 11))
		t.Run(fmt.Sprint("threads", threads), func(t *testing.T) {
			checkArgRows[float32](t, r, "f32")
			checkArgRows[float64](t, r, "f64")
			checkArgRows[int32](t, r, "i32")
			if threads == 2 {
				checkArgRows[int64](t, r, "i64")
			}
		})
	}
}

// TestArgMinMaxNaN runs ArgMinMax through the backend on long rows with
// NaNs and ties, along the last and the first axis, for f32, bf16 and
// f64 and int32 and int64 outputs, against refArgRows.
func TestArgMinMaxNaN(t *testing.T) {
	_, cpu := backendsForTest(t)
	r := rand.New(rand.NewPCG(3, 5))
	const a, c = 3, 40001
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float64} {
		for _, axis := range []int{0, 1} {
			for _, isMin := range []bool{false, true} {
				for _, odt := range []dtypes.DType{dtypes.Int32, dtypes.Int64} {
					// x is [a, c]; rows are x's along axis.
					x := make([]float64, a*c)
					for i := range x {
						x[i] = float64(r.IntN(50))
					}
					for range 4 {
						x[r.IntN(len(x))] = math.NaN()
						x[r.IntN(len(x))] = math.Inf(1 - 2*r.IntN(2))
					}
					rows, cols := a, c
					t2 := x
					if axis == 0 {
						rows, cols = c, a
						t2 = make([]float64, len(x))
						for i := range a {
							for j := range c {
								t2[j*a+i] = x[i*c+j]
							}
						}
					}
					want := make([]int64, rows)
					refArgRows(want, t2, rows, cols, isMin)
					var data any
					switch dt {
					case dtypes.Float32:
						f := make([]float32, len(x))
						for i, v := range x {
							f[i] = float32(v)
						}
						data = f
					case dtypes.BFloat16:
						f := make([]bfloat16.BFloat16, len(x))
						for i, v := range x {
							f[i] = bfloat16.FromFloat32(float32(v))
						}
						data = f
					default:
						data = x
					}
					name := fmt.Sprintf("%s axis %d isMin %v -> %s", dt, axis, isMin, odt)
					got, gs, err := run(cpu, []shapes.Shape{sh(dt, a, c)}, []any{data},
						func(b backends.Builder, p []backends.Op) (backends.Op, error) {
							return b.ArgMinMax(p[0], axis, odt, isMin)
						})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !gs.Equal(sh(odt, rows)) {
						t.Fatalf("%s: shape %s", name, gs)
					}
					g := asFloat64(got)
					for i := range want {
						if g[i] != float64(want[i]) {
							t.Fatalf("%s: row %d: got %v, want %d", name, i, g[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkArgMax times the f32 argmax kernel on logits-like rows, the
// former loop (old) beside argRows (new).
func BenchmarkArgMax(b *testing.B) {
	for _, s := range [][2]int{{1, 32000}, {8, 32000}, {1, 151936}, {32, 32000}} {
		rows, cols := s[0], s[1]
		r := rand.New(rand.NewPCG(1, 2))
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
		}
		idx := make([]int64, rows)
		for _, v := range []struct {
			name string
			f    func(idx []int64, x []float32, rows, cols int, isMin bool)
		}{{"old", refArgRows[float32]}, {"new", argRows[float32]}} {
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, v.name), func(b *testing.B) {
				b.SetBytes(int64(4 * len(x)))
				for b.Loop() {
					v.f(idx, x, rows, cols, false)
				}
			})
		}
	}
}
