//go:build amd64 && !purego

#include "textflag.h"

// Elementwise f32 arithmetic, AVX-512: dst = a op c over n elements, n a
// positive multiple of 16 (the Go side does the tail), with c (VS) or a
// (SV) one broadcast value. Each lane is the one IEEE operation the
// scalar loop does, so the results are the same bits.

// func addVVAVX512(dst, a, c *float32, n int)
TEXT ·addVVAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ c+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
addvvloop:
	VMOVUPS (SI)(AX*4), Z0
	VMOVUPS (DX)(AX*4), Z1
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     addvvloop
	VZEROUPPER
	RET

// func addVSAVX512(dst, a *float32, c float32, n int)
TEXT ·addVSAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	VBROADCASTSS c+16(FP), Z1
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
addvsloop:
	VMOVUPS (SI)(AX*4), Z0
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     addvsloop
	VZEROUPPER
	RET

// func subVVAVX512(dst, a, c *float32, n int)
TEXT ·subVVAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ c+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
subvvloop:
	VMOVUPS (SI)(AX*4), Z0
	VMOVUPS (DX)(AX*4), Z1
	VSUBPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     subvvloop
	VZEROUPPER
	RET

// func subVSAVX512(dst, a *float32, c float32, n int)
TEXT ·subVSAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	VBROADCASTSS c+16(FP), Z1
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
subvsloop:
	VMOVUPS (SI)(AX*4), Z0
	VSUBPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     subvsloop
	VZEROUPPER
	RET

// func mulVVAVX512(dst, a, c *float32, n int)
TEXT ·mulVVAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ c+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
mulvvloop:
	VMOVUPS (SI)(AX*4), Z0
	VMOVUPS (DX)(AX*4), Z1
	VMULPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     mulvvloop
	VZEROUPPER
	RET

// func mulVSAVX512(dst, a *float32, c float32, n int)
TEXT ·mulVSAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	VBROADCASTSS c+16(FP), Z1
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
mulvsloop:
	VMOVUPS (SI)(AX*4), Z0
	VMULPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     mulvsloop
	VZEROUPPER
	RET

// func divVVAVX512(dst, a, c *float32, n int)
TEXT ·divVVAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ c+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
divvvloop:
	VMOVUPS (SI)(AX*4), Z0
	VMOVUPS (DX)(AX*4), Z1
	VDIVPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     divvvloop
	VZEROUPPER
	RET

// func divVSAVX512(dst, a *float32, c float32, n int)
TEXT ·divVSAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	VBROADCASTSS c+16(FP), Z1
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
divvsloop:
	VMOVUPS (SI)(AX*4), Z0
	VDIVPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     divvsloop
	VZEROUPPER
	RET

// func subSVAVX512(dst *float32, a float32, c *float32, n int)
TEXT ·subSVAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	VBROADCASTSS a+8(FP), Z1
	MOVQ         c+16(FP), SI
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
subsvloop:
	VMOVUPS (SI)(AX*4), Z0
	VSUBPS  Z0, Z1, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     subsvloop
	VZEROUPPER
	RET

// func divSVAVX512(dst *float32, a float32, c *float32, n int)
TEXT ·divSVAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	VBROADCASTSS a+8(FP), Z1
	MOVQ         c+16(FP), SI
	MOVQ         n+24(FP), CX
	XORQ         AX, AX
divsvloop:
	VMOVUPS (SI)(AX*4), Z0
	VDIVPS  Z0, Z1, Z0
	VMOVUPS Z0, (DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JLT     divsvloop
	VZEROUPPER
	RET
