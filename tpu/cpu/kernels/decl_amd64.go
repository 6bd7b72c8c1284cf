//go:build amd64 && !purego

package kernels

// Assembly kernels (gemv_amd64.s, gemm_amd64.s, rows_amd64.s). Strides are
// in bytes; k is a multiple of 16 for the GEMV kernels.

//go:noescape
func gemvF32AVX512(a, b *float32, ldb, k int, c *float32, n int)

//go:noescape
func gemvBF16AVX512(a *float32, b *uint16, ldb, k int, c *float32, n int)

//go:noescape
func gemvF16AVX512(a *float32, b *uint16, ldb, k int, c *float32, n int)

//go:noescape
func gemvI8AVX512(a *float32, b *int8, ldb, k int, c *float32, n int, scales *float32, ngBytes, grp int)

//go:noescape
func gemvF32AVX2(a, b *float32, ldb, k int, c *float32, n int)

//go:noescape
func gemvBF16AVX2(a *float32, b *uint16, ldb, k int, c *float32, n int)

//go:noescape
func gemvF16AVX2(a *float32, b *uint16, ldb, k int, c *float32, n int)

//go:noescape
func gemvI8AVX2(a *float32, b *int8, ldb, k int, c *float32, n int, scales *float32, ngBytes, grp int)

//go:noescape
func gemmDot4x4AVX512(a, b *[4]*float32, k int, c *float32, ldc, acc int)

//go:noescape
func gemmDot3x4AVX2(a *[3]*float32, b *[4]*float32, k int, c *float32, ldc, acc int)

//go:noescape
func gemmPack8x32AVX512(kc int, a, b, c *float32, ldc, acc int)

//go:noescape
func gemmPack6x16AVX2(kc int, a, b, c *float32, ldc, acc int)

//go:noescape
func expSubSumAVX512(x *float32, n int, mx float32) float32

//go:noescape
func siluMulAVX512(dst, gate, up *float32, n int)

//go:noescape
func sumSquaresAVX512(x *float32, n int) float32

//go:noescape
func scaleMulAVX512(dst, x, w *float32, n int, s float32)

//go:noescape
func scaleInPlaceAVX512(x *float32, n int, s float32)

//go:noescape
func addInPlaceAVX512(dst, x *float32, n int)

//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, n int)

//go:noescape
func widenF16AVX512(dst *float32, src *uint16, n int)

//go:noescape
func widenI8AVX512(dst *float32, src *int8, n int, s float32)

//go:noescape
func expSubSumAVX2(x *float32, n int, mx float32) float32

//go:noescape
func siluMulAVX2(dst, gate, up *float32, n int)

//go:noescape
func sumSquaresAVX2(x *float32, n int) float32

//go:noescape
func scaleMulAVX2(dst, x, w *float32, n int, s float32)

//go:noescape
func scaleInPlaceAVX2(x *float32, n int, s float32)

//go:noescape
func addInPlaceAVX2(dst, x *float32, n int)

//go:noescape
func dot4x4BF16AVX512(a *[4]*float32, b *uint16, ldb, k int, c *float32, ldc int)

//go:noescape
func dot4x4F16AVX512(a *[4]*float32, b *uint16, ldb, k int, c *float32, ldc int)

//go:noescape
func widenNibblesAVX512(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *float32)

//go:noescape
func dotNibblesAVX2(a *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *float32) float32

//go:noescape
func widenNibblesAVX2(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *float32)

//go:noescape
func dotNibblesx8x2AVX512(a *[8]*float32, blocks, scales *[2]*byte, nblocks int, lut *[16]int8, half *[2]*float32, c *[16]float32)

// dotNibblesx8x2x16AVX512 is dotNibblesx8x2AVX512 with two scale codes
// a block, one per 16 values.
//
//go:noescape
func dotNibblesx8x2x16AVX512(a *[8]*float32, blocks, scales *[2]*byte, nblocks int, lut *[16]int8, half *[2]*float32, c *[16]float32)

//go:noescape
func dotNibblesPermAVX512(a *float32, blocks, scales *byte, nblocks, nrows int, vals *[16]float32, half *float32, tstride int, c *float32)

// dotNibblesPerm16AVX512 is dotNibblesPermAVX512 with two scale codes a
// block, one per 16 values.
//
//go:noescape
func dotNibblesPerm16AVX512(a *float32, blocks, scales *byte, nblocks, nrows int, vals *[16]float32, half *float32, tstride int, c *float32)

// widenNibbles16AVX512 is widenNibblesAVX512 with two scale codes a
// block, one per 16 values.
//
//go:noescape
func widenNibbles16AVX512(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *float32)

//go:noescape
func dotInt4Q8VNNI(q *int8, corr *int32, sa *float32, packed, codes *byte, npairs, nrows int, table *float32, tstride int, c *float32)

//go:noescape
func dotBF16x4x4AVX512(a, b *[4]*uint16, k int, c *float32, ldc, acc int)

//go:noescape
func dotBF16x8x2AVX512(a *[8]*uint16, b *[2]*uint16, k int, c *[16]float32)

//go:noescape
func roundBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func logisticAVX512(dst, src *float32, n int)

//go:noescape
func erfAVX512(dst, src *float32, n int)

//go:noescape
func tanhAVX512(dst, src *float32, n int)

//go:noescape
func gemvFP8AVX512(a *float32, b *byte, ldb, k int, c *float32, n int)

//go:noescape
func widenFP8AVX512(dst *float32, src *byte, n int, scale float32)

//go:noescape
func gemvFP8AVX2(a *float32, b *byte, ldb, k int, c *float32, n int)

//go:noescape
func widenFP8AVX2(dst *float32, src *byte, n int, scale float32)

//go:noescape
func dotInt8Q8VNNI(q *int8, sc *float32, b *int8, ldb, kbytes, nrows int, sw *float32, ngw4 int, c *float32)

//go:noescape
func dotInt8x8x2AVX512(a *[8]*float32, b *[2]*int8, scales *[2]*float32, ngroups, g16 int, c *[16]float32)

//go:noescape
func dotInt8x4x4AVX512(a *[4]*float32, b *[4]*int8, scales *[4]*float32, ngroups, g16 int, c *[16]float32)

//go:noescape
func dotFP8x8x2AVX512(a *[8]*float32, b *[2]*byte, scales *[2]*float32, ngroups, g16 int, c *[16]float32)

//go:noescape
func dotFP8x4x4AVX512(a *[4]*float32, b *[4]*byte, scales *[4]*float32, ngroups, g16 int, c *[16]float32)

//go:noescape
func dotInt8X4AVX2(a *[4]*float32, b *int8, scales *float32, ngroups, g16 int, c *[4]float32)

//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func widenF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func widenI8AVX2(dst *float32, src *int8, n int, s float32)

//go:noescape
func dotBF16X4AVX2(a *[4]*float32, b *uint16, n16 int, c *[4]float32)

//go:noescape
func dotF16X4AVX2(a *[4]*float32, b *uint16, n16 int, c *[4]float32)

//go:noescape
func axpyAVX512(alpha float32, x, y *float32, n int)

//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

//go:noescape
func dotInt4Q8x4VNNI(q *int8, corr *int32, sa *float32, qs, cs int, packed, codes *byte, npairs, nrows int, table *float32, tstride int, c *float32, ldc int)

// Elementwise f32 arithmetic (arith_amd64.s): n a positive multiple of 16.

//go:noescape
func addVVAVX512(dst, a, c *float32, n int)

//go:noescape
func subVVAVX512(dst, a, c *float32, n int)

//go:noescape
func mulVVAVX512(dst, a, c *float32, n int)

//go:noescape
func divVVAVX512(dst, a, c *float32, n int)

//go:noescape
func addVSAVX512(dst, a *float32, c float32, n int)

//go:noescape
func subVSAVX512(dst, a *float32, c float32, n int)

//go:noescape
func mulVSAVX512(dst, a *float32, c float32, n int)

//go:noescape
func divVSAVX512(dst, a *float32, c float32, n int)

//go:noescape
func subSVAVX512(dst *float32, a float32, c *float32, n int)

//go:noescape
func divSVAVX512(dst *float32, a float32, c *float32, n int)
