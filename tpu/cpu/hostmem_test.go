package cpu

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// withHugePages runs f with the placement for huge pages on or off.
func withHugePages(t *testing.T, on bool, f func()) {
	old := hugePages
	hugePages = on
	defer func() { hugePages = old }()
	f()
}

func addrOf(flat any) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(bytesOf(flat)))) }

// Weights packed into the arena: each of the right type and length,
// zeroed, 64-byte aligned, none overlapping another; a chunk starts on a
// huge page; a large weight gets a region of its own on a huge page; and
// every slice stays valid after the collector ran (it keeps its chunk).
func TestWeightArena(t *testing.T) {
	withHugePages(t, true, func() {
		b := &Backend{}
		type span struct{ lo, hi uintptr }
		var spans []span
		var flats []any
		sizes := []struct {
			dt dtypes.DType
			n  int
		}{{dtypes.Float32, 768}, {dtypes.BFloat16, 768 * 768}, {dtypes.Int8, 13}, {dtypes.Uint8, 2048 * 768}, {dtypes.Float16, 3}, {dtypes.Int32, 5}}
		for i := 0; i < 40; i++ {
			c := sizes[i%len(sizes)]
			buf, flat, err := b.NewWeightBuffer(0, shapes.Make(c.dt, c.n))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := b.BufferShape(buf); got.DType != c.dt || flatLen(flat) != c.n {
				t.Fatalf("weight %d: %s of %d elements, want %s of %d", i, got, flatLen(flat), c.dt, c.n)
			}
			if dtypeOfFlat(flat) != c.dt {
				t.Fatalf("weight %d: %T for %s", i, flat, c.dt)
			}
			raw := bytesOf(flat)
			for _, v := range raw {
				if v != 0 {
					t.Fatalf("weight %d not zeroed", i)
				}
			}
			for j := range raw {
				raw[j] = byte(i + 1)
			}
			lo := addrOf(flat)
			if lo%64 != 0 {
				t.Fatalf("weight %d at %#x, not 64-byte aligned", i, lo)
			}
			for _, s := range spans {
				if lo < s.hi && s.lo < lo+uintptr(len(raw)) {
					t.Fatalf("weight %d [%#x, %#x) overlaps [%#x, %#x)", i, lo, lo+uintptr(len(raw)), s.lo, s.hi)
				}
			}
			spans = append(spans, span{lo, lo + uintptr(len(raw))})
			flats = append(flats, flat)
		}
		if first := addrOf(flats[0]); first%hugePage != 0 {
			t.Errorf("first weight of a chunk at %#x, not on a huge page", first)
		}
		_, big, _ := b.NewWeightBuffer(0, shapes.Make(dtypes.Float32, weightChunk/4/4+1))
		if a := addrOf(big); a%hugePage != 0 {
			t.Errorf("large weight at %#x, not on a huge page", a)
		}
		runtime.GC()
		for i, flat := range flats {
			for _, v := range bytesOf(flat) {
				if v != byte(i+1) {
					t.Fatalf("weight %d changed after a collection", i)
				}
			}
		}
	})
}

// A large weight's region is whole huge pages; the next small weights are
// packed into its tail rather than into a new chunk, unless the region is
// larger than tailRegionMax.
func TestWeightArenaTail(t *testing.T) {
	withHugePages(t, true, func() {
		b := &Backend{}
		n := weightChunk/4/4 + 1 // float32s: just over a quarter chunk
		_, big, _ := b.NewWeightBuffer(0, shapes.Make(dtypes.Float32, n))
		_, small, _ := b.NewWeightBuffer(0, shapes.Make(dtypes.BFloat16, 1000))
		want := addrOf(big) + uintptr((4*n+63)&^63)
		if got := addrOf(small); got != want {
			t.Errorf("small weight at %#x, want %#x (the large one's tail)", got, want)
		}
		bytesOf(big)[4*n-1] = 7
		if bytesOf(small)[0] != 0 {
			t.Error("the large weight's last byte overlaps the next one")
		}

		// A region above tailRegionMax lends nothing: the arena would keep
		// it alive.
		b = &Backend{}
		_, huge, _ := b.NewWeightBuffer(0, shapes.Make(dtypes.Uint8, tailRegionMax+1))
		_, next, _ := b.NewWeightBuffer(0, shapes.Make(dtypes.Uint8, 100))
		if lo, a := addrOf(huge), addrOf(next); a >= lo && a < lo+uintptr(tailRegionMax+hugePage) {
			t.Errorf("a small weight at %#x, in the tail of a region of %d bytes at %#x", a, tailRegionMax+1, lo)
		}
	})
}

// makeFlat places a large value on a huge page, and only with huge pages
// on; NewWeightBuffer is a plain allocation with them off.
func TestMakeFlatHuge(t *testing.T) {
	n := hugeMin / 4
	withHugePages(t, true, func() {
		f := makeFlat(dtypes.Float32, n).([]float32)
		if len(f) != n || cap(f) != n || addrOf(f)%hugePage != 0 {
			t.Errorf("large value: len %d cap %d at %#x, want %d on a huge page", len(f), cap(f), addrOf(f), n)
		}
		for _, v := range f {
			if v != 0 {
				t.Fatal("not zeroed")
			}
		}
	})
	withHugePages(t, false, func() {
		b := &Backend{}
		_, flat, err := b.NewWeightBuffer(0, shapes.Make(dtypes.BFloat16, 100))
		if err != nil || flatLen(flat) != 100 || b.weights.cur != nil {
			t.Errorf("with huge pages off: %d elements, err %v, arena used %v", flatLen(flat), err, b.weights.cur != nil)
		}
	})
}
