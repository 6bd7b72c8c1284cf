package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Fast paths for the two big arrays of a tokenizer.json, the BPE vocabulary
// ({"token": id, ...}) and the merges (["a b", ...] or [["a", "b"], ...]):
// encoding/json spends seconds on them for 150k-500k entries. Anything the
// scanner does not expect makes it give up, and the caller falls back to
// encoding/json, so the fast path never changes what is accepted.

var errFastPath = errors.New("fast path not applicable")

type jscan struct {
	b   []byte
	i   int
	buf []byte
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a JSON string; the result aliases s.buf only until the next call
// when escapes were present.
func (s *jscan) str() (string, error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", errFastPath
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			out := string(s.b[start:s.i])
			s.i++
			if !utf8.ValidString(out) {
				return "", errFastPath
			}
			return out, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", errFastPath
		}
		s.i++
	}
	s.buf = append(s.buf[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(s.buf) {
				return "", errFastPath
			}
			return string(s.buf), nil
		case c < 0x20:
			return "", errFastPath
		case c != '\\':
			s.buf = append(s.buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", errFastPath
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", errFastPath
			}
			if utf16.IsSurrogate(r) {
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					r2, ok := s.hex4()
					if !ok {
						return "", errFastPath
					}
					r = utf16.DecodeRune(r, r2)
				} else {
					r = utf8.RuneError
				}
				if r == utf8.RuneError {
					return "", errFastPath // let encoding/json decide
				}
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			return "", errFastPath
		}
	}
	return "", errFastPath
}

func (s *jscan) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

func (s *jscan) uint() (int, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start || s.i-start > 9 {
		return 0, errFastPath
	}
	n, err := strconv.Atoi(string(s.b[start:s.i]))
	if err != nil {
		return 0, errFastPath
	}
	return n, nil
}

func (s *jscan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// fastVocab parses {"token": id, ...}. Duplicate keys keep the last id, as
// encoding/json does.
func fastVocab(raw []byte) (map[string]int, error) {
	s := &jscan{b: raw}
	if !s.consume('{') {
		return nil, errFastPath
	}
	m := make(map[string]int, len(raw)/16)
	if s.consume('}') {
		return m, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if !s.consume(':') {
			return nil, errFastPath
		}
		v, err := s.uint()
		if err != nil {
			return nil, err
		}
		m[k] = v
		if len(m) > maxVocab {
			return nil, errFastPath
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') && s.end() {
			return m, nil
		}
		return nil, errFastPath
	}
}

// fastMerges parses ["a b", ...] or [["a", "b"], ...] into pairs. A string
// merge without a space is left to the slow path, which reports it.
func fastMerges(raw []byte) ([][2]string, error) {
	s := &jscan{b: raw}
	if !s.consume('[') {
		return nil, errFastPath
	}
	out := make([][2]string, 0, len(raw)/12)
	if s.consume(']') {
		return out, nil
	}
	for {
		var pair [2]string
		if s.consume('[') {
			a, err := s.str()
			if err != nil {
				return nil, err
			}
			if !s.consume(',') {
				return nil, errFastPath
			}
			b, err := s.str()
			if err != nil {
				return nil, err
			}
			if !s.consume(']') {
				return nil, errFastPath
			}
			pair = [2]string{a, b}
		} else {
			str, err := s.str()
			if err != nil {
				return nil, err
			}
			sp := -1
			for i := 0; i < len(str); i++ {
				if str[i] == ' ' {
					sp = i
					break
				}
			}
			if sp < 0 {
				return nil, errFastPath
			}
			pair = [2]string{str[:sp], str[sp+1:]}
		}
		out = append(out, pair)
		if len(out) > maxMerges {
			return nil, errFastPath
		}
		if s.consume(',') {
			continue
		}
		if s.consume(']') && s.end() {
			return out, nil
		}
		return nil, errFastPath
	}
}

// slowMerges is the encoding/json path with precise errors.
func slowMerges(raw json.RawMessage, where string) ([][2]string, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errorf("%s: %w", where, err)
	}
	if len(list) > maxMerges {
		return nil, errorf("%s: %d merges, more than the limit %d", where, len(list), maxMerges)
	}
	out := make([][2]string, len(list))
	for i, r := range list {
		a, b, err := parseMerge(r)
		if err != nil {
			return nil, errorf("%s[%d]: %w", where, i, err)
		}
		out[i] = [2]string{a, b}
	}
	return out, nil
}

var errorf = fmt.Errorf

// skipValue advances over one JSON value without decoding it.
func (s *jscan) skipValue() error {
	s.ws()
	if s.i >= len(s.b) {
		return errFastPath
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if err := s.skipString(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
				if depth > 1000 {
					return errFastPath
				}
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return errFastPath
	default:
		start := s.i
		for s.i < len(s.b) {
			c := s.b[s.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			s.i++
		}
		if !json.Valid(s.b[start:s.i]) {
			return errFastPath
		}
		return nil
	}
}

func (s *jscan) skipString() error {
	s.i++ // opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return nil
		}
		s.i++
	}
	return errFastPath
}

// objectFields splits a JSON object into its raw fields without decoding
// the values (the model's vocabulary and merges are most of the file).
// Duplicate keys keep the last value, like encoding/json.
func objectFields(raw []byte) (map[string]json.RawMessage, error) {
	s := &jscan{b: raw}
	if !s.consume('{') {
		return nil, errFastPath
	}
	m := map[string]json.RawMessage{}
	if s.consume('}') {
		if !s.end() {
			return nil, errFastPath
		}
		return m, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if !s.consume(':') {
			return nil, errFastPath
		}
		s.ws()
		start := s.i
		if err := s.skipValue(); err != nil {
			return nil, err
		}
		m[k] = json.RawMessage(s.b[start:s.i])
		if s.consume(',') {
			continue
		}
		if s.consume('}') && s.end() {
			return m, nil
		}
		return nil, errFastPath
	}
}
