package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedMatcher finds added tokens leftmost-longest (as tokenizers' Aho-Corasick
// with MatchKind::LeftmostLongest does) and applies single_word, lstrip and
// rstrip.
type addedMatcher struct {
	trie   *byteTrie
	tokens map[int]*addedToken // by id
}

func newAddedMatcher(list []*addedToken, key func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{trie: newByteTrie(), tokens: map[int]*addedToken{}}
	n := 0
	for _, t := range list {
		k := key(t)
		if k == "" {
			continue
		}
		m.trie.insert(k, t.id)
		m.tokens[t.id] = t
		n++
	}
	if n == 0 {
		return nil
	}
	return m
}

// piece is a part of the input: either a matched added token (id >= 0) or
// text to normalize and pre-tokenize (id == -1).
type piece struct {
	start, end int
	id         int
}

// endsWithWord and startsWithWord are tokenizers' `\w$` and `^\w`.
func endsWithWord(s string) bool {
	r, sz := utf8.DecodeLastRuneInString(s)
	return sz > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, sz := utf8.DecodeRuneInString(s)
	return sz > 0 && isWordChar(r)
}

// split appends the pieces of s to dst, mirroring AddedVocabulary::find_matches.
func (m *addedMatcher) split(s string, dst []piece) []piece {
	if m == nil {
		return append(dst, piece{0, len(s), -1})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !m.trie.first[s[i]] {
			i++
			continue
		}
		n, id := m.trie.longest(s[i:])
		if id < 0 {
			i++
			continue
		}
		start, stop := i, i+n
		i = stop
		t := m.tokens[id]
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				// Not a match; the search resumes after it, as the
				// Aho-Corasick iterator does.
				continue
			}
		}
		if t.lstrip {
			ns := len(trimRightSpace(s[:start]))
			start = max(ns, startOffset)
		}
		if t.rstrip {
			// The search itself resumes at the end of the token, as in
			// tokenizers.
			stop += len(s[stop:]) - len(trimLeftSpace(s[stop:]))
		}
		if start > startOffset {
			dst = append(dst, piece{startOffset, start, -1})
		}
		dst = append(dst, piece{start, stop, id})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, piece{startOffset, len(s), -1})
	}
	return dst
}

func trimRightSpace(s string) string {
	for len(s) > 0 {
		r, sz := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-sz]
	}
	return s
}

func trimLeftSpace(s string) string {
	for len(s) > 0 {
		r, sz := utf8.DecodeRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[sz:]
	}
	return s
}
