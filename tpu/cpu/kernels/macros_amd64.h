// Macros shared by the amd64 kernel files.

// REDUCE512 sums the 16 lanes of Z into the float32 at dst (clobbers Z15).
#define REDUCE512(Z, Y, X, dst) \
	VEXTRACTF64X4 $1, Z, Y15 \
	VADDPS        Y15, Y, Y  \
	VEXTRACTF128  $1, Y, X15 \
	VADDPS        X15, X, X  \
	VMOVHLPS      X, X, X15  \
	VADDPS        X15, X, X  \
	VMOVSHDUP     X, X15     \
	VADDSS        X15, X, X  \
	VMOVSS        X, dst

// REDUCE256 sums the 8 lanes of Y into the float32 at dst (clobbers Y15).
#define REDUCE256(Y, X, dst) \
	VEXTRACTF128 $1, Y, X15 \
	VADDPS       X15, X, X  \
	VMOVHLPS     X, X, X15  \
	VADDPS       X15, X, X  \
	VMOVSHDUP    X, X15     \
	VADDSS       X15, X, X  \
	VMOVSS       X, dst

// ROWS8 loads the eight row pointers at P into R8..R15 (the eight-row
// kernels' A rows).
#define ROWS8(P) \
	MOVQ 0(P), R8 \
	MOVQ 8(P), R9 \
	MOVQ 16(P), R10 \
	MOVQ 24(P), R11 \
	MOVQ 32(P), R12 \
	MOVQ 40(P), R13 \
	MOVQ 48(P), R14 \
	MOVQ 56(P), R15

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

// The 4×4 dot tiles (gemmDot4x4AVX512, dotBF16x4x4AVX512 and the small-m
// 16-bit kernels' DOT4X4_16_512) accumulate C[i,j] in Z(4i+j), 16 lanes of
// partial sums each. ZERO4X4 clears them, REDUCE4X4 sums each row's four
// into the four floats of X0, X4, X8, X12 (ROWRED512), and STORE4X4 stores
// those rows at DI, DI+LD, DI+2·LD, DI+3·LD (DI advanced).
#define ZERO4X4 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

#define REDUCE4X4 \
	ROWRED512(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0) \
	ROWRED512(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4) \
	ROWRED512(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8) \
	ROWRED512(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12)

#define STORE4X4(LD) \
	VMOVUPS X0, (DI) \
	ADDQ    LD, DI \
	VMOVUPS X4, (DI) \
	ADDQ    LD, DI \
	VMOVUPS X8, (DI) \
	ADDQ    LD, DI \
	VMOVUPS X12, (DI)

// REDUCE_STORE16(C) reduces the 16 accumulators as REDUCE4X4 does and
// stores the four rows of four floats, 16 floats in all, at the pointer
// in argument C (the few-row kernels' c *[16]float32); clobbers DI.
#define REDUCE_STORE16(C) \
	REDUCE4X4 \
	MOVQ    C, DI \
	VMOVUPS X0, (DI) \
	VMOVUPS X4, 16(DI) \
	VMOVUPS X8, 32(DI) \
	VMOVUPS X12, 48(DI)

// DOT4X4_BEGIN starts a 4×4 dot tile (func(a, b *[4]*T, k int, c *float32,
// ldc, acc int)): the A row pointers into AX, BX, CX, DX, the B row
// pointers into SI, DI, R8, R9, k into R11, the index R10 and the
// accumulators Z0..Z15 (Z(4i+j) for C[i,j]) to zero.
#define DOT4X4_BEGIN \
	MOVQ   a+0(FP), R12 \
	MOVQ   0(R12), AX \
	MOVQ   8(R12), BX \
	MOVQ   16(R12), CX \
	MOVQ   24(R12), DX \
	MOVQ   b+8(FP), R12 \
	MOVQ   0(R12), SI \
	MOVQ   8(R12), DI \
	MOVQ   16(R12), R8 \
	MOVQ   24(R12), R9 \
	MOVQ   k+16(FP), R11 \
	ZERO4X4 \
	XORQ   R10, R10

// DOT4X4_END reduces the accumulators of a 4×4 dot tile to C[0:4, 0:4]
// (c+24(FP), row stride ldc+32(FP) in bytes), added to C when
// acc+40(FP) != 0, and returns; store is a label of the caller's.
#define DOT4X4_END(store) \
	MOVQ c+24(FP), DI \
	MOVQ ldc+32(FP), R12 \
	MOVQ acc+40(FP), R13 \
	REDUCE4X4 \
	CMPQ R13, $0 \
	JEQ  store \
	VADDPS (DI), X0, X0 \
	ADDQ   R12, DI \
	VADDPS (DI), X4, X4 \
	ADDQ   R12, DI \
	VADDPS (DI), X8, X8 \
	ADDQ   R12, DI \
	VADDPS (DI), X12, X12 \
	MOVQ   c+24(FP), DI \
store: \
	STORE4X4(R12) \
	VZEROUPPER \
	RET

// GROUPS_8X2 is the body of the few-row kernels over one-byte weights in
// groups (dotInt8x8x2AVX512, dotFP8x8x2AVX512): two B rows (SI, DI) against
// eight rows of A (R8..R15 at byte offset AX), in groups-8(SP) groups of
// g16+32(FP) steps of 16 weights, each group with one scale a B row (at
// BX and DX, broadcast into Z28 and Z29). WIDEN(P, Z) turns the 16 bytes
// at P into f32, which the scale then multiplies (Z16, Z17); each A load
// (Z18) serves both rows. C[i,j] accumulates in Z(4·(i%4) + 2·(i/4) + j).
// B is prefetched into L2 4 KiB ahead: a worker's rows are one contiguous
// run, which SI and DI cover between them.
#define GROUPS_8X2(WIDEN, LG, LK, LDONE) \
	ZERO4X4 \
	XORQ AX, AX \
LG: \
	CMPQ groups-8(SP), $0 \
	JLE  LDONE \
	VBROADCASTSS (BX), Z28 \
	VBROADCASTSS (DX), Z29 \
	MOVQ g16+32(FP), CX \
LK: \
	PREFETCHT1  4096(SI) \
	PREFETCHT1  4096(DI) \
	WIDEN((SI), Z16) \
	VMULPS      Z28, Z16, Z16 \
	WIDEN((DI), Z17) \
	VMULPS      Z29, Z17, Z17 \
	VMOVUPS     (R8)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z0 \
	VFMADD231PS Z18, Z17, Z1 \
	VMOVUPS     (R9)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z4 \
	VFMADD231PS Z18, Z17, Z5 \
	VMOVUPS     (R10)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z8 \
	VFMADD231PS Z18, Z17, Z9 \
	VMOVUPS     (R11)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z12 \
	VFMADD231PS Z18, Z17, Z13 \
	VMOVUPS     (R12)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z2 \
	VFMADD231PS Z18, Z17, Z3 \
	VMOVUPS     (R13)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z6 \
	VFMADD231PS Z18, Z17, Z7 \
	VMOVUPS     (R14)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z10 \
	VFMADD231PS Z18, Z17, Z11 \
	VMOVUPS     (R15)(AX*1), Z18 \
	VFMADD231PS Z18, Z16, Z14 \
	VFMADD231PS Z18, Z17, Z15 \
	ADDQ $16, SI \
	ADDQ $16, DI \
	ADDQ $64, AX \
	DECQ CX \
	JNZ  LK \
	ADDQ $4, BX \
	ADDQ $4, DX \
	DECQ groups-8(SP) \
	JMP  LG \
LDONE:

// GROUPS_8X2_ARGS loads the arguments (a *[8]*float32, b *[2]*byte,
// scales *[2]*float32, ngroups, ...) into GROUPS_8X2's registers.
#define GROUPS_8X2_ARGS \
	MOVQ a+0(FP), DX \
	ROWS8(DX) \
	MOVQ b+8(FP), DX \
	MOVQ 0(DX), SI \
	MOVQ 8(DX), DI \
	MOVQ scales+16(FP), DX \
	MOVQ 0(DX), BX \
	MOVQ 8(DX), DX \
	MOVQ ngroups+24(FP), AX \
	MOVQ AX, groups-8(SP)

// WIDEN_I8 widens 16 int8 weights at P to f32 in Z.
#define WIDEN_I8(P, Z) \
	VPMOVSXBD P, Z \
	VCVTDQ2PS Z, Z

// WIDEN_FP8 is LD_FP8F_512 at P with the mask in Z30: the E4M3 values
// times 2^-120.
#define WIDEN_FP8(P, Z) \
	VPMOVSXBD P, Z       \
	VPSLLD    $20, Z, Z  \
	VPANDD    Z30, Z, Z

// GROUPS_4X4 is GROUPS_8X2 for four B rows (R12..R15, their scales at BX,
// DX, SI, DI broadcast into Z24..Z27, the widened rows Z16..Z19) against
// four rows of A (R8..R11 at byte offset AX, each loaded once into Z20
// for the four); C[i,j] accumulates in Z(4i+j).
#define GROUPS_4X4(WIDEN, LG, LK, LDONE) \
	ZERO4X4 \
	XORQ AX, AX \
LG: \
	CMPQ groups-8(SP), $0 \
	JLE  LDONE \
	VBROADCASTSS (BX), Z24 \
	VBROADCASTSS (DX), Z25 \
	VBROADCASTSS (SI), Z26 \
	VBROADCASTSS (DI), Z27 \
	MOVQ g16+32(FP), CX \
LK: \
	PREFETCHT1  4096(R12) \
	PREFETCHT1  4096(R13) \
	PREFETCHT1  4096(R14) \
	PREFETCHT1  4096(R15) \
	WIDEN((R12), Z16) \
	VMULPS      Z24, Z16, Z16 \
	WIDEN((R13), Z17) \
	VMULPS      Z25, Z17, Z17 \
	WIDEN((R14), Z18) \
	VMULPS      Z26, Z18, Z18 \
	WIDEN((R15), Z19) \
	VMULPS      Z27, Z19, Z19 \
	VMOVUPS     (R8)(AX*1), Z20 \
	VFMADD231PS Z16, Z20, Z0 \
	VFMADD231PS Z17, Z20, Z1 \
	VFMADD231PS Z18, Z20, Z2 \
	VFMADD231PS Z19, Z20, Z3 \
	VMOVUPS     (R9)(AX*1), Z20 \
	VFMADD231PS Z16, Z20, Z4 \
	VFMADD231PS Z17, Z20, Z5 \
	VFMADD231PS Z18, Z20, Z6 \
	VFMADD231PS Z19, Z20, Z7 \
	VMOVUPS     (R10)(AX*1), Z20 \
	VFMADD231PS Z16, Z20, Z8 \
	VFMADD231PS Z17, Z20, Z9 \
	VFMADD231PS Z18, Z20, Z10 \
	VFMADD231PS Z19, Z20, Z11 \
	VMOVUPS     (R11)(AX*1), Z20 \
	VFMADD231PS Z16, Z20, Z12 \
	VFMADD231PS Z17, Z20, Z13 \
	VFMADD231PS Z18, Z20, Z14 \
	VFMADD231PS Z19, Z20, Z15 \
	ADDQ $16, R12 \
	ADDQ $16, R13 \
	ADDQ $16, R14 \
	ADDQ $16, R15 \
	ADDQ $64, AX \
	DECQ CX \
	JNZ  LK \
	ADDQ $4, BX \
	ADDQ $4, DX \
	ADDQ $4, SI \
	ADDQ $4, DI \
	DECQ groups-8(SP) \
	JMP  LG \
LDONE:

// GROUPS_4X4_ARGS loads the arguments (a *[4]*float32, b *[4]*byte,
// scales *[4]*float32, ngroups, ...) into GROUPS_4X4's registers.
#define GROUPS_4X4_ARGS \
	MOVQ a+0(FP), AX \
	MOVQ 0(AX), R8 \
	MOVQ 8(AX), R9 \
	MOVQ 16(AX), R10 \
	MOVQ 24(AX), R11 \
	MOVQ b+8(FP), AX \
	MOVQ 0(AX), R12 \
	MOVQ 8(AX), R13 \
	MOVQ 16(AX), R14 \
	MOVQ 24(AX), R15 \
	MOVQ scales+16(FP), AX \
	MOVQ 0(AX), BX \
	MOVQ 8(AX), DX \
	MOVQ 16(AX), SI \
	MOVQ 24(AX), DI \
	MOVQ ngroups+24(FP), AX \
	MOVQ AX, groups-8(SP)
