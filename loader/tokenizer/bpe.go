package tokenizer

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// model turns one pre-token into ids, appended to out.
type model interface {
	tokenize(word string, out []int) ([]int, error)
}

// bpeModel is HF's BPE model. Merges are keyed by the pair of ids and give
// (rank, merged id); the heap-based merge loop replicates tokenizers'
// Word::merge_all exactly, including its tie-breaking by position.
type bpeModel struct {
	vocab       map[string]int // lookup keys (raw bytes in byteMode)
	merges      map[uint64]mergeInfo
	unk         int // -1 when unset
	unkMissing  string
	fuseUnk     bool
	byteFB      bool
	ignoreMerge bool
	prefix      string // continuing_subword_prefix (lookup space)
	suffix      string // end_of_word_suffix (lookup space)
	byteFBIDs   [256]int32
	// byteMode: the pre-tokenizer's final ByteLevel step emits raw bytes and
	// vocab keys were mapped back from GPT-2 characters to bytes, so each
	// byte is one initial symbol. Saves a string conversion per pre-token.
	byteMode bool

	cacheMu sync.Mutex
	cache   map[string][]int32
}

type mergeInfo struct {
	rank  uint32
	newID uint32
}

const (
	bpeCacheMax     = 1 << 18 // entries before the cache is reset
	bpeCacheWordMax = 256     // bytes; longer words are not cached
)

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func buildBPE(c *component, vocab map[string]int) (*bpeModel, error) {
	m := &bpeModel{vocab: vocab, unk: -1}
	var err error
	var unk string
	if unk, err = c.str("unk_token", ""); err != nil {
		return nil, err
	}
	if unk != "" {
		// As in tokenizers, a missing unk token is an error only when an
		// unknown character needs it.
		if id, ok := vocab[unk]; ok {
			m.unk = id
		} else {
			m.unkMissing = unk
		}
	}
	if m.fuseUnk, err = c.boolean("fuse_unk", false); err != nil {
		return nil, err
	}
	if m.byteFB, err = c.boolean("byte_fallback", false); err != nil {
		return nil, err
	}
	if m.ignoreMerge, err = c.boolean("ignore_merges", false); err != nil {
		return nil, err
	}
	if m.prefix, err = c.str("continuing_subword_prefix", ""); err != nil {
		return nil, err
	}
	if m.suffix, err = c.str("end_of_word_suffix", ""); err != nil {
		return nil, err
	}
	if c.has("dropout") {
		var d float64
		if err := c.get("dropout", &d); err != nil {
			return nil, err
		}
		if d < 0 || d > 1 {
			return nil, fmt.Errorf("%s.dropout: %v outside [0, 1]", c.where, d)
		}
		// Dropout is a training-time augmentation; inference ignores it.
	}
	for b := 0; b < 256; b++ {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			id = -1
		}
		m.byteFBIDs[b] = int32(id)
	}
	var merges [][2]string
	if raw, ok := c.fields["merges"]; ok && !isNull(raw) {
		var err error
		if merges, err = fastMerges(raw); err != nil {
			if merges, err = slowMerges(raw, c.where+".merges"); err != nil {
				return nil, err
			}
		}
	}
	m.merges = make(map[uint64]mergeInfo, len(merges))
	for i, mg := range merges {
		a, b := mg[0], mg[1]
		aid, ok := vocab[a]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: token %q is not in the vocabulary", c.where, i, a)
		}
		bid, ok := vocab[b]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: token %q is not in the vocabulary", c.where, i, b)
		}
		merged := a + strings.TrimPrefix(b, m.prefix)
		nid, ok := vocab[merged]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: merged token %q is not in the vocabulary", c.where, i, merged)
		}
		m.merges[pairKey(aid, bid)] = mergeInfo{rank: uint32(i), newID: uint32(nid)}
	}
	m.cache = make(map[string][]int32)
	return m, nil
}

func parseMerge(raw json.RawMessage) (string, string, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", "", err
		}
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return "", "", fmt.Errorf("merge %q: expected two tokens separated by a space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil {
		return "", "", fmt.Errorf("expected \"a b\" or [\"a\", \"b\"]: %w", err)
	}
	if len(pair) != 2 {
		return "", "", fmt.Errorf("expected a pair, got %d strings", len(pair))
	}
	return pair[0], pair[1], nil
}

// toByteMode rewrites the lookup vocabulary from GPT-2 characters to raw
// bytes. It reports false (and changes nothing) when that is not a
// bijection, or when prefix/suffix/byte fallback make it unsafe.
func (m *bpeModel) toByteMode() bool {
	if m.byteFB {
		return false
	}
	raw := make(map[string]int, len(m.vocab))
	var buf []byte
	for tok, id := range m.vocab {
		var ok bool
		buf, ok = byteLevelDecode(tok, buf[:0])
		key := tok
		if ok {
			key = string(buf)
		}
		if prev, dup := raw[key]; dup && prev != id {
			return false
		}
		raw[key] = id
	}
	conv := func(s string) (string, bool) {
		b, ok := byteLevelDecode(s, nil)
		return string(b), ok
	}
	p, ok1 := conv(m.prefix)
	s, ok2 := conv(m.suffix)
	if !ok1 || !ok2 {
		return false
	}
	m.vocab, m.prefix, m.suffix, m.byteMode = raw, p, s, true
	return true
}

func (m *bpeModel) tokenize(w string, out []int) ([]int, error) {
	if w == "" {
		return out, nil
	}
	if m.ignoreMerge {
		if id, ok := m.vocab[w]; ok {
			return append(out, id), nil
		}
	}
	cacheable := len(w) < bpeCacheWordMax
	if cacheable {
		m.cacheMu.Lock()
		ids, ok := m.cache[w]
		m.cacheMu.Unlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out, nil
		}
	}
	start := len(out)
	out, err := m.mergeWord(w, out)
	if err != nil {
		return out, err
	}
	if cacheable {
		ids := make([]int32, len(out)-start)
		for i, id := range out[start:] {
			ids[i] = int32(id)
		}
		m.cacheMu.Lock()
		if len(m.cache) >= bpeCacheMax {
			m.cache = make(map[string][]int32)
		}
		m.cache[strings.Clone(w)] = ids
		m.cacheMu.Unlock()
	}
	return out, nil
}

// symbol is one node of the word's doubly linked list.
type symbol struct {
	id         int32
	prev, next int32
	dead       bool
}

type mergeCand struct {
	pos   int32
	rank  uint32
	newID uint32
}

type mergeHeap []mergeCand

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeWord builds the initial symbols (with unk / byte fallback handling
// as in tokenizers' BPE::merge_word) and applies merges by rank.
func (m *bpeModel) mergeWord(w string, out []int) ([]int, error) {
	syms := make([]symbol, 0, len(w))
	add := func(id int) {
		syms = append(syms, symbol{id: int32(id), prev: int32(len(syms) - 1), next: int32(len(syms) + 1)})
	}
	unkID, unkPending := -1, false
	var key []byte
	for i := 0; i < len(w); {
		sz := 1
		if !m.byteMode {
			_, sz = utf8.DecodeRuneInString(w[i:])
		}
		end := i + sz
		s := w[i:end]
		if m.prefix != "" && i > 0 || m.suffix != "" && end == len(w) {
			key = key[:0]
			if i > 0 {
				key = append(key, m.prefix...)
			}
			key = append(key, s...)
			if end == len(w) {
				key = append(key, m.suffix...)
			}
			s = string(key)
		}
		if id, ok := m.vocab[s]; ok {
			if unkPending {
				add(unkID)
				unkPending = false
			}
			add(id)
			i = end
			continue
		}
		if m.byteFB {
			all := true
			for k := 0; k < len(s); k++ {
				if m.byteFBIDs[s[k]] < 0 {
					all = false
					break
				}
			}
			if all {
				for k := 0; k < len(s); k++ {
					add(int(m.byteFBIDs[s[k]]))
				}
				i = end
				continue
			}
		}
		if m.unkMissing != "" {
			return out, fmt.Errorf("bpe: %q needs the unk token %q, which is not in the vocabulary", s, m.unkMissing)
		}
		if m.unk >= 0 {
			if unkPending && !m.fuseUnk {
				add(unkID)
			}
			unkID, unkPending = m.unk, true
		}
		i = end
	}
	if unkPending {
		add(unkID)
	}
	if len(syms) == 0 {
		return out, nil
	}
	syms[len(syms)-1].next = -1
	if len(syms) > 1 {
		var h mergeHeap
		for i := 0; i+1 < len(syms); i++ {
			if mi, ok := m.merges[pairKey(int(syms[i].id), int(syms[i+1].id))]; ok {
				h = append(h, mergeCand{pos: int32(i), rank: mi.rank, newID: mi.newID})
			}
		}
		heap.Init(&h)
		for h.Len() > 0 {
			top := heap.Pop(&h).(mergeCand)
			cur := &syms[top.pos]
			if cur.dead || cur.next < 0 {
				continue
			}
			right := syms[cur.next]
			mi, ok := m.merges[pairKey(int(cur.id), int(right.id))]
			if !ok || mi.newID != top.newID {
				continue
			}
			cur.id = int32(top.newID)
			syms[cur.next].dead = true
			cur.next = right.next
			if right.next >= 0 {
				syms[right.next].prev = top.pos
			}
			if cur.prev >= 0 {
				p := syms[cur.prev]
				if mi, ok := m.merges[pairKey(int(p.id), int(cur.id))]; ok {
					heap.Push(&h, mergeCand{pos: cur.prev, rank: mi.rank, newID: mi.newID})
				}
			}
			if cur.next >= 0 {
				n := syms[cur.next]
				if mi, ok := m.merges[pairKey(int(cur.id), int(n.id))]; ok {
					heap.Push(&h, mergeCand{pos: top.pos, rank: mi.rank, newID: mi.newID})
				}
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out, nil
}
