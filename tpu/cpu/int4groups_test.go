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

// TestDotGeneralInt4Groups builds nn.DequantizeInt4Groups' form under a
// DotGeneral (nibbles decoded through the constant pairs table, times the
// group scales broadcast over their groups, plus the mins where there are
// any): the cpu backend multiplies the packed values directly (checked by
// the rewritten node) and agrees with the go backend, which computes the
// f32 weight as written (groups of 16 too: two scale codes a block).
// Another pairs table, or a group of a size the kernels do not take (8),
// is not rewritten and still agrees. With the
// columns gathered back from group order (nn.GatherColumns: activation
// order) the product permutes the activations instead.
func TestDotGeneralInt4Groups(t *testing.T) {
	ref, cpu := backendsForTest(t)
	for _, c := range []struct {
		name        string
		x           []int
		out, k, grp int
		contrax     int
		mins        bool
		badPairs    bool
		rewritten   bool
		perm        bool // the columns gathered back from group order (nn.GatherColumns)
	}{
		{"decode", []int{1, 256}, 7, 256, 128, 1, false, false, true, false},
		{"decode, mins", []int{1, 256}, 9, 256, 64, 1, true, false, true, false},
		{"prefill, mins", []int{5, 128}, 33, 128, 32, 1, true, false, true, false},
		{"rank 3", []int{2, 3, 192}, 17, 192, 192, 2, false, false, true, false},
		{"other pairs", []int{3, 64}, 9, 64, 32, 1, false, true, false, false},
		{"groups of 16, decode", []int{1, 64}, 9, 64, 16, 1, true, false, true, false},
		{"groups of 16, prefill", []int{3, 128}, 9, 128, 16, 1, false, false, true, false},
		{"groups of 8", []int{3, 64}, 9, 64, 8, 1, true, false, false, false},
		// nn.DequantizeFP4Groups (NVFP4 experts' form): E2M1 codes, half-scales
		{"fp4 by 16, decode", []int{1, 64}, 9, 64, 16, 1, false, false, true, false},
		{"fp4 by 16, prefill", []int{3, 128}, 9, 128, 16, 1, false, false, true, false},
		{"decode, activation order", []int{1, 256}, 9, 256, 64, 1, true, false, true, true},
		{"prefill, activation order", []int{4, 128}, 17, 128, 32, 1, false, false, true, true},
	} {
		r := rand.New(rand.NewPCG(53, uint64(c.out)))
		ng := c.k / c.grp
		packed := make([]uint8, c.out*c.k/2)
		for i := range packed {
			packed[i] = uint8(r.IntN(256))
		}
		scales, mins := make([]float32, c.out*ng), make([]float32, c.out*ng) // mins [ng, out]
		for i := range scales {
			scales[i] = float32(0.001 + r.Float64()/50)
			o, g := i/ng, i%ng
			mins[g*c.out+o] = scales[i] * float32(8-r.IntN(16))
		}
		shs := []shapes.Shape{sh(dtypes.Float32, c.x...), sh(dtypes.Uint8, c.out, c.k/32, 16), sh(dtypes.Float32, c.out, ng)}
		data := []any{randFlat(r, shs[0], false), packed, scales}
		if c.mins {
			shs = append(shs, sh(dtypes.Float32, ng, c.out))
			data = append(data, mins)
		}
		inv := r.Perm(c.k)
		if c.perm {
			inv32 := make([]int32, c.k)
			for i, v := range inv {
				inv32[i] = int32(v)
			}
			shs = append(shs, sh(dtypes.Int32, c.k))
			data = append(data, inv32)
		}
		pairs := int4PairTable
		if c.badPairs {
			pairs[5] = 3
		}
		fp4 := strings.HasPrefix(c.name, "fp4")
		if fp4 {
			pairs = nvfp4PairTable
		}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			pt, err := b.Constant(pairs[:], 256, 2)
			if err != nil {
				return nil, err
			}
			i, _ := b.ConvertDType(ps[1], dtypes.Int32)
			i, _ = b.Reshape(i, c.out*c.k/2, 1)
			vals, err := b.Gather(pt, i, 1, []int{1}, []int{0}, []int{0}, []int{1, 2}, false)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, c.out, ng, c.grp)
			group := func(s backends.Op) backends.Op {
				s, _ = b.Reshape(s, c.out, ng, 1)
				s, _ = b.BroadcastInDim(s, sh(dtypes.Float32, c.out, ng, c.grp), []int{0, 1, 2})
				return s
			}
			w, _ := b.Mul(vals, group(ps[2]))
			if c.mins {
				mt, _ := b.Transpose(ps[3], 1, 0)
				w, _ = b.Add(group(mt), w)
			}
			w, _ = b.Reshape(w, c.out, c.k)
			if c.perm {
				wt, _ := b.Transpose(w, 1, 0)
				idx, _ := b.Reshape(ps[len(ps)-1], c.k, 1)
				g, err := b.Gather(wt, idx, 1, []int{1}, []int{0}, []int{0}, []int{1, c.out}, false)
				if err != nil {
					return nil, err
				}
				w, _ = b.Transpose(g, 1, 0)
			}
			dot, err = b.DotGeneral(ps[0], []int{c.contrax}, nil, w, []int{1}, nil)
			return dot, err
		}
		compareBackends(t, fmt.Sprintf("grouped int4 dot %s", c.name), ref, cpu, shs, data, build)
		n := dot.(*node)
		if rewritten := n.aux.(*dotAux).int4Group == c.grp && n.aux.(*dotAux).int4Perm == c.perm && n.aux.(*dotAux).int4FP4 == fp4 && len(n.inputs) == len(shs); rewritten != c.rewritten {
			t.Errorf("%s: rewritten to read grouped int4: %v, want %v", c.name, rewritten, c.rewritten)
		}
		if !c.rewritten || c.contrax != len(c.x)-1 {
			continue
		}
		// With int8 activations (act=int8): the go backend's product of
		// the activations quantised and dequantised along the contracted
		// axis (the last here), in blocks of 32 in the order the product
		// reads them: held order where the columns are permuted.
		q8 := int8ActBackend(t)
		var quantize func([]float32) // FakeQuantizeQ8 as the rows lie
		if c.perm {
			quantize = func(xq []float32) {
				row := make([]float32, c.k)
				for off := 0; off < len(xq); off += c.k {
					for i, j := range inv {
						row[j] = xq[off+i]
					}
					kernels.FakeQuantizeQ8(row)
					for i, j := range inv {
						xq[off+i] = row[j]
					}
				}
			}
		}
		compareInt8Activations(t, "grouped int4 dot "+c.name, ref, q8, shs, data, build, quantize)
		if a := dot.(*node).aux.(*dotAux); !a.int4Q8 {
			t.Errorf("%s: act=int8 did not make the product quantise its activations", c.name)
		}
	}
}

// TestGroupedExpertDotInt4Groups builds nn.PairDot's grouped int4 form
// (the gathered packed values decoded through the pairs table, times the
// gathered scales, plus the gathered mins transposed): the cpu backend
// rewrites it into the grouped node reading the experts in place and
// agrees with the go backend, alone on an expert or not (GEMVs, GEMMs),
// with and without mins and int8 activations (the go backend's product
// of the rows quantised and dequantised per block of 32).
func TestGroupedExpertDotInt4Groups(t *testing.T) {
	ref, cpu := backendsForTest(t)
	q8 := int8ActBackend(t)
	for _, c := range []struct {
		name       string
		e, n, blks int
		grp        int
		ids        []int32
		mins       bool
		fp4        bool // nn.DequantizeFP4Groups: E2M1 codes, half-scales (NVFP4 experts)
	}{
		{"spread, mins", 5, 24, 4, 64, []int32{3, 0, 3, 4, 1, 3, 0}, true, false},
		{"one pair each", 4, 9, 2, 32, []int32{2, 0, 1}, false, false},
		{"all on one, mins", 4, 16, 4, 128, []int32{1, 1, 1, 1}, true, false},
		{"fp4 by 16, spread", 5, 24, 4, 16, []int32{3, 0, 3, 4, 1, 3, 0}, false, true},
		{"fp4 by 16, one pair each", 4, 9, 2, 16, []int32{2, 0, 1}, false, true},
	} {
		p, k := len(c.ids), c.blks*32
		ng := k / c.grp
		shs := []shapes.Shape{sh(dtypes.Float32, p, k), sh(dtypes.Uint8, c.e, c.n, c.blks, 16), sh(dtypes.Float32, c.e, c.n, ng),
			sh(dtypes.Int32, p, 1), sh(dtypes.Float32, c.e, ng, c.n)}
		r := rand.New(rand.NewPCG(61, uint64(p)))
		packed := make([]uint8, c.e*c.n*k/2)
		for i := range packed {
			packed[i] = uint8(r.IntN(256))
		}
		scales, mins := make([]float32, c.e*c.n*ng), make([]float32, c.e*ng*c.n)
		for i := range scales {
			scales[i] = float32(0.001 + r.Float64()/50)
			mins[i] = float32(r.Float64()/20 - 0.025)
		}
		data := []any{randFlat(r, shs[0], false), packed, scales, c.ids, mins}
		var dot backends.Op
		build := func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			gb, err := b.Gather(ps[1], ps[3], 1, []int{1, 2, 3}, []int{0}, []int{0}, []int{1, c.n, c.blks, 16}, false)
			if err != nil {
				return nil, err
			}
			gs, err := b.Gather(ps[2], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, c.n, ng}, false)
			if err != nil {
				return nil, err
			}
			pairs := int4PairTable
			if c.fp4 {
				pairs = nvfp4PairTable
			}
			pt, err := b.Constant(pairs[:], 256, 2)
			if err != nil {
				return nil, err
			}
			vals, err := gatherByBytes(b, pt, gb, 2, p*c.n*c.blks*16)
			if err != nil {
				return nil, err
			}
			vals, _ = b.Reshape(vals, p, c.n, ng, c.grp)
			group := func(s backends.Op) backends.Op {
				s, _ = b.Reshape(s, p, c.n, ng, 1)
				s, _ = b.BroadcastInDim(s, sh(dtypes.Float32, p, c.n, ng, c.grp), []int{0, 1, 2, 3})
				return s
			}
			w, _ := b.Mul(vals, group(gs))
			if c.mins {
				gm, err := b.Gather(ps[4], ps[3], 1, []int{1, 2}, []int{0}, []int{0}, []int{1, ng, c.n}, false)
				if err != nil {
					return nil, err
				}
				mt, _ := b.Transpose(gm, 0, 2, 1)
				w, _ = b.Add(w, group(mt))
			}
			w, _ = b.Reshape(w, p, c.n, k)
			dot, err = b.DotGeneral(ps[0], []int{1}, []int{0}, w, []int{2}, []int{0})
			return dot, err
		}
		compareBackends(t, c.name, ref, cpu, shs, data, build)
		n := dot.(*node)
		if n.op != opTypeGrouped || n.aux.(*groupedAux).int4Group != c.grp || n.aux.(*groupedAux).int4Mins != c.mins || n.aux.(*groupedAux).int4FP4 != c.fp4 {
			t.Errorf("%s: not rewritten into the grouped int4 node (op %v)", c.name, n.op)
			continue
		}
		compareInt8Activations(t, c.name, ref, q8, shs, data, build, nil)
	}
}
