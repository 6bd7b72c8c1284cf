// Package sdref is a plain-Go float64 reference for the diffusion models:
// UNet2DConditionModel, the AutoencoderKL decoder and encoder, the CLIP
// text encoders and SD3's MMDiT, written with loops straight from the diffusers and
// transformers sources and independently of the graph code, so that tests
// can compare the GoMLX models against it. It is slow and only meant for
// tiny checkpoints.
package sdref

import (
	"fmt"
	"math"
)

// T is a dense float64 tensor in row-major order.
type T struct {
	Shape []int
	Data  []float64
}

// New returns a zero tensor.
func New(shape ...int) *T {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return &T{Shape: append([]int(nil), shape...), Data: make([]float64, n)}
}

// FromFloat32 copies float32 data into a tensor.
func FromFloat32(data []float32, shape ...int) *T {
	t := New(shape...)
	if len(data) != len(t.Data) {
		panic(fmt.Sprintf("ref: %d values for shape %v", len(data), shape))
	}
	for i, v := range data {
		t.Data[i] = float64(v)
	}
	return t
}

// Float32 returns the data as float32.
func (t *T) Float32() []float32 {
	out := make([]float32, len(t.Data))
	for i, v := range t.Data {
		out[i] = float32(v)
	}
	return out
}

// conv2d is torch.nn.functional.conv2d with zero padding (top, bottom,
// left, right) and a stride.
func conv2d(x, w *T, b []float64, stride, pt, pb, pl, pr int) *T {
	B, C, H, W := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	O, kh, kw := w.Shape[0], w.Shape[2], w.Shape[3]
	if w.Shape[1] != C {
		panic(fmt.Sprintf("ref conv2d: input %v, kernel %v", x.Shape, w.Shape))
	}
	Ho := (H+pt+pb-kh)/stride + 1
	Wo := (W+pl+pr-kw)/stride + 1
	y := New(B, O, Ho, Wo)
	for n := 0; n < B; n++ {
		for o := 0; o < O; o++ {
			for i := 0; i < Ho; i++ {
				for j := 0; j < Wo; j++ {
					s := 0.0
					if b != nil {
						s = b[o]
					}
					for c := 0; c < C; c++ {
						for di := 0; di < kh; di++ {
							yi := i*stride + di - pt
							if yi < 0 || yi >= H {
								continue
							}
							for dj := 0; dj < kw; dj++ {
								xj := j*stride + dj - pl
								if xj < 0 || xj >= W {
									continue
								}
								s += x.Data[((n*C+c)*H+yi)*W+xj] * w.Data[((o*C+c)*kh+di)*kw+dj]
							}
						}
					}
					y.Data[((n*O+o)*Ho+i)*Wo+j] = s
				}
			}
		}
	}
	return y
}

// groupNorm normalises x [B, C, ...] over groups of channels.
func groupNorm(x *T, gamma, beta []float64, groups int, eps float64) *T {
	B, C := x.Shape[0], x.Shape[1]
	spatial := len(x.Data) / (B * C)
	per := C / groups
	y := New(x.Shape...)
	for n := 0; n < B; n++ {
		for g := 0; g < groups; g++ {
			start := (n*C + g*per) * spatial
			count := per * spatial
			mean := 0.0
			for k := 0; k < count; k++ {
				mean += x.Data[start+k]
			}
			mean /= float64(count)
			v := 0.0
			for k := 0; k < count; k++ {
				d := x.Data[start+k] - mean
				v += d * d
			}
			v /= float64(count)
			inv := 1 / math.Sqrt(v+eps)
			for k := 0; k < count; k++ {
				c := g*per + k/spatial
				y.Data[start+k] = (x.Data[start+k]-mean)*inv*gamma[c] + beta[c]
			}
		}
	}
	return y
}

// layerNorm normalises the last axis.
func layerNorm(x *T, gamma, beta []float64, eps float64) *T {
	d := x.Shape[len(x.Shape)-1]
	y := New(x.Shape...)
	for r := 0; r < len(x.Data)/d; r++ {
		row := x.Data[r*d : (r+1)*d]
		mean := 0.0
		for _, v := range row {
			mean += v
		}
		mean /= float64(d)
		vr := 0.0
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		vr /= float64(d)
		inv := 1 / math.Sqrt(vr+eps)
		for i, v := range row {
			y.Data[r*d+i] = (v-mean)*inv*gamma[i] + beta[i]
		}
	}
	return y
}

// linear applies x [..., in] W^T + b with W [out, in].
func linear(x *T, w *T, b []float64) *T {
	in := x.Shape[len(x.Shape)-1]
	out := w.Shape[0]
	if w.Shape[1] != in {
		panic(fmt.Sprintf("ref linear: input %v, weight %v", x.Shape, w.Shape))
	}
	shape := append(append([]int(nil), x.Shape[:len(x.Shape)-1]...), out)
	y := New(shape...)
	rows := len(x.Data) / in
	for r := 0; r < rows; r++ {
		xr := x.Data[r*in : (r+1)*in]
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			wr := w.Data[o*in : (o+1)*in]
			for i := range xr {
				s += xr[i] * wr[i]
			}
			y.Data[r*out+o] = s
		}
	}
	return y
}

func mapT(x *T, f func(float64) float64) *T {
	y := New(x.Shape...)
	for i, v := range x.Data {
		y.Data[i] = f(v)
	}
	return y
}

func silu(v float64) float64      { return v / (1 + math.Exp(-v)) }
func gelu(v float64) float64      { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }
func quickGelu(v float64) float64 { return v / (1 + math.Exp(-1.702*v)) }

func act(name string) func(float64) float64 {
	switch name {
	case "silu", "swish":
		return silu
	case "gelu":
		return gelu
	case "quick_gelu":
		return quickGelu
	}
	panic("ref: unknown activation " + name)
}

func add(a, b *T) *T {
	if len(a.Data) != len(b.Data) {
		panic(fmt.Sprintf("ref add: %v + %v", a.Shape, b.Shape))
	}
	y := New(a.Shape...)
	for i := range y.Data {
		y.Data[i] = a.Data[i] + b.Data[i]
	}
	return y
}

// attention: q [B, Sq, H*D], k, v [B, Sk, H*D].
func attention(q, k, v *T, heads int, causal bool) *T {
	B, Sq, inner := q.Shape[0], q.Shape[1], q.Shape[2]
	Sk := k.Shape[1]
	D := inner / heads
	scale := 1 / math.Sqrt(float64(D))
	out := New(B, Sq, inner)
	scores := make([]float64, Sk)
	for n := 0; n < B; n++ {
		for h := 0; h < heads; h++ {
			for i := 0; i < Sq; i++ {
				mx := math.Inf(-1)
				for j := 0; j < Sk; j++ {
					if causal && j > i {
						scores[j] = math.Inf(-1)
						continue
					}
					s := 0.0
					for d := 0; d < D; d++ {
						s += q.Data[(n*Sq+i)*inner+h*D+d] * k.Data[(n*Sk+j)*inner+h*D+d]
					}
					scores[j] = s * scale
					mx = math.Max(mx, scores[j])
				}
				sum := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for d := 0; d < D; d++ {
					s := 0.0
					for j := 0; j < Sk; j++ {
						s += scores[j] / sum * v.Data[(n*Sk+j)*inner+h*D+d]
					}
					out.Data[(n*Sq+i)*inner+h*D+d] = s
				}
			}
		}
	}
	return out
}

// toTokens turns [B, C, H, W] into [B, H*W, C]; fromTokens is the inverse.
func toTokens(x *T) *T {
	B, C, H, W := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	y := New(B, H*W, C)
	for n := 0; n < B; n++ {
		for c := 0; c < C; c++ {
			for p := 0; p < H*W; p++ {
				y.Data[(n*H*W+p)*C+c] = x.Data[(n*C+c)*H*W+p]
			}
		}
	}
	return y
}

func fromTokens(x *T, H, W int) *T {
	B, C := x.Shape[0], x.Shape[2]
	y := New(B, C, H, W)
	for n := 0; n < B; n++ {
		for c := 0; c < C; c++ {
			for p := 0; p < H*W; p++ {
				y.Data[(n*C+c)*H*W+p] = x.Data[(n*H*W+p)*C+c]
			}
		}
	}
	return y
}

func upsample2x(x *T) *T {
	B, C, H, W := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	y := New(B, C, 2*H, 2*W)
	for n := 0; n < B*C; n++ {
		for i := 0; i < 2*H; i++ {
			for j := 0; j < 2*W; j++ {
				y.Data[(n*2*H+i)*2*W+j] = x.Data[(n*H+i/2)*W+j/2]
			}
		}
	}
	return y
}

// concatChannels joins [B, C1, ...] and [B, C2, ...] on axis 1.
func concatChannels(a, b *T) *T {
	B := a.Shape[0]
	sa := len(a.Data) / B
	sb := len(b.Data) / B
	shape := append([]int(nil), a.Shape...)
	shape[1] += b.Shape[1]
	y := New(shape...)
	for n := 0; n < B; n++ {
		copy(y.Data[n*(sa+sb):], a.Data[n*sa:(n+1)*sa])
		copy(y.Data[n*(sa+sb)+sa:], b.Data[n*sb:(n+1)*sb])
	}
	return y
}

// timestepEmbedding is get_timestep_embedding in float64.
func timestepEmbedding(ts []float64, dim int, flip bool, shift float64) *T {
	half := dim / 2
	y := New(len(ts), dim)
	for n, t := range ts {
		for i := 0; i < half; i++ {
			f := math.Exp(-math.Log(10000) * float64(i) / (float64(half) - shift))
			s, c := math.Sin(t*f), math.Cos(t*f)
			if flip {
				y.Data[n*dim+i], y.Data[n*dim+half+i] = c, s
			} else {
				y.Data[n*dim+i], y.Data[n*dim+half+i] = s, c
			}
		}
	}
	return y
}
