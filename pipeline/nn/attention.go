package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive

	"github.com/tputool/tputool/pipeline/lm"
)

// KV cache layout. Keys are [B, KVHeads, S, D] and values are stored
// transposed, [B, KVHeads, D, S]: both attention matmuls then contract the
// last axis of the cache, which the pure-Go backend's DotGeneral needs to
// avoid copying (transposing) the whole value cache at every step.
const (
	// KeyCacheAxis is the slot axis of the key cache.
	KeyCacheAxis = 2
	// ValueCacheAxis is the slot axis of the (transposed) value cache.
	ValueCacheAxis = 3
)

// KVCacheState returns the StateSpecs of one attention layer's caches.
// Executors hold them as lm.HeldState says: in int8 with their scales
// after them, which KVOf reads.
func KVCacheState(batch, kvHeads, cacheLen, headDim int) []lm.StateSpec {
	return []lm.StateSpec{
		{Name: "key", Shape: []int{batch, kvHeads, cacheLen, headDim}, SlotAxis: KeyCacheAxis, KV: true},
		{Name: "value", Shape: []int{batch, kvHeads, headDim, cacheLen}, SlotAxis: ValueCacheAxis, KV: true},
	}
}

// UpdateCache writes update into cache at slots [start, start+T) of axis
// (update has the cache's shape except T on that axis). With
// dynamicUpdateSlice it is a DynamicUpdateSlice; otherwise it is a
// scatter-add of the update into the cache, which is equal to a write
// because executors zero-fill caches at prefill and, on such a backend,
// every slot is written at most once per generation (speculative
// decoding, which writes a slot again after taking the cache back, runs
// only where DynamicUpdateSlice writes in place: compile.Runner.Rewindable). A donated cache is updated in place by
// either form, so a decode step does not rewrite the whole cache. An
// update in another dtype than the cache's (a KV cache held in bf16 under
// f32 compute) is converted to the cache's.
func UpdateCache(cache, update, start *Node, axis int, dynamicUpdateSlice bool) *Node {
	g := cache.Graph()
	if update.DType() != cache.DType() { // a cache held narrower than the compute dtype
		update = ConvertDType(update, cache.DType())
	}
	if dynamicUpdateSlice {
		idx := make([]*Node, cache.Rank())
		for i := range idx {
			idx[i] = ScalarZero(g, dtypes.Int32)
		}
		idx[axis] = ConvertDType(start, dtypes.Int32)
		return DynamicUpdateSlice(cache, update, idx)
	}
	t := update.Shape().Dimensions[axis]
	indices := Add(iotaInt(g, 0, t, 1), ConvertDType(start, dtypes.Int32)) // [T, 1]: slot of each new token
	var window []int
	for a := 0; a < update.Rank(); a++ {
		if a != axis {
			window = append(window, a)
		}
	}
	return BackendScatterSum(cache, indices, update, 1, window, []int{axis}, []int{axis}, true, true)
}

// KV is one attention layer's key and value caches as its state holds
// them: keys [B, KV, S, D] and values [B, KV, D, S] in the compute dtype,
// bf16 or int8, and with int8 caches each one's scales [B, KV, S] (f32:
// slot s of head h holds keys[.., h, s, :]·KeyScales[.., h, s], and so
// for values). The scales are nil for caches of any other dtype.
type KV struct {
	Keys, Values           *Node
	KeyScales, ValueScales *Node
}

// KVOf reads a layer's KV state in lm.HeldState's order: the two caches,
// then their scales when the caches are int8.
func KVOf(state []*Node) KV {
	c := KV{Keys: state[0], Values: state[1]}
	if c.Keys.DType() == dtypes.Int8 {
		if len(state) < 4 {
			panic(fmt.Errorf("KVOf: int8 caches without their scales (%d state tensors)", len(state)))
		}
		c.KeyScales, c.ValueScales = state[2], state[3]
	}
	return c
}

// State returns the caches in lm.HeldState's order, as Layer returns its
// state.
func (c KV) State() []*Node {
	if c.KeyScales != nil {
		return []*Node{c.Keys, c.Values, c.KeyScales, c.ValueScales}
	}
	return []*Node{c.Keys, c.Values}
}

// quantizeKV rounds x to int8 with one scale per position along all axes
// but axis: scales = max|x| over axis / 127 (f32, axis removed) and codes
// round(x / scales) (ties as the backend's Round), so that codes·scales
// is x to within half a scale and no code leaves ±127. A position of
// zeros has scale 0 and codes 0 (it divides by the smallest float
// instead).
func quantizeKV(x *Node, axis int) (codes, scales *Node) {
	g := x.Graph()
	x = ConvertDType(x, dtypes.Float32)
	scales = DivScalar(ReduceMax(Abs(x), axis), 127)
	div := Max(scales, Scalar(g, dtypes.Float32, math.SmallestNonzeroFloat32))
	return ConvertDType(Round(Div(x, ExpandAxes(div, axis))), dtypes.Int8), scales
}

// dequantizeKV is cache·scales in f32, the scales [B, KV, S] broadcast
// over the cache's other axis (axis, the head dimension).
func dequantizeKV(cache, scales *Node, axis int) *Node {
	return Mul(ConvertDType(cache, dtypes.Float32), ExpandAxes(scales, axis))
}

// AttentionBias returns the additive attention bias [B, 1, T, 1, S]
// (float32: 0 where visible, a large negative number where masked) for the
// step's queries over the first S = step.Visible() cache slots, shared by
// the layers of a graph.
//
// Query t of row b sits in slot q = Start+t and sees slot s when s <= q
// (causal), s >= Pads[b] (not padding) and, with a window, q - s < window
// (transformers' sliding_window semantics). A padding query sees only its
// own slot, so no row of the softmax is empty.
func AttentionBias(step *lm.Step, window int) *Node {
	return causalBias(step, fmt.Sprintf("attention-bias/%d", window), func(g *Graph, slot, q, pad *Node) *Node {
		if window <= 0 {
			return nil
		}
		return LessThan(Sub(q, slot), Scalar(g, dtypes.Int32, window))
	})
}

// ChunkedAttentionBias is AttentionBias for chunked attention (Llama 4's
// chunked_attention layers, attention_chunk_size chunk): the positions of
// a row are cut into chunks of chunk tokens from its first token, and a
// query sees the keys at or before it in its own chunk only. Query t of
// row b sits in slot q = Start+t at position q - Pads[b], and sees slot s
// when AttentionBias's causal and padding rules let it and s >= q -
// (q - Pads[b]) mod chunk, its chunk's first slot. A padding query sees
// only its own slot.
func ChunkedAttentionBias(step *lm.Step, chunk int) *Node {
	if chunk <= 0 {
		panic(fmt.Errorf("ChunkedAttentionBias: chunk %d must be positive", chunk))
	}
	return causalBias(step, fmt.Sprintf("attention-bias-chunked/%d", chunk), func(g *Graph, slot, q, pad *Node) *Node {
		i32 := func(v int) *Node { return Scalar(g, dtypes.Int32, v) }
		pos := Max(Sub(q, pad), i32(0))       // [B, T, S]: the query's position (0 on padding)
		first := Sub(q, Rem(pos, i32(chunk))) // its chunk's first slot
		return GreaterOrEqual(slot, first)
	})
}

// causalBias is the bias AttentionBias describes, memoized under key, its
// causal and padding mask narrowed by limit(slot [1, T, S], q [1, T, S]
// (the query's slot), pad [B, 1, 1]) when that is not nil.
func causalBias(step *lm.Step, key string, limit func(g *Graph, slot, q, pad *Node) *Node) *Node {
	return step.Memo(key, func() *Node {
		g := step.Pads.Graph()
		b, t, s := step.Batch, step.Len, step.Visible()
		slot := iotaInt(g, 2, 1, t, s)                                                      // [1, T, S]: s
		q := Add(iotaInt(g, 1, 1, t, s), ConvertDType(step.Start, dtypes.Int32))            // [1, T, S]: Start + t
		pad := Reshape(ConvertDType(step.Pads, dtypes.Int32), b, 1, 1)                      // [B, 1, 1]
		visible := And(LessOrEqual(slot, q), Or(GreaterOrEqual(slot, pad), Equal(slot, q))) // [B, T, S]
		if extra := limit(g, slot, q, pad); extra != nil {
			visible = And(visible, extra)
		}
		zero := ScalarZero(g, dtypes.Float32)
		masked := Scalar(g, dtypes.Float32, -1e30)
		bias := Where(visible, BroadcastToDims(zero, b, t, s), BroadcastToDims(masked, b, t, s)) // [B, T, S]
		return Reshape(bias, b, 1, t, 1, s)                                                      // [B, 1, T, 1, S]
	})
}

// TemperatureScale is the attention temperature tuning of Llama 4's
// layers without rotary (attn_temperature_tuning, "Scalable-Softmax Is
// Superior for Attention", Nakanishi, 2025, arXiv:2501.19399) and of
// every layer of Ministral 3 (llama_4_scaling_beta): each query is
// multiplied by log1p(floor((position+shift)/floor))·scale + 1 (Llama 4's
// shift is 1, Ministral 3's 0), returned [B, T, 1, 1] float32 for the
// step's tokens (1 on padding).
func TemperatureScale(step *lm.Step, floor, scale, shift float64) *Node {
	return step.Memo(fmt.Sprintf("temperature/%g/%g/%g", floor, scale, shift), func() *Node {
		g := step.Positions.Graph()
		pos := Max(ConvertDType(step.Positions, dtypes.Float32), ScalarZero(g, dtypes.Float32))    // [B, T]
		s := AddScalar(MulScalar(Log1p(Floor(DivScalar(AddScalar(pos, shift), floor))), scale), 1) // [B, T]
		b, t := step.Positions.Shape().Dimensions[0], step.Positions.Shape().Dimensions[1]
		return Reshape(s, b, t, 1, 1)
	})
}

// EncoderBias is the additive attention bias [B, 1, T, 1, T] (float32)
// of a bidirectional encoder (BERT) attending over its step's own keys:
// query t of row b sees key j when the key's slot Start+j is not padding
// (Start+j >= Pads[b]), the tokens of its input before it and after it,
// as transformers' encoders attend under an attention mask that hides
// only padding. A padding query sees its own key too, so no row of the
// softmax is empty. An encoder runs an input in one step
// (lm.Spec.Encoder), so the step holds every key.
func EncoderBias(step *lm.Step) *Node {
	return step.Memo("encoder-bias", func() *Node {
		g := step.Pads.Graph()
		b, t := step.Batch, step.Len
		start := ConvertDType(step.Start, dtypes.Int32)
		key := Add(iotaInt(g, 2, 1, t, t), start)                      // [1, T, T]: the key's slot
		self := Equal(iotaInt(g, 2, 1, t, t), iotaInt(g, 1, 1, t, t))  // [1, T, T]: the query's own key
		pad := Reshape(ConvertDType(step.Pads, dtypes.Int32), b, 1, 1) // [B, 1, 1]
		visible := Or(GreaterOrEqual(key, pad), self)                  // [B, T, T]
		zero := ScalarZero(g, dtypes.Float32)
		masked := Scalar(g, dtypes.Float32, -1e30)
		bias := Where(visible, BroadcastToDims(zero, b, t, t), BroadcastToDims(masked, b, t, t)) // [B, T, T]
		return Reshape(bias, b, 1, t, 1, t)                                                      // [B, 1, T, 1, T]
	})
}

// EncoderBlock is the most queries of one piece of EncoderAttention: an
// encoder's step of more tokens attends in pieces of this many queries,
// each holding its own scores only (a variable for tests).
var EncoderBlock = 1024

// EncoderAttention is an encoder's self-attention over its step's own
// keys and values (q, k, v [B, T, Heads, D] -> [B, T, Heads·D]): each
// token of an input sees every token of it (EncoderBias), or with
// half > 0 those at most half positions away on either side (|t - j| <=
// half: ModernBERT's local layers, local_attention / 2; the distance of
// two tokens of an input is that of their slots, the padding all before
// them). A step of more than EncoderBlock tokens runs in pieces of
// EncoderBlock queries, so it holds heads·EncoderBlock·T scores at a
// time instead of heads·T² (an 8192-token input of 16 heads: 512 MiB
// instead of 4 GiB), and a windowed piece reads only the keys its
// window reaches, so a local layer's work grows as T·(EncoderBlock +
// 2·half) instead of T². Each query's softmax is over the same keys as
// unpieced, all in its piece.
func EncoderAttention(q, k, v *Node, step *lm.Step, half int) *Node {
	t := step.Len
	kv := StepKV(k, v)
	if t <= EncoderBlock {
		return Attention(q, kv, encoderBias(step, 0, t, 0, t, half), 0, 0)
	}
	var parts []*Node
	for lo := 0; lo < t; lo += EncoderBlock {
		hi := min(t, lo+EncoderBlock)
		klo, khi := 0, t
		if half > 0 {
			klo, khi = max(0, lo-half), min(t, hi+half)
		}
		piece := KV{Keys: SliceAxis(kv.Keys, KeyCacheAxis, AxisRange(klo, khi)), Values: SliceAxis(kv.Values, ValueCacheAxis, AxisRange(klo, khi))}
		parts = append(parts, Attention(SliceAxis(q, 1, AxisRange(lo, hi)), piece, encoderBias(step, lo, hi, klo, khi, half), 0, 0))
	}
	return Concatenate(parts, 1) // [B, T, Heads·D]
}

// encoderBias is the additive bias (float32) of the step's queries [lo,
// hi) over its keys [klo, khi): a key is visible unless it is padding
// (a padding query's row is all masked, its softmax uniform and its
// output unread), and with half > 0 only the keys at most half slots
// from the query, [B, 1, hi-lo, 1, khi-klo]. Without a window it is the
// padding alone, [B, 1, 1, 1, khi-klo], which every query shares: a
// step keeps no T² bias (256 MiB for one 8192-token input). Shared by
// the layers of a graph.
func encoderBias(step *lm.Step, lo, hi, klo, khi, half int) *Node {
	return step.Memo(fmt.Sprintf("encoder-bias/%d/%d/%d/%d/%d", lo, hi, klo, khi, half), func() *Node {
		g := step.Pads.Graph()
		b, t, s := step.Batch, hi-lo, khi-klo
		if half <= 0 {
			t = 1
		}
		key := AddScalar(iotaInt(g, 2, 1, t, s), float64(klo)) // [1, T, S]: the key's slot, less Start
		pad := Sub(Reshape(ConvertDType(step.Pads, dtypes.Int32), b, 1, 1), ConvertDType(step.Start, dtypes.Int32))
		visible := GreaterOrEqual(key, pad) // [B, T, S]
		if half > 0 {
			query := AddScalar(iotaInt(g, 1, 1, t, s), float64(lo)) // [1, T, S]: the query's
			visible = And(visible, LessOrEqual(Abs(Sub(key, query)), Scalar(g, dtypes.Int32, half)))
		}
		zero := ScalarZero(g, dtypes.Float32)
		masked := Scalar(g, dtypes.Float32, -1e30)
		bias := Where(visible, BroadcastToDims(zero, b, t, s), BroadcastToDims(masked, b, t, s)) // [B, T, S]
		return Reshape(bias, b, 1, t, 1, s)                                                      // [B, 1, T, 1, S]
	})
}

// StepKV is a step's own keys and values [B, T, KV, D] in Attention's
// cache layout, keys [B, KV, T, D] and values [B, KV, D, T], for an
// encoder that attends over them without keeping them (EncoderBias).
func StepKV(k, v *Node) KV {
	return KV{Keys: TransposeAllDims(k, 0, 2, 1, 3), Values: TransposeAllDims(v, 0, 2, 3, 1)}
}

// Attention is scaled dot-product attention with grouped KV heads over a
// static cache:
//
//	q [B, T, H, D], c.Keys [B, KV, S, D], c.Values [B, KV, D, S] (transposed),
//	bias [B, 1, T, 1, W] (AttentionBias) -> [B, T, H*D]
//
// A bias over fewer slots than the cache holds (W < S, a step that sees
// only the cache's first W slots: lm.Step.Window) makes attention read
// only those slots of keys and values. Caches in another dtype than q's
// are read in q's; int8 caches as their codes times their scales, in f32.
//
// Query head h uses KV head h / (H/KV), as transformers' repeat_kv does.
// Scores are scaled by scale (1/sqrt(D) when 0), soft-capped when softcap >
// 0, masked, and normalized in float32; the probabilities are cast back to
// the compute dtype for the value matmul, as in transformers' eager
// attention.
func Attention(q *Node, c KV, bias *Node, scale, softcap float64) *Node {
	return attention(q, c, bias, scale, softcap, nil)
}

// AttentionSinks is Attention with attention sinks (GPT-OSS's
// eager_attention_forward): a learned logit per query head, sinks [H],
// joins each row of scores as one more column before the softmax, and its
// probability is dropped after it, so that a head can give less than all
// its attention to the cache.
func AttentionSinks(q *Node, c KV, bias, sinks *Node, scale float64) *Node {
	return attention(q, c, bias, scale, 0, sinks)
}

// attention is Attention, with sinks when sinks is not nil.
func attention(q *Node, c KV, bias *Node, scale, softcap float64, sinks *Node) *Node {
	keys, values := c.Keys, c.Values
	dims := q.Shape().Dimensions
	b, t, h, d := dims[0], dims[1], dims[2], dims[3]
	kv := keys.Shape().Dimensions[1]
	if h%kv != 0 {
		panic(fmt.Errorf("Attention: %d query heads are not a multiple of %d KV heads", h, kv))
	}
	groups := h / kv
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(d))
	}
	dtype, w := q.DType(), bias.Shape().Dimensions[4]
	keys = readCache(keys, c.KeyScales, KeyCacheAxis, w, dtype)
	values = readCache(values, c.ValueScales, ValueCacheAxis, w, dtype)
	q5 := Reshape(q, b, t, kv, groups, d)                                        // [B, T, KV, G, D]
	scores := DotGeneral(q5, []int{4}, []int{0, 2}, keys, []int{3}, []int{0, 1}) // [B, KV, T, G, S]
	scores = MulScalar(ConvertDType(scores, dtypes.Float32), scale)
	scores = Softcap(scores, softcap)
	scores = Add(scores, bias)
	var probs *Node
	if sinks == nil {
		probs = Softmax(scores, -1) // [B, KV, T, G, S]
	} else {
		s := scores.Shape().Dimensions[4]
		sink := Reshape(ConvertDType(sinks, dtypes.Float32), 1, kv, 1, groups, 1) // query head h = kv·G + g
		sink = BroadcastToDims(sink, b, kv, t, groups, 1)
		probs = Softmax(Concatenate([]*Node{scores, sink}, 4), -1) // [B, KV, T, G, S+1]
		probs = SliceAxis(probs, 4, AxisRange(0, s))               // the sink's share is dropped
	}
	probs = ConvertDType(probs, dtype)                                             // [B, KV, T, G, S]
	out := DotGeneral(probs, []int{4}, []int{0, 1}, values, []int{3}, []int{0, 1}) // [B, KV, T, G, D]
	out = TransposeAllDims(out, 0, 2, 1, 3, 4)                                     // [B, T, KV, G, D]
	return Reshape(out, b, t, h*d)                                                 // [B, T, H*D]
}

// readCache is a cache, [B, KV, S, D] (slot axis 2) or transposed
// [B, KV, D, S] (slot axis 3), as attention reads it: its first w slots
// (the visible ones), dequantised in f32 with its scales [B, KV, S] when
// int8 (scales nil otherwise), then in dtype where it is held in another
// (compile.Options.KVDType).
func readCache(cache, scales *Node, slot, w int, dtype dtypes.DType) *Node {
	if w < cache.Shape().Dimensions[slot] {
		cache = SliceAxis(cache, slot, AxisRange(0, w))
		if scales != nil {
			scales = SliceAxis(scales, 2, AxisRange(0, w))
		}
	}
	if scales != nil {
		cache = dequantizeKV(cache, scales, 5-slot) // the head dimension: the axis of 2 and 3 that is not the slots'
	}
	if cache.DType() != dtype {
		cache = ConvertDType(cache, dtype)
	}
	return cache
}

// writeCache writes update (the cache's shape but T slots) into cache at
// the step's slots; into an int8 cache as int8 codes with a scale a slot,
// written into scales (quantizeKV). Returns the cache and scales.
func writeCache(cache, scales, update *Node, slot int, step *lm.Step) (*Node, *Node) {
	if scales != nil {
		var s *Node
		update, s = quantizeKV(update, 5-slot) // scales [B, KV, T]
		scales = UpdateCache(scales, s, step.Start, 2, step.DynamicUpdateSlice)
	}
	return UpdateCache(cache, update, step.Start, slot, step.DynamicUpdateSlice), scales
}

// SplitHeads reshapes projections [B, T, heads*D] to [B, T, heads, D].
func SplitHeads(x *Node, heads int) *Node {
	dims := x.Shape().Dimensions
	return Reshape(x, dims[0], dims[1], heads, dims[2]/heads) // [B, T, heads, D]
}

// WriteKV stores new keys and values [B, T, KV, D] into the layer's caches
// at the step's slots and returns the updated caches. Into int8 caches
// each slot's key and value of a head is written as int8 with its scale
// (quantizeKV: the largest magnitude over 127).
func WriteKV(c KV, k, v *Node, step *lm.Step) KV {
	c.Keys, c.KeyScales = writeCache(c.Keys, c.KeyScales, TransposeAllDims(k, 0, 2, 1, 3), KeyCacheAxis, step)           // [B, KV, T, D]
	c.Values, c.ValueScales = writeCache(c.Values, c.ValueScales, TransposeAllDims(v, 0, 2, 3, 1), ValueCacheAxis, step) // [B, KV, D, T]
	return c
}

// MultiHeadAttention is the uncached scaled dot-product attention of the
// diffusion models (diffusers' Attention with AttnProcessor2_0, CLIP's
// self-attention, SD3's joint attention) on q [B, Sq, H*D] and k, v
// [B, Sk, H*D], returning [B, Sq, H*D]. With causal, query i only sees
// keys j <= i. Inputs are float32 (the causal mask is a float32 constant).
func MultiHeadAttention(q, k, v *Node, heads int, causal bool) *Node {
	qd := q.Shape().Dimensions
	kd := k.Shape().Dimensions
	b, sq, inner := qd[0], qd[1], qd[2]
	sk := kd[1]
	if inner%heads != 0 {
		panic(fmt.Errorf("MultiHeadAttention: width %d is not divisible into %d heads", inner, heads))
	}
	hd := inner / heads
	q = Reshape(MulScalar(q, 1/math.Sqrt(float64(hd))), b, sq, heads, hd)
	k = Reshape(k, b, sk, heads, hd)
	v = Reshape(v, b, sk, heads, hd)
	scores := DotGeneral(q, []int{3}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, H, Sq, Sk]
	if causal {
		// As transformers' causal mask: the lowest float32 above the
		// diagonal, so those probabilities underflow to exactly zero.
		mask := make([]float32, sq*sk)
		for i := 0; i < sq; i++ {
			for j := i + 1; j < sk; j++ {
				mask[i*sk+j] = -math.MaxFloat32
			}
		}
		scores = Add(scores, Reshape(Const(q.Graph(), mask), 1, 1, sq, sk))
	}
	probs := Softmax(scores, -1)
	out := DotGeneral(probs, []int{3}, []int{0, 1}, v, []int{1}, []int{0, 2}) // [B, H, Sq, D]
	return Reshape(TransposeAllAxes(out, 0, 2, 1, 3), b, sq, inner)           // [B, Sq, H*D]
}

// Latent is the one cache of a layer whose keys and values are the same
// vectors (multi-head latent attention: DeepSeek's latent and shared
// rotated key): [B, 1, S, D] in the compute dtype, bf16 or int8, and with
// an int8 cache its scales [B, 1, S] (f32), as for KV.
type Latent struct{ Cache, Scales *Node }

// LatentCacheState returns the StateSpec of a latent cache of width dim.
func LatentCacheState(batch, cacheLen, dim int) []lm.StateSpec {
	return []lm.StateSpec{{Name: "latent", Shape: []int{batch, 1, cacheLen, dim}, SlotAxis: KeyCacheAxis, KV: true}}
}

// LatentOf reads a latent layer's state in lm.HeldState's order: the
// cache, then its scales when it is int8.
func LatentOf(state []*Node) Latent {
	c := Latent{Cache: state[0]}
	if c.Cache.DType() == dtypes.Int8 {
		if len(state) < 2 {
			panic(fmt.Errorf("LatentOf: an int8 cache without its scales (%d state tensors)", len(state)))
		}
		c.Scales = state[1]
	}
	return c
}

// State returns the cache (and scales) in lm.HeldState's order.
func (c Latent) State() []*Node {
	if c.Scales != nil {
		return []*Node{c.Cache, c.Scales}
	}
	return []*Node{c.Cache}
}

// WriteLatent stores x [B, T, D] into the cache at the step's slots (as
// int8 with a scale a slot into an int8 cache, as WriteKV does).
func WriteLatent(c Latent, x *Node, step *lm.Step) Latent {
	c.Cache, c.Scales = writeCache(c.Cache, c.Scales, InsertAxes(x, 1), KeyCacheAxis, step) // [B, 1, T, D]
	return c
}

// LatentAttention is attention of queries q [B, T, H, D] over the one
// cache of c, which serves as every head's keys (all D dims) and values
// (its first valueDims dims), scaled by scale, masked by bias (as
// AttentionBias makes it), normalized in float32 as Attention does.
// Returns [B, T, H, valueDims].
func LatentAttention(q *Node, c Latent, bias *Node, scale float64, valueDims int) *Node {
	dims := q.Shape().Dimensions
	b, t, h := dims[0], dims[1], dims[2]
	dtype := q.DType()
	cache := readCache(c.Cache, c.Scales, KeyCacheAxis, bias.Shape().Dimensions[4], dtype)
	q5 := InsertAxes(q, 2)                                                        // [B, T, 1, H, D]
	scores := DotGeneral(q5, []int{4}, []int{0, 2}, cache, []int{3}, []int{0, 1}) // [B, 1, T, H, S]
	scores = Add(MulScalar(ConvertDType(scores, dtypes.Float32), scale), bias)
	probs := ConvertDType(Softmax(scores, -1), dtype)
	values := SliceAxis(cache, 3, AxisRange(0, valueDims))                         // [B, 1, S, dv]
	out := DotGeneral(probs, []int{4}, []int{0, 1}, values, []int{2}, []int{0, 1}) // [B, 1, T, H, dv]
	return Reshape(out, b, t, h, valueDims)
}

// RealTokens is 1 at the step's real tokens and 0 on left padding
// (step.Positions < 0), [B, T, 1] in dtype: the mask the recurrent
// mixers (Mamba-2, Gated DeltaNet, the short convolution) multiply their
// inputs by, so that a padded row's state stays zero until its first
// token.
func RealTokens(step *lm.Step, dtype dtypes.DType) *Node {
	pos := step.Positions
	return InsertAxes(ConvertDType(GreaterOrEqual(pos, ScalarZero(pos.Graph(), pos.DType())), dtype), -1)
}
