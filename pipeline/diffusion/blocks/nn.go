package blocks

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// ---- normalisation --------------------------------------------------------

// GroupNorm is torch.nn.GroupNorm on x [B, C, ...]: statistics over each
// group of C/groups channels and all trailing axes, then the per-channel
// affine transform.
func GroupNorm(x, gamma, beta *Node, groups int, eps float64) *Node {
	dims := x.Shape().Dimensions
	b, c := dims[0], dims[1]
	if c%groups != 0 {
		panic(fmt.Errorf("GroupNorm: %d channels are not divisible into %d groups", c, groups))
	}
	g := Reshape(x, b, groups, -1) // [B, G, C/G * spatial]
	mean := ReduceAndKeep(g, ReduceMean, 2)
	centered := Sub(g, mean)
	variance := ReduceAndKeep(Square(centered), ReduceMean, 2)
	normed := Mul(centered, Rsqrt(AddScalar(variance, eps)))
	normed = Reshape(normed, dims...)
	// gamma, beta: [C] -> [1, C, 1, ...]
	affine := make([]int, len(dims))
	for i := range affine {
		affine[i] = 1
	}
	affine[1] = c
	return Add(Mul(normed, Reshape(gamma, affine...)), Reshape(beta, affine...))
}

// LayerNorm is torch.nn.LayerNorm over the last axis.
func LayerNorm(x, gamma, beta *Node, eps float64) *Node {
	mean := ReduceAndKeep(x, ReduceMean, -1)
	centered := Sub(x, mean)
	variance := ReduceAndKeep(Square(centered), ReduceMean, -1)
	normed := Mul(centered, Rsqrt(AddScalar(variance, eps)))
	if gamma != nil {
		normed = Mul(normed, lastAxis(gamma, x.Rank()))
	}
	if beta != nil {
		normed = Add(normed, lastAxis(beta, x.Rank()))
	}
	return normed
}

// ---- linear and convolution -----------------------------------------------

// Linear is torch.nn.Linear: x [..., in] times w [out, in] (checkpoint
// layout, contracted on its last axis) plus b [out] (b may be nil).
func Linear(x, w, b *Node) *Node {
	y := DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil) // [..., out]
	if b != nil {
		y = Add(y, lastAxis(b, y.Rank()))
	}
	return y
}

// lastAxis reshapes a vector v [n] to [1, ..., 1, n] of the given rank,
// for broadcasting along the last axis.
func lastAxis(v *Node, rank int) *Node {
	dims := make([]int, rank)
	for i := range dims {
		dims[i] = 1
	}
	dims[rank-1] = v.Shape().Dimensions[0]
	return Reshape(v, dims...)
}

// ConvSpec is a 2D convolution's stride and zero padding (top, bottom,
// left, right), as torch.nn.Conv2d's stride and padding plus the
// asymmetric (0, 1, 0, 1) padding of diffusers' Downsample2D(padding=0).
type ConvSpec struct {
	Stride                    int
	PadTop, PadBottom         int
	PadLeft, PadRight         int
	UseConvGeneral            bool // ConvGeneral op instead of im2col + DotGeneral
	kernelHeight, kernelWidth int
}

// SamePad returns the spec of a stride-1 (or stride-s) convolution with
// padding p on every side.
func SamePad(stride, p int) ConvSpec {
	return ConvSpec{Stride: stride, PadTop: p, PadBottom: p, PadLeft: p, PadRight: p}
}

// String describes the spec for executable keys.
func (s ConvSpec) String() string {
	impl := "im2col"
	if s.UseConvGeneral {
		impl = "convgeneral"
	}
	return fmt.Sprintf("s%d,p%d.%d.%d.%d,%s", s.Stride, s.PadTop, s.PadBottom, s.PadLeft, s.PadRight, impl)
}

// Conv2D is torch.nn.Conv2d on x [B, C, H, W] with weights w [O, C, kh, kw]
// (checkpoint layout) and bias b [O] (may be nil).
//
// By default it is im2col + DotGeneral: the input is zero padded by
// concatenation (the pure-Go backend has no Pad op), the kh*kw shifted
// (strided) slices are stacked into patches [B, C*kh*kw, Ho*Wo], and the
// weights reshaped to [O, C*kh*kw] multiply them. On the pure-Go backend
// this is about 10x faster than its ConvGeneral; XLA backends may set
// UseConvGeneral.
func Conv2D(x, w, b *Node, spec ConvSpec) *Node {
	if spec.Stride < 1 {
		spec.Stride = 1
	}
	xd := x.Shape().Dimensions // [B, C, H, W]
	wd := w.Shape().Dimensions // [O, C, kh, kw]
	if len(xd) != 4 || len(wd) != 4 || xd[1] != wd[1] {
		panic(fmt.Errorf("Conv2D: input %v and kernel %v do not match ([B,C,H,W] and [O,C,kh,kw])", xd, wd))
	}
	batch, inC, height, width := xd[0], xd[1], xd[2], xd[3]
	outC, kh, kw := wd[0], wd[2], wd[3]
	outH := (height+spec.PadTop+spec.PadBottom-kh)/spec.Stride + 1
	outW := (width+spec.PadLeft+spec.PadRight-kw)/spec.Stride + 1

	var y *Node
	switch {
	case spec.UseConvGeneral:
		axes := ConvolveAxesConfig{
			InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
			KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
			OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3},
		}
		y = ConvGeneral(x, w, axes, []int{spec.Stride, spec.Stride},
			[][2]int{{spec.PadTop, spec.PadBottom}, {spec.PadLeft, spec.PadRight}}, nil, nil, 1, 1)
	case kh == 1 && kw == 1 && spec.Stride == 1 && spec.PadTop+spec.PadBottom+spec.PadLeft+spec.PadRight == 0:
		// A 1x1 convolution is a matrix product over channels.
		flat := Reshape(x, batch, inC, height*width)                              // [B, C, HW]
		y = DotGeneral(Reshape(w, outC, inC), []int{1}, nil, flat, []int{1}, nil) // [O, B, HW]
		y = Reshape(TransposeAllAxes(y, 1, 0, 2), batch, outC, outH, outW)
	default:
		xp := zeroPad2D(x, spec.PadTop, spec.PadBottom, spec.PadLeft, spec.PadRight)
		patches := make([]*Node, 0, kh*kw)
		for i := 0; i < kh; i++ {
			for j := 0; j < kw; j++ {
				p := Slice(xp, AxisRange(), AxisRange(),
					AxisRange(i, i+spec.Stride*(outH-1)+1).Stride(spec.Stride),
					AxisRange(j, j+spec.Stride*(outW-1)+1).Stride(spec.Stride)) // [B, C, Ho, Wo]
				patches = append(patches, p)
			}
		}
		var cols *Node
		if len(patches) == 1 {
			cols = patches[0]
		} else {
			cols = Stack(patches, 2) // [B, C, kh*kw, Ho, Wo]: C-major, matching w's [C, kh, kw]
		}
		cols = Reshape(cols, batch, inC*kh*kw, outH*outW)
		y = DotGeneral(Reshape(w, outC, inC*kh*kw), []int{1}, nil, cols, []int{1}, nil) // [O, B, HoWo]
		y = Reshape(TransposeAllAxes(y, 1, 0, 2), batch, outC, outH, outW)
	}
	if b != nil {
		y = Add(y, Reshape(b, 1, outC, 1, 1))
	}
	return y
}

// zeroPad2D pads the last two axes of x with zeros by concatenation.
func zeroPad2D(x *Node, top, bottom, left, right int) *Node {
	g := x.Graph()
	d := x.Shape().Dimensions
	zeros := func(dims ...int) *Node { return Zeros(g, shapes.Make(x.DType(), dims...)) }
	if top > 0 || bottom > 0 {
		parts := []*Node{}
		if top > 0 {
			parts = append(parts, zeros(d[0], d[1], top, d[3]))
		}
		parts = append(parts, x)
		if bottom > 0 {
			parts = append(parts, zeros(d[0], d[1], bottom, d[3]))
		}
		x = Concatenate(parts, 2)
	}
	d = x.Shape().Dimensions
	if left > 0 || right > 0 {
		parts := []*Node{}
		if left > 0 {
			parts = append(parts, zeros(d[0], d[1], d[2], left))
		}
		parts = append(parts, x)
		if right > 0 {
			parts = append(parts, zeros(d[0], d[1], d[2], right))
		}
		x = Concatenate(parts, 3)
	}
	return x
}

// UpsampleNearest2x is F.interpolate(x, scale_factor=2, mode="nearest") on
// x [B, C, H, W], by broadcasting (no gather).
func UpsampleNearest2x(x *Node) *Node {
	d := x.Shape().Dimensions
	b, c, h, w := d[0], d[1], d[2], d[3]
	y := Reshape(x, b, c, h, 1, w, 1)
	y = BroadcastToDims(y, b, c, h, 2, w, 2)
	return Reshape(y, b, c, 2*h, 2*w)
}

// ---- activations ----------------------------------------------------------

// SiLU is x * sigmoid(x).
func SiLU(x *Node) *Node { return Mul(x, Logistic(x)) }

// GELU is the exact (erf) GELU of torch.nn.functional.gelu.
func GELU(x *Node) *Node {
	return Mul(MulScalar(x, 0.5), OnePlus(Erf(MulScalar(x, 1/math.Sqrt2))))
}

// GELUTanh is gelu(approximate="tanh").
func GELUTanh(x *Node) *Node {
	inner := MulScalar(Add(x, MulScalar(Mul(x, Square(x)), 0.044715)), math.Sqrt(2/math.Pi))
	return Mul(MulScalar(x, 0.5), OnePlus(Tanh(inner)))
}

// QuickGELU is CLIP's x * sigmoid(1.702 x).
func QuickGELU(x *Node) *Node { return Mul(x, Logistic(MulScalar(x, 1.702))) }

// Activation applies a named activation ("silu"/"swish", "gelu",
// "gelu_pytorch_tanh"/"gelu_tanh", "quick_gelu").
func Activation(name string, x *Node) *Node {
	switch name {
	case "silu", "swish":
		return SiLU(x)
	case "gelu":
		return GELU(x)
	case "gelu_pytorch_tanh", "gelu_tanh", "gelu_new":
		return GELUTanh(x)
	case "quick_gelu":
		return QuickGELU(x)
	}
	panic(fmt.Errorf("unsupported activation %q", name))
}

// KnownActivation reports whether Activation accepts name.
func KnownActivation(name string) bool {
	switch name {
	case "silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "quick_gelu":
		return true
	}
	return false
}

// ---- attention ------------------------------------------------------------

// Attention is multi-head scaled dot-product attention on q [B, Sq, H*D],
// k and v [B, Sk, H*D], returning [B, Sq, H*D]. With causal, query i only
// sees keys j <= i.
func Attention(q, k, v *Node, heads int, causal bool) *Node {
	qd := q.Shape().Dimensions
	kd := k.Shape().Dimensions
	b, sq, inner := qd[0], qd[1], qd[2]
	sk := kd[1]
	if inner%heads != 0 {
		panic(fmt.Errorf("Attention: width %d is not divisible into %d heads", inner, heads))
	}
	hd := inner / heads
	q = Reshape(MulScalar(q, 1/math.Sqrt(float64(hd))), b, sq, heads, hd)
	k = Reshape(k, b, sk, heads, hd)
	v = Reshape(v, b, sk, heads, hd)
	scores := DotGeneral(q, []int{3}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, H, Sq, Sk]
	if causal {
		// As transformers' causal mask: the lowest float32 above the
		// diagonal, so those probabilities underflow to exactly zero.
		mask := make([]float32, sq*sk)
		for i := 0; i < sq; i++ {
			for j := i + 1; j < sk; j++ {
				mask[i*sk+j] = -math.MaxFloat32
			}
		}
		scores = Add(scores, Reshape(Const(q.Graph(), mask), 1, 1, sq, sk))
	}
	probs := Softmax(scores, -1)
	out := DotGeneral(probs, []int{3}, []int{0, 1}, v, []int{1}, []int{0, 2}) // [B, H, Sq, D]
	return Reshape(TransposeAllAxes(out, 0, 2, 1, 3), b, sq, inner)
}

// ---- embeddings -------------------------------------------------------------

// TimestepSinusoid is diffusers' get_timestep_embedding on t [N] (float32
// timesteps): [N, dim] of sin/cos at frequencies
// exp(-ln(10000) * i / (dim/2 - shift)), cos first when flip.
func TimestepSinusoid(t *Node, dim int, flip bool, shift float64) *Node {
	g := t.Graph()
	half := dim / 2
	freqs := make([]float32, half)
	for i := range freqs {
		// torch computes the exponent and exp in float32.
		e := float32(-math.Log(10000)) * float32(i)
		e /= float32(float64(half) - shift)
		freqs[i] = float32(math.Exp(float64(e)))
	}
	n := t.Shape().Dimensions[0]
	arg := Mul(Reshape(t, n, 1), Reshape(Const(g, freqs), 1, half)) // [N, half]
	sin, cos := Sin(arg), Cos(arg)
	var emb *Node
	if flip {
		emb = Concatenate([]*Node{cos, sin}, 1)
	} else {
		emb = Concatenate([]*Node{sin, cos}, 1)
	}
	if dim%2 == 1 {
		emb = Concatenate([]*Node{emb, Zeros(g, shapes.Make(emb.DType(), n, 1))}, 1)
	}
	return emb
}
