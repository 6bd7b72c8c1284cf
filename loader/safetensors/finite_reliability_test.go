package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// nonFiniteRef decodes every element and tests it.
func nonFiniteRef(t *testing.T, d DType, raw []byte) (count, first int64) {
	first = -1
	if d == F64 {
		for i := 0; i+8 <= len(raw); i += 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(raw[i:]))
			if math.IsNaN(v) || math.IsInf(v, 0) {
				if count == 0 {
					first = int64(i / 8)
				}
				count++
			}
		}
		return count, first
	}
	fs, err := ToFloat32(d, raw)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		v := float64(f)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if count == 0 {
				first = int64(i)
			}
			count++
		}
	}
	return count, first
}

// TestNonFiniteMatchesDecoding: the word-at-a-time scan finds exactly the
// NaN/Inf elements that decoding finds, for every float dtype, at every
// position including the tail after the last full word, with random
// finite values around them (so the zero-lane filter's false positives
// are exercised).
func TestNonFiniteMatchesDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	specials := map[DType][][]byte{
		F64:    {{0, 0, 0, 0, 0, 0, 0xF0, 0x7F}, {1, 0, 0, 0, 0, 0, 0xF8, 0xFF}},
		F32:    {{0, 0, 0x80, 0x7F}, {0, 0, 0x80, 0xFF}, {1, 0, 0xC0, 0x7F}},
		F16:    {{0, 0x7C}, {0, 0xFC}, {1, 0x7E}},
		BF16:   {{0x80, 0x7F}, {0x80, 0xFF}, {0xC1, 0x7F}},
		F8E4M3: {{0x7F}, {0xFF}},
		F8E5M2: {{0x7C}, {0xFC}, {0x7E}},
	}
	for d, sp := range specials {
		size := d.Size()
		for n := 0; n < 100; n++ {
			for trial := 0; trial < 20; trial++ {
				raw := make([]byte, n*size)
				for i := range raw {
					raw[i] = byte(r.Uint32())
				}
				// Mostly finite: clear random exponent bits, then plant specials.
				for i := 0; i < n; i++ {
					if r.IntN(4) != 0 {
						raw[i*size+size-1] &= 0x3F
					}
				}
				for k := r.IntN(3); k > 0 && n > 0; k-- {
					i := r.IntN(n)
					copy(raw[i*size:], sp[r.IntN(len(sp))])
				}
				gotN, gotFirst := NonFinite(d, raw)
				wantN, wantFirst := nonFiniteRef(t, d, raw)
				if gotN != wantN || gotFirst != wantFirst {
					t.Fatalf("%s n=%d: got (%d, %d), want (%d, %d) for % x", d, n, gotN, gotFirst, wantN, wantFirst, raw)
				}
			}
		}
	}
	if n, first := NonFinite(I32, []byte{0xFF, 0xFF, 0xFF, 0x7F}); n != 0 || first != -1 {
		t.Errorf("an integer tensor has no NaN: got %d, %d", n, first)
	}
}

// TestCheckpointNonFinite names the tensors holding NaN/Inf, found while
// Float32Checked converts them, and converts exactly as Float32 does.
func TestCheckpointNonFinite(t *testing.T) {
	good, _ := Float32Tensor("good", BF16, []int{4, 4}, make([]float32, 16))
	badVals := make([]float32, 12)
	badVals[5], badVals[7] = float32(math.NaN()), float32(math.Inf(-1))
	bad, _ := Float32Tensor("layers.0.bad", F32, []int{3, 4}, badVals)
	ints := Tensor{Name: "ids", DType: I32, Shape: []int{1}, Data: []byte{0, 0, 0x80, 0x7F}}
	b, err := Encode([]Tensor{good, bad, ints}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []NonFiniteTensor
	for _, name := range c.Names() {
		out, nf, err := c.Float32Checked(name)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := c.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(out, plain) {
			t.Errorf("%s: Float32Checked gives %v, Float32 %v", name, out, plain)
		}
		if nf.Count > 0 {
			got = append(got, nf)
		}
	}
	if len(got) != 1 || got[0] != (NonFiniteTensor{Name: "layers.0.bad", DType: F32, Count: 2, Elements: 12, First: 5}) {
		t.Fatalf("got %+v", got)
	}
	if _, _, err := c.Float32Checked("nope"); err == nil {
		t.Error("no error for a missing tensor")
	}
}

// TestConvertChecked: over tensors of several pieces, with NaN/Inf planted
// anywhere (piece boundaries included), ConvertChecked hands convert every
// byte once, in order, at the right element index, and counts what
// NonFinite counts over the whole tensor; ToFloat32Checked converts as
// ToFloat32 does.
func TestConvertChecked(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	specials := map[DType][]byte{F64: {0, 0, 0, 0, 0, 0, 0xF8, 0x7F}, F32: {0, 0, 0x80, 0xFF}, F16: {0, 0x7C}, BF16: {0xC1, 0x7F}, F8E4M3: {0x7F}, F8E5M2: {0xFC}}
	for d, sp := range specials {
		size := d.Size()
		for _, n := range []int{0, 1, checkPiece / size, checkPiece/size + 1, 3*checkPiece/size + 7} {
			raw := make([]byte, n*size)
			for i := range raw {
				raw[i] = byte(r.Uint32())
			}
			for i := 0; i < n; i++ {
				raw[i*size+size-1] &= 0x3F // finite
			}
			var at []int
			if n > 0 {
				at = []int{n - 1, r.IntN(n)}
				if n > checkPiece/size {
					at = append(at, checkPiece/size-1, checkPiece/size) // both sides of the first boundary
				}
			}
			for _, i := range at {
				copy(raw[i*size:], sp)
			}
			var seen []byte
			count, first := ConvertChecked(d, raw, func(at int, piece []byte) {
				if at*size != len(seen) {
					t.Fatalf("%s n=%d: piece at element %d after %d bytes", d, n, at, len(seen))
				}
				seen = append(seen, piece...)
			})
			if !bytes.Equal(seen, raw) {
				t.Fatalf("%s n=%d: convert did not get the bytes in order", d, n)
			}
			wantN, wantFirst := NonFinite(d, raw)
			if count != wantN || first != wantFirst {
				t.Fatalf("%s n=%d: got (%d, %d), want (%d, %d)", d, n, count, first, wantN, wantFirst)
			}
			if n > 0 && count == 0 {
				t.Fatalf("%s n=%d: planted values not found", d, n)
			}
			out, c2, f2, err := ToFloat32Checked(d, raw)
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := ToFloat32(d, raw)
			if c2 != count || f2 != first || !sameBits(out, plain) {
				t.Fatalf("%s n=%d: ToFloat32Checked differs from ToFloat32 + NonFinite", d, n)
			}
		}
	}
	// Integers: converted in one go, never reported.
	calls := 0
	if n, first := ConvertChecked(I32, []byte{0, 0, 0x80, 0x7F}, func(int, []byte) { calls++ }); n != 0 || first != -1 || calls != 1 {
		t.Errorf("I32: got %d, %d after %d calls", n, first, calls)
	}
	if _, _, _, err := ToFloat32Checked(F32, []byte{1, 2, 3}); err == nil {
		t.Error("no error for a partial element")
	}
}

// TestHasNonFinite: the quick check used while converting agrees with
// decoding every element, for every float dtype and length (tails
// included), on mostly finite data with a few specials or none.
func TestHasNonFinite(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	specials := map[DType][][]byte{
		F64:    {{0, 0, 0, 0, 0, 0, 0xF0, 0x7F}, {1, 0, 0, 0, 0, 0, 0xF8, 0xFF}},
		F32:    {{0, 0, 0x80, 0x7F}, {0, 0, 0x80, 0xFF}, {1, 0, 0xC0, 0x7F}},
		F16:    {{0, 0x7C}, {0, 0xFC}, {1, 0x7E}},
		BF16:   {{0x80, 0x7F}, {0x80, 0xFF}, {0xC1, 0x7F}},
		F8E4M3: {{0x7F}, {0xFF}},
		F8E5M2: {{0x7C}, {0xFC}, {0x7E}},
	}
	for d, sp := range specials {
		size := d.Size()
		for n := 0; n < 80; n++ {
			for trial := 0; trial < 30; trial++ {
				raw := make([]byte, n*size)
				for i := range raw {
					raw[i] = byte(r.Uint32())
				}
				for i := 0; i < n; i++ {
					if r.IntN(8) != 0 {
						raw[i*size+size-1] &= 0xBF // clear the exponent's top bit (sign kept)
					}
				}
				for k := r.IntN(2); k > 0 && n > 0; k-- {
					i := r.IntN(n)
					copy(raw[i*size:], sp[r.IntN(len(sp))])
				}
				want, _ := nonFiniteRef(t, d, raw)
				if got := hasNonFinite(d, raw); got != (want > 0) {
					t.Fatalf("%s n=%d: hasNonFinite %v, decoding finds %d in % x", d, n, got, want, raw)
				}
			}
		}
	}
	if hasNonFinite(I32, []byte{0, 0, 0x80, 0x7F}) {
		t.Error("an integer tensor has no NaN")
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// BenchmarkNonFiniteBF16 scans 64 MiB of finite bfloat16 weights (the
// common case): the cost added to every model load.
func BenchmarkNonFiniteBF16(b *testing.B) {
	raw := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < len(raw); i += 2 {
		binary.LittleEndian.PutUint16(raw[i:], uint16(r.Uint32())&0xBF7F)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if n, _ := NonFinite(BF16, raw); n != 0 {
			b.Fatal(n)
		}
	}
}

// BenchmarkToFloat32BF16 converts 64 MiB of finite bfloat16 weights to
// float32 with and without the NaN/Inf count (ToFloat32Checked against
// ToFloat32): the cost the check adds to loading.
func BenchmarkToFloat32BF16(b *testing.B) {
	raw := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < len(raw); i += 2 {
		binary.LittleEndian.PutUint16(raw[i:], uint16(r.Uint32())&0xBF7F)
	}
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := ToFloat32(BF16, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checked", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, n, _, err := ToFloat32Checked(BF16, raw); err != nil || n != 0 {
				b.Fatal(err, n)
			}
		}
	})
}
