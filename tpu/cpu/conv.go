package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// ConvGeneral is done as im2col + GEMM for one or two spatial axes, no
// dilations and no grouping (what the diffusion models use): the input is
// brought to [B, C, H, W], the kernel to [O, C·kh·kw], and for each batch
// item and block of output rows the patches are unrolled into a
// [C·kh·kw, rows·Wo] panel that GemmF32NN multiplies into the [O, Ho·Wo]
// output. Blocks keep the panel near 4 MiB, so memory does not grow with
// the image.
//
// Layouts: the kernel [O, C, kh, kw] is, row-major, the GEMM's A
// [O, K] with K = C·kh·kw, its columns in (c, i, j) order; panel row
// c·kh·kw + i·kw + j holds, for each output position of the block, the
// input value that tap (c, i, j) reads. The product A·panel [O, rows·Wo]
// lands in y[b] [O, Ho·Wo] at column r0·Wo with row stride Ho·Wo, so the
// blocks fill y without a copy. bf16/f16 operands are widened to f32 and
// the result rounded back. Scratch (y, the panel, permuted copies) is
// allocated per call, outside the executable's pool.

// convAux is ConvGeneral's aux. execConv reads only each axis's leading
// padding: the trailing one is already in the output shape (Ho, Wo), and
// taps past the input's end read zeros.
type convAux struct {
	axes     backends.ConvolveAxesConfig
	strides  []int
	paddings [][2]int
}

// ConvGeneral implements backends.Builder.
func (b *Builder) ConvGeneral(input, kernel backends.Op, axes backends.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) (backends.Op, error) {
	in, err := b.in("ConvGeneral", input, kernel)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ConvGeneralOp(in[0].shape, in[1].shape, axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount)
	if err != nil {
		return nil, err
	}
	for _, d := range append(append([]int(nil), inputDilations...), kernelDilations...) {
		if d != 1 {
			return nil, fmt.Errorf("cpu backend: op ConvGeneral is not implemented with dilations (%v, %v)", inputDilations, kernelDilations)
		}
	}
	if channelGroupCount > 1 || batchGroupCount > 1 {
		return nil, fmt.Errorf("cpu backend: op ConvGeneral is not implemented with grouping (%d, %d)", channelGroupCount, batchGroupCount)
	}
	ns := len(axes.InputSpatial)
	if ns < 1 || ns > 2 {
		return nil, fmt.Errorf("cpu backend: op ConvGeneral is not implemented for %d spatial axes", ns)
	}
	if dt := shape.DType; dt != dtypes.Float32 && !is16(dt) {
		return nil, fmt.Errorf("cpu backend: op ConvGeneral is not implemented for %s", dt)
	}
	a := convAux{axes: axes.Clone(), strides: make([]int, ns), paddings: make([][2]int, ns)}
	for i := range ns {
		a.strides[i] = 1
		if i < len(strides) {
			a.strides[i] = strides[i]
		}
		if i < len(paddings) {
			a.paddings[i] = paddings[i]
		}
	}
	n := b.add(backends.OpTypeConvGeneral, shape, in, execConv)
	n.aux = &a
	return n, nil
}

// asF32 returns float data as f32 (16-bit floats widened into a copy).
func asF32(flat any) []float32 {
	if f, ok := flat.([]float32); ok {
		return f
	}
	return toF32(flat)
}

// execConv computes one spatial axis as two with W = kw = Wo = 1.
func execConv(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(*convAux)
	xs, ks := n.inputs[0].shape, n.inputs[1].shape
	ax := a.axes
	// Input as [B, C, H, W] (W = 1 for one spatial axis).
	xPerm := append([]int{ax.InputBatch, ax.InputChannels}, ax.InputSpatial...)
	kPerm := append([]int{ax.KernelOutputChannels, ax.KernelInputChannels}, ax.KernelSpatial...)
	x := asF32(in[0].data)
	if !isIdentity(xPerm, xs.Dimensions) {
		x = permuted(x, shapes.Make(dtypes.Float32, xs.Dimensions...), xPerm).([]float32)
	}
	k := asF32(in[1].data)
	if !isIdentity(kPerm, ks.Dimensions) {
		k = permuted(k, shapes.Make(dtypes.Float32, ks.Dimensions...), kPerm).([]float32)
	}
	B, C := xs.Dimensions[ax.InputBatch], xs.Dimensions[ax.InputChannels]
	O := ks.Dimensions[ax.KernelOutputChannels]
	H, W := xs.Dimensions[ax.InputSpatial[0]], 1
	kh, kw := ks.Dimensions[ax.KernelSpatial[0]], 1
	Ho, Wo := n.shape.Dimensions[ax.OutputSpatial[0]], 1
	sh, sw := a.strides[0], 1
	ph, pw := a.paddings[0][0], 0
	if len(ax.InputSpatial) == 2 {
		W, kw, Wo = xs.Dimensions[ax.InputSpatial[1]], ks.Dimensions[ax.KernelSpatial[1]], n.shape.Dimensions[ax.OutputSpatial[1]]
		sw, pw = a.strides[1], a.paddings[1][0]
	}
	K := C * kh * kw
	y := make([]float32, B*O*Ho*Wo) // [B, O, Ho, Wo]
	rowsPerBlock := max(1, min(Ho, (1<<20)/max(1, K*Wo)))
	panel := make([]float32, K*rowsPerBlock*Wo)
	for bi := 0; bi < B; bi++ {
		xb := x[bi*C*H*W : (bi+1)*C*H*W]
		yb := y[bi*O*Ho*Wo : (bi+1)*O*Ho*Wo]
		for r0 := 0; r0 < Ho; r0 += rowsPerBlock {
			rows := min(rowsPerBlock, Ho-r0)
			cols := rows * Wo
			im2col(panel[:K*cols], xb, C, H, W, kh, kw, sh, sw, ph, pw, r0, rows, Wo)
			if K == 0 {
				for o := 0; o < O; o++ {
					clear(yb[o*Ho*Wo+r0*Wo : o*Ho*Wo+r0*Wo+cols])
				}
				continue
			}
			kernels.GemmF32NN(O, cols, K, k, K, panel, cols, yb[r0*Wo:], Ho*Wo)
		}
	}
	// Output from [B, O, Ho, Wo] to the requested axes order.
	out := st.alloc(n.shape)
	yDims := []int{B, O, Ho}
	outAxes := []int{ax.OutputBatch, ax.OutputChannels, ax.OutputSpatial[0]}
	if len(ax.OutputSpatial) == 2 {
		yDims = append(yDims, Wo)
		outAxes = append(outAxes, ax.OutputSpatial[1])
	}
	res := any(y)
	if !isIdentity(outAxes, n.shape.Dimensions) {
		ys := stridesOf(yDims)
		ss := make([]int, len(yDims))
		for k, oa := range outAxes {
			ss[oa] = ys[k]
		}
		t := make([]float32, len(y))
		copyWalk(t, y, walk{dims: n.shape.Dimensions, dStrides: stridesOf(n.shape.Dimensions), sStrides: ss})
		res = t
	}
	if is16(n.shape.DType) {
		fromF32(out.data, res.([]float32))
	} else {
		copy(out.data.([]float32), res.([]float32))
	}
	return out, nil
}

// im2col writes the patches for output rows [r0, r0+rows) into panel,
// laid out [C·kh·kw, rows·Wo]; taps in the padding are zero. x is one
// batch item [C, H, W]. Output (r, q) reads input (r·sh − ph + i,
// q·sw − pw + j) for tap (i, j); panel rows are spread over threads.
func im2col(panel, x []float32, C, H, W, kh, kw, sh, sw, ph, pw, r0, rows, Wo int) {
	cols := rows * Wo
	kernels.Parallel(C*kh*kw, 1, func(lo, hi int) {
		for rIdx := lo; rIdx < hi; rIdx++ {
			c, rem := rIdx/(kh*kw), rIdx%(kh*kw)
			i, j := rem/kw, rem%kw
			dst := panel[rIdx*cols : (rIdx+1)*cols]
			src := x[c*H*W : (c+1)*H*W]
			for r := 0; r < rows; r++ {
				hIn := (r0+r)*sh - ph + i
				d := dst[r*Wo : (r+1)*Wo]
				if hIn < 0 || hIn >= H {
					clear(d)
					continue
				}
				srow := src[hIn*W : (hIn+1)*W]
				if sw == 1 {
					// Contiguous taps: copy the in-range run, zero the rest.
					w0 := j - pw // input column of output column 0
					lo := max(0, -w0)
					hi := min(Wo, W-w0)
					if hi <= lo {
						clear(d)
						continue
					}
					clear(d[:lo])
					copy(d[lo:hi], srow[w0+lo:w0+hi])
					clear(d[hi:])
					continue
				}
				for q := 0; q < Wo; q++ {
					wIn := q*sw - pw + j
					if wIn < 0 || wIn >= W {
						d[q] = 0
					} else {
						d[q] = srow[wIn]
					}
				}
			}
		}
	})
}
