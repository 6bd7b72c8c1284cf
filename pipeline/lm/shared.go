package lm

import "fmt"

// StateSharer is implemented by a Model some of whose layers read another
// layer's state instead of keeping their own: Gemma 4's KV sharing, where
// the last num_kv_shared_layers layers attend over the keys and values of
// an earlier layer of their kind (transformers keeps one cache for both).
//
// A sharing layer i declares no state (LayerState(i) is empty). Its Layer
// receives, as its state, the state of layer SharedState(i) (ordered as
// that layer's LayerState) after that layer's step has written this step's
// tokens, and returns no state: it reads the cache, never writes it.
type StateSharer interface {
	// SharedState returns the earlier layer whose state layer i reads, or
	// -1 when layer i keeps its own.
	SharedState(i int) int
}

// StateSource is the layer whose state layer i reads: SharedState(i) for
// a sharing layer of a StateSharer, else i.
func StateSource(m Model, i int) int {
	if s, ok := m.(StateSharer); ok {
		if src := s.SharedState(i); src >= 0 {
			return src
		}
	}
	return i
}

// CheckShared reports a StateSharer that declares its sharing wrongly: a
// source that is not an earlier layer keeping its own state, or a sharing
// layer that declares state of its own.
func CheckShared(m Model) error {
	sh, ok := m.(StateSharer)
	if !ok {
		return nil
	}
	for i := 0; i < m.Spec().Layers; i++ {
		src := sh.SharedState(i)
		if src < 0 {
			continue
		}
		switch {
		case src >= i:
			return fmt.Errorf("layer %d reads the state of layer %d: want an earlier layer", i, src)
		case StateSource(m, src) != src:
			return fmt.Errorf("layer %d reads the state of layer %d, which reads another's", i, src)
		case len(m.LayerState(i, 1, 1)) > 0:
			return fmt.Errorf("layer %d reads the state of layer %d and declares state of its own", i, src)
		case len(m.LayerState(src, 1, 1)) == 0:
			return fmt.Errorf("layer %d reads the state of layer %d, which has none", i, src)
		}
	}
	return nil
}
