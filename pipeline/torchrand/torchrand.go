// Package torchrand reproduces PyTorch's CPU random number generator, so that
// a seed gives the same initial latents and scheduler noise as diffusers with a
// CPU torch.Generator.
//
// It follows ATen: the MT19937 engine (ATen/core/MT19937RNGEngine.h), the
// uniform transforms (ATen/core/TransformationHelper.h), the Box-Muller normal
// sampler with its cached second value (ATen/core/DistributionsHelper.h) and
// the CPU normal kernel (ATen/native/cpu/DistributionTemplates.h), including
// its 16-element block layout for float32 tensors of 16 or more elements.
// docs/seeds.md describes the algorithm. Torch has two variants of the block
// transform: the scalar one (the default here) and the AVX2 one, which uses
// vectorised log/sin/cos approximations and differs by about one float32 ULP;
// SetNormalKernel(KernelAVX2) reproduces the latter.
package torchrand

import (
	"fmt"
	"math"
)

// Generator is a torch.Generator on the CPU: an MT19937 engine plus the
// cached second Box-Muller sample that the per-element normal sampler keeps.
// It is not safe for concurrent use.
type Generator struct {
	engine     mt19937
	seed       uint64
	nextNormal float64 // cached r*sin(theta) from the double sampler
	hasNext    bool
	kernel     NormalKernel
}

// NewGenerator returns a generator in the state of
// torch.Generator().manual_seed(seed) (or torch.manual_seed(seed) for the
// default CPU generator). Only the low 32 bits of seed matter, as in torch.
func NewGenerator(seed uint64) *Generator {
	g := &Generator{}
	g.ManualSeed(seed)
	return g
}

// ManualSeed reseeds the generator and drops the cached normal sample, like
// torch.Generator.manual_seed. The normal kernel setting is kept.
func (g *Generator) ManualSeed(seed uint64) {
	g.seed = seed
	g.engine.seed(seed)
	g.hasNext = false
	g.nextNormal = 0
}

// InitialSeed returns the seed last given to NewGenerator or ManualSeed.
func (g *Generator) InitialSeed() uint64 { return g.seed }

// Uint32 returns the next raw 32-bit engine output (torch's random()).
func (g *Generator) Uint32() uint32 { return g.engine.uint32() }

// Uint64 returns two engine outputs joined high word first (torch's
// random64()).
func (g *Generator) Uint64() uint64 {
	hi := uint64(g.engine.uint32())
	lo := uint64(g.engine.uint32())
	return hi<<32 | lo
}

// uniformFloat32 is uniform_real_distribution<float>(0, 1): the low 24 bits
// of one engine output times 2^-24.
func (g *Generator) uniformFloat32() float32 {
	return float32(g.engine.uint32()&(1<<24-1)) * (1.0 / (1 << 24))
}

// uniformFloat64 is uniform_real_distribution<double>(0, 1): the low 53 bits
// of random64() times 2^-53.
func (g *Generator) uniformFloat64() float64 {
	return float64(g.Uint64()&(1<<53-1)) * (1.0 / (1 << 53))
}

// normalFloat64 is at::normal_distribution<double>(0, 1): Box-Muller on two
// double uniforms, returning r*cos(theta) and caching r*sin(theta) for the
// next call.
func (g *Generator) normalFloat64() float64 {
	if g.hasNext {
		g.hasNext = false
		return g.nextNormal
	}
	u1 := g.uniformFloat64()
	u2 := g.uniformFloat64()
	r := math.Sqrt(-2.0 * math.Log1p(-u2))
	theta := 2.0 * math.Pi * u1
	g.nextNormal = r * math.Sin(theta)
	g.hasNext = true
	return r * math.Cos(theta)
}

// Randn returns torch.randn(shape, generator=g) for a CPU float32 tensor, in
// row-major order. A tensor with fewer than 16 elements is filled one element
// at a time from the double sampler; larger ones take the 16-block path.
// Negative dimensions panic, as they would in torch; use RandnTensor for
// checked input.
func (g *Generator) Randn(shape ...int) []float32 {
	n, err := numel(shape)
	if err != nil {
		panic(err)
	}
	out := make([]float32, n)
	g.FillNormal(out)
	return out
}

// FillNormal fills data in place as torch's CPU normal_(0, 1) kernel does for
// a contiguous float32 tensor with len(data) elements.
func (g *Generator) FillNormal(data []float32) {
	n := len(data)
	if n < 16 {
		for i := range data {
			data[i] = float32(g.normalFloat64())
		}
		return
	}
	for i := range data {
		data[i] = g.uniformFloat32()
	}
	fill := normalFill16
	if g.kernel == KernelAVX2 {
		fill = normalFill16AVX2
	}
	for i := 0; i+16 <= n; i += 16 {
		fill(data[i : i+16])
	}
	if n%16 != 0 {
		// torch redraws the last 16 values from fresh uniforms, overwriting
		// normals the loop above already wrote there.
		tail := data[n-16:]
		for i := range tail {
			tail[i] = g.uniformFloat32()
		}
		fill(tail)
	}
}

// twoPi is float(double(2π)) as torch's scalar kernel computes the angle:
// 2.0f * c10::pi<double> * u2 is evaluated in double and rounded to float.
const twoPi = 2.0 * math.Pi

// normalFill16 is torch's scalar normal_fill_16 with mean 0 and std 1: pairs
// (d[j], d[j+8]) become r*cos(θ), r*sin(θ) with r = sqrt(-2 log(1-d[j])) and
// θ = 2π d[j+8], each function evaluated in float32.
func normalFill16(d []float32) {
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j]
		u2 := d[j+8]
		radius := sqrtf(-2 * logf(u1))
		theta := float32(twoPi * float64(u2))
		d[j] = radius * cosf(theta)
		d[j+8] = radius * sinf(theta)
	}
}

// The float32 libm functions, computed in double and rounded once: this is
// the correctly rounded result except in rare double-rounding ties, the same
// as glibc's logf/sinf/cosf to within their documented error.
func logf(x float32) float32  { return float32(math.Log(float64(x))) }
func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }
func sinf(x float32) float32  { return float32(math.Sin(float64(x))) }
func cosf(x float32) float32  { return float32(math.Cos(float64(x))) }

// RandnTensor is diffusers' randn_tensor for CPU generators: with one
// generator it returns gens[0].Randn(shape...); with a list of generators
// (one per batch element, len(gens) == shape[0]) each batch element is drawn
// separately as randn((1,)+shape[1:]) from its own generator and the results
// are concatenated along the batch dimension.
func RandnTensor(gens []*Generator, shape []int) ([]float32, error) {
	n, err := numel(shape)
	if err != nil {
		return nil, err
	}
	switch {
	case len(gens) == 0:
		return nil, fmt.Errorf("torchrand: RandnTensor needs at least one generator")
	case len(gens) == 1:
		if gens[0] == nil {
			return nil, fmt.Errorf("torchrand: generator 0 is nil")
		}
		out := make([]float32, n)
		gens[0].FillNormal(out)
		return out, nil
	}
	if len(shape) == 0 || shape[0] != len(gens) {
		return nil, fmt.Errorf("torchrand: %d generators for shape %v: want one generator per batch element (shape[0])", len(gens), shape)
	}
	out := make([]float32, n)
	per := n / shape[0]
	for b, g := range gens {
		if g == nil {
			return nil, fmt.Errorf("torchrand: generator %d is nil", b)
		}
		g.FillNormal(out[b*per : (b+1)*per])
	}
	return out, nil
}

func numel(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("torchrand: negative dimension in shape %v", shape)
		}
		n *= d
	}
	return n, nil
}
