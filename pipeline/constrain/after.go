package constrain

import (
	"bytes"
	"fmt"
	"slices"
)

// Deferred leaves the text free until a marker appears in it (the end of
// a reasoning model's thought, "</think>"), then holds what follows to a
// grammar. Before the marker, any token with text may come but the end of
// the sequence (the answer is still to come).
type Deferred struct {
	ix     *Index
	marker []byte
	ids    []int // tokens that are the marker without its bytes (special tokens)
	mask   []uint64
	tail   []byte // the text's last bytes, where the marker may start
	m      *Matcher
}

// After returns a constraint that applies ix's grammar after marker,
// written as text or as one of ids (a special token whose text the
// vocabulary does not hold).
func (ix *Index) After(marker string, ids ...int) *Deferred {
	return &Deferred{ix: ix, marker: []byte(marker), ids: ids}
}

// Allows reports whether id may come next.
func (d *Deferred) Allows(id int) bool {
	if d.m != nil {
		return d.m.Allows(id)
	}
	if slices.Contains(d.ids, id) {
		return true
	}
	return id >= 0 && id < d.ix.v.size && len(d.ix.v.tokens[id]) > 0 && !d.ix.v.isEOS[id]
}

// Mask returns the allowed ids (shared; do not modify).
func (d *Deferred) Mask() []uint64 {
	if d.m != nil {
		return d.m.Mask()
	}
	if len(d.ids) == 0 {
		return d.ix.v.free()
	}
	if d.mask == nil {
		d.mask = slices.Clone(d.ix.v.free())
		for _, id := range d.ids {
			if id >= 0 && id < d.ix.v.size {
				d.mask[id/64] |= 1 << (id % 64)
			}
		}
	}
	return d.mask
}

// Started reports whether the marker has appeared.
func (d *Deferred) Started() bool { return d.m != nil }

// Advance records id. The bytes after the marker in the token that
// completes it start the grammar's text (bytes it refuses are dropped
// from its view: the sampler never picks such a token when the marker
// is a token of its own, as in the Qwen vocabularies).
func (d *Deferred) Advance(id int) error {
	if d.m != nil {
		return d.m.Advance(id)
	}
	if !d.Allows(id) {
		return fmt.Errorf("token %d is not allowed before %q", id, d.marker)
	}
	if slices.Contains(d.ids, id) {
		d.m, d.tail = d.ix.NewMatcher(), nil
		return nil
	}
	text := append(d.tail, d.ix.v.tokens[id]...)
	if i := bytes.Index(text, d.marker); i >= 0 {
		d.m = d.ix.NewMatcher()
		d.m.AdvanceBytes(text[i+len(d.marker):])
		d.tail = nil
		return nil
	}
	d.tail = append(d.tail[:0], text[max(0, len(text)-len(d.marker)+1):]...)
	return nil
}
