package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestRope builds pipeline/nn.ApplyRope's form (rotate-half, the tables
// broadcast over the heads, and over the batch where they are [1, T, 1,
// h]; whole and partial rotary) and checks that the cpu backend rewrites
// it into one node whose every element equals the go backend's, which
// runs the nine ops as written.
func TestRope(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		b, t, heads, d, rot int
		tableB              int
	}{
		{1, 1, 12, 64, 64, 1}, // decode
		{2, 5, 3, 16, 16, 2},  // a prefill batch
		{2, 3, 4, 24, 16, 1},  // partial rotary, tables shared by the batch
		{1, 7, 2, 10, 10, 1},  // odd half
	} {
		h := c.rot / 2
		name := fmt.Sprintf("%+v", c)
		shs := []shapes.Shape{sh(dtypes.Float32, c.b, c.t, c.heads, c.d), sh(dtypes.Float32, c.tableB, c.t, 1, h), sh(dtypes.Float32, c.tableB, c.t, 1, h)}
		r := rand.New(rand.NewPCG(3, uint64(c.d)))
		data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), randFlat(r, shs[2], false)}
		var out backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			x, cs, sn := ps[0], ps[1], ps[2]
			slice := func(lo, hi int) backends.Op {
				v, err := b.Slice(x, []int{0, 0, 0, lo}, []int{c.b, c.t, c.heads, hi}, []int{1, 1, 1, 1})
				if err != nil {
					panic(err)
				}
				return v
			}
			x1, x2 := slice(0, h), slice(h, c.rot)
			mul := func(a, b2 backends.Op) backends.Op {
				v, err := b.Mul(a, b2)
				if err != nil {
					panic(err)
				}
				return v
			}
			first, err := b.Sub(mul(x1, cs), mul(x2, sn))
			if err != nil {
				return nil, err
			}
			second, err := b.Add(mul(x2, cs), mul(x1, sn))
			if err != nil {
				return nil, err
			}
			parts := []backends.Op{first, second}
			if c.rot < c.d {
				parts = append(parts, slice(c.rot, c.d))
			}
			out, err = b.Concatenate(3, parts...)
			return out, err
		}
		want, _, err := run(ref, shs, data, build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := run(cpu, shs, data, build)
		if err != nil {
			t.Fatal(err)
		}
		if n := out.(*node); n.op != opTypeRope {
			t.Fatalf("%s: not rewritten into the rotary node", name)
		}
		g, w := got.([]float32), want.([]float32)
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s: element %d is %v, want %v", name, i, g[i], w[i])
			}
		}
	}
}
