package kernels

// NVFP4 weights (NVIDIA's FP4, compressed-tensors nvfp4-pack-quantized),
// held as the checkpoint stores them: B [n, k] as packed, n rows of k/2
// bytes of FP4 E2M1 codes (the low nibble first, MXFP4's values), and
// codes, n rows of k/16 bytes, each 16 values' E4M3 scale as stored,
// which index the matrix's table half of 256 f32 entries: half[s] is half
// the effective scale of code s (the E4M3 value over the tensor's global
// scale, as compressed-tensors divides it, in f32), so that
//
//	B[j, p] = 2·fp4(nibble) · half[codes[j, p/16]]
//
// is fp4(nibble) times the effective scale exactly (halving an f32 is
// exact, and so is doubling an E2M1 value). It is a nibble format with
// two scale codes a block (nibble.go, split): half a byte a weight and a
// sixteenth of a byte of scale, plus 1 KiB a matrix.

// NVFP4Group is the number of values that share one NVFP4 scale.
const NVFP4Group = nibbleBlock / 2

// fp4TwicePairs are each byte's two values doubled (low nibble first,
// fp4Twice's): the Go fallback's values for half's scales.
var fp4TwicePairs = func() (p [256][2]float32) {
	for b := range p {
		p[b] = [2]float32{float32(fp4Twice[b&15]), float32(fp4Twice[b>>4])}
	}
	return p
}()

// fp4TwiceVals is fp4Twice as f32 (the GEMV's lookup).
var fp4TwiceVals = lutValues(&fp4Twice)

// nvfp4Code is the nibble format of an NVFP4 matrix with table half.
func nvfp4Code(half []float32) *nibbleCode {
	t := half[:256]
	return &nibbleCode{lut: &fp4Twice, vals: fp4TwiceVals, half: t, pairs: &fp4TwicePairs, scale: t, split: true}
}

// GemmNVFP4NT is GemmF32NT with an NVFP4 B (packed, codes and half as
// above, rows contiguous). C is overwritten. It panics if k is not a
// multiple of 32, a slice is too short or half is not 256 entries.
func GemmNVFP4NT(m, n, k int, a []float32, lda int, packed, codes []byte, half []float32, c []float32, ldc int) {
	checkMat("GemmNVFP4NT A", m, k, lda, len(a))
	checkMat("GemmNVFP4NT C", m, n, ldc, len(c))
	checkNibbles("GemmNVFP4NT", n, k, len(packed), len(codes)/2)
	checkInt4Table("GemmNVFP4NT", half)
	gemmNibbles(nvfp4Code(half), m, n, k, a, lda, packed, codes, c, ldc)
}

// Grouped FP4: NVFP4 expert stacks, whose experts each have their own
// global scale, are held as grouped int4 is (int4groups.go) with FP4
// E2M1 codes for values: B [n, k] as packed (as above) and half, f32
// [n, k/group], half of each group's effective scale, so that
//
//	B[j, p] = 2·fp4(nibble) · half[j, p/group]
//
// (groups of 16: the split format; a row's scales are its table).

// fp4GroupsCode is the nibble format of a grouped FP4 matrix with
// half-scales [n, k/group].
func fp4GroupsCode(half []float32, ng, group int) *nibbleCode {
	return &nibbleCode{lut: &fp4Twice, vals: fp4TwiceVals, pairs: &fp4TwicePairs, rows: half, stride: ng, split: group < Int4Block}
}

// GemmFP4GroupsNT is GemmF32NT with a grouped FP4 B (packed and half as
// above). C is overwritten. It panics on a group CheckInt4Groups refuses
// or a slice too short.
func GemmFP4GroupsNT(m, n, k int, a []float32, lda int, packed []byte, half []float32, group int, c []float32, ldc int) {
	gemmGroups(&[3]string{"GemmFP4GroupsNT A", "GemmFP4GroupsNT C", "GemmFP4GroupsNT"}, fp4GroupsCode, m, n, k, a, lda, packed, half, nil, group, c, ldc)
}

// GemmFP4GroupsQ8NT is GemmFP4GroupsNT on A's rows quantised to int8 per
// block of 32 and dequantised (FakeQuantizeQ8), as gemmNibblesQ8 runs a
// format the VNNI kernels do not take.
func GemmFP4GroupsQ8NT(m, n, k int, a []float32, lda int, packed []byte, half []float32, group int, c []float32, ldc int) {
	checkMat("GemmFP4GroupsQ8NT A", m, k, lda, len(a))
	checkMat("GemmFP4GroupsQ8NT C", m, n, ldc, len(c))
	if k == 0 || n == 0 || m == 0 {
		emptyProduct(m, n, k, c, ldc)
		return
	}
	checkInt4Groups("GemmFP4GroupsQ8NT", n, k, packed, half, nil, group)
	gemmNibblesQ8(fp4GroupsCode(half, k/group, group), m, n, k, a, lda, packed, int4GroupCodesOf(n, k, group), c, ldc)
}

// GemmNVFP4Q8NT is GemmNVFP4NT on A's rows quantised to int8 per block of
// 32 and dequantised (FakeQuantizeQ8): the product int8 activations give
// (the VNNI kernels take a scale code a block, not NVFP4's two).
func GemmNVFP4Q8NT(m, n, k int, a []float32, lda int, packed, codes []byte, half []float32, c []float32, ldc int) {
	checkMat("GemmNVFP4Q8NT A", m, k, lda, len(a))
	checkMat("GemmNVFP4Q8NT C", m, n, ldc, len(c))
	checkNibbles("GemmNVFP4Q8NT", n, k, len(packed), len(codes)/2)
	checkInt4Table("GemmNVFP4Q8NT", half)
	if k == 0 || n == 0 || m == 0 {
		emptyProduct(m, n, k, c, ldc)
		return
	}
	gemmNibblesQ8(nvfp4Code(half), m, n, k, a, lda, packed, codes, c, ldc)
}
