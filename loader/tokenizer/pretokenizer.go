package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
)

// sink receives pre-tokens. atStart reports whether the piece starts at
// offset 0 of the original input (Metaspace's prepend_scheme "first").
type sink interface {
	emit(s string, atStart bool) error
}

type preTokenizer interface {
	pretok(s string, atStart bool, out sink) error
}

type behavior uint8

const (
	behRemoved behavior = iota
	behIsolated
	behMergedWithPrevious
	behMergedWithNext
	behContiguous
)

func parseBehavior(s, where string) (behavior, error) {
	switch s {
	case "Removed":
		return behRemoved, nil
	case "Isolated":
		return behIsolated, nil
	case "MergedWithPrevious":
		return behMergedWithPrevious, nil
	case "MergedWithNext":
		return behMergedWithNext, nil
	case "Contiguous":
		return behContiguous, nil
	}
	return 0, fmt.Errorf("%s.behavior: unknown split behavior %q", where, s)
}

func buildPreTokenizer(c *component, depth int) (preTokenizer, error) {
	if c == nil {
		return nil, nil
	}
	if depth > maxNesting {
		return nil, fmt.Errorf("%s: nested deeper than %d", c.where, maxNesting)
	}
	switch c.Type {
	case "Sequence":
		seq, err := buildSequence(c, "pretokenizers", depth, buildPreTokenizer)
		if err != nil {
			return nil, err
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return seqPre(seq), nil
	case "Split":
		var p rawPattern
		if err := c.get("pattern", &p); err != nil {
			return nil, err
		}
		m, err := buildPattern(p, c.where+".pattern")
		if err != nil {
			return nil, err
		}
		bs, err := c.str("behavior", "Isolated")
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(bs, c.where)
		if err != nil {
			return nil, err
		}
		inv, err := c.boolean("invert", false)
		if err != nil {
			return nil, err
		}
		return &splitPre{m: m, beh: b, invert: inv}, nil
	case "ByteLevel":
		var b byteLevelPre
		var err error
		if b.addPrefixSpace, err = c.boolean("add_prefix_space", true); err != nil {
			return nil, err
		}
		if b.useRegex, err = c.boolean("use_regex", true); err != nil {
			return nil, err
		}
		return &b, nil
	case "Digits":
		ind, err := c.boolean("individual_digits", false)
		if err != nil {
			return nil, err
		}
		b := behContiguous
		if ind {
			b = behIsolated
		}
		return &splitPre{m: charMatcher{unicode.IsNumber}, beh: b}, nil
	case "Metaspace":
		return buildMetaspacePre(c)
	case "Whitespace":
		return &splitPre{m: wordRunMatcher{}, beh: behRemoved, invert: true}, nil
	case "WhitespaceSplit":
		return &splitPre{m: charMatcher{unicode.IsSpace}, beh: behRemoved}, nil
	case "Punctuation":
		bs, err := c.str("behavior", "Isolated")
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(bs, c.where)
		if err != nil {
			return nil, err
		}
		return &splitPre{m: charMatcher{isBertPunct}, beh: b}, nil
	case "BertPreTokenizer":
		return seqPre{
			&splitPre{m: charMatcher{unicode.IsSpace}, beh: behRemoved},
			&splitPre{m: charMatcher{isBertPunct}, beh: behIsolated},
		}, nil
	case "CharDelimiterSplit":
		var d string
		if err := c.get("delimiter", &d); err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(d)
		if n == 0 || n != len(d) {
			return nil, fmt.Errorf("%s.delimiter: expected one character, got %q", c.where, d)
		}
		return &splitPre{m: charMatcher{func(x rune) bool { return x == r }}, beh: behRemoved}, nil
	default:
		return nil, errs.Unsupportedf("%s: pre-tokenizer type %q", c.where, c.Type)
	}
}

func isBertPunct(r rune) bool {
	if (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) {
		return true
	}
	return unicode.IsPunct(r)
}

// seqPre runs pre-tokenizers one after another.
type seqPre []preTokenizer

type seqStage struct {
	pt   preTokenizer
	next sink
}

func (st *seqStage) emit(s string, atStart bool) error { return st.pt.pretok(s, atStart, st.next) }

func (q seqPre) pretok(s string, atStart bool, out sink) error {
	if len(q) == 0 {
		return out.emit(s, atStart)
	}
	next := out
	for i := len(q) - 1; i >= 1; i-- {
		next = &seqStage{pt: q[i], next: next}
	}
	return q[0].pretok(s, atStart, next)
}

// ---------------------------------------------------------------------------
// Split

type splitPre struct {
	m      matcher
	beh    behavior
	invert bool
}

type span struct {
	start, end int
	match      bool
}

func (p *splitPre) pretok(s string, atStart bool, out sink) error {
	if s == "" {
		return nil
	}
	// Fast path: Isolated keeps every match and gap in order.
	if p.beh == behIsolated {
		prev := 0
		var err error
		ferr := p.m.findAll(s, func(start, end int) {
			if err != nil {
				return
			}
			if start > prev {
				err = out.emit(s[prev:start], atStart && prev == 0)
			}
			if err == nil && end > start {
				err = out.emit(s[start:end], atStart && start == 0)
			}
			prev = end
		})
		if ferr != nil {
			return ferr
		}
		if err != nil {
			return err
		}
		if prev < len(s) {
			return out.emit(s[prev:], atStart && prev == 0)
		}
		return nil
	}
	var spans []span
	prev := 0
	if err := p.m.findAll(s, func(start, end int) {
		if start > prev {
			spans = append(spans, span{prev, start, false})
		}
		spans = append(spans, span{start, end, true})
		prev = end
	}); err != nil {
		return err
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	// After this switch, span.match means "remove".
	var res []span
	switch p.beh {
	case behRemoved:
		res = spans
	case behContiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(res) > 0 {
				res[len(res)-1].end = sp.end
			} else {
				res = append(res, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behMergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].end = sp.end
			} else {
				res = append(res, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behMergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].start = sp.start
			} else {
				res = append(res, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(res)-1; i < j; i, j = i+1, j-1 {
			res[i], res[j] = res[j], res[i]
		}
	}
	for _, sp := range res {
		if sp.match || sp.end <= sp.start {
			continue
		}
		if err := out.emit(s[sp.start:sp.end], atStart && sp.start == 0); err != nil {
			return err
		}
	}
	return nil
}

// wordRunMatcher matches `\w+|[^\w\s]+` (the Whitespace pre-tokenizer).
type wordRunMatcher struct{}

// isWordChar is \w of the regex crate (UTS #18): Alphabetic (letters, Nl,
// Other_Alphabetic), marks, Nd, Pc and Join_Control. Other numbers such as
// '³' are not word characters. tokenizers uses it in the Whitespace
// pre-tokenizer and for added tokens' single_word.
func isWordChar(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) ||
		unicode.In(r, unicode.Nl, unicode.Pc, unicode.Other_Alphabetic, unicode.Join_Control)
}

func (wordRunMatcher) findAll(s string, fn func(start, end int)) error {
	i := 0
	for i < len(s) {
		r, sz := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			i += sz
			continue
		}
		w := isWordChar(r)
		j := i + sz
		for j < len(s) {
			r2, sz2 := utf8.DecodeRuneInString(s[j:])
			if unicode.IsSpace(r2) || isWordChar(r2) != w {
				break
			}
			j += sz2
		}
		fn(i, j)
		i = j
	}
	return nil
}

// ---------------------------------------------------------------------------
// ByteLevel

type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
	// raw: emit raw bytes instead of the GPT-2 byte-to-unicode characters;
	// set when this is the last pre-tokenizer and the BPE vocabulary was
	// converted to raw bytes (bpeModel.byteMode).
	raw bool
}

var gpt2Scanner = scanMatcher{kind: scanGPT2}

type byteLevelStage struct {
	p   *byteLevelPre
	out sink
}

func (p *byteLevelPre) pretok(s string, atStart bool, out sink) error {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !p.useRegex {
		return p.emitOne(s, atStart, out)
	}
	var err error
	gpt2Scanner.findAll(s, func(start, end int) {
		if err == nil {
			err = p.emitOne(s[start:end], atStart && start == 0, out)
		}
	})
	return err
}

func (p *byteLevelPre) emitOne(s string, atStart bool, out sink) error {
	if s == "" {
		return nil
	}
	if p.raw {
		return out.emit(s, atStart)
	}
	return out.emit(byteLevelEncode(s), atStart)
}

// byteToRune is GPT-2's bytes_to_unicode table.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var t [256]rune
	inv := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
		inv[t[b]] = byte(b)
	}
	return t, inv
}()

func byteLevelEncode(s string) string {
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}

// byteLevelDecode maps GPT-2 characters back to bytes; ok is false when s
// holds a character outside the table.
func byteLevelDecode(s string, dst []byte) ([]byte, bool) {
	n := len(dst)
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return dst[:n], false
		}
		dst = append(dst, b)
	}
	return dst, true
}

// ---------------------------------------------------------------------------
// Metaspace

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type metaspacePre struct {
	repl   rune
	rep    string
	scheme prependScheme
	split  bool
}

func parseMetaspace(c *component) (rune, prependScheme, error) {
	rs, err := c.str("replacement", "▁")
	if err != nil {
		return 0, 0, err
	}
	r, n := utf8.DecodeRuneInString(rs)
	if n == 0 || n != len(rs) {
		return 0, 0, fmt.Errorf("%s.replacement: expected one character, got %q", c.where, rs)
	}
	scheme := prependAlways
	if c.has("prepend_scheme") {
		ps, err := c.str("prepend_scheme", "always")
		if err != nil {
			return 0, 0, err
		}
		switch ps {
		case "always":
			scheme = prependAlways
		case "first":
			scheme = prependFirst
		case "never":
			scheme = prependNever
		default:
			return 0, 0, fmt.Errorf("%s.prepend_scheme: expected always, first or never, got %q", c.where, ps)
		}
	}
	if c.has("add_prefix_space") {
		add, err := c.boolean("add_prefix_space", true)
		if err != nil {
			return 0, 0, err
		}
		// As tokenizers: add_prefix_space=false means "never" and
		// contradicts any other declared scheme.
		if !add {
			if c.has("prepend_scheme") && scheme != prependNever {
				return 0, 0, fmt.Errorf("%s: add_prefix_space does not match declared prepend_scheme", c.where)
			}
			scheme = prependNever
		}
	}
	return r, scheme, nil
}

func buildMetaspacePre(c *component) (preTokenizer, error) {
	r, scheme, err := parseMetaspace(c)
	if err != nil {
		return nil, err
	}
	split, err := c.boolean("split", true)
	if err != nil {
		return nil, err
	}
	return &metaspacePre{repl: r, rep: string(r), scheme: scheme, split: split}, nil
}

func (p *metaspacePre) pretok(s string, atStart bool, out sink) error {
	if strings.IndexByte(s, ' ') >= 0 {
		s = strings.ReplaceAll(s, " ", p.rep)
	}
	switch p.scheme {
	case prependAlways:
		if !strings.HasPrefix(s, p.rep) {
			s = p.rep + s
		}
	case prependFirst:
		if atStart && !strings.HasPrefix(s, p.rep) {
			s = p.rep + s
		}
	}
	if !p.split {
		if s == "" {
			return nil
		}
		return out.emit(s, atStart)
	}
	// MergedWithNext on the replacement character: each piece starts at a
	// replacement character (except possibly the first).
	start := 0
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], p.rep)
		if j < 0 {
			break
		}
		cut := i + j
		if cut > start {
			if err := out.emit(s[start:cut], atStart && start == 0); err != nil {
				return err
			}
		}
		start = cut
		i = cut + len(p.rep)
	}
	if start < len(s) {
		return out.emit(s[start:], atStart && start == 0)
	}
	return nil
}
