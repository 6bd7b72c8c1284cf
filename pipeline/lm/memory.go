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
	var total int64
	for i := 0; i < m.Spec().Layers; i++ {
		if total, ok = addSpecBytes(total, HeldState(m, i, batch, cacheLen, kv), dtype, kv); !ok {
			return 0, false
		}
	}
	return total, true
}

// MTPStateBytes is the memory an MTP head's layer state (its KV cache,
// MTPModel.MTPState) takes for one sequence with a cache of cacheLen
// positions, held as StateBytes holds a layer's: 0 for a model not read
// with its head. The head drafts for one sequence at a time, so one row.
func MTPStateBytes(m Model, cacheLen int, dtype, kv dtypes.DType) (n int64, ok bool) {
	mm, isMTP := m.(MTPModel)
	if !isMTP {
		return 0, true
	}
	if cacheLen < 0 {
		return 0, false
	}
	return addSpecBytes(0, HeldSpecs(mm.MTPState(1, cacheLen), kv), dtype, kv)
}

// SpecsBytes is the memory specs take, each held as StateSpec.HeldIn
// says (StateBytes for a model's layers); ok is false on an overflow.
func SpecsBytes(specs []StateSpec, dtype, kv dtypes.DType) (int64, bool) {
	return addSpecBytes(0, specs, dtype, kv)
}

// addSpecBytes adds the bytes of specs, held as StateSpec.HeldIn says, to
// total; ok is false when a dimension is negative or the sum overflows an
// int64.
func addSpecBytes(total int64, specs []StateSpec, dtype, kv dtypes.DType) (int64, bool) {
	sum := uint64(total)
	for _, s := range specs {
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
		sum, carry = bits.Add64(sum, size, 0)
		if carry != 0 || sum > math.MaxInt64 {
			return 0, false
		}
	}
	return int64(sum), true
}
