package constrain

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// A string's pattern is an ECMA-262 regular expression (JSON Schema's
// dialect, read with the u flag as JSON Schema 2020-12 asks: it matches
// code points). ecmaPattern rewrites it in Go's regexp/syntax with the
// same meaning (ECMA's ., \s and \S spelled out as classes) and refuses
// what Go would read otherwise (POSIX classes, \A, \z, \Q, \p, inline
// flags, octal escapes); the tree is then compiled into the same
// automaton as the rest of the schema. The characters are generated as
// the JSON text spells them: the quote, the backslash and control
// characters as escapes, every other character as its UTF-8 bytes.
// Unanchored ends match anywhere, as JSON Schema says: any characters may
// come before an unanchored start and after an unanchored end.

// ecmaSpace is ECMA-262's \s: its WhiteSpace and LineTerminator
// characters, as inclusive ranges.
var ecmaSpace = []rune{
	'\t', '\r', ' ', ' ', 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a,
	0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000, 0xfeff, 0xfeff,
}

// ecmaLineEnd is what ECMA-262's . does not match: its LineTerminators.
var ecmaLineEnd = []rune{'\n', '\n', '\r', '\r', 0x2028, 0x2029}

// goRanges spells inclusive rune ranges for the inside of a Go class.
func goRanges(ranges []rune) string {
	var sb strings.Builder
	for i := 0; i+1 < len(ranges); i += 2 {
		fmt.Fprintf(&sb, `\x{%x}`, ranges[i])
		if ranges[i+1] != ranges[i] {
			fmt.Fprintf(&sb, `-\x{%x}`, ranges[i+1])
		}
	}
	return sb.String()
}

// complement is the ranges of every rune outside ranges (sorted, disjoint).
func complement(ranges []rune) []rune {
	var out []rune
	next := rune(0)
	for i := 0; i+1 < len(ranges); i += 2 {
		if ranges[i] > next {
			out = append(out, next, ranges[i]-1)
		}
		next = ranges[i+1] + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}

// ecmaPattern rewrites the ECMA-262 pattern src in Go's syntax, or says
// which of its constructs cannot be read the same way.
func ecmaPattern(src string) (string, error) {
	rs := []rune(src)
	var out strings.Builder
	inClass := false
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\':
			s, n, err := ecmaEscape(rs[i+1:], inClass)
			if err != nil {
				return "", err
			}
			out.WriteString(s)
			i += n
		case inClass && r == '[':
			return "", fmt.Errorf("a [ inside a class (Go reads [: as a POSIX class; write \\[)")
		case inClass:
			if r == ']' {
				inClass = false
			}
			out.WriteRune(r)
		case r == '[':
			neg := i+1 < len(rs) && rs[i+1] == '^'
			j := i + 1
			if neg {
				j++
			}
			if j < len(rs) && rs[j] == ']' { // ECMA's [] and [^]
				if !neg {
					return "", fmt.Errorf("the empty class [] matches nothing")
				}
				out.WriteString(`[\x00-\x{10ffff}]`)
				i = j
				continue
			}
			out.WriteString(string(rs[i:j]))
			i = j - 1
			inClass = true
		case r == '.':
			out.WriteString("[^" + goRanges(ecmaLineEnd) + "]")
		case r == '(' && i+1 < len(rs) && rs[i+1] == '?':
			// Two runes tell the group's kind (converting the whole rest
			// at every group would be quadratic in the pattern).
			rest := string(rs[i+2 : min(i+4, len(rs))])
			switch {
			case strings.HasPrefix(rest, ":"):
				out.WriteString("(?:")
				i += 2
			case strings.HasPrefix(rest, "="), strings.HasPrefix(rest, "!"), strings.HasPrefix(rest, "<="), strings.HasPrefix(rest, "<!"):
				return "", fmt.Errorf("lookarounds are not supported")
			case strings.HasPrefix(rest, "<"):
				// A named group: a group (the name only serves
				// backreferences, which are refused).
				end := slices.Index(rs[i+2:], '>')
				if end < 0 {
					return "", fmt.Errorf("an unterminated group name")
				}
				out.WriteString("(")
				i += 2 + end
			default:
				return "", fmt.Errorf("(?%s: inline flags and Go's group syntax are not ECMA-262", string(rs[i+2:min(i+3, len(rs))]))
			}
		default:
			out.WriteRune(r)
		}
	}
	return out.String(), nil
}

// ecmaEscape rewrites the escape whose text after the backslash starts
// rs, returning its Go spelling and how many runes of rs it took.
func ecmaEscape(rs []rune, inClass bool) (string, int, error) {
	if len(rs) == 0 {
		return "", 0, fmt.Errorf("a pattern cannot end in a backslash")
	}
	hex := func(s []rune) (rune, bool) {
		n, err := strconv.ParseUint(string(s), 16, 32)
		return rune(n), err == nil && n <= unicode.MaxRune
	}
	lit := func(r rune) string { return fmt.Sprintf(`\x{%x}`, r) }
	switch c := rs[0]; c {
	case 'd', 'D', 'w', 'W', 'f', 'n', 'r', 't', 'v':
		return `\` + string(c), 1, nil // the same in Go (\d and \w ASCII)
	case 's':
		if inClass {
			return goRanges(ecmaSpace), 1, nil
		}
		return "[" + goRanges(ecmaSpace) + "]", 1, nil
	case 'S':
		if inClass {
			return goRanges(complement(ecmaSpace)), 1, nil
		}
		return "[^" + goRanges(ecmaSpace) + "]", 1, nil
	case 'b':
		if inClass {
			return `\x08`, 1, nil // backspace
		}
		return `\b`, 1, nil // a word boundary: refused after parsing
	case 'B':
		if !inClass {
			return `\B`, 1, nil
		}
	case '0':
		if len(rs) < 2 || rs[1] < '0' || rs[1] > '9' {
			return `\x00`, 1, nil
		}
		return "", 0, fmt.Errorf(`octal escapes (\0%c) are not supported`, rs[1])
	case '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "", 0, fmt.Errorf(`backreferences (\%c) are not supported`, c)
	case 'x':
		if len(rs) >= 3 {
			if r, ok := hex(rs[1:3]); ok {
				return lit(r), 3, nil
			}
		}
		return "", 0, fmt.Errorf(`\x takes two hex digits (Go's \x{...} is not ECMA-262)`)
	case 'u':
		if len(rs) >= 3 && rs[1] == '{' {
			end := slices.Index(rs, '}')
			if r, ok := hex(rs[2:max(end, 2)]); end > 2 && ok && !isSurrogate(r) {
				return lit(r), end + 1, nil
			}
			return "", 0, fmt.Errorf(`\u{...} takes a code point (not a surrogate) in hex`)
		}
		if len(rs) >= 5 {
			if r, ok := hex(rs[1:5]); ok {
				if !isSurrogate(r) {
					return lit(r), 5, nil
				}
				if r < 0xdc00 && len(rs) >= 11 && rs[5] == '\\' && rs[6] == 'u' {
					if lo, ok := hex(rs[7:11]); ok && lo >= 0xdc00 && lo <= 0xdfff {
						return lit(utf16.DecodeRune(r, lo)), 11, nil
					}
				}
				return "", 0, fmt.Errorf(`\u%s is a lone surrogate`, string(rs[1:5]))
			}
		}
		return "", 0, fmt.Errorf(`\u takes four hex digits or {code point}`)
	case 'c':
		if len(rs) >= 2 && (rs[1] >= 'a' && rs[1] <= 'z' || rs[1] >= 'A' && rs[1] <= 'Z') {
			return lit(rs[1] % 32), 2, nil
		}
	case 'p', 'P':
		return "", 0, fmt.Errorf(`Unicode property escapes (\%c) are not supported`, c)
	case 'k':
		return "", 0, fmt.Errorf(`backreferences (\k) are not supported`)
	default:
		if c < utf8.RuneSelf && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return `\` + string(c), 1, nil // an escaped punctuation character is itself
		}
	}
	return "", 0, fmt.Errorf(`\%c is not an ECMA-262 escape that Go reads the same way`, rs[0])
}

// isSurrogate reports whether r is a UTF-16 surrogate (not a character).
func isSurrogate(r rune) bool { return r >= 0xd800 && r <= 0xdfff }

// maxPatternRepeat bounds a counted repetition ({n,m}) in a pattern.
const maxPatternRepeat = 1000

// pattern emits a string matching re (a JSON Schema pattern).
func (c *schemaCompiler) pattern(src, path string) error {
	goSrc, err := ecmaPattern(src)
	if err != nil {
		return fmt.Errorf("%s.pattern: %q cannot be enforced: %v", path, src, err)
	}
	re, err := syntax.Parse(goSrc, syntax.Perl)
	if err != nil {
		return fmt.Errorf("%s.pattern: %q cannot be enforced: %v", path, src, err)
	}
	re = re.Simplify()
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	start, end := false, false
	if len(subs) > 0 && (subs[0].Op == syntax.OpBeginText || subs[0].Op == syntax.OpBeginLine) {
		start, subs = true, subs[1:]
	}
	if len(subs) > 0 && (subs[len(subs)-1].Op == syntax.OpEndText || subs[len(subs)-1].Op == syntax.OpEndLine) {
		end, subs = true, subs[:len(subs)-1]
	}
	c.b.lit(`"`)
	if !start {
		c.b.star(c.char)
	}
	for _, s := range subs {
		if err := c.regex(s, src, path); err != nil {
			return err
		}
	}
	if !end {
		c.b.star(c.char)
	}
	c.b.lit(`"`)
	return nil
}

// regex emits re's language.
func (c *schemaCompiler) regex(re *syntax.Regexp, src, path string) error {
	b := c.b
	var err error
	sub := func(r *syntax.Regexp) func() {
		return func() {
			if err == nil {
				err = c.regex(r, src, path)
			}
		}
	}
	switch re.Op {
	case syntax.OpEmptyMatch:
	case syntax.OpNoMatch:
		return fmt.Errorf("%s.pattern: %q matches nothing", path, src)
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				c.runeClass(foldRanges(r))
			} else {
				c.runeClass([]rune{r, r})
			}
		}
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return fmt.Errorf("%s.pattern: %q has an empty class", path, src)
		}
		c.runeClass(re.Rune)
	case syntax.OpAnyCharNotNL:
		c.runeClass([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune})
	case syntax.OpAnyChar:
		c.runeClass([]rune{0, unicode.MaxRune})
	case syntax.OpCapture:
		return c.regex(re.Sub[0], src, path)
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if err := c.regex(s, src, path); err != nil {
				return err
			}
		}
	case syntax.OpAlternate:
		var frags []func()
		for _, s := range re.Sub {
			frags = append(frags, sub(s))
		}
		b.alt(frags...)
	case syntax.OpStar:
		b.star(sub(re.Sub[0]))
	case syntax.OpPlus:
		sub(re.Sub[0])()
		b.star(sub(re.Sub[0]))
	case syntax.OpQuest:
		b.opt(sub(re.Sub[0]))
	case syntax.OpRepeat:
		if re.Min > maxPatternRepeat || re.Max > maxPatternRepeat {
			return fmt.Errorf("%s.pattern: %q repeats more than %d times", path, src, maxPatternRepeat)
		}
		b.repeat(re.Min, re.Max, sub(re.Sub[0]))
	default:
		return fmt.Errorf("%s.pattern: %q cannot be enforced: %s inside the pattern (anchors only at its ends; no word boundaries)", path, src, re.Op)
	}
	return err
}

// foldRanges is the class of r and its case variants.
func foldRanges(r rune) []rune {
	out := []rune{r, r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f, f)
	}
	return out
}

// runeClass emits one character of the class (pairs of inclusive rune
// ranges) as the JSON text spells it.
func (c *schemaCompiler) runeClass(ranges []rune) {
	b := c.b
	var frags []func()
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		// Characters JSON escapes, each its one spelling.
		for r := lo; r <= hi && r < 0x20; r++ {
			frags = append(frags, func() { b.lit(escapeRune(r)) })
		}
		for _, r := range []rune{'"', '\\'} {
			if lo <= r && r <= hi {
				frags = append(frags, func() { b.lit(escapeRune(r)) })
			}
		}
		lo = max(lo, 0x20)
		for _, part := range [][2]rune{{lo, min(hi, '"'-1)}, {max(lo, '"'+1), min(hi, '\\'-1)}, {max(lo, '\\'+1), min(hi, 0xd7ff)}, {max(lo, 0xe000), min(hi, unicode.MaxRune)}} {
			if part[0] <= part[1] {
				for _, seq := range utf8Ranges(part[0], part[1]) {
					frags = append(frags, func() {
						for _, r := range seq {
							b.byteRange(r[0], r[1])
						}
					})
				}
			}
		}
	}
	b.alt(frags...)
}

// escapeRune is JSON's escape for r (a control character, the quote or
// the backslash).
func escapeRune(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// utf8Ranges splits the runes [lo, hi] (no surrogates) into sequences of
// byte ranges whose concatenations are exactly their UTF-8 encodings.
func utf8Ranges(lo, hi rune) [][][2]byte {
	var out [][][2]byte
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		// One encoded length at a time.
		for _, bound := range []rune{0x7f, 0x7ff, 0xffff} {
			if lo <= bound && bound < hi {
				split(lo, bound)
				split(bound+1, hi)
				return
			}
		}
		n := utf8.RuneLen(lo)
		// Split until every byte position is a range of its own: the
		// lower i continuation bytes of lo all 0x80 and of hi all 0xbf.
		for i := 1; i < n; i++ {
			m := rune(1)<<(6*i) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, hi&^m-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		a := make([]byte, 4)
		z := make([]byte, 4)
		utf8.EncodeRune(a, lo)
		utf8.EncodeRune(z, hi)
		seq := make([][2]byte, n)
		for i := range n {
			seq[i] = [2]byte{a[i], z[i]}
		}
		out = append(out, seq)
	}
	split(lo, hi)
	return out
}
