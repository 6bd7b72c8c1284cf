// Package quant decodes the quantized tensor formats of Hugging Face
// checkpoints into floats.
//
// MXFP4 is the OCP Microscaling FP4 format ("OCP Microscaling Formats (MX)
// Specification" v1.0, 2023) as GPT-OSS checkpoints store it
// (transformers' integrations/mxfp4.py): a tensor [..., out, in] is held
// as blocks U8 [..., out, in/32, 16], two FP4 E2M1 values a byte, the low
// nibble first, and scales U8 [..., out, in/32], one E8M0 exponent per
// block of 32 values: value = fp4(nibble) · 2^(scale−127).
package quant

import "math"

// MXFP4Block is the number of values that share one MXFP4 scale.
const MXFP4Block = 32

// MXFP4BlockBytes is the number of bytes of one block's values.
const MXFP4BlockBytes = MXFP4Block / 2

// FP4 are the FP4 E2M1 values by nibble: sign bit 3, exponent bits 2–1,
// mantissa bit 0 (±0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6).
var FP4 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, negZero, -0.5, -1, -1.5, -2, -3, -4, -6}

// negZero is -0 (a Go constant -0 is +0).
var negZero = float32(math.Copysign(0, -1))

// MXFP4Scale is the factor of E8M0 exponent s: 2^(s−127), as transformers
// applies it (torch.ldexp; 255 gives +Inf there and here, not the
// specification's NaN).
func MXFP4Scale(s byte) float32 {
	return float32(math.Ldexp(1, int(s)-127))
}

// DecodeMXFP4 writes the len(scales)·32 values of blocks
// (len(scales)·16 bytes) and scales into out, in order.
func DecodeMXFP4(out []float32, blocks, scales []byte) {
	_ = out[len(scales)*MXFP4Block-1]
	_ = blocks[len(scales)*MXFP4BlockBytes-1]
	for b, s := range scales {
		f := MXFP4Scale(s)
		o := out[b*MXFP4Block : (b+1)*MXFP4Block]
		in := blocks[b*MXFP4BlockBytes : (b+1)*MXFP4BlockBytes]
		for i, v := range in {
			o[2*i] = FP4[v&0x0F] * f
			o[2*i+1] = FP4[v>>4] * f
		}
	}
}

// EncodeMXFP4 quantizes vals (a multiple of 32 values) to MXFP4: each
// block's scale is the smallest power of two that brings its largest
// magnitude to at most 6, and each value rounds to the nearest FP4 value
// (ties to the even mantissa, as the OCP specification rounds). It is the
// inverse of DecodeMXFP4 on values it produced.
func EncodeMXFP4(vals []float32) (blocks, scales []byte) {
	n := len(vals) / MXFP4Block
	blocks = make([]byte, n*MXFP4BlockBytes)
	scales = make([]byte, n)
	for b := 0; b < n; b++ {
		v := vals[b*MXFP4Block : (b+1)*MXFP4Block]
		top := float32(0)
		for _, x := range v {
			top = max(top, float32(math.Abs(float64(x))))
		}
		e := -127
		if top > 0 {
			e = int(math.Ceil(math.Log2(float64(top) / 6)))
			e = min(max(e, -127), 127)
		}
		scales[b] = byte(e + 127)
		f := MXFP4Scale(scales[b])
		for i := 0; i < MXFP4Block; i += 2 {
			blocks[b*MXFP4BlockBytes+i/2] = nearestFP4(v[i]/f) | nearestFP4(v[i+1]/f)<<4
		}
	}
	return blocks, scales
}

// nearestFP4 is the nibble of the FP4 value nearest x, ties to the even
// mantissa.
func nearestFP4(x float32) byte {
	best := byte(0)
	for i := byte(0); i < 16; i++ {
		d, bd := math.Abs(float64(FP4[i]-x)), math.Abs(float64(FP4[best]-x))
		if d < bd || (d == bd && i&1 == 0 && best&1 == 1 && math.Signbit(float64(FP4[i])) == math.Signbit(float64(x))) {
			best = i
		}
	}
	if x < 0 && FP4[best] == 0 {
		best = 8 // -0 keeps the sign
	}
	return best
}
