//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// Row kernels, AVX-512. n is a multiple of 16; the Go side does the tail.

// exp constants: log2(e), ln2 split in a high part exact in few bits and a
// low correction (Cody-Waite), the input clamp [lo, hi] (below lo the result
// underflows to 0, above hi it overflows to +Inf through VSCALEFPS), and the
// Taylor coefficients 1/k! for k = 7..2, 1. On |r| <= ln2/2 the degree-7
// Taylor polynomial of e^r is within 5e-9 relative.
DATA expc<>+0(SB)/4, $0x3fb8aa3b // log2e = 1.44269504
DATA expc<>+4(SB)/4, $0x3f318000 // ln2hi = 0.693359375
DATA expc<>+8(SB)/4, $0xb95e8083 // ln2lo = -0.00021219444
DATA expc<>+12(SB)/4, $0xc2ce0000 // lo = -103
DATA expc<>+16(SB)/4, $0x42b1999a // hi = 88.8
DATA expc<>+20(SB)/4, $0x39500d01 // c7 = 0.000198412698
DATA expc<>+24(SB)/4, $0x3ab60b61 // c6 = 0.00138888889
DATA expc<>+28(SB)/4, $0x3c088889 // c5 = 0.00833333333
DATA expc<>+32(SB)/4, $0x3d2aaaab // c4 = 0.0416666667
DATA expc<>+36(SB)/4, $0x3e2aaaab // c3 = 0.166666667
DATA expc<>+40(SB)/4, $0x3f000000 // c2 = 0.5
DATA expc<>+44(SB)/4, $0x3f800000 // one = 1
GLOBL expc<>(SB), RODATA|NOPTR, $48

// EXPCONSTS loads the constants into Z20..Z31 (Z20 log2e ... Z31 one).
#define EXPCONSTS \
	VBROADCASTSS expc<>+0(SB), Z20 \
	VBROADCASTSS expc<>+4(SB), Z21 \
	VBROADCASTSS expc<>+8(SB), Z22 \
	VBROADCASTSS expc<>+12(SB), Z23 \
	VBROADCASTSS expc<>+16(SB), Z24 \
	VBROADCASTSS expc<>+20(SB), Z25 \
	VBROADCASTSS expc<>+24(SB), Z26 \
	VBROADCASTSS expc<>+28(SB), Z27 \
	VBROADCASTSS expc<>+32(SB), Z28 \
	VBROADCASTSS expc<>+36(SB), Z29 \
	VBROADCASTSS expc<>+40(SB), Z30 \
	VBROADCASTSS expc<>+44(SB), Z31

// EXP512(X, N, P): X = e^X lane-wise, N and P clobbered. n = round(x·log2e),
// r = x - n·ln2, e^x = p(r)·2^n.
#define EXP512(X, N, P) \
	VMAXPS       Z23, X, X \
	VMINPS       Z24, X, X \
	VMULPS       Z20, X, N \
	VRNDSCALEPS  $0, N, N \
	VFNMADD231PS Z21, N, X \
	VFNMADD231PS Z22, N, X \
	VMOVAPS      Z25, P \
	VFMADD213PS  Z26, X, P \
	VFMADD213PS  Z27, X, P \
	VFMADD213PS  Z28, X, P \
	VFMADD213PS  Z29, X, P \
	VFMADD213PS  Z30, X, P \
	VFMADD213PS  Z31, X, P \
	VFMADD213PS  Z31, X, P \
	VSCALEFPS    N, P, X

// func expSubSumAVX512(x *float32, n int, mx float32) float32
// x[i] = e^(x[i]-mx); returns the sum.
TEXT ·expSubSumAVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Z19
	EXPCONSTS
	VPXORD Z0, Z0, Z0
	XORQ   AX, AX
esloop:
	VMOVUPS (SI)(AX*4), Z1
	VSUBPS  Z19, Z1, Z1
	EXP512(Z1, Z2, Z3)
	VMOVUPS Z1, (SI)(AX*4)
	VADDPS  Z1, Z0, Z0
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     esloop
	REDUCE512(Z0, Y0, X0, ret+24(FP))
	VZEROUPPER
	RET

// func siluMulAVX512(dst, gate, up *float32, n int)
// dst[i] = gate[i] / (1 + e^-gate[i]) · up[i].
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXPCONSTS
	XORQ AX, AX
smloop:
	VMOVUPS (SI)(AX*4), Z0
	VXORPS  Z1, Z1, Z1
	VSUBPS  Z0, Z1, Z1
	EXP512(Z1, Z2, Z3)
	VADDPS  Z31, Z1, Z1
	VMULPS  (DX)(AX*4), Z0, Z0
	VDIVPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     smloop
	VZEROUPPER
	RET

// func sumSquaresAVX512(x *float32, n int) float32
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	XORQ   AX, AX
	MOVQ   CX, DX
	ANDQ   $-32, DX
	JZ     ss16
ss32:
	VMOVUPS     (SI)(AX*4), Z2
	VMOVUPS     64(SI)(AX*4), Z3
	VFMADD231PS Z2, Z2, Z0
	VFMADD231PS Z3, Z3, Z1
	ADDQ        $32, AX
	CMPQ        AX, DX
	JLT         ss32
ss16:
	CMPQ        AX, CX
	JGE         ssdone
	VMOVUPS     (SI)(AX*4), Z2
	VFMADD231PS Z2, Z2, Z0
ssdone:
	VADDPS Z1, Z0, Z0
	REDUCE512(Z0, Y0, X0, ret+16(FP))
	VZEROUPPER
	RET

// func scaleMulAVX512(dst, x, w *float32, n int, s float32)
// dst[i] = x[i]·s·w[i].
TEXT ·scaleMulAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z4
	XORQ AX, AX
scloop:
	VMULPS  (SI)(AX*4), Z4, Z0
	VMULPS  (DX)(AX*4), Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     scloop
	VZEROUPPER
	RET

// func scaleInPlaceAVX512(x *float32, n int, s float32)
TEXT ·scaleInPlaceAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z4
	XORQ AX, AX
siloop:
	VMULPS  (SI)(AX*4), Z4, Z0
	VMOVUPS Z0, (SI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     siloop
	VZEROUPPER
	RET

// func addInPlaceAVX512(dst, x *float32, n int)
TEXT ·addInPlaceAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
adloop:
	VMOVUPS (DI)(AX*4), Z0
	VADDPS  (SI)(AX*4), Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     adloop
	VZEROUPPER
	RET

// Weight widening for the GEMM scratch: 16 elements per step.

// func widenBF16AVX512(dst *float32, src *uint16, n int)
TEXT ·widenBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
wbloop:
	VPMOVZXWD (SI)(AX*2), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JLT       wbloop
	VZEROUPPER
	RET

// func widenF16AVX512(dst *float32, src *uint16, n int)
TEXT ·widenF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
whloop:
	VCVTPH2PS (SI)(AX*2), Z0
	VMOVUPS   Z0, (DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JLT       whloop
	VZEROUPPER
	RET

// func widenI8AVX512(dst *float32, src *int8, n int, s float32)
TEXT ·widenI8AVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Z4
	XORQ AX, AX
wiloop:
	VPMOVSXBD (SI)(AX*1), Z0
	VCVTDQ2PS Z0, Z0
	VMULPS    Z4, Z0, Z0
	VMOVUPS   Z0, (DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JLT       wiloop
	VZEROUPPER
	RET
