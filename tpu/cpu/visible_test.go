package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
)

// TestVisibleSpans: pipeline/nn's attention over a cache whose rows hold
// their sequences at different pads (a serving batch) reads only each
// row's visible slots: with NaN in every key a row masks at either end and
// in every value outside its span widened to blocks of 16 (where the
// values product cuts it: at most 5/8 of the cache), the result is
// finite and equals the go backend's on the same caches holding zeros
// there, for a decode step and a prefill
// piece, grouped heads, f32, bf16 and int8 caches under f32 compute, and
// bf16 compute. Both products of each attention are rewritten, and under
// f32 compute both read an int8 cache in place (rewriteKVInt8; its
// poison is in the scales).
func TestVisibleSpans(t *testing.T) {
	ref, cpuB := backendsForTest(t)
	const b, kv, h, d, s = 3, 2, 4, 16, 64
	pads := []int32{0, 7, 40}
	for _, c := range []struct {
		name           string
		t, start       int
		compute, cache dtypes.DType
	}{
		{"decode f32", 1, 50, dtypes.Float32, dtypes.Float32},
		{"decode f32, bf16 cache", 1, 50, dtypes.Float32, dtypes.BFloat16},
		{"decode bf16", 1, 53, dtypes.BFloat16, dtypes.BFloat16},
		{"prefill f32", 5, 44, dtypes.Float32, dtypes.Float32},
		{"prefill f32, bf16 cache", 5, 44, dtypes.Float32, dtypes.BFloat16},
		{"decode f32, int8 cache", 1, 50, dtypes.Float32, dtypes.Int8},
		{"prefill f32, int8 cache", 5, 44, dtypes.Float32, dtypes.Int8},
		{"decode bf16, int8 cache", 1, 53, dtypes.BFloat16, dtypes.Int8},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(51, uint64(c.t)))
			q := make([]float32, b*c.t*h*d)
			keys := make([]float32, b*kv*s*d)   // [B, KV, S, D]
			values := make([]float32, b*kv*d*s) // [B, KV, D, S]
			for _, x := range [][]float32{q, keys, values} {
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
			}
			// Row bi sees slots [pads[bi], start+T): the keys of the rest
			// are poison for the engine, and so are its values outside
			// the span widened to blocks of 16 where that is at most 5/8
			// of the cache (row 2); values read with probability 0 (the
			// widening, the other rows' whole cache) are finite garbage.
			// The reference reads zeros there.
			cleanK, cleanV := append([]float32(nil), keys...), append([]float32(nil), values...)
			nan := float32(math.NaN())
			// An int8 cache holds codes (the values above, scaled to
			// ±127) with a scale per slot and head: the poison and the
			// garbage go into the scales, the codes stay.
			int8Cache := c.cache == dtypes.Int8
			var kCodes, vCodes []int8
			var kScales, vScales, cleanKS, cleanVS []float32
			if int8Cache {
				code := func(x []float32) []int8 {
					out := make([]int8, len(x))
					for i, v := range x {
						out[i] = int8(max(-127, min(127, math.Round(float64(v)*40))))
					}
					return out
				}
				kCodes, vCodes = code(keys), code(values)
				kScales, vScales = make([]float32, b*kv*s), make([]float32, b*kv*s)
				for i := range kScales {
					kScales[i], vScales[i] = 0.0225+0.005*r.Float32(), 0.0225+0.005*r.Float32() // about 1/40: the values above
				}
				cleanKS, cleanVS = append([]float32(nil), kScales...), append([]float32(nil), vScales...)
			}
			for bi := range b {
				lo, hi := int(pads[bi]), c.start+c.t
				w0, w1 := lo&^15, min(s, (hi+15)&^15)
				if 8*(w1-w0) > 5*s {
					w0, w1 = 0, s
				}
				for k := range kv {
					for slot := range s {
						if slot >= lo && slot < hi {
							continue
						}
						garbage := nan
						if slot >= w0 && slot < w1 {
							garbage = 1e3
						}
						if int8Cache {
							si := (bi*kv+k)*s + slot
							kScales[si], cleanKS[si] = nan, 0
							vScales[si], cleanVS[si] = garbage, 0
							continue
						}
						for j := range d {
							ki := ((bi*kv+k)*s+slot)*d + j
							vi := ((bi*kv+k)*d+j)*s + slot
							keys[ki], cleanK[ki] = nan, 0
							values[vi], cleanV[vi] = garbage, 0
						}
					}
				}
			}
			tensor := func(x []float32, dt dtypes.DType, dims ...int) *tensors.Tensor {
				if dt == dtypes.BFloat16 {
					bf := make([]bfloat16.BFloat16, len(x))
					for i, v := range x {
						bf[i] = bfloat16.FromFloat32(v)
					}
					return tensors.FromFlatDataAndDimensions(bf, dims...)
				}
				return tensors.FromFlatDataAndDimensions(x, dims...)
			}
			attend := func(in []*graph.Node) *graph.Node {
				step := lm.NewStep(b, c.t, s, in[3], in[4], true)
				cache := nn.KV{Keys: in[1], Values: in[2]}
				if int8Cache {
					cache.KeyScales, cache.ValueScales = in[5], in[6]
				}
				return nn.Attention(in[0], cache, nn.AttentionBias(step, 0), 0, 0)
			}
			exec := func(be backends.Backend, k, v []float32) []float64 {
				var kt, vt *tensors.Tensor
				if int8Cache { // k and v are the scales
					kt, vt = tensors.FromFlatDataAndDimensions(kCodes, b, kv, s, d), tensors.FromFlatDataAndDimensions(vCodes, b, kv, d, s)
				} else {
					kt, vt = tensor(k, c.cache, b, kv, s, d), tensor(v, c.cache, b, kv, d, s)
				}
				args := []any{tensor(q, c.compute, b, c.t, h, d), kt, vt,
					tensors.FromFlatDataAndDimensions(pads, b), tensors.FromScalar(int32(c.start))}
				if int8Cache {
					args = append(args, tensors.FromFlatDataAndDimensions(k, b, kv, s), tensors.FromFlatDataAndDimensions(v, b, kv, s))
				}
				out, err := graph.ExecOnce(be, attend, args...)
				if err != nil {
					t.Fatal(err)
				}
				if c.compute == dtypes.BFloat16 {
					return asFloat64(tensors.MustCopyFlatData[bfloat16.BFloat16](out))
				}
				return asFloat64(tensors.MustCopyFlatData[float32](out))
			}
			before, before8 := visibleRewrites.Load(), kvInt8Rewrites.Load()
			k, v, ck, cv := keys, values, cleanK, cleanV
			if int8Cache {
				k, v, ck, cv = kScales, vScales, cleanKS, cleanVS
			}
			got := exec(cpuB, k, v)
			if n := visibleRewrites.Load() - before; n != 2 {
				t.Errorf("%d products given the mask, want 2", n)
			}
			if n, want := kvInt8Rewrites.Load()-before8, map[bool]int64{true: 2}[int8Cache && c.compute == dtypes.Float32]; n != want {
				t.Errorf("%d products read the int8 cache in place, want %d", n, want)
			}
			for i, v := range got {
				if math.IsNaN(v) {
					t.Fatalf("element %d is NaN: a masked slot was read", i)
				}
			}
			compareFlat(t, c.name, c.compute, got, exec(ref, ck, cv))
		})
	}
}

// BenchmarkVisibleSpans times one layer's decode attention (pipeline/nn's,
// 32 rows, 12 heads of 64, 192 cache slots, the clock at the last) with
// every row holding the whole cache ("full") and with the rows' pads
// spread over 0..155 as a server's staggered streams hold them
// ("staggered"), with the spans ("on") and without them ("off"), for f32,
// bf16 and int8 caches under f32 compute.
func BenchmarkVisibleSpans(b *testing.B) {
	be, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	const rows, kv, d, s = 32, 12, 64, 192
	r := rand.New(rand.NewPCG(53, 54))
	for _, cache := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Int8} {
		for _, layout := range []string{"full", "staggered"} {
			pads := make([]int32, rows)
			if layout == "staggered" {
				for i := range pads {
					pads[i] = int32(i * 160 / rows)
				}
			}
			for _, on := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/on=%v", cache, layout, on)
				b.Run(name, func(b *testing.B) {
					visibleOff = !on
					defer func() { visibleOff = false }()
					mk := func(dt dtypes.DType, dims ...int) *tensors.Tensor {
						n := 1
						for _, x := range dims {
							n *= x
						}
						f := make([]float32, n)
						for i := range f {
							f[i] = float32(r.NormFloat64())
						}
						switch dt {
						case dtypes.BFloat16:
							bf := make([]bfloat16.BFloat16, n)
							for i, v := range f {
								bf[i] = bfloat16.FromFloat32(v)
							}
							return tensors.FromFlatDataAndDimensions(bf, dims...)
						case dtypes.Int8:
							q := make([]int8, n)
							for i, v := range f {
								q[i] = int8(max(-127, min(127, 40*v)))
							}
							return tensors.FromFlatDataAndDimensions(q, dims...)
						}
						return tensors.FromFlatDataAndDimensions(f, dims...)
					}
					exec, err := graph.NewExec(be, func(in []*graph.Node) *graph.Node {
						step := lm.NewStep(rows, 1, s, in[3], in[4], true)
						c := nn.KV{Keys: in[1], Values: in[2]}
						if cache == dtypes.Int8 {
							c.KeyScales, c.ValueScales = in[5], in[6]
						}
						return nn.Attention(in[0], c, nn.AttentionBias(step, 0), 0, 0)
					})
					if err != nil {
						b.Fatal(err)
					}
					args := []any{mk(dtypes.Float32, rows, 1, kv, d), mk(cache, rows, kv, s, d), mk(cache, rows, kv, d, s),
						tensors.FromFlatDataAndDimensions(pads, rows), tensors.FromScalar(int32(s - 1))}
					if cache == dtypes.Int8 {
						args = append(args, mk(dtypes.Float32, rows, kv, s), mk(dtypes.Float32, rows, kv, s))
					}
					if _, err := exec.Exec(args...); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						out, err := exec.Exec(args...)
						if err != nil {
							b.Fatal(err)
						}
						out[0].FinalizeAll()
					}
				})
			}
		}
	}
}
