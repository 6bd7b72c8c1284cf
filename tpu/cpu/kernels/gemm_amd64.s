//go:build amd64 && !purego

#include "textflag.h"

// ROWRED512 reduces the four accumulators of one C row to four floats in XA
// (lanes j = 0..3). Clobbers Y24..Y27 and the other three accumulators.
#define ROWRED512(ZA, ZB, ZC, ZD, YA, YB, YC, YD, XA) \
	VEXTRACTF64X4 $1, ZA, Y24 \
	VEXTRACTF64X4 $1, ZB, Y25 \
	VEXTRACTF64X4 $1, ZC, Y26 \
	VEXTRACTF64X4 $1, ZD, Y27 \
	VADDPS        Y24, YA, YA \
	VADDPS        Y25, YB, YB \
	VADDPS        Y26, YC, YC \
	VADDPS        Y27, YD, YD \
	VHADDPS       YB, YA, YA  \
	VHADDPS       YD, YC, YC  \
	VHADDPS       YC, YA, YA  \
	VEXTRACTF32X4 $1, YA, X24 \
	VADDPS        X24, XA, XA

// ROWRED256 is ROWRED512 for ymm accumulators. Clobbers YB..YD.
#define ROWRED256(YA, YB, YC, YD, XA, XB) \
	VHADDPS      YB, YA, YA \
	VHADDPS      YD, YC, YC \
	VHADDPS      YC, YA, YA \
	VEXTRACTF128 $1, YA, XB \
	VADDPS       XB, XA, XA

// GEMM "dot" microkernels for C = A·Bᵀ with both operands contiguous along
// k (the NT layout of a Linear weight): each accumulator register holds the
// lane-wise partial sums of one C element, reduced horizontally at the end.
// Nothing is packed: A rows and f32 B rows are read in place.
//
// func gemmDot4x4AVX512(a, b *[4]*float32, k int, c *float32, ldc, acc int)
// C[0:4, 0:4] (=, or += if acc != 0) Σ_{p<k} A_i[p]·B_j[p] with A_i = a[i],
// B_j = b[j] (row pointers, so edge tiles can repeat a row); k is a positive
// multiple of 16; ldc in bytes. Z(4i+j) accumulates C[i,j].
TEXT ·gemmDot4x4AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), R12
	MOVQ 0(R12), AX
	MOVQ 8(R12), BX
	MOVQ 16(R12), CX
	MOVQ 24(R12), DX
	MOVQ b+8(FP), R12
	MOVQ 0(R12), SI
	MOVQ 8(R12), DI
	MOVQ 16(R12), R8
	MOVQ 24(R12), R9
	MOVQ k+16(FP), R11
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	XORQ R10, R10
d4loop:
	VMOVUPS     (AX)(R10*4), Z16
	VMOVUPS     (BX)(R10*4), Z17
	VMOVUPS     (CX)(R10*4), Z18
	VMOVUPS     (DX)(R10*4), Z19
	VMOVUPS     (SI)(R10*4), Z20
	VMOVUPS     (DI)(R10*4), Z21
	VMOVUPS     (R8)(R10*4), Z22
	VMOVUPS     (R9)(R10*4), Z23
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z4
	VFMADD231PS Z20, Z18, Z8
	VFMADD231PS Z20, Z19, Z12
	VFMADD231PS Z21, Z16, Z1
	VFMADD231PS Z21, Z17, Z5
	VFMADD231PS Z21, Z18, Z9
	VFMADD231PS Z21, Z19, Z13
	VFMADD231PS Z22, Z16, Z2
	VFMADD231PS Z22, Z17, Z6
	VFMADD231PS Z22, Z18, Z10
	VFMADD231PS Z22, Z19, Z14
	VFMADD231PS Z23, Z16, Z3
	VFMADD231PS Z23, Z17, Z7
	VFMADD231PS Z23, Z18, Z11
	VFMADD231PS Z23, Z19, Z15
	ADDQ $16, R10
	CMPQ R10, R11
	JLT  d4loop
d4reduce:
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), R12
	MOVQ acc+40(FP), R13
	ROWRED512(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0)
	ROWRED512(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4)
	ROWRED512(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8)
	ROWRED512(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12)
	CMPQ R13, $0
	JEQ  d4store
	VADDPS (DI), X0, X0
	ADDQ   R12, DI
	VADDPS (DI), X4, X4
	ADDQ   R12, DI
	VADDPS (DI), X8, X8
	ADDQ   R12, DI
	VADDPS (DI), X12, X12
	MOVQ   c+24(FP), DI
d4store:
	VMOVUPS X0, (DI)
	ADDQ    R12, DI
	VMOVUPS X4, (DI)
	ADDQ    R12, DI
	VMOVUPS X8, (DI)
	ADDQ    R12, DI
	VMOVUPS X12, (DI)
	VZEROUPPER
	RET

// func gemmDot3x4AVX2(a *[3]*float32, b *[4]*float32, k int, c *float32, ldc, acc int)
// The AVX2+FMA version: three rows of A (16 ymm registers allow 12
// accumulators, three A vectors and one B vector); k is a positive multiple
// of 8. Y(4i+j) accumulates C[i,j].
TEXT ·gemmDot3x4AVX2(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), R12
	MOVQ 0(R12), AX
	MOVQ 8(R12), BX
	MOVQ 16(R12), CX
	MOVQ b+8(FP), R12
	MOVQ 0(R12), SI
	MOVQ 8(R12), DI
	MOVQ 16(R12), R8
	MOVQ 24(R12), R9
	MOVQ k+16(FP), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ R10, R10
d3loop:
	VMOVUPS     (AX)(R10*4), Y12
	VMOVUPS     (BX)(R10*4), Y13
	VMOVUPS     (CX)(R10*4), Y14
	VMOVUPS     (SI)(R10*4), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS     (DI)(R10*4), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS     (R8)(R10*4), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS     (R9)(R10*4), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ $8, R10
	CMPQ R10, R11
	JLT  d3loop
d3reduce:
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), R12
	MOVQ acc+40(FP), R13
	ROWRED256(Y0, Y1, Y2, Y3, X0, X1)
	ROWRED256(Y4, Y5, Y6, Y7, X4, X5)
	ROWRED256(Y8, Y9, Y10, Y11, X8, X9)
	CMPQ R13, $0
	JEQ  d3store
	VADDPS (DI), X0, X0
	ADDQ   R12, DI
	VADDPS (DI), X4, X4
	ADDQ   R12, DI
	VADDPS (DI), X8, X8
	MOVQ   c+24(FP), DI
d3store:
	VMOVUPS X0, (DI)
	ADDQ    R12, DI
	VMOVUPS X4, (DI)
	ADDQ    R12, DI
	VMOVUPS X8, (DI)
	VZEROUPPER
	RET
