package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// int4Decode decodes an int4 matrix the long way, nibble by nibble, as
// the format's comment states it (low nibble first, value nibble − 8).
func int4Decode(n, k int, packed, codes []byte, table []float32) []float32 {
	out := make([]float32, n*k)
	for i := range out {
		b := packed[i/2]
		nib := int(b & 15)
		if i%2 == 1 {
			nib = int(b >> 4)
		}
		out[i] = float32(nib-8) * table[codes[i/32]]
	}
	return out
}

// int4Matrix is a random [n, k] matrix whose rows' magnitudes differ by
// up to 100x, with a few outliers, as trained weights have.
func int4Matrix(r *rand.Rand, n, k int) []float32 {
	w := make([]float32, n*k)
	for j := 0; j < n; j++ {
		s := math.Pow(10, 2*r.Float64()-1)
		for p := 0; p < k; p++ {
			v := r.NormFloat64() * s
			if r.IntN(200) == 0 {
				v *= 6
			}
			w[j*k+p] = float32(v)
		}
	}
	return w
}

// int4Case is a random int4Matrix [n, k] quantised (QuantizeInt4 with its
// own table) and decoded the long way (int4Decode): the weights the
// product tests multiply and their f32 reference.
func int4Case(r *rand.Rand, n, k int) (packed, codes []byte, table, dense []float32) {
	w := int4Matrix(r, n, k)
	table = Int4Table(Int4Range(w, n, k))
	packed, codes = QuantizeInt4(w, n, k, table)
	return packed, codes, table, int4Decode(n, k, packed, codes, table)
}

// The layout is as the format's comment says: a byte holds its first
// value in the low nibble, a value is nibble − 8, and a block's code
// indexes the table. A swapped nibble order or an offset of 7 fails here.
func TestInt4Layout(t *testing.T) {
	w := make([]float32, 64)
	for i := range 32 {
		w[i] = float32(i%16 - 8) // block 0: -8..7 twice
	}
	w[32], w[33] = 7, -8 // block 1: only its first two values nonzero
	lo, hi := Int4Range(w, 1, 64)
	if lo != 8 || hi != 8 {
		t.Fatalf("Int4Range = %v, %v, want 8, 8", lo, hi)
	}
	table := Int4Table(lo, hi)
	packed, codes := QuantizeInt4(w, 1, 64, table)
	s := table[codes[0]]
	if codes[0] != codes[1] || math.Abs(float64(s)-1) > 0.04 {
		t.Fatalf("codes %v, scale %v: want one code for both blocks, near 1", codes, s)
	}
	// -8 and -7 in the first byte: nibbles 0 (low) and 1 (high).
	if packed[0] != 0x10 || packed[7] != 0xFE || packed[16] != 0x0F {
		t.Errorf("bytes 0, 7, 16 = %#x %#x %#x, want 0x10 0xfe 0x0f", packed[0], packed[7], packed[16])
	}
	got := DequantizeInt4(1, 64, packed, codes, table)
	want := int4Decode(1, 64, packed, codes, table)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("DequantizeInt4[%d] = %v, the long way %v", i, got[i], want[i])
		}
	}
	// A block of zeros takes entry 0, and so does every block of a zero matrix.
	z := make([]float32, 64)
	zlo, zhi := Int4Range(z, 2, 32)
	_, zc := QuantizeInt4(z, 2, 32, Int4Table(zlo, zhi))
	if zc[0] != 0 || zc[1] != 0 {
		t.Errorf("zero blocks: codes %v, want 0", zc)
	}
}

// Quantising with the table costs no more than quantising each block with
// its own f32 scale max|x|/7 would (the best entry near it is searched),
// and the error is what 4 bits give.
func TestQuantizeInt4Error(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, k = 64, 512
	w := int4Matrix(r, n, k)
	lo, hi := Int4Range(w, n, k)
	// In two parts, as compile quantises blocks of rows.
	lo1, hi1 := Int4Range(w[:n*k/2], n/2, k)
	lo2, hi2 := Int4Range(w[n*k/2:], n/2, k)
	if l, h := MergeInt4Range(lo1, hi1, lo2, hi2); l != lo || h != hi {
		t.Fatalf("merged range %v..%v, whole %v..%v", l, h, lo, hi)
	}
	table := Int4Table(lo, hi)
	for i := 2; i < 256; i++ {
		if !(table[i] > table[i-1]) {
			t.Fatalf("table not rising at %d: %v, %v", i, table[i-1], table[i])
		}
	}
	packed, codes := QuantizeInt4(w, n, k, table)
	got := int4Decode(n, k, packed, codes, table)
	var errOurs, errFloat, norm float64
	for q := 0; q < n*k/32; q++ {
		x := w[q*32 : (q+1)*32]
		s := amax(x) / 7
		for i, v := range x {
			d := float64(v - got[q*32+i])
			errOurs += d * d
			f := float64(v) - float64(int4Round(v, s))*float64(s)
			errFloat += f * f
			norm += float64(v) * float64(v)
		}
	}
	rel := math.Sqrt(errOurs / norm)
	t.Logf("relative RMS error %.4f; with f32 scales max/7: %.4f", rel, math.Sqrt(errFloat/norm))
	if errOurs > errFloat {
		t.Errorf("squared error %g above the f32 scales' %g", errOurs, errFloat)
	}
	if rel > 0.12 {
		t.Errorf("relative RMS error %.4f, want ≤ 0.12", rel)
	}
}

// TestGemmInt4NT compares the int4 GEMM (GEMV at m = 1, the small-m
// product, the blocked GEMM with chunks that start mid-block) and the
// portable GEMV with the f32 GEMM on the weights decoded the long way.
func TestGemmInt4NT(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, sz := range [][3]int{{1, 7, 32}, {1, 130, 2880}, {2, 9, 64}, {5, 70, 1056}, {8, 40, 288}, {12, 20, 96}, {70, 33, 2080}} {
			m, n, k := sz[0], sz[1], sz[2]
			packed, codes, table, dense := int4Case(r, n, k)
			a := randMat(r, m, k, k)
			want := make([]float32, m*n)
			GemmF32NT(m, n, k, a, k, dense, k, want, n)
			got := make([]float32, m*n)
			GemmInt4NT(m, n, k, a, k, packed, codes, table, got, n)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("m=%d n=%d k=%d: C[%d] = %v, want %v", m, n, k, i, got[i], want[i])
				}
			}
			c := make([]float32, n)
			gemvRowsNibblesGeneric(int4Code(table), 0, a[:k], packed, codes, c) // the portable path, whatever this CPU runs
			for j := range c {
				if d := math.Abs(float64(c[j] - want[j])); d > 1e-4*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("generic n=%d k=%d: C[%d] = %v, want %v", n, k, j, c[j], want[j])
				}
			}
		}
	})
}

func TestGemmInt4Panics(t *testing.T) {
	table := make([]float32, 256)
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		{"k", "not a multiple of 32", func() {
			GemmInt4NT(1, 1, 48, make([]float32, 48), 48, make([]byte, 24), make([]byte, 2), table, make([]float32, 1), 1)
		}},
		{"codes", "scales, need", func() {
			GemmInt4NT(1, 2, 32, make([]float32, 32), 32, make([]byte, 32), make([]byte, 1), table, make([]float32, 2), 2)
		}},
		{"table", "table of 255 entries", func() {
			GemmInt4NT(1, 1, 32, make([]float32, 32), 32, make([]byte, 16), make([]byte, 1), table[:255], make([]float32, 1), 1)
		}},
		{"quantize k", "multiple of 32", func() { QuantizeInt4(make([]float32, 40), 1, 40, table) }},
	} {
		wantPanic(t, c.name, c.want, c.f)
	}
}

// BenchmarkGemvInt4 is a 4096x4096 GEMV in int4 (with f32 and with int8
// activations) against int8 (groups of 64) and bf16, the widths --quantize
// int4 and int8 and a bf16 checkpoint hold: int4 reads 0.53 bytes a
// weight, int8 1.06, bf16 2.
func BenchmarkGemvInt4(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, k = 4096, 4096
	w := int4Matrix(r, n, k)
	a := make([]float32, k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	c := make([]float32, n)
	table := Int4Table(Int4Range(w, n, k))
	packed, codes := QuantizeInt4(w, n, k, table)
	q8, s8 := QuantizeInt8(w, n, k, 64)
	bf := make([]uint16, n*k)
	for i, v := range w {
		bf[i] = uint16(math.Float32bits(v) >> 16)
	}
	b.Run("int4", func(b *testing.B) {
		b.SetBytes(int64(n * k / 2))
		for b.Loop() {
			GemmInt4NT(1, n, k, a, k, packed, codes, table, c, n)
		}
	})
	b.Run("int4-int8act", func(b *testing.B) { // --activations int8
		b.SetBytes(int64(n * k / 2))
		for b.Loop() {
			GemmInt4Q8NT(1, n, k, a, k, packed, codes, table, c, n)
		}
	})
	b.Run("int8", func(b *testing.B) {
		b.SetBytes(int64(n * k))
		for b.Loop() {
			GemmInt8NT(1, n, k, a, k, q8, k, s8, 64, c, n)
		}
	})
	b.Run("bf16", func(b *testing.B) {
		b.SetBytes(int64(2 * n * k))
		for b.Loop() {
			GemmBF16NT(1, n, k, a, k, bf, k, c, n)
		}
	})
}
