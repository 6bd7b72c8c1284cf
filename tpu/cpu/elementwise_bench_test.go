package cpu

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// BenchmarkElementwise times single elementwise ops through the backend on
// 1<<16 elements: the same-shape, scalar and row-broadcast binary loops,
// a comparison, the f32 fast and generic unary loops, the bf16 path through
// f32, and one fused chain (SiLU(x)·u).
func BenchmarkElementwise(b *testing.B) {
	be, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	type bcase struct {
		name  string
		dt    dtypes.DType
		in    []shapes.Shape
		build buildFn
	}
	full := func(dt dtypes.DType) shapes.Shape { return sh(dt, 256, 256) }
	binary := func(f func(backends.Builder, backends.Op, backends.Op) (backends.Op, error)) buildFn {
		return func(bl backends.Builder, p []backends.Op) (backends.Op, error) { return f(bl, p[0], p[1]) }
	}
	unary := func(f func(backends.Builder, backends.Op) (backends.Op, error)) buildFn {
		return func(bl backends.Builder, p []backends.Op) (backends.Op, error) { return f(bl, p[0]) }
	}
	add := binary(backends.Builder.Add)
	var cases []bcase
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		cases = append(cases,
			bcase{"Add", dt, []shapes.Shape{full(dt), full(dt)}, add},
			bcase{"Mul", dt, []shapes.Shape{full(dt), full(dt)}, binary(backends.Builder.Mul)},
			bcase{"AddScalar", dt, []shapes.Shape{full(dt), sh(dt)}, add},
			bcase{"AddRow", dt, []shapes.Shape{full(dt), sh(dt, 1, 256)}, add},
			bcase{"Pow", dt, []shapes.Shape{full(dt), full(dt)}, binary(backends.Builder.Pow)},
			bcase{"LessThan", dt, []shapes.Shape{full(dt), full(dt)}, binary(backends.Builder.LessThan)},
			bcase{"Exp", dt, []shapes.Shape{full(dt)}, unary(backends.Builder.Exp)},
			bcase{"Tanh", dt, []shapes.Shape{full(dt)}, unary(backends.Builder.Tanh)},
		)
	}
	where := func(bl backends.Builder, p []backends.Op) (backends.Op, error) { return bl.Where(p[0], p[1], p[2]) }
	cases = append(cases,
		bcase{"Where", dtypes.Float32, []shapes.Shape{full(dtypes.Bool), full(dtypes.Float32), full(dtypes.Float32)}, where},
		bcase{"WhereZero", dtypes.Float32, []shapes.Shape{full(dtypes.Bool), full(dtypes.Float32), sh(dtypes.Float32)}, where},
		bcase{"Add", dtypes.Int32, []shapes.Shape{full(dtypes.Int32), full(dtypes.Int32)}, add},
		bcase{"SiLUMul", dtypes.Float32, []shapes.Shape{full(dtypes.Float32), full(dtypes.Float32)},
			func(bl backends.Builder, p []backends.Op) (backends.Op, error) {
				s, err := bl.Logistic(p[0])
				if err != nil {
					return nil, err
				}
				if s, err = bl.Mul(s, p[0]); err != nil {
					return nil, err
				}
				return bl.Mul(s, p[1])
			}},
	)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		b.Run(c.name+"/"+c.dt.String(), func(b *testing.B) {
			bl := be.Builder(c.name)
			params := make([]backends.Op, len(c.in))
			bufs := make([]backends.Buffer, len(c.in))
			for i, s := range c.in {
				if params[i], err = bl.Parameter("p"+strconv.Itoa(i), s, nil); err != nil {
					b.Fatal(err)
				}
				if bufs[i], err = be.BufferFromFlatData(0, randFlat(r, s, true), s); err != nil {
					b.Fatal(err)
				}
			}
			op, err := c.build(bl, params)
			if err != nil {
				b.Fatal(err)
			}
			exe, err := bl.Compile([]backends.Op{op}, nil)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				outs, err := exe.Execute(bufs, nil, 0)
				if err != nil {
					b.Fatal(err)
				}
				if err := be.BufferFinalize(outs[0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
