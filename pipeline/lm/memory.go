package lm

import (
	"math"
	"math/bits"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// StateBytes is the memory the layer state (KV caches, recurrent states)
// of batch sequences with a cache of cacheLen positions takes, each state
// in the dtype it is held in (StateSpec.HeldIn: its own, the KV dtype kv
// for KV caches when kv is set, else dtype). It multiplies with overflow
// checks: ok is false when the figure does not fit in an int64, which no
// machine could hold anyway. Executors call it before allocating, so that
// a config with an absurd max_position_embeddings or a huge token limit
// is refused with the figure instead of crashing the process.
func StateBytes(m Model, batch, cacheLen int, dtype, kv dtypes.DType) (n int64, ok bool) {
	if batch < 0 || cacheLen < 0 {
		return 0, false
	}
	var total uint64
	for i := 0; i < m.Spec().Layers; i++ {
		for _, s := range HeldState(m, i, batch, cacheLen, kv) {
			size := uint64(s.HeldIn(dtype, kv).Size())
			for _, d := range s.Shape {
				if d < 0 {
					return 0, false
				}
				hi, lo := bits.Mul64(size, uint64(d))
				if hi != 0 {
					return 0, false
				}
				size = lo
			}
			var carry uint64
			total, carry = bits.Add64(total, size, 0)
			if carry != 0 || total > math.MaxInt64 {
				return 0, false
			}
		}
	}
	return int64(total), true
}
