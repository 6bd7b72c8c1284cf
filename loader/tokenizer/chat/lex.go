package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ---------------------------------------------------------------------------
// Template source -> segments (text and tags), with Jinja's whitespace
// control: "-" and "+" markers, and trim_blocks + lstrip_blocks, which
// transformers and @huggingface/jinja both enable for chat templates.

type segKind uint8

const (
	segText    segKind = iota
	segExpr            // {{ }}
	segStmt            // {% %}
	segComment         // {# #}
	segRaw             // {% raw %} or {% endraw %}: whitespace control only
)

type segment struct {
	kind       segKind
	text       string // raw text, or tag content without delimiters/markers
	line       int
	trimLeft   bool // "{%-"
	trimRight  bool // "-%}"
	keepLStrip bool // "{%+": disables lstrip_blocks
	keepTrim   bool // "+%}": disables trim_blocks
	noTrim     bool // {% raw %}: Jinja's rule for it has no trim_blocks
	lineStart  bool // text: starts a line (for lstrip_blocks)
}

// pyIsSpace is Python's str.isspace for one character (and what the \s of
// Jinja's lexer matches): Go's unicode.IsSpace plus the separators
// \x1c-\x1f.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// normalizeSource does what Jinja's lexer does before it scans: every
// \r\n and \r becomes \n, and one trailing newline is dropped
// (keep_trailing_newline=False).
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func scanSegments(src string) ([]segment, error) {
	src = normalizeSource(src)
	var segs []segment
	line := 1
	for pos := 0; pos < len(src); {
		i := nextTag(src, pos)
		if i < 0 {
			segs = append(segs, segment{kind: segText, text: src[pos:], line: line})
			break
		}
		if i > pos {
			segs = append(segs, segment{kind: segText, text: src[pos:i], line: line})
			line += strings.Count(src[pos:i], "\n")
		}
		raw, end, err := rawBlock(src, i, line)
		if err != nil {
			return nil, err
		}
		if raw != nil {
			segs = append(segs, raw...)
			line += strings.Count(src[i:end], "\n")
			pos = end
			continue
		}
		start := i
		var kind segKind
		var closer string
		switch src[start+1] {
		case '{':
			kind, closer = segExpr, "}}"
		case '%':
			kind, closer = segStmt, "%}"
		default:
			kind, closer = segComment, "#}"
		}
		body := start + 2
		seg := segment{kind: kind, line: line}
		if body < len(src) && src[body] == '-' {
			seg.trimLeft = true
			body++
		} else if body < len(src) && src[body] == '+' {
			seg.keepLStrip = true
			body++
		}
		end = -1
		if kind == segComment {
			if k := strings.Index(src[body:], closer); k >= 0 {
				end = body + k
			}
		} else {
			end = findCloser(src, body, closer)
		}
		if end < 0 {
			return nil, fmt.Errorf("line %d: unclosed %q", line, src[start:start+2])
		}
		content := src[body:end]
		if strings.HasSuffix(content, "-") {
			seg.trimRight = true
			content = content[:len(content)-1]
		} else if strings.HasSuffix(content, "+") && kind != segExpr {
			seg.keepTrim = true
			content = content[:len(content)-1]
		}
		seg.text = content
		segs = append(segs, seg)
		line += strings.Count(src[start:end+2], "\n")
		pos = end + 2
	}
	applyWhitespaceControl(segs)
	return segs, nil
}

// nextTag is the offset of the next "{{", "{%" or "{#" at or after pos, or
// -1.
func nextTag(src string, pos int) int {
	for {
		k := strings.IndexByte(src[pos:], '{')
		if k < 0 {
			return -1
		}
		j := pos + k
		if j+1 < len(src) && (src[j+1] == '{' || src[j+1] == '%' || src[j+1] == '#') {
			return j
		}
		pos = j + 1
	}
}

// rawBlock recognises "{% raw %}...{% endraw %}" at i (Jinja's raw_begin
// rule: "{%" sign? ws* "raw" ws* ("-%}" ws* | "%}")) and returns its
// segments: the begin marker, the text as it is, and the end marker; none
// when there is no raw block at i.
func rawBlock(src string, i, line int) ([]segment, int, error) {
	if !strings.HasPrefix(src[i:], "{%") {
		return nil, 0, nil
	}
	begin := segment{kind: segRaw, line: line, noTrim: true}
	p := i + 2
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		begin.trimLeft, begin.keepLStrip = src[p] == '-', src[p] == '+'
		p++
	}
	p = skipSpace(src, p)
	if !strings.HasPrefix(src[p:], "raw") {
		return nil, 0, nil
	}
	p = skipSpace(src, p+3)
	switch {
	case strings.HasPrefix(src[p:], "-%}"):
		begin.trimRight = true
		p += 3
	case strings.HasPrefix(src[p:], "%}"):
		p += 2
	default:
		return nil, 0, nil
	}
	// The end: "{%" sign? ws* "endraw" ws* ("+%}" | "-%}" | "%}").
	for q := p; ; {
		k := strings.Index(src[q:], "{%")
		if k < 0 {
			return nil, 0, fmt.Errorf("line %d: missing {%% endraw %%}", line)
		}
		start := q + k
		end := segment{kind: segRaw}
		e := start + 2
		if e < len(src) && (src[e] == '-' || src[e] == '+') {
			end.trimLeft, end.keepLStrip = src[e] == '-', src[e] == '+'
			e++
		}
		e = skipSpace(src, e)
		if strings.HasPrefix(src[e:], "endraw") {
			e = skipSpace(src, e+6)
			closed := true
			switch {
			case strings.HasPrefix(src[e:], "+%}"):
				end.keepTrim = true
				e += 3
			case strings.HasPrefix(src[e:], "-%}"):
				end.trimRight = true
				e += 3
			case strings.HasPrefix(src[e:], "%}"):
				e += 2
			default:
				closed = false
			}
			if closed {
				// Lines are counted only here: counting at every "{%"
				// inside the block would be quadratic in the source.
				end.line = line + strings.Count(src[i:start], "\n")
				text := segment{kind: segText, text: src[p:start], line: line + strings.Count(src[i:p], "\n")}
				return []segment{begin, text, end}, e, nil
			}
		}
		q = start + 2
	}
}

func skipSpace(s string, p int) int {
	for p < len(s) {
		r, w := utf8.DecodeRuneInString(s[p:])
		if !pyIsSpace(r) {
			break
		}
		p += w
	}
	return p
}

// findCloser finds closer outside string literals and brackets (Jinja
// ends a tag only where its brackets balance: "{{ {'a': {'b': 1}} }}").
func findCloser(src string, pos int, closer string) int {
	var quote byte
	depth := 0
	for i := pos; i < len(src); i++ {
		c := src[i]
		if quote != 0 {
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '\'', '"':
			quote = c
			continue
		case '(', '[', '{':
			depth++
			continue
		case ')', ']':
			depth = max(depth-1, 0)
			continue
		}
		if depth == 0 && strings.HasPrefix(src[i:], closer) {
			return i
		}
		if c == '}' {
			depth = max(depth-1, 0)
		}
	}
	return -1
}

// applyWhitespaceControl applies the markers and trim_blocks/lstrip_blocks
// in source order, as Jinja's lexer does: a tag's "-%}" or trim_blocks
// first takes what follows it, then the next tag's "{%-" or lstrip_blocks
// takes the end of what is left. lstrip_blocks strips the whitespace
// before a block or comment tag when it starts a line: after a newline in
// the text, or at the start of a text that follows the template start or a
// tag whose end (with what it trimmed) took a newline.
func applyWhitespaceControl(segs []segment) {
	if len(segs) > 0 && segs[0].kind == segText {
		segs[0].lineStart = true
	}
	for i := range segs {
		s := &segs[i]
		if s.kind == segText {
			continue
		}
		block := s.kind != segExpr
		if i > 0 && segs[i-1].kind == segText {
			prev := &segs[i-1]
			switch {
			case s.trimLeft:
				prev.text = strings.TrimRightFunc(prev.text, pyIsSpace)
			case block && !s.keepLStrip:
				nl := strings.LastIndexByte(prev.text, '\n')
				tail := prev.text[nl+1:]
				if tail != "" && (nl >= 0 || prev.lineStart) && strings.TrimFunc(tail, pyIsSpace) == "" {
					prev.text = prev.text[:nl+1]
				}
			}
		}
		if i+1 < len(segs) && segs[i+1].kind == segText {
			next := &segs[i+1]
			taken := ""
			switch {
			case s.trimRight:
				rest := strings.TrimLeftFunc(next.text, pyIsSpace)
				taken = next.text[:len(next.text)-len(rest)]
				next.text = rest
			case block && !s.keepTrim && !s.noTrim:
				// trim_blocks: drop the first newline after a block tag.
				if strings.HasPrefix(next.text, "\n") {
					taken, next.text = "\n", next.text[1:]
				}
			}
			next.lineStart = strings.HasSuffix(taken, "\n")
		}
	}
}

// ---------------------------------------------------------------------------
// Tag content -> tokens.

type tokKind uint8

const (
	tkEOF tokKind = iota
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
)

type token struct {
	kind tokKind
	s    string
	i    int64
	f    float64
}

func lexTag(s string, line int) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tkName, s: s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			tok, j, err := lexNumber(s, i)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			toks = append(toks, tok)
			i = j
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("line %d: unterminated string", line)
			}
			v, err := decodeString(s[i+1 : j])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			toks = append(toks, token{kind: tkString, s: v})
			i = j + 1
		default:
			op := ""
			for _, o := range []string{"**", "//", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if strings.IndexByte("+-*/%~<>=()[]{}.,:|!?", c) < 0 {
					return nil, fmt.Errorf("line %d: unexpected character %q", line, c)
				}
				op = string(c)
			}
			toks = append(toks, token{kind: tkOp, s: op})
			i += len(op)
		}
	}
	return toks, nil
}

// lexNumber reads a number at s[i:] as Jinja's lexer does: a float
// ("1.5", "1e20", "2.5E-3", "1_000.5") or an integer (decimal, "0x1F",
// "0o17", "0b11", with "_" between digits). A float may not follow a "."
// ("x.0.1" is x[0][1]).
func lexNumber(s string, i int) (token, int, error) {
	digits := func(j int, ok func(byte) bool) int {
		for j < len(s) && (ok(s[j]) || s[j] == '_' && j+1 < len(s) && ok(s[j+1]) && j > 0 && ok(s[j-1])) {
			j++
		}
		return j
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	if i+1 < len(s) && s[i] == '0' {
		base, ok := 0, func(byte) bool { return false }
		switch s[i+1] | 0x20 {
		case 'x':
			base, ok = 16, func(c byte) bool { return isDec(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }
		case 'o':
			base, ok = 8, func(c byte) bool { return c >= '0' && c <= '7' }
		case 'b':
			base, ok = 2, func(c byte) bool { return c == '0' || c == '1' }
		}
		if base != 0 {
			j := i + 2
			if j < len(s) && s[j] == '_' {
				j++
			}
			if e := digits(j, ok); e > j {
				n, err := strconv.ParseInt(strings.ReplaceAll(s[i+2:e], "_", ""), base, 64)
				if errors.Is(err, strconv.ErrRange) {
					return token{}, 0, limitf("integer overflow: the literal %.40s does not fit in 64 bits (chat templates use 64-bit integers)", s[i:e])
				}
				if err != nil {
					return token{}, 0, fmt.Errorf("bad number %q", s[i:e])
				}
				return token{kind: tkInt, i: n}, e, nil
			}
		}
	}
	j := digits(i, isDec)
	isFloat := false
	if i == 0 || s[i-1] != '.' {
		if j+1 < len(s) && s[j] == '.' && isDec(s[j+1]) {
			isFloat = true
			j = digits(j+1, isDec)
		}
		if j < len(s) && s[j]|0x20 == 'e' {
			k := j + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			if k < len(s) && isDec(s[k]) {
				isFloat = true
				j = digits(k, isDec)
			}
		}
	}
	lit := strings.ReplaceAll(s[i:j], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return token{}, 0, fmt.Errorf("bad number %q", lit)
		}
		return token{kind: tkFloat, f: f}, j, nil
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return token{}, 0, limitf("integer overflow: the literal %.40s does not fit in 64 bits (chat templates use 64-bit integers)", lit)
	}
	if err != nil {
		return token{}, 0, fmt.Errorf("bad number %q", lit)
	}
	return token{kind: tkInt, i: n}, j, nil
}

// decodeString decodes the text of a string literal as Jinja's lexer does,
// with Python's value.encode("ascii", "backslashreplace").decode(
// "unicode-escape"): a backslash-newline vanishes; \\ \' \" \a \b \f \n \r
// \t \v, octal \0 to \777, \xHH, \uHHHH and \UHHHHHHHH are escapes; any
// other backslash stays (\q is a backslash and q). A backslash before a
// non-ASCII character keeps that character's escape text ('\é' is the four
// characters \xe9), as in Python. \N{name} is not supported.
func decodeString(raw string) (string, error) {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, nil
	}
	// Phase 1, backslashreplace: non-ASCII characters become escapes.
	var a strings.Builder
	for _, r := range raw {
		switch {
		case r < 0x80:
			a.WriteByte(byte(r))
		case r < 0x100:
			fmt.Fprintf(&a, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&a, `\u%04x`, r)
		default:
			fmt.Fprintf(&a, `\U%08x`, r)
		}
	}
	s := a.String()
	// Phase 2, unicode-escape.
	var b strings.Builder
	hex := func(j, n int, what string) (rune, error) {
		if j+n > len(s) {
			return 0, fmt.Errorf("truncated %s escape in a string", what)
		}
		v, err := strconv.ParseUint(s[j:j+n], 16, 32)
		if err != nil {
			return 0, fmt.Errorf("truncated %s escape in a string", what)
		}
		if v > unicode.MaxRune {
			return 0, fmt.Errorf("illegal Unicode character in a string")
		}
		return rune(v), nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := rune(e - '0')
			for k := 0; k < 2 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; k++ {
				i++
				v = v*8 + rune(s[i]-'0')
			}
			b.WriteRune(v)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			r, err := hex(i+1, n, `\`+string(e)+strings.Repeat("X", n))
			if err != nil {
				return "", err
			}
			b.WriteRune(r)
			i += n
		case 'N':
			return "", fmt.Errorf(`\N{...} escapes in strings are not supported`)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
