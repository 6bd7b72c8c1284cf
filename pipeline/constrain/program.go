// Package constrain is constrained decoding: it limits the tokens a
// sequence may take next to those that keep its text inside a language
// (a JSON schema, any JSON value, a tool call's markup), so that the
// finished text always belongs to it.
//
// A language is compiled into a Grammar: a small byte-level program for a
// pushdown automaton (byte sets, splits, jumps, calls and returns: a
// Thompson machine with a call stack, so recursive schemas work). A
// Matcher runs one sequence's text through it as a set of threads; an
// Index joins a grammar with a tokenizer's vocabulary (the bytes of each
// token, in a trie) and answers, per automaton state, the mask of the
// tokens allowed next. Masks are cached per state: the states of a JSON
// text repeat (inside a string, between members), so after the first
// few steps a mask is a lookup.
//
// Whitespace between JSON tokens is bounded (a space, or a newline and
// up to 20 spaces or tabs, as llama.cpp's JSON grammar), numbers and
// nesting have bounded lengths, so a model cannot loop forever inside
// the structure; the text a sequence is cut at max_tokens may of course
// be unfinished.
package constrain

import (
	"fmt"
	"strings"
)

// op is an instruction of the automaton's program.
type op uint8

const (
	opSet   op = iota // consume a byte in sets[arg], go to pc+1
	opSplit           // fork: continue at x and at y
	opJmp             // continue at x
	opCall            // push pc+1, continue at x
	opRet             // pop the return address and continue there
	opMatch           // the text may end here
)

type inst struct {
	op   op
	x, y int32 // targets (split, jmp, call); the set index (set)
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }

func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// Grammar is a compiled language. It is immutable and safe for
// concurrent use.
type Grammar struct {
	prog  []inst
	sets  []byteSet
	start int32
	desc  string   // what it accepts, for errors and logs
	clos  [][]item // closure of each resume point (closure.go)
	need  []int8   // call levels each instruction still needs to finish (closure.go)
}

// String describes the grammar.
func (g *Grammar) String() string {
	return fmt.Sprintf("%s (%d instructions)", g.desc, len(g.prog))
}

// maxProgram bounds a compiled program: a schema that unrolls beyond it
// (maxLength 10^6, say) is refused.
const maxProgram = 1 << 20

// builder assembles a program. Fragments are emitted in place; forward
// targets are patched once known.
type builder struct {
	prog   []inst
	sets   []byteSet
	setIdx map[byteSet]int32
	err    error
}

func newBuilder() *builder { return &builder{setIdx: map[byteSet]int32{}} }

func (b *builder) pc() int32 { return int32(len(b.prog)) }

func (b *builder) emit(i inst) int32 {
	if len(b.prog) >= maxProgram {
		if b.err == nil {
			b.err = fmt.Errorf("the schema compiles to more than %d instructions (lengths or counts too large to unroll)", maxProgram)
		}
		// Instruction 0 takes the patches of what is no longer emitted:
		// the program is discarded with the error.
		return 0
	}
	b.prog = append(b.prog, i)
	return int32(len(b.prog) - 1)
}

// set consumes one byte of s.
func (b *builder) set(s byteSet) {
	id, ok := b.setIdx[s]
	if !ok {
		id = int32(len(b.sets))
		b.sets = append(b.sets, s)
		b.setIdx[s] = id
	}
	b.emit(inst{op: opSet, x: id})
}

// byteRange consumes one byte in [lo, hi].
func (b *builder) byteRange(lo, hi byte) {
	var s byteSet
	s.addRange(lo, hi)
	b.set(s)
}

// lit consumes the bytes of s.
func (b *builder) lit(s string) {
	for i := 0; i < len(s); i++ {
		var bs byteSet
		bs.add(s[i])
		b.set(bs)
	}
}

// alt emits a choice between fragments: each is tried, all continue
// after the last.
func (b *builder) alt(frags ...func()) {
	if len(frags) == 1 {
		frags[0]()
		return
	}
	var jumps []int32
	for i, f := range frags {
		if i == len(frags)-1 {
			f()
			break
		}
		split := b.emit(inst{op: opSplit})
		b.prog[split].x = b.pc()
		f()
		jumps = append(jumps, b.emit(inst{op: opJmp}))
		b.prog[split].y = b.pc()
	}
	for _, j := range jumps {
		b.prog[j].x = b.pc()
	}
}

// opt emits an optional fragment.
func (b *builder) opt(f func()) {
	split := b.emit(inst{op: opSplit})
	b.prog[split].x = b.pc()
	f()
	b.prog[split].y = b.pc()
}

// star emits zero or more repetitions of f (f must consume a byte, or
// the loop is empty and the automaton's closure ends it).
func (b *builder) star(f func()) {
	split := b.emit(inst{op: opSplit})
	b.prog[split].x = b.pc()
	f()
	b.emit(inst{op: opJmp, x: split})
	b.prog[split].y = b.pc()
}

// repeat emits between lo and hi repetitions of f; hi < 0 is unbounded.
func (b *builder) repeat(lo, hi int, f func()) {
	for range lo {
		f()
		if b.err != nil {
			return
		}
	}
	if hi < 0 {
		b.star(f)
		return
	}
	// Nested optionals: (f (f (f)?)?)?, so that an early stop skips the rest.
	var splits []int32
	for range hi - lo {
		splits = append(splits, b.emit(inst{op: opSplit}))
		b.prog[splits[len(splits)-1]].x = b.pc()
		f()
		if b.err != nil {
			return
		}
	}
	for _, s := range splits {
		b.prog[s].y = b.pc()
	}
}

// grammar finishes the program.
func (b *builder) grammar(start int32, desc string) (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	g := &Grammar{prog: b.prog, sets: b.sets, start: start, desc: desc}
	if err := g.closures(); err != nil {
		return nil, err
	}
	if err := g.needs(); err != nil {
		return nil, err
	}
	return g, nil
}

// dump lists the program (tests and debugging).
func (g *Grammar) dump() string {
	var sb strings.Builder
	for pc, in := range g.prog {
		switch in.op {
		case opSet:
			fmt.Fprintf(&sb, "%4d set %s\n", pc, setString(&g.sets[in.x]))
		case opSplit:
			fmt.Fprintf(&sb, "%4d split %d %d\n", pc, in.x, in.y)
		case opJmp:
			fmt.Fprintf(&sb, "%4d jmp %d\n", pc, in.x)
		case opCall:
			fmt.Fprintf(&sb, "%4d call %d\n", pc, in.x)
		case opRet:
			fmt.Fprintf(&sb, "%4d ret\n", pc)
		case opMatch:
			fmt.Fprintf(&sb, "%4d match\n", pc)
		}
	}
	return sb.String()
}

func setString(s *byteSet) string {
	var sb strings.Builder
	for c := 0; c < 256; c++ {
		if !s.has(byte(c)) {
			continue
		}
		lo := c
		for c+1 < 256 && s.has(byte(c+1)) {
			c++
		}
		if lo == c {
			fmt.Fprintf(&sb, "%q", rune(lo))
		} else {
			fmt.Fprintf(&sb, "%q-%q", rune(lo), rune(c))
		}
	}
	return "[" + sb.String() + "]"
}
