package cpu

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"
)

// Spare memory. A value an execution frees of spareMin bytes or more (KV
// caches moved by serve's relayouts, a batch's logits, a prefill's
// activations) goes to its backend's spares, not to its executable's own
// pool, and every executable's allocations of that size take from them
// first. Memory the Go heap hands out afresh costs a page fault per page
// on first touch, and on the development VM that is about 1 GB/s: a 4.7
// MB cache tensor took 5 ms to allocate and fill, against 0.1 ms in
// recycled memory. The programs that move caches into and between batch
// shapes are one per shape pair and each runs now and then, so their own
// pools are cold by their next call, and the shapes they free (the old
// layout) are not those they allocate (the new one): a spare serves any
// value up to its size, down to half of it.
//
// A spare is a region of bytes; the value made from it (viewFlat) is a
// slice of the value's length whose capacity covers the whole region, so
// that the region comes back whole when the value is freed
// (spareRegion). The values stay dense row-major slices of the Go heap,
// as makeFlat's are.
// Allocations from a spare are not zeroed: execState.alloc's never are.

// spareMin is the smallest value that goes to the spares, and spareCap
// bounds the bytes they keep, the oldest going first. (Variables for the
// tests, which lower them: every op's output recycled memory, a cap
// reached in a few allocations.)
var (
	spareMin = 64 << 10
	spareCap = 256 << 20
)

// spares is a backend's free large memory.
type spares struct {
	mu    sync.Mutex
	free  []spare // by size, smallest first
	bytes int
	seq   uint64 // give's count, for the age of a spare
}

// spare is one free region and when it was given.
type spare struct {
	r   []byte
	seq uint64
}

// take returns a spare region of at least n bytes and at most 2n (the
// smallest such), removed from the spares; nil if there is none.
func (p *spares) take(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.free, n, func(s spare, n int) int { return cmp.Compare(len(s.r), n) })
	if i == len(p.free) || len(p.free[i].r) > 2*n {
		return nil
	}
	r := p.free[i].r
	p.free = slices.Delete(p.free, i, i+1)
	p.bytes -= len(r)
	return r
}

// give keeps region r for a later take, dropping the oldest spares while
// the total would pass spareCap (r itself when it is larger than that).
func (p *spares) give(r []byte) {
	if len(r) > spareCap {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.bytes+len(r) > spareCap {
		old := 0
		for i, s := range p.free {
			if s.seq < p.free[old].seq {
				old = i
			}
		}
		p.bytes -= len(p.free[old].r)
		p.free = slices.Delete(p.free, old, old+1)
	}
	p.seq++
	i, _ := slices.BinarySearchFunc(p.free, len(r), func(s spare, n int) int { return cmp.Compare(len(s.r), n) })
	p.free = slices.Insert(p.free, i, spare{r, p.seq})
	p.bytes += len(r)
}

// release empties the spares, so that the collector can return their
// memory to the system.
func (p *spares) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.free)
	p.free, p.bytes = p.free[:0], 0
}

// held is the bytes the spares keep.
func (p *spares) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// spareRegion is the memory of a freed flat value that may become a
// spare: all the bytes its capacity covers, when they are at least
// spareMin and of a type viewFlat makes; else nil.
func spareRegion(flat any) []byte {
	switch f := flat.(type) {
	case []float32:
		return regionOf(f)
	case []float64:
		return regionOf(f)
	case []bfloat16.BFloat16:
		return regionOf(f)
	case []float16.Float16:
		return regionOf(f)
	case []int32:
		return regionOf(f)
	case []int64:
		return regionOf(f)
	case []uint8:
		return regionOf(f)
	case []int8:
		return regionOf(f)
	}
	return nil
}

// regionOf is the bytes f's capacity covers when they are at least
// spareMin, else nil.
func regionOf[T any](f []T) []byte {
	var z T
	n := cap(f) * int(unsafe.Sizeof(z))
	if n < spareMin {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f[:cap(f)]))), n)
}
