package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/notimplemented"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Every op is checked against GoMLX's go backend on the same inputs.

type buildFn func(b backends.Builder, p []backends.Op) (backends.Op, error)

var (
	refBackend backends.Backend
	cpuBackend backends.Backend
)

func backendsForTest(t *testing.T) (backends.Backend, backends.Backend) {
	t.Helper()
	if refBackend == nil {
		var err error
		refBackend, err = backends.NewWithConfig("go:ops_sequential")
		if err != nil {
			t.Fatal(err)
		}
		cpuBackend, err = New("")
		if err != nil {
			t.Fatal(err)
		}
	}
	return refBackend, cpuBackend
}

// run builds, compiles and executes one graph; it returns the output.
func run(be backends.Backend, in []shapes.Shape, data []any, build buildFn) (flat any, shape shapes.Shape, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	b := be.Builder("test")
	params := make([]backends.Op, len(in))
	for i, s := range in {
		p, err := b.Parameter(fmt.Sprintf("p%d", i), s, nil)
		if err != nil {
			return nil, shapes.Shape{}, err
		}
		params[i] = p
	}
	op, err := build(b, params)
	if err != nil {
		return nil, shapes.Shape{}, err
	}
	exe, err := b.Compile([]backends.Op{op}, nil)
	if err != nil {
		return nil, shapes.Shape{}, err
	}
	bufs := make([]backends.Buffer, len(in))
	for i, s := range in {
		if bufs[i], err = be.BufferFromFlatData(0, data[i], s); err != nil {
			return nil, shapes.Shape{}, err
		}
	}
	outs, err := exe.Execute(bufs, nil, 0)
	if err != nil {
		return nil, shapes.Shape{}, err
	}
	s, err := be.BufferShape(outs[0])
	if err != nil {
		return nil, shapes.Shape{}, err
	}
	flat = makeFlat(s.DType, s.Size())
	return flat, s, be.BufferToFlatData(outs[0], flat)
}

// randFlat makes random values for a shape; floats are in [-2, 2) unless
// positive, then in [0.1, 4).
func randFlat(r *rand.Rand, s shapes.Shape, positive bool) any {
	n := s.Size()
	f := make([]float64, n)
	for i := range f {
		if positive {
			f[i] = 0.1 + 3.9*r.Float64()
		} else {
			f[i] = 4*r.Float64() - 2
		}
	}
	switch s.DType {
	case dtypes.Float32:
		out := make([]float32, n)
		for i, v := range f {
			out[i] = float32(v)
		}
		return out
	case dtypes.Float64:
		return f
	case dtypes.BFloat16:
		out := make([]bfloat16.BFloat16, n)
		for i, v := range f {
			out[i] = bfloat16.FromFloat64(v)
		}
		return out
	case dtypes.Float16:
		out := make([]float16.Float16, n)
		for i, v := range f {
			out[i] = float16.Fromfloat32(float32(v))
		}
		return out
	case dtypes.Bool:
		out := make([]bool, n)
		for i := range out {
			out[i] = r.IntN(2) == 1
		}
		return out
	}
	out := makeFlat(s.DType, n)
	lo, hi := -7, 8
	if positive || s.DType.IsUnsigned() {
		lo = 1
	}
	ints := make([]int64, n)
	for i := range ints {
		ints[i] = int64(lo + r.IntN(hi-lo))
	}
	switch o := out.(type) {
	case []int8:
		for i, v := range ints {
			o[i] = int8(v)
		}
	case []int16:
		for i, v := range ints {
			o[i] = int16(v)
		}
	case []int32:
		for i, v := range ints {
			o[i] = int32(v)
		}
	case []int64:
		copy(o, ints)
	case []uint8:
		for i, v := range ints {
			o[i] = uint8(v)
		}
	case []uint32:
		for i, v := range ints {
			o[i] = uint32(v)
		}
	case []uint64:
		for i, v := range ints {
			o[i] = uint64(v)
		}
	}
	return out
}

// asFloat64 reads any flat slice as float64 (bool as 0/1), independently
// of the code under test.
func asFloat64(flat any) []float64 {
	var out []float64
	add := func(v float64) { out = append(out, v) }
	switch f := flat.(type) {
	case []float32:
		for _, v := range f {
			add(float64(v))
		}
	case []float64:
		out = append(out, f...)
	case []bfloat16.BFloat16:
		for _, v := range f {
			add(float64(v.Float32()))
		}
	case []float16.Float16:
		for _, v := range f {
			add(float64(v.Float32()))
		}
	case []bool:
		for _, v := range f {
			if v {
				add(1)
			} else {
				add(0)
			}
		}
	case []int8:
		for _, v := range f {
			add(float64(v))
		}
	case []int16:
		for _, v := range f {
			add(float64(v))
		}
	case []int32:
		for _, v := range f {
			add(float64(v))
		}
	case []int64:
		for _, v := range f {
			add(float64(v))
		}
	case []uint8:
		for _, v := range f {
			add(float64(v))
		}
	case []uint16:
		for _, v := range f {
			add(float64(v))
		}
	case []uint32:
		for _, v := range f {
			add(float64(v))
		}
	case []uint64:
		for _, v := range f {
			add(float64(v))
		}
	default:
		panic(fmt.Sprintf("asFloat64: %T", flat))
	}
	return out
}

// tolerance of an output dtype, relative to the largest magnitude.
func tolerance(dt dtypes.DType) float64 {
	switch dt {
	case dtypes.Float32:
		return 2e-5
	case dtypes.Float64:
		return 1e-12
	case dtypes.BFloat16:
		return 1.6e-2
	case dtypes.Float16:
		return 2e-3
	}
	return 0
}

// check runs a graph on both backends and compares the outputs.
func check(t *testing.T, name string, in []shapes.Shape, positive bool, build buildFn) {
	t.Helper()
	ref, cpu := backendsForTest(t)
	r := rand.New(rand.NewPCG(uint64(len(name)), 7))
	data := make([]any, len(in))
	for i, s := range in {
		data[i] = randFlat(r, s, positive)
	}
	checkData(t, name, ref, cpu, in, data, build)
}

// checkData runs a graph on inputs data on ref (the go backend) and on cpu
// and compares the outputs.
func checkData(t *testing.T, name string, ref, cpu backends.Backend, in []shapes.Shape, data []any, build buildFn) {
	t.Helper()
	want, ws, err := run(ref, in, data, build)
	if err != nil {
		t.Fatalf("%s: go backend: %v", name, err)
	}
	got, gs, err := run(cpu, in, data, build)
	if err != nil {
		t.Fatalf("%s: cpu backend: %v", name, err)
	}
	if !gs.Equal(ws) {
		t.Fatalf("%s: shape %s, go backend gives %s", name, gs, ws)
	}
	compareFlat(t, name, ws.DType, asFloat64(got), asFloat64(want))
}

// checkWide is check with the go backend run on the inputs widened from
// bf16/f16 to f32 (exactly): for the f16 dtype it lacks, and for the bf16
// reductions it accumulates in bf16 where ours accumulates in f32. The
// tolerance is that of our output dtype.
func checkWide(t *testing.T, name string, in []shapes.Shape, positive bool, build buildFn) {
	t.Helper()
	ref, cpu := backendsForTest(t)
	r := rand.New(rand.NewPCG(uint64(len(name)), 8))
	data := make([]any, len(in))
	wideIn := make([]shapes.Shape, len(in))
	wideData := make([]any, len(in))
	for i, s := range in {
		data[i] = randFlat(r, s, positive)
		wideIn[i], wideData[i] = s, data[i]
		if is16(s.DType) {
			wideIn[i] = sh(dtypes.Float32, s.Dimensions...)
			f := asFloat64(data[i])
			w := make([]float32, len(f))
			for k, v := range f {
				w[k] = float32(v)
			}
			wideData[i] = w
		}
	}
	want, _, err := run(ref, wideIn, wideData, build)
	if err != nil {
		t.Fatalf("%s: go backend: %v", name, err)
	}
	got, gs, err := run(cpu, in, data, build)
	if err != nil {
		t.Fatalf("%s: cpu backend: %v", name, err)
	}
	compareFlat(t, name, gs.DType, asFloat64(got), asFloat64(want))
}

// compareBackends runs build on the reference backend and on cpu (last,
// so that the ops build made are cpu's) and compares the results as f32
// (compareFlat).
func compareBackends(t *testing.T, name string, ref, cpu backends.Backend, shs []shapes.Shape, data []any, build buildFn) {
	t.Helper()
	want, _, err := run(ref, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := run(cpu, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	compareFlat(t, name, dtypes.Float32, asFloat64(got), asFloat64(want))
}

// int8ActBackend is a cpu backend that quantises the activations of its
// quantised products to int8 (act=int8), for compareInt8Activations.
func int8ActBackend(t *testing.T) backends.Backend {
	t.Helper()
	q8, err := New("act=int8")
	if err != nil {
		t.Fatal(err)
	}
	return q8
}

// compareInt8Activations compares the act=int8 backend q8's result of
// build on data with the go backend ref's on data whose first input (the
// activations) is quantised and dequantised: by kernels.FakeQuantizeQ8,
// or by quantize where the product reads them in another order. It
// reports under name+", int8 activations" and runs q8 last, so that the
// ops build made are q8's.
func compareInt8Activations(t *testing.T, name string, ref, q8 backends.Backend, shs []shapes.Shape, data []any, build buildFn, quantize func([]float32)) {
	t.Helper()
	xq := append([]float32(nil), data[0].([]float32)...)
	if quantize == nil {
		quantize = kernels.FakeQuantizeQ8
	}
	quantize(xq)
	want, _, err := run(ref, shs, append([]any{xq}, data[1:]...), build)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := run(q8, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	compareFlat(t, name+", int8 activations", dtypes.Float32, asFloat64(got), asFloat64(want))
}

func compareFlat(t *testing.T, name string, dt dtypes.DType, got, want []float64) {
	t.Helper()
	scale := 1.0
	for _, v := range want {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			scale = math.Max(scale, math.Abs(v))
		}
	}
	tol := tolerance(dt) * scale
	for i := range want {
		g, w := got[i], want[i]
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		if math.Abs(g-w) > tol || math.IsNaN(g) != math.IsNaN(w) {
			t.Errorf("%s (%s): element %d of %d: got %v, go backend %v (tolerance %g)", name, dt, i, len(want), g, w, tol)
			return
		}
	}
}

func sh(dt dtypes.DType, dims ...int) shapes.Shape { return shapes.Make(dt, dims...) }

// The go backend has no Float16; f16 is checked in TestFloat16 instead.
var floatTypes = []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16}

func TestUnaryOps(t *testing.T) {
	type u func(b backends.Builder, x backends.Op) (backends.Op, error)
	ops := map[string]struct {
		f        u
		positive bool
	}{
		"Abs":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Abs(x) }, false},
		"Neg":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Neg(x) }, false},
		"Sign":     {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Sign(x) }, false},
		"Exp":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Exp(x) }, false},
		"Expm1":    {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Expm1(x) }, false},
		"Log":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Log(x) }, true},
		"Log1p":    {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Log1p(x) }, true},
		"Sqrt":     {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Sqrt(x) }, true},
		"Rsqrt":    {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Rsqrt(x) }, true},
		"Tanh":     {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Tanh(x) }, false},
		"Logistic": {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Logistic(x) }, false},
		"Sin":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Sin(x) }, false},
		"Cos":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Cos(x) }, false},
		"Erf":      {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Erf(x) }, false},
		"Floor":    {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Floor(x) }, false},
		"Ceil":     {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Ceil(x) }, false},
		"Round":    {func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.Round(x) }, false},
	}
	for name, op := range ops {
		for _, dt := range floatTypes {
			for _, dims := range [][]int{{}, {7}, {3, 33}, {2, 5, 129}} {
				check(t, fmt.Sprintf("%s%v", name, dims), []shapes.Shape{sh(dt, dims...)}, op.positive,
					func(b backends.Builder, p []backends.Op) (backends.Op, error) { return op.f(b, p[0]) })
			}
		}
	}
	for _, dt := range []dtypes.DType{dtypes.Int32, dtypes.Int64} {
		check(t, "AbsInt", []shapes.Shape{sh(dt, 17)}, false, func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Abs(p[0]) })
		check(t, "NegInt", []shapes.Shape{sh(dt, 17)}, false, func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Neg(p[0]) })
	}
	check(t, "LogicalNot", []shapes.Shape{sh(dtypes.Bool, 9)}, false, func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.LogicalNot(p[0]) })
}

type binFn func(b backends.Builder, x, y backends.Op) (backends.Op, error)

var arith = map[string]binFn{
	"Add": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Add(x, y) },
	"Sub": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Sub(x, y) },
	"Mul": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Mul(x, y) },
	"Div": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Div(x, y) },
	"Max": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Max(x, y) },
	"Min": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Min(x, y) },
	"Pow": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Pow(x, y) },
	"Rem": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Rem(x, y) },
}

var comparisons = map[string]binFn{
	"Equal":          func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Equal(x, y) },
	"NotEqual":       func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.NotEqual(x, y) },
	"LessThan":       func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LessThan(x, y) },
	"LessOrEqual":    func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LessOrEqual(x, y) },
	"GreaterThan":    func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.GreaterThan(x, y) },
	"GreaterOrEqual": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.GreaterOrEqual(x, y) },
}

func TestBinaryOps(t *testing.T) {
	shapesOf := func(dt dtypes.DType) [][2]shapes.Shape {
		return [][2]shapes.Shape{
			{sh(dt, 37), sh(dt, 37)},
			{sh(dt, 3, 50001), sh(dt, 3, 50001)}, // large enough to run in parallel
			{sh(dt, 4, 9), sh(dt)},               // scalar rhs
			{sh(dt), sh(dt, 40000)},              // scalar lhs, one row shared by the threads
			{sh(dt), sh(dt, 4, 9)},               // scalar lhs
			{sh(dt, 4, 1, 5), sh(dt, 4, 3, 5)},   // size-1 axis broadcast
			{sh(dt, 130, 33), sh(dt, 130, 1)},    // per-row value (RMSNorm, softmax)
			{sh(dt, 1, 5), sh(dt, 3, 1)},         // both sides broadcast
			{sh(dt, 2, 1, 3, 1), sh(dt, 1, 4, 1, 5)},
		}
	}
	for name, f := range arith {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Int32, dtypes.Int64} {
			if dt.IsInt() && (name == "Pow" || name == "Div" || name == "Rem") {
				continue // the go backend's integer division by zero panics; checked on positive inputs below
			}
			positive := name == "Pow" || name == "Rem"
			for _, ss := range shapesOf(dt) {
				check(t, fmt.Sprintf("%s%v%v", name, ss[0].Dimensions, ss[1].Dimensions), ss[:], positive,
					func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], p[1]) })
			}
		}
	}
	for _, name := range []string{"Div", "Rem", "Pow"} {
		f := arith[name]
		for _, dt := range []dtypes.DType{dtypes.Int32, dtypes.Int64} {
			check(t, name+"Int", []shapes.Shape{sh(dt, 23), sh(dt, 23)}, true,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], p[1]) })
		}
	}
	for name, f := range comparisons {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int32, dtypes.Int64} {
			for _, ss := range shapesOf(dt) {
				check(t, name, ss[:], false, func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], p[1]) })
			}
		}
	}
	logical := map[string]binFn{
		"And": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LogicalAnd(x, y) },
		"Or":  func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LogicalOr(x, y) },
		"Xor": func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LogicalXor(x, y) },
	}
	for name, f := range logical {
		check(t, name, []shapes.Shape{sh(dtypes.Bool, 5, 3), sh(dtypes.Bool, 5, 3)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], p[1]) })
	}
}

func TestWhereClampConvert(t *testing.T) {
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int32, dtypes.Int64, dtypes.Float64} {
		check(t, "Where", []shapes.Shape{sh(dtypes.Bool, 3, 7), sh(dt, 3, 7), sh(dt, 3, 7)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Where(p[0], p[1], p[2]) })
		// Each form of whereLoop: a scalar on either side, on both, a
		// scalar condition, and more elements than one parallel range.
		for _, c := range []struct {
			name       string
			cond, x, y shapes.Shape
		}{
			{"WhereScalars", sh(dtypes.Bool, 3, 7), sh(dt), sh(dt, 3, 7)},
			{"WhereScalarFalse", sh(dtypes.Bool, 3, 7), sh(dt, 3, 7), sh(dt)},
			{"WhereBothScalar", sh(dtypes.Bool, 3, 7), sh(dt), sh(dt)},
			{"WhereScalarCond", sh(dtypes.Bool), sh(dt, 3, 7), sh(dt, 3, 7)},
			{"WhereScalarCondScalar", sh(dtypes.Bool), sh(dt), sh(dt, 3, 7)},
			{"WhereLarge", sh(dtypes.Bool, 5, 7001), sh(dt, 5, 7001), sh(dt, 5, 7001)},
			{"WhereLargeScalarFalse", sh(dtypes.Bool, 5, 7001), sh(dt, 5, 7001), sh(dt)},
		} {
			check(t, c.name, []shapes.Shape{c.cond, c.x, c.y}, false,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Where(p[0], p[1], p[2]) })
		}
		check(t, "Clamp", []shapes.Shape{sh(dt), sh(dt, 11), sh(dt)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Clamp(p[0], p[1], p[2]) })
	}
	// Every pair the go backend converts is compared; our backend must
	// convert every pair.
	ref, cpu := backendsForTest(t)
	all := []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Float16, dtypes.Int32, dtypes.Int64, dtypes.Uint8, dtypes.Int8, dtypes.Bool}
	compared := 0
	for _, from := range all {
		for _, to := range all {
			in := []shapes.Shape{sh(from, 2, 13)}
			data := []any{randFlat(rand.New(rand.NewPCG(5, 6)), in[0], false)}
			build := func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.ConvertDType(p[0], to) }
			got, _, err := run(cpu, in, data, build)
			if err != nil {
				t.Fatalf("Convert %s->%s: %v", from, to, err)
			}
			if want, _, err := run(ref, in, data, build); err == nil {
				compareFlat(t, fmt.Sprintf("Convert %s->%s", from, to), to, asFloat64(got), asFloat64(want))
				compared++
			}
		}
	}
	if compared < 40 {
		t.Errorf("only %d dtype pairs compared with the go backend", compared)
	}
}

func TestShapeOps(t *testing.T) {
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int64, dtypes.Uint8, dtypes.Bool} {
		check(t, "Reshape", []shapes.Shape{sh(dt, 6, 5)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Reshape(p[0], 3, 10) })
		for _, perm := range [][]int{{1, 0, 2}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}} {
			check(t, fmt.Sprintf("Transpose%v", perm), []shapes.Shape{sh(dt, 3, 5, 7)}, false,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Transpose(p[0], perm...) })
		}
		check(t, "BroadcastInDim", []shapes.Shape{sh(dt, 5, 1)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.BroadcastInDim(p[0], sh(dt, 2, 5, 3), []int{1, 2})
			})
		check(t, "BroadcastScalar", []shapes.Shape{sh(dt)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.BroadcastInDim(p[0], sh(dt, 4, 3), nil)
			})
		check(t, "Slice", []shapes.Shape{sh(dt, 9, 11)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.Slice(p[0], []int{1, 2}, []int{8, 11}, []int{2, 3})
			})
		check(t, "Concatenate", []shapes.Shape{sh(dt, 3, 2, 4), sh(dt, 3, 5, 4), sh(dt, 3, 1, 4)}, false,
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Concatenate(1, p...) })
	}
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64, dtypes.BFloat16} {
		for axis := range 3 {
			check(t, fmt.Sprintf("Iota/%d", axis), nil, false, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.Iota(sh(dt, 3, 4, 5), axis)
			})
		}
	}
}

func TestReductions(t *testing.T) {
	red := map[string]func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error){
		"Sum": func(b backends.Builder, x backends.Op, a ...int) (backends.Op, error) { return b.ReduceSum(x, a...) },
		"Max": func(b backends.Builder, x backends.Op, a ...int) (backends.Op, error) { return b.ReduceMax(x, a...) },
		"Min": func(b backends.Builder, x backends.Op, a ...int) (backends.Op, error) { return b.ReduceMin(x, a...) },
		"Product": func(b backends.Builder, x backends.Op, a ...int) (backends.Op, error) {
			return b.ReduceProduct(x, a...)
		},
	}
	for name, f := range red {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Int32, dtypes.Int64} {
			for _, axes := range [][]int{{2}, {0}, {1}, {0, 2}, {0, 1, 2}} {
				dims := []int{3, 5, 129}
				if name == "Product" {
					dims = []int{3, 5, 4}
				}
				chk := check
				if dt == dtypes.BFloat16 {
					chk = checkWide
				}
				chk(t, fmt.Sprintf("Reduce%s%v", name, axes), []shapes.Shape{sh(dt, dims...)}, name == "Product",
					func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], axes...) })
			}
		}
	}
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int32} {
		for _, isMin := range []bool{false, true} {
			for axis := range 3 {
				check(t, fmt.Sprintf("ArgMinMax%d%v", axis, isMin), []shapes.Shape{sh(dt, 4, 7, 33)}, false,
					func(b backends.Builder, p []backends.Op) (backends.Op, error) {
						return b.ArgMinMax(p[0], axis, dtypes.Int32, isMin)
					})
			}
		}
	}
}

func TestDotGeneral(t *testing.T) {
	type dc struct {
		name   string
		l, r   []int
		lc, lb []int
		rc, rb []int
	}
	cases := []dc{
		{"matmulNT", []int{5, 33}, []int{17, 33}, []int{1}, nil, []int{1}, nil},
		{"matvecNT", []int{1, 65}, []int{31, 65}, []int{1}, nil, []int{1}, nil},
		{"matmulNN", []int{6, 19}, []int{19, 23}, []int{1}, nil, []int{0}, nil},
		{"lhsTransposed", []int{19, 6}, []int{23, 19}, []int{0}, nil, []int{1}, nil},
		{"attentionScores", []int{2, 4, 3, 16}, []int{2, 4, 9, 16}, []int{3}, []int{0, 1}, []int{3}, []int{0, 1}},
		{"attentionValues", []int{2, 4, 3, 9}, []int{2, 4, 9, 16}, []int{3}, []int{0, 1}, []int{2}, []int{0, 1}},
		{"batchLast", []int{7, 5, 3}, []int{5, 11, 3}, []int{1}, []int{2}, []int{0}, []int{2}},
		{"twoContracting", []int{4, 3, 5}, []int{3, 5, 6}, []int{1, 2}, nil, []int{0, 1}, nil},
		{"manyHeads", []int{40, 1, 8}, []int{40, 13, 8}, []int{2}, []int{0}, []int{2}, []int{0}},
		{"big", []int{67, 130}, []int{129, 130}, []int{1}, nil, []int{1}, nil},
		// A matrix times a vector a head, the vector a K×1 column (NN in
		// DotGeneral's axes, read in place as NT: its size-1 axis is
		// ignored): Mamba-2's state [B, H, P, N] times C [B, H, N, 1] at a
		// decode step, run as a GEMV.
		{"matvecNNHeads", []int{2, 3, 37, 20}, []int{2, 3, 20, 1}, []int{3}, []int{0, 1}, []int{2}, []int{0, 1}},
		{"matvecNN", []int{65, 33}, []int{33, 1}, []int{1}, nil, []int{0}, nil},
	}
	for _, c := range cases {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16} {
			check(t, c.name, []shapes.Shape{sh(dt, c.l...), sh(dt, c.r...)}, false,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) {
					return b.DotGeneral(p[0], c.lc, c.lb, p[1], c.rc, c.rb)
				})
		}
		// f32 activations times 16-bit weights converted in the graph: the
		// product reads the weights directly.
		for _, wt := range []dtypes.DType{dtypes.BFloat16, dtypes.Float16} {
			checkWide(t, c.name+" convert "+wt.String(), []shapes.Shape{sh(dtypes.Float32, c.l...), sh(wt, c.r...)}, false,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) {
					w, err := b.ConvertDType(p[1], dtypes.Float32)
					if err != nil {
						return nil, err
					}
					return b.DotGeneral(p[0], c.lc, c.lb, w, c.rc, c.rb)
				})
		}
	}
}

func TestGatherAndDynamicSlices(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int64} {
		// Embedding lookup: [vocab, dim] rows picked by [b, s, 1] indices,
		// including out-of-range ones (clamped).
		idx := []int32{0, 3, 9, 2, -4, 40}
		table := randFlat(rand.New(rand.NewPCG(1, 2)), sh(dt, 10, 7), false)
		build := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.Gather(p[0], p[1], 2, []int{2}, []int{0}, []int{0}, []int{1, 7}, false)
		}
		in := []shapes.Shape{sh(dt, 10, 7), sh(dtypes.Int32, 2, 3, 1)}
		want, _, err := run(ref, in, []any{table, idx}, build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := run(cpu, in, []any{table, idx}, build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, "Gather", dt, asFloat64(got), asFloat64(want))

		// Two-axis start indices picking [2, 3] windows.
		idx2 := []int64{0, 1, 3, 4, 1, 0}
		op := randFlat(rand.New(rand.NewPCG(3, 4)), sh(dt, 5, 6, 2), false)
		build2 := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.Gather(p[0], p[1], 1, []int{1, 2, 3}, nil, []int{0, 1}, []int{2, 3, 2}, false)
		}
		in2 := []shapes.Shape{sh(dt, 5, 6, 2), sh(dtypes.Int64, 3, 2)}
		want, _, err = run(ref, in2, []any{op, idx2}, build2)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err = run(cpu, in2, []any{op, idx2}, build2)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, "Gather2", dt, asFloat64(got), asFloat64(want))

		for _, start := range [][]int32{{1, 2}, {-3, 9}, {4, 0}} {
			dsBuild := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				s0, _ := b.Constant([]int32{start[0]})
				s1, _ := b.Constant([]int32{start[1]})
				return b.DynamicSlice(p[0], []backends.Op{s0, s1}, []int{2, 3})
			}
			// The go backend has no DynamicSlice: compare with a Slice at
			// the clamped start.
			in := []shapes.Shape{sh(dt, 5, 6)}
			data := []any{randFlat(rand.New(rand.NewPCG(7, 7)), in[0], false)}
			got, _, err := run(cpu, in, data, dsBuild)
			if err != nil {
				t.Fatal(err)
			}
			c0, c1 := max(0, min(int(start[0]), 3)), max(0, min(int(start[1]), 3))
			want, _, err := run(ref, in, data, func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.Slice(p[0], []int{c0, c1}, []int{c0 + 2, c1 + 3}, []int{1, 1})
			})
			if err != nil {
				t.Fatal(err)
			}
			compareFlat(t, fmt.Sprintf("DynamicSlice%v", start), dt, asFloat64(got), asFloat64(want))
		}
	}
}

func TestUnimplementedOpNamesIt(t *testing.T) {
	_, cpu := backendsForTest(t)
	b := cpu.Builder("x")
	p, err := b.Parameter("p", sh(dtypes.Float32, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.FFT(p, backends.FFTForward, []int{3})
	if err == nil {
		t.Fatal("FFT: no error")
	}
	if !strings.Contains(err.Error(), "FFT") || !errors.Is(err, notimplemented.NotImplementedError) {
		t.Errorf("FFT error %q does not name the op or wrap NotImplementedError", err)
	}
	if cpu.Capabilities().Operations[backends.OpTypeFFT] {
		t.Error("capabilities list FFT")
	}
	if !cpu.Capabilities().Operations[backends.OpTypeDotGeneral] {
		t.Error("capabilities miss DotGeneral")
	}
}

// TestFloat16 checks the f16 paths (the go backend has no f16): each op on
// f16 inputs equals the same op on the inputs widened to f32, rounded to
// f16.
func TestFloat16(t *testing.T) {
	_, cpu := backendsForTest(t)
	r := rand.New(rand.NewPCG(9, 9))
	x16 := randFlat(r, sh(dtypes.Float16, 3, 37), true).([]float16.Float16)
	y16 := randFlat(r, sh(dtypes.Float16, 3, 37), true).([]float16.Float16)
	x32, y32 := make([]float32, len(x16)), make([]float32, len(y16))
	for i := range x16 {
		x32[i], y32[i] = x16[i].Float32(), y16[i].Float32()
	}
	ops := map[string]buildFn{
		"Exp":  func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Exp(p[0]) },
		"Sqrt": func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Sqrt(p[0]) },
		"Add":  func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Add(p[0], p[1]) },
		"Div":  func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Div(p[0], p[1]) },
		"Sum":  func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.ReduceSum(p[0], 1) },
		"Dot": func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.DotGeneral(p[0], []int{1}, nil, p[1], []int{1}, nil)
		},
	}
	for name, build := range ops {
		got, _, err := run(cpu, []shapes.Shape{sh(dtypes.Float16, 3, 37), sh(dtypes.Float16, 3, 37)}, []any{x16, y16}, build)
		if err != nil {
			t.Fatalf("%s f16: %v", name, err)
		}
		want, _, err := run(cpu, []shapes.Shape{sh(dtypes.Float32, 3, 37), sh(dtypes.Float32, 3, 37)}, []any{x32, y32}, build)
		if err != nil {
			t.Fatalf("%s f32: %v", name, err)
		}
		w := want.([]float32)
		rounded := make([]float64, len(w))
		for i, v := range w {
			rounded[i] = float64(float16.Fromfloat32(v).Float32())
		}
		compareFlat(t, name+" f16", dtypes.Float16, asFloat64(got), rounded)
	}
}

// TestBF16Rounds checks that f32 values become bf16 rounded to nearest
// even, as XLA's convert and torch round (not truncated), both through
// ConvertDType and as the result of an op computed in f32 for bf16; NaN
// stays NaN. Sizes cross the vector kernels' 16 and the pool's grain.
func TestBF16Rounds(t *testing.T) {
	_, cpu := backendsForTest(t)
	bits := func(u uint32) float32 { return math.Float32frombits(u) }
	cases := []struct {
		in   float32
		want uint16
	}{
		{bits(0x3f808000), 0x3f80},      // a tie, even below: down
		{bits(0x3f818000), 0x3f82},      // a tie, odd below: up
		{bits(0x3f808001), 0x3f81},      // above the tie: up (truncation gives 0x3f80)
		{bits(0xbf80ffff), 0xbf81},      // negative, just under the next: away from zero
		{bits(0x7f7fffff), 0x7f80},      // the largest f32 rounds to +Inf
		{float32(math.Inf(-1)), 0xff80}, // -Inf
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, n := range []int{len(cases), 37, 1 << 15} {
		in := make([]float32, n)
		want := make([]uint16, n)
		for i := range in {
			c := cases[i%len(cases)]
			in[i], want[i] = c.in, c.want
		}
		in[n-1] = float32(math.NaN())
		conv := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.ConvertDType(p[0], dtypes.BFloat16)
		}
		got, _, err := run(cpu, []shapes.Shape{sh(dtypes.Float32, n)}, []any{in}, conv)
		if err != nil {
			t.Fatal(err)
		}
		g := got.([]bfloat16.BFloat16)
		for i := range n - 1 {
			if uint16(g[i]) != want[i] {
				t.Fatalf("n=%d: ConvertDType(%#08x) = %#04x, want %#04x", n, math.Float32bits(in[i]), uint16(g[i]), want[i])
			}
		}
		if v := g[n-1].Float32(); v == v {
			t.Errorf("n=%d: ConvertDType(NaN) = %v", n, v)
		}
	}
	// 1 + 1.5·2⁻⁸ (a bf16 sum of 1 and 1.5·2⁻⁸, both exact in bf16) is
	// above the tie between 1 and 1 + 2⁻⁷: it rounds up, truncation keeps 1.
	one, small := bfloat16.FromFloat32(1), bfloat16.FromFloat32(1.5/256)
	add := func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Add(p[0], p[1]) }
	got, _, err := run(cpu, []shapes.Shape{sh(dtypes.BFloat16, 1), sh(dtypes.BFloat16, 1)},
		[]any{[]bfloat16.BFloat16{one}, []bfloat16.BFloat16{small}}, add)
	if err != nil {
		t.Fatal(err)
	}
	if v := got.([]bfloat16.BFloat16)[0].Float32(); v != 1+1.0/128 {
		t.Errorf("bf16 1 + 1.5/256 = %v, want %v", v, 1+1.0/128)
	}
}

// TestReverse checks Reverse (the go backend has none) against a loop.
func TestReverse(t *testing.T) {
	_, cpu := backendsForTest(t)
	x := make([]int32, 4*5*3)
	for i := range x {
		x[i] = int32(i)
	}
	got, _, err := run(cpu, []shapes.Shape{sh(dtypes.Int32, 4, 5, 3)}, []any{x},
		func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Reverse(p[0], 0, 2) })
	if err != nil {
		t.Fatal(err)
	}
	g := got.([]int32)
	for i := range 4 {
		for j := range 5 {
			for k := range 3 {
				if w := x[(3-i)*15+j*3+(2-k)]; g[i*15+j*3+k] != w {
					t.Fatalf("Reverse[%d,%d,%d] = %d, want %d", i, j, k, g[i*15+j*3+k], w)
				}
			}
		}
	}
}

// TestPad checks Pad (the go backend has none) against a loop, with
// interior, negative and positive padding.
func TestPad(t *testing.T) {
	_, cpu := backendsForTest(t)
	cfgs := [][]backends.PadAxis{
		{{Start: 2, End: -1, Interior: 1}, {Start: -2, End: 3}},
		{{Start: 0, End: 0}, {Start: 1, End: 1, Interior: 2}},
		{{Start: -3, End: -1}, {Start: 0, End: 0}},
	}
	x := make([]float32, 4*5)
	for i := range x {
		x[i] = float32(i + 1)
	}
	for _, cfg := range cfgs {
		got, gs, err := run(cpu, []shapes.Shape{sh(dtypes.Float32, 4, 5), sh(dtypes.Float32)}, []any{x, []float32{-1}},
			func(b backends.Builder, p []backends.Op) (backends.Op, error) { return b.Pad(p[0], p[1], cfg...) })
		if err != nil {
			t.Fatal(err)
		}
		od := gs.Dimensions
		want := make([]float32, gs.Size())
		for i := range want {
			want[i] = -1
		}
		for i := range 4 {
			for j := range 5 {
				oi := cfg[0].Start + i*(cfg[0].Interior+1)
				oj := cfg[1].Start + j*(cfg[1].Interior+1)
				if oi >= 0 && oi < od[0] && oj >= 0 && oj < od[1] {
					want[oi*od[1]+oj] = x[i*5+j]
				}
			}
		}
		compareFlat(t, fmt.Sprintf("Pad%v", cfg), dtypes.Float32, asFloat64(got), asFloat64(want))
	}
}

// TestDynamicUpdateSliceInPlace checks DynamicUpdateSlice (the go backend
// has none) against a loop, and that a donated operand is updated in
// place: the output is the donated memory, and the input buffer is gone.
func TestDynamicUpdateSliceInPlace(t *testing.T) {
	_, cpu := backendsForTest(t)
	const rows, cols = 6, 40
	for _, start := range [][2]int32{{1, 7}, {-2, 39}, {5, 0}} {
		for _, donate := range []bool{false, true} {
			b := cpu.Builder("dus")
			op, _ := b.Parameter("cache", sh(dtypes.Float32, rows, cols), nil)
			up, _ := b.Parameter("update", sh(dtypes.Float32, 2, 3), nil)
			s0, _ := b.Constant([]int32{start[0]})
			s1, _ := b.Constant([]int32{start[1]})
			out, err := b.DynamicUpdateSlice(op, up, []backends.Op{s0, s1})
			if err != nil {
				t.Fatal(err)
			}
			exe, err := b.Compile([]backends.Op{out}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cache, cacheFlat, _ := cpu.NewSharedBuffer(0, sh(dtypes.Float32, rows, cols))
			cf := cacheFlat.([]float32)
			for i := range cf {
				cf[i] = float32(i)
			}
			want := append([]float32(nil), cf...)
			update, _ := cpu.BufferFromFlatData(0, []float32{-1, -2, -3, -4, -5, -6}, sh(dtypes.Float32, 2, 3))
			r0, c0 := max(0, min(int(start[0]), rows-2)), max(0, min(int(start[1]), cols-3))
			for i := range 2 {
				for j := range 3 {
					want[(r0+i)*cols+c0+j] = float32(-(i*3 + j + 1))
				}
			}
			outs, err := exe.Execute([]backends.Buffer{cache, update}, []bool{donate, false}, 0)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := cpu.BufferData(outs[0])
			compareFlat(t, fmt.Sprintf("DUS%v donate=%v", start, donate), dtypes.Float32, asFloat64(got), asFloat64(want))
			inPlace := &got.([]float32)[0] == &cf[0]
			if inPlace != donate {
				t.Errorf("DUS%v donate=%v: output in the input's memory = %v", start, donate, inPlace)
			}
			if _, err := cpu.BufferData(cache); (err != nil) != donate {
				t.Errorf("DUS donate=%v: input buffer still valid = %v", donate, err == nil)
			}
		}
	}
}

func TestConvGeneral(t *testing.T) {
	nchw := backends.ConvolveAxesConfig{
		InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3},
	}
	nhwc := backends.ConvolveAxesConfig{
		InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
		KernelOutputChannels: 3, KernelInputChannels: 2, KernelSpatial: []int{0, 1},
		OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2},
	}
	ncw := backends.ConvolveAxesConfig{
		InputBatch: 0, InputChannels: 1, InputSpatial: []int{2},
		KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2},
		OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2},
	}
	type cc struct {
		name     string
		x, k     []int
		axes     backends.ConvolveAxesConfig
		strides  []int
		paddings [][2]int
	}
	cases := []cc{
		{"3x3 same", []int{2, 3, 9, 11}, []int{5, 3, 3, 3}, nchw, []int{1, 1}, [][2]int{{1, 1}, {1, 1}}},
		{"3x3 stride2 asym", []int{1, 4, 10, 9}, []int{6, 4, 3, 3}, nchw, []int{2, 2}, [][2]int{{0, 1}, {1, 0}}},
		{"1x1", []int{2, 7, 5, 6}, []int{3, 7, 1, 1}, nchw, []int{1, 1}, nil},
		{"valid 2x4", []int{1, 2, 6, 8}, []int{3, 2, 2, 4}, nchw, []int{1, 3}, nil},
		{"big", []int{1, 8, 40, 40}, []int{16, 8, 3, 3}, nchw, []int{1, 1}, [][2]int{{1, 1}, {1, 1}}},
		{"nhwc", []int{2, 7, 6, 3}, []int{3, 3, 3, 4}, nhwc, []int{1, 1}, [][2]int{{1, 1}, {1, 1}}},
		{"1d", []int{2, 3, 17}, []int{4, 3, 5}, ncw, []int{2}, [][2]int{{2, 2}}},
	}
	for _, c := range cases {
		for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			chk := check
			if dt == dtypes.BFloat16 {
				chk = checkWide // the go backend accumulates in bf16
			}
			chk(t, "Conv "+c.name, []shapes.Shape{sh(dt, c.x...), sh(dt, c.k...)}, false,
				func(b backends.Builder, p []backends.Op) (backends.Op, error) {
					return b.ConvGeneral(p[0], p[1], c.axes, c.strides, c.paddings, nil, nil, 1, 1)
				})
		}
	}
}

func TestScatterSum(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Int32, dtypes.Float64} {
		// Rows of a [6, 5] operand, indices [4, 1] with a repeat and one out
		// of range.
		in := []shapes.Shape{sh(dt, 6, 5), sh(dtypes.Int32, 4, 1), sh(dt, 4, 5)}
		r := rand.New(rand.NewPCG(11, 12))
		data := []any{randFlat(r, in[0], false), []int32{2, 0, 2, 5}, randFlat(r, in[2], false)}
		build := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.ScatterSum(p[0], p[1], p[2], 1, []int{1}, []int{0}, []int{0}, false, false)
		}
		want, _, err := run(ref, in, data, build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := run(cpu, in, data, build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, "ScatterSum rows", dt, asFloat64(got), asFloat64(want))

		// The KV-cache form: a [2, 3, 8, 4] cache, 2 new slots on axis 2.
		in = []shapes.Shape{sh(dt, 2, 3, 8, 4), sh(dtypes.Int32, 2, 1), sh(dt, 2, 3, 2, 4)}
		data = []any{randFlat(r, in[0], false), []int32{5, 6}, randFlat(r, in[2], false)}
		build = func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			return b.ScatterSum(p[0], p[1], p[2], 1, []int{0, 1, 3}, []int{2}, []int{2}, true, true)
		}
		want, _, err = run(ref, in, data, build)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err = run(cpu, in, data, build)
		if err != nil {
			t.Fatal(err)
		}
		compareFlat(t, "ScatterSum cache", dt, asFloat64(got), asFloat64(want))
	}
}

// TestFusion checks fused elementwise trees against the go backend (which
// runs them op by op), over sizes that span several chunks and threads,
// with an intermediate read twice and one that is also an output, and
// that the trees were fused.
func TestFusion(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, dims := range [][]int{{7}, {3, 1025}, {2, 40000}} {
		s := sh(dtypes.Float32, dims...)
		in := []shapes.Shape{s, s, s, sh(dtypes.Float32)}
		r := rand.New(rand.NewPCG(21, uint64(len(dims))))
		data := make([]any, len(in))
		for i, x := range in {
			data[i] = randFlat(r, x, false)
		}
		build := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
			must := func(op backends.Op, err error) backends.Op {
				if err != nil {
					panic(err)
				}
				return op
			}
			x, y, z, c := p[0], p[1], p[2], p[3]
			silu := must(b.Mul(must(b.Logistic(x)), x))      // x read twice
			gated := must(b.Mul(silu, y))                    // SiLU(x)·y
			shifted := must(b.Add(must(b.Mul(gated, c)), c)) // scalar operands
			e := must(b.Exp(z))                              // e is read twice
			out1 := must(b.Sub(shifted, must(b.Div(e, must(b.Add(e, must(b.Mul(c, c))))))))
			out2 := must(b.Tanh(must(b.Neg(out1)))) // out1 is also an output
			return []backends.Op{out1, out2}, nil
		}
		outs := func(be backends.Backend) ([][]float64, *Executable) {
			b := be.Builder("fuse")
			params := make([]backends.Op, len(in))
			for i, x := range in {
				params[i], _ = b.Parameter(fmt.Sprintf("p%d", i), x, nil)
			}
			ops, _ := build(b, params)
			exe, err := b.Compile(ops, nil)
			if err != nil {
				t.Fatal(err)
			}
			bufs := make([]backends.Buffer, len(in))
			for i, x := range in {
				bufs[i], _ = be.BufferFromFlatData(0, data[i], x)
			}
			res, err := exe.Execute(bufs, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]float64
			for _, o := range res {
				f := make([]float32, s.Size())
				if err := be.BufferToFlatData(o, f); err != nil {
					t.Fatal(err)
				}
				got = append(got, asFloat64(f))
			}
			own, _ := exe.(*Executable)
			return got, own
		}
		want, _ := outs(ref)
		got, exe := outs(cpu)
		for k := range want {
			compareFlat(t, fmt.Sprintf("fused output %d %v", k, dims), dtypes.Float32, got[k], want[k])
		}
		fused := 0
		for _, n := range exe.nodes {
			if n.op == opTypeFused {
				fused++
			}
		}
		if fused < 2 {
			t.Errorf("%v: %d fused nodes, want at least 2", dims, fused)
		}
	}
}

// TestConcurrentExecute runs one executable from several goroutines at
// once (as GoMLX may); each result must equal the same run alone.
func TestConcurrentExecute(t *testing.T) {
	_, cpu := backendsForTest(t)
	b := cpu.Builder("concurrent")
	x, _ := b.Parameter("x", sh(dtypes.Float32, 9, 64), nil)
	w, _ := b.Parameter("w", sh(dtypes.Float32, 33, 64), nil)
	y, _ := b.DotGeneral(x, []int{1}, nil, w, []int{1}, nil)
	y2, _ := b.Mul(y, y)
	y3, _ := b.Logistic(y2)
	s, _ := b.ReduceSum(y3, 1)
	exe, err := b.Compile([]backends.Op{s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	wData := randFlat(r, sh(dtypes.Float32, 33, 64), false)
	runOne := func(seed uint64) ([]float32, error) {
		xData := randFlat(rand.New(rand.NewPCG(seed, 1)), sh(dtypes.Float32, 9, 64), false)
		xb, _ := cpu.BufferFromFlatData(0, xData, sh(dtypes.Float32, 9, 64))
		wb, _ := cpu.BufferFromFlatData(0, wData, sh(dtypes.Float32, 33, 64))
		outs, err := exe.Execute([]backends.Buffer{xb, wb}, []bool{true, false}, 0)
		if err != nil {
			return nil, err
		}
		out := make([]float32, 9)
		return out, cpu.BufferToFlatData(outs[0], out)
	}
	const n = 8
	want := make([][]float32, n)
	for i := range want {
		if want[i], err = runOne(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]float32, n)
	errs := make([]error, n)
	done := make(chan int)
	for i := range n {
		go func() {
			got[i], errs[i] = runOne(uint64(i))
			done <- i
		}()
	}
	for range n {
		<-done
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		compareFlat(t, fmt.Sprintf("concurrent run %d", i), dtypes.Float32, asFloat64(got[i]), asFloat64(want[i]))
	}
}

// TestExpf bounds expf's error against float64 math.Exp over the whole
// float32 range it handles, edges included.
func TestExpf(t *testing.T) {
	worst := 0.0
	check := func(x float32) {
		want := math.Exp(float64(x))
		if w32 := float32(want); math.IsInf(float64(w32), 0) || w32 < math.SmallestNonzeroFloat32*(1<<23) {
			return // beyond float32's normal range: the edge cases below
		}
		got := float64(expf(x))
		worst = max(worst, math.Abs(got-want)/want)
	}
	for x := float32(-110); x < 110; x += 0.00137 {
		check(x)
	}
	for _, x := range []float32{0, 1e-30, -1e-30, 88.7, 88.69, -87.3, -87.29} {
		check(x)
	}
	if got := expf(1000); !math.IsInf(float64(got), 1) {
		t.Errorf("expf(1000) = %g, want +Inf", got)
	}
	if got := expf(-1000); got != 0 {
		t.Errorf("expf(-1000) = %g, want 0", got)
	}
	if got := expf(float32(math.NaN())); got == got {
		t.Errorf("expf(NaN) = %g", got)
	}
	if worst > 2.4e-7 { // 2 ulp
		t.Errorf("expf: worst relative error %.3g, want <= 2.4e-7", worst)
	}
	t.Logf("expf: worst relative error %.3g", worst)
}

// TestDotGeneralInt8 builds nn.DequantizeInt8's form under a DotGeneral:
// the cpu backend multiplies the int8 weight directly (checked by the
// rewritten node's inputs) and agrees with the go backend, which computes
// the f32 weight as written.
func TestDotGeneralInt8(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		x       []int
		out, g  int
		group   int
		contrax int
	}{
		{[]int{5, 128}, 33, 2, 64, 1},
		{[]int{1, 96}, 7, 1, 96, 1}, // decode, one scale per channel
		{[]int{2, 3, 192}, 17, 3, 64, 2},
	} {
		in := []shapes.Shape{sh(dtypes.Float32, c.x...), sh(dtypes.Int8, c.out, c.g, c.group), sh(dtypes.Float32, c.out, c.g, 1)}
		r := rand.New(rand.NewPCG(31, uint64(c.out)))
		data := []any{randFlat(r, in[0], false), randFlat(r, in[1], false), randFlat(r, in[2], true)}
		var dot backends.Op
		build := func(b backends.Builder, p []backends.Op) (backends.Op, error) {
			conv, _ := b.ConvertDType(p[1], dtypes.Float32)
			sc, _ := b.BroadcastInDim(p[2], sh(dtypes.Float32, c.out, c.g, c.group), []int{0, 1, 2})
			m, _ := b.Mul(conv, sc)
			w, _ := b.Reshape(m, c.out, c.g*c.group)
			var err error
			dot, err = b.DotGeneral(p[0], []int{c.contrax}, nil, w, []int{1}, nil)
			return dot, err
		}
		compareBackends(t, fmt.Sprintf("int8 dot %v x [%d %d]", c.x, c.out, c.g*c.group), ref, cpu, in, data, build)
		if n := dot.(*node); len(n.inputs) != 3 || n.aux.(*dotAux).int8Group != c.group {
			t.Errorf("%v: the DotGeneral was not rewritten to read int8 (inputs %d)", c.x, len(n.inputs))
		}
	}
}

// TestBadInputsAreErrors: wrong inputs to Execute and to the data
// interface give errors that say what is wrong, never a panic.
func TestBadInputsAreErrors(t *testing.T) {
	_, cpuB := backendsForTest(t)
	b := cpuB.Builder("bad")
	x, _ := b.Parameter("x", sh(dtypes.Float32, 3), nil)
	y, _ := b.Neg(x)
	exe, err := b.Compile([]backends.Op{y}, nil)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := cpuB.BufferFromFlatData(0, []float32{1, 2, 3}, sh(dtypes.Float32, 3))
	wrong, _ := cpuB.BufferFromFlatData(0, []float32{1, 2}, sh(dtypes.Float32, 2))
	gone, _ := cpuB.BufferFromFlatData(0, []float32{1, 2, 3}, sh(dtypes.Float32, 3))
	if err := cpuB.BufferFinalize(gone); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		in   []backends.Buffer
		want string
	}{
		"count":     {[]backends.Buffer{good, good}, "takes 1 inputs, got 2"},
		"shape":     {[]backends.Buffer{wrong}, "has shape (Float32)[2], want (Float32)[3]"},
		"foreign":   {[]backends.Buffer{"not a buffer"}, "not a cpu backend buffer"},
		"finalized": {[]backends.Buffer{gone}, "finalized or donated"},
	} {
		_, err := exe.Execute(tc.in, nil, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	if _, err := cpuB.BufferFromFlatData(0, []float32{1, 2}, sh(dtypes.Float32, 3)); err == nil {
		t.Error("BufferFromFlatData with 2 values for 3 elements: no error")
	}
	if _, err := cpuB.BufferFromFlatData(0, []int32{1, 2, 3}, sh(dtypes.Float32, 3)); err == nil {
		t.Error("BufferFromFlatData with int32 data for f32: no error")
	}
	if err := cpuB.BufferToFlatData(good, make([]float32, 2)); err == nil {
		t.Error("BufferToFlatData into a short slice: no error")
	}
	if _, err := b.Neg(x); err == nil {
		t.Error("op on a compiled builder: no error")
	}
	other := cpuB.Builder("other")
	if _, err := other.Neg(x); err == nil || !strings.Contains(err.Error(), "another builder") {
		t.Errorf("op with another builder's operand: %v", err)
	}
}

// TestRepeatedCallsReuseMemory: an executable keeps the memory its last
// call freed, so a repeated call (a decode step) allocates almost nothing
// for its intermediates (here two 4 MiB transposes) and leaves no garbage.
func TestRepeatedCallsReuseMemory(t *testing.T) {
	_, cpuB := backendsForTest(t)
	b := cpuB.Builder("reuse")
	x, _ := b.Parameter("x", sh(dtypes.Float32, 1024, 1024), nil)
	t1, _ := b.Transpose(x, 1, 0)
	t2, _ := b.Transpose(t1, 1, 0)
	s, _ := b.ReduceSum(t2, 0, 1)
	exe, err := b.Compile([]backends.Op{s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := cpuB.BufferFromFlatData(0, make([]float32, 1<<20), sh(dtypes.Float32, 1024, 1024))
	call := func() {
		if _, err := exe.Execute([]backends.Buffer{in}, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	call()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range 4 {
		call()
	}
	runtime.ReadMemStats(&m1)
	if perCall := (m1.TotalAlloc - m0.TotalAlloc) / 4; perCall > 1<<20 {
		t.Errorf("a repeated call allocated %d bytes; its 8 MiB of intermediates should come from the last call's memory", perCall)
	}
}

// TestSoftmax runs GoMLX's own graph.Softmax (so the form is the one the
// graph package emits) on both backends, with masked (-Inf) entries, and
// checks that the cpu backend rewrote it into one softmax node.
func TestSoftmax(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	for _, dims := range [][]int{{7}, {3, 33}, {2, 4, 5, 129}} {
		s := sh(dtypes.Float32, dims...)
		x := randFlat(rand.New(rand.NewPCG(41, uint64(len(dims)))), s, false).([]float32)
		for i := 0; i < len(x); i += 5 {
			x[i] = float32(math.Inf(-1)) // masked, never a whole row
		}
		var outs [2][]float64
		before := softmaxRewrites.Load()
		for k, be := range []backends.Backend{ref, cpuB} {
			out, err := graph.ExecOnce(be, func(v *graph.Node) *graph.Node { return graph.Softmax(v, -1) },
				tensors.FromFlatDataAndDimensions(x, dims...))
			if err != nil {
				t.Fatal(err)
			}
			outs[k] = asFloat64(tensors.MustCopyFlatData[float32](out))
		}
		compareFlat(t, fmt.Sprintf("softmax %v", dims), dtypes.Float32, outs[1], outs[0])
		if softmaxRewrites.Load() == before {
			t.Errorf("softmax %v: the form was not rewritten", dims)
		}
	}
}

// TestSoftmaxScaleBias: attention's softmax(scores·scale + mask), as
// pipeline/nn's attention writes it (a constant scale, a mask broadcast
// over the KV and group axes), becomes one node whose values equal, bit
// for bit, the same graph's with the scale as a parameter (not folded:
// its Mul and Add run as ops), and the go backend's within the softmax's
// tolerance. A scale the Mul shares with another reader is not folded.
// (Masked slots at a row's ends are skipped and sum in another order:
// TestVisibleSpans.)
func TestSoftmaxScaleBias(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	const scale = 0.125
	for _, c := range []struct{ scores, mask []int }{
		{[]int{1, 12, 1, 1, 32}, []int{1, 1, 1, 1, 32}}, // decode
		{[]int{2, 3, 5, 2, 17}, []int{2, 1, 5, 1, 17}},  // a batch, grouped heads
		{[]int{1, 4, 7, 1, 40}, []int{1, 1, 7, 1, 40}},  // a prefill piece
	} {
		r := rand.New(rand.NewPCG(43, uint64(c.scores[4])))
		x := randFlat(r, sh(dtypes.Float32, c.scores...), false).([]float32)
		m := randFlat(r, sh(dtypes.Float32, c.mask...), false).([]float32)
		cols := c.mask[4]
		for i := range m {
			if j := i % cols; i%3 == 0 && j > 0 && j < cols-1 {
				m[i] = -1e30 // masked inside the row, as AttentionBias writes it
			}
		}
		xt := func() *tensors.Tensor { return tensors.FromFlatDataAndDimensions(x, c.scores...) }
		mt := func() *tensors.Tensor { return tensors.FromFlatDataAndDimensions(m, c.mask...) }
		folded := func(in []*graph.Node) *graph.Node {
			return graph.Softmax(graph.Add(graph.MulScalar(in[0], scale), in[1]), -1)
		}
		name := fmt.Sprint(c.scores)
		exec := func(be backends.Backend, fn func([]*graph.Node) *graph.Node, args ...any) []float32 {
			out, err := graph.ExecOnce(be, fn, args...)
			if err != nil {
				t.Fatal(err)
			}
			return tensors.MustCopyFlatData[float32](out)
		}
		before := softmaxFolds.Load()
		got := exec(cpuB, folded, xt(), mt())
		if softmaxFolds.Load() == before {
			t.Fatalf("%s: the scale and mask were not folded into the softmax", name)
		}
		before = softmaxFolds.Load()
		unfolded := exec(cpuB, func(in []*graph.Node) *graph.Node {
			return graph.Softmax(graph.Add(graph.Mul(in[0], in[2]), in[1]), -1)
		}, xt(), mt(), tensors.FromScalar(float32(scale)))
		if softmaxFolds.Load() != before {
			t.Fatalf("%s: a scale given as a parameter was folded", name)
		}
		for i := range got {
			if got[i] != unfolded[i] {
				t.Fatalf("%s: element %d is %g folded, %g as separate ops", name, i, got[i], unfolded[i])
			}
		}
		compareFlat(t, name, dtypes.Float32, asFloat64(got), asFloat64(exec(ref, folded, xt(), mt())))
	}
	// The scaled scores are read again after the softmax: the Mul has
	// another reader.
	before := softmaxFolds.Load()
	_, err := graph.ExecOnce(cpuB, func(in []*graph.Node) *graph.Node {
		scaled := graph.MulScalar(in[0], scale)
		return graph.Concatenate([]*graph.Node{graph.Softmax(graph.Add(scaled, in[1]), -1), scaled}, 0)
	}, tensors.FromFlatDataAndDimensions(make([]float32, 8), 1, 1, 1, 1, 8), tensors.FromFlatDataAndDimensions(make([]float32, 8), 1, 1, 1, 1, 8))
	if err != nil {
		t.Fatal(err)
	}
	if softmaxFolds.Load() != before {
		t.Error("a Mul read by another output was folded into the softmax")
	}
}

// TestErff bounds erff's absolute error against float64 math.Erf.
func TestErff(t *testing.T) {
	worst := 0.0
	for x := float32(-6); x < 6; x += 0.000731 {
		worst = max(worst, math.Abs(float64(erff(x))-math.Erf(float64(x))))
	}
	for _, x := range []float32{0, 1e-20, -1e-20, 30, -30, float32(math.Inf(1)), float32(math.Inf(-1))} {
		worst = max(worst, math.Abs(float64(erff(x))-math.Erf(float64(x))))
	}
	if worst > 5e-7 {
		t.Errorf("erff: worst absolute error %.3g, want <= 5e-7", worst)
	}
	if v := erff(float32(math.NaN())); v == v {
		t.Errorf("erff(NaN) = %g", v)
	}
	t.Logf("erff: worst absolute error %.3g", worst)
}
