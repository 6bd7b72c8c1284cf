package kernels

import (
	"fmt"
	"sync"
)

// Blocking of the packed (NN) driver. A tile of C (all rows × nc columns) is
// one unit of parallel work: for each kcBlock slice of k its worker packs the
// B block into nr-column panels once, then for each mcBlock of rows packs an
// A block into mr-row panels and runs the microkernel over the panels. The A block (mcBlock×kcBlock×4 = 128 KiB)
// stays in L2, one B micro-panel (kcBlock×nr×4 = 32 KiB at nr 32) streams
// through L1.
const (
	mcBlock = 128
	kcBlock = 256
	ncMax   = 512
)

// microKernel computes a full mr×nr tile of C from packed panels. a is
// kc×mr (k-major), b is kc×nr; c has room for mr rows of stride ldc. If acc,
// the tile is added to C, otherwise it overwrites it.
type microKernel struct {
	mr, nr int
	fn     func(kc int, a, b, c []float32, ldc int, acc bool)
}

// bPacker fills dst with the B block for output columns [j0, j0+nc) and
// k range [p0, p0+kc), as ceil(nc/nr) panels of kc×nr floats, zero-padding
// the last panel's missing columns.
type bPacker func(dst []float32, j0, nc, p0, kc, nr int)

var packPool = sync.Pool{New: func() any {
	return &packBufs{
		a: make([]float32, mcBlock*kcBlock+64*kcBlock),
		b: make([]float32, (ncMax+64)*kcBlock),
	}
}}

type packBufs struct {
	a, b []float32
	tmp  [32 * 32]float32
}

// packA packs rows [i0, i0+mc) and k range [p0, p0+kc) of A into panels of
// mr rows, k-major, zero-padding the last panel.
func packA(dst, a []float32, lda, i0, mc, p0, kc, mr int) {
	var rows [16][]float32
	for ip := 0; ip < mc; ip += mr {
		panel := dst[(ip/mr)*mr*kc : (ip/mr+1)*mr*kc]
		n := min(mr, mc-ip)
		for ii := 0; ii < n; ii++ {
			o := (i0+ip+ii)*lda + p0
			rows[ii] = a[o : o+kc]
		}
		if n == mr && mr == 8 {
			// The AVX-512 panel: one k step is 8 consecutive floats.
			r0, r1, r2, r3 := rows[0][:kc], rows[1][:kc], rows[2][:kc], rows[3][:kc]
			r4, r5, r6, r7 := rows[4][:kc], rows[5][:kc], rows[6][:kc], rows[7][:kc]
			for p := 0; p < kc; p++ {
				d := panel[p*8 : p*8+8 : p*8+8]
				d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
				d[4], d[5], d[6], d[7] = r4[p], r5[p], r6[p], r7[p]
			}
			continue
		}
		for p := 0; p < kc; p++ {
			d := panel[p*mr : p*mr+mr]
			for ii := 0; ii < n; ii++ {
				d[ii] = rows[ii][p]
			}
			clear(d[n:])
		}
	}
}

// packerF32NN packs B stored [k, n] (row-major, stride ldb).
func packerF32NN(b []float32, ldb int) bPacker {
	return func(dst []float32, j0, nc, p0, kc, nr int) {
		for jp := 0; jp < nc; jp += nr {
			panel := dst[(jp/nr)*nr*kc : (jp/nr+1)*nr*kc]
			cols := min(nr, nc-jp)
			for p := 0; p < kc; p++ {
				src := b[(p0+p)*ldb+j0+jp : (p0+p)*ldb+j0+jp+cols]
				d := panel[p*nr : p*nr+nr]
				copy(d, src)
				clear(d[cols:])
			}
		}
	}
}

// emptyProduct settles a product with no work: nothing for an empty C,
// zeros for k = 0. It reports whether it did.
func emptyProduct(m, n, k int, c []float32, ldc int) bool {
	if m == 0 || n == 0 {
		return true
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return true
	}
	return false
}

// gemmPacked is the packed-panel driver (used for NN, where B is not
// contiguous along k): C[m,n] = A[m,k] · B where B is reached through pack.
// It overwrites C.
func gemmPacked(m, n, k int, a []float32, lda int, pack bPacker, c []float32, ldc int) {
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	mk := currentMicroKernel()
	mr, nr := mk.mr, mk.nr
	// A tile is a block of nc columns over all rows of C, so each B block
	// is packed once; A blocks are packed once per tile. Enough tiles for
	// every thread to get about two, but no narrower than a panel and no
	// wider than ncMax.
	nc := min(ncMax, (n+2*Threads()-1)/(2*Threads()))
	nc = max(nr, (nc+nr-1)/nr*nr)
	nBlocks := (n + nc - 1) / nc
	Parallel(nBlocks, 1, func(lo, hi int) {
		bufs := packPool.Get().(*packBufs)
		defer packPool.Put(bufs)
		for t := lo; t < hi; t++ {
			j0 := t * nc
			ncT := min(nc, n-j0)
			for p0 := 0; p0 < k; p0 += kcBlock {
				kc := min(kcBlock, k-p0)
				pack(bufs.b, j0, ncT, p0, kc, nr)
				for i0 := 0; i0 < m; i0 += mcBlock {
					mc := min(mcBlock, m-i0)
					packA(bufs.a, a, lda, i0, mc, p0, kc, mr)
					packedBlock(mk, bufs, c, ldc, i0, mc, j0, ncT, kc, p0 > 0)
				}
			}
		}
	})
}

// packedBlock runs the microkernel over one packed A block (mc rows) and B
// block (nc columns) of kc, into C at (i0, j0).
func packedBlock(mk microKernel, bufs *packBufs, c []float32, ldc, i0, mc, j0, nc, kc int, acc bool) {
	mr, nr := mk.mr, mk.nr
	for jp := 0; jp < nc; jp += nr {
		bp := bufs.b[(jp/nr)*nr*kc:]
		cols := min(nr, nc-jp)
		for ip := 0; ip < mc; ip += mr {
			ap := bufs.a[(ip/mr)*mr*kc:]
			rows := min(mr, mc-ip)
			ci := (i0+ip)*ldc + j0 + jp
			if rows == mr && cols == nr {
				mk.fn(kc, ap, bp, c[ci:ci+(mr-1)*ldc+nr], ldc, acc)
				continue
			}
			tmp := bufs.tmp[:mr*nr]
			mk.fn(kc, ap, bp, tmp, nr, false)
			for ii := 0; ii < rows; ii++ {
				dst := c[ci+ii*ldc : ci+ii*ldc+cols]
				src := tmp[ii*nr : ii*nr+cols]
				if acc {
					for jj := range dst {
						dst[jj] += src[jj]
					}
				} else {
					copy(dst, src)
				}
			}
		}
	}
}

// gemvGrain is the fewest output rows a GEMV worker takes: enough that the
// hand-off cost is small next to streaming the rows.
func gemvGrain(k int) int {
	return max(16, 16384/max(k, 1))
}

func checkGroups(name string, n, k, groupSize, nScales int) int {
	if groupSize <= 0 || k%groupSize != 0 {
		panic(fmt.Sprintf("kernels: %s: group size %d does not divide k=%d", name, groupSize, k))
	}
	ng := k / groupSize
	if nScales < n*ng {
		panic(fmt.Sprintf("kernels: %s: %d scales, need %d (n=%d × %d groups)", name, nScales, n*ng, n, ng))
	}
	return ng
}

// GemmF32NT computes C[m,n] = A[m,k] · Bᵀ, B being [n,k] (a Linear weight
// [out, in]) read in place. Row strides are lda, ldb, ldc. C is overwritten.
// m == 1 takes the GEMV path, which streams B once split over n across the
// pool; m > 1 the blocked GEMM. It panics if a slice is too short for its
// shape.
func GemmF32NT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkMat("GemmF32NT A", m, k, lda, len(a))
	checkMat("GemmF32NT B", n, k, ldb, len(b))
	checkMat("GemmF32NT C", m, n, ldc, len(c))
	if m == 0 || n == 0 {
		return
	}
	if m == 1 {
		av := a[:k]
		if n <= gemvGrain(k) { // one chunk, without a closure on the heap: attention's rows
			gemvRowsF32(av, b, ldb, c[:n])
			return
		}
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRowsF32(av, b[lo*ldb:], ldb, c[lo:hi])
		})
		return
	}
	if k <= shortNTMaxK && m >= shortNTMinM {
		gemmPacked(m, n, k, a, lda, packerF32NT(b, ldb), c, ldc)
		return
	}
	gemmNT(m, n, k, a, lda, b, ldb, nil, c, ldc)
}

// A short contraction (attention scores: k is the head size) spends the
// NT tile's time on reducing its accumulators, once per tile for only
// k/16 steps; the packed driver's tiles need no reduction, which pays for
// transposing B into panels from 32 rows of A on. BenchmarkGEMM's f32 and
// f32-packed cases: 128×512×64 97 against 152 GFLOP/s, 32×512×64 35-52
// against 87, 128×512×256 135-140 against 156; 16×256×64 81 against 61.
const (
	shortNTMaxK = 256
	shortNTMinM = 32
)

// GemmBF16NT is GemmF32NT with B in bfloat16, given as raw uint16 bits.
// Products and sums are in f32.
func GemmBF16NT(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkMat("GemmBF16NT A", m, k, lda, len(a))
	checkMat("GemmBF16NT B", n, k, ldb, len(b))
	checkMat("GemmBF16NT C", m, n, ldc, len(c))
	gemm16NT(m, n, k, a, lda, b, ldb, c, ldc, gemvRowsBF16, convBF16, smallMBF16)
}

// GemmF16NT is GemmF32NT with B in IEEE half precision, given as raw uint16
// bits. Products and sums are in f32.
func GemmF16NT(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) {
	checkMat("GemmF16NT A", m, k, lda, len(a))
	checkMat("GemmF16NT B", n, k, ldb, len(b))
	checkMat("GemmF16NT C", m, n, ldc, len(c))
	gemm16NT(m, n, k, a, lda, b, ldb, c, ldc, gemvRowsF16, convF16, smallMF16)
}

// gemm16NT is the NT product with a checked 16-bit B: the GEMV rows
// kernel for one row of A, the small-m path (small, where the level has
// one) up to smallM16Max rows, else the blocked GEMM widening B through
// conv.
// (The callers check the shapes with constant names: nothing is built on
// the decode path.)
func gemm16NT(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int,
	gemvRows func(a []float32, b []uint16, ldb int, c []float32), conv func(b []uint16, ldb int) bConverter,
	small func(m, n, k int, a []float32, lda int, b []uint16, ldb int, c []float32, ldc int) bool) {
	if m == 0 || n == 0 {
		return
	}
	if m == 1 {
		av := a[:k]
		if n <= gemvGrain(k) { // as in GemmF32NT
			gemvRows(av, b, ldb, c[:n])
			return
		}
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRows(av, b[lo*ldb:], ldb, c[lo:hi])
		})
		return
	}
	if m <= smallM16Max && small(m, n, k, a, lda, b, ldb, c, ldc) {
		return
	}
	gemmNT(m, n, k, a, lda, nil, 0, conv(b, ldb), c, ldc)
}

// smallM16Max is the most rows of A the small-m 16-bit path takes: up to
// it, reading B once and widening it in registers (each block of four B
// rows multiplied by every group of four A rows while it is in L1) beats
// widening B into an f32 panel first, as the decode of a few sequences
// (and an expert's few routed rows) does; beyond it the blocked GEMM's
// reuse wins. Measured by BenchmarkGEMMSmallM.
const smallM16Max = 64

// GemmInt8NT is GemmF32NT with weight-only int8 B: B[j,p] stands for
// b[j,p]·scales[j, p/groupSize]. scales is [n, k/groupSize] (row-major, no
// padding); groupSize must divide k, and groupSize == k means one scale per
// output channel. Products and sums are in f32. It panics if groupSize does
// not divide k or a slice is too short.
func GemmInt8NT(m, n, k int, a []float32, lda int, b []int8, ldb int, scales []float32, groupSize int, c []float32, ldc int) {
	checkMat("GemmInt8NT A", m, k, lda, len(a))
	checkMat("GemmInt8NT B", n, k, ldb, len(b))
	checkMat("GemmInt8NT C", m, n, ldc, len(c))
	if emptyProduct(m, n, k, c, ldc) {
		return
	}
	ng := checkGroups("GemmInt8NT", n, k, groupSize, len(scales))
	if m == 1 {
		av := a[:k]
		if n <= gemvGrain(k) { // as in GemmF32NT: attention's rows over an int8 KV cache
			gemvRowsI8(av, b, ldb, scales, ng, groupSize, c[:n])
			return
		}
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRowsI8(av, b[lo*ldb:], ldb, scales[lo*ng:], ng, groupSize, c[lo:hi])
		})
		return
	}
	if smallMInt8(m, n, k, a, lda, b, ldb, scales, ng, groupSize, c, ldc) {
		return
	}
	gemmNT(m, n, k, a, lda, nil, 0, convI8(b, ldb, scales, ng, groupSize), c, ldc)
}

// int8SmallM is the most rows of A the small-m int8 product takes with
// AVX-512 (it widens each pair of B rows once per eight rows of A; at 32
// rows it is even with the blocked GEMM, which widens B once per tile),
// and int8SmallMAVX2 with AVX2 (whose blocked path widens B without
// vectors: the small-m product still wins at 16 rows).
var int8SmallM, int8SmallMAVX2 = 16, 16

// GemmF32NN computes C[m,n] = A[m,k] · B[k,n], both row-major (strides lda,
// ldb, ldc): activations times activations, as in attention scores·values or
// an im2col convolution. C is overwritten. It panics if a slice is too short.
func GemmF32NN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkMat("GemmF32NN A", m, k, lda, len(a))
	checkMat("GemmF32NN B", k, n, ldb, len(b))
	checkMat("GemmF32NN C", m, n, ldc, len(c))
	if m == 0 || n == 0 {
		return
	}
	if m == 1 {
		Parallel(n, 256, func(lo, hi int) {
			cr := c[lo:hi]
			clear(cr)
			for p := 0; p < k; p++ {
				axpy(a[p], b[p*ldb+lo:p*ldb+hi], cr)
			}
		})
		return
	}
	gemmPacked(m, n, k, a, lda, packerF32NN(b, ldb), c, ldc)
}

// packerF32NT packs B stored [n, k] (a row per output column, stride ldb)
// into the panels of the packed driver: the transpose NN's packer copies.
func packerF32NT(b []float32, ldb int) bPacker {
	return func(dst []float32, j0, nc, p0, kc, nr int) {
		for jp := 0; jp < nc; jp += nr {
			panel := dst[(jp/nr)*nr*kc : (jp/nr+1)*nr*kc]
			cols := min(nr, nc-jp)
			for jj := 0; jj < cols; jj++ {
				src := b[(j0+jp+jj)*ldb+p0 : (j0+jp+jj)*ldb+p0+kc]
				for p, v := range src {
					panel[p*nr+jj] = v
				}
			}
			if cols < nr {
				for p := 0; p < kc; p++ {
					clear(panel[p*nr+cols : p*nr+nr])
				}
			}
		}
	}
}
