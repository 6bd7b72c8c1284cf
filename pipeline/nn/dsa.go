package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

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

// IndexerBias returns the attention bias [B, 1, T, 1, S] (as
// AttentionBias makes it) with every visible key outside the query's
// topk best by the indexer's scores masked: q [B, T, H, D] the indexer's
// rotated queries, cache the indexer's keys [B, 1, S', D] (the first S
// slots read), w [B, T, H] its head weights (float32, already scaled),
// bias the step's attention bias. When no query can see more than topk
// keys (S <= topk) the bias is returned as it is: every visible key is
// among the best.
func IndexerBias(q, cache, w, bias *Node, topk int) *Node {
	bd := bias.Shape().Dimensions
	b, t, s := bd[0], bd[2], bd[4]
	if s <= topk {
		return bias
	}
	f32 := dtypes.Float32
	d := q.Shape().Dimensions[3]
	keys := Reshape(readCache(cache, nil, KeyCacheAxis, s, f32), b, s, d)                    // [B, S, D]
	scores := DotGeneral(ConvertDType(q, f32), []int{3}, []int{0}, keys, []int{2}, []int{0}) // [B, T, H, S]
	scores = Mul(Max(scores, ScalarZero(q.Graph(), f32)), InsertAxes(w, -1))                 // relu, weighted
	index := MulScalar(ReduceSum(scores, 2), 1/math.Sqrt(float64(d)))                        // [B, T, S]
	visible := GreaterThan(Reshape(bias, b, t, s), Scalar(q.Graph(), f32, -1e29))
	keep := And(visible, TopKMask(index, visible, topk, topKBisections))
	return Reshape(Where(keep, ZerosLike(index), BroadcastToDims(Scalar(q.Graph(), f32, -1e30), b, t, s)), b, 1, t, 1, s)
}

// topKBisections is how many times TopKMask halves its interval: from the
// spread of a row's visible scores, 64 halvings leave an interval 2^-64
// of it, past float32's resolution at any score near the boundary.
const topKBisections = 64

// TopKMask returns the mask [..., S] of the k highest of scores [..., S]
// (float32) among the visible ones (bool, the same shape), every visible
// score when fewer than k are. The k-th highest visible score v is found
// by bisection between the row's lowest and highest visible score
// (iters halvings: the highest τ with at least k visible scores >= τ),
// and the mask holds the visible scores >= v: the k highest, and any
// that equal the k-th (torch.topk would keep some of those ties, in an
// order it does not define). The cost is iters comparisons and counts
// over the row, where a sort would need a sort op XLA and the go backend
// do not share.
func TopKMask(scores, visible *Node, k, iters int) *Node {
	if k <= 0 {
		panic(fmt.Errorf("TopKMask: k %d must be positive", k))
	}
	g := scores.Graph()
	f32 := dtypes.Float32
	big := Scalar(g, f32, math.MaxFloat32)
	count := func(tau *Node) *Node { // visible scores >= tau, [...]
		ge := And(visible, GreaterOrEqual(scores, InsertAxes(tau, -1)))
		return ReduceSum(ConvertDType(ge, f32), -1)
	}
	kf := Scalar(g, f32, float64(k))
	lo := ReduceMin(Where(visible, scores, BroadcastToDims(big, scores.Shape().Dimensions...)), -1) // f(lo) holds when k are visible
	hi := ReduceMax(Where(visible, scores, BroadcastToDims(Neg(big), scores.Shape().Dimensions...)), -1)
	for i := 0; i < iters; i++ {
		mid := Add(lo, MulScalar(Sub(hi, lo), 0.5))
		ok := GreaterOrEqual(count(mid), kf)
		lo, hi = Where(ok, mid, lo), Where(ok, hi, mid)
	}
	tau := Where(GreaterOrEqual(count(hi), kf), hi, lo)
	enough := GreaterOrEqual(ReduceSum(ConvertDType(visible, f32), -1), kf) // [...]: at least k visible
	tau = Where(enough, tau, Neg(BroadcastToDims(big, tau.Shape().Dimensions...)))
	return And(visible, GreaterOrEqual(scores, InsertAxes(tau, -1)))
}
