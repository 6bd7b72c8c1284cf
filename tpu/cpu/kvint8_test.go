package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// Writing int8 caches (nn.WriteKV): the engine's one-pass quantisation
// (rewriteQuantizeKV) gives the go backend's codes and scales exactly, for
// keys (a scale per row of the head dimension) and the transposed values
// (a scale per column), at a decode step and a prefill piece, including
// a head of zeros and quotients that round half away from zero.
func TestQuantizeKVNode(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	const b, kv, d, s = 2, 3, 16, 24
	for _, tt := range []int{1, 5} {
		r := rand.New(rand.NewPCG(61, uint64(tt)))
		k, v := make([]float32, b*tt*kv*d), make([]float32, b*tt*kv*d)
		for i := range k {
			k[i], v[i] = float32(r.NormFloat64()), float32(r.NormFloat64())*3
		}
		for j := range d { // token 0 of row 0, head 1: zeros
			k[(0*kv+1)*d+j], v[(0*kv+1)*d+j] = 0, 0
		}
		// Row 1, token 0, head 0: the largest is 127, so every code is the
		// value itself, and x.5 values round away from zero.
		for j := range d {
			k[((1*tt)*kv+0)*d+j] = float32(j) - 7.5
		}
		k[((1*tt)*kv+0)*d+d-1] = 127
		write := func(be backends.Backend) [][]float32 {
			exec, err := graph.NewExec(be, func(in []*graph.Node) []*graph.Node {
				g := in[0].Graph()
				step := lm.NewStep(b, tt, s, in[2], in[3], be != ref) // the go backend scatters
				c := nn.KV{
					Keys:        graph.Zeros(g, shapes.Make(dtypes.Int8, b, kv, s, d)),
					Values:      graph.Zeros(g, shapes.Make(dtypes.Int8, b, kv, d, s)),
					KeyScales:   graph.Zeros(g, shapes.Make(dtypes.Float32, b, kv, s)),
					ValueScales: graph.Zeros(g, shapes.Make(dtypes.Float32, b, kv, s)),
				}
				c = nn.WriteKV(c, in[0], in[1], step)
				return []*graph.Node{graph.ConvertDType(c.Keys, dtypes.Float32), graph.ConvertDType(c.Values, dtypes.Float32), c.KeyScales, c.ValueScales}
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Exec(tensors.FromFlatDataAndDimensions(k, b, tt, kv, d), tensors.FromFlatDataAndDimensions(v, b, tt, kv, d),
				tensors.FromFlatDataAndDimensions([]int32{0, 0}, b), tensors.FromScalar(int32(3)))
			if err != nil {
				t.Fatal(err)
			}
			var res [][]float32
			for _, o := range out {
				res = append(res, tensors.MustCopyFlatData[float32](o))
			}
			return res
		}
		before := quantizeKVRewrites.Load()
		got := write(cpuB)
		if n := quantizeKVRewrites.Load() - before; n != 2 {
			t.Errorf("T=%d: %d quantisations rewritten, want 2", tt, n)
		}
		want := write(ref)
		for o, name := range []string{"key codes", "value codes", "key scales", "value scales"} {
			for i := range want[o] {
				if got[o][i] != want[o][i] && !(math.IsNaN(float64(got[o][i])) && math.IsNaN(float64(want[o][i]))) {
					t.Fatalf("T=%d: %s [%d] = %g, go backend %g", tt, name, i, got[o][i], want[o][i])
				}
			}
		}
		// The ties: slot 3 of row 1, head 0, read back.
		row := got[0][((1*kv+0)*s+3)*d:]
		for j := range d - 1 {
			if want := float32(math.Round(float64(j) - 7.5)); row[j] != want {
				t.Fatalf("T=%d: code of %g = %g, want %g (half away from zero)", tt, float64(j)-7.5, row[j], want)
			}
		}
	}
}

// The int8 product forms rewriteKVInt8 takes, against the go backend: a
// scale per rhs row and one per contraction column, over batch axes, and
// a form it must not take as either (two N axes, the scales varying
// along the first), which still computes the same as the go backend.
func TestKVInt8ProductForms(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	const b, m, n1, n2, k = 3, 2, 4, 5, 32
	r := rand.New(rand.NewPCG(71, 72))
	x := make([]float32, b*m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	q := make([]int8, b*n1*n2*k)
	for i := range q {
		q[i] = int8(r.IntN(255) - 127)
	}
	for _, c := range []struct {
		name      string
		qDims     []int
		scaleDims []int
		rewritten bool
	}{
		{"rows", []int{b, n1 * n2, k}, []int{b, n1 * n2, 1}, true},
		{"columns", []int{b, n1 * n2, k}, []int{b, 1, k}, true},
		{"two N axes", []int{b, n1, n2, k}, []int{b, n1, 1, k}, false},
	} {
		size := 1
		for _, d := range c.scaleDims {
			size *= d
		}
		sc := make([]float32, size)
		for i := range sc {
			sc[i] = 0.01 + r.Float32()
		}
		product := func(be backends.Backend) []float32 {
			out, err := graph.ExecOnce(be, func(in []*graph.Node) *graph.Node {
				w := graph.Mul(graph.ConvertDType(in[1], dtypes.Float32), in[2])
				rank := len(c.qDims)
				return graph.DotGeneral(in[0], []int{2}, []int{0}, w, []int{rank - 1}, []int{0})
			}, tensors.FromFlatDataAndDimensions(x, b, m, k), tensors.FromFlatDataAndDimensions(q, c.qDims...),
				tensors.FromFlatDataAndDimensions(sc, c.scaleDims...))
			if err != nil {
				t.Fatal(err)
			}
			return tensors.MustCopyFlatData[float32](out)
		}
		before := kvInt8Rewrites.Load()
		got := product(cpuB)
		if n := kvInt8Rewrites.Load() - before; (n == 1) != c.rewritten || n > 1 {
			t.Errorf("%s: %d products rewritten, want rewritten %v", c.name, n, c.rewritten)
		}
		compareFlat(t, c.name, dtypes.Float32, asFloat64(got), asFloat64(product(ref)))
	}
}
