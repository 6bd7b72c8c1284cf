package lm

import (
	"strings"
	"testing"
)

// sharer is a Model of five layers whose sharing and state come from
// tables; only what CheckShared asks is implemented.
type sharer struct {
	Model
	src   []int  // SharedState per layer
	state []bool // whether LayerState declares a cache
}

func (s sharer) Spec() *Spec { return &Spec{Layers: len(s.src)} }

func (s sharer) SharedState(i int) int { return s.src[i] }

func (s sharer) LayerState(i int, batch, cacheLen int) []StateSpec {
	if !s.state[i] {
		return nil
	}
	return []StateSpec{{Name: "k", Shape: []int{batch, cacheLen}, SlotAxis: 1}}
}

// TestCheckShared: a sharing layer must read an earlier layer that keeps
// its own state and declare none itself.
func TestCheckShared(t *testing.T) {
	own := []bool{true, true, true, false, false}
	for _, c := range []struct {
		src   []int
		state []bool
		err   string // "" for none
	}{
		{[]int{-1, -1, -1, 1, 2}, own, ""},
		{[]int{-1, -1, -1, 3, 2}, own, "want an earlier layer"},
		{[]int{-1, -1, -1, 9, 2}, own, "want an earlier layer"},
		{[]int{-1, -1, -1, 1, 3}, own, "which reads another's"},
		{[]int{-1, -1, -1, 1, 2}, []bool{true, true, true, true, false}, "declares state of its own"},
		{[]int{-1, -1, -1, 1, 2}, []bool{true, false, true, false, false}, "which has none"},
	} {
		m := sharer{src: c.src, state: c.state}
		err := CheckShared(m)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("sources %v, state %v: %v, want %q", c.src, c.state, err, c.err)
		}
	}
	if got := StateSource(sharer{src: []int{-1, 0}, state: []bool{true, false}}, 1); got != 0 {
		t.Errorf("StateSource of a sharing layer: %d, want 0", got)
	}
}
