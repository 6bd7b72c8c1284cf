package constrain

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// thread is one way the text so far can be read: the byte set it may
// consume next (an opSet instruction; matchPC for "the text may end
// here") and its call stack (an interned frame; 0 is empty).
type thread struct {
	pc    int32
	stack int32
}

const matchPC = -1

// frame is a call-stack entry: the return address over its parent.
type frame struct {
	ret, parent, depth int32
}

// Index joins a grammar with a vocabulary: the masks of allowed tokens,
// cached per automaton state. It is safe for concurrent use; matchers
// of many sequences share one index.
type Index struct {
	g *Grammar
	v *Vocab

	mu       sync.Mutex
	frames   []frame // frames[0] is the empty stack
	frameIdx map[[2]int32]int32
	masks    map[string][]uint64
	cached   int                // bytes of masks held
	ends     map[string][]int32 // Deferred's marker-completing tokens, by marker
}

// maxMaskBytes bounds the masks an index keeps; past it the cache starts
// over (the states of a text repeat, so it refills with the live ones).
// serve keeps up to 32 indexes: 512 MiB at most.
const maxMaskBytes = 16 << 20

// NewIndex returns the index of g over v.
func NewIndex(g *Grammar, v *Vocab) *Index {
	return &Index{g: g, v: v, frames: []frame{{ret: -1, parent: -1}}, frameIdx: map[[2]int32]int32{}, masks: map[string][]uint64{}}
}

// Grammar returns the index's grammar.
func (ix *Index) Grammar() *Grammar { return ix.g }

// push interns the stack s with ret on top; ok is false past maxDepth,
// or when what follows the return could not finish within it.
func (ix *Index) push(s, ret int32) (int32, bool) {
	if d := ix.frames[s].depth; d >= maxDepth || d+int32(ix.g.need[ret]) > maxDepth {
		return 0, false
	}
	k := [2]int32{s, ret}
	if id, ok := ix.frameIdx[k]; ok {
		return id, true
	}
	id := int32(len(ix.frames))
	ix.frames = append(ix.frames, frame{ret: ret, parent: s, depth: ix.frames[s].depth + 1})
	ix.frameIdx[k] = id
	return id, true
}

// resume adds to out the threads that resume at pc with stack s.
func (ix *Index) resume(out []thread, pc, s int32) []thread {
	for i := range ix.g.clos[pc] {
		it := &ix.g.clos[pc][i]
		switch it.kind {
		case itemMatch:
			if s == 0 {
				out = addThread(out, thread{matchPC, 0})
			}
		case itemRet:
			if s != 0 {
				f := ix.frames[s]
				out = ix.resume(out, f.ret, f.parent)
			}
		case itemSet:
			st, ok := s, true
			for _, r := range it.push {
				if st, ok = ix.push(st, r); !ok {
					break
				}
			}
			if ok && ix.frames[st].depth+int32(ix.g.need[it.pc]) <= maxDepth {
				out = addThread(out, thread{it.pc, st})
			}
		}
	}
	return out
}

func addThread(out []thread, t thread) []thread {
	for _, u := range out {
		if u == t {
			return out
		}
	}
	return append(out, t)
}

// step returns the state after byte b (appended to out[:0]).
func (ix *Index) step(out, state []thread, b byte) []thread {
	out = out[:0]
	for _, t := range state {
		if t.pc == matchPC {
			continue
		}
		in := ix.g.prog[t.pc]
		if ix.g.sets[in.x].has(b) {
			out = ix.resume(out, t.pc+1, t.stack)
		}
	}
	return out
}

// start is the state before any text.
func (ix *Index) start() []thread {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.resume(nil, ix.g.start, 0)
}

func accepting(state []thread) bool {
	for _, t := range state {
		if t.pc == matchPC {
			return true
		}
	}
	return false
}

// stateKey is a state's cache key (its threads, sorted).
func stateKey(state []thread) string {
	s := slices.Clone(state)
	slices.SortFunc(s, func(a, b thread) int {
		if a.pc != b.pc {
			return int(a.pc - b.pc)
		}
		return int(a.stack - b.stack)
	})
	buf := make([]byte, 8*len(s))
	for i, t := range s {
		binary.LittleEndian.PutUint32(buf[8*i:], uint32(t.pc))
		binary.LittleEndian.PutUint32(buf[8*i+4:], uint32(t.stack))
	}
	return string(buf)
}

// mask returns the allowed ids of state (shared: do not modify).
func (ix *Index) mask(state []thread) []uint64 {
	key := stateKey(state)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if m, ok := ix.masks[key]; ok {
		return m
	}
	m := make([]uint64, ix.v.Words())
	w := &walker{ix: ix, keys: map[string]int32{}, m: m}
	w.walk(0, w.intern(slices.Clone(state)))
	any := false
	for _, w := range m {
		any = any || w != 0
	}
	if accepting(state) || !any {
		// The text may end (or, a vocabulary without the bytes the
		// grammar needs next, must: a dead end ends the sequence).
		for _, id := range ix.v.eos {
			m[id/64] |= 1 << (id % 64)
		}
	}
	if ix.cached+8*len(m) > maxMaskBytes {
		clear(ix.masks)
		ix.cached = 0
	}
	ix.masks[key] = m
	ix.cached += 8 * len(m)
	return m
}

// walker computes one mask: a walk of the vocabulary's trie that follows
// the automaton, memoizing its transitions as it goes (a lazy DFA local
// to the walk: inside a string most bytes lead back to the same state, so
// most of the trie's nodes cost one table lookup).
type walker struct {
	ix     *Index
	keys   map[string]int32
	states [][]thread
	next   [][256]int32 // 0 unknown, -1 dead, else state+1
	loops  []int8       // 0 unknown, 1 every plain byte leads back to the state, -1 not
	buf    []thread
	m      []uint64
}

// intern returns the id of state (which the walker keeps).
func (w *walker) intern(state []thread) int32 {
	k := stateKey(state)
	if id, ok := w.keys[k]; ok {
		return id
	}
	id := int32(len(w.states))
	w.keys[k] = id
	w.states = append(w.states, state)
	w.next = append(w.next, [256]int32{})
	w.loops = append(w.loops, 0)
	return id
}

// step is the transition of state id over b; -1 when the text dies.
func (w *walker) step(id int32, b byte) int32 {
	if n := w.next[id][b]; n != 0 {
		if n < 0 {
			return -1
		}
		return n - 1
	}
	w.buf = w.ix.step(w.buf, w.states[id], b)
	n := int32(-1)
	if len(w.buf) > 0 {
		n = w.intern(slices.Clone(w.buf))
	}
	if n < 0 {
		w.next[id][b] = -1
	} else {
		w.next[id][b] = n + 1
	}
	return n
}

// loopsOnPlain reports whether every plain byte takes state id back to
// itself (the inside of an unbounded string).
func (w *walker) loopsOnPlain(id int32) bool {
	if w.loops[id] == 0 {
		w.loops[id] = 1
		for b := 0x20; b < 0x7f; b++ {
			if plainByte(byte(b)) && w.step(id, byte(b)) != id {
				w.loops[id] = -1
				break
			}
		}
	}
	return w.loops[id] > 0
}

// walk marks in the mask every token under trie node n that state id
// can read.
func (w *walker) walk(n, id int32) {
	v := w.ix.v
	for e := v.first[n]; e < v.first[n+1]; e++ {
		ed := v.edges[e]
		next := w.step(id, ed.b)
		if next < 0 {
			continue
		}
		c := ed.child
		if v.plain[c] && w.loopsOnPlain(next) {
			// Every token below reads plain bytes: all of them, unwalked.
			for _, t := range v.ids[v.idFirst[c]:v.idFirst[v.end[c]]] {
				w.m[t/64] |= 1 << (t % 64)
			}
			continue
		}
		for _, t := range v.ids[v.idFirst[c]:v.idFirst[c+1]] {
			w.m[t/64] |= 1 << (t % 64)
		}
		if v.first[c] < v.first[c+1] {
			w.walk(c, next)
		}
	}
}

// Matcher follows one sequence's text through an index. It is not safe
// for concurrent use (one sequence, one goroutine), but matchers of one
// index may run concurrently.
type Matcher struct {
	ix    *Index
	state []thread
	buf   []thread
	ended bool
}

// NewMatcher starts a text.
func (ix *Index) NewMatcher() *Matcher {
	return &Matcher{ix: ix, state: ix.start()}
}

// Allows reports whether id may come next.
func (m *Matcher) Allows(id int) bool {
	if m.ended || id < 0 || id >= m.ix.v.size {
		return false
	}
	if m.ix.v.isEOS[id] {
		return accepting(m.state) || m.deadEnd()
	}
	t := m.ix.v.tokens[id]
	if len(t) == 0 {
		return false
	}
	m.ix.mu.Lock()
	defer m.ix.mu.Unlock()
	s := m.state
	var bufs [2][]thread
	for i, c := range t {
		bufs[i%2] = m.ix.step(bufs[i%2], s, c)
		if len(bufs[i%2]) == 0 {
			return false
		}
		s = bufs[i%2]
	}
	return true
}

// deadEnd reports whether no token but the end of the sequence continues
// the text (mask adds the end-of-sequence ids there).
func (m *Matcher) deadEnd() bool {
	mask := m.Mask()
	for i, w := range mask {
		for _, id := range m.ix.v.eos {
			if id/64 == i {
				w &^= 1 << (id % 64)
			}
		}
		if w != 0 {
			return false
		}
	}
	return true
}

// Mask returns the allowed ids as a bit set (bit id%64 of word id/64);
// the slice is shared and must not be modified.
func (m *Matcher) Mask() []uint64 {
	if m.ended {
		return make([]uint64, m.ix.v.Words())
	}
	return m.ix.mask(m.state)
}

// Accepting reports whether the text so far is complete.
func (m *Matcher) Accepting() bool { return !m.ended && accepting(m.state) }

// Ended reports whether an end-of-sequence id was advanced over.
func (m *Matcher) Ended() bool { return m.ended }

// Advance records id; an id the grammar does not allow is an error and
// leaves the matcher as it was.
func (m *Matcher) Advance(id int) error {
	if !m.Allows(id) {
		return fmt.Errorf("token %d is not allowed by %s here", id, m.ix.g.desc)
	}
	if m.ix.v.isEOS[id] {
		m.ended = true
		return nil
	}
	m.ix.mu.Lock()
	defer m.ix.mu.Unlock()
	for _, c := range m.ix.v.tokens[id] {
		m.buf = m.ix.step(m.buf, m.state, c)
		m.state, m.buf = m.buf, m.state
	}
	return nil
}

// AdvanceBytes feeds text that is not a token (tests, and prefixes the
// caller has already committed to); it reports whether the text was
// allowed, and leaves the matcher as it was when not.
func (m *Matcher) AdvanceBytes(text []byte) bool {
	m.ix.mu.Lock()
	defer m.ix.mu.Unlock()
	s := slices.Clone(m.state)
	var buf []thread
	for _, c := range text {
		buf = m.ix.step(buf, s, c)
		if len(buf) == 0 {
			return false
		}
		s, buf = buf, s
	}
	m.state = s
	return true
}
