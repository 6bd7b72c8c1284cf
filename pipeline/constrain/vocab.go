package constrain

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
)

// Vocab is a tokenizer's vocabulary as the matcher sees it: the bytes
// each token adds to the text, in a trie, and the end-of-sequence ids.
// It is immutable and shared by every grammar over one tokenizer.
type Vocab struct {
	size   int      // ids 0..size-1
	tokens [][]byte // by id; empty: never allowed (special tokens)
	eos    []int
	isEOS  []bool

	// The trie: node 0 is the root; node n's children are the edges
	// edges[first[n]:first[n+1]] (by byte, ascending); the ids whose bytes
	// end at node n are ids[idFirst[n]:idFirst[n+1]].
	first   []int32
	edges   []edge
	idFirst []int32
	ids     []int32
	// end[n] is one past the last node of n's subtree; plain[n] says every
	// edge below n is a plainByte, so a state that loops on plain bytes
	// takes every token of the subtree.
	end   []int32
	plain []bool

	freeOnce sync.Once
	freeMask []uint64
}

// plainByte reports whether b is plain JSON string content (printable
// ASCII but the quote and the backslash): the bytes the state inside an
// unbounded string reads and stays in.
func plainByte(b byte) bool { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\' }

type edge struct {
	b     byte
	child int32
}

// NewVocab indexes tokens (the bytes of each id as it appears in the
// middle of a text; nil or empty for ids never to be generated under a
// constraint, such as special tokens) and the end-of-sequence ids.
func NewVocab(tokens [][]byte, eos []int) (*Vocab, error) {
	v := &Vocab{size: len(tokens), tokens: tokens, isEOS: make([]bool, len(tokens))}
	for _, id := range eos {
		if id < 0 || id >= len(tokens) {
			return nil, fmt.Errorf("end-of-sequence id %d outside the vocabulary of %d", id, len(tokens))
		}
		if !v.isEOS[id] {
			v.isEOS[id] = true
			v.eos = append(v.eos, id)
		}
	}
	if len(v.eos) == 0 {
		return nil, fmt.Errorf("constrained decoding needs an end-of-sequence token, and the tokenizer names none")
	}
	// The trie in depth-first preorder, built from the tokens sorted by
	// their bytes (a node's subtree is then the run of nodes after it):
	// each token adds the nodes of its bytes past the prefix it shares
	// with the one before.
	order := make([]int32, 0, len(tokens))
	for id, t := range tokens {
		if len(t) > 0 && !v.isEOS[id] {
			order = append(order, int32(id))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return bytes.Compare(tokens[a], tokens[b]) })
	parent := []int32{-1}
	via := []byte{0}
	owner := make([]int32, 0, len(order)) // the node of each id of order
	path := []int32{0}                    // nodes of the previous token's bytes, root first
	var prev []byte
	for _, id := range order {
		t := tokens[id]
		lcp := 0
		for lcp < len(t) && lcp < len(prev) && t[lcp] == prev[lcp] {
			lcp++
		}
		path = path[:lcp+1]
		for _, b := range t[lcp:] {
			n := int32(len(parent))
			parent = append(parent, path[len(path)-1])
			via = append(via, b)
			path = append(path, n)
		}
		owner = append(owner, path[len(path)-1])
		prev = t
	}
	nodes := len(parent)
	// Edges grouped by parent (children come in ascending byte order),
	// ids grouped by node (they arrive in node order).
	v.first = make([]int32, nodes+1)
	for n := 1; n < nodes; n++ {
		v.first[parent[n]+1]++
	}
	for n := 1; n <= nodes; n++ {
		v.first[n] += v.first[n-1]
	}
	v.edges = make([]edge, nodes-1)
	fill := slices.Clone(v.first[:nodes])
	for n := 1; n < nodes; n++ {
		p := parent[n]
		v.edges[fill[p]] = edge{via[n], int32(n)}
		fill[p]++
	}
	v.idFirst = make([]int32, nodes+1)
	v.ids = make([]int32, len(order))
	for k, id := range order {
		v.ids[k] = id
		v.idFirst[owner[k]+1]++
	}
	for n := 1; n <= nodes; n++ {
		v.idFirst[n] += v.idFirst[n-1]
	}
	// Each subtree's end, and whether every byte below it is plain string
	// content (see Vocab.plain), children before parents.
	v.end = make([]int32, nodes)
	v.plain = make([]bool, nodes)
	for i := nodes - 1; i >= 0; i-- {
		v.end[i], v.plain[i] = int32(i+1), true
		for e := v.first[i]; e < v.first[i+1]; e++ {
			c := v.edges[e].child
			v.end[i] = max(v.end[i], v.end[c])
			v.plain[i] = v.plain[i] && v.plain[c] && plainByte(v.edges[e].b)
		}
	}
	return v, nil
}

// Size is the number of ids.
func (v *Vocab) Size() int { return v.size }

// Words is the length of a mask in 64-bit words.
func (v *Vocab) Words() int { return (v.size + 63) / 64 }

// free returns the mask of every token with bytes (no special tokens, no
// end of sequence): the text is unconstrained.
func (v *Vocab) free() []uint64 {
	v.freeOnce.Do(func() {
		v.freeMask = make([]uint64, v.Words())
		for id, t := range v.tokens {
			if len(t) > 0 && !v.isEOS[id] {
				v.freeMask[id/64] |= 1 << (id % 64)
			}
		}
	})
	return v.freeMask
}
