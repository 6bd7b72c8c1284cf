package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"

	"github.com/tputool/tputool/internal/errs"
)

// matcher finds the non-overlapping matches of a Split/Replace pattern, left
// to right, reporting byte offsets. Empty matches are reported too (HF
// tokenizers keeps them; behaviors such as MergedWithPrevious see them).
type matcher interface {
	findAll(s string, fn func(start, end int)) error
}

// regexMatchTimeout bounds one regexp2 match. regexp2's default is "forever";
// tokenizer.json is untrusted input, so a catastrophic pattern must fail.
const regexMatchTimeout = 10 * time.Second

// The pre-tokenization patterns of the GPT-2 family, Llama 3, Qwen 2/3 and Qwen 3.5,
// matched by a hand-written scanner (scanPattern). scanner_test.go proves
// the scanner agrees with regexp2 on a large corpus.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func buildPattern(p rawPattern, where string) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher{*p.String}, nil
	case p.Regex != nil:
		return compileRegex(*p.Regex, where)
	default:
		return nil, fmt.Errorf("%s: expected {\"String\": ...} or {\"Regex\": ...}", where)
	}
}

func compileRegex(expr, where string) (matcher, error) {
	switch expr {
	case patternGPT2:
		return scanMatcher{kind: scanGPT2}, nil
	case patternLlama3:
		return scanMatcher{kind: scanLlama3}, nil
	case patternQwen2:
		return scanMatcher{kind: scanQwen2}, nil
	case patternQwen35:
		return scanMatcher{kind: scanQwen35}, nil
	}
	re, err := newRegexp2(expr)
	if err != nil {
		return nil, errs.Unsupportedf("%s: regex %q: %w", where, expr, err)
	}
	return re, nil
}

type regexMatcher struct {
	re   *regexp2.Regexp
	expr string // as written in tokenizer.json, for errors
}

// newRegexp2 compiles an Oniguruma pattern, as tokenizers writes them, with
// regexp2 (see onigToNET).
func newRegexp2(expr string) (regexMatcher, error) {
	if len(expr) > 1<<16 {
		return regexMatcher{}, fmt.Errorf("pattern longer than 64 KiB")
	}
	net, err := onigToNET(expr)
	if err != nil {
		return regexMatcher{}, err
	}
	re, err := regexp2.Compile(net, regexp2.Multiline)
	if err != nil {
		return regexMatcher{}, err
	}
	re.MatchTimeout = regexMatchTimeout
	return regexMatcher{re, expr}, nil
}

func (m regexMatcher) findAll(s string, fn func(start, end int)) error {
	idx, err := m.re.FindAllStringIndex(s, -1)
	if err != nil {
		return fmt.Errorf("regex %q: %w", m.expr, err)
	}
	for _, p := range idx {
		fn(p[0], p[1])
	}
	return nil
}

// onigWord is Oniguruma's Unicode word class (CR_Word): Alphabetic (letters,
// Nl, Other_Alphabetic), marks, Nd and Pc. \w inside a character class is
// this. \w outside one, \W and \b test characters below U+0100 against a
// Latin-1 table that also counts ²³¹¼½¾ (onigLatin1Word). regexp2's own \w
// is L, Mn, Nd, Pc, U+200C and U+200D.
const (
	onigWord       = `\p{L}\p{Nl}\p{Other_Alphabetic}\p{M}\p{Nd}\p{Pc}`
	onigLatin1Word = `\u00B2\u00B3\u00B9\u00BC-\u00BE`
)

// onigToNET rewrites a pattern in the syntax tokenizers compiles it with
// (onig's default, ONIG_SYNTAX_ONIGURUMA, Ruby-like) into regexp2's .NET
// syntax, for compiling with regexp2.Multiline (^ and $ are line anchors in
// Oniguruma). It rewrites the constructs whose meaning differs:
//
//   - ^ does not match at the end of the text after a final newline:
//     (?:^(?!\z)).
//   - \w, \W, \b and \B use Oniguruma's word characters (onigWord).
//   - The inline option m is .NET's s (dot matches newline).
//   - {,n} is {0,n}.
//
// and rejects, with an error naming them, those it cannot: character class
// nesting, intersection (&&) and POSIX brackets ([[:alpha:]]), \W inside a
// class, the options s (undefined in Oniguruma) and x, and an interval
// followed by + (Oniguruma's (?:x{n,m})+) or {n} followed by ? ((?:x{n})?).
// Multi-character case folding under (?i) (ß matching "ss") is not
// reproduced.
func onigToNET(expr string) (string, error) {
	var b strings.Builder
	b.Grow(len(expr) + 16)
	wordSet := "[" + onigWord + onigLatin1Word + "]"
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch c {
		case '\\':
			if i+1 >= len(expr) {
				b.WriteByte(c)
				i++
				continue
			}
			n := expr[i+1]
			i += 2
			switch n {
			case 'w':
				b.WriteString(wordSet)
			case 'W':
				b.WriteString("[^" + onigWord + onigLatin1Word + "]")
			case 'b':
				fmt.Fprintf(&b, "(?:(?<=%[1]s)(?!%[1]s)|(?<!%[1]s)(?=%[1]s))", wordSet)
			case 'B':
				fmt.Fprintf(&b, "(?:(?<=%[1]s)(?=%[1]s)|(?<!%[1]s)(?!%[1]s))", wordSet)
			default:
				k := bracedArg(expr, i, n)
				b.WriteString(expr[i-2 : i+k])
				i += k
			}
		case '[':
			end, err := onigClass(expr, i, &b)
			if err != nil {
				return "", err
			}
			i = end
		case '(':
			if !strings.HasPrefix(expr[i:], "(?") {
				b.WriteByte(c)
				i++
				continue
			}
			if strings.HasPrefix(expr[i:], "(?#") {
				j := strings.IndexByte(expr[i:], ')')
				if j < 0 {
					j = len(expr) - i - 1
				}
				b.WriteString(expr[i : i+j+1])
				i += j + 1
				continue
			}
			j := i + 2
			for j < len(expr) && (expr[j] == '-' || 'a' <= expr[j] && expr[j] <= 'z' || 'A' <= expr[j] && expr[j] <= 'Z') {
				j++
			}
			if j == i+2 || j == len(expr) || (expr[j] != ')' && expr[j] != ':') {
				// Not an option group: (?:, (?=, (?<name>, ...
				b.WriteString("(?")
				i += 2
				continue
			}
			b.WriteString("(?")
			for _, o := range expr[i+2 : j] {
				switch o {
				case 'i', '-':
					b.WriteRune(o)
				case 'm':
					b.WriteByte('s')
				default:
					return "", fmt.Errorf("inline option %q at offset %d is not supported", o, i)
				}
			}
			i = j
		case '^':
			b.WriteString(`(?:^(?!\z))`)
			i++
		case '{':
			lo, hi, end, ok := onigInterval(expr, i)
			if !ok {
				b.WriteByte(c)
				i++
				continue
			}
			exact := !strings.Contains(expr[i:end], ",")
			if end < len(expr) && (expr[end] == '+' || expr[end] == '?' && exact) {
				return "", fmt.Errorf("%q at offset %d: Oniguruma reads it as a nested quantifier", expr[i:end+1], i)
			}
			if lo == "" {
				lo = "0"
			}
			if exact {
				fmt.Fprintf(&b, "{%s}", lo)
			} else {
				fmt.Fprintf(&b, "{%s,%s}", lo, hi)
			}
			i = end
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// onigInterval parses the interval quantifier {n}, {n,}, {,m} or {n,m} at
// expr[i]. Anything else is literal text in Oniguruma (and .NET).
func onigInterval(expr string, i int) (lo, hi string, end int, ok bool) {
	j := i + 1
	digits := func() string {
		k := j
		for j < len(expr) && '0' <= expr[j] && expr[j] <= '9' {
			j++
		}
		return expr[k:j]
	}
	lo = digits()
	hi = lo
	if j < len(expr) && expr[j] == ',' {
		j++
		hi = digits()
		if lo == "" && hi == "" {
			return "", "", 0, false
		}
	} else if lo == "" {
		return "", "", 0, false
	}
	if j >= len(expr) || expr[j] != '}' {
		return "", "", 0, false
	}
	return lo, hi, j + 1, true
}

// onigClass copies the character class at expr[i] ('[') to b and returns
// the offset after it.
func onigClass(expr string, i int, b *strings.Builder) (int, error) {
	start := i
	b.WriteByte('[')
	i++
	negated := i < len(expr) && expr[i] == '^'
	if negated {
		b.WriteByte('^')
		i++
	}
	if i < len(expr) && expr[i] == ']' { // a leading ] is literal
		b.WriteByte(']')
		i++
	}
	xStart := i
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ']':
			b.WriteByte(c)
			return i + 1, nil
		case c == '[':
			return 0, fmt.Errorf("nested character class or POSIX bracket at offset %d (in class at %d) is not supported", i, start)
		case c == '&' && strings.HasPrefix(expr[i:], "&&[^") && !negated && i > xStart:
			// [X&&[^Y]], X without Y (Kimi's letters that are not Han):
			// .NET's subtraction [X-[Y]], which ends the class.
			b.WriteString("-[")
			j := i + 4
			if j < len(expr) && expr[j] == '^' { // a literal ^, not a negation
				b.WriteString(`\^`)
				j++
			}
			for j < len(expr) && expr[j] != ']' {
				if expr[j] == '[' || strings.HasPrefix(expr[j:], "&&") {
					return 0, fmt.Errorf("character class intersection && at offset %d: only [X&&[^Y]] with a plain Y is supported", i)
				}
				var err error
				if j, err = classItem(expr, j, b); err != nil {
					return 0, err
				}
			}
			if j == i+4 || !strings.HasPrefix(expr[j:], "]]") {
				return 0, fmt.Errorf("character class intersection && at offset %d: only [X&&[^Y]] with Y not empty, at the end of a class, is supported", i)
			}
			b.WriteString("]]")
			return j + 2, nil
		case c == '&' && strings.HasPrefix(expr[i:], "&&"):
			return 0, fmt.Errorf("character class intersection && at offset %d is not supported", i)
		default:
			var err error
			if i, err = classItem(expr, i, b); err != nil {
				return 0, err
			}
		}
	}
	return i, nil // unterminated: regexp2 reports it
}

// classItem copies one item of a character class at expr[i], a character
// or an escape (\w as Oniguruma's word characters), to b and returns the
// offset after it.
func classItem(expr string, i int, b *strings.Builder) (int, error) {
	if expr[i] != '\\' || i+1 >= len(expr) {
		b.WriteByte(expr[i])
		return i + 1, nil
	}
	switch n := expr[i+1]; n {
	case 'w':
		b.WriteString(onigWord)
	case 'W':
		return 0, fmt.Errorf(`\W inside a character class at offset %d is not supported`, i)
	default:
		k := bracedArg(expr, i+2, n)
		b.WriteString(expr[i : i+2+k])
		i += k
	}
	return i + 2, nil
}

// bracedArg is the length of the "{...}" at expr[i] that belongs to the
// escape \n before it (\p{L}, \x{41}), or 0; it is copied as it is.
func bracedArg(expr string, i int, n byte) int {
	if n != 'p' && n != 'P' && n != 'x' || i >= len(expr) || expr[i] != '{' {
		return 0
	}
	return strings.IndexByte(expr[i:], '}') + 1 // 0 when there is no '}'
}

type literalMatcher struct{ lit string }

// findAll matches like tokenizers, which compiles a String pattern to the
// escaped regex: the empty string matches at every character boundary of a
// non-empty s.
func (m literalMatcher) findAll(s string, fn func(start, end int)) error {
	if m.lit == "" {
		if s == "" {
			return nil
		}
		for i := range s {
			fn(i, i)
		}
		fn(len(s), len(s))
		return nil
	}
	off := 0
	for {
		i := strings.Index(s[off:], m.lit)
		if i < 0 {
			return nil
		}
		fn(off+i, off+i+len(m.lit))
		off += i + len(m.lit)
	}
}

// charMatcher reports every character satisfying pred as its own match, like
// HF's Pattern impl for Fn(char) -> bool.
type charMatcher struct{ pred func(rune) bool }

func (m charMatcher) findAll(s string, fn func(start, end int)) error {
	for i, r := range s {
		if m.pred(r) {
			fn(i, i+utf8.RuneLen(r))
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Hand-written scanner for the GPT-2 / Llama 3 / Qwen 2 / Qwen 3.5 split
// patterns. Each match is computed as the regex engine would: the first
// alternative that matches at the position wins, with greedy quantifiers
// backtracking inside it.

type scanKind uint8

const (
	scanGPT2 scanKind = iota
	scanLlama3
	scanQwen2
	scanQwen35
)

type scanMatcher struct{ kind scanKind }

// Character classes as bits, so a run can continue over a set of classes.
const (
	clsL     uint8 = 1  // \p{L}
	clsN     uint8 = 2  // \p{N}
	clsS     uint8 = 4  // \s (Unicode White_Space, as Oniguruma and .NET define it)
	clsM     uint8 = 8  // \p{M}; only the Qwen 3.5 pattern tells marks apart
	clsOther uint8 = 16 // anything else
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = runeClassSlow(r)
	}
	return
}()

func runeClassSlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.IsSpace(r):
		return clsS
	case unicode.IsMark(r):
		return clsM
	}
	return clsOther
}

// classAt returns the class, rune and byte size of the character at s[i].
// Without marks, \p{M} characters count as "other".
func classAt(s string, i int, marks bool) (uint8, rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, sz := utf8.DecodeRuneInString(s[i:])
	cls := runeClassSlow(r)
	if cls == clsM && !marks {
		cls = clsOther
	}
	return cls, r, sz
}

// runEnd returns the end of the run of characters whose class is in mask.
func runEnd(s string, i int, mask uint8, marks bool) int {
	for i < len(s) {
		c, _, sz := classAt(s, i, marks)
		if c&mask == 0 {
			break
		}
		i += sz
	}
	return i
}

func (m scanMatcher) findAll(s string, fn func(start, end int)) error {
	for i := 0; i < len(s); {
		var end int
		switch m.kind {
		case scanGPT2:
			end = scanGPT2At(s, i)
		case scanLlama3:
			end = scanLlamaAt(s, i, false, false)
		case scanQwen2:
			end = scanLlamaAt(s, i, true, false)
		default:
			end = scanLlamaAt(s, i, true, true)
		}
		fn(i, end)
		i = end
	}
	return nil
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d after the
// apostrophe at s[i-1], or 0.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return 0
	}
	lower := func(b byte) byte {
		if fold && b >= 'A' && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	// Under (?i), U+017F LATIN SMALL LETTER LONG S case-folds to 's'
	// (Unicode CaseFolding), in Oniguruma and regexp2 alike.
	if fold && strings.HasPrefix(s[i:], "\u017f") {
		return len("\u017f")
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if i+1 < len(s) && lower(s[i+1]) == 'e' {
			return 2
		}
	case 'l':
		if i+1 < len(s) && lower(s[i+1]) == 'l' {
			return 2
		}
	}
	return 0
}

// wsEnd handles `\s+(?!\S)|\s+` at a whitespace character: the whole run if
// it reaches the end of the text, otherwise the run minus its last character
// (which then prefixes the next word), unless the run is a single character.
func wsEnd(s string, i int, marks bool) int {
	j := i
	last := i
	for j < len(s) {
		c, _, sz := classAt(s, j, marks)
		if c != clsS {
			break
		}
		last = j
		j += sz
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}

// scanGPT2At: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2At(s string, i int) int {
	c, r, _ := classAt(s, i, false)
	if r == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	if r == ' ' && i+1 < len(s) {
		if c2, _, _ := classAt(s, i+1, false); c2 != clsS {
			return runEnd(s, i+1, c2, false)
		}
	}
	if c != clsS {
		return runEnd(s, i, c, false)
	}
	return wsEnd(s, i, false)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

func crlfEnd(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// scanLlamaAt matches, at s[i], Llama 3's
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Qwen 2/3's (singleDigit: \p{N} instead of \p{N}{1,3}), and Qwen 3.5's
// (also marks: [\p{L}\p{M}]+ for the word and [^\s\p{L}\p{M}\p{N}] for
// punctuation).
func scanLlamaAt(s string, i int, singleDigit, marks bool) int {
	c, r, sz := classAt(s, i, marks)
	if r == '\'' {
		if n := contraction(s, i+1, true); n > 0 {
			return i + 1 + n
		}
	}
	word := clsL
	if marks {
		word |= clsM
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ (marks: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+). A
	// leading mark is either the optional character or the first of the
	// run: the match is the same.
	if c&word != 0 {
		return runEnd(s, i, word, marks)
	}
	if c != clsN && !isCRLF(r) && i+sz < len(s) {
		if c2, _, _ := classAt(s, i+sz, marks); c2&word != 0 {
			return runEnd(s, i+sz, word, marks)
		}
	}
	// \p{N}{1,3} or \p{N}
	if c == clsN {
		end := i + sz
		if !singleDigit {
			for k := 0; k < 2 && end < len(s); k++ {
				c2, _, sz2 := classAt(s, end, marks)
				if c2 != clsN {
					break
				}
				end += sz2
			}
		}
		return end
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if r == ' ' && i+1 < len(s) {
		if c2, _, _ := classAt(s, i+1, marks); c2 == clsOther {
			return crlfEnd(s, runEnd(s, i+1, clsOther, marks))
		}
	}
	if c == clsOther {
		return crlfEnd(s, runEnd(s, i, clsOther, marks))
	}
	// \s*[\r\n]+ : up to the last \r or \n of the whitespace run.
	j, lastNL := i, -1
	for j < len(s) {
		c2, r2, sz2 := classAt(s, j, marks)
		if c2 != clsS {
			break
		}
		if isCRLF(r2) {
			lastNL = j
		}
		j += sz2
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	return wsEnd(s, i, marks)
}
