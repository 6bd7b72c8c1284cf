package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// TestGroupedExpertDot checks the gathered product of routed experts
// (DotGeneral over a whole-matrix Gather, as nn.PairDot writes it)
// against the go backend, which computes it as written: f32 and bf16
// stacks, repeated and single experts, and every pair on one expert. The
// product must be rewritten into the grouped node.
func TestGroupedExpertDot(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name    string
		e, n, k int
		ids     []int32
		w       dtypes.DType
	}{
		{"spread f32", 5, 24, 40, []int32{3, 0, 3, 4, 1, 3, 0}, dtypes.Float32},
		{"spread bf16", 5, 24, 40, []int32{2, 2, 1, 4, 0, 2}, dtypes.BFloat16},
		{"one pair bf16", 3, 9, 17, []int32{1}, dtypes.BFloat16},
		{"all on one", 4, 16, 32, []int32{2, 2, 2, 2, 2}, dtypes.BFloat16},
	} {
		p := len(c.ids)
		shs := []shapes.Shape{sh(dtypes.Float32, p, c.k), sh(c.w, c.e, c.n, c.k), sh(dtypes.Int32, p, 1)}
		r := rand.New(rand.NewPCG(7, uint64(p)))
		data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), c.ids}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			var err error
			dot, err = pairDot(b, ps[0], ps[1], ps[2], c.n, c.k, c.w)
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		if n := dot.(*node); n.op != opTypeGrouped {
			t.Errorf("%s: the gathered product was not rewritten into the grouped node", c.name)
		}
		// An expert index outside the stack is an error naming it.
		bad := append([]int32(nil), c.ids...)
		bad[0] = int32(c.e)
		if _, _, err := run(cpu, shs, []any{data[0], data[1], bad}, build); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("expert index %d", c.e)) {
			t.Errorf("%s: expert %d of %d: err %v, want one naming the index", c.name, c.e, c.e, err)
		}
	}
}

// TestGroupedExpertNoExpert: pairs of expert -1 (lm.Routing's pairs that
// run no expert, weighed 0) give rows of zeros in the grouped node, where
// the go backend's Gather clamps them to expert 0; the other pairs'
// rows agree with it.
func TestGroupedExpertNoExpert(t *testing.T) {
	ref, cpu := backendsForTest(t)
	const e, n, k = 4, 16, 24
	ids := []int32{2, -1, 0, -1, 3, 2}
	p := len(ids)
	shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.BFloat16, e, n, k), sh(dtypes.Int32, p, 1)}
	r := rand.New(rand.NewPCG(11, 3))
	data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), ids}
	var dot backends.Op
	build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
		var err error
		dot, err = pairDot(b, ps[0], ps[1], ps[2], n, k, dtypes.BFloat16)
		return dot, err
	}
	want, _, err := run(ref, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := run(cpu, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	if dot.(*node).op != opTypeGrouped {
		t.Fatal("the gathered product was not rewritten into the grouped node")
	}
	g, w := asFloat64(got), asFloat64(want)
	for i, id := range ids {
		row, wrow := g[i*n:(i+1)*n], w[i*n:(i+1)*n]
		if id == -1 {
			for _, v := range row {
				if v != 0 {
					t.Fatalf("pair %d of expert -1: row %v, want zeros", i, row)
				}
			}
			continue
		}
		compareFlat(t, fmt.Sprintf("pair %d", i), dtypes.Float32, row, wrow)
	}
}

// TestGroupedExpertDot16 checks the gathered product in 16-bit
// activations (--dtype bf16 or f16: rows and stack bf16 or f16, the
// product in that dtype, no conversion): it is rewritten into the
// grouped node and agrees with the go backend (bf16), or for f16, which
// the go backend lacks, with the cpu backend's f32 product of the same
// values, to the dtype's tolerance; single rows (GEMVs) and several
// rows an expert (GEMMs).
func TestGroupedExpertDot16(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, dt := range []dtypes.DType{dtypes.BFloat16, dtypes.Float16} {
		for _, ids := range [][]int32{{3, 0, 3, 4, 1, 3, 0}, {1, 2}} {
			name := fmt.Sprintf("%s %v", dt, ids)
			const e, n, k = 5, 24, 40
			p := len(ids)
			r := rand.New(rand.NewPCG(9, uint64(p)))
			f32 := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Float32, e, n, k), sh(dtypes.Int32, p, 1)}
			v, w := randFlat(r, f32[0], false).([]float32), randFlat(r, f32[1], false).([]float32)
			shs := []shapes.Shape{sh(dt, p, k), sh(dt, e, n, k), f32[2]}
			data := []any{narrow(dt, v), narrow(dt, w), ids}
			var dot backends.Op
			build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
				g, err := b.Gather(ps[1], ps[2], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, n, k}, false)
				if err != nil {
					return nil, err
				}
				dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, g, []int{2}, []int{0})
				return dot, err
			}
			got, _, err := run(cpu, shs, data, build)
			if err != nil {
				t.Fatal(err)
			}
			if dot.(*node).op != opTypeGrouped {
				t.Errorf("%s: the gathered product was not rewritten into the grouped node", name)
			}
			var want any
			if dt == dtypes.BFloat16 {
				want, _, err = run(ref, shs, data, build)
			} else { // the same f16 values in f32
				want, _, err = run(cpu, f32, []any{toF32(data[0]), toF32(data[1]), ids}, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
					return pairDot(b, ps[0], ps[1], ps[2], n, k, dtypes.Float32)
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			compareFlat(t, name, dt, asFloat64(got), asFloat64(want))
		}
	}
}

// narrow is v rounded to the 16-bit dtype dt.
func narrow(dt dtypes.DType, v []float32) any {
	out := makeFlat(dt, len(v))
	fromF32(out, v)
	return out
}

// pairDot builds nn.PairDot's f32, bf16 or f16 form: rows v [P, k] times
// the matrices [n, k] of stack w [E, n, k] (of dtype wdt) that ids [P, 1]
// pick, a whole-matrix Gather (converted to f32 when wdt is narrow) under
// a DotGeneral batched over the pairs.
func pairDot(b backends.Builder, v, w, ids backends.Op, n, k int, wdt dtypes.DType) (backends.Op, error) {
	g, err := b.Gather(w, ids, 1, []int{1, 2}, []int{0}, []int{0}, []int{1, n, k}, false)
	if err != nil {
		return nil, err
	}
	if wdt != dtypes.Float32 {
		if g, err = b.ConvertDType(g, dtypes.Float32); err != nil {
			return nil, err
		}
	}
	return b.DotGeneral(v, []int{1}, []int{0}, g, []int{2}, []int{0})
}

// TestGroupedExpertDotInt8 builds nn.PairDot's int8 form (whole-row
// gathers of an int8 stack [E, N, g, G] and its scales [E, N, g, 1],
// dequantised, under a batched DotGeneral): the cpu backend rewrites it
// into the grouped node reading int8 in place and agrees with the go
// backend, which computes the gathered f32 matrices as written; with int8
// activations (act=int8), as the go backend on the quantised rows.
func TestGroupedExpertDotInt8(t *testing.T) {
	ref, cpu := backendsForTest(t)
	q8 := int8ActBackend(t)
	for _, c := range []struct {
		name           string
		e, n, g, group int
		ids            []int32
	}{
		{"spread", 5, 24, 2, 64, []int32{3, 0, 3, 4, 1, 3, 0}},
		{"one pair, per channel", 3, 9, 1, 48, []int32{2}},
		{"all on one", 4, 16, 3, 32, []int32{1, 1, 1, 1}},
	} {
		p, k := len(c.ids), c.g*c.group
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Int8, c.e, c.n, c.g, c.group), sh(dtypes.Float32, c.e, c.n, c.g, 1), sh(dtypes.Int32, p, 1)}
		r := rand.New(rand.NewPCG(11, uint64(p)))
		data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), randFlat(r, shs[2], true), c.ids}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			gq, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, c.n, c.g, c.group}, false)
			if err != nil {
				return nil, err
			}
			gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, c.n, c.g, 1}, false)
			if err != nil {
				return nil, err
			}
			conv, _ := b.ConvertDType(gq, dtypes.Float32)
			sc, _ := b.BroadcastInDim(gs, sh(dtypes.Float32, p, c.n, c.g, c.group), []int{0, 1, 2, 3})
			m, _ := b.Mul(conv, sc)
			w, _ := b.Reshape(m, p, c.n, k)
			dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		if n := dot.(*node); n.op != opTypeGrouped || n.aux.(*groupedAux).group != c.group {
			t.Errorf("%s: the int8 gathered product was not rewritten into the grouped node", c.name)
		}
		// int8 activations: the go backend's product of the rows
		// quantised and dequantised per block of 32 (VNNI for groups of
		// 64, the f32 kernels on the quantised rows otherwise); rows of
		// no whole blocks keep f32 activations.
		if k%32 != 0 {
			if _, _, err := run(q8, shs, data, build); err != nil {
				t.Fatal(err)
			}
			if dot.(*node).aux.(*groupedAux).int8Q8 {
				t.Errorf("%s: rows of %d values quantised per block of 32", c.name, k)
			}
			continue
		}
		compareInt8Activations(t, c.name, ref, q8, shs, data, build, nil)
		if a := dot.(*node).aux.(*groupedAux); !a.int8Q8 {
			t.Errorf("%s: act=int8 did not make the grouped product quantise its rows", c.name)
		}
	}
}

// TestGroupedExpertDotInt8BF16 is TestGroupedExpertDotInt8's product
// under --activations bf16 (act=bf16): the rows rounded to bf16, and an
// expert's twenty rows multiplied by the pair kernel (kernels.GemmInt8DotNT,
// with AVX512_BF16), which rounds its q·scale to bf16 too; the GEMVs and
// the few-row GEMMs read the weight exact. Checked against the float64
// product of the rounded rows and those weights.
func TestGroupedExpertDotInt8BF16(t *testing.T) {
	bf, err := New("act=bf16")
	if err != nil {
		t.Fatal(err)
	}
	const e, n, g, group = 3, 16, 2, 64
	ids := append(make([]int32, 20), 1, 2, 2) // twenty rows on expert 0, one on 1, two on 2
	p, k := len(ids), g*group
	shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Int8, e, n, g, group), sh(dtypes.Float32, e, n, g, 1), sh(dtypes.Int32, p, 1)}
	r := rand.New(rand.NewPCG(13, 14))
	data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), randFlat(r, shs[2], true), ids}
	var dot backends.Op
	build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
		gq, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, n, g, group}, false)
		if err != nil {
			return nil, err
		}
		gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, n, g, 1}, false)
		if err != nil {
			return nil, err
		}
		conv, _ := b.ConvertDType(gq, dtypes.Float32)
		sc, _ := b.BroadcastInDim(gs, sh(dtypes.Float32, p, n, g, group), []int{0, 1, 2, 3})
		m, _ := b.Mul(conv, sc)
		w, _ := b.Reshape(m, p, n, k)
		dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
		return dot, err
	}
	got, _, err := run(bf, shs, data, build)
	if err != nil {
		t.Fatal(err)
	}
	if a := dot.(*node).aux.(*groupedAux); dot.(*node).op != opTypeGrouped || !a.bf16Act {
		t.Fatal("act=bf16: the int8 gathered product is not the grouped node with bf16 activations")
	}
	x, q, s := data[0].([]float32), data[1].([]int8), data[2].([]float32)
	xr := make([]float32, len(x))
	kernels.RoundBF16(xr, x)
	pairs := pairKernels()
	want := make([]float64, p*n)
	for i, ex := range ids {
		for o := range n {
			var sum float64
			for c := range k {
				wv := float32(q[(int(ex)*n+o)*k+c]) * s[(int(ex)*n+o)*g+c/group]
				if pairs && ex == 0 { // expert 0's twenty rows: the pair kernel
					r := []float32{wv}
					kernels.RoundBF16(r, r)
					wv = r[0]
				}
				sum += float64(xr[i*k+c]) * float64(wv)
			}
			want[i*n+o] = sum
		}
	}
	compareFlat(t, "int8 experts, bf16 activations", dtypes.Float32, asFloat64(got), want)
}

// TestGroupedExpertSum builds the last step of nn.ExpertStack.Gathered:
// the gathered product [P, N] reshaped to [T, k, N], times the routing
// weights [T, k, 1], summed over k. The cpu backend folds the sum into
// the grouped node (rewriteGroupedSum); the result agrees with the go
// backend and is identical to the same sum unfused on the cpu backend (the
// weights broadcast to [T, k, N] first, which the rewrite does not match).
// k of 8, 3 and 6 (the four-accumulator order with and without a
// remainder), one row and several rows per expert, f32 and bf16 stacks,
// and GPT-OSS's form with each pair's bias added first (f32 and bf16
// biases).
func TestGroupedExpertSum(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name                     string
		e, out, in, topk, tokens int
		w                        dtypes.DType
		bias                     dtypes.DType // InvalidDType: none
	}{
		{"decode k8 bf16", 16, 24, 40, 8, 1, dtypes.BFloat16, dtypes.InvalidDType},
		{"batch k3 f32", 5, 24, 40, 3, 4, dtypes.Float32, dtypes.InvalidDType},
		{"batch k6 bf16", 7, 17, 32, 6, 5, dtypes.BFloat16, dtypes.InvalidDType},
		{"decode k4 f32 bias", 8, 24, 32, 4, 1, dtypes.Float32, dtypes.Float32},            // GPT-OSS's down projection
		{"batch k4 bf16 bias bf16", 8, 20, 32, 4, 3, dtypes.BFloat16, dtypes.BFloat16},     // its biases held in bf16
		{"batch k3 bf16 no expert", 6, 24, 40, 3, 4, dtypes.BFloat16, dtypes.InvalidDType}, // pairs of expert -1, weight 0
		{"batch k4 f32 bias no expert", 8, 24, 32, 4, 3, dtypes.Float32, dtypes.Float32},
	} {
		p := c.tokens * c.topk
		r := rand.New(rand.NewPCG(9, uint64(p)))
		ids := make([]int32, p)
		for i := range ids {
			ids[i] = int32(r.IntN(c.e))
		}
		shs := []shapes.Shape{sh(dtypes.Float32, p, c.in), sh(c.w, c.e, c.out, c.in), sh(dtypes.Int32, p, 1), sh(dtypes.Float32, c.tokens, c.topk)}
		data := []any{randFlat(r, shs[0], false), randFlat(r, shs[1], false), ids, randFlat(r, shs[3], true)}
		if strings.HasSuffix(c.name, "no expert") { // every third pair runs no expert: id -1, weight 0 (lm.Routing)
			w := data[3].([]float32)
			for i := 0; i < p; i += 3 {
				ids[i], w[i] = -1, 0
			}
		}
		if c.bias != dtypes.InvalidDType {
			shs = append(shs, sh(c.bias, c.e, c.out))
			data = append(data, randFlat(r, shs[4], false))
		}
		var sum backends.Op
		build := func(broadcast bool) buildFn {
			return func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
				y, err := pairDot(b, ps[0], ps[1], ps[2], c.out, c.in, c.w)
				if err != nil {
					return nil, err
				}
				if c.bias != dtypes.InvalidDType { // y + bias[ids], as nn.ExpertStack.Gathered adds DownBias
					gb, err := b.Gather(ps[4], ps[2], 1, []int{1}, []int{0}, []int{0}, []int{1, c.out}, false)
					if err != nil {
						return nil, err
					}
					if c.bias != dtypes.Float32 {
						if gb, err = b.ConvertDType(gb, dtypes.Float32); err != nil {
							return nil, err
						}
					}
					if y, err = b.Add(y, gb); err != nil {
						return nil, err
					}
				}
				if y, err = b.Reshape(y, c.tokens, c.topk, c.out); err != nil {
					return nil, err
				}
				w, err := b.Reshape(ps[3], c.tokens, c.topk, 1)
				if err != nil {
					return nil, err
				}
				if broadcast {
					if w, err = b.BroadcastInDim(w, sh(dtypes.Float32, c.tokens, c.topk, c.out), []int{0, 1, 2}); err != nil {
						return nil, err
					}
				}
				m, err := b.Mul(y, w)
				if err != nil {
					return nil, err
				}
				sum, err = b.ReduceSum(m, 1)
				return sum, err
			}
		}
		want, _, err := run(ref, shs, data, build(false))
		if err != nil {
			t.Fatal(err)
		}
		unfused, _, err := run(cpu, shs, data, build(true))
		if err != nil {
			t.Fatal(err)
		}
		if n := sum.(*node); n.op == opTypeGrouped {
			t.Fatalf("%s: the broadcast form was folded too", c.name)
		}
		got, _, err := run(cpu, shs, data, build(false))
		if err != nil {
			t.Fatal(err)
		}
		if n := sum.(*node); n.op != opTypeGrouped || n.aux.(*groupedAux).combine != c.topk ||
			n.aux.(*groupedAux).combineBias != (c.bias != dtypes.InvalidDType) {
			t.Fatalf("%s: the weighted sum (and bias) was not folded into the grouped node", c.name)
		}
		compareFlat(t, c.name, dtypes.Float32, asFloat64(got), asFloat64(want))
		g, u := got.([]float32), unfused.([]float32)
		for i := range g {
			if g[i] != u[i] {
				t.Fatalf("%s: output %d is %v folded, %v unfused", c.name, i, g[i], u[i])
			}
		}
	}
}
