package serve

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Pythonic tool calls (ToolsPythonic): Liquid AI's LFM2 and LFM2-MoE
// write a Python list of calls with keyword arguments between their
// <|tool_call_start|> and <|tool_call_end|> special tokens,
//
//	<|tool_call_start|>[get_weather(city="Paris", days=3), get_time()]<|tool_call_end|>
//
// each argument a Python literal: a string in single, double or triple
// quotes with Python's escapes, an int or a float, True, False, None, a
// list, a tuple or a dict of them. The arguments become a JSON object
// (a tuple an array, a dict's keys strings). A block that holds JSON
// instead (a list of {"name", "arguments"} objects, which LFM2 writes
// when its system prompt asks for JSON calls) is read as such. A call
// with a positional argument, or text that is not such a list, is not a
// call: the answer is then content, unchanged.

const (
	pythonicOpen  = "<|tool_call_start|>"
	pythonicClose = "<|tool_call_end|>"
	// pythonicDepth bounds the nesting of a literal.
	pythonicDepth = 32
)

// pythonicCalls parses one block's body (between the markers) into its
// calls, each name with its arguments as a JSON object; ok is false when
// the body is not a list of calls.
func pythonicCalls(body string) (names []string, args []json.RawMessage, ok bool) {
	body = strings.TrimSpace(body)
	if strings.HasPrefix(body, "[{") || strings.HasPrefix(body, "{") { // JSON calls
		var list []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal([]byte(body), &list) != nil {
			var one struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if json.Unmarshal([]byte(body), &one) != nil {
				return nil, nil, false
			}
			list = append(list, one)
		}
		for _, c := range list {
			names, args = append(names, c.Name), append(args, c.Arguments)
		}
		return names, args, len(list) > 0
	}
	p := &pyParser{s: body}
	bracketed := p.take('[')
	for len(names) < maxToolCalls {
		p.space()
		if bracketed && p.peek() == ']' {
			break
		}
		name, a, ok := p.call()
		if !ok {
			return nil, nil, false
		}
		names, args = append(names, name), append(args, a)
		p.space()
		if !p.take(',') {
			break
		}
	}
	p.space()
	if bracketed && !p.take(']') {
		return nil, nil, false
	}
	p.space()
	return names, args, p.i == len(p.s) && len(names) > 0
}

// pyParser reads Python literals off s from i.
type pyParser struct {
	s string
	i int
}

func (p *pyParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

// take consumes c (after spaces) when it comes next.
func (p *pyParser) take(c byte) bool {
	p.space()
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

// ident reads a name: letters, digits, '_', '.', '-' (tool names allow
// '-'; a dotted name is a namespace).
func (p *pyParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c == '.' || c == '-' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c >= utf8.RuneSelf {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// call reads NAME(KEY=VALUE, ...) into the name and a JSON object of the
// arguments in their order (a key given twice keeps its last value, at
// its first place).
func (p *pyParser) call() (string, json.RawMessage, bool) {
	p.space()
	name := p.ident()
	if name == "" || !p.take('(') {
		return "", nil, false
	}
	var pairs [][2]string
	for len(pairs) < maxToolArgs {
		p.space()
		if p.take(')') {
			return name, jsonObject(pairs), true
		}
		key := p.ident()
		if key == "" || !p.take('=') {
			return "", nil, false // a positional argument, or not a call
		}
		v, ok := p.value(0)
		if !ok {
			return "", nil, false
		}
		pairs = append(pairs, [2]string{key, string(v)})
		if !p.take(',') {
			if p.take(')') {
				return name, jsonObject(pairs), true
			}
			return "", nil, false
		}
	}
	return "", nil, false
}

// value reads one Python literal as JSON.
func (p *pyParser) value(depth int) (json.RawMessage, bool) {
	if depth > pythonicDepth {
		return nil, false
	}
	p.space()
	switch c := p.peek(); {
	case c == '"' || c == '\'':
		s, ok := p.str()
		return jsonString(s), ok
	case c == '[' || c == '(':
		closer := byte(']')
		if c == '(' {
			closer = ')'
		}
		p.i++
		var b bytes.Buffer
		b.WriteByte('[')
		for n := 0; ; n++ {
			if p.take(closer) {
				b.WriteByte(']')
				return b.Bytes(), true
			}
			if n > 0 {
				b.WriteByte(',')
			}
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			b.Write(v)
			if !p.take(',') {
				if p.take(closer) {
					b.WriteByte(']')
					return b.Bytes(), true
				}
				return nil, false
			}
		}
	case c == '{':
		p.i++
		var pairs [][2]string
		for {
			if p.take('}') {
				return jsonObject(pairs), true
			}
			k, ok := p.value(depth + 1)
			if !ok || !p.take(':') {
				return nil, false
			}
			var key string
			if json.Unmarshal(k, &key) != nil { // a number, True, None: its text
				key = string(k)
			}
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			pairs = append(pairs, [2]string{key, string(v)})
			if !p.take(',') {
				if p.take('}') {
					return jsonObject(pairs), true
				}
				return nil, false
			}
		}
	case c == '-' || c == '+' || c == '.' || ('0' <= c && c <= '9'):
		return p.number()
	default:
		switch p.ident() {
		case "True", "true":
			return json.RawMessage("true"), true
		case "False", "false":
			return json.RawMessage("false"), true
		case "None", "null":
			return json.RawMessage("null"), true
		}
		return nil, false
	}
}

// number reads an int or a float (underscores allowed between digits)
// as a JSON number.
func (p *pyParser) number() (json.RawMessage, bool) {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-.0123456789_eE", p.s[p.i]) >= 0 {
		if (p.s[p.i] == '+' || p.s[p.i] == '-') && p.i > start && p.s[p.i-1] != 'e' && p.s[p.i-1] != 'E' {
			break
		}
		p.i++
	}
	text := strings.ReplaceAll(p.s[start:p.i], "_", "")
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return json.RawMessage(strconv.FormatInt(i, 10)), true
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, false
	}
	out, err := json.Marshal(f) // ±Inf from an overflow does not marshal
	return out, err == nil
}

// hex reads n hex digits as a rune.
func (p *pyParser) hex(n int) (rune, bool) {
	if p.i+n > len(p.s) {
		return 0, false
	}
	r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += n
	return rune(r), true
}

// str reads a quoted string (single, double or triple quotes) with
// Python's escapes; an unknown escape keeps its backslash, as Python
// does. JSON's escapes read as JSON's (\/ a slash, a \u surrogate pair
// one character), where Python would keep the backslash or the
// surrogates: values written as JSON (the forced grammar's) read back
// as written.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	delim := string(q)
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	p.i += len(delim)
	var b strings.Builder
	for p.i < len(p.s) {
		if strings.HasPrefix(p.s[p.i:], delim) {
			p.i += len(delim)
			return b.String(), true
		}
		c := p.s[p.i]
		if c == '\n' && len(delim) == 1 {
			return "", false
		}
		if c != '\\' {
			b.WriteByte(c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case 'a':
			b.WriteByte('\a')
		case '0':
			b.WriteByte(0)
		case '/': // JSON's escape, which the forced grammar's strings may hold
			b.WriteByte('/')
		case 'x', 'u', 'U':
			r, ok := p.hex(map[byte]int{'x': 2, 'u': 4, 'U': 8}[e])
			if ok && e == 'u' && utf16.IsSurrogate(r) && strings.HasPrefix(p.s[p.i:], "\\u") { // a JSON surrogate pair
				save := p.i
				p.i += 2
				if lo, ok2 := p.hex(4); ok2 {
					if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
						r = pair
					} else {
						p.i = save
					}
				} else {
					p.i = save
				}
			}
			if !ok || !utf8.ValidRune(r) {
				return "", false
			}
			b.WriteRune(r)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false // not closed
}
