package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/loader/quant"
)

// mxfp4Stack is a random MXFP4 stack [e, out, in]: its blocks and
// scales, and the values loader/quant decodes from them.
func mxfp4Stack(e, out, in int) (blocks, scales []byte, vals []float32) {
	n := e * out * in
	blocks, scales = make([]byte, n/2), make([]byte, n/32)
	for i := range blocks {
		blocks[i] = byte(i*97 + i/7)
	}
	for i := range scales {
		scales[i] = byte(122 + i%9)
	}
	vals = make([]float32, n)
	quant.DecodeMXFP4(vals, blocks, scales)
	return blocks, scales, vals
}

// DequantizeMXFP4 gives loader/quant's values, bit for bit, in the form
// dequantizeMXFP4Parts finds again (and PairDot gathers by).
func TestDequantizeMXFP4(t *testing.T) {
	const e, out, in = 2, 3, 64
	blocks, scales, vals := mxfp4Stack(e, out, in)
	found := false
	res := execGraph(t, func(x []*Node) []*Node {
		w := DequantizeMXFP4(x[0], x[1], dtypes.Float32)
		b, s, ok := dequantizeMXFP4Parts(w)
		found = ok && b == x[0] && s == x[1]
		return []*Node{w}
	}, tensors.FromFlatDataAndDimensions(blocks, e, out, in/32, 16), tensors.FromFlatDataAndDimensions(scales, e, out, in/32))
	if !found {
		t.Error("dequantizeMXFP4Parts does not find the blocks and scales of DequantizeMXFP4's form")
	}
	for i, v := range vals {
		if got := res[0][i]; got != v || math.Signbit(float64(got)) != math.Signbit(float64(v)) {
			t.Fatalf("value %d: %v, want %v", i, got, v)
		}
	}
}

// PairDot over an MXFP4 stack gathers the chosen blocks and scales and
// equals PairDot over the decoded f32 stack.
func TestPairDotMXFP4(t *testing.T) {
	const e, out, in = 4, 5, 64
	blocks, scales, vals := mxfp4Stack(e, out, in)
	v := values(3*in, 0.1)
	ids := []int32{2, 0, 2}
	res := execGraph(t, func(x []*Node) []*Node {
		mx := PairDot(x[0], DequantizeMXFP4(x[1], x[2], dtypes.Float32), x[4])
		f := PairDot(x[0], x[3], x[4])
		return []*Node{mx, f}
	}, tensors.FromFlatDataAndDimensions(v, 3, in),
		tensors.FromFlatDataAndDimensions(blocks, e, out, in/32, 16), tensors.FromFlatDataAndDimensions(scales, e, out, in/32),
		tensors.FromFlatDataAndDimensions(vals, e, out, in), tensors.FromFlatDataAndDimensions(ids, 3, 1))
	for i := range res[1] {
		if d := math.Abs(float64(res[0][i] - res[1][i])); d > 1e-6*(1+math.Abs(float64(res[1][i]))) {
			t.Fatalf("output %d: %v, want %v", i, res[0][i], res[1][i])
		}
	}
}
