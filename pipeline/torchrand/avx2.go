package torchrand

import "math"

// NormalKernel selects which of torch's two CPU float32 normal kernels a
// Generator reproduces for tensors of 16 or more elements. They consume the
// engine identically and agree to about one float32 ULP; they differ only in
// how log, sin and cos are evaluated.
type NormalKernel int

const (
	// KernelScalar is normal_fill_16: libm logf/cosf/sinf per element. Torch
	// builds without AVX2 kernels use it (AVX512 and ARM machines, and
	// AVX2-less x86). It is the default.
	KernelScalar NormalKernel = iota
	// KernelAVX2 is normal_fill_16_AVX2: the Cephes-style log256_ps and
	// sincos256_ps approximations of ATen's avx_mathfun.h, used by torch on
	// x86 machines whose best kernel level is AVX2. The diffusers scheduler
	// test values were recorded on such a machine (see docs/seeds.md).
	KernelAVX2
)

// SetNormalKernel selects the 16-block normal kernel (KernelScalar by
// default). The per-element path for tensors under 16 elements is the same
// for both.
func (g *Generator) SetNormalKernel(k NormalKernel) { g.kernel = k }

// NormalKernel returns the selected kernel.
func (g *Generator) NormalKernel() NormalKernel { return g.kernel }

// normalFill16AVX2 is normal_fill_16_AVX2 for one block, lane by lane:
// radius = sqrt(-2 * log256(1 - d[j])), theta = float(2π) * d[j+8], then
// fmadd(radius*cos, std=1, mean=0), which is exact.
func normalFill16AVX2(d []float32) {
	twoPi := float32(2.0 * math.Pi)
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j]
		u2 := d[j+8]
		radius := sqrtf(float32(-2 * log256(u1)))
		theta := float32(twoPi * u2)
		s, c := sincos256(theta)
		d[j] = float32(radius * c)
		d[j+8] = float32(radius * s)
	}
}

// Cephes coefficients of avx_mathfun.h (Julien Pommier's sse_mathfun), as
// float32 like the _PS256_CONST tables.
var (
	logP = [...]float32{
		7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
		-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
	}
	logQ1, logQ2 float32 = -2.12194440e-4, 0.693359375
	sqrtHF       float32 = 0.707106781186547524
	fourOverPi   float32 = 1.27323954473516
	dp1, dp2     float32 = -0.78515625, -2.4187564849853515625e-4
	dp3          float32 = -3.77489497744594108e-8
	sinCof               = [...]float32{-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1}
	cosCof               = [...]float32{2.443315711809948e-005, -1.388731625493765e-003, 4.166664568298827e-002}
)

// log256 is log256_ps for one lane (positive, normal inputs; torch only
// passes (0, 1]). Every operation rounds to float32, none is fused.
func log256(x float32) float32 {
	if minNorm := math.Float32frombits(0x00800000); x < minNorm {
		x = minNorm
	}
	imm0 := int32(math.Float32bits(x) >> 23)
	x = math.Float32frombits(math.Float32bits(x)&^0x7f800000 | math.Float32bits(0.5))
	e := float32(imm0-0x7f) + 1
	var tmp float32
	mask := x < sqrtHF
	if mask {
		tmp = x
	}
	x = x - 1
	if mask {
		e = e - 1
	}
	x = x + tmp
	z := float32(x * x)
	y := logP[0]
	for _, p := range logP[1:] {
		y = float32(y*x) + p
	}
	y = float32(y * x)
	y = float32(y * z)
	y = y + float32(e*logQ1)
	y = y - float32(z*0.5)
	x = x + y
	x = x + float32(e*logQ2)
	return x
}

// sincos256 is sincos256_ps for one lane.
func sincos256(x float32) (sin, cos float32) {
	signSin := math.Float32bits(x) & 0x80000000
	x = math.Float32frombits(math.Float32bits(x) & 0x7fffffff)
	y := float32(x * fourOverPi)
	j := int32(y) // cvttps: truncation
	j = (j + 1) &^ 1
	y = float32(j)
	swapSin := uint32(j&4) << 29
	polyMask := j&2 == 0
	x = x + float32(y*dp1)
	x = x + float32(y*dp2)
	x = x + float32(y*dp3)
	signCos := uint32(^(j-2)&4) << 29
	signSin ^= swapSin

	z := float32(x * x)
	yc := float32(cosCof[0] * z)
	yc = yc + cosCof[1]
	yc = float32(yc * z)
	yc = yc + cosCof[2]
	yc = float32(yc * z)
	yc = float32(yc * z)
	yc = yc - float32(z*0.5)
	yc = yc + 1

	ys := float32(sinCof[0] * z)
	ys = ys + sinCof[1]
	ys = float32(ys * z)
	ys = ys + sinCof[2]
	ys = float32(ys * z)
	ys = float32(ys * x)
	ys = ys + x

	var sin2, sin1 float32 // blend as the intrinsics do (adds of +0)
	if polyMask {
		sin2 = ys
	} else {
		sin1 = yc
	}
	ys = ys - sin2
	yc = yc - sin1
	s := sin1 + sin2
	c := yc + ys
	return math.Float32frombits(math.Float32bits(s) ^ signSin), math.Float32frombits(math.Float32bits(c) ^ signCos)
}
