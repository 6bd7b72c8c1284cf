package constrain

import "fmt"

// The automaton's epsilon moves (split, jmp, call, ret) are resolved once
// per grammar: for each place a thread can resume (the start, after a
// consumed byte, a call's return address), closure lists where it ends
// up: the byte sets it may consume next, with the return addresses the
// calls on the way pushed, a return that pops the thread's own stack, or
// the end of the text.

// item is one end of a resume point's closure.
type item struct {
	kind int8    // itemSet, itemRet, itemMatch
	pc   int32   // itemSet: the opSet instruction
	push []int32 // itemSet: return addresses pushed on the way, outermost first
}

const (
	itemSet int8 = iota
	itemRet
	itemMatch
)

// maxDepth bounds the call stack (nesting of recursive schemas and of
// free-form JSON). A thread lives only while what it has opened can still
// be closed within the bound (Grammar.need): at the deepest level an
// object may open but takes no member whose value would have to nest
// deeper, so the text closes its structures first and never reaches a
// dead end.
const maxDepth = 32

// maxClosureSteps bounds the work of a grammar's closures, all together
// (every instruction visited on every call stack): a pattern such as
// (|a){1000}, where every position can be skipped, has closures as long as
// the program, and their total grows with its square; a $ref that reaches
// itself without reading a byte, through two call sites, has as many call
// stacks as 2^maxDepth.
const maxClosureSteps = 1 << 18

// needs computes g.need: for each instruction, the fewest call levels
// below the current one that a text must still open to get from there to
// its level's end (the return of its subroutine, or the match), at most
// maxDepth+1 (none within the bound). A thread whose stack depth plus its
// need exceeds maxDepth could not finish, so the index drops it.
func (g *Grammar) needs() error {
	const none = maxDepth + 1
	n := int32(len(g.prog))
	need := make([]int8, n+1)
	preds := make([][]int32, n+1)
	var queue []int32
	for pc, in := range g.prog {
		need[pc] = none
		p := int32(pc)
		switch in.op {
		case opSet:
			preds[p+1] = append(preds[p+1], p)
		case opSplit:
			preds[in.x] = append(preds[in.x], p)
			preds[in.y] = append(preds[in.y], p)
		case opJmp:
			preds[in.x] = append(preds[in.x], p)
		case opCall:
			preds[in.x] = append(preds[in.x], p)
			preds[p+1] = append(preds[p+1], p)
		case opRet, opMatch:
			need[pc] = 0
			queue = append(queue, p)
		}
	}
	need[n] = none // past the end: nothing
	// The needs only fall, each at most none times: a worklist over the
	// predecessors of every instruction whose need fell.
	eval := func(pc int32) int8 {
		in := g.prog[pc]
		switch in.op {
		case opSet:
			return need[pc+1]
		case opSplit:
			return min(need[in.x], need[in.y])
		case opJmp:
			return need[in.x]
		case opCall:
			return min(none, max(need[in.x]+1, need[pc+1]))
		}
		return 0
	}
	for len(queue) > 0 {
		pc := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, p := range preds[pc] {
			if v := eval(p); v < need[p] {
				need[p] = v
				queue = append(queue, p)
			}
		}
	}
	g.need = need
	if need[g.start] > maxDepth {
		return fmt.Errorf("the schema has no value that nests at most %d deep (a required $ref back to itself?)", maxDepth)
	}
	return nil
}

// closures computes the closure of every resume point of g.
func (g *Grammar) closures() error {
	g.clos = make([][]item, len(g.prog)+1)
	budget := maxClosureSteps
	resume := map[int32]bool{g.start: true}
	for pc, in := range g.prog {
		switch in.op {
		case opSet, opCall:
			resume[int32(pc)+1] = true
		}
	}
	for pc := range resume {
		if int(pc) <= len(g.prog) {
			g.clos[pc] = g.closureOf(pc, &budget)
			if budget < 0 {
				return fmt.Errorf("the schema is too ambiguous to enforce (a pattern or a run of optional parts whose every position may be skipped, or a $ref that reaches itself without reading a character)")
			}
		}
	}
	return nil
}

// closureOf follows the epsilon moves from pc with an empty local stack,
// spending one step of budget per instruction visited and stopping when
// it runs out.
func (g *Grammar) closureOf(pc int32, budget *int) []item {
	var out []item
	type key struct {
		pc   int32
		push string
	}
	seen := map[key]bool{}
	var walk func(pc int32, push []int32)
	walk = func(pc int32, push []int32) {
		if len(push) > maxDepth || int(pc) >= len(g.prog) || *budget < 0 {
			return
		}
		k := key{pc, pushKey(push)}
		if seen[k] {
			return
		}
		seen[k] = true
		*budget--
		in := g.prog[pc]
		switch in.op {
		case opSet:
			out = append(out, item{kind: itemSet, pc: pc, push: append([]int32(nil), push...)})
		case opSplit:
			walk(in.x, push)
			walk(in.y, push)
		case opJmp:
			walk(in.x, push)
		case opCall:
			walk(in.x, append(push[:len(push):len(push)], pc+1))
		case opRet:
			if len(push) == 0 {
				out = append(out, item{kind: itemRet})
				return
			}
			walk(push[len(push)-1], push[:len(push)-1])
		case opMatch:
			if len(push) == 0 {
				out = append(out, item{kind: itemMatch})
			}
		}
	}
	walk(pc, nil)
	return dedupeItems(out)
}

func pushKey(push []int32) string {
	b := make([]byte, 0, 4*len(push))
	for _, p := range push {
		b = append(b, byte(p), byte(p>>8), byte(p>>16), byte(p>>24))
	}
	return string(b)
}

func dedupeItems(in []item) []item {
	var out []item
	seen := map[string]bool{}
	for _, it := range in {
		k := string(rune(it.kind)) + pushKey([]int32{it.pc}) + pushKey(it.push)
		if !seen[k] {
			seen[k] = true
			out = append(out, it)
		}
	}
	return out
}
