package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ---------------------------------------------------------------------------
// Template source -> segments (text and tags), with Jinja's whitespace
// control: "-" markers, and trim_blocks + lstrip_blocks, which transformers
// and @huggingface/jinja both enable for chat templates.

type segKind uint8

const (
	segText    segKind = iota
	segExpr            // {{ }}
	segStmt            // {% %}
	segComment         // {# #}
)

type segment struct {
	kind       segKind
	text       string // raw text, or tag content without delimiters/markers
	line       int
	trimLeft   bool // "{%-"
	trimRight  bool // "-%}"
	keepLStrip bool // "{%+": disables lstrip_blocks
}

func scanSegments(src string) ([]segment, error) {
	var segs []segment
	line := 1
	for pos := 0; pos < len(src); {
		i := strings.Index(src[pos:], "{")
		for i >= 0 {
			j := pos + i
			if j+1 < len(src) && (src[j+1] == '{' || src[j+1] == '%' || src[j+1] == '#') {
				break
			}
			k := strings.Index(src[j+1:], "{")
			if k < 0 {
				i = -1
				break
			}
			i = j + 1 + k - pos
		}
		if i < 0 {
			segs = append(segs, segment{kind: segText, text: src[pos:], line: line})
			break
		}
		if i > 0 {
			segs = append(segs, segment{kind: segText, text: src[pos : pos+i], line: line})
			line += strings.Count(src[pos:pos+i], "\n")
		}
		start := pos + i
		open := src[start+1]
		var kind segKind
		var closer string
		switch open {
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
		end := -1
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

// findCloser finds closer outside string literals.
func findCloser(src string, pos int, closer string) int {
	var quote byte
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
		if c == '\'' || c == '"' {
			quote = c
			continue
		}
		if strings.HasPrefix(src[i:], closer) {
			return i
		}
	}
	return -1
}

func applyWhitespaceControl(segs []segment) {
	for i := range segs {
		s := &segs[i]
		if s.kind == segText {
			continue
		}
		block := s.kind == segStmt || s.kind == segComment
		if i > 0 && segs[i-1].kind == segText {
			prev := &segs[i-1]
			switch {
			case s.trimLeft:
				prev.text = strings.TrimRight(prev.text, " \t\n\r\v\f")
			case block && !s.keepLStrip:
				// lstrip_blocks: drop spaces/tabs between the line start
				// and the tag.
				nl := strings.LastIndexByte(prev.text, '\n')
				tail := prev.text[nl+1:]
				if strings.Trim(tail, " \t") == "" && (nl >= 0 || i == 1) {
					prev.text = prev.text[:nl+1]
				}
			}
		}
		if i+1 < len(segs) && segs[i+1].kind == segText {
			next := &segs[i+1]
			switch {
			case s.trimRight:
				next.text = strings.TrimLeft(next.text, " \t\n\r\v\f")
			case block:
				// trim_blocks: drop the first newline after a block tag.
				if strings.HasPrefix(next.text, "\n") {
					next.text = next.text[1:]
				} else if strings.HasPrefix(next.text, "\r\n") {
					next.text = next.text[2:]
				}
			}
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
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tkName, s: s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i
			isFloat := false
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '_') {
				j++
			}
			if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
				isFloat = true
				j++
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					j++
				}
			}
			lit := strings.ReplaceAll(s[i:j], "_", "")
			if isFloat {
				var f float64
				if _, err := fmt.Sscanf(lit, "%g", &f); err != nil {
					return nil, fmt.Errorf("line %d: bad number %q", line, lit)
				}
				toks = append(toks, token{kind: tkFloat, f: f})
			} else {
				n, err := strconv.ParseInt(lit, 10, 64)
				if errors.Is(err, strconv.ErrRange) {
					return nil, fmt.Errorf("line %d: %w", line, limitf("integer overflow: the literal %.40s does not fit in 64 bits (chat templates use 64-bit integers)", lit))
				}
				if err != nil {
					return nil, fmt.Errorf("line %d: bad number %q", line, lit)
				}
				toks = append(toks, token{kind: tkInt, i: n})
			}
			i = j
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			closed := false
			for j < len(s) {
				if s[j] == '\\' && j+1 < len(s) {
					switch s[j+1] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					case '\\':
						b.WriteByte('\\')
					case '\'':
						b.WriteByte('\'')
					case '"':
						b.WriteByte('"')
					default:
						b.WriteByte('\\')
						b.WriteByte(s[j+1])
					}
					j += 2
					continue
				}
				if s[j] == c {
					closed = true
					break
				}
				b.WriteByte(s[j])
				j++
			}
			if !closed {
				return nil, fmt.Errorf("line %d: unterminated string", line)
			}
			toks = append(toks, token{kind: tkString, s: b.String()})
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
