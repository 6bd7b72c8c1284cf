package nn

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's idiom for graph code

	"github.com/tputool/tputool/pipeline/lm"
)

// ALiBiSlopes are the per-head slopes of attention with linear biases
// ("Train Short, Test Long", Press et al., 2021, arXiv:2108.12409) as
// transformers' build_alibi_tensor (BLOOM's) computes them: for the
// largest power of two p at most heads, the geometric sequence
// 2^(-8/p)^i for i = 1..p; past p, the odd powers 1, 3, 5... of
// 2^(-8/2p), as many as the heads left (the MiniMax releases'
// _build_slope_tensor computes the same sequence). In float64: ALiBiBias
// rounds them to float32.
func ALiBiSlopes(heads int) []float64 {
	if heads <= 0 {
		return nil
	}
	p := 1 << int(math.Floor(math.Log2(float64(heads))))
	base := math.Pow(2, -math.Pow(2, -(math.Log2(float64(p))-3)))
	slopes := make([]float64, 0, heads)
	for i := 1; i <= p; i++ {
		slopes = append(slopes, math.Pow(base, float64(i)))
	}
	if p != heads {
		extra := math.Pow(2, -math.Pow(2, -(math.Log2(float64(2*p))-3)))
		for i := 1; len(slopes) < heads; i += 2 {
			slopes = append(slopes, math.Pow(extra, float64(i)))
		}
	}
	return slopes
}

// ALiBiBias is the linear bias of attention with linear biases, to add
// to AttentionBias's mask: slope h of query head h times each key's
// position, [B, KV, 1, G, W] float32 for the step's first w cache slots
// (query head h = kv·G + g, slopes' order). A key in slot s of row b sits
// at position s - Pads[b] (negative on padding, which the mask hides).
// BLOOM adds the key's position alone, which differs from the distance
// to the query by the query's position, the same for every key of a row
// of scores, so the softmax is the same. Shared by the layers of a graph
// that ask for the same slopes.
func ALiBiBias(step *lm.Step, slopes []float64, kv, w int) *Node {
	return step.Memo(fmt.Sprintf("alibi/%v/%d/%d", slopes, kv, w), func() *Node { // the slopes themselves: scaled ones differ
		g := step.Pads.Graph()
		b, heads := step.Batch, len(slopes)
		if heads%kv != 0 {
			panic(fmt.Errorf("ALiBiBias: %d heads are not a multiple of %d KV heads", heads, kv))
		}
		f32 := make([]float32, heads)
		for i, s := range slopes {
			f32[i] = float32(s)
		}
		slot := iotaInt(g, 1, 1, w)                                 // [1, W]
		pad := Reshape(ConvertDType(step.Pads, dtypes.Int32), b, 1) // [B, 1]
		pos := ConvertDType(Sub(slot, pad), dtypes.Float32)         // [B, W]
		sl := Reshape(Const(g, f32), 1, kv, 1, heads/kv, 1)         // [1, KV, 1, G, 1]
		return Mul(sl, Reshape(pos, b, 1, 1, 1, w))                 // [B, KV, 1, G, W]
	})
}
