package kernels

import (
	"fmt"
	"math"
)

// MXFP4 weights. B [n, k] is held as GPT-OSS checkpoints store it
// (loader/quant): blocks, n rows of k/2 bytes, two FP4 E2M1 values a byte
// (the low nibble first), and scales, n rows of k/32 E8M0 exponents:
// B[j,p] = fp4(nibble)·2^(scales[j, p/32] − 127). k must be a multiple of
// 32. The kernels decode the values in registers (GEMV) or block by block
// into the GEMM's f32 scratch; products and sums are in f32, the weight
// itself is never widened in memory.

// MXFP4Block is the number of values that share one scale.
const MXFP4Block = 32

// fp4Pairs[b] are byte b's two values, low nibble first; e8m0[s] is
// 2^(s−127) (+Inf for 255, as transformers' ldexp gives). The assembly
// looks nibbles up as twice their value in int8 (fp4Twice, exact) and
// scales by e8m0Half[s] = 2^(s−128).
var (
	fp4Pairs [256][2]float32
	e8m0     [256]float32
	fp4Twice = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
	e8m0Half [256]float32
)

func init() {
	fp4 := [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for i := 0; i < 8; i++ {
		fp4[8+i] = -fp4[i]
	}
	fp4[8] = float32(math.Copysign(0, -1))
	for b := range fp4Pairs {
		fp4Pairs[b] = [2]float32{fp4[b&15], fp4[b>>4]}
	}
	for s := range e8m0 {
		e8m0[s] = float32(math.Ldexp(1, s-127))
		e8m0Half[s] = float32(math.Ldexp(1, s-128))
	}
}

// checkMXFP4 checks an MXFP4 matrix of n rows of k values.
func checkMXFP4(name string, n, k, nBlocks, nScales int) {
	if k%MXFP4Block != 0 {
		panic(fmt.Sprintf("kernels: %s: k=%d is not a multiple of %d", name, k, MXFP4Block))
	}
	if nBlocks < n*k/2 || nScales < n*k/MXFP4Block {
		panic(fmt.Sprintf("kernels: %s: %d bytes of blocks and %d scales, need %d and %d (n=%d, k=%d)", name, nBlocks, nScales, n*k/2, n*k/MXFP4Block, n, k))
	}
}

// GemmMXFP4NT is GemmF32NT with an MXFP4 B (blocks and scales as above,
// rows contiguous). C is overwritten. It panics if k is not a multiple of
// 32 or a slice is too short.
func GemmMXFP4NT(m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) {
	checkMat("GemmMXFP4NT A", m, k, lda, len(a))
	checkMat("GemmMXFP4NT C", m, n, ldc, len(c))
	checkMXFP4("GemmMXFP4NT", n, k, len(blocks), len(scales))
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	if m == 1 {
		av := a[:k]
		Parallel(n, gemvGrain(k), func(lo, hi int) {
			gemvRowsMXFP4(av, blocks[lo*k/2:], scales[lo*k/MXFP4Block:], c[lo:hi])
		})
		return
	}
	if m <= smallMMXFP4Max && smallMMXFP4(m, n, k, a, lda, blocks, scales, c, ldc) {
		return
	}
	gemmNT(m, n, k, a, lda, nil, 0, convMXFP4(blocks, scales, k), c, ldc)
}

// smallMMXFP4Max is the most rows of A the small-m MXFP4 path takes (an
// expert's few routed rows at batched decode): decoding B in registers
// once per eight rows beats decoding it once into the f32 scratch only
// that far (BenchmarkGemmMXFP4 on a 2-core AVX-512 VM: 1.33 against
// 1.45 ms at m = 4, 4.6 against 2.4 ms at m = 16).
const smallMMXFP4Max = 8

// convMXFP4 decodes rows [j0, j0+nb), values [p0, p0+kc) of an MXFP4 B
// with k values a row.
func convMXFP4(blocks, scales []byte, k int) bConverter {
	return func(dst []float32, j0, nb, p0, kc int) {
		for j := 0; j < nb; j++ {
			row := blocks[(j0+j)*k/2:]
			sc := scales[(j0+j)*k/MXFP4Block:]
			d := dst[j*kc : j*kc+kc]
			if p0%MXFP4Block == 0 && kc%MXFP4Block == 0 { // whole blocks (the usual chunking)
				widenMXFP4(d, row[p0/2:], sc[p0/MXFP4Block:])
				continue
			}
			p := 0
			for ; p < kc && (p0+p)%2 != 0; p++ { // an odd start: one high nibble
				d[p] = fp4Pairs[row[(p0+p)/2]][1] * e8m0[sc[(p0+p)/MXFP4Block]]
			}
			for ; p+1 < kc; p += 2 {
				q := p0 + p
				s := e8m0[sc[q/MXFP4Block]]
				v := &fp4Pairs[row[q/2]]
				d[p], d[p+1] = v[0]*s, v[1]*s
			}
			if p < kc {
				q := p0 + p
				d[p] = fp4Pairs[row[q/2]][0] * e8m0[sc[q/MXFP4Block]]
			}
		}
	}
}

// widenMXFP4Generic decodes whole MXFP4 blocks (len(dst)/32 of them)
// into dst.
func widenMXFP4Generic(dst []float32, blocks, scales []byte) {
	for q := 0; q < len(dst)/MXFP4Block; q++ {
		s := e8m0[scales[q]]
		d := (*[MXFP4Block]float32)(dst[q*MXFP4Block:])
		for i, b := range blocks[q*MXFP4Block/2 : (q+1)*MXFP4Block/2] {
			v := &fp4Pairs[b]
			d[2*i], d[2*i+1] = v[0]*s, v[1]*s
		}
	}
}

// gemvRowsMXFP4Generic is gemvRowsMXFP4 in Go.
func gemvRowsMXFP4Generic(a []float32, blocks, scales []byte, c []float32) {
	k := len(a)
	nb := k / MXFP4Block
	for j := range c {
		c[j] = dotMXFP4(a, blocks[j*k/2:(j+1)*k/2], scales[j*nb:(j+1)*nb])
	}
}

// dotMXFP4 is Σ_p a[p]·w[p] for one MXFP4 row w (len(scales) blocks).
func dotMXFP4(a []float32, blocks, scales []byte) float32 {
	var sum float32
	for q, s := range scales {
		x := (*[MXFP4Block]float32)(a[q*MXFP4Block:])
		blk := (*[MXFP4Block / 2]byte)(blocks[q*MXFP4Block/2:])
		var s0, s1, s2, s3 float32
		for i := 0; i < MXFP4Block/2; i += 2 {
			v, w := &fp4Pairs[blk[i]], &fp4Pairs[blk[i+1]]
			s0 += x[2*i] * v[0]
			s1 += x[2*i+1] * v[1]
			s2 += x[2*i+2] * w[0]
			s3 += x[2*i+3] * w[1]
		}
		sum += (s0 + s1 + s2 + s3) * e8m0[s]
	}
	return sum
}
