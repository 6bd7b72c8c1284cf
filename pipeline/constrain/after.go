package constrain

import (
	"bytes"
	"fmt"
	"slices"
)

// Deferred leaves the text free until a marker appears in it (the end of
// a reasoning model's thought, "</think>"), then holds what follows to a
// grammar. Before the marker, any token with text may come but the end of
// the sequence (the answer is still to come), and but a token that
// completes the marker with bytes after it the grammar would refuse (a
// vocabulary that spells "</think>" in pieces, the last one ">\n{{").
type Deferred struct {
	ix     *Index
	marker []byte
	ids    []int   // tokens that are the marker without its bytes (special tokens)
	ends   []int32 // tokens that may complete the marker (markerEnds)
	mask   []uint64
	tail   []byte // the text's last bytes, where the marker may start
	m      *Matcher
	// later are tokens never allowed once the grammar has started (Then).
	later []int
}

// Then keeps ids out of what follows the marker: special tokens the
// vocabulary lets read as their content, so that the text before the
// marker may hold them (harmony's headers), which inside the grammar's
// text would end its message instead (GPT-OSS's <|end|> in a JSON
// string). It returns d.
func (d *Deferred) Then(ids ...int) *Deferred {
	d.later = append(d.later, ids...)
	return d
}

// After returns a constraint that applies ix's grammar after marker,
// written as text or as one of ids (a special token whose text the
// vocabulary does not hold).
func (ix *Index) After(marker string, ids ...int) *Deferred {
	return &Deferred{ix: ix, marker: []byte(marker), ids: ids, ends: ix.markerEnds(marker)}
}

// markerEnds lists, once per marker, the tokens that may complete it: the
// ones that begin with a proper suffix of it or hold all of it.
func (ix *Index) markerEnds(marker string) []int32 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if e, ok := ix.ends[marker]; ok {
		return e
	}
	var out []int32
	for id, t := range ix.v.tokens {
		if len(t) == 0 || ix.v.isEOS[id] {
			continue
		}
		hit := bytes.Contains(t, []byte(marker))
		for j := 1; j < len(marker) && !hit; j++ {
			hit = bytes.HasPrefix(t, []byte(marker[j:]))
		}
		if hit {
			out = append(out, int32(id))
		}
	}
	if ix.ends == nil {
		ix.ends = map[string][]int32{}
	}
	ix.ends[marker] = out
	return out
}

// completes returns, when token bytes t after the text so far complete
// the marker, the bytes that follow it.
func (d *Deferred) completes(t []byte) (rest []byte, ok bool) {
	text := append(slices.Clone(d.tail), t...)
	if i := bytes.Index(text, d.marker); i >= 0 {
		return text[i+len(d.marker):], true
	}
	return nil, false
}

// Allows reports whether id may come next.
func (d *Deferred) Allows(id int) bool {
	if d.m != nil {
		return !slices.Contains(d.later, id) && d.m.Allows(id)
	}
	if slices.Contains(d.ids, id) {
		return true
	}
	if id < 0 || id >= d.ix.v.size || len(d.ix.v.tokens[id]) == 0 || d.ix.v.isEOS[id] {
		return false
	}
	if rest, ok := d.completes(d.ix.v.tokens[id]); ok && len(rest) > 0 {
		return d.ix.NewMatcher().AdvanceBytes(rest)
	}
	return true
}

// Mask returns the allowed ids (shared; do not modify).
func (d *Deferred) Mask() []uint64 {
	if d.mask == nil {
		d.mask = make([]uint64, d.ix.v.Words())
	}
	if d.m != nil {
		if len(d.later) == 0 {
			return d.m.Mask()
		}
		copy(d.mask, d.m.Mask())
		for _, id := range d.later {
			if id >= 0 && id < d.ix.v.size {
				d.mask[id/64] &^= 1 << (id % 64)
			}
		}
		return d.mask
	}
	copy(d.mask, d.ix.v.free())
	for _, id := range d.ids {
		if id >= 0 && id < d.ix.v.size {
			d.mask[id/64] |= 1 << (id % 64)
		}
	}
	for _, id := range d.ends {
		if !d.Allows(int(id)) {
			d.mask[id/64] &^= 1 << (id % 64)
		}
	}
	return d.mask
}

// Started reports whether the marker has appeared.
func (d *Deferred) Started() bool { return d.m != nil }

// Advance records id. The bytes after the marker in the token that
// completes it start the grammar's text.
func (d *Deferred) Advance(id int) error {
	if d.m != nil {
		if slices.Contains(d.later, id) {
			return fmt.Errorf("token %d is not allowed after %q", id, d.marker)
		}
		return d.m.Advance(id)
	}
	if !d.Allows(id) {
		return fmt.Errorf("token %d is not allowed before %q", id, d.marker)
	}
	if slices.Contains(d.ids, id) {
		d.m, d.tail = d.ix.NewMatcher(), nil
		return nil
	}
	t := d.ix.v.tokens[id]
	if rest, ok := d.completes(t); ok {
		d.m, d.tail = d.ix.NewMatcher(), nil
		d.m.AdvanceBytes(rest) // allowed: Allows checked it
		return nil
	}
	text := append(d.tail, t...)
	d.tail = append(d.tail[:0:0], text[max(0, len(text)-len(d.marker)+1):]...)
	return nil
}

// Guarded is a grammar's Matcher that, once marker has appeared in the
// text, allows none of some ids more: special tokens the vocabulary lets
// read as their text, which the grammar writes before the marker
// (harmony's headers, HarmonyCall) and which inside what follows (a
// call's JSON arguments) would end the message instead.
type Guarded struct {
	m      *Matcher
	v      *Vocab
	marker []byte
	later  []int
	tail   []byte
	on     bool
	mask   []uint64
}

// Guard returns a matcher of ix's grammar that refuses ids once marker
// has appeared in its text.
func (ix *Index) Guard(marker string, ids ...int) *Guarded {
	return &Guarded{m: ix.NewMatcher(), v: ix.v, marker: []byte(marker), later: ids}
}

// Allows reports whether id may come next.
func (g *Guarded) Allows(id int) bool {
	return !(g.on && slices.Contains(g.later, id)) && g.m.Allows(id)
}

// Mask returns the allowed ids (shared; do not modify).
func (g *Guarded) Mask() []uint64 {
	if !g.on || len(g.later) == 0 {
		return g.m.Mask()
	}
	if g.mask == nil {
		g.mask = make([]uint64, g.v.Words())
	}
	copy(g.mask, g.m.Mask())
	for _, id := range g.later {
		if id >= 0 && id < g.v.size {
			g.mask[id/64] &^= 1 << (id % 64)
		}
	}
	return g.mask
}

// Advance records id.
func (g *Guarded) Advance(id int) error {
	if !g.Allows(id) {
		return fmt.Errorf("token %d is not allowed here", id)
	}
	if err := g.m.Advance(id); err != nil {
		return err
	}
	if !g.on && id >= 0 && id < g.v.size {
		text := append(g.tail, g.v.tokens[id]...)
		if bytes.Contains(text, g.marker) {
			g.on, g.tail = true, nil
		} else {
			g.tail = append(g.tail[:0:0], text[max(0, len(text)-len(g.marker)+1):]...)
		}
	}
	return nil
}

// MaybeAfter is the constraint of a model that may open a thought of its
// own (Qwen3's <think>, when the prompt neither opens nor closes one):
// its first token either starts the grammar's text, or is one of opens
// (a token that is the opening tag), after which the text is free until
// marker and then held to the grammar, as After does.
type MaybeAfter struct {
	ix      *Index
	opens   []int
	marker  string
	ids     []int
	m       *Matcher  // the grammar from the first token
	d       *Deferred // once the first token opened a thought
	decided bool
	mask    []uint64
}

// MaybeAfter returns the constraint above: opens are the tokens that
// open a thought, marker (or one of ids) the end of one.
func (ix *Index) MaybeAfter(opens []int, marker string, ids ...int) *MaybeAfter {
	return &MaybeAfter{ix: ix, opens: opens, marker: marker, ids: ids, m: ix.NewMatcher()}
}

// Allows reports whether id may come next.
func (a *MaybeAfter) Allows(id int) bool {
	switch {
	case a.d != nil:
		return a.d.Allows(id)
	case a.decided:
		return a.m.Allows(id)
	}
	return a.m.Allows(id) || slices.Contains(a.opens, id)
}

// Mask returns the allowed ids (shared; do not modify).
func (a *MaybeAfter) Mask() []uint64 {
	switch {
	case a.d != nil:
		return a.d.Mask()
	case a.decided:
		return a.m.Mask()
	}
	if a.mask == nil {
		a.mask = make([]uint64, a.ix.v.Words())
	}
	copy(a.mask, a.m.Mask())
	for _, id := range a.opens {
		if id >= 0 && id < a.ix.v.size {
			a.mask[id/64] |= 1 << (id % 64)
		}
	}
	return a.mask
}

// Advance records id: the first token decides between the two.
func (a *MaybeAfter) Advance(id int) error {
	switch {
	case a.d != nil:
		return a.d.Advance(id)
	case a.decided:
		return a.m.Advance(id)
	}
	a.decided = true
	if slices.Contains(a.opens, id) && !a.m.Allows(id) {
		a.d = a.ix.After(a.marker, a.ids...)
		return nil
	}
	return a.m.Advance(id)
}
