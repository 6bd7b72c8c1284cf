package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rivo/uniseg"
	"golang.org/x/text/unicode/norm"

	"github.com/tputool/tputool/internal/errs"
)

// normalizer rewrites a piece of text before pre-tokenization. Offsets are
// not tracked: tputool only needs ids.
type normalizer interface {
	normalize(s string) (string, error)
}

func buildNormalizer(c *component, depth int) (normalizer, error) {
	if c == nil {
		return nil, nil
	}
	if depth > maxNesting {
		return nil, fmt.Errorf("%s: nested deeper than %d", c.where, maxNesting)
	}
	switch c.Type {
	case "Sequence":
		seq, err := buildSequence(c, "normalizers", depth, buildNormalizer)
		if err != nil {
			return nil, err
		}
		return seqNormalizer(seq), nil
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "StripAccents":
		return stripAccentsNorm{}, nil
	case "Strip":
		l, err := c.boolean("strip_left", true)
		if err != nil {
			return nil, err
		}
		r, err := c.boolean("strip_right", true)
		if err != nil {
			return nil, err
		}
		return stripNorm{left: l, right: r}, nil
	case "Prepend":
		p, err := c.str("prepend", "")
		if err != nil {
			return nil, err
		}
		return prependNorm{p}, nil
	case "Replace":
		m, content, err := buildReplace(c)
		if err != nil {
			return nil, err
		}
		return replaceNorm{m: m, content: content}, nil
	case "BertNormalizer":
		var b bertNorm
		var err error
		if b.cleanText, err = c.boolean("clean_text", true); err != nil {
			return nil, err
		}
		if b.chinese, err = c.boolean("handle_chinese_chars", true); err != nil {
			return nil, err
		}
		if b.lowercase, err = c.boolean("lowercase", true); err != nil {
			return nil, err
		}
		b.stripAccents = b.lowercase
		if c.has("strip_accents") {
			if b.stripAccents, err = c.boolean("strip_accents", false); err != nil {
				return nil, err
			}
		}
		return b, nil
	case "Precompiled":
		var s string
		if err := c.get("precompiled_charsmap", &s); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, nil
		}
		return parsePrecompiled(s, c.where)
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "Nmt":
		return nmtNorm{}, nil
	default:
		return nil, errs.Unsupportedf("%s: normalizer type %q", c.where, c.Type)
	}
}

type seqNormalizer []normalizer

func (s seqNormalizer) normalize(x string) (string, error) {
	var err error
	for _, n := range s {
		if x, err = n.normalize(x); err != nil {
			return "", err
		}
	}
	return x, nil
}

type unicodeNorm struct{ f norm.Form }

func (u unicodeNorm) normalize(s string) (string, error) {
	if isASCII(s) || u.f.IsNormalString(s) {
		return s, nil
	}
	out := u.f.String(s)
	// x/text/unicode/norm follows the Stream-Safe Text Format: after 30
	// non-starters in a row it inserts U+034F and restarts canonical
	// ordering and composition. tokenizers (the unicode-normalization
	// crate) does neither, so such text takes the slow path. Normalization
	// never adds or removes a U+034F otherwise.
	if strings.Contains(out, norm.GraphemeJoiner) &&
		strings.Count(out, norm.GraphemeJoiner) != strings.Count(s, norm.GraphemeJoiner) {
		return normalizeUnbounded(u.f, s), nil
	}
	return out, nil
}

// normalizeUnbounded normalizes s as the unicode-normalization crate does:
// full decomposition, a stable sort by combining class of every run of
// non-starters however long, then (NFC, NFKC) canonical composition. The
// character data comes from x/text/unicode/norm, applied to single
// characters and pairs, which never reach its 30 non-starter limit. Bytes
// that are not UTF-8 pass through and act as starters that compose with
// nothing.
func normalizeUnbounded(f norm.Form, s string) string {
	decomp, compose := norm.NFD, false
	switch f {
	case norm.NFC:
		compose = true
	case norm.NFKC:
		decomp, compose = norm.NFKD, true
	case norm.NFKD:
		decomp = norm.NFKD
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	var chars []normChar
	flush := func() {
		sortNonStarters(chars)
		if compose {
			chars = composeChars(chars)
		}
		for _, c := range chars {
			b.WriteRune(c.r)
		}
		chars = chars[:0]
	}
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(s); {
		r, sz := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && sz == 1 {
			flush()
			b.WriteByte(s[i])
			i++
			continue
		}
		d := s[i : i+sz]
		if r >= utf8.RuneSelf {
			d = decomp.String(d)
		}
		for _, dr := range d {
			chars = append(chars, normChar{dr, combiningClass(dr, &buf)})
		}
		i += sz
	}
	flush()
	return b.String()
}

type normChar struct {
	r   rune
	ccc uint8
}

func combiningClass(r rune, buf *[utf8.UTFMax]byte) uint8 {
	if r < utf8.RuneSelf {
		return 0
	}
	return norm.NFD.Properties(utf8.AppendRune(buf[:0], r)).CCC()
}

// sortNonStarters sorts each run of non-starters by combining class,
// keeping the order of equal classes (canonical ordering).
func sortNonStarters(cs []normChar) {
	for i := 0; i < len(cs); {
		if cs[i].ccc == 0 {
			i++
			continue
		}
		j := i
		for j < len(cs) && cs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b normChar) int { return int(a.ccc) - int(b.ccc) })
		i = j
	}
}

// composeChars is the canonical composition algorithm, as the
// unicode-normalization crate's Recompositions implements it: a character
// combines with the last starter unless a character between them is left
// uncombined and has a class of 0 or at least its own.
func composeChars(cs []normChar) []normChar {
	out := cs[:0]
	starter := -1 // index in out of the last starter, or -1
	lastCCC := -1 // class of the last uncombined character after it, or -1
	for _, c := range cs {
		if starter >= 0 && (lastCCC < 0 || lastCCC < int(c.ccc)) {
			if p, ok := composePair(out[starter].r, c.r); ok {
				out[starter].r = p
				continue
			}
		}
		if c.ccc == 0 {
			starter = len(out)
			lastCCC = -1
		} else if starter >= 0 {
			lastCCC = int(c.ccc)
		}
		out = append(out, c)
	}
	return out
}

// composePair returns the primary composite of a starter and the character
// after it. NFC of the pair is a single character exactly when they
// compose: the starter's decomposition recomposes to itself, and the second
// character sorts after everything it holds.
func composePair(a, b rune) (rune, bool) {
	var buf [2 * utf8.UTFMax]byte
	p := utf8.AppendRune(utf8.AppendRune(buf[:0], a), b)
	c := norm.NFC.Append(nil, p...)
	r, sz := utf8.DecodeRune(c)
	if sz == 0 || sz != len(c) {
		return 0, false
	}
	return r, true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) (string, error) { return lowerFull(s), nil }

// lowerFull lowercases like Rust's char::to_lowercase, including the one
// unconditional multi-character mapping (U+0130 -> "i\u0307").
func lowerFull(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 0x130 {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

type stripAccentsNorm struct{}

func (stripAccentsNorm) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.IsMark(r) { // Mn, Mc and Me, as is_combining_mark
			return -1
		}
		return r
	}, s), nil
}

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) (string, error) {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

type prependNorm struct{ p string }

func (n prependNorm) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return n.p + s, nil
}

type replaceNorm struct {
	m       matcher
	content string
}

func (n replaceNorm) normalize(s string) (string, error) { return replaceAll(n.m, s, n.content) }

// replaceAll replaces every match of m in s with content, as tokenizers'
// NormalizedString::replace and Replace decoder do: empty matches insert
// content too ("a*" -> "-" makes "bab" "-b-b-"), and an empty s has no
// matches at all.
func replaceAll(m matcher, s, content string) (string, error) {
	if s == "" {
		return s, nil
	}
	if lm, ok := m.(literalMatcher); ok && lm.lit != "" {
		return strings.ReplaceAll(s, lm.lit, content), nil
	}
	var b strings.Builder
	last, found := 0, false
	err := m.findAll(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last, found = end, true
	})
	if err != nil {
		return "", err
	}
	if !found {
		return s, nil
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

func buildReplace(c *component) (matcher, string, error) {
	var p rawPattern
	if err := c.get("pattern", &p); err != nil {
		return nil, "", err
	}
	content, err := c.str("content", "")
	if err != nil {
		return nil, "", err
	}
	m, err := buildPattern(p, c.where+".pattern")
	return m, content, err
}

type bertNorm struct {
	cleanText, chinese, stripAccents, lowercase bool
}

func isChineseChar(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

func (n bertNorm) normalize(s string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		if n.cleanText {
			if r == 0 || r == 0xFFFD || (isBertControl(r)) {
				continue
			}
			if r == '\t' || r == '\n' || r == '\r' || unicode.IsSpace(r) {
				r = ' '
			}
		}
		if n.chinese && isChineseChar(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	out := b.String()
	if n.stripAccents {
		// Unlike StripAccents, BertNormalizer removes only Mn
		// (is_mark_nonspacing).
		out, _ = unicodeNorm{norm.NFD}.normalize(out)
		out = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Mn, r) {
				return -1
			}
			return r
		}, out)
	}
	if n.lowercase {
		out = lowerFull(out)
	}
	return out, nil
}

func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

type nmtNorm struct{}

func (nmtNorm) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x1 && r <= 0x8, r == 0xB, r >= 0xE && r <= 0x1F, r == 0x7F, r == 0x8F, r == 0x9F:
			return -1
		case r == 0x9, r == 0xA, r == 0xC, r == 0xD, r == 0x1680, r >= 0x200B && r <= 0x200F,
			r == 0x2028, r == 0x2029, r == 0x2581, r == 0xFEFF, r == 0xFFFD:
			return ' '
		}
		return r
	}, s), nil
}

type byteLevelNorm struct{}

func (byteLevelNorm) normalize(s string) (string, error) { return byteLevelEncode(s), nil }

// ---------------------------------------------------------------------------
// Precompiled: SentencePiece's normalization rules compiled into a
// Darts-clone double-array trie (T5, ALBERT, XLNet tokenizer.json files).

type precompiled struct {
	trie       []uint32
	normalized []byte
}

func parsePrecompiled(b64, where string) (normalizer, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%s.precompiled_charsmap: bad base64: %w", where, err)
	}
	if len(data) < 4 {
		return nil, fmt.Errorf("%s.precompiled_charsmap: %d bytes, too short", where, len(data))
	}
	size := binary.LittleEndian.Uint32(data)
	if size%4 != 0 || uint64(size) > uint64(len(data)-4) {
		return nil, fmt.Errorf("%s.precompiled_charsmap: trie size %d does not fit in %d bytes", where, size, len(data)-4)
	}
	p := &precompiled{trie: make([]uint32, size/4), normalized: data[4+size:]}
	for i := range p.trie {
		p.trie[i] = binary.LittleEndian.Uint32(data[4+4*i:])
	}
	if len(p.trie) == 0 {
		return nil, fmt.Errorf("%s.precompiled_charsmap: empty trie", where)
	}
	return p, nil
}

// firstPrefix returns the value of the shortest key that is a prefix of key,
// as spm_precompiled's transform does.
func (p *precompiled) firstPrefix(key string) (uint32, bool) {
	pos := uint32(0)
	unit := p.trie[0]
	pos ^= dartsOffset(unit)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			break
		}
		pos ^= uint32(c)
		if int(pos) >= len(p.trie) {
			return 0, false
		}
		unit = p.trie[pos]
		if unit&((1<<31)|0xFF) != uint32(c) {
			return 0, false
		}
		pos ^= dartsOffset(unit)
		if (unit>>8)&1 == 1 {
			if int(pos) >= len(p.trie) {
				return 0, false
			}
			return p.trie[pos] & ((1 << 31) - 1), true
		}
	}
	return 0, false
}

func dartsOffset(unit uint32) uint32 {
	return (unit >> 10) << ((unit & (1 << 9)) >> 6)
}

func (p *precompiled) transform(chunk string) (string, bool) {
	v, ok := p.firstPrefix(chunk)
	if !ok || int(v) >= len(p.normalized) {
		return "", false
	}
	end := int(v)
	for end < len(p.normalized) && p.normalized[end] != 0 {
		end++
	}
	return string(p.normalized[v:end]), true
}

func (p *precompiled) normalize(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	g := uniseg.NewGraphemes(s)
	for g.Next() {
		gr := g.Str()
		if len(gr) < 6 {
			if n, ok := p.transform(gr); ok {
				b.WriteString(n)
				continue
			}
		}
		for i, r := range gr {
			part := gr[i : i+utf8.RuneLen(r)]
			if r == utf8.RuneError {
				_, sz := utf8.DecodeRuneInString(gr[i:])
				part = gr[i : i+sz]
			}
			if n, ok := p.transform(part); ok {
				b.WriteString(n)
			} else {
				b.WriteString(part)
			}
		}
	}
	return b.String(), nil
}
