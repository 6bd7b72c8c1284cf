package cpu

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// FP8 weights. pipeline/nn.DequantizeFP8 writes an FP8 weight (E4M3 bytes
// u8 [N, K] and block scales f32 [⌈N/b0⌉, ⌈K/b1⌉], as the Hub's FP8
// checkpoints store them) as
//
//	Mul(Reshape(Gather(E4M3 values [256, 1], Reshape(ConvertDType(w, i32), N·K, 1)), N, K),
//	    [Slice](Reshape(BroadcastInDim(Reshape(scales, so, 1, si, 1), [so, b0, si, b1]), so·b0, si·b1)))
//
// and rewriteFP8 finds it as the right operand of an f32 DotGeneral in the
// NT layout: the product then reads the bytes and scales directly
// (kernels.GemmFP8NT), and the f32 weight is never made unless something
// else reads it.

// fp8Table is nn.DequantizeFP8's table, flat.
var fp8Table = func() (t [256]float32) {
	for b := range t {
		t[b] = kernels.FP8Value(byte(b))
	}
	return t
}()

// sameBits reports whether two f32 slices hold the same bits (NaN entries
// included).
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// fp8Weight matches the dequantisation form at r [N, K] and returns the
// bytes [N, K], the scales [so, si] and the block sides.
func fp8Weight(r *node) (w, scales *node, b0, b1 int, ok bool) {
	if r.op != backends.OpTypeMul || r.shape.DType != dtypes.Float32 || r.shape.Rank() != 2 {
		return nil, nil, 0, 0, false
	}
	n, k := r.shape.Dimensions[0], r.shape.Dimensions[1]
	for _, o := range [][2]int{{0, 1}, {1, 0}} {
		v, s := r.inputs[o[0]], r.inputs[o[1]]
		if v.op != backends.OpTypeReshape || !slices.Equal(v.shape.Dimensions, []int{n, k}) {
			continue
		}
		t, x := gatherSource(v.inputs[0], 1)
		if t == nil || t.op != backends.OpTypeConstant || x.shape.DType != dtypes.Uint8 || !slices.Equal(x.shape.Dimensions, []int{n, k}) {
			continue
		}
		if vals, ok := t.constant.([]float32); !ok || !sameBits(vals, fp8Table[:]) {
			continue
		}
		if s.op == backends.OpTypeSlice {
			a, ok := s.aux.(sliceAux)
			if !ok || slices.ContainsFunc(a.starts, func(i int) bool { return i != 0 }) || slices.ContainsFunc(a.strides, func(i int) bool { return i != 1 }) {
				continue
			}
			s = s.inputs[0]
		}
		if s.op != backends.OpTypeReshape || s.shape.Rank() != 2 {
			continue
		}
		bc := s.inputs[0]
		if bc.op != backends.OpTypeBroadcastInDim || bc.shape.Rank() != 4 || !slices.Equal(bc.aux.([]int), []int{0, 1, 2, 3}) {
			continue
		}
		d := bc.shape.Dimensions // [so, b0, si, b1]
		rs := bc.inputs[0]
		if rs.op != backends.OpTypeReshape || !slices.Equal(rs.shape.Dimensions, []int{d[0], 1, d[2], 1}) {
			continue
		}
		sc := rs.inputs[0]
		if sc.shape.DType != dtypes.Float32 || !slices.Equal(sc.shape.Dimensions, []int{d[0], d[2]}) ||
			!slices.Equal(s.shape.Dimensions, []int{d[0] * d[1], d[2] * d[3]}) ||
			d[0] != (n+d[1]-1)/d[1] || d[2] != (k+d[3]-1)/d[3] {
			continue
		}
		return x, sc, d[1], d[3], true
	}
	return nil, nil, 0, 0, false
}

// rewriteFP8 points f32 DotGenerals at FP8 weights where the right operand
// is the dequantisation form, in the NT layout, with no batch.
func rewriteFP8(n *node) {
	a, r, ok := weightDot(n)
	if !ok {
		return
	}
	w, scales, b0, b1, ok := fp8Weight(r)
	if !ok {
		return
	}
	b := *a
	b.fp8B0, b.fp8B1 = b0, b1
	n.aux = &b
	n.inputs = []*node{n.inputs[0], w, scales}
}
