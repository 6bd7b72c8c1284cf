package constrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// jvalue is a parsed JSON value that keeps its object keys in order (a
// schema's properties are generated in the order they are written).
type jvalue struct {
	kind  byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys  []string
	vals  []*jvalue // object members, array items
	str   string    // string, or the number's text
	truth bool
	key   string // a number's numberKey, once jsonEqual has computed it
}

// get returns the member named key, or nil.
func (v *jvalue) get(key string) *jvalue {
	if v == nil || v.kind != 'o' {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

// maxJSONDepth bounds a schema's nesting.
const maxJSONDepth = 64

// parseJSON reads one JSON value, keeping key order; duplicate keys and
// trailing data are errors.
func parseJSON(data []byte) (*jvalue, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := readJSON(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

func readJSON(d *json.Decoder, depth int) (*jvalue, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	tok, err := d.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("unexpected end of JSON")
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jvalue{kind: 'o'}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				if v.get(k) != nil {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				val, err := readJSON(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, val)
			}
			_, err := d.Token() // '}'
			return v, err
		case '[':
			v := &jvalue{kind: 'a'}
			for d.More() {
				val, err := readJSON(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.vals = append(v.vals, val)
			}
			_, err := d.Token() // ']'
			return v, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return &jvalue{kind: 's', str: t}, nil
	case json.Number:
		return &jvalue{kind: 'n', str: t.String()}, nil
	case bool:
		return &jvalue{kind: 'b', truth: t}, nil
	case nil:
		return &jvalue{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// encode writes v as compact JSON in its own key order (the one spelling
// of a const or enum value the grammar allows).
func (v *jvalue) encode(buf *bytes.Buffer) {
	switch v.kind {
	case 'o':
		buf.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(quote(k))
			buf.WriteByte(':')
			v.vals[i].encode(buf)
		}
		buf.WriteByte('}')
	case 'a':
		buf.WriteByte('[')
		for i, x := range v.vals {
			if i > 0 {
				buf.WriteByte(',')
			}
			x.encode(buf)
		}
		buf.WriteByte(']')
	case 's':
		buf.WriteString(quote(v.str))
	case 'n':
		buf.WriteString(v.str)
	case 'b':
		buf.WriteString(strconv.FormatBool(v.truth))
	case 'z':
		buf.WriteString("null")
	}
}

// quote is s as a JSON string, without HTML escaping.
func quote(s string) string {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	e.Encode(s)
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}

// integerValue reads v as an integer.
func (v *jvalue) integerValue() (int64, bool) {
	if v == nil || v.kind != 'n' {
		return 0, false
	}
	if n, err := strconv.ParseInt(v.str, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(v.str, 64)
	if err != nil || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}
