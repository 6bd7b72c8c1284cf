//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// func dotInt4Q8VNNI(q *int8, corr *int32, sa *float32, packed, codes *byte, npairs, nrows int, table *[256]float32, c *float32)
// nrows consecutive int4 rows (each npairs pairs of blocks: 32·npairs
// bytes and 2·npairs codes) against int8 activations (quantizeQ8's
// layout), c[j] for row j. A row's pairs: the pair's 32 bytes are split
// into low and high nibbles (unsigned 0..15), VPDPBUSD multiplies them
// with the pair's even and odd activations (signed) into eight dword
// lanes, four a block, starting from corr (−8 times the lanes'
// activations, which makes the nibbles' offset of 8 exact); the lanes are
// converted to f32 and added into the accumulators scaled by the block's
// weight scale (table[code]) times its activation scale (sa). Y6 and Y7
// accumulate alternate pairs; Y15 is the nibble mask; R13, R14, R15 keep
// the activations' start for the next row.
TEXT ·dotInt4Q8VNNI(SB), NOSPLIT, $0-72
	MOVQ q+0(FP), R13
	MOVQ corr+8(FP), R14
	MOVQ sa+16(FP), R15
	MOVQ packed+24(FP), SI
	MOVQ codes+32(FP), BX
	MOVQ nrows+48(FP), AX
	MOVQ table+56(FP), R8
	MOVQ c+64(FP), DI
	MOVL $0x0F0F0F0F, R10
	VPBROADCASTD R10, Y15
q8row:
	TESTQ AX, AX
	JLE   q8end
	MOVQ npairs+40(FP), CX
	MOVQ R13, DX
	MOVQ R14, R9
	MOVQ R15, R12
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
q8loop2:
	CMPQ CX, $2
	JLT  q8tail
	VMOVDQU      (SI), Y0
	VMOVDQU      32(SI), Y8
	VPSRLW       $4, Y0, Y2
	VPSRLW       $4, Y8, Y10
	VPAND        Y15, Y0, Y1
	VPAND        Y15, Y2, Y2
	VPAND        Y15, Y8, Y9
	VPAND        Y15, Y10, Y10
	VMOVDQU      (R9), Y3
	VMOVDQU      32(R9), Y11
	VPDPBUSD     (DX), Y1, Y3
	VPDPBUSD     32(DX), Y2, Y3
	VPDPBUSD     64(DX), Y9, Y11
	VPDPBUSD     96(DX), Y10, Y11
	VCVTDQ2PS    Y3, Y3
	VCVTDQ2PS    Y11, Y11
	MOVBQZX      (BX), R10
	MOVBQZX      1(BX), R11
	VBROADCASTSS (R8)(R10*4), X4
	VBROADCASTSS (R8)(R11*4), X5
	VINSERTF128  $1, X5, Y4, Y4
	MOVBQZX      2(BX), R10
	MOVBQZX      3(BX), R11
	VBROADCASTSS (R8)(R10*4), X12
	VBROADCASTSS (R8)(R11*4), X13
	VINSERTF128  $1, X13, Y12, Y12
	VMULPS       (R12), Y4, Y4
	VMULPS       32(R12), Y12, Y12
	VFMADD231PS  Y4, Y3, Y6
	VFMADD231PS  Y12, Y11, Y7
	ADDQ $64, SI
	ADDQ $4, BX
	ADDQ $128, DX
	ADDQ $64, R9
	ADDQ $64, R12
	SUBQ $2, CX
	JMP  q8loop2
q8tail:
	TESTQ CX, CX
	JLE   q8done
	VMOVDQU      (SI), Y0
	VPSRLW       $4, Y0, Y2
	VPAND        Y15, Y0, Y1
	VPAND        Y15, Y2, Y2
	VMOVDQU      (R9), Y3
	VPDPBUSD     (DX), Y1, Y3
	VPDPBUSD     32(DX), Y2, Y3
	VCVTDQ2PS    Y3, Y3
	MOVBQZX      (BX), R10
	MOVBQZX      1(BX), R11
	VBROADCASTSS (R8)(R10*4), X4
	VBROADCASTSS (R8)(R11*4), X5
	VINSERTF128  $1, X5, Y4, Y4
	VMULPS       (R12), Y4, Y4
	VFMADD231PS  Y4, Y3, Y6
	ADDQ $32, SI
	ADDQ $2, BX
q8done:
	VADDPS Y7, Y6, Y6
	VEXTRACTF128 $1, Y6, X0
	VADDPS       X0, X6, X6
	VMOVHLPS     X6, X6, X0
	VADDPS       X0, X6, X6
	VMOVSHDUP    X6, X0
	VADDSS       X0, X6, X6
	VMOVSS       X6, (DI)
	ADDQ $4, DI
	DECQ AX
	JMP  q8row
q8end:
	VZEROUPPER
	RET
