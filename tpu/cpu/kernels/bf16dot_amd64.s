//go:build amd64 && !purego

#include "textflag.h"
#include "macros_amd64.h"

// The Go assembler has no AVX512_BF16 mnemonics, so the two instructions
// used here are spelled as bytes (encodings from llvm-mc; each line's
// comment gives the Intel form).
//
// DPBF16(p0, p1, modrm) is VDPBF16PS zmm_dst, zmm_src1, zmm_src2 (EVEX.512.
// F3.0F38.W0 52 /r): each f32 lane of dst += src1[2i]·src2[2i] +
// src1[2i+1]·src2[2i+1], the bf16 pairs' products exact, denormals read and
// written as zero, round to nearest even.
#define DPBF16(p0, p1, modrm) BYTE $0x62; BYTE $p0; BYTE $p1; BYTE $0x40; BYTE $0x52; BYTE $modrm

// func dotBF16x4x4AVX512(a, b *[4]*uint16, k int, c *float32, ldc, acc int)
// C[0:4, 0:4] (=, or += if acc != 0) Σ_{p<k} A_i[p]·B_j[p] with A_i = a[i],
// B_j = b[j] rows of bf16 (row pointers, so edge tiles can repeat a row);
// k is a positive multiple of 32; ldc in bytes. The shape of
// gemmDot4x4AVX512 with VDPBF16PS for VFMADD231PS: each step loads 32
// values of each row (Z16..Z19 of A, Z20..Z23 of B) and Z(4i+j)
// accumulates C[i,j] in 16 lanes of pair sums, reduced at the end.
TEXT ·dotBF16x4x4AVX512(SB), NOSPLIT, $0-48
	DOT4X4_BEGIN
b4loop:
	VMOVUPS (AX)(R10*2), Z16
	VMOVUPS (BX)(R10*2), Z17
	VMOVUPS (CX)(R10*2), Z18
	VMOVUPS (DX)(R10*2), Z19
	VMOVUPS (SI)(R10*2), Z20
	VMOVUPS (DI)(R10*2), Z21
	VMOVUPS (R8)(R10*2), Z22
	VMOVUPS (R9)(R10*2), Z23
	DPBF16(0xb2, 0x7e, 0xc4) // vdpbf16ps zmm0, zmm16, zmm20
	DPBF16(0xb2, 0x7e, 0xcd) // vdpbf16ps zmm1, zmm16, zmm21
	DPBF16(0xb2, 0x7e, 0xd6) // vdpbf16ps zmm2, zmm16, zmm22
	DPBF16(0xb2, 0x7e, 0xdf) // vdpbf16ps zmm3, zmm16, zmm23
	DPBF16(0xb2, 0x76, 0xe4) // vdpbf16ps zmm4, zmm17, zmm20
	DPBF16(0xb2, 0x76, 0xed) // vdpbf16ps zmm5, zmm17, zmm21
	DPBF16(0xb2, 0x76, 0xf6) // vdpbf16ps zmm6, zmm17, zmm22
	DPBF16(0xb2, 0x76, 0xff) // vdpbf16ps zmm7, zmm17, zmm23
	DPBF16(0x32, 0x6e, 0xc4) // vdpbf16ps zmm8, zmm18, zmm20
	DPBF16(0x32, 0x6e, 0xcd) // vdpbf16ps zmm9, zmm18, zmm21
	DPBF16(0x32, 0x6e, 0xd6) // vdpbf16ps zmm10, zmm18, zmm22
	DPBF16(0x32, 0x6e, 0xdf) // vdpbf16ps zmm11, zmm18, zmm23
	DPBF16(0x32, 0x66, 0xe4) // vdpbf16ps zmm12, zmm19, zmm20
	DPBF16(0x32, 0x66, 0xed) // vdpbf16ps zmm13, zmm19, zmm21
	DPBF16(0x32, 0x66, 0xf6) // vdpbf16ps zmm14, zmm19, zmm22
	DPBF16(0x32, 0x66, 0xff) // vdpbf16ps zmm15, zmm19, zmm23
	ADDQ $32, R10
	CMPQ R10, R11
	JLT  b4loop
	DOT4X4_END(b4store)

// func roundBF16AVX512(dst *uint16, src *float32, n int)
// dst[i] = bf16(src[i]) for n a positive multiple of 16, by VCVTNEPS2BF16
// (round to nearest even, NaN kept quiet, denormals to signed zero).
TEXT ·roundBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
rbloop:
	VMOVUPS (SI), Z0
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc8 // vcvtneps2bf16 ymm1, zmm0
	VMOVDQU Y1, (DI)
	ADDQ    $64, SI
	ADDQ    $32, DI
	SUBQ    $16, CX
	JNZ     rbloop
	VZEROUPPER
	RET
