//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// func dotInt4Q8VNNI(q *int8, corr *int32, sa *float32, packed, codes *byte, npairs, nrows int, table *float32, tstride int, c *float32)
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
// the activations' start for the next row. After each row the table
// pointer R8 moves on by tstride bytes: 0 for a matrix's one table, a
// row's table for formats with one per row (grouped int4).
TEXT ·dotInt4Q8VNNI(SB), NOSPLIT, $0-80
	MOVQ q+0(FP), R13
	MOVQ corr+8(FP), R14
	MOVQ sa+16(FP), R15
	MOVQ packed+24(FP), SI
	MOVQ codes+32(FP), BX
	MOVQ nrows+48(FP), AX
	MOVQ table+56(FP), R8
	MOVQ c+72(FP), DI
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
	ADDQ tstride+64(FP), R8
	DECQ AX
	JMP  q8row
q8end:
	VZEROUPPER
	RET

// func dotInt8Q8VNNI(q *int8, sc *float32, b *int8, ldb, kbytes, nrows int, sw *float32, ngw4 int, c *float32)
// nrows int8 rows (stride ldb bytes, kbytes = k values in groups of 64;
// their f32 scales one per group, stride ngw4 bytes) against int8
// activations q (k bytes) with sc (per group 16 lane scales, each block of
// 32's scale in its eight lanes, then 16 lane corrections), c[j] for row
// j. A group's 64 weights go in as unsigned (XOR 0x80: w+128); VPDPBUSD
// multiplies them with the group's activations into 16 dword lanes, which
// are converted to f32, times their block's scale plus the lane's
// correction (which takes off what the offset added), and added into the
// row's accumulator times the group's weight scale. Four rows share each
// load of the activations: SI, R9, R10, R11 are their weights (into
// Z24..Z27) and BX, R12, R14, R8 their scales; CX walks the bytes of a row
// and DX its scales; Z8, Z11, Z12, Z13 accumulate (REDUCE512 needs them
// below Z16); Z9 and Z15 hold a group's lane scales and corrections, Z14
// the sign bits.
TEXT ·dotInt8Q8VNNI(SB), NOSPLIT, $0-72
	MOVQ q+0(FP), R13
	MOVQ sc+8(FP), R15
	MOVQ b+16(FP), SI
	MOVQ nrows+40(FP), AX
	MOVQ sw+48(FP), BX
	MOVQ c+64(FP), DI
	MOVL $0x80808080, R10
	VPBROADCASTD R10, Z14
i8q4:
	CMPQ AX, $4
	JLT  i8q1
	MOVQ ldb+24(FP), R8
	LEAQ (SI)(R8*1), R9
	LEAQ (SI)(R8*2), R10
	LEAQ (R9)(R8*2), R11
	MOVQ ldb+24(FP), DX
	LEAQ (SI)(DX*4), DX
	MOVQ ngw4+56(FP), R8
	LEAQ (BX)(R8*1), R12
	LEAQ (BX)(R8*2), R14
	LEAQ (R12)(R8*2), R8
	VPXORD Z8, Z8, Z8
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	XORQ CX, CX
i8q4k:
	PREFETCHT0   (DX)(CX*4)
	PREFETCHT0   64(DX)(CX*4)
	PREFETCHT0   128(DX)(CX*4)
	PREFETCHT0   192(DX)(CX*4)
	VMOVDQU64    (R13)(CX*1), Z10
	VMOVUPS      (R15)(CX*2), Z9
	VMOVUPS      64(R15)(CX*2), Z15
	VPXORD       (SI)(CX*1), Z14, Z24
	VPXORD       (R9)(CX*1), Z14, Z25
	VPXORD       (R10)(CX*1), Z14, Z26
	VPXORD       (R11)(CX*1), Z14, Z27
	VPXORD       Z4, Z4, Z4
	VPXORD       Z5, Z5, Z5
	VPXORD       Z6, Z6, Z6
	VPXORD       Z7, Z7, Z7
	VPDPBUSD     Z10, Z24, Z4
	VPDPBUSD     Z10, Z25, Z5
	VPDPBUSD     Z10, Z26, Z6
	VPDPBUSD     Z10, Z27, Z7
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VCVTDQ2PS    Z6, Z6
	VCVTDQ2PS    Z7, Z7
	VFMADD213PS  Z15, Z9, Z4
	VFMADD213PS  Z15, Z9, Z5
	VFMADD213PS  Z15, Z9, Z6
	VFMADD213PS  Z15, Z9, Z7
	VBROADCASTSS (BX), Z20
	VBROADCASTSS (R12), Z21
	VBROADCASTSS (R14), Z22
	VBROADCASTSS (R8), Z23
	VFMADD231PS  Z20, Z4, Z8
	VFMADD231PS  Z21, Z5, Z11
	VFMADD231PS  Z22, Z6, Z12
	VFMADD231PS  Z23, Z7, Z13
	ADDQ $64, CX
	ADDQ $4, BX
	ADDQ $4, R12
	ADDQ $4, R14
	ADDQ $4, R8
	CMPQ CX, kbytes+32(FP)
	JLT  i8q4k
	REDUCE512(Z8, Y8, X8, 0(DI))
	REDUCE512(Z11, Y11, X11, 4(DI))
	REDUCE512(Z12, Y12, X12, 8(DI))
	REDUCE512(Z13, Y13, X13, 12(DI))
	MOVQ ldb+24(FP), R8
	LEAQ (SI)(R8*4), SI
	MOVQ ngw4+56(FP), R8
	LEAQ (BX)(R8*2), BX
	ADDQ R8, BX
	ADDQ $16, DI
	SUBQ $4, AX
	JMP  i8q4
i8q1:
	TESTQ AX, AX
	JLE   i8qend
	VPXORD Z8, Z8, Z8
	XORQ CX, CX
	XORQ DX, DX
i8q1k:
	VPXORD       (SI)(CX*1), Z14, Z24
	VPXORD       Z4, Z4, Z4
	VPDPBUSD     (R13)(CX*1), Z24, Z4
	VCVTDQ2PS    Z4, Z4
	VMOVUPS      (R15)(CX*2), Z9
	VFMADD213PS  64(R15)(CX*2), Z9, Z4
	VBROADCASTSS (BX)(DX*1), Z20
	VFMADD231PS  Z20, Z4, Z8
	ADDQ $64, CX
	ADDQ $4, DX
	CMPQ CX, kbytes+32(FP)
	JLT  i8q1k
	REDUCE512(Z8, Y8, X8, 0(DI))
	ADDQ ldb+24(FP), SI
	ADDQ ngw4+56(FP), BX
	ADDQ $4, DI
	DECQ AX
	JMP  i8q1
i8qend:
	VZEROUPPER
	RET

// Q8X4_ROW is one activation row's share of a pair in dotInt4Q8x4VNNI:
// its corrections at CORR, its quantised values at Q (even, then odd, 32
// bytes each), its scales at SA; Y1 and Y2 hold the pair's low and high
// nibbles, Y4 the blocks' weight scales; T and U are temporaries, ACC the
// row's accumulator.
#define Q8X4_ROW(CORR, Q0, Q1, SA, T, U, ACC) \
	VMOVDQU     CORR, T   \
	VPDPBUSD    Q0, Y1, T \
	VPDPBUSD    Q1, Y2, T \
	VCVTDQ2PS   T, T      \
	VMULPS      SA, Y4, U \
	VFMADD231PS U, T, ACC

// Q8X4_SUM adds the eight lanes of Y into the float32 at DST (X0 and X is
// Y's low half; clobbers X0).
#define Q8X4_SUM(Y, X, DST) \
	VEXTRACTF128 $1, Y, X0 \
	VADDPS       X0, X, X  \
	VMOVHLPS     X, X, X0  \
	VADDPS       X0, X, X  \
	VMOVSHDUP    X, X0     \
	VADDSS       X0, X, X  \
	VMOVSS       X, DST

// func dotInt4Q8x4VNNI(q *int8, corr *int32, sa *float32, qs, cs int, packed, codes *byte, npairs, nrows int, table *float32, tstride int, c *float32, ldc int)
// dotInt4Q8VNNI for four activation rows at once: each pair of a weight
// row is split into nibbles once and multiplied with the four rows' int8
// activations (row r's at q + r·qs bytes, its corrections and scales at
// corr and sa + r·cs bytes), so the weights are read once for the four.
// c[r·ldc/4 + j] gets row r's product with weight row j (ldc in bytes).
// Y6..Y9 accumulate the four rows; Y15 is the nibble mask; R10 = qs, R11 =
// 3·qs, R14 = cs, R15 = 3·cs.
TEXT ·dotInt4Q8x4VNNI(SB), NOSPLIT, $0-104
	MOVQ qs+24(FP), R10
	LEAQ (R10)(R10*2), R11
	MOVQ cs+32(FP), R14
	LEAQ (R14)(R14*2), R15
	MOVQ packed+40(FP), SI
	MOVQ codes+48(FP), BX
	MOVQ nrows+64(FP), AX
	MOVQ table+72(FP), R8
	MOVQ c+88(FP), DI
	MOVL $0x0F0F0F0F, R13
	VPBROADCASTD R13, Y15
x4row:
	TESTQ AX, AX
	JLE   x4end
	MOVQ npairs+56(FP), CX
	MOVQ q+0(FP), DX
	MOVQ corr+8(FP), R9
	MOVQ sa+16(FP), R12
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
x4loop:
	TESTQ CX, CX
	JLE   x4done
	VMOVDQU      (SI), Y0
	VPSRLW       $4, Y0, Y2
	VPAND        Y15, Y0, Y1
	VPAND        Y15, Y2, Y2
	MOVBQZX      (BX), R13
	VBROADCASTSS (R8)(R13*4), X4
	MOVBQZX      1(BX), R13
	VBROADCASTSS (R8)(R13*4), X5
	VINSERTF128  $1, X5, Y4, Y4
	Q8X4_ROW((R9), (DX), 32(DX), (R12), Y3, Y5, Y6)
	Q8X4_ROW((R9)(R14*1), (DX)(R10*1), 32(DX)(R10*1), (R12)(R14*1), Y10, Y11, Y7)
	Q8X4_ROW((R9)(R14*2), (DX)(R10*2), 32(DX)(R10*2), (R12)(R14*2), Y3, Y5, Y8)
	Q8X4_ROW((R9)(R15*1), (DX)(R11*1), 32(DX)(R11*1), (R12)(R15*1), Y10, Y11, Y9)
	ADDQ $32, SI
	ADDQ $2, BX
	ADDQ $64, DX
	ADDQ $32, R9
	ADDQ $32, R12
	DECQ CX
	JMP  x4loop
x4done:
	MOVQ ldc+96(FP), R13
	Q8X4_SUM(Y6, X6, (DI))
	Q8X4_SUM(Y7, X7, (DI)(R13*1))
	Q8X4_SUM(Y8, X8, (DI)(R13*2))
	LEAQ (DI)(R13*2), CX
	Q8X4_SUM(Y9, X9, (CX)(R13*1))
	ADDQ $4, DI
	ADDQ tstride+80(FP), R8
	DECQ AX
	JMP  x4row
x4end:
	VZEROUPPER
	RET
