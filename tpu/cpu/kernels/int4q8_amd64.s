//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// func dotInt4Q8VNNI(q *int8, corr *int32, sa *float32, packed, codes *byte, npairs int, table *[256]float32) float32
// One int4 row against int8 activations (quantizeQ8's layout), two blocks
// of 32 (a pair) at a time: the pair's 32 bytes are split into low and
// high nibbles (unsigned 0..15), VPDPBUSD multiplies them with the pair's
// even and odd activations (signed) into eight dword lanes, four a block,
// starting from corr (−8 times the lanes' activations, which makes the
// nibbles' offset of 8 exact); the lanes are converted to f32 and added
// into the accumulators scaled by the block's weight scale (table[code])
// times its activation scale (sa). Y6 and Y7 accumulate alternate pairs;
// Y15 is the nibble mask.
TEXT ·dotInt4Q8VNNI(SB), NOSPLIT, $0-60
	MOVQ q+0(FP), DX
	MOVQ corr+8(FP), R9
	MOVQ sa+16(FP), R12
	MOVQ packed+24(FP), SI
	MOVQ codes+32(FP), BX
	MOVQ npairs+40(FP), CX
	MOVQ table+48(FP), R8
	MOVL $0x0F0F0F0F, R10
	VPBROADCASTD R10, Y15
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
q8done:
	VADDPS Y7, Y6, Y6
	REDUCE256(Y6, X6, ret+56(FP))
	VZEROUPPER
	RET
