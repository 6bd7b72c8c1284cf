package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// byteTrie maps byte strings to ids; children are found through one hash
// map keyed by (node, byte), which keeps it compact for 100k+ entries.
type byteTrie struct {
	child map[uint64]int32
	value []int32 // per node; -1 when no key ends there
	first [256]bool
}

func newByteTrie() *byteTrie {
	return &byteTrie{child: map[uint64]int32{}, value: []int32{-1}}
}

func (t *byteTrie) insert(key string, id int) {
	if key == "" {
		return
	}
	t.first[key[0]] = true
	node := int32(0)
	for i := 0; i < len(key); i++ {
		k := uint64(node)<<8 | uint64(key[i])
		next, ok := t.child[k]
		if !ok {
			next = int32(len(t.value))
			t.value = append(t.value, -1)
			t.child[k] = next
		}
		node = next
	}
	t.value[node] = int32(id)
}

// prefixes calls fn(length, id) for every key that is a prefix of s, shortest
// first.
func (t *byteTrie) prefixes(s string, fn func(n, id int)) {
	node := int32(0)
	for i := 0; i < len(s); i++ {
		next, ok := t.child[uint64(node)<<8|uint64(s[i])]
		if !ok {
			return
		}
		node = next
		if v := t.value[node]; v >= 0 {
			fn(i+1, int(v))
		}
	}
}

// longest returns the length and id of the longest key that prefixes s.
func (t *byteTrie) longest(s string) (n, id int) {
	n, id = 0, -1
	if s == "" || !t.first[s[0]] {
		return
	}
	t.prefixes(s, func(l, i int) { n, id = l, i })
	return
}

// ---------------------------------------------------------------------------
// Unigram (SentencePiece unigram LM: T5, ALBERT, XLNet).

type unigramModel struct {
	pieces   []string
	scores   []float64
	vocab    map[string]int
	trie     *byteTrie
	unk      int
	byteFB   bool
	fuseUnk  bool
	unkScore float64
	fbIDs    [256]int32
}

func buildUnigram(c *component) (*unigramModel, map[string]int, error) {
	var rawVocab []json.RawMessage
	if err := c.get("vocab", &rawVocab); err != nil {
		return nil, nil, err
	}
	if len(rawVocab) > maxVocab {
		return nil, nil, fmt.Errorf("%s.vocab: %d entries, more than the limit %d", c.where, len(rawVocab), maxVocab)
	}
	m := &unigramModel{vocab: make(map[string]int, len(rawVocab)), trie: newByteTrie(), unk: -1, fuseUnk: true}
	minScore := math.Inf(1)
	for i, raw := range rawVocab {
		var pair []json.RawMessage
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
			return nil, nil, fmt.Errorf("%s.vocab[%d]: expected [piece, score]", c.where, i)
		}
		var piece string
		var score float64
		if err := json.Unmarshal(pair[0], &piece); err != nil {
			return nil, nil, fmt.Errorf("%s.vocab[%d]: piece: %w", c.where, i, err)
		}
		if err := json.Unmarshal(pair[1], &score); err != nil {
			return nil, nil, fmt.Errorf("%s.vocab[%d]: score: %w", c.where, i, err)
		}
		if len(piece) > maxTokenBytes {
			return nil, nil, fmt.Errorf("%s.vocab[%d]: piece longer than %d bytes", c.where, i, maxTokenBytes)
		}
		m.pieces = append(m.pieces, piece)
		m.scores = append(m.scores, score)
		if _, dup := m.vocab[piece]; !dup {
			m.vocab[piece] = i
		}
		m.trie.insert(piece, i)
		minScore = math.Min(minScore, score)
	}
	if c.has("unk_id") {
		u, err := c.integer("unk_id", 0)
		if err != nil {
			return nil, nil, err
		}
		if u >= len(m.pieces) {
			return nil, nil, fmt.Errorf("%s.unk_id: %d outside the vocabulary of %d", c.where, u, len(m.pieces))
		}
		m.unk = u
	}
	var err error
	if m.byteFB, err = c.boolean("byte_fallback", false); err != nil {
		return nil, nil, err
	}
	m.unkScore = minScore - 10
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			id = -1
		}
		m.fbIDs[b] = int32(id)
	}
	return m, m.vocab, nil
}

type latticeNode struct {
	id     int
	score  float64
	start  int
	filled bool
}

func (m *unigramModel) tokenize(s string, out []int) ([]int, error) {
	if s == "" {
		return out, nil
	}
	if m.unk < 0 {
		// Without unk, an unknown character has no path; tokenizers errors.
		for i := 0; i < len(s); {
			_, sz := utf8.DecodeRuneInString(s[i:])
			found := false
			m.trie.prefixes(s[i:], func(n, _ int) {
				if n == sz {
					found = true
				}
			})
			if !found {
				return out, fmt.Errorf("unigram: character %q is not in the vocabulary and the model has no unk_id", s[i:i+sz])
			}
			i += sz
		}
	}
	best := make([]latticeNode, len(s)+1)
	best[0].filled = true
	for start := 0; start < len(s); {
		_, mblen := utf8.DecodeRuneInString(s[start:])
		base := best[start].score
		single := false
		m.trie.prefixes(s[start:], func(n, id int) {
			cand := m.scores[id] + base
			t := &best[start+n]
			if !t.filled || cand > t.score {
				*t = latticeNode{id: id, score: cand, start: start, filled: true}
			}
			if n == mblen {
				single = true
			}
		})
		if !single && m.unk >= 0 {
			t := &best[start+mblen]
			cand := m.unkScore + base
			if !t.filled || cand > t.score {
				*t = latticeNode{id: m.unk, score: cand, start: start, filled: true}
			}
		}
		start += mblen
	}
	// Walk back; consecutive unk pieces are fused into one string.
	type piece struct{ start, end int }
	var pieces []piece
	fusedEnd := -1
	for end := len(s); end > 0; {
		n := best[end]
		if !n.filled {
			return out, fmt.Errorf("unigram: no segmentation for %q", s)
		}
		if m.fuseUnk && n.id == m.unk {
			if fusedEnd < 0 {
				fusedEnd = end
			}
		} else {
			if fusedEnd >= 0 {
				pieces = append(pieces, piece{end, fusedEnd})
				fusedEnd = -1
			}
			pieces = append(pieces, piece{n.start, end})
		}
		end = n.start
	}
	if fusedEnd >= 0 {
		pieces = append(pieces, piece{0, fusedEnd})
	}
	for i := len(pieces) - 1; i >= 0; i-- {
		p := s[pieces[i].start:pieces[i].end]
		if id, ok := m.vocab[p]; ok {
			out = append(out, id)
			continue
		}
		if m.byteFB {
			all := true
			for k := 0; k < len(p); k++ {
				if m.fbIDs[p[k]] < 0 {
					all = false
				}
			}
			if all {
				for k := 0; k < len(p); k++ {
					out = append(out, int(m.fbIDs[p[k]]))
				}
				continue
			}
		}
		out = append(out, m.unk)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// WordPiece (BERT) and WordLevel.

type wordPieceModel struct {
	vocab    map[string]int
	unk      int
	prefix   string
	maxChars int
}

func (m *wordPieceModel) tokenize(w string, out []int) ([]int, error) {
	if utf8.RuneCountInString(w) > m.maxChars {
		return append(out, m.unk), nil
	}
	start0 := len(out)
	buf := make([]byte, 0, len(w)+len(m.prefix))
	for start := 0; start < len(w); {
		end := len(w)
		found := -1
		for end > start {
			buf = buf[:0]
			if start > 0 {
				buf = append(buf, m.prefix...)
			}
			buf = append(buf, w[start:end]...)
			if id, ok := m.vocab[string(buf)]; ok {
				found = id
				break
			}
			_, sz := utf8.DecodeLastRuneInString(w[start:end])
			end -= sz
		}
		if found < 0 {
			return append(out[:start0], m.unk), nil
		}
		out = append(out, found)
		start = end
	}
	return out, nil
}

type wordLevelModel struct {
	vocab map[string]int
	unk   int
}

func (m *wordLevelModel) tokenize(w string, out []int) ([]int, error) {
	if id, ok := m.vocab[w]; ok {
		return append(out, id), nil
	}
	if m.unk < 0 {
		return out, fmt.Errorf("wordlevel: %q is not in the vocabulary and there is no unk_token", w)
	}
	return append(out, m.unk), nil
}
