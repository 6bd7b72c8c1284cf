package cpu

import (
	"os"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Host memory placed for huge pages.
//
// A decode step streams every weight from memory once. With 4 KiB pages a
// GEMV over a 49 MB matrix crosses 12,000 pages and the TLB misses on
// each; with 2 MiB pages it crosses 24. On the reference machine (Zen 4,
// Linux 6.18, transparent huge pages in "madvise" mode) the bf16 110M
// Llama decodes about 19% faster and its FP8 copy about 17% faster with
// its weights on huge pages (docs/cpu-engine.md, "Host memory").
//
// So on Linux, where transparent huge pages are granted to memory that
// asks for them (madvise(MADV_HUGEPAGE)) in the default "madvise" mode:
//
//   - weights (NewWeightBuffer, which the loader fills in place) are
//     packed into chunks of weightChunk bytes, 2 MiB-aligned and advised
//     before anything is written, so that their pages are faulted in as
//     huge pages; a weight larger than a quarter chunk gets a region of
//     its own, whose last huge page (for regions up to tailRegionMax)
//     takes the next small weights. Packing matters for small models,
//     whose matrices (1 to 3 MB in the 110M Llama) are too small to hold
//     an aligned huge page each;
//   - other values of at least hugeMin bytes (KV caches, large
//     activations: makeFlat) get an aligned, advised region of their own.
//
// The memory is the Go heap's: a []byte the collector frees once no slice
// into it is left (a buffer's slice keeps its whole chunk alive). Fresh
// memory from the system gets huge pages when first written; memory the
// heap recycles may already be mapped in small pages, which the kernel's
// khugepaged merges later, if at all. Nothing else changes: the values
// are the same dense row-major slices. TPUTOOL_HUGE_PAGES=0 turns it off
// (plain allocations), for comparison; other systems never do it.

// EnvHugePages set to 0 turns the placement for huge pages off.
const EnvHugePages = "TPUTOOL_HUGE_PAGES"

const (
	hugePage    = 2 << 20
	weightChunk = 32 << 20
	// tailRegionMax bounds the regions whose tail the arena packs into
	// (and so may keep alive after their weight is freed).
	tailRegionMax = 2 * weightChunk
	// hugeMin is the smallest value makeFlat places for huge pages: the
	// region is rounded up to whole huge pages, at most 1/4 more here.
	hugeMin = 8 << 20
)

// hugePages reports whether large buffers are placed for huge pages.
var hugePages = hugeSupported && os.Getenv(EnvHugePages) != "0"

// HugePages reports how this process places weights and large values:
// "off" (TPUTOOL_HUGE_PAGES=0), "unsupported" (not Linux), or else the
// kernel's transparent huge page mode, read from sysfs: "madvise" or
// "always" (the advice is taken), "never" (it is refused, small pages),
// "unknown" when the file cannot be read.
func HugePages() string {
	switch {
	case !hugeSupported:
		return "unsupported"
	case !hugePages:
		return "off"
	}
	return thpMode()
}

// hugeRegion returns n zeroed bytes of the Go heap, starting on a huge
// page boundary and advised for huge pages, in a slice of length and
// capacity n rounded up to whole huge pages. Its pages are faulted in
// here, by all the kernels' threads (a zero written to each huge page),
// rather than one at a time by whoever fills the region: a huge page's
// first touch costs the kernel a 2 MiB clear, and on some virtual
// machines far more (this one, Firecracker: 2.2 s a GiB from one thread,
// 1.2 s from two, against 0.4 s for small pages).
func hugeRegion(n int) []byte {
	n = (n + hugePage - 1) &^ (hugePage - 1)
	raw := make([]byte, n+hugePage)
	off := int((hugePage - uintptr(unsafe.Pointer(&raw[0]))%hugePage) % hugePage)
	b := raw[off : off+n : off+n]
	adviseHuge(b)
	kernels.Parallel(n/hugePage, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			b[p*hugePage] = 0
		}
	})
	return b
}

// arena packs weights into huge-page chunks (above).
type arena struct {
	mu   sync.Mutex
	cur  []byte // the chunk being filled
	used int
}

// alloc returns n zeroed bytes, 64-byte aligned, of a chunk or of a
// region of their own. A region is whole huge pages, so its tail past n
// would be resident and unused; when that tail is larger than what the
// current chunk has left, it becomes the chunk the next weights are
// packed into. Only for regions of at most tailRegionMax bytes: the
// arena's current chunk is kept alive by the arena (the backend's
// lifetime), and with it the whole region, after its weight is gone.
func (a *arena) alloc(n int) []byte {
	n64 := (n + 63) &^ 63
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > weightChunk/4 {
		r := hugeRegion(n)
		if len(r) <= tailRegionMax && len(r)-n64 > len(a.cur)-a.used {
			a.cur, a.used = r, n64
		}
		return r[:n:n]
	}
	if a.cur == nil || a.used+n64 > len(a.cur) {
		a.cur, a.used = hugeRegion(weightChunk), 0
	}
	b := a.cur[a.used : a.used+n : a.used+n]
	a.used += n64
	return b
}

// placeable reports whether makeFlat's types include dt as a plain
// fixed-size value that a view of bytes can hold.
func placeable(dt dtypes.DType) bool {
	switch dt {
	case dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Float16, dtypes.Int32, dtypes.Int64, dtypes.Uint8, dtypes.Int8:
		return true
	}
	return false
}

// viewFlat is a flat slice of n elements of dt over b's memory (len(b)
// at least n times dt's size), with the capacity of all of b's whole
// elements; b stays alive as long as the slice does.
func viewFlat(dt dtypes.DType, b []byte, n int) any {
	p, c := unsafe.Pointer(unsafe.SliceData(b)), len(b)/dt.Size()
	switch dt {
	case dtypes.Float32:
		return unsafe.Slice((*float32)(p), c)[:n]
	case dtypes.Float64:
		return unsafe.Slice((*float64)(p), c)[:n]
	case dtypes.BFloat16:
		return unsafe.Slice((*bfloat16.BFloat16)(p), c)[:n]
	case dtypes.Float16:
		return unsafe.Slice((*float16.Float16)(p), c)[:n]
	case dtypes.Int32:
		return unsafe.Slice((*int32)(p), c)[:n]
	case dtypes.Int64:
		return unsafe.Slice((*int64)(p), c)[:n]
	case dtypes.Uint8:
		return unsafe.Slice((*uint8)(p), c)[:n]
	case dtypes.Int8:
		return unsafe.Slice((*int8)(p), c)[:n]
	}
	panic("cpu backend: viewFlat of " + dt.String())
}

// makeWeight is makeFlat for a weight: packed into the backend's arena
// when huge pages are in use.
func (b *Backend) makeWeight(dt dtypes.DType, n int) any {
	if !hugePages || !placeable(dt) || n == 0 {
		return makeFlat(dt, n)
	}
	return viewFlat(dt, b.weights.alloc(n*dt.Size()), n)
}
