package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Template values: nil (None), undefined, bool, int64, float64, string,
// *list, *dict, *macro and fn (builtins and bound methods).

type undefined struct{}

type list struct{ items []any }

type dict struct {
	keys []string
	m    map[string]any
}

func newDict() *dict { return &dict{m: map[string]any{}} }

func (d *dict) set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

func (d *dict) get(k string) (any, bool) {
	v, ok := d.m[k]
	return v, ok
}

type fn func(st *state, args []any, kwargs map[string]any) (any, error)

type macro struct {
	node *macroNode
	// closure scope where the macro was defined
	defScope *scope
}

func isUndef(v any) bool { _, ok := v.(undefined); return ok }

func truthy(v any) bool {
	switch x := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *list:
		return len(x.items) > 0
	case *dict:
		return len(x.keys) > 0
	}
	return true
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "none"
	case undefined:
		return "undefined"
	case bool:
		return "boolean"
	case int64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "string"
	case *list:
		return "list"
	case *dict:
		return "dict"
	case *macro, fn:
		return "callable"
	}
	return fmt.Sprintf("%T", v)
}

// toStr is Python's str() as Jinja prints values.
func toStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case undefined:
		return ""
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return pyFloat(x)
	case *list, *dict:
		return pyRepr(v)
	case *macro:
		return "<macro " + x.node.name + ">"
	}
	return fmt.Sprint(v)
}

func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if strings.Contains(s, "e") {
		// Python writes 1e+20 and 1e-05.
		mant, exp, _ := strings.Cut(s, "e")
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mant + "e" + string(sign) + digits
	}
	return s
}

func pyRepr(v any) string {
	switch x := v.(type) {
	case string:
		q := "'"
		if strings.Contains(x, "'") && !strings.Contains(x, "\"") {
			q = "\""
		}
		var b strings.Builder
		b.WriteString(q)
		for _, r := range x {
			switch {
			case r == '\\':
				b.WriteString(`\\`)
			case string(r) == q:
				b.WriteString(`\` + q)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, `\x%02x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString(q)
		return b.String()
	case *list:
		parts := make([]string, len(x.items))
		for i, it := range x.items {
			parts[i] = pyRepr(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *dict:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = pyRepr(k) + ": " + pyRepr(x.m[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return toStr(v)
}

// toJSON writes v like Python's json.dumps(v, ensure_ascii=False) with the
// given indent (<0: none) and separators.
func toJSON(b *strings.Builder, v any, indent int, level int, sortKeys bool) error {
	nl := func(l int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*l))
		}
	}
	itemSep := ", "
	if indent >= 0 {
		itemSep = ","
	}
	switch x := v.(type) {
	case nil, undefined:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			b.WriteString(map[bool]string{true: "Infinity", false: "NaN"}[math.IsInf(x, 0)])
			return nil
		}
		b.WriteString(pyFloat(x))
	case string:
		writeJSONString(b, x)
	case *list:
		if len(x.items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range x.items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(level + 1)
			if err := toJSON(b, it, indent, level+1, sortKeys); err != nil {
				return err
			}
		}
		nl(level)
		b.WriteByte(']')
	case *dict:
		if len(x.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(level + 1)
			writeJSONString(b, k)
			b.WriteString(": ")
			if err := toJSON(b, x.m[k], indent, level+1, sortKeys); err != nil {
				return err
			}
		}
		nl(level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot serialize %s", typeName(v))
	}
	return nil
}

func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// fromGo converts input data to template values. json.RawMessage keeps the
// key order of JSON objects (tool schemas); Go maps are sorted by key.
func fromGo(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case undefined, *list, *dict, fn:
		return x, nil
	case string:
		return x, nil
	case bool:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		return f, err
	case json.RawMessage:
		return decodeOrderedJSON(x)
	case []byte:
		return string(x), nil
	case []any:
		l := &list{items: make([]any, 0, len(x))}
		for _, it := range x {
			c, err := fromGo(it)
			if err != nil {
				return nil, err
			}
			l.items = append(l.items, c)
		}
		return l, nil
	case []string:
		l := &list{}
		for _, it := range x {
			l.items = append(l.items, it)
		}
		return l, nil
	case map[string]any:
		d := newDict()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c, err := fromGo(x[k])
			if err != nil {
				return nil, err
			}
			d.set(k, c)
		}
		return d, nil
	}
	// Anything else (structs, typed slices/maps): through JSON.
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", v, err)
	}
	return decodeOrderedJSON(data)
}

func decodeOrderedJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrdered(dec, 0)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func decodeOrdered(dec *json.Decoder, depth int) (any, error) {
	if depth > 100 {
		return nil, fmt.Errorf("JSON nested deeper than 100")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '[':
			l := &list{}
			for dec.More() {
				v, err := decodeOrdered(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, v)
			}
			_, err := dec.Token()
			return l, err
		case '{':
			d := newDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeOrdered(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.set(k, v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		return fromGo(x)
	case string, bool, nil:
		return x, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", t)
}
