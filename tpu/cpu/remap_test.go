package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// remapBuild is compile's remapSlots as the backend sees it (remap.go):
// x (the first parameter, of dimensions xs) with its axis rebuilt into s slots by shift (a
// scalar int32) and valid [s] int32, padded by s zero slots on the left
// and right on the right. With one set, the Where's false operand is the
// scalar one instead of zero. The Where is kept in *out.
func remapBuild(xs []int, axis, s, right int, dt dtypes.DType, one bool, out *backends.Op) buildFn {
	return func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
		x, shift, valid := ps[0], ps[1], ps[2]
		rank := len(xs)
		dims := func(at int) []int {
			d := slices.Clone(xs)
			d[axis] = at
			return d
		}
		z, err := b.Constant(makeFlat(dt, 1)) // a scalar zero of x's dtype
		if err != nil {
			return nil, err
		}
		lz, _ := b.BroadcastInDim(z, shapes.Make(dt, dims(s)...), nil)
		rz, _ := b.BroadcastInDim(z, shapes.Make(dt, dims(right)...), nil)
		padded, err := b.Concatenate(axis, lz, x, rz)
		if err != nil {
			return nil, err
		}
		n, _ := b.Constant([]int32{int32(s)})
		start, _ := b.Add(shift, n)
		start, _ = b.Reshape(start, 1)
		window, err := b.Gather(padded, start, 0, iotaInts(rank), nil, []int{axis}, dims(s), true)
		if err != nil {
			return nil, err
		}
		zi, _ := b.Constant([]int32{0})
		keep, _ := b.GreaterThan(valid, zi)
		ones := make([]int, rank)
		for i := range ones {
			ones[i] = 1
		}
		ones[axis] = s
		keep, _ = b.Reshape(keep, ones...)
		keep, _ = b.BroadcastInDim(keep, shapes.Make(dtypes.Bool, dims(s)...), iotaInts(rank))
		f := z
		if one {
			f, _ = b.Constant(asFlat(dt, 1))
		}
		w, err := b.Where(keep, window, f)
		*out = w
		return w, err
	}
}

// asFlat is a one-element flat slice of dt holding v.
func asFlat(dt dtypes.DType, v float64) any {
	switch dt {
	case dtypes.Float32:
		return []float32{float32(v)}
	case dtypes.Int32:
		return []int32{int32(v)}
	}
	panic("asFlat: " + dt.String())
}

// TestRemapSlots: the relayouts' slot remap (compile/batch.go) becomes
// one node that agrees with the go backend's four passes for shifts that
// move the slots either way, grow or shrink the axis, or fall off either
// end (the window then clamped as Gather clamps it), on f32, bf16 and
// int32 states, slot axes 1 to 3; a Where whose false operand is not
// zero is left as it is (and still agrees).
func TestRemapSlots(t *testing.T) {
	ref, cpu := backendsForTest(t)
	r := rand.New(rand.NewPCG(81, 82))
	for _, c := range []struct {
		dims  []int
		axis  int
		s     int
		right int
		dt    dtypes.DType
		one   bool
	}{
		{[]int{2, 3, 8, 4}, 2, 6, 6, dtypes.BFloat16, false},
		{[]int{2, 3, 8, 4}, 2, 12, 12, dtypes.Float32, false},
		{[]int{1, 2, 5, 16}, 2, 5, 5, dtypes.Float32, false},
		{[]int{3, 7, 4}, 1, 9, 9, dtypes.Int32, false},
		{[]int{2, 2, 3, 10}, 3, 4, 4, dtypes.BFloat16, false},
		{[]int{2, 3, 8, 4}, 2, 6, 2, dtypes.Float32, false},
		{[]int{2, 3, 8, 4}, 2, 6, 6, dtypes.Float32, true},
	} {
		sx := c.dims[c.axis]
		shs := []shapes.Shape{shapes.Make(c.dt, c.dims...), sh(dtypes.Int32), sh(dtypes.Int32, c.s)}
		x := randFlat(r, shs[0], false)
		for _, shift := range []int{0, 2, -3, sx - 1, -c.s, sx + c.s, -2*c.s - 5, 3 * c.s} {
			valid := make([]int32, c.s)
			lo, hi := r.IntN(c.s), r.IntN(c.s+1)
			for j := lo; j < hi; j++ {
				valid[j] = 1
			}
			valid[r.IntN(c.s)] = 1
			name := fmt.Sprintf("%v axis %d to %d slots (right %d) %s, shift %d, valid %v", c.dims, c.axis, c.s, c.right, c.dt, shift, valid)
			var w backends.Op
			build := remapBuild(c.dims, c.axis, c.s, c.right, c.dt, c.one, &w)
			data := []any{x, []int32{int32(shift)}, valid}
			compareBackends(t, name, ref, cpu, shs, data, build) // exact: copies and zeros
			if rewritten := w.(*node).op == opTypeRemap; rewritten == c.one {
				t.Fatalf("%s: rewritten into the remap node: %v", name, rewritten)
			}
		}
	}
}
