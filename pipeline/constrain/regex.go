package constrain

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// A string's pattern is compiled from Go's regexp/syntax tree (the
// ECMA-262 patterns of JSON Schema that RE2 reads the same way: classes,
// escapes, groups, alternation, quantifiers) into the same automaton as
// the rest of the schema. The characters are generated as the JSON text
// spells them: the quote, the backslash and control characters as
// escapes, every other character as its UTF-8 bytes. Unanchored ends
// match anywhere, as JSON Schema says: any characters may come before an
// unanchored start and after an unanchored end.

// maxPatternRepeat bounds a counted repetition ({n,m}) in a pattern.
const maxPatternRepeat = 1000

// pattern emits a string matching re (a JSON Schema pattern).
func (c *schemaCompiler) pattern(src, path string) error {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return fmt.Errorf("%s.pattern: %q cannot be enforced: %v (lookarounds and backreferences are not supported)", path, src, err)
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
