package compile

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The cache grows with the sequence: Prefill allocates CacheBucket(prompt
// bucket + 1) slots and Decode moves to the next bucket when the cache is
// full, up to CacheBucket(prompt bucket + maxNew). Attention reads the
// whole static cache at every step, so it costs what the current bucket
// holds rather than what the generation may reach; each bucket compiles
// its own decode executable once (CacheBucket keeps them few).
//
// Growth is for a State's own generation (State.PrefillChunk, Decode). A
// Batch's states never grow: its decode batch changes length by relayout
// (batch.go), and a prefill's cache is sized for its prompts at the start.
// Sharded LMs allocate maxCacheLen up front.

// initialCacheLen is the first cache length of a generation.
func initialCacheLen(promptBucket, maxCacheLen int) int {
	return min(CacheBucket(promptBucket+1), maxCacheLen)
}

// growCache moves st to the next cache bucket: every state tensor with a
// slot axis (lm.StateSpec.SlotAxis) gets zero slots appended along it
// (zero, as nn.UpdateCache's scatter-add needs); fixed-size state
// (recurrent layers) is kept as is. The old tensors are donated; on
// failure st is released.
func (r *Runner) growCache(st *State) error {
	newLen := CacheBucket(st.cacheLen + 1)
	if newLen > st.maxCacheLen {
		return fmt.Errorf("decode: the cache of %d slots is full", st.cacheLen)
	}
	if len(r.slotted) == 0 {
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
	args := make([]Arg, len(r.slotted))
	for n, s := range r.slotted {
		args[n] = Arg{T: st.tensors[s.layer][s.k], Donate: true}
	}
	outs, err := r.grow.Call(args...)
	if err != nil {
		st.Release()
		return err
	}
	for n, s := range r.slotted {
		st.tensors[s.layer][s.k] = outs[n]
	}
	st.cacheLen = newLen
	return nil
}

// growGraph takes every state tensor with slots (Runner.slotted's) and
// appends zero slots along each one's slot axis up to the next cache
// bucket.
func (r *Runner) growGraph(in []*graph.Node) []*graph.Node {
	out := make([]*graph.Node, len(in))
	for n, s := range r.slotted {
		x := in[n]
		dims := append([]int(nil), x.Shape().Dimensions...)
		dims[s.axis] = CacheBucket(dims[s.axis]+1) - dims[s.axis]
		zeros := graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))
		out[n] = graph.Concatenate([]*graph.Node{x, zeros}, s.axis)
	}
	return out
}
