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
// Each step also prefetches four lines into L2, walking from 4 KiB past
// the start of the next four B rows (taken to follow at the stride of
// these): for a few rows of A, B streams from memory and the hardware
// prefetcher, which starts afresh on each short row, falls behind. Into
// L2, not L1, where the lines would evict the A rows.
TEXT ·dotBF16x4x4AVX512(SB), NOSPLIT, $0-48
	DOT4X4_BEGIN
	MOVQ R9, R12
	SUBQ R8, R12
	ADDQ R9, R12
b4loop:
	PREFETCHT1 4096(R12)
	PREFETCHT1 4160(R12)
	PREFETCHT1 4224(R12)
	PREFETCHT1 4288(R12)
	ADDQ $256, R12
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

// func dotBF16x8x2AVX512(a *[8]*uint16, b *[2]*uint16, k int, c *[16]float32)
// The products of 8 rows of A (a[i]) with 2 rows of B (b[j]), bf16 pairs
// into f32 sums over k (a positive multiple of 32), for a few rows of A:
// each step loads 32 values of both B rows once (Z16, Z17) and of each A
// row (Z18..Z25), so B streams from memory in one pass while the A rows
// stay in L1. C[i,j] accumulates in Z(4·(i%4) + 2·(i/4) + j), so that
// REDUCE4X4's rows give c[4·(i%4) + 2·(i/4) + j]. Each step prefetches
// two lines into L2 as dotBF16x4x4AVX512 does, from 4 KiB past the start
// of the next two B rows.
TEXT ·dotBF16x8x2AVX512(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), R12
	MOVQ 0(R12), AX
	MOVQ 8(R12), BX
	MOVQ 16(R12), CX
	MOVQ 24(R12), DX
	MOVQ 32(R12), SI
	MOVQ 40(R12), DI
	MOVQ 48(R12), R8
	MOVQ 56(R12), R9
	MOVQ b+8(FP), R13
	MOVQ 0(R13), R11
	MOVQ 8(R13), R12
	MOVQ R12, R13
	SUBQ R11, R13
	ADDQ R12, R13
	ZERO4X4
	XORQ R10, R10
b82loop:
	PREFETCHT1 4096(R13)(R10*4)
	PREFETCHT1 4160(R13)(R10*4)
	VMOVUPS (R11)(R10*2), Z16
	VMOVUPS (R12)(R10*2), Z17
	VMOVUPS (AX)(R10*2), Z18
	DPBF16(0xb2, 0x6e, 0xc0) // vdpbf16ps zmm0, zmm18, zmm16
	DPBF16(0xb2, 0x6e, 0xc9) // vdpbf16ps zmm1, zmm18, zmm17
	VMOVUPS (BX)(R10*2), Z19
	DPBF16(0xb2, 0x66, 0xe0) // vdpbf16ps zmm4, zmm19, zmm16
	DPBF16(0xb2, 0x66, 0xe9) // vdpbf16ps zmm5, zmm19, zmm17
	VMOVUPS (CX)(R10*2), Z20
	DPBF16(0x32, 0x5e, 0xc0) // vdpbf16ps zmm8, zmm20, zmm16
	DPBF16(0x32, 0x5e, 0xc9) // vdpbf16ps zmm9, zmm20, zmm17
	VMOVUPS (DX)(R10*2), Z21
	DPBF16(0x32, 0x56, 0xe0) // vdpbf16ps zmm12, zmm21, zmm16
	DPBF16(0x32, 0x56, 0xe9) // vdpbf16ps zmm13, zmm21, zmm17
	VMOVUPS (SI)(R10*2), Z22
	DPBF16(0xb2, 0x4e, 0xd0) // vdpbf16ps zmm2, zmm22, zmm16
	DPBF16(0xb2, 0x4e, 0xd9) // vdpbf16ps zmm3, zmm22, zmm17
	VMOVUPS (DI)(R10*2), Z23
	DPBF16(0xb2, 0x46, 0xf0) // vdpbf16ps zmm6, zmm23, zmm16
	DPBF16(0xb2, 0x46, 0xf9) // vdpbf16ps zmm7, zmm23, zmm17
	VMOVUPS (R8)(R10*2), Z24
	DPBF16(0x32, 0x3e, 0xd0) // vdpbf16ps zmm10, zmm24, zmm16
	DPBF16(0x32, 0x3e, 0xd9) // vdpbf16ps zmm11, zmm24, zmm17
	VMOVUPS (R9)(R10*2), Z25
	DPBF16(0x32, 0x36, 0xf0) // vdpbf16ps zmm14, zmm25, zmm16
	DPBF16(0x32, 0x36, 0xf9) // vdpbf16ps zmm15, zmm25, zmm17
	ADDQ $32, R10
	CMPQ R10, k+16(FP)
	JLT  b82loop
	REDUCE_STORE16(c+24(FP))
	VZEROUPPER
	RET

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
