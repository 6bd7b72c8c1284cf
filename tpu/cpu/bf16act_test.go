package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// With bf16 activations (act=bf16) a product with a bf16 weight equals the
// go backend's product of the activations rounded to bf16
// (kernels.RoundBF16) with the weight: as a plain DotGeneral (one row,
// a few, enough for the VDPBF16PS tiles), batched (one row and a few a
// product) and as the grouped product of routed experts. Without the
// option the same graph equals the unrounded product, and the two differ
// (the rounding is not a no-op).
func TestBF16Activations(t *testing.T) {
	ref, cpu := backendsForTest(t)
	bf, err := New("act=bf16")
	if err != nil {
		t.Fatal(err)
	}
	dense := func(m, n, k int) ([]shapes.Shape, func(b backends.Builder, ps []backends.Op) (backends.Op, error)) {
		shs := []shapes.Shape{sh(dtypes.Float32, m, k), sh(dtypes.BFloat16, n, k)}
		return shs, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			w, err := b.ConvertDType(ps[1], dtypes.Float32)
			if err != nil {
				return nil, err
			}
			return b.DotGeneral(ps[0], []int{1}, nil, w, []int{1}, nil)
		}
	}
	grouped := func(ids []int32, e, n, k int) ([]shapes.Shape, func(b backends.Builder, ps []backends.Op) (backends.Op, error)) {
		p := len(ids)
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.BFloat16, e, n, k), sh(dtypes.Int32, p, 1)}
		return shs, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return pairDot(b, ps[0], ps[1], ps[2], n, k, dtypes.BFloat16)
		}
	}
	type tc struct {
		name  string
		shs   []shapes.Shape
		build func(b backends.Builder, ps []backends.Op) (backends.Op, error)
		ids   []int32
	}
	var cases []tc
	for _, mnk := range [][3]int{{1, 40, 96}, {5, 33, 64}, {40, 70, 300}, {130, 24, 64}} {
		shs, build := dense(mnk[0], mnk[1], mnk[2])
		cases = append(cases, tc{fmt.Sprintf("dense %dx%dx%d", mnk[0], mnk[1], mnk[2]), shs, build, nil})
	}
	// Batched one-row products (attention's at decode, a row and head a
	// product: their rows rounded once for all) and batched few-row ones.
	batched := func(bs, m, n, k int) ([]shapes.Shape, func(b backends.Builder, ps []backends.Op) (backends.Op, error)) {
		shs := []shapes.Shape{sh(dtypes.Float32, bs, m, k), sh(dtypes.BFloat16, bs, n, k)}
		return shs, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			w, err := b.ConvertDType(ps[1], dtypes.Float32)
			if err != nil {
				return nil, err
			}
			return b.DotGeneral(ps[0], []int{2}, []int{0}, w, []int{2}, []int{0})
		}
	}
	for _, bmnk := range [][4]int{{24, 1, 40, 64}, {3, 1, 33, 96}, {6, 3, 20, 64}} {
		shs, build := batched(bmnk[0], bmnk[1], bmnk[2], bmnk[3])
		cases = append(cases, tc{fmt.Sprintf("batched %dx%dx%dx%d", bmnk[0], bmnk[1], bmnk[2], bmnk[3]), shs, build, nil})
	}
	ids := make([]int32, 40)
	for i := range ids {
		ids[i] = int32(i % 3)
	}
	ids[5] = 3 // an expert with one row: the GEMV pass
	shs, build := grouped(ids, 4, 24, 64)
	cases = append(cases, tc{"grouped", shs, build, ids})
	for _, c := range cases {
		r := rand.New(rand.NewPCG(41, uint64(len(c.name))))
		x := randFlat(r, c.shs[0], false).([]float32)
		data := []any{x, randFlat(r, c.shs[1], false)}
		xr := make([]float32, len(x))
		kernels.RoundBF16(xr, x)
		rounded := []any{xr, data[1]}
		if c.ids != nil {
			data, rounded = append(data, c.ids), append(rounded, c.ids)
		}
		exact, _, err := run(ref, c.shs, data, c.build)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := run(ref, c.shs, rounded, c.build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := run(bf, c.shs, data, c.build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, c.name+", bf16 activations", dtypes.Float32, asFloat64(got), asFloat64(want))
		plain, _, err := run(cpu, c.shs, data, c.build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, c.name+", f32 activations", dtypes.Float32, asFloat64(plain), asFloat64(exact))
		same := true
		for i, v := range asFloat64(got) {
			same = same && v == asFloat64(plain)[i]
		}
		if same {
			t.Errorf("%s: act=bf16 gave the f32 activations' result", c.name)
		}
	}
	if _, err := New("act=int4"); err == nil {
		t.Error(`New("act=int4") succeeded, want an error naming the kinds`)
	}
}
