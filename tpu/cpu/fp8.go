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
	if r.shape.Rank() != 2 {
		return nil, nil, 0, 0, false
	}
	return fp8Form(r)
}

// fp8Form matches nn.DequantizeFP8's form at r [..., N, K] (a matrix, or
// a batch of them as nn.PairDot gathers) and returns the bytes [..., N,
// K], the scales [..., so, si] and the block sides.
func fp8Form(r *node) (w, scales *node, b0, b1 int, ok bool) {
	rk := r.shape.Rank()
	if r.op != backends.OpTypeMul || r.shape.DType != dtypes.Float32 || rk < 2 {
		return nil, nil, 0, 0, false
	}
	lead := r.shape.Dimensions[:rk-2]
	dims := func(x ...int) []int { return append(slices.Clone(lead), x...) }
	n, k := r.shape.Dimensions[rk-2], r.shape.Dimensions[rk-1]
	for _, o := range [][2]int{{0, 1}, {1, 0}} {
		v, s := r.inputs[o[0]], r.inputs[o[1]]
		if v.op != backends.OpTypeReshape || !slices.Equal(v.shape.Dimensions, dims(n, k)) {
			continue
		}
		x := tableSource(v.inputs[0], fp8Table[:], 1)
		if x == nil || !slices.Equal(x.shape.Dimensions, dims(n, k)) {
			continue
		}
		if s.op == backends.OpTypeSlice {
			a, ok := s.aux.(sliceAux)
			if !ok || slices.ContainsFunc(a.starts, func(i int) bool { return i != 0 }) || slices.ContainsFunc(a.strides, func(i int) bool { return i != 1 }) {
				continue
			}
			s = s.inputs[0]
		}
		if s.op != backends.OpTypeReshape || s.shape.Rank() != rk {
			continue
		}
		bc := s.inputs[0]
		if bc.op != backends.OpTypeBroadcastInDim || bc.shape.Rank() != rk+2 || !slices.Equal(bc.aux.([]int), iotaInts(rk+2)) {
			continue
		}
		d := bc.shape.Dimensions[rk-2:] // [so, b0, si, b1]
		rs := bc.inputs[0]
		if rs.op != backends.OpTypeReshape || !slices.Equal(rs.shape.Dimensions, dims(d[0], 1, d[2], 1)) {
			continue
		}
		sc := rs.inputs[0]
		if sc.shape.DType != dtypes.Float32 || !slices.Equal(sc.shape.Dimensions, dims(d[0], d[2])) ||
			!slices.Equal(s.shape.Dimensions, dims(d[0]*d[1], d[2]*d[3])) ||
			d[0] != (n+d[1]-1)/d[1] || d[2] != (k+d[3]-1)/d[3] {
			continue
		}
		return x, sc, d[1], d[3], true
	}
	return nil, nil, 0, 0, false
}

// fp8Gathered matches nn.PairDot's FP8 form (nn.DequantizeFP8 of the
// gathered bytes and scales) at r [P, N, K] and returns the stacks
// (bytes [E, N, K], scales [E, so, si]), the pairs' expert ids and the
// block sides.
func fp8Gathered(r *node) (w, scales, ids *node, b0, b1 int, ok bool) {
	if r.shape.Rank() != 3 {
		return nil, nil, nil, 0, 0, false
	}
	gw, gs, b0, b1, ok := fp8Form(r)
	if !ok || !wholeRowGather(gw) || !wholeRowGather(gs) || !sameIndices(gw.inputs[1], gs.inputs[1]) {
		return nil, nil, nil, 0, 0, false
	}
	return gw.inputs[0], gs.inputs[0], gw.inputs[1], b0, b1, true
}

// rewriteFP8 points f32 DotGenerals at FP8 weights where the right operand
// is the dequantisation form, in the NT layout, with no batch.
func rewriteFP8(n *node, act actKind) {
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
	b.bf16Act = bf16Rows(n, a, act)
	pointAt(n, &b, n.inputs[0], w, scales)
}
