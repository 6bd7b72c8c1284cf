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
	ix   *Index
	scan markerScan
	ids  []int   // tokens that are the marker without its bytes (special tokens)
	ends []int32 // tokens that may complete the marker (markerEnds)
	mask []uint64
	m    *Matcher
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
	return &Deferred{ix: ix, scan: markerScan{marker: []byte(marker)}, ids: ids, ends: ix.markerEnds(marker)}
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

// markerScan looks for a marker in text that arrives a token at a time.
type markerScan struct {
	marker []byte
	tail   []byte // the text's last bytes, where the marker may start
}

// completes returns, when token bytes t after the text so far complete
// the marker, the bytes that follow it.
func (s *markerScan) completes(t []byte) (rest []byte, ok bool) {
	text := append(slices.Clone(s.tail), t...)
	if i := bytes.Index(text, s.marker); i >= 0 {
		return text[i+len(s.marker):], true
	}
	return nil, false
}

// advance adds token bytes t: when they complete the marker it returns
// the bytes that follow it (and forgets the text), else it keeps the
// text's last bytes.
func (s *markerScan) advance(t []byte) (rest []byte, done bool) {
	if rest, ok := s.completes(t); ok {
		s.tail = nil
		return rest, true
	}
	text := append(s.tail, t...)
	s.tail = append(s.tail[:0:0], text[max(0, len(text)-len(s.marker)+1):]...)
	return nil, false
}

// setIDs sets (on) or clears the bits of ids in mask, those under size.
func setIDs(mask []uint64, ids []int, size int, on bool) {
	for _, id := range ids {
		if id < 0 || id >= size {
			continue
		}
		if on {
			mask[id/64] |= 1 << (id % 64)
		} else {
			mask[id/64] &^= 1 << (id % 64)
		}
	}
}

// lessIDs is src less ids (src itself when there are none), copied into
// *buf, allocated once.
func lessIDs(buf *[]uint64, src []uint64, ids []int, size int) []uint64 {
	if len(ids) == 0 {
		return src
	}
	if *buf == nil {
		*buf = make([]uint64, len(src))
	}
	copy(*buf, src)
	setIDs(*buf, ids, size, false)
	return *buf
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
	if rest, ok := d.scan.completes(d.ix.v.tokens[id]); ok && len(rest) > 0 {
		return d.ix.NewMatcher().AdvanceBytes(rest)
	}
	return true
}

// Mask returns the allowed ids (shared; do not modify).
func (d *Deferred) Mask() []uint64 {
	if d.m != nil {
		return lessIDs(&d.mask, d.m.Mask(), d.later, d.ix.v.size)
	}
	if d.mask == nil {
		d.mask = make([]uint64, d.ix.v.Words())
	}
	copy(d.mask, d.ix.v.free())
	setIDs(d.mask, d.ids, d.ix.v.size, true)
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
			return fmt.Errorf("token %d is not allowed after %q", id, d.scan.marker)
		}
		return d.m.Advance(id)
	}
	if !d.Allows(id) {
		return fmt.Errorf("token %d is not allowed before %q", id, d.scan.marker)
	}
	if slices.Contains(d.ids, id) {
		d.m, d.scan.tail = d.ix.NewMatcher(), nil
		return nil
	}
	if rest, ok := d.scan.advance(d.ix.v.tokens[id]); ok {
		d.m = d.ix.NewMatcher()
		d.m.AdvanceBytes(rest) // allowed: Allows checked it
	}
	return nil
}

// Guarded is a grammar's Matcher that, once marker has appeared in the
// text, allows none of some ids more: special tokens the vocabulary lets
// read as their text, which the grammar writes before the marker
// (harmony's headers, HarmonyCall) and which inside what follows (a
// call's JSON arguments) would end the message instead.
type Guarded struct {
	m     *Matcher
	v     *Vocab
	scan  markerScan
	later []int
	on    bool
	mask  []uint64
}

// Guard returns a matcher of ix's grammar that refuses ids once marker
// has appeared in its text.
func (ix *Index) Guard(marker string, ids ...int) *Guarded {
	return &Guarded{m: ix.NewMatcher(), v: ix.v, scan: markerScan{marker: []byte(marker)}, later: ids}
}

// Allows reports whether id may come next.
func (g *Guarded) Allows(id int) bool {
	return !(g.on && slices.Contains(g.later, id)) && g.m.Allows(id)
}

// Mask returns the allowed ids (shared; do not modify).
func (g *Guarded) Mask() []uint64 {
	if !g.on {
		return g.m.Mask()
	}
	return lessIDs(&g.mask, g.m.Mask(), g.later, g.v.size)
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
		_, g.on = g.scan.advance(g.v.tokens[id])
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
	setIDs(a.mask, a.opens, a.ix.v.size, true)
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
