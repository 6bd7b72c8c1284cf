//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// GEMV row kernels: c[j] = Σ_p a[p]·B[j,p] for j < n, p < k, where B rows
// are ldb bytes apart. k is a multiple of 16 (the Go side adds the tail).
// Four rows at a time share each load of a; one row at a time for the rest.
// Registers: AX a, SI B row 0, R9/R10/R11 rows 1..3, R8 ldb bytes, CX k,
// DI c, DX rows left, R12 element index.

#define ROWPTRS \
	LEAQ (SI)(R8*1), R9  \
	LEAQ (SI)(R8*2), R10 \
	LEAQ (R9)(R8*2), R11

// Software prefetch of the next four-row block (rows are short, so the
// hardware prefetcher has no time to ramp up on each one). PF walks from the
// start of the next block, esize lines per step of 16 columns over four
// rows: exact when rows are contiguous, close when they are padded.
#define PFINIT(PF) \
	LEAQ (SI)(R8*4), PF
#define PF4(PF) \
	PREFETCHT0 (PF)    \
	PREFETCHT0 64(PF)  \
	PREFETCHT0 128(PF) \
	PREFETCHT0 192(PF) \
	ADDQ $256, PF
#define PF2(PF) \
	PREFETCHT0 (PF)   \
	PREFETCHT0 64(PF) \
	ADDQ $128, PF
#define PF1(PF) \
	PREFETCHT0 (PF) \
	ADDQ $64, PF

// PF2L2 is PF2 into L2, 4 KiB further on, for the small-m kernels: their
// A rows (four of up to a few KiB) stay in L1, where the prefetched lines
// would evict them, and a block takes long enough that the next one's
// start needs fetching further ahead. (The GEMV, with one short A row,
// streams faster with PF2's.)
#define PF2L2(PF) \
	PREFETCHT1 4096(PF) \
	PREFETCHT1 4160(PF) \
	ADDQ $128, PF

// ---- AVX-512 ----

// Weight loaders: 16 weights at row pointer P, index R12, into Z (f32).
#define LD_BF16_512(P, Z) \
	VPMOVZXWD (P)(R12*2), Z \
	VPSLLD    $16, Z, Z
#define LD_F16_512(P, Z) \
	VCVTPH2PS (P)(R12*2), Z
#define LD_I8_512(P, Z) \
	VPMOVSXBD (P)(R12*1), Z \
	VCVTDQ2PS Z, Z

// func gemvF32AVX512(a, b *float32, ldb, k int, c *float32, n int)
TEXT ·gemvF32AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ n+40(FP), DX
f32x4:
	CMPQ DX, $4
	JLT  f32x1
	ROWPTRS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ R12, R12
	PFINIT(BX)
f32x4k:
	PF4(BX)
	VMOVUPS     (AX)(R12*4), Z4
	VFMADD231PS (SI)(R12*4), Z4, Z0
	VFMADD231PS (R9)(R12*4), Z4, Z1
	VFMADD231PS (R10)(R12*4), Z4, Z2
	VFMADD231PS (R11)(R12*4), Z4, Z3
	ADDQ $16, R12
	CMPQ R12, CX
	JLT  f32x4k
	REDUCE512(Z0, Y0, X0, 0(DI))
	REDUCE512(Z1, Y1, X1, 4(DI))
	REDUCE512(Z2, Y2, X2, 8(DI))
	REDUCE512(Z3, Y3, X3, 12(DI))
	LEAQ (SI)(R8*4), SI
	ADDQ $16, DI
	SUBQ $4, DX
	JMP  f32x4
f32x1:
	CMPQ DX, $0
	JLE  f32done
	VPXORD Z0, Z0, Z0
	XORQ R12, R12
f32x1k:
	VMOVUPS     (AX)(R12*4), Z4
	VFMADD231PS (SI)(R12*4), Z4, Z0
	ADDQ $16, R12
	CMPQ R12, CX
	JLT  f32x1k
	REDUCE512(Z0, Y0, X0, 0(DI))
	ADDQ R8, SI
	ADDQ $4, DI
	DECQ DX
	JMP  f32x1
f32done:
	VZEROUPPER
	RET

// GEMV16_512 is the body shared by the 16-bit and int8 kernels: LD loads and
// widens 16 weights.
#define GEMV16_512(LD, PF, LBL4, LBL4K, LBL1, LBL1K, LBLDONE) \
LBL4: \
	CMPQ DX, $4 \
	JLT  LBL1 \
	ROWPTRS \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	XORQ R12, R12 \
	PFINIT(BX) \
LBL4K: \
	PF(BX) \
	VMOVUPS (AX)(R12*4), Z4 \
	LD(SI, Z5) \
	LD(R9, Z6) \
	LD(R10, Z7) \
	LD(R11, Z8) \
	VFMADD231PS Z5, Z4, Z0 \
	VFMADD231PS Z6, Z4, Z1 \
	VFMADD231PS Z7, Z4, Z2 \
	VFMADD231PS Z8, Z4, Z3 \
	ADDQ $16, R12 \
	CMPQ R12, CX \
	JLT  LBL4K \
	REDUCE512(Z0, Y0, X0, 0(DI)) \
	REDUCE512(Z1, Y1, X1, 4(DI)) \
	REDUCE512(Z2, Y2, X2, 8(DI)) \
	REDUCE512(Z3, Y3, X3, 12(DI)) \
	LEAQ (SI)(R8*4), SI \
	ADDQ $16, DI \
	SUBQ $4, DX \
	JMP  LBL4 \
LBL1: \
	CMPQ DX, $0 \
	JLE  LBLDONE \
	VPXORD Z0, Z0, Z0 \
	XORQ R12, R12 \
LBL1K: \
	VMOVUPS (AX)(R12*4), Z4 \
	LD(SI, Z5) \
	VFMADD231PS Z5, Z4, Z0 \
	ADDQ $16, R12 \
	CMPQ R12, CX \
	JLT  LBL1K \
	REDUCE512(Z0, Y0, X0, 0(DI)) \
	ADDQ R8, SI \
	ADDQ $4, DI \
	DECQ DX \
	JMP  LBL1 \
LBLDONE: \
	VZEROUPPER \
	RET

// func gemvBF16AVX512(a *float32, b *uint16, ldb, k int, c *float32, n int)
TEXT ·gemvBF16AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ n+40(FP), DX
	GEMV16_512(LD_BF16_512, PF2, bf16x4, bf16x4k, bf16x1, bf16x1k, bf16done)

// func gemvF16AVX512(a *float32, b *uint16, ldb, k int, c *float32, n int)
TEXT ·gemvF16AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ n+40(FP), DX
	GEMV16_512(LD_F16_512, PF2, f16x4, f16x4k, f16x1, f16x1k, f16done)

// func gemvI8AVX512(a *float32, b *int8, ldb, k int, c *float32, n int, scales *float32, ngBytes, grp int)
// Weight-only int8 with per-group scales: each group of g (a multiple of 16)
// columns is summed separately, then scaled into the row total. BX walks the
// scales of row 0 of the current block, one float per group; R14 is a row of
// scales in bytes; the end of the current group is kept at gend-8(SP) and
// R13 is the prefetch pointer.
TEXT ·gemvI8AVX512(SB), NOSPLIT, $8-72
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ n+40(FP), DX
	MOVQ scales+48(FP), BX
	MOVQ ngBytes+56(FP), R14
i8x4:
	CMPQ DX, $4
	JLT  i8x1
	ROWPTRS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ R12, R12
	PFINIT(R13)
i8x4g:
	MOVQ grp+64(FP), R15
	ADDQ R12, R15
	MOVQ R15, gend-8(SP)
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
i8x4k:
	PF1(R13)
	VMOVUPS (AX)(R12*4), Z4
	LD_I8_512(SI, Z5)
	LD_I8_512(R9, Z6)
	LD_I8_512(R10, Z7)
	LD_I8_512(R11, Z12)
	VFMADD231PS Z5, Z4, Z8
	VFMADD231PS Z6, Z4, Z9
	VFMADD231PS Z7, Z4, Z10
	VFMADD231PS Z12, Z4, Z11
	ADDQ $16, R12
	CMPQ R12, gend-8(SP)
	JLT  i8x4k
	VBROADCASTSS (BX), Z13
	VFMADD231PS  Z13, Z8, Z0
	VBROADCASTSS (BX)(R14*1), Z13
	VFMADD231PS  Z13, Z9, Z1
	VBROADCASTSS (BX)(R14*2), Z13
	VFMADD231PS  Z13, Z10, Z2
	ADDQ         R14, BX
	VBROADCASTSS (BX)(R14*2), Z13
	SUBQ         R14, BX
	VFMADD231PS  Z13, Z11, Z3
	ADDQ $4, BX
	CMPQ R12, CX
	JLT  i8x4g
	REDUCE512(Z0, Y0, X0, 0(DI))
	REDUCE512(Z1, Y1, X1, 4(DI))
	REDUCE512(Z2, Y2, X2, 8(DI))
	REDUCE512(Z3, Y3, X3, 12(DI))
	LEAQ (SI)(R8*4), SI
	ADDQ $16, DI
	SUBQ $4, DX
	// BX advanced one row of scales over the groups; skip three more.
	LEAQ (BX)(R14*2), BX
	ADDQ R14, BX
	JMP  i8x4
i8x1:
	CMPQ DX, $0
	JLE  i8done
	VPXORD Z0, Z0, Z0
	XORQ R12, R12
i8x1g:
	MOVQ grp+64(FP), R15
	ADDQ R12, R15
	MOVQ R15, gend-8(SP)
	VPXORD Z8, Z8, Z8
i8x1k:
	VMOVUPS (AX)(R12*4), Z4
	LD_I8_512(SI, Z5)
	VFMADD231PS Z5, Z4, Z8
	ADDQ $16, R12
	CMPQ R12, gend-8(SP)
	JLT  i8x1k
	VBROADCASTSS (BX), Z13
	VFMADD231PS  Z13, Z8, Z0
	ADDQ $4, BX
	CMPQ R12, CX
	JLT  i8x1g
	REDUCE512(Z0, Y0, X0, 0(DI))
	ADDQ R8, SI
	ADDQ $4, DI
	DECQ DX
	JMP  i8x1
i8done:
	VZEROUPPER
	RET

// ---- AVX2 + FMA ----
// 16 columns per step as two 8-lane halves; HOFF is the byte offset of the
// upper half in the weight row.

#define LD_F32_256(P, OFF, Y) \
	VMOVUPS OFF(P)(R12*4), Y
#define LD_BF16_256(P, OFF, Y) \
	VPMOVZXWD OFF(P)(R12*2), Y \
	VPSLLD    $16, Y, Y
#define LD_F16_256(P, OFF, Y) \
	VCVTPH2PS OFF(P)(R12*2), Y
#define LD_I8_256(P, OFF, Y) \
	VPMOVSXBD OFF(P)(R12*1), Y \
	VCVTDQ2PS Y, Y

// ROW_256 adds one row's 16 products into accumulators ACCLO, ACCHI.
#define ROW_256(LD, HOFF, P, ACCLO, ACCHI) \
	LD(P, 0, Y10) \
	LD(P, HOFF, Y11) \
	VFMADD231PS Y10, Y8, ACCLO \
	VFMADD231PS Y11, Y9, ACCHI

#define GEMV_256(LD, HOFF, PF, LBL4, LBL4K, LBL1, LBL1K, LBLDONE) \
LBL4: \
	CMPQ DX, $4 \
	JLT  LBL1 \
	ROWPTRS \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	XORQ R12, R12 \
	PFINIT(BX) \
LBL4K: \
	PF(BX) \
	VMOVUPS (AX)(R12*4), Y8 \
	VMOVUPS 32(AX)(R12*4), Y9 \
	ROW_256(LD, HOFF, SI, Y0, Y1) \
	ROW_256(LD, HOFF, R9, Y2, Y3) \
	ROW_256(LD, HOFF, R10, Y4, Y5) \
	ROW_256(LD, HOFF, R11, Y6, Y7) \
	ADDQ $16, R12 \
	CMPQ R12, CX \
	JLT  LBL4K \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	REDUCE256(Y0, X0, 0(DI)) \
	REDUCE256(Y2, X2, 4(DI)) \
	REDUCE256(Y4, X4, 8(DI)) \
	REDUCE256(Y6, X6, 12(DI)) \
	LEAQ (SI)(R8*4), SI \
	ADDQ $16, DI \
	SUBQ $4, DX \
	JMP  LBL4 \
LBL1: \
	CMPQ DX, $0 \
	JLE  LBLDONE \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	XORQ R12, R12 \
LBL1K: \
	VMOVUPS (AX)(R12*4), Y8 \
	VMOVUPS 32(AX)(R12*4), Y9 \
	ROW_256(LD, HOFF, SI, Y0, Y1) \
	ADDQ $16, R12 \
	CMPQ R12, CX \
	JLT  LBL1K \
	VADDPS Y1, Y0, Y0 \
	REDUCE256(Y0, X0, 0(DI)) \
	ADDQ R8, SI \
	ADDQ $4, DI \
	DECQ DX \
	JMP  LBL1 \
LBLDONE: \
	VZEROUPPER \
	RET

#define GEMV_ARGS \
	MOVQ a+0(FP), AX     \
	MOVQ b+8(FP), SI     \
	MOVQ ldb+16(FP), R8  \
	MOVQ k+24(FP), CX    \
	MOVQ c+32(FP), DI    \
	MOVQ n+40(FP), DX

// func gemvF32AVX2(a, b *float32, ldb, k int, c *float32, n int)
TEXT ·gemvF32AVX2(SB), NOSPLIT, $0-48
	GEMV_ARGS
	GEMV_256(LD_F32_256, 32, PF4, f2x4, f2x4k, f2x1, f2x1k, f2done)

// func gemvBF16AVX2(a *float32, b *uint16, ldb, k int, c *float32, n int)
TEXT ·gemvBF16AVX2(SB), NOSPLIT, $0-48
	GEMV_ARGS
	GEMV_256(LD_BF16_256, 16, PF2, b2x4, b2x4k, b2x1, b2x1k, b2done)

// func gemvF16AVX2(a *float32, b *uint16, ldb, k int, c *float32, n int)
TEXT ·gemvF16AVX2(SB), NOSPLIT, $0-48
	GEMV_ARGS
	GEMV_256(LD_F16_256, 16, PF2, h2x4, h2x4k, h2x1, h2x1k, h2done)

// I8ROW_256 accumulates one row's group partials into PLO, PHI.
#define I8ROW_256(P, PLO, PHI) \
	LD_I8_256(P, 0, Y14) \
	VFMADD231PS Y14, Y12, PLO \
	LD_I8_256(P, 8, Y14) \
	VFMADD231PS Y14, Y13, PHI

// SCALE_256 folds a row's group partials PLO+PHI, times the scale at S, into TOT.
#define SCALE_256(S, PLO, PHI, TOT) \
	VADDPS       PHI, PLO, PLO \
	VBROADCASTSS S, Y15        \
	VFMADD231PS  Y15, PLO, TOT

// func gemvI8AVX2(a *float32, b *int8, ldb, k int, c *float32, n int, scales *float32, ngBytes, grp int)
// Same walk as gemvI8AVX512. Y0..Y3 row totals, Y4..Y11 group partials.
TEXT ·gemvI8AVX2(SB), NOSPLIT, $8-72
	GEMV_ARGS
	MOVQ scales+48(FP), BX
	MOVQ ngBytes+56(FP), R14
i82x4:
	CMPQ DX, $4
	JLT  i82x1
	ROWPTRS
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R12, R12
	PFINIT(R13)
i82x4g:
	MOVQ grp+64(FP), R15
	ADDQ R12, R15
	MOVQ R15, gend-8(SP)
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
i82x4k:
	PF1(R13)
	VMOVUPS (AX)(R12*4), Y12
	VMOVUPS 32(AX)(R12*4), Y13
	I8ROW_256(SI, Y4, Y5)
	I8ROW_256(R9, Y6, Y7)
	I8ROW_256(R10, Y8, Y9)
	I8ROW_256(R11, Y10, Y11)
	ADDQ $16, R12
	CMPQ R12, gend-8(SP)
	JLT  i82x4k
	SCALE_256((BX), Y4, Y5, Y0)
	SCALE_256((BX)(R14*1), Y6, Y7, Y1)
	SCALE_256((BX)(R14*2), Y8, Y9, Y2)
	ADDQ R14, BX
	SCALE_256((BX)(R14*2), Y10, Y11, Y3)
	SUBQ R14, BX
	ADDQ $4, BX
	CMPQ R12, CX
	JLT  i82x4g
	REDUCE256(Y0, X0, 0(DI))
	REDUCE256(Y1, X1, 4(DI))
	REDUCE256(Y2, X2, 8(DI))
	REDUCE256(Y3, X3, 12(DI))
	LEAQ (SI)(R8*4), SI
	ADDQ $16, DI
	SUBQ $4, DX
	LEAQ (BX)(R14*2), BX
	ADDQ R14, BX
	JMP  i82x4
i82x1:
	CMPQ DX, $0
	JLE  i82done
	VXORPS Y0, Y0, Y0
	XORQ R12, R12
i82x1g:
	MOVQ grp+64(FP), R15
	ADDQ R12, R15
	MOVQ R15, gend-8(SP)
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
i82x1k:
	VMOVUPS (AX)(R12*4), Y12
	VMOVUPS 32(AX)(R12*4), Y13
	I8ROW_256(SI, Y4, Y5)
	ADDQ $16, R12
	CMPQ R12, gend-8(SP)
	JLT  i82x1k
	SCALE_256((BX), Y4, Y5, Y0)
	ADDQ $4, BX
	CMPQ R12, CX
	JLT  i82x1g
	REDUCE256(Y0, X0, 0(DI))
	ADDQ R8, SI
	ADDQ $4, DI
	DECQ DX
	JMP  i82x1
i82done:
	VZEROUPPER
	RET

// Small-m 16-bit kernels: C[i,j] = Σ_{p<k} A_i[p]·B[j,p] for four rows of
// A (a, row pointers, so a short group repeats a row) and four rows of B
// (ldb bytes apart), read and widened in registers: a few rows of
// activations against a 16-bit weight, with no widened copy of it. k is a
// positive multiple of 16; ldc in bytes; C is stored, not accumulated.
// Registers: AX, BX, R14, R15 the A rows, SI/R9/R10/R11 the B rows, CX k,
// R12 the element index, DX the prefetch of the next block of B rows; DI
// c and R13 ldc, loaded with the others by the caller.
// Z(4i+j) accumulates C[i,j].
#define DOT4X4_16_512(LD, LBLK) \
	ROWPTRS \
	PFINIT(DX) \
	ZERO4X4 \
	XORQ R12, R12 \
LBLK: \
	PF2L2(DX) \
	LD(SI, Z20) \
	LD(R9, Z21) \
	LD(R10, Z22) \
	LD(R11, Z23) \
	VMOVUPS     (AX)(R12*4), Z16 \
	VMOVUPS     (BX)(R12*4), Z17 \
	VMOVUPS     (R14)(R12*4), Z18 \
	VMOVUPS     (R15)(R12*4), Z19 \
	VFMADD231PS Z20, Z16, Z0 \
	VFMADD231PS Z20, Z17, Z4 \
	VFMADD231PS Z20, Z18, Z8 \
	VFMADD231PS Z20, Z19, Z12 \
	VFMADD231PS Z21, Z16, Z1 \
	VFMADD231PS Z21, Z17, Z5 \
	VFMADD231PS Z21, Z18, Z9 \
	VFMADD231PS Z21, Z19, Z13 \
	VFMADD231PS Z22, Z16, Z2 \
	VFMADD231PS Z22, Z17, Z6 \
	VFMADD231PS Z22, Z18, Z10 \
	VFMADD231PS Z22, Z19, Z14 \
	VFMADD231PS Z23, Z16, Z3 \
	VFMADD231PS Z23, Z17, Z7 \
	VFMADD231PS Z23, Z18, Z11 \
	VFMADD231PS Z23, Z19, Z15 \
	ADDQ $16, R12 \
	CMPQ R12, CX \
	JLT  LBLK \
	REDUCE4X4 \
	STORE4X4(R13) \
	VZEROUPPER \
	RET

// func dot4x4BF16AVX512(a *[4]*float32, b *uint16, ldb, k int, c *float32, ldc int)
TEXT ·dot4x4BF16AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), R12
	MOVQ 0(R12), AX
	MOVQ 8(R12), BX
	MOVQ 16(R12), R14
	MOVQ 24(R12), R15
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R13
	DOT4X4_16_512(LD_BF16_512, bf16d4k)

// func dot4x4F16AVX512(a *[4]*float32, b *uint16, ldb, k int, c *float32, ldc int)
TEXT ·dot4x4F16AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), R12
	MOVQ 0(R12), AX
	MOVQ 8(R12), BX
	MOVQ 16(R12), R14
	MOVQ 24(R12), R15
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ k+24(FP), CX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R13
	DOT4X4_16_512(LD_F16_512, f16d4k)

// ---- FP8 (E4M3) ----

// LD_FP8_512 widens 16 E4M3 bytes to the f32 values of their halves (the
// E4M3 value times 2^-8, fp8.go): sign-extended to words, shifted left by
// 7 (exponent and mantissa to bits 7..13, the sign's copies to 14 and 15),
// bit 14 cleared with the mask 0xBF80 in Y14, converted. Clobbers Y9.
#define LD_FP8_512(P, Z) \
	VPMOVSXBW (P)(R12*1), Y9 \
	VPSLLW    $7, Y9, Y9     \
	VPAND     Y14, Y9, Y9    \
	VCVTPH2PS Y9, Z

// LD_FP8F_512 widens 16 E4M3 bytes to the f32 values of their E4M3 values
// times 2^-120 (fp8.go): sign-extended to doublewords, shifted left by 20
// (exponent and mantissa to bits 20..26, the sign's copies to 27..31),
// bits 27..30 cleared with the mask 0x87F00000 in Z14. Three integer ops,
// where LD_FP8_512 takes three and a conversion.
#define LD_FP8F_512(P, Z) \
	VPMOVSXBD (P)(R12*1), Z \
	VPSLLD    $20, Z, Z     \
	VPANDD    Z14, Z, Z

// func gemvFP8AVX512(a *float32, b *byte, ldb, k int, c *float32, n int)
TEXT ·gemvFP8AVX512(SB), NOSPLIT, $0-48
	GEMV_ARGS
	MOVL $0x87F00000, R13
	VPBROADCASTD R13, Z14
	GEMV16_512(LD_FP8F_512, PF1, fp8x4, fp8x4k, fp8x1, fp8x1k, fp8done)

// func dotFP8x8x2AVX512(a *[8]*float32, b *[2]*byte, scales *[2]*float32, ngroups, g16 int, c *[16]float32)
// dotInt8x8x2AVX512 for two FP8 rows of B, widened as the GEMV widens
// them (three integer ops) to the E4M3 values times 2^-120; the caller
// passes the scales times 2^120, so that each product of a byte's value
// and its scale is that of the dequantised weight, rounded once.
TEXT ·dotFP8x8x2AVX512(SB), NOSPLIT, $8-48
	MOVL $0x87F00000, AX
	VPBROADCASTD AX, Z30
	GROUPS_8X2_ARGS
	GROUPS_8X2(WIDEN_FP8, f8p2g, f8p2k, f8p2done)
	REDUCE_STORE16(c+40(FP))
	VZEROUPPER
	RET

// func dotFP8x4x4AVX512(a *[4]*float32, b *[4]*byte, scales *[4]*float32, ngroups, g16 int, c *[16]float32)
// dotFP8x8x2AVX512's counterpart for up to four rows of A (GROUPS_4X4).
TEXT ·dotFP8x4x4AVX512(SB), NOSPLIT, $8-48
	MOVL $0x87F00000, AX
	VPBROADCASTD AX, Z30
	GROUPS_4X4_ARGS
	GROUPS_4X4(WIDEN_FP8, f8q4g, f8q4k, f8q4done)
	REDUCE_STORE16(c+40(FP))
	VZEROUPPER
	RET

// func widenFP8AVX512(dst *float32, src *byte, n int, scale float32)
// dst[i] = half(src[i])·scale for n (a multiple of 16) values; the caller
// passes the scale times 2^8.
TEXT ·widenFP8AVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z2
	MOVL $0xBF80BF80, R13
	VPBROADCASTD R13, Y14
wf8loop:
	CMPQ CX, $16
	JLT  wf8done
	VPMOVSXBW (SI), Y1
	VPSLLW    $7, Y1, Y1
	VPAND     Y14, Y1, Y1
	VCVTPH2PS Y1, Z1
	VMULPS    Z2, Z1, Z1
	VMOVUPS   Z1, (DI)
	ADDQ $16, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  wf8loop
wf8done:
	VZEROUPPER
	RET

// LD_FP8F_256 is LD_FP8F_512 for 8 bytes at OFF: the mask is in Y13.
#define LD_FP8F_256(P, OFF, Y) \
	VPMOVSXBD OFF(P)(R12*1), Y \
	VPSLLD    $20, Y, Y        \
	VPAND     Y13, Y, Y

// func gemvFP8AVX2(a *float32, b *byte, ldb, k int, c *float32, n int)
TEXT ·gemvFP8AVX2(SB), NOSPLIT, $0-48
	GEMV_ARGS
	MOVL $0x87F00000, R13
	MOVL R13, X13
	VPBROADCASTD X13, Y13
	GEMV_256(LD_FP8F_256, 8, PF1, q2x4, q2x4k, q2x1, q2x1k, q2done)

// func widenFP8AVX2(dst *float32, src *byte, n int, scale float32)
// widenFP8AVX512 eight values at a time (n a multiple of 8).
TEXT ·widenFP8AVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y2
	MOVL $0xBF80BF80, R13
	MOVL R13, X13
	VPBROADCASTD X13, X13
wq2loop:
	CMPQ CX, $8
	JLT  wq2done
	VPMOVSXBW (SI), X1
	VPSLLW    $7, X1, X1
	VPAND     X13, X1, X1
	VCVTPH2PS X1, Y1
	VMULPS    Y2, Y1, Y1
	VMOVUPS   Y1, (DI)
	ADDQ $8, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  wq2loop
wq2done:
	VZEROUPPER
	RET

// func dotInt8x8x2AVX512(a *[8]*float32, b *[2]*int8, scales *[2]*float32, ngroups, g16 int, c *[16]float32)
// Two int8 rows of B (ngroups groups of 16·g16 columns, one f32 scale a
// group each) against eight rows of A (a short group repeats a row), by
// GROUPS_8X2 (each weight widened and scaled once for all the rows);
// c[4·(i%4) + 2·(i/4) + j] gets C[i,j].
TEXT ·dotInt8x8x2AVX512(SB), NOSPLIT, $8-48
	GROUPS_8X2_ARGS
	GROUPS_8X2(WIDEN_I8, i8p2g, i8p2k, i8p2done)
	REDUCE_STORE16(c+40(FP))
	VZEROUPPER
	RET

// func dotInt8x4x4AVX512(a *[4]*float32, b *[4]*int8, scales *[4]*float32, ngroups, g16 int, c *[16]float32)
// dotInt8x8x2AVX512's counterpart for up to four rows of A, by GROUPS_4X4:
// four int8 B rows against four A rows, so that a product of two to four
// rows does half the multiply-adds the eight-row kernel would; c[4i+j]
// gets C[i,j].
TEXT ·dotInt8x4x4AVX512(SB), NOSPLIT, $8-48
	GROUPS_4X4_ARGS
	GROUPS_4X4(WIDEN_I8, i8q4g, i8q4k, i8q4done)
	REDUCE_STORE16(c+40(FP))
	VZEROUPPER
	RET

// func dotInt8X4AVX2(a *[4]*float32, b *int8, scales *float32, ngroups, g16 int, c *[4]float32)
// The small-m int8 product for AVX2 machines, one B row against four rows
// of A: each 16 weights are widened and scaled once (Y6, Y7) and
// multiplied into the four rows' accumulators Y0..Y3. R8..R11 are the
// rows, DI the byte offset into them, Y9 the group's scale.
TEXT ·dotInt8X4AVX2(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), DX
	MOVQ 0(DX), R8
	MOVQ 8(DX), R9
	MOVQ 16(DX), R10
	MOVQ 24(DX), R11
	MOVQ b+8(FP), SI
	MOVQ scales+16(FP), BX
	MOVQ ngroups+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ DI, DI
i8x4g:
	TESTQ CX, CX
	JLE   i8x4done
	VBROADCASTSS (BX), Y9
	MOVQ  g16+32(FP), DX
i8x4k:
	VPMOVSXBD   (SI), Y6
	VPMOVSXBD   8(SI), Y7
	VCVTDQ2PS   Y6, Y6
	VCVTDQ2PS   Y7, Y7
	VMULPS      Y9, Y6, Y6
	VMULPS      Y9, Y7, Y7
	VFMADD231PS (R8)(DI*1), Y6, Y0
	VFMADD231PS 32(R8)(DI*1), Y7, Y0
	VFMADD231PS (R9)(DI*1), Y6, Y1
	VFMADD231PS 32(R9)(DI*1), Y7, Y1
	VFMADD231PS (R10)(DI*1), Y6, Y2
	VFMADD231PS 32(R10)(DI*1), Y7, Y2
	VFMADD231PS (R11)(DI*1), Y6, Y3
	VFMADD231PS 32(R11)(DI*1), Y7, Y3
	ADDQ $16, SI
	ADDQ $64, DI
	DECQ DX
	JNZ  i8x4k
	ADDQ $4, BX
	DECQ CX
	JMP  i8x4g
i8x4done:
	MOVQ c+40(FP), DX
	REDUCE256(Y0, X0, 0(DX))
	REDUCE256(Y1, X1, 4(DX))
	REDUCE256(Y2, X2, 8(DX))
	REDUCE256(Y3, X3, 12(DX))
	VZEROUPPER
	RET

// DOT16X4_256 multiplies one 16-bit row (LD widens 8 values at P+OFF into
// a ymm) into four rows of A's accumulators Y0..Y3, 16 columns a step, and
// stores the four sums at DX: R8..R11 are the rows, DI the byte offset into
// them, SI the weights, CX the steps left.
#define DOT16X4_256(LD, LBLK, LBLDONE) \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	XORQ DI, DI \
LBLK: \
	TESTQ CX, CX \
	JLE   LBLDONE \
	LD(SI, 0, Y6) \
	LD(SI, 16, Y7) \
	VFMADD231PS (R8)(DI*1), Y6, Y0 \
	VFMADD231PS 32(R8)(DI*1), Y7, Y0 \
	VFMADD231PS (R9)(DI*1), Y6, Y1 \
	VFMADD231PS 32(R9)(DI*1), Y7, Y1 \
	VFMADD231PS (R10)(DI*1), Y6, Y2 \
	VFMADD231PS 32(R10)(DI*1), Y7, Y2 \
	VFMADD231PS (R11)(DI*1), Y6, Y3 \
	VFMADD231PS 32(R11)(DI*1), Y7, Y3 \
	ADDQ $32, SI \
	ADDQ $64, DI \
	DECQ CX \
	JMP  LBLK \
LBLDONE: \
	REDUCE256(Y0, X0, 0(DX)) \
	REDUCE256(Y1, X1, 4(DX)) \
	REDUCE256(Y2, X2, 8(DX)) \
	REDUCE256(Y3, X3, 12(DX)) \
	VZEROUPPER \
	RET

#define LDX_BF16_256(P, OFF, Y) \
	VPMOVZXWD OFF(P), Y \
	VPSLLD    $16, Y, Y
#define LDX_F16_256(P, OFF, Y) \
	VCVTPH2PS OFF(P), Y

// func dotBF16X4AVX2(a *[4]*float32, b *uint16, n16 int, c *[4]float32)
// One bf16 row of 16·n16 values against four rows of A (the small-m
// product on AVX2): each 16 weights are widened once and multiplied into
// the four rows' accumulators; c[i] gets row i's sum.
TEXT ·dotBF16X4AVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), DX
	MOVQ 0(DX), R8
	MOVQ 8(DX), R9
	MOVQ 16(DX), R10
	MOVQ 24(DX), R11
	MOVQ b+8(FP), SI
	MOVQ n16+16(FP), CX
	MOVQ c+24(FP), DX
	DOT16X4_256(LDX_BF16_256, bx4k, bx4done)

// func dotF16X4AVX2(a *[4]*float32, b *uint16, n16 int, c *[4]float32)
// dotBF16X4AVX2 for f16 weights.
TEXT ·dotF16X4AVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), DX
	MOVQ 0(DX), R8
	MOVQ 8(DX), R9
	MOVQ 16(DX), R10
	MOVQ 24(DX), R11
	MOVQ b+8(FP), SI
	MOVQ n16+16(FP), CX
	MOVQ c+24(FP), DX
	DOT16X4_256(LDX_F16_256, hx4k, hx4done)
