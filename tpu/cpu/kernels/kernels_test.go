package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// levels returns every dispatch level this machine can run, lowest first.
func levels() []isaLevel {
	var ls []isaLevel
	for l := levelGeneric; l <= detected; l++ {
		ls = append(ls, l)
	}
	return ls
}

// forEachLevel runs f as a subtest at every level, restoring dispatch after.
func forEachLevel(t *testing.T, f func(t *testing.T)) {
	for _, l := range levels() {
		t.Run(l.String(), func(t *testing.T) {
			old := setLevel(l)
			defer setLevel(old)
			f(t)
		})
	}
}

var sentinel = float32(math.NaN())

// randMat returns a rows×cols matrix with row stride ld whose padding holds
// NaN, so a kernel that reads past a row's width poisons its result.
func randMat(r *rand.Rand, rows, cols, ld int) []float32 {
	s := make([]float32, rows*ld)
	for i := range s {
		if i%ld < cols {
			s[i] = float32(r.NormFloat64())
		} else {
			s[i] = sentinel
		}
	}
	return s
}

type weights struct {
	name   string
	widen  func(j, p int) float64 // the exact value the kernel must use for B[j,p]
	gemmNT func(m, n, k int, a []float32, lda int, c []float32, ldc int)
}

func makeWeights(r *rand.Rand, dtype string, n, k, ldb int) weights {
	f := randMat(r, n, k, ldb)
	switch dtype {
	case "f32":
		return weights{dtype, func(j, p int) float64 { return float64(f[j*ldb+p]) },
			func(m, n, k int, a []float32, lda int, c []float32, ldc int) {
				GemmF32NT(m, n, k, a, lda, f, ldb, c, ldc)
			}}
	case "bf16":
		b := make([]uint16, len(f))
		for i, v := range f {
			b[i] = uint16(math.Float32bits(v) >> 16)
		}
		return weights{dtype, func(j, p int) float64 { return float64(bf16ToF32(b[j*ldb+p])) },
			func(m, n, k int, a []float32, lda int, c []float32, ldc int) {
				GemmBF16NT(m, n, k, a, lda, b, ldb, c, ldc)
			}}
	case "f16":
		b := make([]uint16, len(f))
		for i, v := range f {
			b[i] = f32ToF16Test(v)
		}
		return weights{dtype, func(j, p int) float64 { return float64(f16ToF32(b[j*ldb+p])) },
			func(m, n, k int, a []float32, lda int, c []float32, ldc int) {
				GemmF16NT(m, n, k, a, lda, b, ldb, c, ldc)
			}}
	}
	// int8: groups of 16, 32 or the whole row when they divide k.
	g := k
	for _, cand := range []int{16, 32, 8, 5} {
		if k%cand == 0 && r.IntN(2) == 0 {
			g = cand
			break
		}
	}
	ng := k / g
	q := make([]int8, n*ldb)
	for i := range q {
		q[i] = int8(r.IntN(255) - 127)
	}
	sc := make([]float32, n*ng)
	for i := range sc {
		sc[i] = float32(r.Float64()*0.02 + 0.001)
	}
	return weights{fmt.Sprintf("int8/g%d", g), func(j, p int) float64 { return float64(q[j*ldb+p]) * float64(sc[j*ng+p/g]) },
		func(m, n, k int, a []float32, lda int, c []float32, ldc int) {
			GemmInt8NT(m, n, k, a, lda, q, ldb, sc, g, c, ldc)
		}}
}

// f32ToF16Test rounds to half precision by truncation (the test only needs
// some valid half values, and f16ToF32 widens them exactly).
func f32ToF16Test(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := uint16(b>>13) & 0x3ff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7bff
	}
	return sign | uint16(exp)<<10 | mant
}

// checkC compares c with the float64 reference of A·W, element by element,
// with a bound proportional to Σ|a||w| (f32 accumulation error), and checks
// that C's padding is untouched.
func checkC(t *testing.T, what string, m, n, k int, a []float32, lda int, w func(i, j, p int) float64, c []float32, ldc int) {
	t.Helper()
	bad := 0
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			got := c[i*ldc+j]
			if j >= n {
				if !math.IsNaN(float64(got)) {
					t.Fatalf("%s: C padding [%d,%d] overwritten with %v", what, i, j, got)
				}
				continue
			}
			var want, mag float64
			for p := 0; p < k; p++ {
				prod := float64(a[i*lda+p]) * w(i, j, p)
				want += prod
				mag += math.Abs(prod)
			}
			tol := 2e-7*float64(k+16)*mag + 1e-30
			if d := math.Abs(float64(got) - want); !(d <= tol) {
				if bad++; bad <= 5 {
					t.Errorf("%s: C[%d,%d] = %v, want %v (diff %.3g > tol %.3g)", what, i, j, got, want, d, tol)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d wrong elements", what, bad)
	}
}

type shape struct{ m, n, k int }

func testShapes(r *rand.Rand) []shape {
	s := []shape{
		{1, 1, 1}, {1, 70, 70}, {2, 3, 5}, {7, 9, 17}, {8, 32, 16}, {1, 33, 15},
		{1, 300, 768}, {1, 257, 513}, {5, 100, 300}, // GEMV / kc boundary
		{130, 70, 300},  // crosses mcBlock and kcBlock
		{129, 600, 33},  // crosses ncMax
		{64, 1030, 64},  // many n tiles
		{9, 21, 2100},   // k in three chunks
		{260, 70, 1100}, // B blocks decoded once for three blocks of A rows, k in two chunks
	}
	for range 25 {
		s = append(s, shape{1 + r.IntN(70), 1 + r.IntN(70), 1 + r.IntN(70)})
	}
	// GEMV (m = 1): row counts around the 4-row blocks, k around 16.
	for _, k := range []int{16, 17, 31, 32, 48, 64, 96, 128, 160} {
		s = append(s, shape{1, 1 + r.IntN(13), k})
	}
	// The small-m 16-bit path (2 to smallM16Max rows): row groups around
	// four, B rows around the blocks of four, k around 16.
	for _, m := range []int{2, 3, 4, 5, 6, 7, 8, 9, smallM16Max - 1, smallM16Max, smallM16Max + 1} {
		s = append(s, shape{m, 1 + r.IntN(13), 16 + r.IntN(50)})
	}
	// The small-m int8 kernels (2 to 4 rows by four B rows, 5 to 16 by two
	// in groups of eight): k a multiple of 16, so that groups of 16 or 32
	// take them.
	for _, m := range []int{2, 3, 4, 5, 7, 8, 11, 16} {
		s = append(s, shape{m, 1 + r.IntN(11), 16 * (1 + r.IntN(8))}, shape{m, 4*(1+r.IntN(3)) + 1, 64})
	}
	return s
}

func TestGemmNT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, sh := range testShapes(r) {
			for _, dt := range []string{"f32", "bf16", "f16", "int8"} {
				lda, ldb, ldc := sh.k+r.IntN(3), sh.k+r.IntN(3), sh.n+r.IntN(3)
				a := randMat(r, sh.m, sh.k, lda)
				w := makeWeights(r, dt, sh.n, sh.k, ldb)
				c := randMat(r, sh.m, sh.n, ldc)
				w.gemmNT(sh.m, sh.n, sh.k, a, lda, c, ldc)
				checkC(t, fmt.Sprintf("%s %dx%dx%d", w.name, sh.m, sh.n, sh.k), sh.m, sh.n, sh.k, a, lda,
					func(_, j, p int) float64 { return w.widen(j, p) }, c, ldc)
			}
		}
	})
}

func TestGemmF32NN(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, sh := range testShapes(r) {
			lda, ldb, ldc := sh.k+r.IntN(3), sh.n+r.IntN(3), sh.n+r.IntN(3)
			a := randMat(r, sh.m, sh.k, lda)
			b := randMat(r, sh.k, sh.n, ldb)
			c := randMat(r, sh.m, sh.n, ldc)
			GemmF32NN(sh.m, sh.n, sh.k, a, lda, b, ldb, c, ldc)
			checkC(t, fmt.Sprintf("NN %dx%dx%d", sh.m, sh.n, sh.k), sh.m, sh.n, sh.k, a, lda,
				func(_, j, p int) float64 { return float64(b[p*ldb+j]) }, c, ldc)
		}
	})
}

func TestGemmZeroK(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	GemmF32NT(2, 2, 0, nil, 0, nil, 0, c, 2)
	for i, v := range c {
		if v != 0 {
			t.Fatalf("k=0: C[%d] = %v, want 0", i, v)
		}
	}
}

func TestGemmThreads(t *testing.T) {
	defer SetThreads(Threads())
	r := rand.New(rand.NewPCG(5, 6))
	for _, th := range []int{1, 2, 3, 8} {
		SetThreads(th)
		// int8 B is decoded block by block, and its tiles are taken B
		// block by B block: one thread claims them all, many split them.
		for _, sh := range []shape{{1, 517, 96}, {40, 300, 100}, {129, 65, 257}, {400, 130, 1100}} {
			for _, dt := range []string{"f32", "int8"} {
				a := randMat(r, sh.m, sh.k, sh.k)
				w := makeWeights(r, dt, sh.n, sh.k, sh.k)
				c := randMat(r, sh.m, sh.n, sh.n)
				w.gemmNT(sh.m, sh.n, sh.k, a, sh.k, c, sh.n)
				checkC(t, fmt.Sprintf("threads=%d %s %v", th, dt, sh), sh.m, sh.n, sh.k, a, sh.k,
					func(_, j, p int) float64 { return w.widen(j, p) }, c, sh.n)
			}
		}
	}
}

func TestShortSlicesPanicClearly(t *testing.T) {
	cases := map[string]func(){
		"A":        func() { GemmF32NT(2, 2, 4, make([]float32, 7), 4, make([]float32, 8), 4, make([]float32, 4), 2) },
		"B":        func() { GemmBF16NT(1, 2, 4, make([]float32, 4), 4, make([]uint16, 7), 4, make([]float32, 2), 2) },
		"overflow": func() { GemmF32NT(math.MaxInt/2, 1, 1, nil, 4, nil, 1, nil, 1) },
		"stride":   func() { GemmF32NN(2, 2, 2, make([]float32, 4), 1, make([]float32, 4), 2, make([]float32, 4), 2) },
		"group": func() {
			GemmInt8NT(1, 1, 6, make([]float32, 6), 6, make([]int8, 6), 6, []float32{1}, 4, make([]float32, 1), 1)
		},
		"scales": func() {
			GemmInt8NT(1, 2, 4, make([]float32, 4), 4, make([]int8, 8), 4, []float32{1}, 4, make([]float32, 2), 2)
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, ok := r.(string)
				if !ok || len(msg) < 10 || msg[:8] != "kernels:" {
					t.Fatalf("want a kernels: panic message, got %#v", r)
				}
			}()
			f()
		})
	}
}

func TestQuantizeInt8(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ n, k, g int }{{3, 64, 64}, {5, 96, 32}, {1, 7, 7}, {4, 48, 16}} {
		w := randMat(r, tc.n, tc.k, tc.k)
		w[0] = 0 // an exact zero stays zero
		q, sc := QuantizeInt8(w, tc.n, tc.k, tc.g)
		ng := tc.k / tc.g
		for j := 0; j < tc.n; j++ {
			for g := 0; g < ng; g++ {
				var amax float64
				for p := g * tc.g; p < (g+1)*tc.g; p++ {
					amax = math.Max(amax, math.Abs(float64(w[j*tc.k+p])))
				}
				s := float64(sc[j*ng+g])
				if math.Abs(s-amax/127) > 1e-6*amax {
					t.Fatalf("scale[%d,%d] = %v, want %v", j, g, s, amax/127)
				}
				for p := g * tc.g; p < (g+1)*tc.g; p++ {
					if d := math.Abs(float64(q[j*tc.k+p])*s - float64(w[j*tc.k+p])); d > s/2*1.0001 {
						t.Fatalf("w[%d,%d]=%v quantised to %d×%v (err %v > half a step)", j, p, w[j*tc.k+p], q[j*tc.k+p], s, d)
					}
				}
			}
		}
		if q[0] != 0 {
			t.Fatalf("zero weight quantised to %d", q[0])
		}
	}
	q, sc := QuantizeInt8(make([]float32, 8), 2, 4, 2)
	for i := range q {
		if q[i] != 0 {
			t.Fatal("all-zero input gave nonzero q")
		}
	}
	for _, s := range sc {
		if s != 0 {
			t.Fatal("all-zero group gave nonzero scale")
		}
	}
}

// TestQuantizedGemmRoundTrip checks QuantizeInt8 and GemmInt8NT together
// against the f32 product: the deviation is bounded by half a quantisation
// step per weight.
func TestQuantizedGemmRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k, g := 3, 50, 128, 32
	w := randMat(r, n, k, k)
	a := randMat(r, m, k, k)
	q, sc := QuantizeInt8(w, n, k, g)
	c := make([]float32, m*n)
	GemmInt8NT(m, n, k, a, k, q, k, sc, g, c, n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var want, bound float64
			for p := 0; p < k; p++ {
				want += float64(a[i*k+p]) * float64(w[j*k+p])
				bound += math.Abs(float64(a[i*k+p])) * float64(sc[j*(k/g)+p/g]) / 2
			}
			if d := math.Abs(float64(c[i*n+j]) - want); d > bound*1.01+1e-4 {
				t.Fatalf("C[%d,%d] = %v, f32 product %v: deviation %v > bound %v", i, j, c[i*n+j], want, d, bound)
			}
		}
	}
}

func TestRoundClamp127(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	vals := []float32{0, 0.5, -0.5, 1.5, -1.5, 2.5, 126.5, -126.5, 127, 200, -200,
		0.49999997, -0.49999997, 0.50000006, float32(math.Inf(1)), float32(math.Inf(-1))}
	for range 10000 {
		vals = append(vals, float32(r.Float64()*300-150), float32(r.IntN(255)-127)+0.5)
	}
	for _, v := range vals {
		want := math.Max(-127, math.Min(127, math.Round(float64(v))))
		if got := roundClamp127(v); float64(got) != want {
			t.Fatalf("roundClamp127(%v) = %d, want %v", v, got, want)
		}
	}
	if got := roundClamp127(float32(math.NaN())); got != 0 {
		t.Fatalf("roundClamp127(NaN) = %d, want 0", got)
	}
}

func TestQuantizeInt8NonFinite(t *testing.T) {
	w := []float32{1, -2, float32(math.Inf(1)), float32(math.NaN())}
	q, sc := QuantizeInt8(w, 1, 4, 4)
	if want := float32(2) / 127; sc[0] != want {
		t.Fatalf("scale %v, want %v (the largest finite magnitude / 127)", sc[0], want)
	}
	if q[0] != 64 || q[1] != -127 || q[2] != 127 || q[3] != 0 {
		t.Fatalf("q = %v, want [64 -127 127 0]", q)
	}
}

// wantPanic calls f and reports an error unless it panics with a string
// (the kernels' own checks) containing want.
func wantPanic(t *testing.T, name, want string, f func()) {
	t.Helper()
	defer func() {
		p := recover()
		if msg, ok := p.(string); !ok || !strings.Contains(msg, want) {
			t.Errorf("%s: panic %#v, want a message containing %q", name, p, want)
		}
	}()
	f()
}

// TestGemvInt8Group16: the GEMV with a scale every 16 columns (NVFP4
// held as int8 runs it), four-row blocks and the rows after them, padded
// rows, at every level.
func TestGemvInt8Group16(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(16, 16))
		for _, s := range []struct{ n, k, ldb int }{{4, 16, 16}, {7, 64, 64}, {37, 96, 112}, {1, 32, 32}} {
			const g = 16
			ng := s.k / g
			q := make([]int8, s.n*s.ldb)
			for i := range q {
				q[i] = int8(r.IntN(25) - 12)
			}
			sc := make([]float32, s.n*ng)
			for i := range sc {
				sc[i] = float32(r.Float64()*0.02 + 0.001)
			}
			a := randMat(r, 1, s.k, s.k)
			c := make([]float32, s.n+3)
			for i := range c {
				c[i] = float32(math.NaN())
			}
			GemmInt8NT(1, s.n, s.k, a, s.k, q, s.ldb, sc, g, c, s.n+3)
			w := func(_, j, p int) float64 { return float64(q[j*s.ldb+p]) * float64(sc[j*ng+p/g]) }
			checkC(t, fmt.Sprintf("n %d k %d ldb %d", s.n, s.k, s.ldb), 1, s.n, s.k, a, s.k, w, c, s.n+3)
		}
	})
}
