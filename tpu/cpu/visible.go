package cpu

import (
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/tpu/cpu/kernels"
)

// Visible spans. Attention over a static KV cache computes scores against
// every slot and masks most of them: a decode row of a serving batch holds
// its sequence in slots [pad, next) of a cache bucket that fits the
// longest row, so a short sequence beside a long one reads the long one's
// length of keys and values, all to multiply them by a probability of 0.
// The mask says which slots each row sees, and the products can read only
// those.
//
// rewriteVisible finds attention's two products around a softmax that
// took in its scale and mask (rewriteSoftmax's scale-bias form):
//
//	scores = DotGeneral(q, keys)      [products, M, S]  (maybe ConvertDType'd)
//	probs  = softmax(scores·c + bias) [products, M, S]
//	out    = DotGeneral(probs, values) contracting S    (probs maybe ConvertDType'd)
//
// and gives both products the mask as one more input. At each run, a
// product's span is the union over its M rows of each bias row's span
// between its first and last unmasked slots (kernels.VisibleSpan): the
// scores product computes only those columns (the others are written 0:
// the softmax masks them whatever they hold), and the values product
// contracts only over them (the softmax gives every other slot a
// probability of 0, kernels.SoftmaxScaleBiasRows). What a slot inside the
// span holds is computed as before, so the result is the full product's up
// to the order of the sums.
//
// The contraction's span is widened to whole blocks of 16 slots (within
// the cache): the GEMV kernels take a row's last k mod 16 values in
// scalar code, which over 64 rows of values cost more than the slots
// saved (BenchmarkVisibleSpans: a bf16 cache with staggered rows took
// 480 µs with exact spans against 444 without spans). The slots this adds
// have probability 0, as in the full product, which reads them too. And
// the contraction is cut only where the span is at most 5/8 of the cache:
// cut rows are no longer contiguous, and the GEMV's prefetch, which walks
// the next rows' bytes as if they were, then fetches what the cut skips.
// 64 rows of 256 f32 slots, 1536 products from memory: 4.3–4.8 ms whole,
// 5.2–5.5 cut to 224, 4.7–4.8 to 192, 4.1–4.3 to 160, 3.2–3.7 to 128.
//
// The scores product is rewritten only when the softmax is its one reader
// (through a ConvertDType read by nothing else), since its columns outside
// the span are not the product's.

// visibleRewrites counts products given the mask (read by tests).
var visibleRewrites atomic.Int64

// visibleOff turns the rewrite off (set by BenchmarkVisibleSpans only).
var visibleOff bool

// Which axis of a product a visible span restricts (dotAux.visible).
const (
	visibleNone = iota
	visibleN    // the output's columns: the scores over the cache's slots
	visibleK    // the contraction: the probabilities times the values
)

// rewriteVisible runs after rewriteSoftmax, whose bypassed ops still read
// the scores: readers are counted among the nodes the outputs need.
func rewriteVisible(nodes, outputs []*node) {
	if visibleOff {
		return
	}
	users := liveUsers(nodes, outputs)
	for _, n := range nodes {
		if n.op != opTypeSoftmax || len(n.inputs) != 2 {
			continue
		}
		bias := n.inputs[1]
		s := n.inputs[0]
		if s.op == backends.OpTypeConvertDType && users[s.idx] == 1 {
			s = s.inputs[0]
		}
		if a, ok := plainProduct(s, n.shape, false); ok && users[s.idx] == 1 && bias.idx < s.idx {
			a.visible, a.rows = visibleN, n.shape
			s.aux = a
			s.inputs = append(slices.Clone(s.inputs), bias)
			visibleRewrites.Add(1)
		}
	}
	for _, v := range nodes {
		if v.op != backends.OpTypeDotGeneral {
			continue
		}
		p := v.inputs[0]
		if p.op == backends.OpTypeConvertDType {
			p = p.inputs[0]
		}
		if p.op != opTypeSoftmax || len(p.inputs) != 2 {
			continue
		}
		if a, ok := plainProduct(v, p.shape, true); ok {
			a.visible, a.rows = visibleK, p.shape
			v.aux = a
			v.inputs = append(slices.Clone(v.inputs), p.inputs[1])
			visibleRewrites.Add(1)
		}
	}
}

// liveUsers is countUsers over the nodes the outputs need.
func liveUsers(nodes, outputs []*node) []int {
	live := make([]bool, len(nodes))
	for _, o := range outputs {
		live[o.idx] = true
	}
	users := make([]int, len(nodes))
	for i := len(nodes) - 1; i >= 0; i-- {
		if live[i] {
			for _, in := range nodes[i].inputs {
				live[in.idx] = true
				users[in.idx]++
			}
		}
	}
	for _, o := range outputs {
		users[o.idx] += 2
	}
	return users
}

// plainProduct returns a copy of d's dotAux when d is an unquantised
// product (two inputs, f32 or 16-bit) or one over an int8 KV cache (three:
// the cache's scales, kvint8.go) laid out over rows, the softmax's
// shape [..., S]: as its output (scores: products of M rows by S
// columns), or, with contracting, as its lhs, contracted over S and read
// in place.
func plainProduct(d *node, rows shapes.Shape, contracting bool) (*dotAux, bool) {
	if d.op != backends.OpTypeDotGeneral {
		return nil, false
	}
	if dt := d.shape.DType; dt != dtypes.Float32 && !is16(dt) {
		return nil, false
	}
	a := *d.aux.(*dotAux)
	want := 2
	if a.kv8 != kv8None {
		want = 3 // the int8 cache's scales
	}
	if len(d.inputs) != want {
		return nil, false
	}
	if a.visible != visibleNone || a.int8Group > 0 || a.fp8B0 > 0 || a.int4 || a.int4Group > 0 {
		return nil, false
	}
	r := rows.Rank()
	if r == 0 {
		return nil, false
	}
	s := rows.Dimensions[r-1]
	if contracting {
		ls := d.inputs[0].shape
		if !slices.Equal(ls.Dimensions, rows.Dimensions) || a.k != s || !isIdentity(a.lhsPerm, ls.Dimensions) {
			return nil, false
		}
		return &a, a.b*a.m*a.k == rows.Size()
	}
	if !slices.Equal(d.shape.Dimensions, rows.Dimensions) || a.n != s {
		return nil, false
	}
	return &a, a.b*a.m*a.n == rows.Size()
}

// visibleSpans returns [lo, hi) per product of a's b products, each of
// a.m rows of a.rows (the softmax's shape) whose bias rows are bias's
// (broadcast to a.rows); nil when no bias row can skip a slot. A row
// masked everywhere counts as seeing every slot, as the softmax does.
// Each bias row is scanned once, however many products read it (a
// decode step's row serves every head).
func visibleSpans(a *dotAux, bias []float32, biasShape shapes.Shape) []int32 {
	dims := a.rows.Dimensions
	rank := len(dims)
	cols := dims[rank-1]
	if cols == 0 || a.b == 0 {
		return nil
	}
	row := make([]int32, 2*(len(bias)/cols)) // each bias row's span
	trimmed := false
	for r := range len(row) / 2 {
		l, h := kernels.VisibleSpan(bias[r*cols : (r+1)*cols])
		if l == h {
			l, h = 0, cols
		}
		row[2*r], row[2*r+1] = int32(l), int32(h)
		trimmed = trimmed || h-l < cols
	}
	if !trimmed {
		return nil
	}
	offs := biasOffsets(biasShape, a.rows)
	spans := make([]int32, 2*a.b)
	for p := range a.b {
		lo, hi := int32(cols), int32(0)
		for _, off := range offs[p*a.m : (p+1)*a.m] {
			r := 2 * (off / cols)
			lo, hi = min(lo, row[r]), max(hi, row[r+1])
		}
		if lo >= hi {
			lo, hi = 0, int32(cols)
		}
		spans[2*p], spans[2*p+1] = lo, hi
	}
	return spans
}
