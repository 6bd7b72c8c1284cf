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

// func axpyAVX512(alpha float32, x, y *float32, n int)
// y[i] += alpha·x[i] for n a positive multiple of 16.
TEXT ·axpyAVX512(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Z1
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	XORQ AX, AX
axloop:
	VMOVUPS     (DI)(AX*4), Z0
	VFMADD231PS (SI)(AX*4), Z1, Z0
	VMOVUPS     Z0, (DI)(AX*4)
	ADDQ        $16, AX
	CMPQ        AX, CX
	JLT         axloop
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

// ---- AVX2 + FMA ----
// The same kernels on 8-lane ymm registers. 16 registers are too few to
// hold the exp constants, so they are 32-byte vectors in memory (L1 hits).
// Without VSCALEFPS, 2^n is built in the exponent bits, so the input clamp
// is [-87.3, 88.3] (n stays in the normal range): e^x of a very negative x
// is about 1.2e-38 instead of 0, and SiLU of a very negative gate is about
// -5e-37·up instead of -0.
DATA expc8<>+0(SB)/4, $0x3fb8aa3b // log2e = 1.44269504
DATA expc8<>+4(SB)/4, $0x3fb8aa3b
DATA expc8<>+8(SB)/4, $0x3fb8aa3b
DATA expc8<>+12(SB)/4, $0x3fb8aa3b
DATA expc8<>+16(SB)/4, $0x3fb8aa3b
DATA expc8<>+20(SB)/4, $0x3fb8aa3b
DATA expc8<>+24(SB)/4, $0x3fb8aa3b
DATA expc8<>+28(SB)/4, $0x3fb8aa3b
DATA expc8<>+32(SB)/4, $0x3f318000 // ln2hi = 0.693359375
DATA expc8<>+36(SB)/4, $0x3f318000
DATA expc8<>+40(SB)/4, $0x3f318000
DATA expc8<>+44(SB)/4, $0x3f318000
DATA expc8<>+48(SB)/4, $0x3f318000
DATA expc8<>+52(SB)/4, $0x3f318000
DATA expc8<>+56(SB)/4, $0x3f318000
DATA expc8<>+60(SB)/4, $0x3f318000
DATA expc8<>+64(SB)/4, $0xb95e8083 // ln2lo = -0.00021219444
DATA expc8<>+68(SB)/4, $0xb95e8083
DATA expc8<>+72(SB)/4, $0xb95e8083
DATA expc8<>+76(SB)/4, $0xb95e8083
DATA expc8<>+80(SB)/4, $0xb95e8083
DATA expc8<>+84(SB)/4, $0xb95e8083
DATA expc8<>+88(SB)/4, $0xb95e8083
DATA expc8<>+92(SB)/4, $0xb95e8083
DATA expc8<>+96(SB)/4, $0xc2ae999a // lo = -87.3
DATA expc8<>+100(SB)/4, $0xc2ae999a
DATA expc8<>+104(SB)/4, $0xc2ae999a
DATA expc8<>+108(SB)/4, $0xc2ae999a
DATA expc8<>+112(SB)/4, $0xc2ae999a
DATA expc8<>+116(SB)/4, $0xc2ae999a
DATA expc8<>+120(SB)/4, $0xc2ae999a
DATA expc8<>+124(SB)/4, $0xc2ae999a
DATA expc8<>+128(SB)/4, $0x42b0999a // hi = 88.3
DATA expc8<>+132(SB)/4, $0x42b0999a
DATA expc8<>+136(SB)/4, $0x42b0999a
DATA expc8<>+140(SB)/4, $0x42b0999a
DATA expc8<>+144(SB)/4, $0x42b0999a
DATA expc8<>+148(SB)/4, $0x42b0999a
DATA expc8<>+152(SB)/4, $0x42b0999a
DATA expc8<>+156(SB)/4, $0x42b0999a
DATA expc8<>+160(SB)/4, $0x39500d01 // c7 = 0.000198412698
DATA expc8<>+164(SB)/4, $0x39500d01
DATA expc8<>+168(SB)/4, $0x39500d01
DATA expc8<>+172(SB)/4, $0x39500d01
DATA expc8<>+176(SB)/4, $0x39500d01
DATA expc8<>+180(SB)/4, $0x39500d01
DATA expc8<>+184(SB)/4, $0x39500d01
DATA expc8<>+188(SB)/4, $0x39500d01
DATA expc8<>+192(SB)/4, $0x3ab60b61 // c6 = 0.00138888889
DATA expc8<>+196(SB)/4, $0x3ab60b61
DATA expc8<>+200(SB)/4, $0x3ab60b61
DATA expc8<>+204(SB)/4, $0x3ab60b61
DATA expc8<>+208(SB)/4, $0x3ab60b61
DATA expc8<>+212(SB)/4, $0x3ab60b61
DATA expc8<>+216(SB)/4, $0x3ab60b61
DATA expc8<>+220(SB)/4, $0x3ab60b61
DATA expc8<>+224(SB)/4, $0x3c088889 // c5 = 0.00833333333
DATA expc8<>+228(SB)/4, $0x3c088889
DATA expc8<>+232(SB)/4, $0x3c088889
DATA expc8<>+236(SB)/4, $0x3c088889
DATA expc8<>+240(SB)/4, $0x3c088889
DATA expc8<>+244(SB)/4, $0x3c088889
DATA expc8<>+248(SB)/4, $0x3c088889
DATA expc8<>+252(SB)/4, $0x3c088889
DATA expc8<>+256(SB)/4, $0x3d2aaaab // c4 = 0.0416666667
DATA expc8<>+260(SB)/4, $0x3d2aaaab
DATA expc8<>+264(SB)/4, $0x3d2aaaab
DATA expc8<>+268(SB)/4, $0x3d2aaaab
DATA expc8<>+272(SB)/4, $0x3d2aaaab
DATA expc8<>+276(SB)/4, $0x3d2aaaab
DATA expc8<>+280(SB)/4, $0x3d2aaaab
DATA expc8<>+284(SB)/4, $0x3d2aaaab
DATA expc8<>+288(SB)/4, $0x3e2aaaab // c3 = 0.166666667
DATA expc8<>+292(SB)/4, $0x3e2aaaab
DATA expc8<>+296(SB)/4, $0x3e2aaaab
DATA expc8<>+300(SB)/4, $0x3e2aaaab
DATA expc8<>+304(SB)/4, $0x3e2aaaab
DATA expc8<>+308(SB)/4, $0x3e2aaaab
DATA expc8<>+312(SB)/4, $0x3e2aaaab
DATA expc8<>+316(SB)/4, $0x3e2aaaab
DATA expc8<>+320(SB)/4, $0x3f000000 // c2 = 0.5
DATA expc8<>+324(SB)/4, $0x3f000000
DATA expc8<>+328(SB)/4, $0x3f000000
DATA expc8<>+332(SB)/4, $0x3f000000
DATA expc8<>+336(SB)/4, $0x3f000000
DATA expc8<>+340(SB)/4, $0x3f000000
DATA expc8<>+344(SB)/4, $0x3f000000
DATA expc8<>+348(SB)/4, $0x3f000000
DATA expc8<>+352(SB)/4, $0x3f800000 // one = 1
DATA expc8<>+356(SB)/4, $0x3f800000
DATA expc8<>+360(SB)/4, $0x3f800000
DATA expc8<>+364(SB)/4, $0x3f800000
DATA expc8<>+368(SB)/4, $0x3f800000
DATA expc8<>+372(SB)/4, $0x3f800000
DATA expc8<>+376(SB)/4, $0x3f800000
DATA expc8<>+380(SB)/4, $0x3f800000
DATA expc8<>+384(SB)/4, $127 // exponent bias (int32)
DATA expc8<>+388(SB)/4, $127
DATA expc8<>+392(SB)/4, $127
DATA expc8<>+396(SB)/4, $127
DATA expc8<>+400(SB)/4, $127
DATA expc8<>+404(SB)/4, $127
DATA expc8<>+408(SB)/4, $127
DATA expc8<>+412(SB)/4, $127
GLOBL expc8<>(SB), RODATA|NOPTR, $416

// EXP256(X, N, P): X = e^X lane-wise (8 lanes), N and P clobbered.
#define EXP256(X, N, P) \
	VMAXPS       expc8<>+96(SB), X, X  \
	VMINPS       expc8<>+128(SB), X, X \
	VMULPS       expc8<>+0(SB), X, N   \
	VROUNDPS     $0, N, N              \
	VFNMADD231PS expc8<>+32(SB), N, X  \
	VFNMADD231PS expc8<>+64(SB), N, X  \
	VMOVUPS      expc8<>+160(SB), P    \
	VFMADD213PS  expc8<>+192(SB), X, P \
	VFMADD213PS  expc8<>+224(SB), X, P \
	VFMADD213PS  expc8<>+256(SB), X, P \
	VFMADD213PS  expc8<>+288(SB), X, P \
	VFMADD213PS  expc8<>+320(SB), X, P \
	VFMADD213PS  expc8<>+352(SB), X, P \
	VFMADD213PS  expc8<>+352(SB), X, P \
	VCVTPS2DQ    N, N                  \
	VPADDD       expc8<>+384(SB), N, N \
	VPSLLD       $23, N, N             \
	VMULPS       N, P, X

// func expSubSumAVX2(x *float32, n int, mx float32) float32
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Y7
	VXORPS Y0, Y0, Y0
	XORQ   AX, AX
es2loop:
	VMOVUPS (SI)(AX*4), Y1
	VSUBPS  Y7, Y1, Y1
	EXP256(Y1, Y2, Y3)
	VMOVUPS Y1, (SI)(AX*4)
	VADDPS  Y1, Y0, Y0
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     es2loop
	REDUCE256(Y0, X0, ret+24(FP))
	VZEROUPPER
	RET

// func siluMulAVX2(dst, gate, up *float32, n int)
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
sm2loop:
	VMOVUPS (SI)(AX*4), Y0
	VXORPS  Y1, Y1, Y1
	VSUBPS  Y0, Y1, Y1
	EXP256(Y1, Y2, Y3)
	VADDPS  expc8<>+352(SB), Y1, Y1
	VMULPS  (DX)(AX*4), Y0, Y0
	VDIVPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     sm2loop
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int) float32
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX
ss2loop:
	VMOVUPS     (SI)(AX*4), Y2
	VMOVUPS     32(SI)(AX*4), Y3
	VFMADD231PS Y2, Y2, Y0
	VFMADD231PS Y3, Y3, Y1
	ADDQ        $16, AX
	CMPQ        AX, CX
	JLT         ss2loop
	VADDPS Y1, Y0, Y0
	REDUCE256(Y0, X0, ret+16(FP))
	VZEROUPPER
	RET

// func scaleMulAVX2(dst, x, w *float32, n int, s float32)
TEXT ·scaleMulAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Y4
	XORQ AX, AX
sc2loop:
	VMULPS  (SI)(AX*4), Y4, Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     sc2loop
	VZEROUPPER
	RET

// func scaleInPlaceAVX2(x *float32, n int, s float32)
TEXT ·scaleInPlaceAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y4
	XORQ AX, AX
si2loop:
	VMULPS  (SI)(AX*4), Y4, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     si2loop
	VZEROUPPER
	RET

// func addInPlaceAVX2(dst, x *float32, n int)
TEXT ·addInPlaceAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
ad2loop:
	VMOVUPS (DI)(AX*4), Y0
	VADDPS  (SI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     ad2loop
	VZEROUPPER
	RET

// func axpyAVX2(alpha float32, x, y *float32, n int)
// axpyAVX512 for AVX2 machines: n a positive multiple of 8.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y1
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	XORQ AX, AX
ax2loop:
	VMOVUPS     (DI)(AX*4), Y0
	VFMADD231PS (SI)(AX*4), Y1, Y0
	VMOVUPS     Y0, (DI)(AX*4)
	ADDQ        $8, AX
	CMPQ        AX, CX
	JLT         ax2loop
	VZEROUPPER
	RET

// func logisticAVX512(dst, src *float32, n int)
// dst[i] = 1 / (1 + e^-src[i]) for n a positive multiple of 16; NaN stays
// NaN (the clamp inside EXP512 would turn it into a number, so NaN lanes
// are copied back from src at the end).
TEXT ·logisticAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	XORQ AX, AX
lgloop:
	VMOVUPS (SI)(AX*4), Z0
	VXORPS  Z1, Z1, Z1
	VSUBPS  Z0, Z1, Z1
	EXP512(Z1, Z2, Z3)
	VADDPS  Z31, Z1, Z1
	VDIVPS  Z1, Z31, Z1
	VCMPPS  $3, Z0, Z0, K1
	VMOVAPS Z0, K1, Z1
	VMOVUPS Z1, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     lgloop
	VZEROUPPER
	RET

// ---- AVX2 widening (the blocked GEMM's scratch; n a multiple of 8) ----

// func widenBF16AVX2(dst *float32, src *uint16, n int)
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
wb2loop:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       wb2loop
	VZEROUPPER
	RET

// func widenF16AVX2(dst *float32, src *uint16, n int)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
wh2loop:
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       wh2loop
	VZEROUPPER
	RET

// func widenI8AVX2(dst *float32, src *int8, n int, s float32)
TEXT ·widenI8AVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Y4
	XORQ AX, AX
wi2loop:
	VPMOVSXBD (SI)(AX*1), Y0
	VCVTDQ2PS Y0, Y0
	VMULPS    Y4, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       wi2loop
	VZEROUPPER
	RET

// erf and tanh constants: erf is Abramowitz and Stegun's 7.1.26 (absolute
// error below 1.5e-7), as the backend's scalar erff: with t = 1/(1+p|x|),
// erf|x| = 1 - t(a1 + t(a2 + t(a3 + t(a4 + t·a5))))·e^(-x²). tanh is
// 1 - 2/(e^(2|x|)+1) from |x| = 0.5 up (there the subtraction loses at
// most a bit), and below it the odd Taylor series x + x³(c3 + x²(c5 + …
// + x²·c15)), whose next term is under 1e-8 of x.
DATA erfc<>+0(SB)/4, $0x3ea7ba05  // p = 0.3275911
DATA erfc<>+4(SB)/4, $0x3e827906  // a1 = 0.254829592
DATA erfc<>+8(SB)/4, $0xbe91a98e  // a2 = -0.284496736
DATA erfc<>+12(SB)/4, $0x3fb5f0e3 // a3 = 1.421413741
DATA erfc<>+16(SB)/4, $0xbfba00e3 // a4 = -1.453152027
DATA erfc<>+20(SB)/4, $0x3f87dc22 // a5 = 1.061405429
DATA erfc<>+24(SB)/4, $0x7fffffff // abs mask
DATA erfc<>+28(SB)/4, $0x40000000 // 2
DATA erfc<>+32(SB)/4, $0x3f000000 // 0.5: tanh's series below, exp above
DATA erfc<>+36(SB)/4, $0xbeaaaaab // c3 = -1/3
DATA erfc<>+40(SB)/4, $0x3e088889 // c5 = 2/15
DATA erfc<>+44(SB)/4, $0xbd5d0dd1 // c7 = -17/315
DATA erfc<>+48(SB)/4, $0x3cb327a4 // c9 = 62/2835
DATA erfc<>+52(SB)/4, $0xbc11371b // c11 = -1382/155925
DATA erfc<>+56(SB)/4, $0x3b6b69e8 // c13 = 21844/6081075
DATA erfc<>+60(SB)/4, $0xbabed1b2 // c15 = -929569/638512875
GLOBL erfc<>(SB), RODATA|NOPTR, $64

// func erfAVX512(dst, src *float32, n int)
// dst[i] = erf(src[i]) for n a positive multiple of 16; NaN stays NaN.
TEXT ·erfAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	VBROADCASTSS erfc<>+0(SB), Z10
	VBROADCASTSS erfc<>+4(SB), Z11
	VBROADCASTSS erfc<>+8(SB), Z12
	VBROADCASTSS erfc<>+12(SB), Z13
	VBROADCASTSS erfc<>+16(SB), Z14
	VBROADCASTSS erfc<>+20(SB), Z15
	VBROADCASTSS erfc<>+24(SB), Z16
	XORQ AX, AX
erfloop:
	VMOVUPS     (SI)(AX*4), Z0
	VANDPS      Z16, Z0, Z1     // |x|
	VMOVAPS     Z1, Z2
	VFMADD213PS Z31, Z10, Z2    // 1 + p|x|
	VDIVPS      Z2, Z31, Z2     // t
	VMOVAPS     Z15, Z3
	VFMADD213PS Z14, Z2, Z3
	VFMADD213PS Z13, Z2, Z3
	VFMADD213PS Z12, Z2, Z3
	VFMADD213PS Z11, Z2, Z3
	VMULPS      Z2, Z3, Z3      // t·poly(t)
	VMULPS      Z1, Z1, Z4
	VXORPS      Z5, Z5, Z5
	VSUBPS      Z4, Z5, Z4      // -x²
	EXP512(Z4, Z5, Z6)
	VMULPS      Z4, Z3, Z3
	VSUBPS      Z3, Z31, Z3     // erf|x| >= 0
	VANDNPS     Z0, Z16, Z7     // the sign of x
	VORPS       Z7, Z3, Z3
	VCMPPS      $3, Z0, Z0, K1  // NaN lanes keep x
	VMOVAPS     Z0, K1, Z3
	VMOVUPS     Z3, (DI)(AX*4)
	ADDQ        $16, AX
	CMPQ        AX, CX
	JLT         erfloop
	VZEROUPPER
	RET

// func tanhAVX512(dst, src *float32, n int)
// dst[i] = tanh(src[i]) for n a positive multiple of 16; NaN stays NaN.
TEXT ·tanhAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	VBROADCASTSS erfc<>+24(SB), Z16
	VBROADCASTSS erfc<>+28(SB), Z17
	VBROADCASTSS erfc<>+32(SB), Z18
	VBROADCASTSS erfc<>+36(SB), Z10
	VBROADCASTSS erfc<>+40(SB), Z11
	VBROADCASTSS erfc<>+44(SB), Z12
	VBROADCASTSS erfc<>+48(SB), Z13
	VBROADCASTSS erfc<>+52(SB), Z14
	VBROADCASTSS erfc<>+56(SB), Z15
	VBROADCASTSS erfc<>+60(SB), Z19
	XORQ AX, AX
tanhloop:
	VMOVUPS     (SI)(AX*4), Z0
	VANDPS      Z16, Z0, Z1     // |x|
	VADDPS      Z1, Z1, Z4      // 2|x|
	EXP512(Z4, Z5, Z6)
	VADDPS      Z31, Z4, Z4     // e^(2|x|) + 1
	VDIVPS      Z4, Z17, Z4     // 2/(e^(2|x|)+1)
	VSUBPS      Z4, Z31, Z4     // tanh|x|, from 0.5 up
	VMULPS      Z1, Z1, Z2      // x²
	VMOVAPS     Z19, Z3
	VFMADD213PS Z15, Z2, Z3
	VFMADD213PS Z14, Z2, Z3
	VFMADD213PS Z13, Z2, Z3
	VFMADD213PS Z12, Z2, Z3
	VFMADD213PS Z11, Z2, Z3
	VFMADD213PS Z10, Z2, Z3
	VMULPS      Z2, Z3, Z3
	VMULPS      Z1, Z3, Z3
	VADDPS      Z1, Z3, Z3      // tanh|x| below 0.5
	VCMPPS      $1, Z18, Z1, K2 // |x| < 0.5
	VMOVAPS     Z3, K2, Z4
	VANDNPS     Z0, Z16, Z7     // the sign of x
	VORPS       Z7, Z4, Z4
	VCMPPS      $3, Z0, Z0, K1  // NaN lanes keep x
	VMOVAPS     Z0, K1, Z4
	VMOVUPS     Z4, (DI)(AX*4)
	ADDQ        $16, AX
	CMPQ        AX, CX
	JLT         tanhloop
	VZEROUPPER
	RET
