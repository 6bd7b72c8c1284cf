package quant

import (
	"math"
	"testing"
)

// TestDecodeMXFP4 decodes a hand-packed block: byte j holds value 2j in
// its low nibble and 2j+1 in its high nibble, scaled by 2^(s-127).
func TestDecodeMXFP4(t *testing.T) {
	blocks := make([]byte, 16)
	blocks[0] = 0x2 | 0xF<<4  // 1.0, -6.0
	blocks[1] = 0x7 | 0x9<<4  // 6.0, -0.5
	blocks[15] = 0x5 | 0x8<<4 // 3.0, -0
	out := make([]float32, 32)
	DecodeMXFP4(out, blocks, []byte{127 + 2})
	want := map[int]float32{0: 4, 1: -24, 2: 24, 3: -2, 30: 12}
	for i, v := range out {
		if w := want[i]; v != w {
			t.Errorf("value %d: %v, want %v", i, v, w)
		}
	}
	if !math.Signbit(float64(out[31])) {
		t.Errorf("value 31: %v, want -0", out[31])
	}
	if got := MXFP4Scale(0); got != float32(math.Ldexp(1, -127)) {
		t.Errorf("scale 0: %v", got)
	}
	if got := MXFP4Scale(255); !math.IsInf(float64(got), 1) {
		t.Errorf("scale 255: %v, want +Inf as transformers' ldexp gives", got)
	}
}

// TestEncodeMXFP4 round-trips values that MXFP4 holds exactly and bounds
// the error on random ones (half the spacing of the block's grid).
func TestEncodeMXFP4(t *testing.T) {
	exact := make([]float32, 64)
	for i := range exact {
		exact[i] = FP4[i%16] * float32(math.Ldexp(1, i/32-3))
	}
	b, s := EncodeMXFP4(exact)
	got := make([]float32, 64)
	DecodeMXFP4(got, b, s)
	for i := range exact {
		if got[i] != exact[i] {
			t.Fatalf("value %d: %v, want %v exactly", i, got[i], exact[i])
		}
	}
	vals := make([]float32, 32*50)
	x := uint64(1)
	for i := range vals {
		x = x*6364136223846793005 + 1442695040888963407
		vals[i] = float32(int64(x>>11)-(1<<52)) / (1 << 52) * float32(i%7+1)
	}
	b, s = EncodeMXFP4(vals)
	got = make([]float32, len(vals))
	DecodeMXFP4(got, b, s)
	for blk := 0; blk < 50; blk++ {
		step := MXFP4Scale(s[blk]) * 2 // the widest gap of the grid (4 to 6)
		for i := blk * 32; i < (blk+1)*32; i++ {
			if d := math.Abs(float64(got[i] - vals[i])); d > float64(step)/2+1e-7 {
				t.Fatalf("value %d: %v decodes to %v, off by %v > %v", i, vals[i], got[i], d, step/2)
			}
		}
	}
}
