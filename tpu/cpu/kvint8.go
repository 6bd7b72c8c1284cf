package cpu

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// int8 KV caches. pipeline/nn holds a KV cache in int8 with one f32 scale
// per slot and head (compile.Options.KVDType int8) and attention reads it
// dequantised,
//
//	Mul(ConvertDType(q int8 [B.., N, K], f32), scales f32 [B.., N, 1] or [B.., 1, K])
//
// keys [B, KV, S, D] with their scales along the product's rows (N = S,
// the scores' columns) and the transposed values [B, KV, D, S] with
// theirs along its contraction (K = S). rewriteKVInt8 finds that form as
// the right operand of an f32 batched DotGeneral in the NT layout; the
// product then reads the int8 cache directly (kernels.GemmInt8NT, the
// weight-only int8 kernels, one scale a row: the key scales, or ones),
// with the value scales multiplied into a copy of the probabilities
// first, and the f32 cache is never made. It stays a plain product to
// rewriteVisible (visible.go), which bounds it by the mask as it does the
// f32 and 16-bit caches' products. The sums are the f32 cache's up to
// their order.

// Where a KV product's scales run (dotAux.kv8).
const (
	kv8None = iota
	kv8Rows // one scale per rhs row (N): keys
	kv8Cols // one scale per contraction column (K): the transposed values
)

// kvInt8Cache matches the dequantised cache at r for a product of a's
// layout (NT, rhs [B.., N, K] in place) and returns the int8 cache, the
// scales and where they run. The Mul's operands may come in either order,
// and the scales through a BroadcastInDim to the cache's shape.
func kvInt8Cache(a *dotAux, r *node) (q, scales *node, kind int, ok bool) {
	if r.op != backends.OpTypeMul || r.shape.DType != dtypes.Float32 || r.shape.Rank() < 2 {
		return nil, nil, kv8None, false
	}
	rank := r.shape.Rank()
	for _, k := range [][2]int{{0, 1}, {1, 0}} {
		c, b := r.inputs[k[0]], r.inputs[k[1]]
		if c.op != backends.OpTypeConvertDType || c.inputs[0].shape.DType != dtypes.Int8 {
			continue
		}
		s := b // the backend's Mul broadcasts an axis of 1 itself
		if b.op == backends.OpTypeBroadcastInDim && slices.Equal(b.aux.([]int), iotaInts(rank)) {
			s = b.inputs[0]
		}
		if s.shape.DType != dtypes.Float32 || s.shape.Rank() != rank {
			continue
		}
		d, sd := r.shape.Dimensions, s.shape.Dimensions
		// One N and one K axis (the rest are the batch), and the scales
		// the cache's shape but for one of the two.
		if a.n != d[rank-2] || a.k != d[rank-1] || !slices.Equal(sd[:rank-2], d[:rank-2]) {
			continue
		}
		switch {
		case sd[rank-2] == d[rank-2] && sd[rank-1] == 1:
			return c.inputs[0], s, kv8Rows, true
		case sd[rank-2] == 1 && sd[rank-1] == d[rank-1]:
			return c.inputs[0], s, kv8Cols, true
		}
	}
	return nil, nil, kv8None, false
}

// rewriteKVInt8 points f32 DotGenerals at int8 KV caches where the right
// operand is the dequantisation form, in the NT layout.
func rewriteKVInt8(n *node) {
	if n.op != backends.OpTypeDotGeneral || n.shape.DType != dtypes.Float32 || len(n.inputs) != 2 {
		return
	}
	a, r := n.aux.(*dotAux), n.inputs[1]
	if a.rhsFrom16 || a.int8Group > 0 || a.kv8 != kv8None || !isIdentity(a.rhsNT, r.shape.Dimensions) {
		return
	}
	q, scales, kind, ok := kvInt8Cache(a, r)
	if !ok {
		return
	}
	b := *a
	b.kv8 = kind
	n.aux = &b
	n.inputs = []*node{n.inputs[0], q, scales}
	kvInt8Rewrites.Add(1)
}

// kvInt8Rewrites counts products given an int8 cache (read by tests).
var kvInt8Rewrites atomic.Int64

// dotKVInt8 is the product with an int8 cache q [B, N, K] and its scales
// (a.kv8: [B, N] or [B, K]); spans as dotF32's.
func dotKVInt8(a *dotAux, out, lhs []float32, q []int8, scales []float32, spans []int32) {
	M, N, K := a.m, a.n, a.k
	if K == 0 {
		clear(out)
		return
	}
	var one []float32 // the row scales of the values' products
	if a.kv8 == kv8Cols {
		one = ones(N)
	}
	eachProduct(a, func(bi int) {
		lo, ro, oo := bi*M*K, bi*N*K, bi*M*N
		x := lhs[lo : lo+M*K]
		rowScales := one
		if a.kv8 == kv8Rows {
			rowScales = scales[bi*N : (bi+1)*N]
		} else {
			buf := permPool.Get().(*[]float32)
			defer permPool.Put(buf)
			if cap(*buf) < M*K {
				*buf = make([]float32, M*K)
			}
			x = (*buf)[:M*K]
			col := scales[bi*K : (bi+1)*K]
			for i := range M {
				xi, li := x[i*K:(i+1)*K], lhs[lo+i*K:lo+(i+1)*K]
				for p, s := range col {
					xi[p] = li[p] * s
				}
			}
		}
		spanned(a, spans, bi, out[oo:], func(n, k, dn, dk int) {
			kernels.GemmInt8NT(M, n, k, x[dk:], K, q[ro+dn*K+dk:], K, rowScales[dn:], k, out[oo+dn:], N)
		})
	})
}

// ones returns n ones (shared: read only).
func ones(n int) []float32 {
	onesMu.Lock()
	defer onesMu.Unlock()
	if len(onesBuf) < n {
		onesBuf = make([]float32, max(n, 2*len(onesBuf), 1024))
		for i := range onesBuf {
			onesBuf[i] = 1
		}
	}
	return onesBuf[:n]
}

var (
	onesMu  sync.Mutex
	onesBuf []float32
)

// Writing an int8 cache: pipeline/nn quantises each new key and value of
// a head as
//
//	ConvertDType(Round(Div(x f32, d f32)), int8)
//
// d being x's shape with one axis of 1 (the scales, broadcast by the
// backend's Div). rewriteQuantizeKV runs that as one node, a pass over x
// writing the int8 codes, where it was three passes and two f32
// temporaries. Each value is the same: the f32 quotient, rounded half
// away from zero as the Round op rounds.

const opTypeQuantizeKV = backends.OpTypeLast + 105

// quantizeKVAux: x's shape as outer × mid × inner around d's axis of 1.
type quantizeKVAux struct {
	outer, mid, inner int
}

// rewriteQuantizeKV finds the form above at every ConvertDType to int8.
func rewriteQuantizeKV(n *node) {
	if n.op != backends.OpTypeConvertDType || n.shape.DType != dtypes.Int8 || n.aliasesInput {
		return
	}
	r := n.inputs[0]
	if r.op != backends.OpTypeRound || r.shape.DType != dtypes.Float32 {
		return
	}
	dv := r.inputs[0]
	if dv.op != backends.OpTypeDiv || len(dv.inputs) != 2 {
		return
	}
	x, d := dv.inputs[0], dv.inputs[1]
	xs, ds := x.shape, d.shape
	if xs.DType != dtypes.Float32 || ds.DType != dtypes.Float32 || !slices.Equal(xs.Dimensions, n.shape.Dimensions) || ds.Rank() != xs.Rank() {
		return
	}
	axis := -1
	for i, dim := range ds.Dimensions {
		switch {
		case dim == xs.Dimensions[i]:
		case dim == 1 && axis < 0:
			axis = i
		default:
			return
		}
	}
	if axis < 0 {
		return
	}
	a := quantizeKVAux{outer: 1, mid: xs.Dimensions[axis], inner: 1}
	for _, dim := range xs.Dimensions[:axis] {
		a.outer *= dim
	}
	for _, dim := range xs.Dimensions[axis+1:] {
		a.inner *= dim
	}
	n.op, n.fn, n.aux = opTypeQuantizeKV, execQuantizeKV, a
	n.inputs = []*node{x, d}
	quantizeKVRewrites.Add(1)
}

// quantizeKVRewrites counts rewritten quantisations (read by tests).
var quantizeKVRewrites atomic.Int64

func execQuantizeKV(st *execState, n *node, in []*slot) (*slot, error) {
	a := n.aux.(quantizeKVAux)
	x, d := in[0].data.([]float32), in[1].data.([]float32)
	out := st.alloc(n.shape)
	q := out.data.([]int8)
	kernels.Parallel(a.outer, max(1, (1<<14)/max(1, a.mid*a.inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			if a.inner == 1 { // keys: a row of the head dimension per scale
				dv := d[o]
				for i, v := range x[o*a.mid : (o+1)*a.mid] {
					q[o*a.mid+i] = int8(math.Round(float64(v / dv)))
				}
				continue
			}
			dd := d[o*a.inner : (o+1)*a.inner]
			for m := range a.mid {
				base := (o*a.mid + m) * a.inner
				xr, qr := x[base:base+a.inner], q[base:base+a.inner]
				for i, v := range xr {
					qr[i] = int8(math.Round(float64(v / dd[i])))
				}
			}
		}
	})
	return out, nil
}
