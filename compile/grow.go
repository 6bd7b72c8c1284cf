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
	var args []Arg
	var where [][2]int // (layer, state index) of each input
	for i, st := range r.state {
		now := r.model.LayerState(i, r.batch, r.cacheLen)
		next := r.model.LayerState(i, r.batch, newLen)
		for k := range st {
			if fmt.Sprint(now[k].Shape) != fmt.Sprint(next[k].Shape) {
				args = append(args, Arg{T: st[k], Donate: true})
				where = append(where, [2]int{i, k})
			}
		}
	}
	if len(args) == 0 {
		r.cacheLen = newLen
		return nil
	}
	outs, err := r.grow.Call(args...)
	if err != nil {
		r.release()
		return err
	}
	for n, w := range where {
		r.state[w[0]][w[1]] = outs[n]
	}
	r.cacheLen = newLen
	return nil
}

// growGraph pads each state input along the axes where the model's state
// shapes for the current and the next cache length differ.
func (r *LM) growGraph(in []*graph.Node) []*graph.Node {
	newLen := CacheBucket(r.cacheLen + 1)
	out := make([]*graph.Node, len(in))
	n := 0
	for i := range r.state {
		now := r.model.LayerState(i, r.batch, r.cacheLen)
		next := r.model.LayerState(i, r.batch, newLen)
		for k := range now {
			if fmt.Sprint(now[k].Shape) == fmt.Sprint(next[k].Shape) {
				continue
			}
			x := in[n]
			for axis, d := range next[k].Shape {
				if extra := d - x.Shape().Dimensions[axis]; extra > 0 {
					dims := append([]int(nil), x.Shape().Dimensions...)
					dims[axis] = extra
					zeros := graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))
					x = graph.Concatenate([]*graph.Node{x, zeros}, axis)
				}
			}
			out[n] = x
			n++
		}
	}
	return out
}
