//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// func dotMXFP4AVX512(a *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *[256]float32) float32
// One MXFP4 row against a: each block's 16 bytes are split into nibbles,
// looked up as int8 (twice the FP4 value: 0, ±1, ..., ±12) with VPSHUFB,
// interleaved (low nibble first), widened to f32, multiplied by a, and
// added into the accumulators scaled by half[scale] = 2^(scale-128).
// Z0, Z1 accumulate; X13 is the nibble mask, X14 the table.
TEXT ·dotMXFP4AVX512(SB), NOSPLIT, $0-52
	MOVQ a+0(FP), AX
	MOVQ blocks+8(FP), SI
	MOVQ scales+16(FP), BX
	MOVQ nblocks+24(FP), CX
	MOVQ lut+32(FP), DX
	MOVQ half+40(FP), R8
	VMOVDQU (DX), X14
	MOVL    $0x0F0F0F0F, R9
	VPBROADCASTD R9, X13
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
mxloop:
	TESTQ CX, CX
	JLE   mxdone
	VMOVDQU    (SI), X2
	VPSRLW     $4, X2, X3
	VPAND      X13, X2, X2
	VPAND      X13, X3, X3
	VPSHUFB    X2, X14, X2
	VPSHUFB    X3, X14, X3
	VPUNPCKLBW X3, X2, X4
	VPUNPCKHBW X3, X2, X5
	VPMOVSXBD  X4, Z6
	VPMOVSXBD  X5, Z7
	VCVTDQ2PS  Z6, Z6
	VCVTDQ2PS  Z7, Z7
	MOVBQZX    (BX), R10
	VBROADCASTSS (R8)(R10*4), Z9
	VMULPS     (AX), Z6, Z6
	VMULPS     64(AX), Z7, Z7
	VFMADD231PS Z9, Z6, Z0
	VFMADD231PS Z9, Z7, Z1
	ADDQ $16, SI
	INCQ BX
	ADDQ $128, AX
	DECQ CX
	JMP  mxloop
mxdone:
	VADDPS Z1, Z0, Z0
	REDUCE512(Z0, Y0, X0, ret+48(FP))
	VZEROUPPER
	RET
