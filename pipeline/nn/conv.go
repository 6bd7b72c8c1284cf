package nn

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// ConvSpec is a 2D convolution's stride and zero padding (top, bottom,
// left, right), as torch.nn.Conv2d's stride and padding plus the
// asymmetric (0, 1, 0, 1) padding of diffusers' Downsample2D(padding=0).
type ConvSpec struct {
	Stride            int
	PadTop, PadBottom int
	PadLeft, PadRight int
	UseConvGeneral    bool // ConvGeneral op instead of im2col + DotGeneral
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
