package nn

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/pipeline/lm"
)

// quantizeKV gives, per position along every axis but the quantised one,
// the scale max|x|/127 and codes round(x/scale) (half away from zero, as
// the go backend rounds), so
// that codes·scales is x to within half a scale; a position of zeros has
// scale and codes 0. Checked along both axes the caches quantise.
func TestQuantizeKV(t *testing.T) {
	const a, b, c = 2, 3, 5
	x := make([]float32, a*b*c)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7)) * float32(1+i%4) * 3
	}
	for i := range c { // x[0, 1, :] is zero
		x[b*0*c+1*c+i] = 0
	}
	for _, axis := range []int{1, 2} {
		out := execGraph(t, func(in []*Node) []*Node {
			codes, scales := quantizeKV(in[0], axis)
			if codes.DType() != dtypes.Int8 {
				t.Fatalf("codes in %s, want int8", codes.DType())
			}
			return []*Node{ConvertDType(codes, dtypes.Float32), scales}
		}, tensors.FromFlatDataAndDimensions(x, a, b, c))
		codes, scales := out[0], out[1]
		dims := []int{a, b, c}
		strides := []int{b * c, c, 1}
		if len(scales) != a*b*c/dims[axis] {
			t.Fatalf("axis %d: %d scales, want %d", axis, len(scales), a*b*c/dims[axis])
		}
		// Each scale covers the positions differing only on axis.
		for i := range x {
			idx := []int{i / (b * c), i / c % b, i % c}
			var si int
			for k, n := 0, 0; k < 3; k++ {
				if k != axis {
					si = si*dims[k] + idx[k]
					n++
				}
			}
			var amax float32
			for j := range dims[axis] {
				p := i + (j-idx[axis])*strides[axis]
				amax = max(amax, float32(math.Abs(float64(x[p]))))
			}
			scale := scales[si] // max/127, to f32 rounding (the graph may multiply by 1/127)
			if math.Abs(float64(scale-amax/127)) > 1e-7*float64(amax) {
				t.Fatalf("axis %d: scale %d = %g, want %g", axis, si, scale, amax/127)
			}
			want := float32(0)
			if scale > 0 {
				want = float32(math.Round(float64(x[i] / scale)))
			}
			if codes[i] != want {
				t.Fatalf("axis %d: code %d = %g, want %g (x %g, scale %g)", axis, i, codes[i], want, x[i], scale)
			}
			if d := math.Abs(float64(codes[i]*scale - x[i])); d > float64(scale)/2*1.0001 {
				t.Fatalf("axis %d: code·scale %g is %g from x %g, over half the scale %g", axis, codes[i]*scale, d, x[i], scale)
			}
		}
	}
}

// Attention over int8 caches (KV with scales) is attention over the f32
// caches holding what the codes and scales stand for: WriteKV quantises
// each new key and value per slot and head, and Attention dequantises
// the keys over their last axis and the transposed values over their
// third. A scale read along the wrong axis fails it.
func TestAttentionInt8KV(t *testing.T) {
	const bsz, tt, h, kv, d, s = 1, 3, 4, 2, 8, 6
	q := values(bsz*tt*h*d, 0.05)
	k, v := make([]float32, bsz*tt*kv*d), make([]float32, bsz*tt*kv*d)
	for i := range k {
		k[i] = float32(math.Cos(float64(i)*0.9)) * float32(1+i%3)
		v[i] = float32(math.Sin(float64(i)*1.3)) * float32(1+i%5)
	}
	pads := func() *tensors.Tensor { return tensors.FromFlatDataAndDimensions([]int32{0}, bsz) }
	start := func() *tensors.Tensor { return tensors.FromScalar(int32(1)) }
	step := func(in []*Node) *lm.Step { return lm.NewStep(bsz, tt, s, in[0], in[1], false) }
	// The int8 caches after the write, and attention over them.
	out := execGraph(t, func(in []*Node) []*Node {
		st := step(in)
		g := in[0].Graph()
		c := KV{
			Keys:        Zeros(g, shapes.Make(dtypes.Int8, bsz, kv, s, d)),
			Values:      Zeros(g, shapes.Make(dtypes.Int8, bsz, kv, d, s)),
			KeyScales:   Zeros(g, shapes.Make(dtypes.Float32, bsz, kv, s)),
			ValueScales: Zeros(g, shapes.Make(dtypes.Float32, bsz, kv, s)),
		}
		c = WriteKV(c, in[3], in[4], st)
		o := Attention(in[2], c, AttentionBias(st, 0), 0, 0)
		return []*Node{o, ConvertDType(c.Keys, dtypes.Float32), ConvertDType(c.Values, dtypes.Float32), c.KeyScales, c.ValueScales}
	}, pads(), start(), tensors.FromFlatDataAndDimensions(q, bsz, tt, h, d),
		tensors.FromFlatDataAndDimensions(k, bsz, tt, kv, d), tensors.FromFlatDataAndDimensions(v, bsz, tt, kv, d))
	got, kc, vc, ks, vs := out[0], out[1], out[2], out[3], out[4]
	// The caches' values: keys [B, KV, S, D]·ks[B, KV, S], values [B, KV, D, S]·vs[B, KV, S].
	keys, vals := make([]float32, len(kc)), make([]float32, len(vc))
	for hh := range kv {
		for sl := range s {
			for j := range d {
				ki := (hh*s+sl)*d + j
				keys[ki] = kc[ki] * ks[hh*s+sl]
				vi := (hh*d+j)*s + sl
				vals[vi] = vc[vi] * vs[hh*s+sl]
			}
		}
	}
	for sl := range s {
		if written := sl >= 1 && sl < 1+tt; (ks[sl] != 0) != written {
			t.Fatalf("key scale of slot %d = %g (written: %v)", sl, ks[sl], written)
		}
	}
	want := execGraph(t, func(in []*Node) []*Node {
		st := step(in)
		return []*Node{Attention(in[2], KV{Keys: in[3], Values: in[4]}, AttentionBias(st, 0), 0, 0)}
	}, pads(), start(), tensors.FromFlatDataAndDimensions(q, bsz, tt, h, d),
		tensors.FromFlatDataAndDimensions(keys, bsz, kv, s, d), tensors.FromFlatDataAndDimensions(vals, bsz, kv, d, s))[0]
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("attention over int8 caches [%d] = %g, over their f32 values %g", i, got[i], want[i])
		}
	}
	// And the codes are close to what was written (the write's slots 1..3).
	for hh := range kv {
		for ti := range tt {
			for j := range d {
				orig := k[(ti*kv+hh)*d+j]
				if diff := math.Abs(float64(keys[(hh*s+1+ti)*d+j] - orig)); diff > float64(ks[hh*s+1+ti])/2*1.0001 {
					t.Fatalf("key head %d token %d [%d]: cached %g, written %g", hh, ti, j, keys[(hh*s+1+ti)*d+j], orig)
				}
			}
		}
	}
}

// TestChunkedAttentionBias checks Llama 4's chunked mask on a batch of
// two rows, the first left-padded by 2, at a step of 7 queries from slot
// 1 over a cache of 9 slots, chunks of 3 positions: each query sees the
// slots of its own chunk of its row's positions up to itself; a padding
// query only its own slot. A mask over slots instead of positions
// (ignoring the padding) would differ on the padded row.
func TestChunkedAttentionBias(t *testing.T) {
	const bsz, tt, s, chunk, start = 2, 7, 9, 3, 1
	pads := []int32{2, 0}
	out := execGraph(t, func(in []*Node) []*Node {
		st := lm.NewStep(bsz, tt, s, in[0], in[1], false)
		return []*Node{ChunkedAttentionBias(st, chunk), TemperatureScale(st, 2, 0.5, 1), TemperatureScale(st, 3, 0.25, 0)}
	}, tensors.FromFlatDataAndDimensions(pads, bsz), tensors.FromScalar(int32(start)))
	bias, temp, temp0 := out[0], out[1], out[2]
	for b := range bsz {
		for q := range tt {
			slot := start + q
			pos := slot - int(pads[b])
			for k := range s {
				want := k <= slot && k >= int(pads[b]) && k-int(pads[b]) >= pos-pos%chunk
				if pos < 0 {
					want = k == slot
				}
				got := bias[(b*tt+q)*s+k] == 0
				if got != want {
					t.Errorf("row %d query slot %d (position %d), key slot %d: visible %v, want %v", b, slot, pos, k, got, want)
				}
			}
			wantT := math.Log1p(math.Floor(float64(max(pos, 0)+1)/2))*0.5 + 1
			if d := math.Abs(float64(temp[b*tt+q]) - wantT); d > 1e-6 {
				t.Errorf("row %d position %d: temperature %g, want %g", b, pos, temp[b*tt+q], wantT)
			}
			// Ministral 3's: 1 + 0.25·log(1 + floor(position/3)).
			wantT0 := 1 + 0.25*math.Log(1+math.Floor(float64(max(pos, 0))/3))
			if d := math.Abs(float64(temp0[b*tt+q]) - wantT0); d > 1e-6 {
				t.Errorf("row %d position %d: temperature (shift 0) %g, want %g", b, pos, temp0[b*tt+q], wantT0)
			}
		}
	}
}
