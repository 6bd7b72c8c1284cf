package kernels

import "math"

// MXFP4 weights. B [n, k] is held as GPT-OSS checkpoints store it
// (loader/quant): blocks, n rows of k/2 bytes, two FP4 E2M1 values a byte
// (the low nibble first), and scales, n rows of k/32 E8M0 exponents:
// B[j,p] = fp4(nibble)·2^(scales[j, p/32] − 127). k must be a multiple of
// 32. It is a nibble format (nibble.go), whose kernels it runs on.

// MXFP4Block is the number of values that share one scale.
const MXFP4Block = nibbleBlock

// fp4Pairs[b] are byte b's two values, low nibble first; e8m0[s] is
// 2^(s−127) (+Inf for 255, as transformers' ldexp gives). The assembly
// looks nibbles up as twice their value in int8 (fp4Twice, exact) and
// scales by e8m0Half[s] = 2^(s−128).
var (
	fp4Pairs [256][2]float32
	e8m0     [256]float32
	fp4Twice = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
	e8m0Half [256]float32

	// mxfp4Code is MXFP4 as a nibble format (nibble.go).
	mxfp4Code = nibbleCode{lut: &fp4Twice, vals: lutValues(&fp4Twice), half: e8m0Half[:], pairs: &fp4Pairs, scale: e8m0[:]}
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
func checkMXFP4(name string, n, k, nBlocks, nScales int) { checkNibbles(name, n, k, nBlocks, nScales) }

// GemmMXFP4NT is GemmF32NT with an MXFP4 B (blocks and scales as above,
// rows contiguous). C is overwritten. It panics if k is not a multiple of
// 32 or a slice is too short.
func GemmMXFP4NT(m, n, k int, a []float32, lda int, blocks, scales []byte, c []float32, ldc int) {
	checkMat("GemmMXFP4NT A", m, k, lda, len(a))
	checkMat("GemmMXFP4NT C", m, n, ldc, len(c))
	checkMXFP4("GemmMXFP4NT", n, k, len(blocks), len(scales))
	gemmNibbles(&mxfp4Code, m, n, k, a, lda, blocks, scales, c, ldc)
}
