package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// DequantizeFP8 gives each byte's E4M3 value (decoded the long way here)
// times its block's scale, with blocks that overhang the matrix.
func TestDequantizeFP8(t *testing.T) {
	const out, in, b0, b1 = 5, 21, 2, 8
	so, si := 3, 3
	w := make([]uint8, out*in)
	for i := range w {
		w[i] = uint8(i*37 + 11)
		if w[i]&0x7f == 0x7f {
			w[i] = 0x41
		}
	}
	scales := make([]float32, so*si)
	for i := range scales {
		scales[i] = float32(i+1) / 16
	}
	res := execGraph(t, func(x []*Node) []*Node {
		return []*Node{DequantizeFP8(x[0], x[1], b0, b1, dtypes.Float32)}
	}, tensors.FromFlatDataAndDimensions(w, out, in), tensors.FromFlatDataAndDimensions(scales, so, si))
	for j := 0; j < out; j++ {
		for p := 0; p < in; p++ {
			b := w[j*in+p]
			e, m := int(b>>3)&15, float64(b&7)
			v := (1 + m/8) * math.Ldexp(1, e-7)
			if e == 0 {
				v = m / 8 * math.Ldexp(1, -6)
			}
			if b&0x80 != 0 {
				v = -v
			}
			want := float32(v) * scales[(j/b0)*si+p/b1]
			if got := res[0][j*in+p]; got != want {
				t.Fatalf("(%d, %d) byte %#x: %v, want %v", j, p, b, got, want)
			}
		}
	}
}

// PairDot over an FP8 stack (blocks that overhang) gathers the chosen
// experts' bytes and scales, and equals PairDot over the decoded stack;
// the parts are found again.
func TestPairDotFP8(t *testing.T) {
	const e, out, in, b0, b1 = 3, 5, 21, 2, 8
	so, si := 3, 3
	w := make([]uint8, e*out*in)
	for i := range w {
		w[i] = uint8(i*29 + 3)
		if w[i]&0x7f == 0x7f {
			w[i] = 0x39
		}
	}
	scales := make([]float32, e*so*si)
	for i := range scales {
		scales[i] = float32(i%7+1) / 32
	}
	v := values(4*in, 0.1)
	ids := []int32{1, 0, 2, 1}
	var found bool
	res := execGraph(t, func(x []*Node) []*Node {
		d := DequantizeFP8(x[1], x[2], b0, b1, dtypes.Float32)
		bw, sc, c0, c1, ok := dequantizeFP8Parts(d)
		found = ok && bw == x[1] && sc == x[2] && c0 == b0 && c1 == b1
		return []*Node{PairDot(x[0], d, x[3]), PairDot(x[0], StopGradient(d), x[3])}
	}, tensors.FromFlatDataAndDimensions(v, 4, in), tensors.FromFlatDataAndDimensions(w, e, out, in),
		tensors.FromFlatDataAndDimensions(scales, e, so, si), tensors.FromFlatDataAndDimensions(ids, 4, 1))
	if !found {
		t.Error("dequantizeFP8Parts does not find the parts of a stack")
	}
	for i := range res[1] {
		if d := math.Abs(float64(res[0][i] - res[1][i])); d > 1e-5*(1+math.Abs(float64(res[1][i]))) {
			t.Fatalf("output %d: %v, want %v", i, res[0][i], res[1][i])
		}
	}
}
