package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/pipeline/lm"
)

// DeepSeek Sparse Attention (DSA, DeepSeek-V3.2: "DeepSeek-V3.2:
// Pushing the Frontier of Open Large Language Models", DeepSeek-AI, 2025;
// transformers' models/deepseek_v32, DeepseekV32Indexer): a lightning
// indexer scores every query against the keys it may see, and the
// attention reads only the index_topk best of them. The indexer keeps a
// cache of its own keys, index_head_dim a token and layer; its scores are
//
//	I(t, s) = Σ_h w_th · relu(q_th · k_s) · index_head_dim^-0.5
//
// with q from the query's low-rank latent (wq_b), k = LayerNorm(wk x),
// the rotary on their first qk_rope_head_dim dims (rotate-half), and the
// head weights w = weights_proj(x) · index_n_heads^-0.5, all in float32.
// DeepSeek's own kernels score in FP8 after a Hadamard rotation, which
// leaves the dot products as they are but rounds them: transformers
// scores in float32 as here.

// IndexerCacheState returns the StateSpec of an indexer's key cache of
// width dim, [B, 1, cacheLen, dim] in the compute dtype (not a KV cache:
// int8 KV caches leave it as it is).
func IndexerCacheState(batch, cacheLen, dim int) lm.StateSpec {
	return lm.StateSpec{Name: "indexer", Shape: []int{batch, 1, cacheLen, dim}, SlotAxis: KeyCacheAxis}
}

// WriteIndexerKeys stores keys k [B, T, D] into the indexer cache
// [B, 1, S, D] at the step's slots.
func WriteIndexerKeys(cache, k *Node, step *lm.Step) *Node {
	cache, _ = writeCache(cache, nil, InsertAxes(k, 1), KeyCacheAxis, step)
	return cache
}

// IndexerKeep returns which keys each query attends to [B, T, S]: the
// visible keys (by bias, the step's attention bias [B, 1, T, 1, S] as
// AttentionBias makes it) among its topk best by the indexer's scores.
// q [B, T, H, D] are the indexer's rotated queries, cache its keys
// [B, 1, S', D] (the first S slots read), w [B, T, H] its head weights
// (float32, already scaled). It returns nil when no query can see more
// than topk keys (S <= topk): every visible key is among the best. sure
// is TopKMask's: the kept keys above the k-th's band, fewer than topk.
func IndexerKeep(q, cache, w, bias *Node, topk int) (keep, sure *Node) {
	bd := bias.Shape().Dimensions
	b, t, s := bd[0], bd[2], bd[4]
	if s <= topk {
		return nil, nil
	}
	f32 := dtypes.Float32
	d := q.Shape().Dimensions[3]
	keys := Reshape(readCache(cache, nil, KeyCacheAxis, s, f32), b, s, d)                    // [B, S, D]
	scores := DotGeneral(ConvertDType(q, f32), []int{3}, []int{0}, keys, []int{2}, []int{0}) // [B, T, H, S]
	scores = Mul(Max(scores, ScalarZero(q.Graph(), f32)), InsertAxes(w, -1))                 // relu, weighted
	index := MulScalar(ReduceSum(scores, 2), 1/math.Sqrt(float64(d)))                        // [B, T, S]
	visible := GreaterThan(Reshape(bias, b, t, s), Scalar(q.Graph(), f32, -1e29))
	return TopKMask(index, visible, topk, topKBits)
}

// KeepBias is the attention bias [B, 1, T, 1, S] of keep [B, T, S]: 0
// where a query attends, a large negative number elsewhere.
func KeepBias(keep *Node) *Node {
	d := keep.Shape().Dimensions
	b, t, s := d[0], d[1], d[2]
	g := keep.Graph()
	f32 := dtypes.Float32
	zero, masked := BroadcastToDims(ScalarZero(g, f32), b, t, s), BroadcastToDims(Scalar(g, f32, -1e30), b, t, s)
	return Reshape(Where(keep, zero, masked), b, 1, t, 1, s)
}

// SparseLatentAttention is LatentAttention over each query's kept keys
// only (keep [B, T, S]; sure, the kept keys that must stay, fewer than k
// a query): the kept slots are numbered, sure ones first and then the
// others, each in order of position (exclusive running counts),
// scattered into a table of k slot numbers a query, and the latent rows
// they name gathered, [B, T, k, D], so that each query's scores and
// values read k rows of the cache instead of S. A query keeping fewer
// than k keys masks the table's empty entries; one keeping more (scores
// tied with the k-th: keep's keys that sure lacks) keeps every sure key
// and fills the rest with the tied ones first by position. The sum is
// LatentAttention's under KeepBias(keep) otherwise. An int8 cache is
// gathered as stored and only the gathered rows dequantized. q
// [B, T, H, D], the result [B, T, H, valueDims].
func SparseLatentAttention(q *Node, c Latent, keep, sure *Node, k int, scale float64, valueDims int) *Node {
	kd := keep.Shape().Dimensions
	b, t, s := kd[0], kd[1], kd[2]
	g := q.Graph()
	f32, i32 := dtypes.Float32, dtypes.Int32
	dtype := q.DType()
	sure = And(keep, sure)
	tied := And(keep, LogicalNot(sure))
	sf, tf := ConvertDType(sure, f32), ConvertDType(tied, f32)
	sureBefore := Sub(scanSum(sf, 2), sf)                                       // sure keys before each slot, [B, T, S]
	tiedBefore := Add(Sub(scanSum(tf, 2), tf), ReduceAndKeep(sf, ReduceSum, 2)) // after every sure key
	rank := Where(sure, sureBefore, tiedBefore)                                 // [B, T, S]
	kf := Scalar(g, f32, float64(k))
	slot := Where(And(keep, LessThan(rank, kf)), rank, kf) // k: the spill entry
	shape := shapes.Make(i32, b, t, s)
	at := Concatenate([]*Node{InsertAxes(Iota(g, shape, 0), -1), InsertAxes(Iota(g, shape, 1), -1), InsertAxes(ConvertDType(slot, i32), -1)}, -1)
	slotPlusOne := AddScalar(Iota(g, shape, 2), 1) // 0 marks an empty entry
	table := ScatterSum(Zeros(g, shapes.Make(i32, b, t, k+1)), Reshape(at, b*t*s, 3), Reshape(slotPlusOne, b*t*s), false, false)
	table = SliceAxis(table, 2, AxisRange(0, k)) // [B, T, k]
	valid := GreaterThan(table, ScalarZero(g, i32))
	rowOf := Reshape(Add(Max(AddScalar(table, -1), ScalarZero(g, i32)), Reshape(MulScalar(Iota(g, shapes.Make(i32, b), 0), s), b, 1, 1)), b*t*k, 1)
	d := c.Cache.Shape().Dimensions[3]
	var rows *Node
	if c.Scales != nil { // gather the int8 rows and their scales, then dequantize those
		codes := Reshape(SliceAxis(c.Cache, KeyCacheAxis, AxisRange(0, s)), b*s, d)
		scales := Reshape(SliceAxis(c.Scales, 2, AxisRange(0, s)), b*s)
		rows = Mul(ConvertDType(Gather(codes, rowOf), f32), InsertAxes(Gather(scales, rowOf), -1))
		rows = Reshape(ConvertDType(rows, dtype), b, t, k, d)
	} else {
		cache := Reshape(readCache(c.Cache, nil, KeyCacheAxis, s, dtype), b*s, d) // [B·S, D]
		rows = Reshape(Gather(cache, rowOf), b, t, k, d)                          // [B, T, k, D]
	}
	scores := DotGeneral(q, []int{3}, []int{0, 1}, rows, []int{3}, []int{0, 1})                                // [B, T, H, k]
	mask := Where(valid, ZerosLike(ConvertDType(valid, f32)), BroadcastToDims(Scalar(g, f32, -1e30), b, t, k)) // [B, T, k]
	scores = Add(MulScalar(ConvertDType(scores, f32), scale), InsertAxes(mask, 2))
	probs := ConvertDType(Softmax(scores, -1), dtype)
	values := SliceAxis(rows, 3, AxisRange(0, valueDims))                          // [B, T, k, dv]
	return DotGeneral(probs, []int{3}, []int{0, 1}, values, []int{2}, []int{0, 1}) // [B, T, H, dv]
}

// topKBits is how finely TopKMask resolves the k-th score: to 2^-32 of
// the spread of a row's visible scores. Two scores closer than that are
// within float32's own rounding of each other (2^-24 of their size, and
// the spread is rarely 256 times the size of the scores at the
// boundary), so which of them the top k keeps is noise either way; the
// mask then keeps both.
const topKBits = 32

// TopKMask returns the mask keep [..., S] of the k highest of scores
// [..., S] (float32) among the visible ones (bool, the same shape), every
// visible score when fewer than k are, and sure, the kept scores above
// the k-th's band (fewer than k: keep less the scores within the
// resolution of the k-th, which a gather of k may have to drop; every
// visible score when fewer than k are visible). The k-th highest visible score v is
// searched for between the row's lowest and highest visible score:
// each round tests ways-1 thresholds evenly spaced in the interval
// (the highest τ with at least k visible scores >= τ stays in it), until
// bits bits of the interval are resolved. The mask holds the visible
// scores >= the interval's low end: the k highest, and any within the
// resolution of the k-th (torch.topk would keep some of such ties, in an
// order it does not define). A sort would need a sort op that XLA and
// the go backend do not share. Rows few and short (a decode step) take
// 16 ways, 8 rounds, so that the graph has few ops; many or long ones
// (a prefill), where each pass over the scores costs more than an op,
// bisect (2 ways, 32 rounds), which compares each score least often.
func TopKMask(scores, visible *Node, k, bits int) (keep, sure *Node) {
	if k <= 0 || bits <= 0 {
		panic(fmt.Errorf("TopKMask: k %d and bits %d must be positive", k, bits))
	}
	g := scores.Graph()
	f32 := dtypes.Float32
	dims := scores.Shape().Dimensions
	big := BroadcastToDims(Scalar(g, f32, math.MaxFloat32), dims...)
	ways, step := 2, 1 // step: bits resolved a round
	if scores.Shape().Size() <= 1<<14 {
		ways, step = 16, 4
	}
	kf := Scalar(g, f32, float64(k))
	vis := Where(visible, scores, Neg(big)) // the hidden scores below every threshold
	lo := ReduceMin(Where(visible, scores, big), -1)
	hi := ReduceMax(vis, -1)
	fracs := make([]float32, ways-1)
	for j := range fracs {
		fracs[j] = float32(j+1) / float32(ways)
	}
	frac := ExpandLeftToRank(Const(g, fracs), len(dims)) // [1, ..., ways-1]
	count := func(tau *Node) *Node {                     // [..., n] visible scores >= each of tau [..., n]
		ge := GreaterOrEqual(InsertAxes(vis, -2), InsertAxes(tau, -1)) // [..., n, S]
		return ReduceSum(ConvertDType(ge, f32), -1)
	}
	for r := 0; r < (bits+step-1)/step; r++ {
		thr := Add(InsertAxes(lo, -1), Mul(InsertAxes(Sub(hi, lo), -1), frac)) // [..., ways-1], increasing
		ok := GreaterOrEqual(count(thr), kf)                                   // a prefix of trues
		lo = ReduceMax(Where(ok, thr, BroadcastToDims(InsertAxes(lo, -1), thr.Shape().Dimensions...)), -1)
		hi = ReduceMin(Where(ok, BroadcastToDims(InsertAxes(hi, -1), thr.Shape().Dimensions...), thr), -1)
	}
	// Fewer than k visible scores are >= hi unless k tie at hi itself:
	// then the k-th is hi, and the sure ones are those above it.
	atHi := GreaterOrEqual(Squeeze(count(InsertAxes(hi, -1)), -1), kf)
	tau := Where(atHi, hi, lo)
	enough := GreaterOrEqual(ReduceSum(ConvertDType(visible, f32), -1), kf)
	none := Neg(BroadcastToDims(Scalar(g, f32, math.MaxFloat32), tau.Shape().Dimensions...))
	tau = Where(enough, tau, none)
	keep = And(visible, GreaterOrEqual(scores, InsertAxes(tau, -1)))
	row := func(x *Node) *Node { return BroadcastToDims(InsertAxes(x, -1), dims...) } // [...] -> [..., S]
	above := Where(row(atHi), GreaterThan(scores, InsertAxes(hi, -1)), GreaterOrEqual(scores, InsertAxes(hi, -1)))
	sure = Where(row(enough), And(visible, above), visible)
	return keep, sure
}
