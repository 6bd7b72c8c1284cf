package compile

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
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

// growCache moves the layer state to the next cache bucket: every state
// tensor whose shape depends on the cache length gets zero slots appended
// along the axes that grow (zero, as nn.UpdateCache's scatter-add needs);
// fixed-size state (recurrent layers) is kept as is.
func (r *LM) growCache() error {
	newLen := CacheBucket(r.cacheLen + 1)
	if newLen > r.maxCacheLen {
		return fmt.Errorf("decode: the cache of %d slots is full", r.cacheLen)
	}
	if r.grow == nil {
		var err error
		// The target shapes are a function of the input shapes (the next
		// bucket of each), so the executable cache stays valid.
		if r.grow, err = r.newProgram("grow-cache", r.growGraph); err != nil {
			return err
		}
	}
	grow := r.growing(newLen)
	if len(grow) == 0 {
		r.cacheLen = newLen
		return nil
	}
	args := make([]Arg, len(grow))
	for n, g := range grow {
		args[n] = Arg{T: r.state[g.layer][g.k], Donate: true}
	}
	outs, err := r.grow.Call(args...)
	if err != nil {
		r.release()
		return err
	}
	for n, g := range grow {
		r.state[g.layer][g.k] = outs[n]
	}
	r.cacheLen = newLen
	return nil
}

// grownState is a state tensor that grows with the cache: state k of
// layer, and its shape at the new length.
type grownState struct {
	layer, k int
	shape    []int
}

// growing lists the state tensors whose shape differs between the current
// cache length and newLen, in layer and state order.
func (r *LM) growing(newLen int) []grownState {
	var out []grownState
	for i := range r.state {
		now := r.model.LayerState(i, r.batch, r.cacheLen)
		next := r.model.LayerState(i, r.batch, newLen)
		for k := range now {
			if !slices.Equal(now[k].Shape, next[k].Shape) {
				out = append(out, grownState{layer: i, k: k, shape: next[k].Shape})
			}
		}
	}
	return out
}

// growGraph pads each state input with zeros along the axes where its
// shape at the next cache length is larger.
func (r *LM) growGraph(in []*graph.Node) []*graph.Node {
	grow := r.growing(CacheBucket(r.cacheLen + 1))
	out := make([]*graph.Node, len(in))
	for n, g := range grow {
		x := in[n]
		for axis, d := range g.shape {
			if extra := d - x.Shape().Dimensions[axis]; extra > 0 {
				dims := append([]int(nil), x.Shape().Dimensions...)
				dims[axis] = extra
				zeros := graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))
				x = graph.Concatenate([]*graph.Node{x, zeros}, axis)
			}
		}
		out[n] = x
	}
	return out
}
