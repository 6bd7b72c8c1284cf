//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// DECODE_BLOCK decodes the block of 16 bytes at (SI) into its 32 values
// as f32, Z6 the first 16 and Z7 the last (low nibble first): the nibbles
// are split with the mask in X13, looked up as int8 in the table in X14
// (VPSHUFB), interleaved, widened and converted. Clobbers X2..X5.
#define DECODE_BLOCK \
	VMOVDQU    (SI), X2     \
	VPSRLW     $4, X2, X3   \
	VPAND      X13, X2, X2  \
	VPAND      X13, X3, X3  \
	VPSHUFB    X2, X14, X2  \
	VPSHUFB    X3, X14, X3  \
	VPUNPCKLBW X3, X2, X4   \
	VPUNPCKHBW X3, X2, X5   \
	VPMOVSXBD  X4, Z6       \
	VPMOVSXBD  X5, Z7       \
	VCVTDQ2PS  Z6, Z6       \
	VCVTDQ2PS  Z7, Z7

// NX2_BEGIN loads the few-row nibble kernels' arguments into the
// registers dotNibblesx8x2AVX512 names (and blocks-8(SP), hoff-16(SP))
// and zeroes the accumulators.
#define NX2_BEGIN \
	MOVQ a+0(FP), DX \
	ROWS8(DX) \
	MOVQ blocks+8(FP), DX \
	MOVQ 0(DX), SI \
	MOVQ 8(DX), DI \
	MOVQ scales+16(FP), DX \
	MOVQ 0(DX), BX \
	MOVQ 8(DX), DX \
	MOVQ nblocks+24(FP), AX \
	MOVQ AX, blocks-8(SP) \
	MOVQ lut+32(FP), AX \
	VMOVDQU64 (AX), X31 \
	MOVL      $0x0F0F0F0F, AX \
	VPBROADCASTD AX, X30 \
	MOVQ half+40(FP), CX \
	MOVQ 0(CX), AX \
	MOVQ 8(CX), CX \
	SUBQ AX, CX \
	SARQ $2, CX \
	MOVQ CX, hoff-16(SP) \
	ZERO4X4

// PERM_BEGIN loads the permuted nibble kernels' arguments into the
// registers dotNibblesPermAVX512 names and its value table into Z14;
// PERM_ROW_END(row) stores a row's sum, moves to the next row's output
// and table, and jumps back to row.
#define PERM_BEGIN \
	MOVQ a+0(FP), R13 \
	MOVQ blocks+8(FP), SI \
	MOVQ scales+16(FP), BX \
	MOVQ nrows+32(FP), R11 \
	MOVQ vals+40(FP), DX \
	MOVQ half+48(FP), R8 \
	MOVQ tstride+56(FP), R9 \
	MOVQ c+64(FP), DI \
	VMOVUPS (DX), Z14

#define PERM_ROW_END(row) \
	VADDPS Z1, Z0, Z0 \
	REDUCE512(Z0, Y0, X0, (DI)) \
	ADDQ $4, DI \
	ADDQ R9, R8 \
	DECQ R11 \
	JMP  row

// WIDEN_BEGIN loads the widening kernels' arguments into the registers
// DECODE_BLOCK reads (the table in X14, the nibble mask in X13).
#define WIDEN_BEGIN \
	MOVQ dst+0(FP), DI \
	MOVQ blocks+8(FP), SI \
	MOVQ scales+16(FP), BX \
	MOVQ nblocks+24(FP), CX \
	MOVQ lut+32(FP), DX \
	MOVQ half+40(FP), R8 \
	VMOVDQU (DX), X14 \
	MOVL    $0x0F0F0F0F, R9 \
	VPBROADCASTD R9, X13

// func widenNibblesAVX512(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *[256]float32)
// Decodes nblocks nibble-coded blocks into 32 f32 values each (the GEMM's
// scratch): each block's 16 bytes are split into nibbles, looked up as
// int8 in lut (MXFP4: twice the FP4 value, 0, ±1, ..., ±12; int4: the
// value, -8..7), interleaved (low nibble first), widened to f32 and
// scaled by half[scale code] (MXFP4: 2^(code-128); int4: the matrix's
// scale table).
TEXT ·widenNibblesAVX512(SB), NOSPLIT, $0-48
	WIDEN_BEGIN
wdloop:
	TESTQ CX, CX
	JLE   wddone
	DECODE_BLOCK
	MOVBQZX    (BX), R10
	VBROADCASTSS (R8)(R10*4), Z9
	VMULPS     Z9, Z6, Z6
	VMULPS     Z9, Z7, Z7
	VMOVUPS    Z6, (DI)
	VMOVUPS    Z7, 64(DI)
	ADDQ $16, SI
	INCQ BX
	ADDQ $128, DI
	DECQ CX
	JMP  wdloop
wddone:
	VZEROUPPER
	RET

// DECODE_BLOCK_HI is DECODE_BLOCK on registers above Z15 (the few-row
// kernel's accumulators hold Z0..Z15): the block at (P) into ZLO, ZHI,
// with the nibble mask in X30 and the table in X31. Clobbers X26..X29.
#define DECODE_BLOCK_HI(P, ZLO, ZHI) \
	VMOVDQU64  (P), X26       \
	VPSRLW     $4, X26, X27   \
	VPANDD     X30, X26, X26  \
	VPANDD     X30, X27, X27  \
	VPSHUFB    X26, X31, X26  \
	VPSHUFB    X27, X31, X27  \
	VPUNPCKLBW X27, X26, X28  \
	VPUNPCKHBW X27, X26, X29  \
	VPMOVSXBD  X28, ZLO       \
	VPMOVSXBD  X29, ZHI       \
	VCVTDQ2PS  ZLO, ZLO       \
	VCVTDQ2PS  ZHI, ZHI

// NX2_FMAS multiplies the two decoded, scaled blocks (Z16, Z17 of the
// first row of B, Z18, Z19 of the second) by the eight rows of A at R8..R15
// into dotNibblesx8x2AVX512's accumulators and advances the rows a block.
#define NX2_FMAS \
	VMOVUPS     (R8), Z22 \
	VMOVUPS     64(R8), Z23 \
	VFMADD231PS Z22, Z16, Z0 \
	VFMADD231PS Z23, Z17, Z0 \
	VFMADD231PS Z22, Z18, Z1 \
	VFMADD231PS Z23, Z19, Z1 \
	ADDQ        $128, R8 \
	VMOVUPS     (R9), Z22 \
	VMOVUPS     64(R9), Z23 \
	VFMADD231PS Z22, Z16, Z4 \
	VFMADD231PS Z23, Z17, Z4 \
	VFMADD231PS Z22, Z18, Z5 \
	VFMADD231PS Z23, Z19, Z5 \
	ADDQ        $128, R9 \
	VMOVUPS     (R10), Z22 \
	VMOVUPS     64(R10), Z23 \
	VFMADD231PS Z22, Z16, Z8 \
	VFMADD231PS Z23, Z17, Z8 \
	VFMADD231PS Z22, Z18, Z9 \
	VFMADD231PS Z23, Z19, Z9 \
	ADDQ        $128, R10 \
	VMOVUPS     (R11), Z22 \
	VMOVUPS     64(R11), Z23 \
	VFMADD231PS Z22, Z16, Z12 \
	VFMADD231PS Z23, Z17, Z12 \
	VFMADD231PS Z22, Z18, Z13 \
	VFMADD231PS Z23, Z19, Z13 \
	ADDQ        $128, R11 \
	VMOVUPS     (R12), Z22 \
	VMOVUPS     64(R12), Z23 \
	VFMADD231PS Z22, Z16, Z2 \
	VFMADD231PS Z23, Z17, Z2 \
	VFMADD231PS Z22, Z18, Z3 \
	VFMADD231PS Z23, Z19, Z3 \
	ADDQ        $128, R12 \
	VMOVUPS     (R13), Z22 \
	VMOVUPS     64(R13), Z23 \
	VFMADD231PS Z22, Z16, Z6 \
	VFMADD231PS Z23, Z17, Z6 \
	VFMADD231PS Z22, Z18, Z7 \
	VFMADD231PS Z23, Z19, Z7 \
	ADDQ        $128, R13 \
	VMOVUPS     (R14), Z22 \
	VMOVUPS     64(R14), Z23 \
	VFMADD231PS Z22, Z16, Z10 \
	VFMADD231PS Z23, Z17, Z10 \
	VFMADD231PS Z22, Z18, Z11 \
	VFMADD231PS Z23, Z19, Z11 \
	ADDQ        $128, R14 \
	VMOVUPS     (R15), Z22 \
	VMOVUPS     64(R15), Z23 \
	VFMADD231PS Z22, Z16, Z14 \
	VFMADD231PS Z23, Z17, Z14 \
	VFMADD231PS Z22, Z18, Z15 \
	VFMADD231PS Z23, Z19, Z15 \
	ADDQ        $128, R15

// func dotNibblesx8x2AVX512(a *[8]*float32, blocks, scales *[2]*byte, nblocks int, lut *[16]int8, half *[2]*float32, c *[16]float32)
// Two nibble-coded rows (scale tables half[0] and half[1], the same one
// or each row's own) against eight rows of A (a short group repeats a
// row): each block of both rows is decoded once in registers (Z16, Z17
// and Z18, Z19, scaled by their table's entry for its code) and the A
// values, loaded once (Z22, Z23), serve both. C[i,j] accumulates in
// Z(4·(i%4) + 2·(i/4) + j), stored as dotInt8x8x2AVX512 stores it. R8..R15
// are A's rows (advanced a block a step), SI/DI the two rows' blocks
// (prefetched into L2 4 KiB ahead), BX/DX their scale codes, AX the first
// table, CX a code, hoff-16(SP) the second table's offset from the first
// in entries, blocks-8(SP) the blocks left.
TEXT ·dotNibblesx8x2AVX512(SB), NOSPLIT, $16-56
	NX2_BEGIN
nx2loop:
	CMPQ blocks-8(SP), $0
	JLE  nx2done
	PREFETCHT1 4096(SI)
	PREFETCHT1 4096(DI)
	DECODE_BLOCK_HI(SI, Z16, Z17)
	MOVBQZX      (BX), CX
	VBROADCASTSS (AX)(CX*4), Z20
	VMULPS       Z20, Z16, Z16
	VMULPS       Z20, Z17, Z17
	DECODE_BLOCK_HI(DI, Z18, Z19)
	MOVBQZX      (DX), CX
	ADDQ         hoff-16(SP), CX
	VBROADCASTSS (AX)(CX*4), Z21
	VMULPS       Z21, Z18, Z18
	VMULPS       Z21, Z19, Z19
	NX2_FMAS
	ADDQ $16, SI
	ADDQ $16, DI
	INCQ BX
	INCQ DX
	DECQ blocks-8(SP)
	JMP  nx2loop
nx2done:
	REDUCE_STORE16(c+48(FP))
	VZEROUPPER
	RET

// func dotNibblesx8x2x16AVX512(a *[8]*float32, blocks, scales *[2]*byte, nblocks int, lut *[16]int8, half *[2]*float32, c *[16]float32)
// dotNibblesx8x2AVX512 with two scale codes a block: each row's values
// 0..15 (Z16, Z18) take its first, 16..31 (Z17, Z19) its second.
TEXT ·dotNibblesx8x2x16AVX512(SB), NOSPLIT, $16-56
	NX2_BEGIN
n16loop:
	CMPQ blocks-8(SP), $0
	JLE  n16done
	PREFETCHT1 4096(SI)
	PREFETCHT1 4096(DI)
	DECODE_BLOCK_HI(SI, Z16, Z17)
	MOVBQZX      (BX), CX
	VBROADCASTSS (AX)(CX*4), Z20
	VMULPS       Z20, Z16, Z16
	MOVBQZX      1(BX), CX
	VBROADCASTSS (AX)(CX*4), Z20
	VMULPS       Z20, Z17, Z17
	DECODE_BLOCK_HI(DI, Z18, Z19)
	MOVBQZX      (DX), CX
	ADDQ         hoff-16(SP), CX
	VBROADCASTSS (AX)(CX*4), Z21
	VMULPS       Z21, Z18, Z18
	MOVBQZX      1(DX), CX
	ADDQ         hoff-16(SP), CX
	VBROADCASTSS (AX)(CX*4), Z21
	VMULPS       Z21, Z19, Z19
	NX2_FMAS
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $2, BX
	ADDQ $2, DX
	DECQ blocks-8(SP)
	JMP  n16loop
n16done:
	REDUCE_STORE16(c+48(FP))
	VZEROUPPER
	RET

// func dotNibblesPermAVX512(a *float32, blocks, scales *byte, nblocks, nrows int, vals *[16]float32, half *float32, tstride int, c *float32)
// nrows consecutive nibble-coded rows (nblocks blocks each) against a
// whose blocks of 32 are permuted evens first (permuteBlocks), c[j] for
// row j: a block's 16 bytes are zero-extended to dwords, whose low 4 bits
// (VPERMPS reads no others) index the format's 16 f32 values for the low
// nibbles and, shifted right by 4, for the high ones; they multiply the
// even and the odd activations, and the block's sum is added into the
// accumulator scaled by half[scale code]. Two blocks an iteration into Z0
// and Z1. Z14 holds vals; R13 keeps a's start for the next row. After
// each row the table pointer R8 moves on by tstride bytes (R9): 0 for a
// matrix's one table, a row's table for formats with one per row.
TEXT ·dotNibblesPermAVX512(SB), NOSPLIT, $0-72
	PERM_BEGIN
pmrow:
	TESTQ R11, R11
	JLE   pmend
	MOVQ  nblocks+24(FP), CX
	MOVQ  R13, AX
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
pmloop2:
	CMPQ CX, $2
	JLT  pmtail
	VPMOVZXBD    (SI), Z2
	VPMOVZXBD    16(SI), Z4
	VPSRLD       $4, Z2, Z3
	VPSRLD       $4, Z4, Z5
	VPERMPS      Z14, Z2, Z2
	VPERMPS      Z14, Z3, Z3
	VPERMPS      Z14, Z4, Z4
	VPERMPS      Z14, Z5, Z5
	VMULPS       (AX), Z2, Z2
	VFMADD231PS  64(AX), Z3, Z2
	VMULPS       128(AX), Z4, Z4
	VFMADD231PS  192(AX), Z5, Z4
	MOVBQZX      (BX), R10
	MOVBQZX      1(BX), R12
	VBROADCASTSS (R8)(R10*4), Z9
	VBROADCASTSS (R8)(R12*4), Z10
	VFMADD231PS  Z9, Z2, Z0
	VFMADD231PS  Z10, Z4, Z1
	ADDQ $32, SI
	ADDQ $2, BX
	ADDQ $256, AX
	SUBQ $2, CX
	JMP  pmloop2
pmtail:
	TESTQ CX, CX
	JLE   pmdone
	VPMOVZXBD    (SI), Z2
	VPSRLD       $4, Z2, Z3
	VPERMPS      Z14, Z2, Z2
	VPERMPS      Z14, Z3, Z3
	VMULPS       (AX), Z2, Z2
	VFMADD231PS  64(AX), Z3, Z2
	MOVBQZX      (BX), R10
	VBROADCASTSS (R8)(R10*4), Z9
	VFMADD231PS  Z9, Z2, Z0
	ADDQ $16, SI
	INCQ BX
pmdone:
	PERM_ROW_END(pmrow)
pmend:
	VZEROUPPER
	RET

// func dotNibblesPerm16AVX512(a *float32, blocks, scales *byte, nblocks, nrows int, vals *[16]float32, half *float32, tstride int, c *float32)
// dotNibblesPermAVX512 with two scale codes a block (groups of 16): a
// block's bytes 0..7 hold its values 0..15, so in the permuted form the
// first eight lanes of both its low- and high-nibble halves take the first
// code's scale and the last eight the second's. Z9 holds the two scales
// as such a vector (VINSERTF64X4 of the second broadcast over the upper
// half); a block's products are summed before it scales them, as in
// dotNibblesPermAVX512.
TEXT ·dotNibblesPerm16AVX512(SB), NOSPLIT, $0-72
	PERM_BEGIN
p16row:
	TESTQ R11, R11
	JLE   p16end
	MOVQ  nblocks+24(FP), CX
	MOVQ  R13, AX
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
p16loop:
	TESTQ CX, CX
	JLE   p16done
	VPMOVZXBD    (SI), Z2
	VPSRLD       $4, Z2, Z3
	VPERMPS      Z14, Z2, Z2
	VPERMPS      Z14, Z3, Z3
	VMULPS       (AX), Z2, Z2
	VFMADD231PS  64(AX), Z3, Z2
	MOVBQZX      (BX), R10
	MOVBQZX      1(BX), R12
	VBROADCASTSS (R8)(R10*4), Z9
	VBROADCASTSS (R8)(R12*4), Y10
	VINSERTF64X4 $1, Y10, Z9, Z9
	VFMADD231PS  Z9, Z2, Z0
	ADDQ $16, SI
	ADDQ $2, BX
	ADDQ $128, AX
	DECQ CX
	JMP  p16loop
p16done:
	PERM_ROW_END(p16row)
p16end:
	VZEROUPPER
	RET

// func widenNibbles16AVX512(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *float32)
// widenNibblesAVX512 with two scale codes a block: values 0..15 (Z6)
// scaled by the first, 16..31 (Z7) by the second.
TEXT ·widenNibbles16AVX512(SB), NOSPLIT, $0-48
	WIDEN_BEGIN
w16loop:
	TESTQ CX, CX
	JLE   w16done
	DECODE_BLOCK
	MOVBQZX    (BX), R10
	MOVBQZX    1(BX), R11
	VBROADCASTSS (R8)(R10*4), Z9
	VBROADCASTSS (R8)(R11*4), Z10
	VMULPS     Z9, Z6, Z6
	VMULPS     Z10, Z7, Z7
	VMOVUPS    Z6, (DI)
	VMOVUPS    Z7, 64(DI)
	ADDQ $16, SI
	ADDQ $2, BX
	ADDQ $128, DI
	DECQ CX
	JMP  w16loop
w16done:
	VZEROUPPER
	RET

// ---- AVX2 ----

// DECODE_BLOCK_AVX2 is DECODE_BLOCK on 256-bit registers: the block at
// (SI) becomes its 32 values as f32 in Y6 (0..7), Y7 (8..15), Y8 (16..23)
// and Y9 (24..31). Clobbers X2..X5.
#define DECODE_BLOCK_AVX2 \
	VMOVDQU    (SI), X2     \
	VPSRLW     $4, X2, X3   \
	VPAND      X13, X2, X2  \
	VPAND      X13, X3, X3  \
	VPSHUFB    X2, X14, X2  \
	VPSHUFB    X3, X14, X3  \
	VPUNPCKLBW X3, X2, X4   \
	VPUNPCKHBW X3, X2, X5   \
	VPMOVSXBD  X4, Y6       \
	VPSRLDQ    $8, X4, X4   \
	VPMOVSXBD  X4, Y7       \
	VPMOVSXBD  X5, Y8       \
	VPSRLDQ    $8, X5, X5   \
	VPMOVSXBD  X5, Y9       \
	VCVTDQ2PS  Y6, Y6       \
	VCVTDQ2PS  Y7, Y7       \
	VCVTDQ2PS  Y8, Y8       \
	VCVTDQ2PS  Y9, Y9

// NIBBLE_TABLES_AVX2 loads the format's lookup table at DX into X14 and
// the nibble mask into X13 (VEX forms only). Clobbers R9.
#define NIBBLE_TABLES_AVX2 \
	VMOVDQU (DX), X14 \
	MOVL    $0x0F0F0F0F, R9 \
	MOVL    R9, X13 \
	VPBROADCASTD X13, X13

// func dotNibblesAVX2(a *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *[256]float32) float32
// One nibble-coded row against a, on AVX2 machines: each block decoded as
// widenNibblesAVX512 decodes it, multiplied by a and added into the
// accumulators (Y0, Y1) scaled by its half[code]; X13 is the nibble mask,
// X14 the table.
TEXT ·dotNibblesAVX2(SB), NOSPLIT, $0-52
	MOVQ a+0(FP), AX
	MOVQ blocks+8(FP), SI
	MOVQ scales+16(FP), BX
	MOVQ nblocks+24(FP), CX
	MOVQ lut+32(FP), DX
	MOVQ half+40(FP), R8
	NIBBLE_TABLES_AVX2
	VXORPS  Y0, Y0, Y0
	VXORPS  Y1, Y1, Y1
a2loop:
	TESTQ CX, CX
	JLE   a2done
	DECODE_BLOCK_AVX2
	MOVBQZX      (BX), R10
	VBROADCASTSS (R8)(R10*4), Y10
	VMULPS       (AX), Y6, Y6
	VFMADD231PS  32(AX), Y7, Y6
	VMULPS       64(AX), Y8, Y8
	VFMADD231PS  96(AX), Y9, Y8
	VFMADD231PS  Y10, Y6, Y0
	VFMADD231PS  Y10, Y8, Y1
	ADDQ $16, SI
	INCQ BX
	ADDQ $128, AX
	DECQ CX
	JMP  a2loop
a2done:
	VADDPS Y1, Y0, Y0
	REDUCE256(Y0, X0, ret+48(FP))
	VZEROUPPER
	RET

// func widenNibblesAVX2(dst *float32, blocks, scales *byte, nblocks int, lut *[16]int8, half *[256]float32)
// widenNibblesAVX512 for AVX2 machines.
TEXT ·widenNibblesAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ blocks+8(FP), SI
	MOVQ scales+16(FP), BX
	MOVQ nblocks+24(FP), CX
	MOVQ lut+32(FP), DX
	MOVQ half+40(FP), R8
	NIBBLE_TABLES_AVX2
w2loop:
	TESTQ CX, CX
	JLE   w2done
	DECODE_BLOCK_AVX2
	MOVBQZX      (BX), R10
	VBROADCASTSS (R8)(R10*4), Y10
	VMULPS       Y10, Y6, Y6
	VMULPS       Y10, Y7, Y7
	VMULPS       Y10, Y8, Y8
	VMULPS       Y10, Y9, Y9
	VMOVUPS      Y6, (DI)
	VMOVUPS      Y7, 32(DI)
	VMOVUPS      Y8, 64(DI)
	VMOVUPS      Y9, 96(DI)
	ADDQ $16, SI
	INCQ BX
	ADDQ $128, DI
	DECQ CX
	JMP  w2loop
w2done:
	VZEROUPPER
	RET
