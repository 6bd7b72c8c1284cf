package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// GemvMulti against one GemmXNT per product: every dtype, row counts
// around the chunk size, padded row strides, products sharing nothing.
func TestGemvMulti(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 22))
		for _, k := range []int{16, 48, 96, 1024} {
			var ps []Gemv
			var want [][]float32
			for i, n := range []int{1, 15, 16, 17, 100, 300} {
				ldb := k + r.IntN(3)
				g := Gemv{A: randMat(r, 1, k, k), C: make([]float32, n), N: n, LDB: ldb}
				f := randMat(r, n, k, ldb)
				w := make([]float32, n)
				switch i % 4 {
				case 0:
					g.F32 = f
					GemmF32NT(1, n, k, g.A, k, f, ldb, w, n)
				case 1:
					g.BF16 = make([]uint16, len(f))
					for j, v := range f {
						g.BF16[j] = uint16(math.Float32bits(v) >> 16)
					}
					GemmBF16NT(1, n, k, g.A, k, g.BF16, ldb, w, n)
				case 2:
					g.F16 = make([]uint16, len(f))
					for j, v := range f {
						g.F16[j] = f32ToF16Test(v)
					}
					GemmF16NT(1, n, k, g.A, k, g.F16, ldb, w, n)
				default:
					g.Group = 16
					g.I8 = make([]int8, n*ldb)
					for j := range g.I8 {
						g.I8[j] = int8(r.IntN(255) - 127)
					}
					g.Scales = make([]float32, n*k/16)
					for j := range g.Scales {
						g.Scales[j] = float32(r.Float64()*0.02 + 0.001)
					}
					GemmInt8NT(1, n, k, g.A, k, g.I8, ldb, g.Scales, 16, w, n)
				}
				for j := range g.C {
					g.C[j] = float32(math.NaN()) // overwritten, not accumulated
				}
				ps = append(ps, g)
				want = append(want, w)
			}
			if k%64 == 0 { // int8 products with int8 activations
				for _, n := range []int{5, 21} {
					g := Gemv{A: randMat(r, 1, k, k), C: make([]float32, n), N: n, LDB: k, Group: 64, Int8Q8: true}
					g.I8 = make([]int8, n*k)
					for j := range g.I8 {
						g.I8[j] = int8(r.IntN(255) - 127)
					}
					g.Scales = make([]float32, n*k/64)
					for j := range g.Scales {
						g.Scales[j] = float32(r.Float64()*0.02 + 0.001)
					}
					w := make([]float32, n)
					GemmInt8Q8NT(1, n, k, g.A, k, g.I8, k, g.Scales, 64, w, n)
					ps = append(ps, g)
					want = append(want, w)
				}
			}
			if k%Int4Block == 0 { // int4 products, between the others
				for i, n := range []int{3, 77, 5, 40} {
					f := randMat(r, n, k, k)
					lo, hi := Int4Range(f, n, k)
					g := Gemv{A: randMat(r, 1, k, k), C: make([]float32, n), N: n, Int4Table: Int4Table(lo, hi), Int4Q8: i >= 2}
					g.Int4, g.Int4Codes = QuantizeInt4(f, n, k, g.Int4Table)
					w := make([]float32, n)
					if g.Int4Q8 {
						GemmInt4Q8NT(1, n, k, g.A, k, g.Int4, g.Int4Codes, g.Int4Table, w, n)
					} else {
						GemmInt4NT(1, n, k, g.A, k, g.Int4, g.Int4Codes, g.Int4Table, w, n)
					}
					ps = append([]Gemv{g}, ps...)
					want = append([][]float32{w}, want...)
				}
			}
			if k%Int4Block == 0 { // grouped int4 products, with and without mins and int8 activations
				for i, n := range []int{6, 33, 9, 50, 7, 31, 12, 44} {
					group := 32
					if i >= 4 {
						group = 16 // two scale codes a block
					}
					packed, scales, mins, _ := int4GroupsCase(r, n, k, group, i%2 == 1)
					g := Gemv{A: randMat(r, 1, k, k), C: make([]float32, n), N: n, Int4: packed, Int4Scales: scales, Int4Mins: mins, Int4Group: group, Int4Q8: i%4 >= 2}
					w := make([]float32, n)
					if g.Int4Q8 {
						GemmInt4GroupsQ8NT(1, n, k, g.A, k, packed, scales, mins, group, w, n)
					} else {
						GemmInt4GroupsNT(1, n, k, g.A, k, packed, scales, mins, group, w, n)
					}
					ps = append([]Gemv{g}, ps...)
					want = append([][]float32{w}, want...)
				}
			}
			GemvMulti(k, ps)
			for i, p := range ps {
				for j := range p.N {
					scale := 1.0 // the mins' part may cancel much of a grouped product
					for _, v := range want[i] {
						scale = max(scale, math.Abs(float64(v)))
					}
					near(t, fmt.Sprintf("k=%d product %d", k, i), j, p.C[j], float64(want[i][j]), 1e-4*scale)
				}
			}
		}
	})
}

func TestGemvMultiEdges(t *testing.T) {
	GemvMulti(8, nil) // nothing to do
	c := []float32{1, 2}
	GemvMulti(0, []Gemv{{A: nil, C: c, N: 2, F32: []float32{}, LDB: 0}})
	if c[0] != 0 || c[1] != 0 {
		t.Errorf("k=0: %v, want zeros", c)
	}
	for _, bad := range []struct {
		g    Gemv
		want string
		k    int
	}{
		{Gemv{A: make([]float32, 4), C: make([]float32, 2), N: 2, F32: make([]float32, 7), LDB: 4}, "product 0 B", 4},
		{Gemv{A: make([]float32, 3), C: make([]float32, 2), N: 2, F32: make([]float32, 8), LDB: 4}, "product 0 A", 4},
		{Gemv{A: make([]float32, 4), C: make([]float32, 2), N: 2, LDB: 4}, "no weight", 4},
		{Gemv{A: make([]float32, 4), C: make([]float32, 2), N: 2, I8: make([]int8, 8), Scales: make([]float32, 1), Group: 2, LDB: 4}, "scales", 4},
		{Gemv{A: make([]float32, 32), C: make([]float32, 2), N: 2, Int4: make([]byte, 32), Int4Codes: make([]byte, 2), Int4Table: make([]float32, 8)}, "table", 32},
		{Gemv{A: make([]float32, 32), C: make([]float32, 2), N: 2, Int4: make([]byte, 31), Int4Codes: make([]byte, 2), Int4Table: make([]float32, 256)}, "bytes of blocks", 32},
	} {
		wantPanic(t, "GemvMulti", bad.want, func() { GemvMulti(bad.k, []Gemv{bad.g}) })
	}
}
