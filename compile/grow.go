package compile

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tputool/tputool/pipeline/lm"
)

// The cache grows with the sequence: Prefill allocates CacheBucket(prompt
// bucket + 1) slots and Decode moves to the next bucket when the cache is
// full, up to CacheBucket(prompt bucket + maxNew). Attention reads the
// whole static cache at every step, so it costs what the current bucket
// holds rather than what the generation may reach; each bucket compiles
// its own decode executable once (CacheBucket keeps them few).

// initialCacheLen is the first cache length of a generation.
func initialCacheLen(promptBucket, maxCacheLen int) int {
	return min(CacheBucket(promptBucket+1), maxCacheLen)
}

// growCache moves st to the next cache bucket: every state tensor with a
// slot axis (lm.StateSpec.SlotAxis) gets zero slots appended along it
// (zero, as nn.UpdateCache's scatter-add needs); fixed-size state
// (recurrent layers) is kept as is.
func (r *LM) growCache(st *State) error {
	newLen := CacheBucket(st.cacheLen + 1)
	if newLen > st.maxCacheLen {
		return fmt.Errorf("decode: the cache of %d slots is full", st.cacheLen)
	}
	var args []Arg
	for i, axes := range r.slotAxes {
		for k, a := range axes {
			if a != lm.NoSlots {
				args = append(args, Arg{T: st.tensors[i][k], Donate: true})
			}
		}
	}
	if len(args) == 0 {
		st.cacheLen = newLen
		return nil
	}
	if r.grow == nil {
		var err error
		// The target shapes are a function of the input shapes (the next
		// bucket of each), so the executable cache stays valid.
		if r.grow, err = r.newProgram("grow-cache", r.growGraph); err != nil {
			return err
		}
	}
	outs, err := r.grow.Call(args...)
	if err != nil {
		st.Release()
		return err
	}
	n := 0
	for i, axes := range r.slotAxes {
		for k, a := range axes {
			if a != lm.NoSlots {
				st.tensors[i][k] = outs[n]
				n++
			}
		}
	}
	st.cacheLen = newLen
	return nil
}

// growGraph takes every state tensor with slots, in layer and state
// order, and appends zero slots along each one's slot axis up to the next
// cache bucket.
func (r *LM) growGraph(in []*graph.Node) []*graph.Node {
	out := make([]*graph.Node, 0, len(in))
	for _, axes := range r.slotAxes {
		for _, a := range axes {
			if a == lm.NoSlots {
				continue
			}
			x := in[len(out)]
			dims := append([]int(nil), x.Shape().Dimensions...)
			dims[a] = CacheBucket(dims[a]+1) - dims[a]
			zeros := graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))
			out = append(out, graph.Concatenate([]*graph.Node{x, zeros}, a))
		}
	}
	return out
}
