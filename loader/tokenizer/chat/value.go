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
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Template values: nil (None), undefined, bool, int64, float64, string,
// *list, *dict, *macro, *loopCtx and *builtin (builtins and bound methods).
// Integers are 64-bit: arithmetic that would overflow is an error, where
// Jinja would switch to a big integer.

type undefined struct{}

type list struct {
	items []any
	busy  bool // being printed, for cycle detection
	tuple bool // a Python tuple: prints as (a, b), is not equal to a list
}

type dict struct {
	keys []string
	m    map[string]any
	busy bool // being printed, for cycle detection
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

// builtin is a global function, a bound method or loop.cycle. It prints as
// its name, never as a Go value.
type builtin struct {
	name   string
	method bool
	f      func(st *state, args []any, kwargs map[string]any) (any, error)
}

func newFn(name string, f func(st *state, args []any, kwargs map[string]any) (any, error)) *builtin {
	return &builtin{name: name, f: f}
}

type macro struct {
	node *macroNode
	// closure scope where the macro was defined
	defScope *scope
}

// loopCtx is the loop variable of a for loop; its fields are computed when
// read, so an iteration allocates one small object.
type loopCtx struct {
	i      int
	items  []any
	shared *loopShared
}

// loopShared is what every iteration's loop object shares: the values
// loop.changed saw last.
type loopShared struct {
	changedSet bool
	changed    []any
}

func (l *loopCtx) attr(name string) any {
	n := int64(len(l.items))
	i := int64(l.i)
	switch name {
	case "index0":
		return i
	case "index":
		return i + 1
	case "revindex0":
		return n - i - 1
	case "revindex":
		return n - i
	case "first":
		return i == 0
	case "last":
		return i == n-1
	case "length":
		return n
	case "previtem":
		if i > 0 {
			return l.items[i-1]
		}
	case "nextitem":
		if i < n-1 {
			return l.items[i+1]
		}
	case "cycle":
		idx := l.i
		return newFn("cycle", func(_ *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("loop.cycle needs arguments")
			}
			return args[idx%len(args)], nil
		})
	case "changed":
		// True on the first call and whenever the arguments differ from
		// the previous call's.
		sh := l.shared
		return newFn("changed", func(st *state, args []any, _ map[string]any) (any, error) {
			if sh == nil {
				return true, nil
			}
			if sh.changedSet {
				same, err := st.equal(&list{items: args, tuple: true}, &list{items: sh.changed, tuple: true}, 0)
				if err != nil || same {
					return false, err
				}
			}
			sh.changedSet, sh.changed = true, args
			return true, nil
		})
	case "depth":
		return int64(1) // no recursive loops
	case "depth0":
		return int64(0)
	}
	return undefined{}
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
	case *loopCtx:
		return "loop"
	case *macro, *builtin:
		return "callable"
	}
	return "object"
}

// scalarStr is Python's str() for every value but lists and dicts.
func scalarStr(v any) string {
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
	case *macro:
		return "<Macro '" + x.node.name + "'>"
	case *builtin:
		if x.method {
			return "<built-in method " + x.name + ">"
		}
		return "<built-in function " + x.name + ">"
	case *loopCtx:
		return fmt.Sprintf("<LoopContext %d/%d>", x.i+1, len(x.items))
	}
	return "<object>"
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

// str is Python's str(v) as Jinja prints values, within the budget: lists
// and dicts print as Python's repr, a container that contains itself
// prints [...] or {...} where it recurs (as Python does), and nesting
// deeper than maxValueDepth is an error.
func (st *state) str(v any) (string, error) {
	switch v.(type) {
	case *list, *dict:
		p := printer{st: st, what: "the printed value"}
		if err := p.repr(v, 0); err != nil {
			return "", err
		}
		return p.b.String(), p.flush()
	case string:
		return v.(string), nil
	}
	s := scalarStr(v)
	return s, st.newStr(int64(len(s)), "a number")
}

// printer builds repr and JSON text, charging every write before it is made.
type printer struct {
	st      *state
	b       strings.Builder
	what    string
	pending int64 // bytes written and not yet charged
}

func (p *printer) grow(n int) error {
	if int64(p.b.Len())+int64(n) > p.st.maxStr {
		return limitf("%s would be over %d bytes (Options.MaxOutputBytes)", p.what, p.st.maxStr)
	}
	p.pending += int64(n)
	if p.pending >= 4096 {
		return p.flush()
	}
	return nil
}

// flush charges what was written since the last flush: a strings.Builder
// allocates up to twice what it holds.
func (p *printer) flush() error {
	n := p.pending
	p.pending = 0
	if err := p.st.charge(2 * n); err != nil {
		return err
	}
	return p.st.spend(n)
}

func (p *printer) write(s string) error {
	if err := p.grow(len(s)); err != nil {
		return err
	}
	p.b.WriteString(s)
	return nil
}

// enter marks a container as being printed; recurring reports that it
// already is (a cycle). Printing never runs template code, so one printer
// at a time marks containers.
func (p *printer) enter(c any, depth int) (recurring bool, err error) {
	if depth >= maxValueDepth {
		return false, limitf("%s: lists and dicts nested deeper than %d", p.what, maxValueDepth)
	}
	n := 0
	switch x := c.(type) {
	case *list:
		if x.busy {
			return true, nil
		}
		x.busy, n = true, len(x.items)
	case *dict:
		if x.busy {
			return true, nil
		}
		x.busy, n = true, len(x.keys)
	}
	return false, p.st.spend(itemCost * int64(n+1))
}

func leave(c any) {
	switch x := c.(type) {
	case *list:
		x.busy = false
	case *dict:
		x.busy = false
	}
}

func (p *printer) repr(v any, depth int) error {
	switch x := v.(type) {
	case string:
		return p.reprString(x)
	case *list:
		rec, err := p.enter(x, depth)
		if err != nil {
			return err
		}
		if rec {
			return p.write("[...]")
		}
		defer leave(x)
		open, end := "[", "]"
		if x.tuple {
			open, end = "(", ")"
			if len(x.items) == 1 {
				end = ",)"
			}
		}
		if err := p.write(open); err != nil {
			return err
		}
		for i, it := range x.items {
			if i > 0 {
				if err := p.write(", "); err != nil {
					return err
				}
			}
			if err := p.repr(it, depth+1); err != nil {
				return err
			}
		}
		return p.write(end)
	case *dict:
		rec, err := p.enter(x, depth)
		if err != nil {
			return err
		}
		if rec {
			return p.write("{...}")
		}
		defer leave(x)
		if err := p.write("{"); err != nil {
			return err
		}
		for i, k := range x.keys {
			if i > 0 {
				if err := p.write(", "); err != nil {
					return err
				}
			}
			if err := p.reprString(k); err != nil {
				return err
			}
			if err := p.write(": "); err != nil {
				return err
			}
			if err := p.repr(x.m[k], depth+1); err != nil {
				return err
			}
		}
		return p.write("}")
	}
	return p.write(scalarStr(v))
}

// reprString writes Python's repr of a string: characters Python does not
// print (controls, format characters, separators other than the space,
// unassigned ones) are \xNN, \uNNNN or \UNNNNNNNN escapes.
func (p *printer) reprString(x string) error {
	q := byte('\'')
	if strings.IndexByte(x, '\'') >= 0 && strings.IndexByte(x, '"') < 0 {
		q = '"'
	}
	esc := func(r rune) string {
		switch {
		case r == '\\':
			return `\\`
		case r == rune(q):
			return `\` + string(q)
		case r == '\n':
			return `\n`
		case r == '\r':
			return `\r`
		case r == '\t':
			return `\t`
		case unicode.IsPrint(r):
			return ""
		case r < 0x100:
			return fmt.Sprintf(`\x%02x`, r)
		case r < 0x10000:
			return fmt.Sprintf(`\u%04x`, r)
		}
		return fmt.Sprintf(`\U%08x`, r)
	}
	n := 2
	for _, r := range x {
		if e := esc(r); e != "" {
			n += len(e)
		} else {
			n += utf8.RuneLen(r)
		}
	}
	if err := p.grow(n); err != nil {
		return err
	}
	p.b.WriteByte(q)
	for _, r := range x {
		if e := esc(r); e != "" {
			p.b.WriteString(e)
		} else {
			p.b.WriteRune(r)
		}
	}
	p.b.WriteByte(q)
	return nil
}

// jsonOptions are json.dumps's: indent ("" with pretty for indent=0),
// the item and key separators, sort_keys and ensure_ascii.
type jsonOptions struct {
	pretty          bool
	indent          string
	itemSep, keySep string
	sortKeys, ascii bool
}

// toJSON writes v like Python's json.dumps with the given options. A
// container that contains itself is an error, as in Python ("Circular
// reference detected").
func (p *printer) toJSON(v any, o *jsonOptions, level int) error {
	nl := func(l int) error {
		if !o.pretty {
			return nil
		}
		size := addSize(1, mulSize(int64(len(o.indent)), int64(l)))
		if err := p.grow(int(min(size, math.MaxInt32))); err != nil {
			return err
		}
		p.b.WriteByte('\n')
		for range l {
			p.b.WriteString(o.indent)
		}
		return nil
	}
	switch x := v.(type) {
	case nil, undefined:
		return p.write("null")
	case bool:
		if x {
			return p.write("true")
		}
		return p.write("false")
	case int64:
		return p.write(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			return p.write("NaN")
		case math.IsInf(x, 1):
			return p.write("Infinity")
		case math.IsInf(x, -1):
			return p.write("-Infinity")
		}
		return p.write(pyFloat(x))
	case string:
		return p.jsonString(x, o.ascii)
	case *list:
		if len(x.items) == 0 {
			return p.write("[]")
		}
		rec, err := p.enter(x, level)
		if err != nil {
			return err
		}
		if rec {
			return fmt.Errorf("tojson: circular reference detected (a list contains itself)")
		}
		defer leave(x)
		if err := p.write("["); err != nil {
			return err
		}
		for i, it := range x.items {
			if i > 0 {
				if err := p.write(o.itemSep); err != nil {
					return err
				}
			}
			if err := nl(level + 1); err != nil {
				return err
			}
			if err := p.toJSON(it, o, level+1); err != nil {
				return err
			}
		}
		if err := nl(level); err != nil {
			return err
		}
		return p.write("]")
	case *dict:
		if len(x.keys) == 0 {
			return p.write("{}")
		}
		rec, err := p.enter(x, level)
		if err != nil {
			return err
		}
		if rec {
			return fmt.Errorf("tojson: circular reference detected (a dict contains itself)")
		}
		defer leave(x)
		keys := x.keys
		if o.sortKeys {
			if err := p.st.newList(int64(len(keys)), "tojson's sorted keys"); err != nil {
				return err
			}
			if err := p.st.spend(itemCost * sortCost(len(keys))); err != nil {
				return err
			}
			keys = append([]string(nil), keys...)
			sort.Strings(keys) // byte order is code point order, as Python sorts
		}
		if err := p.write("{"); err != nil {
			return err
		}
		for i, k := range keys {
			if i > 0 {
				if err := p.write(o.itemSep); err != nil {
					return err
				}
			}
			if err := nl(level + 1); err != nil {
				return err
			}
			if err := p.jsonString(k, o.ascii); err != nil {
				return err
			}
			if err := p.write(o.keySep); err != nil {
				return err
			}
			if err := p.toJSON(x.m[k], o, level+1); err != nil {
				return err
			}
		}
		if err := nl(level); err != nil {
			return err
		}
		return p.write("}")
	}
	return fmt.Errorf("tojson: cannot serialize %s", typeName(v))
}

// jsonEscape is json.dumps's escape of r ("" when it is written as it is);
// with ascii (ensure_ascii=True) every character outside ' '..'~' is a
// \uXXXX escape, a surrogate pair beyond the BMP.
func jsonEscape(r rune, ascii bool) string {
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
	if r < 0x20 || ascii && r >= 0x7f {
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			return fmt.Sprintf(`\u%04x\u%04x`, r1, r2)
		}
		return fmt.Sprintf(`\u%04x`, r)
	}
	return ""
}

func (p *printer) jsonString(s string, ascii bool) error {
	n := 2
	for _, r := range s {
		if e := jsonEscape(r, ascii); e != "" {
			n += len(e)
		} else {
			n += utf8.RuneLen(r)
		}
	}
	if err := p.grow(n); err != nil {
		return err
	}
	p.b.WriteByte('"')
	for _, r := range s {
		if e := jsonEscape(r, ascii); e != "" {
			p.b.WriteString(e)
		} else {
			p.b.WriteRune(r)
		}
	}
	p.b.WriteByte('"')
	return nil
}

// sortCost is the work charged for sorting n items (n log2 n comparisons).
func sortCost(n int) int64 {
	c := int64(1)
	for m := n; m > 1; m >>= 1 {
		c++
	}
	return mulSize(int64(n), c)
}

// keyOf is the dict key for v: strings as they are, other scalars as
// Python's str() (dict keys are strings here). Lists, dicts and callables
// are unhashable, as in Python.
func keyOf(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case nil, undefined, bool, int64, float64:
		return scalarStr(x), nil
	}
	return "", fmt.Errorf("unhashable type: '%s'", typeName(v))
}

// fromGo converts input data to template values. json.RawMessage keeps the
// key order of JSON objects (tool schemas); Go maps are sorted by key.
func fromGo(v any) (any, error) { return fromGoDepth(v, 0) }

func fromGoDepth(v any, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("value nested deeper than %d (or it contains itself)", maxValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return nil, nil
	case undefined, *list, *dict, *builtin:
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
			c, err := fromGoDepth(it, depth+1)
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
			c, err := fromGoDepth(x[k], depth+1)
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
