package kernels

import "sync"

// The NT GEMM (C = A·Bᵀ, B [n, k]) needs no packing: A rows and B rows are
// both contiguous along k, so the microkernel is a block of dot products,
// mr rows of A by 4 rows of B, each accumulator a SIMD register of partial
// sums reduced at the end. f32 weights are read in place; bf16, f16 and int8
// weights are widened (and scaled) block by block into a per-worker f32
// scratch, once per block and reused by every row of A.
//
// Blocking: a tile is ntMB rows of A by ntNB rows of B, the unit of parallel
// work. k is cut into chunks of at most ntKC, so that a tile's B block
// (ntNB×ntKC×4 = 256 KiB) stays in L2 while mr rows of A (16 KiB) stay in L1.
const (
	ntMB = 128
	ntNB = 64
	ntKC = 1024
)

// ntKernelOf computes an mr×4 tile of C (row stride ldc, elements) from mr
// rows of A (a[i], i < mr) and 4 rows of B (b[j]), each of k elements of
// T, k a positive multiple of kstep. If acc it adds to C. dot is the plain
// dot product that finishes the elements past the last whole kstep.
type ntKernelOf[T float32 | uint16] struct {
	mr, kstep int
	fn        func(a *[4][]T, b *[4][]T, k int, c []float32, ldc int, acc bool)
	dot       func(a, b []T) float32
}

// ntKernel is the f32 NT kernel: A and B rows in f32.
type ntKernel = ntKernelOf[float32]

var ntGeneric = ntKernel{mr: 4, kstep: 1, dot: dotF32, fn: func(a *[4][]float32, b *[4][]float32, k int, c []float32, ldc int, acc bool) {
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			s := dotF32(a[i][:k], b[j])
			if acc {
				c[i*ldc+j] += s
			} else {
				c[i*ldc+j] = s
			}
		}
	}
}}

// bConverter widens B rows [j0, j0+nb), columns [p0, p0+kc) to f32 into dst
// with row stride kc.
type bConverter func(dst []float32, j0, nb, p0, kc int)

func convBF16(b []uint16, ldb int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			widenBF16(dst[j*kc:j*kc+kc], b[(j0+j)*ldb+p0:])
		}
	}
}

func convF16(b []uint16, ldb int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			widenF16(dst[j*kc:j*kc+kc], b[(j0+j)*ldb+p0:])
		}
	}
}

func convI8(b []int8, ldb int, scales []float32, ng, g int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			row := b[(j0+j)*ldb:]
			sc := scales[(j0+j)*ng : (j0+j)*ng+ng]
			d := dst[j*kc : j*kc+kc]
			// Walk the groups that overlap [p0, p0+kc).
			for p := 0; p < kc; {
				q := (p0 + p) / g
				end := min(kc, (q+1)*g-p0)
				widenI8(d[p:end], row[p0+p:p0+end], sc[q])
				p = end
			}
		}
	}
}

func widenBF16Generic(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = bf16ToF32(v)
	}
}

func widenF16Generic(dst []float32, src []uint16) {
	t := f16Lookup()
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = t[v]
	}
}

func widenI8Generic(dst []float32, src []int8, s float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = float32(v) * s
	}
}

var ntScratch = sync.Pool{New: func() any {
	s := make([]float32, ntNB*ntKC)
	return &s
}}

// gemmNT computes C = A·Bᵀ. B is f32 b (stride ldb) when conv is nil,
// otherwise conv widens it block by block.
func gemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, conv bConverter, c []float32, ldc int) {
	if conv == nil {
		ntDrive(currentNTKernel(), m, n, k, a, lda, inPlaceB(b, ldb), false, c, ldc)
		return
	}
	ntDrive(currentNTKernel(), m, n, k, a, lda, func() (ntBlock[float32], func()) {
		scratch := ntScratch.Get().(*[]float32)
		return func(j0, nb, p0, kc int) ([]float32, int, int) {
			conv(*scratch, j0, nb, p0, kc)
			return *scratch, 0, kc
		}, func() { ntScratch.Put(scratch) }
	}, true, c, ldc)
}

// ntBlock gives the B rows [j0, j0+nb), columns [p0, p0+kc) of one tile as
// a slice, the offset of their first element and their row stride.
type ntBlock[T float32 | uint16] func(j0, nb, p0, kc int) (bb []T, off, ld int)

// inPlaceB reads B where it lies (stride ldb).
func inPlaceB[T float32 | uint16](b []T, ldb int) func() (ntBlock[T], func()) {
	return func() (ntBlock[T], func()) {
		return func(j0, _, p0, _ int) ([]T, int, int) { return b, j0*ldb + p0, ldb }, func() {}
	}
}

// ntDrive walks the tiles of C = A·Bᵀ over the pool. Each worker gets its
// B access from newBlock (and hands it back through the release func), so
// that a widening source owns one scratch per worker.
//
// With decodes (newBlock widens or decodes B into its scratch) the tiles
// are taken B block by B block: the tiles a worker claims that share a B
// block get it decoded once for each chunk of k, where the A-major order
// decoded it again for every ntMB rows of A. A prefill of 512 rows over
// int4 weights decoded each block four times. In-place B (no decoding)
// keeps the A-major order, under which a tile's rows of A stay in cache
// across B blocks.
func ntDrive[T float32 | uint16](kern ntKernelOf[T], m, n, k int, a []T, lda int,
	newBlock func() (ntBlock[T], func()), decodes bool, c []float32, ldc int) {
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	mr, kstep := kern.mr, kern.kstep
	chunks := (k + ntKC - 1) / ntKC
	step := max(16, kstep)
	kc := ((k+chunks-1)/chunks + step - 1) / step * step
	mBlocks := (m + ntMB - 1) / ntMB
	nBlocks := (n + ntNB - 1) / ntNB
	Parallel(mBlocks*nBlocks, 1, func(lo, hi int) {
		block, release := newBlock()
		defer release()
		var tmp [16]float32
		var ar, br [4][]T // on the heap (kern.fn is a variable): once a chunk
		// tile multiplies the rows [i0, i0+mb) of A by B block bb (the
		// rows [j0, j0+nb), columns [p0, p0+kcT) of B, from bOff, stride
		// bld) into C.
		tile := func(i0, mb, j0, nb, p0, kcT int, bb []T, bOff, bld int) {
			kFull := kcT / kstep * kstep
			acc := p0 > 0
			for ii := 0; ii < mb; ii += mr {
				rows := min(mr, mb-ii)
				aOff := (i0+ii)*lda + p0
				for i := range mr {
					o := aOff + min(i, rows-1)*lda
					ar[i] = a[o : o+kcT]
				}
				for jj := 0; jj < nb; jj += 4 {
					cols := min(4, nb-jj)
					cOff := (i0+ii)*ldc + j0 + jj
					bo := bOff + jj*bld
					for j := range 4 {
						o := bo + min(j, cols-1)*bld
						br[j] = bb[o : o+kcT]
					}
					switch {
					case kFull == 0:
						if !acc {
							for i := 0; i < rows; i++ {
								clear(c[cOff+i*ldc : cOff+i*ldc+cols])
							}
						}
					case rows == mr && cols == 4:
						kern.fn(&ar, &br, kFull, c[cOff:cOff+(mr-1)*ldc+4], ldc, acc)
					default:
						// Edge tile: the missing rows repeat the last
						// valid one; compute into tmp, keep the valid part.
						kern.fn(&ar, &br, kFull, tmp[:], 4, false)
						for i := 0; i < rows; i++ {
							for j := 0; j < cols; j++ {
								if acc {
									c[cOff+i*ldc+j] += tmp[i*4+j]
								} else {
									c[cOff+i*ldc+j] = tmp[i*4+j]
								}
							}
						}
					}
					if kFull < kcT {
						for i := 0; i < rows; i++ {
							for j := 0; j < cols; j++ {
								c[cOff+i*ldc+j] += kern.dot(ar[i][kFull:], br[j][kFull:])
							}
						}
					}
				}
			}
		}
		if !decodes {
			for t := lo; t < hi; t++ {
				i0 := (t / nBlocks) * ntMB
				j0 := (t % nBlocks) * ntNB
				mb := min(ntMB, m-i0)
				nb := min(ntNB, n-j0)
				for p0 := 0; p0 < k; p0 += kc {
					kcT := min(kc, k-p0)
					bb, bOff, bld := block(j0, nb, p0, kcT)
					tile(i0, mb, j0, nb, p0, kcT, bb, bOff, bld)
				}
			}
			return
		}
		// B-major: task t is B block t/mBlocks, A rows (t%mBlocks)·ntMB.
		// The claimed tasks of one B block take each chunk of k in turn,
		// which keeps each tile's chunks in order (acc).
		for t := lo; t < hi; {
			jb := t / mBlocks
			end := min(hi, (jb+1)*mBlocks)
			j0 := jb * ntNB
			nb := min(ntNB, n-j0)
			for p0 := 0; p0 < k; p0 += kc {
				kcT := min(kc, k-p0)
				bb, bOff, bld := block(j0, nb, p0, kcT)
				for u := t; u < end; u++ {
					i0 := (u % mBlocks) * ntMB
					tile(i0, min(ntMB, m-i0), j0, nb, p0, kcT, bb, bOff, bld)
				}
			}
			t = end
		}
	})
}
