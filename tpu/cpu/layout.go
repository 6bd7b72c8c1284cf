package cpu

import (
	"unsafe"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Every op that moves data without arithmetic (Transpose, BroadcastInDim,
// Slice, Reverse, Concatenate, Pad, DynamicSlice, DynamicUpdateSlice,
// Gather, the reductions' and products' relayouts) describes the move as a
// walk and runs it through copyWalk. Values are dense row-major arrays
// (the last axis varies fastest), so any such move is an index space with
// a base offset and a stride per axis on each side; a stride may be 0 (a
// broadcast) or negative (Reverse). copyWalk copies elements by size (1, 2,
// 4 or 8 bytes), so one engine serves every dtype.

// stridesOf returns row-major element strides for dims.
func stridesOf(dims []int) []int {
	s := make([]int, len(dims))
	acc := 1
	for ax := len(dims) - 1; ax >= 0; ax-- {
		s[ax] = acc
		acc *= dims[ax]
	}
	return s
}

// walk describes a strided copy: for every index i over dims,
// dst[dBase + i·dStrides] = src[sBase + i·sStrides]. Bases and strides are
// in elements. Distinct indices must reach distinct dst elements: rows are
// copied in parallel.
type walk struct {
	dims               []int
	dStrides, sStrides []int
	dBase, sBase       int
}

// simplify drops axes of size 1 and merges neighbouring axes that are
// contiguous in both source and destination, so the inner loop is long:
// axis ax joins the axis kept before it when that one's stride is ax's
// stride times ax's size on both sides (a plain [rows, cols] copy becomes
// one run). A walk of only size-1 axes becomes rank 0: one element.
func (w walk) simplify() walk {
	var dims, ds, ss []int
	for ax, d := range w.dims {
		if d == 1 {
			continue
		}
		if k := len(dims) - 1; k >= 0 && ds[k] == w.dStrides[ax]*d && ss[k] == w.sStrides[ax]*d {
			dims[k] *= d
			ds[k], ss[k] = w.dStrides[ax], w.sStrides[ax]
			continue
		}
		dims = append(dims, d)
		ds = append(ds, w.dStrides[ax])
		ss = append(ss, w.sStrides[ax])
	}
	return walk{dims: dims, dStrides: ds, sStrides: ss, dBase: w.dBase, sBase: w.sBase}
}

func (w walk) count() int {
	n := 1
	for _, d := range w.dims {
		n *= d
	}
	return n
}

// copyWalk runs a strided copy over flat slices of the same element type.
func copyWalk(dst, src any, w walk) {
	w = w.simplify()
	if w.count() == 0 {
		return
	}
	db, sb := bytesOf(dst), bytesOf(src)
	size := elemSize(dst)
	switch size {
	case 1:
		walkT(db, sb, w)
	case 2:
		walkT(view[uint16](db), view[uint16](sb), w)
	case 4:
		walkT(view[uint32](db), view[uint32](sb), w)
	case 8:
		walkT(view[uint64](db), view[uint64](sb), w)
	default:
		panic("copyWalk: element size")
	}
}

// view reinterprets bytes as elements of T's size (same memory).
func view[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func elemSize(flat any) int { return int(reflectElem(flat).Size()) }

// copyGrain is the number of elements worth a thread in a copy.
const copyGrain = 1 << 15

// stridedGrain is copyGrain for elements that land a cache line apart,
// each a miss of its own.
const stridedGrain = 1 << 11

// walkT runs a simplified walk: one row per index of the outer axes,
// rows spread over threads by copyGrain elements. The innermost axis is a
// copy when it is contiguous on both sides, a fill when the source is one
// repeated element (stride 0), else an element loop.
func walkT[T any](dst, src []T, w walk) {
	rank := len(w.dims)
	if rank == 0 {
		dst[w.dBase] = src[w.sBase]
		return
	}
	inner := w.dims[rank-1]
	di, si := w.dStrides[rank-1], w.sStrides[rank-1]
	outer := w.count() / inner
	row := func(r int) {
		d, s := w.dBase, w.sBase
		for ax := rank - 2; ax >= 0; ax-- {
			i := r % w.dims[ax]
			r /= w.dims[ax]
			d += i * w.dStrides[ax]
			s += i * w.sStrides[ax]
		}
		switch {
		case di == 1 && si == 1:
			copy(dst[d:d+inner], src[s:s+inner])
		case di == 1 && si == 0:
			v := src[s]
			seg := dst[d : d+inner]
			for k := range seg {
				seg[k] = v
			}
		default:
			for k := 0; k < inner; k++ {
				dst[d+k*di] = src[s+k*si]
			}
		}
	}
	if outer == 1 && di != 1 && inner > stridedGrain {
		// One long strided run (a token's column written into a
		// transposed cache): each element is a cache line of its own, so
		// the threads share it by stridedGrain elements.
		d, s := w.dBase, w.sBase
		kernels.Parallel(inner, stridedGrain, func(lo, hi int) {
			for k := lo; k < hi; k++ {
				dst[d+k*di] = src[s+k*si]
			}
		})
		return
	}
	grainRows := max(1, copyGrain/max(inner, 1))
	kernels.Parallel(outer, grainRows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row(r)
		}
	})
}
