package serve

import (
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
// quotes (with a u or r prefix or none) with Python's escapes, an int or
// a float, True, False, None, a list, a tuple or a dict of them. The
// arguments become a JSON object (a tuple an array, a dict's keys
// strings). A block that holds JSON instead (a list of {"name",
// "arguments"} objects, which LFM2 writes when its system prompt asks for
// JSON calls) is read as such. The block ends where the list does: an end
// marker inside a string is the string's. A call with a positional
// argument, an expression, or text that is not such a list, is not a
// call: the answer is then content, unchanged.

const (
	pythonicOpen  = "<|tool_call_start|>"
	pythonicClose = "<|tool_call_end|>"
	// pythonicDepth bounds the nesting of a literal.
	pythonicDepth = 32
)

// pythonicBlocks parses every block of text (from the first open marker
// on) into its calls; ok is false when a block is not a list of calls,
// or the list is followed by something other than the end marker or the
// end of the text.
func pythonicBlocks(text string) (names []string, args []json.RawMessage, ok bool) {
	for len(names) < maxToolCalls {
		i := strings.Index(text, pythonicOpen)
		if i < 0 {
			break
		}
		text = text[i+len(pythonicOpen):]
		n, a, used, parsed := pythonicCalls(text)
		if !parsed {
			return nil, nil, false
		}
		names, args = append(names, n...), append(args, a...)
		text = strings.TrimLeft(text[used:], " \t\r\n")
		if rest, closed := strings.CutPrefix(text, pythonicClose); closed {
			text = rest
		} else if text != "" {
			return nil, nil, false
		}
	}
	return names, args, len(names) > 0
}

// pythonicCalls parses the list of calls at the start of body into each
// name with its arguments as a JSON object, and the length of body the
// list takes; ok is false when body does not start with a list of calls.
func pythonicCalls(body string) (names []string, args []json.RawMessage, used int, ok bool) {
	p := &pyParser{s: body}
	p.space()
	start := p.i
	bracketed := p.take('[')
	if p.take('{') { // JSON calls: one object, or a list of them
		dec := json.NewDecoder(strings.NewReader(body[start:]))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, nil, 0, false
		}
		var list []map[string]json.RawMessage
		if !bracketed {
			list = make([]map[string]json.RawMessage, 1)
			if json.Unmarshal(raw, &list[0]) != nil {
				return nil, nil, 0, false
			}
		} else if json.Unmarshal(raw, &list) != nil {
			return nil, nil, 0, false
		}
		for _, c := range list {
			var name string
			if json.Unmarshal(c["name"], &name) != nil || name == "" {
				return nil, nil, 0, false
			}
			a := c["arguments"]
			if a == nil {
				a = c["parameters"]
			}
			names, args = append(names, name), append(args, a)
		}
		return names, args, start + int(dec.InputOffset()), len(names) > 0
	}
	for len(names) < maxToolCalls {
		p.space()
		if bracketed && p.peek() == ']' {
			break
		}
		name, a, ok := p.call()
		if !ok {
			return nil, nil, 0, false
		}
		names, args = append(names, name), append(args, a)
		if !p.take(',') {
			break
		}
	}
	if bracketed && !p.take(']') {
		return nil, nil, 0, false
	}
	return names, args, p.i, len(names) > 0
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

// ident reads a name: a letter or '_' (or any non-ASCII character), then
// letters, digits, '_', '.' and '-' (tool names allow '-'; a dotted name
// is a namespace).
func (p *pyParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		letter := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf
		if letter || p.i > start && (c == '.' || c == '-' || '0' <= c && c <= '9') {
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
		if p.take(')') {
			return name, jsonObject(pairs), true
		}
		p.space()
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
	c := p.peek()
	switch {
	case c == '"' || c == '\'':
		s, ok := p.str(false)
		return jsonString(s), ok
	case (c == 'u' || c == 'U' || c == 'r' || c == 'R') && p.i+1 < len(p.s) && (p.s[p.i+1] == '"' || p.s[p.i+1] == '\''):
		p.i++
		s, ok := p.str(c == 'r' || c == 'R')
		return jsonString(s), ok
	case c == '[':
		p.i++
		return p.items(']', depth)
	case c == '(':
		// (x) is x; (x,) and () are tuples.
		p.i++
		if p.take(')') {
			return json.RawMessage("[]"), true
		}
		first, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		if p.take(')') {
			return first, true
		}
		if !p.take(',') {
			return nil, false
		}
		rest, ok := p.items(')', depth)
		if !ok {
			return nil, false
		}
		if string(rest) == "[]" {
			return append(append(json.RawMessage("["), first...), ']'), true
		}
		return append(append(append(json.RawMessage("["), first...), ','), rest[1:]...), true
	case c == '{':
		p.i++
		var pairs [][2]string
		for len(pairs) < maxToolArgs {
			if p.take('}') {
				return jsonObject(pairs), true
			}
			k, ok := p.value(depth + 1)
			if !ok || !p.take(':') {
				return nil, false
			}
			var key string
			if json.Unmarshal(k, &key) != nil { // a number, True, None: its JSON text
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
		return nil, false
	case c == '-' || c == '+' || c == '.' || '0' <= c && c <= '9':
		return p.number()
	}
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

// items reads a list's or a tuple's values up to closer (its opener
// read) as a JSON array; a trailing comma is allowed.
func (p *pyParser) items(closer byte, depth int) (json.RawMessage, bool) {
	b := []byte{'['}
	for n := 0; n < maxToolArgs; n++ {
		if p.take(closer) {
			return append(b, ']'), true
		}
		if n > 0 {
			b = append(b, ',')
		}
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		b = append(b, v...)
		if !p.take(',') {
			if p.take(closer) {
				return append(b, ']'), true
			}
			return nil, false
		}
	}
	return nil, false
}

// number reads an int or a float (underscores allowed between digits)
// as a JSON number; an int's digits are kept whatever its size.
func (p *pyParser) number() (json.RawMessage, bool) {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-.0123456789_eE", p.s[p.i]) >= 0 {
		if (p.s[p.i] == '+' || p.s[p.i] == '-') && p.i > start && p.s[p.i-1] != 'e' && p.s[p.i-1] != 'E' {
			break
		}
		p.i++
	}
	text := strings.ReplaceAll(p.s[start:p.i], "_", "")
	sign, digits := "", strings.TrimPrefix(text, "+")
	if d, neg := strings.CutPrefix(digits, "-"); neg {
		sign, digits = "-", d
	}
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		if digits = strings.TrimLeft(digits, "0"); digits == "" {
			digits, sign = "0", ""
		}
		return json.RawMessage(sign + digits), true
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
// Python's escapes, or none when raw (an r prefix: a backslash and the
// character after it are kept, and the quote after a backslash does not
// end the string); an unknown escape keeps its backslash, as Python
// does. JSON's escapes read as JSON's (\/ a slash, a \u surrogate pair
// one character), where Python would keep the backslash or the
// surrogates: values written as JSON (the forced grammar's) read back as
// written. A lone surrogate reads as U+FFFD, as encoding/json reads it.
func (p *pyParser) str(raw bool) (string, bool) {
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
		if raw {
			b.WriteByte('\\')
			b.WriteByte(e)
			continue
		}
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '/': // JSON's escape, which the forced grammar's strings may hold
			b.WriteByte('/')
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
		case '0', '1', '2', '3', '4', '5', '6', '7': // up to three octal digits
			r := rune(e - '0')
			for k := 0; k < 2 && p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '7'; k++ {
				r = r*8 + rune(p.s[p.i]-'0')
				p.i++
			}
			b.WriteRune(r)
		case 'x', 'u', 'U':
			n := 2
			switch e {
			case 'u':
				n = 4
			case 'U':
				n = 8
			}
			r, ok := p.hex(n)
			if !ok || r > utf8.MaxRune {
				return "", false
			}
			if e == 'u' && utf16.IsSurrogate(r) {
				r = p.lowSurrogate(r)
			}
			b.WriteRune(r) // a lone surrogate writes U+FFFD
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false // not closed
}

// lowSurrogate joins the high surrogate hi to a \u low surrogate that
// follows it (consumed), or gives U+FFFD.
func (p *pyParser) lowSurrogate(hi rune) rune {
	if !strings.HasPrefix(p.s[p.i:], `\u`) {
		return utf8.RuneError
	}
	save := p.i
	p.i += 2
	if lo, ok := p.hex(4); ok {
		if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
			return r
		}
	}
	p.i = save
	return utf8.RuneError
}
