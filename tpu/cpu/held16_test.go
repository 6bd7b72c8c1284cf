package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"

	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// heldForm is a weight held quantised as pipeline/nn writes it: parts
// makes random parts of a matrix [n, k] (with lead, a stack of them),
// form dequantises them to dtype.
type heldForm struct {
	name  string
	parts func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor
	form  func(p []*graph.Node, dt dtypes.DType) *graph.Node
	// split, when set, is the f32 weight in two: the part the pair
	// kernels round to bf16 and the part they add after (grouped int4's
	// mins, as a weight of the form's shape).
	split func(p []*graph.Node) (rest, mins *graph.Node)
}

func dimsOf(lead []int, d ...int) []int { return append(append([]int{}, lead...), d...) }

func sizeOf(d []int) int {
	n := 1
	for _, v := range d {
		n *= v
	}
	return n
}

func randBytes(r *rand.Rand, d []int, ok func(byte) bool) *tensors.Tensor {
	b := make([]uint8, sizeOf(d))
	for i := range b {
		for b[i] = byte(r.IntN(256)); ok != nil && !ok(b[i]); b[i] = byte(r.IntN(256)) {
		}
	}
	return tensors.FromFlatDataAndDimensions(b, d...)
}

func randF32(r *rand.Rand, d []int, lo, hi float32) *tensors.Tensor {
	v := make([]float32, sizeOf(d))
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float32()
	}
	return tensors.FromFlatDataAndDimensions(v, d...)
}

var (
	heldInt8 = heldForm{"int8", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		q := make([]int8, sizeOf(dimsOf(lead, n, k)))
		for i := range q {
			q[i] = int8(r.IntN(255) - 127)
		}
		return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(q, dimsOf(lead, n, k/32, 32)...), randF32(r, dimsOf(lead, n, k/32, 1), 0.004, 0.02)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeInt8(p[0], p[1], dt) }, nil}
	heldInt4 = heldForm{"int4", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randBytes(r, dimsOf(lead, n, k/32), nil), randF32(r, []int{256, 1}, 0.05, 0.25)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeInt4(p[0], p[1], p[2], dt) }, nil}
	heldInt4Groups = heldForm{"grouped int4 with mins", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randF32(r, dimsOf(lead, n, k/64), 0.05, 0.25), randF32(r, dimsOf(lead, k/64, n), -0.5, 0.5)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node {
		return nn.DequantizeInt4Groups(p[0], p[1], p[2], dt)
	},
		func(p []*graph.Node) (rest, mins *graph.Node) {
			d := p[2].Shape().Dimensions // [..., K/G, N]
			r := len(d)
			perm := make([]int, r)
			for i := range perm {
				perm[i] = i
			}
			perm[r-2], perm[r-1] = r-1, r-2
			m := graph.InsertAxes(graph.TransposeAllDims(p[2], perm...), -1) // [..., N, K/G, 1]
			m = graph.BroadcastToDims(m, dimsOf(d[:r-2], d[r-1], d[r-2], 64)...)
			return nn.DequantizeInt4Groups(p[0], p[1], nil, dtypes.Float32), graph.Reshape(m, dimsOf(d[:r-2], d[r-1], d[r-2]*64)...)
		}}
	heldActOrder = heldForm{"grouped int4 in activation order", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		inv := make([]int32, k)
		for i, v := range r.Perm(k) {
			inv[i] = int32(v)
		}
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randF32(r, dimsOf(lead, n, k/32), 0.05, 0.25), tensors.FromFlatDataAndDimensions(inv, k)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { // as compile's Runner writes it: the columns gathered, then rounded
		w := nn.GatherColumns(nn.DequantizeInt4Groups(p[0], p[1], nil, dtypes.Float32), p[2])
		if dt != dtypes.Float32 {
			w = graph.ConvertDType(w, dt)
		}
		return w
	}, nil}
	heldFP8 = heldForm{"FP8 blocks of 16x32", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		notNaN := func(b byte) bool { return b&0x7f != 0x7f }
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k), notNaN), randF32(r, dimsOf(lead, (n+15)/16, (k+31)/32), 0.05, 0.2)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeFP8(p[0], p[1], 16, 32, dt) }, nil}
	heldNVFP4 = heldForm{"NVFP4", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randBytes(r, dimsOf(lead, n, k/16), nil), randF32(r, []int{256, 1}, 0.02, 0.1)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeNVFP4(p[0], p[1], p[2], dt) }, nil}
	heldFP4Groups = heldForm{"grouped FP4 by 16", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randF32(r, dimsOf(lead, n, k/16), 0.02, 0.1)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeFP4Groups(p[0], p[1], dt) }, nil}
	heldNVFP4Tables = heldForm{"NVFP4 stack, a table a part", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randBytes(r, dimsOf(lead, n, k/16), nil), randF32(r, dimsOf(lead, 2, 256), 0.02, 0.1)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node {
		return nn.DequantizeNVFP4Tables(p[0], p[1], p[2], dt)
	}, nil}
	heldMXFP4 = heldForm{"MXFP4", func(r *rand.Rand, lead []int, n, k int) []*tensors.Tensor {
		scale := func(b byte) bool { return b >= 122 && b <= 128 } // E8M0 exponents near 2⁰
		return []*tensors.Tensor{randBytes(r, dimsOf(lead, n, k/32, 16), nil), randBytes(r, dimsOf(lead, n, k/32), scale)}
	}, func(p []*graph.Node, dt dtypes.DType) *graph.Node { return nn.DequantizeMXFP4(p[0], p[1], dt) }, nil}
)

// pairKernels reports whether the bf16 pair kernels run on this machine
// (AVX512_BF16 at the AVX-512 dispatch level): products of 16 rows or
// more with bf16 activations then round a compact weight to bf16.
func pairKernels() bool {
	return kernels.Dispatch() == "avx512" && slices.Contains(kernels.Features(), "avx512_bf16")
}

// flatTensor is a tensor of randFlat's bf16 or f16 values.
func flatTensor(flat any, dims ...int) *tensors.Tensor {
	switch f := flat.(type) {
	case []bfloat16.BFloat16:
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case []float16.Float16:
		return tensors.FromFlatDataAndDimensions(f, dims...)
	}
	panic(fmt.Sprintf("flatTensor: %T", flat))
}

// product builds a tested product over in (the rows, the ids of routed
// experts, then the weight's parts) with the weight that w makes of its
// parts.
type product func(in []*graph.Node, w func(parts []*graph.Node) *graph.Node) *graph.Node

// want16 is the product computed on the host in float64 from the rows
// and the weight's f32 values (the form as the go backend computes it),
// or for the rows that rounded reports those values rounded to bf16
// first, each row of the pairs with its expert's matrix where ids is not
// nil; and each sum's absolute terms summed.
func want16(t *testing.T, ref backends.Backend, dt dtypes.DType, f heldForm, rows []float64, ids []int32, parts []any, n, k int, rounded func(row int) bool) (want, mass []float64) {
	t.Helper()
	out, err := graph.ExecOnce(ref, func(in []*graph.Node) *graph.Node { return f.form(in, dtypes.Float32) }, fresh(parts)...)
	if err != nil {
		t.Fatal(err)
	}
	w32 := tensors.MustCopyFlatData[float32](out)
	exact, round := asFloat64(w32), asFloat64(narrow(dtypes.BFloat16, w32))
	if f.split != nil { // the pair kernels round the rest and add the mins after
		part := func(i int) []float32 {
			out, err := graph.ExecOnce(ref, func(in []*graph.Node) *graph.Node {
				rest, mins := f.split(in)
				return []*graph.Node{rest, mins}[i]
			}, fresh(parts)...)
			if err != nil {
				t.Fatal(err)
			}
			return tensors.MustCopyFlatData[float32](out)
		}
		mins := part(1)
		for i, v := range asFloat64(narrow(dtypes.BFloat16, part(0))) {
			round[i] = v + float64(mins[i])
		}
	}
	m := len(rows) / k
	want, mass = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		mat := exact
		if rounded(i) {
			mat = round
		}
		if ids != nil {
			mat = mat[int(ids[i])*n*k:]
		}
		for o := range n {
			var sum, abs float64
			for c := range k {
				term := rows[i*k+c] * mat[o*k+c]
				sum, abs = sum+term, abs+math.Abs(term)
			}
			want[i*n+o], mass[i*n+o] = sum, abs
		}
	}
	wantF32 := make([]float32, len(want))
	for i, v := range want {
		wantF32[i] = float32(v)
	}
	return asFloat64(narrow(dt, wantF32)), mass
}

// got16 is the product on the cpu backend in dt, the weight's form
// rounded to dt as pipeline/nn writes it, and how many products it read
// the weight of as held in 16-bit activations.
func got16(t *testing.T, cpuB backends.Backend, dt dtypes.DType, f heldForm, prod product, inputs []any) ([]float64, int64) {
	t.Helper()
	before := wide16Rewrites.Load()
	out, err := graph.ExecOnce(cpuB, func(in []*graph.Node) *graph.Node {
		return prod(in, func(p []*graph.Node) *graph.Node { return f.form(p, dt) })
	}, fresh(inputs)...)
	if err != nil {
		t.Fatal(err)
	}
	return flatOf(out), wide16Rewrites.Load() - before
}

// fresh is local copies of the input tensors: a tensor used on one
// backend cannot go to another.
func fresh(inputs []any) []any {
	out := make([]any, len(inputs))
	for i, x := range inputs {
		c, err := x.(*tensors.Tensor).LocalClone()
		if err != nil {
			panic(err)
		}
		out[i] = c
	}
	return out
}

// flatOf is a bf16 or f16 tensor's values.
func flatOf(out *tensors.Tensor) []float64 {
	if out.DType() == dtypes.BFloat16 {
		return asFloat64(tensors.MustCopyFlatData[bfloat16.BFloat16](out))
	}
	return asFloat64(tensors.MustCopyFlatData[float16.Float16](out))
}

// within16 checks got, the product rounded to dt from a float32 sum,
// against want, rounded to dt from the float64 sum: they may round to
// neighbours (one unit of dt's last place, at most 2⁻⁷ of the value in
// bf16, 2⁻¹⁰ in f16), after the float32 sum's own error (2⁻¹⁷ of the
// terms' absolute sum mass is ample for 128 terms).
func within16(t *testing.T, name string, dt dtypes.DType, got, want, mass []float64) {
	t.Helper()
	ulp := 0x1p-7
	if dt == dtypes.Float16 {
		ulp = 0x1p-10
	}
	for i, w := range want {
		if d := math.Abs(got[i] - w); d > ulp*(math.Abs(w)+0x1p-17*mass[i])+0x1p-17*mass[i] {
			t.Errorf("%s: element %d of %d: got %v, want %v", name, i, len(want), got[i], w)
			return
		}
	}
}

// TestHeldWeights16 multiplies activations in bf16 and f16 (--dtype bf16
// or f16) by weights held quantised, in the forms pipeline/nn writes under
// that dtype: the dequantisation rounded to it, ConvertDType(form, dt).
// The cpu backend reads each weight as held (weightDot's wide16, the
// grouped node's out16) instead of dequantising the whole weight at every
// call. Dense products (nn.Linear; a GPTQ weight in activation order
// included, its columns gathered before the rounding as compile writes
// it) of one row (the GEMVs), five, and twenty; the routed experts'
// gathered products (nn.PairDot; NVFP4 stacks with a table a part
// included) spread over the experts, at decode, and twenty rows on one
// expert. Each is the f32 product of the rows and the
// weight's f32 values rounded to dt, except that twenty bf16 rows or more
// go through the pair kernels (kernels.GemmInt8DotNT and its kin), which
// round the weight to bf16 as the graph does (grouped int4's mins added
// after): those rows' products are the rounded weight's. (The weight
// rounded or not differs by up to 6.5e-3 of the largest output there.)
func TestHeldWeights16(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	const n, k = 24, 128
	check := func(name string, dt dtypes.DType, f heldForm, prod product, inputs []any, ids []int32, parts []any, rounded func(int) bool) {
		got, rewrites := got16(t, cpuB, dt, f, prod, inputs)
		if rewrites != 1 {
			t.Errorf("%s: %d products read the weight as held, want 1", name, rewrites)
		}
		rows := inputs[0].(*tensors.Tensor)
		want, mass := want16(t, ref, dt, f, flatOf(rows), ids, parts, n, k, rounded)
		within16(t, name, dt, got, want, mass)
	}
	pairKernel := pairKernels()
	for _, dt := range []dtypes.DType{dtypes.BFloat16, dtypes.Float16} {
		for _, f := range []heldForm{heldInt8, heldInt4, heldInt4Groups, heldActOrder, heldFP8, heldNVFP4, heldFP4Groups} {
			for _, m := range []int{1, 5, 20} {
				r := rand.New(rand.NewPCG(83, uint64(m)))
				inputs := []any{flatTensor(randFlat(r, sh(dt, m, k), false), m, k)}
				var parts []any
				for _, p := range f.parts(r, nil, n, k) {
					parts = append(parts, p)
				}
				inputs = append(inputs, parts...)
				linear := func(in []*graph.Node, w func([]*graph.Node) *graph.Node) *graph.Node {
					return nn.Linear(in[0], w(in[1:]), nil)
				}
				rounded := func(int) bool { return pairKernel && dt == dtypes.BFloat16 && m >= 16 }
				check(fmt.Sprintf("%s %s, %d rows", dt, f.name, m), dt, f, linear, inputs, nil, parts, rounded)
			}
		}
		for _, f := range []heldForm{heldInt8, heldInt4, heldInt4Groups, heldFP8, heldMXFP4, heldFP4Groups, heldNVFP4Tables} {
			for _, ids := range [][]int32{{3, 0, 3, 4, 1, 3, 0}, {1, 2}, append(make([]int32, 20), 4, 1)} {
				const e = 5
				p := len(ids)
				r := rand.New(rand.NewPCG(89, uint64(p)))
				inputs := []any{flatTensor(randFlat(r, sh(dt, p, k), false), p, k), tensors.FromFlatDataAndDimensions(ids, p, 1)}
				var parts []any
				for _, part := range f.parts(r, []int{e}, n, k) {
					parts = append(parts, part)
				}
				inputs = append(inputs, parts...)
				pairDot := func(in []*graph.Node, w func([]*graph.Node) *graph.Node) *graph.Node {
					return nn.PairDot(in[0], w(in[2:]), in[1])
				}
				rounded := func(row int) bool { // the twenty rows on expert 0
					return pairKernel && dt == dtypes.BFloat16 && p > 20 && ids[row] == 0
				}
				check(fmt.Sprintf("%s experts %s, %d pairs", dt, f.name, p), dt, f, pairDot, inputs, ids, parts, rounded)
			}
		}
	}
}

// TestBF16ActivationsHeld: --activations bf16 (act=bf16) in f32 compute
// rounds the rows of every product over a weight held quantised to bf16,
// dense and routed experts alike, and takes the pair kernels
// (kernels.GemmInt8DotNT and its kin, weights rounded to bf16; grouped
// int4's mins added after) from 16 rows with AVX512_BF16; checked against
// the float64 product of the rounded rows and those weights.
func TestBF16ActivationsHeld(t *testing.T) {
	ref, _ := backendsForTest(t)
	bf, err := New("act=bf16")
	if err != nil {
		t.Fatal(err)
	}
	const n, k = 24, 128
	pairKernel := pairKernels()
	check := func(name string, f heldForm, prod product, inputs []any, ids []int32, parts []any, rounded func(int) bool) {
		out, err := graph.ExecOnce(bf, func(in []*graph.Node) *graph.Node {
			return prod(in, func(p []*graph.Node) *graph.Node { return f.form(p, dtypes.Float32) })
		}, fresh(inputs)...)
		if err != nil {
			t.Fatal(err)
		}
		x := tensors.MustCopyFlatData[float32](inputs[0].(*tensors.Tensor))
		xr := make([]float32, len(x))
		kernels.RoundBF16(xr, x)
		want, _ := want16(t, ref, dtypes.Float32, f, asFloat64(xr), ids, parts, n, k, rounded)
		compareFlat(t, name, dtypes.Float32, asFloat64(tensors.MustCopyFlatData[float32](out)), want)
	}
	for _, f := range []heldForm{heldInt8, heldInt4, heldInt4Groups, heldActOrder, heldFP8, heldNVFP4, heldFP4Groups} {
		for _, m := range []int{1, 5, 20} {
			r := rand.New(rand.NewPCG(97, uint64(m)))
			inputs := []any{tensors.FromFlatDataAndDimensions(randFlat(r, sh(dtypes.Float32, m, k), false).([]float32), m, k)}
			var parts []any
			for _, p := range f.parts(r, nil, n, k) {
				parts = append(parts, p)
			}
			inputs = append(inputs, parts...)
			linear := func(in []*graph.Node, w func([]*graph.Node) *graph.Node) *graph.Node {
				return nn.Linear(in[0], w(in[1:]), nil)
			}
			check(fmt.Sprintf("%s, %d rows", f.name, m), f, linear, inputs, nil, parts, func(int) bool { return pairKernel && m >= 16 })
		}
	}
	for _, f := range []heldForm{heldInt8, heldInt4, heldInt4Groups, heldFP8, heldMXFP4, heldFP4Groups, heldNVFP4Tables} {
		ids := append(make([]int32, 20), 2, 1)
		p := len(ids)
		r := rand.New(rand.NewPCG(98, 99))
		inputs := []any{tensors.FromFlatDataAndDimensions(randFlat(r, sh(dtypes.Float32, p, k), false).([]float32), p, k), tensors.FromFlatDataAndDimensions(ids, p, 1)}
		var parts []any
		for _, part := range f.parts(r, []int{3}, n, k) {
			parts = append(parts, part)
		}
		inputs = append(inputs, parts...)
		pairDot := func(in []*graph.Node, w func([]*graph.Node) *graph.Node) *graph.Node {
			return nn.PairDot(in[0], w(in[2:]), in[1])
		}
		check(f.name+" experts", f, pairDot, inputs, ids, parts, func(row int) bool { return pairKernel && ids[row] == 0 })
	}
}
