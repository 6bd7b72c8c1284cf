package constrain

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// JSONSchema compiles a JSON schema into the grammar of the JSON texts
// that validate against it (with the bounded whitespace of ws around
// them: a model may open with a newline or end with one). Object properties are generated in the
// schema's order (the required ones always, the optional ones when the
// model writes them); a keyword the grammar cannot enforce is an error
// naming it and where it is, never ignored. Supported: type (one or a
// list), properties, required, additionalProperties (false, or a schema
// for the values of a free-form object), items, prefixItems, minItems,
// maxItems, enum, const (both: the values in both), anyOf, oneOf (of
// branches of distinct types), allOf (of one schema), $ref (#,
// #/$defs/..., #/definitions/...; recursive; $id only at the root),
// nullable, minLength, maxLength, pattern (ECMA-262, regex.go), minimum
// and maximum (integers; numbers between integer bounds), format (date
// with 29 February in leap years only, time, date-time, uuid), and the
// annotations (title, description, default, examples, ...), which are
// ignored.
func JSONSchema(schema []byte) (*Grammar, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("the schema is not valid JSON: %v", err)
	}
	c := newSchemaCompiler(root)
	c.ws()
	if err := c.value(root, "#"); err != nil {
		return nil, err
	}
	c.ws()
	return c.finish("the JSON schema")
}

// AnyJSON is the grammar of any JSON value; objectOnly limits the top
// level to an object (OpenAI's response_format json_object).
func AnyJSON(objectOnly bool) *Grammar {
	c := newSchemaCompiler(nil)
	c.ws()
	if objectOnly {
		c.anyObject()
	} else {
		c.anyValue()
	}
	c.ws()
	g, err := c.finish("JSON")
	if err != nil {
		panic(err) // a fixed grammar: cannot fail
	}
	return g
}

// newSchemaCompiler starts a grammar whose schema is root (nil where the
// caller sets c.root per part, as a tool call's arguments do).
func newSchemaCompiler(root *jvalue) *schemaCompiler {
	return &schemaCompiler{b: newBuilder(), root: root, subs: map[*jvalue]*sub{}}
}

// finish ends the grammar (a match), emits the subgrammars its schemas
// refer to and builds it, named name in errors.
func (c *schemaCompiler) finish(name string) (*Grammar, error) {
	c.b.emit(inst{op: opMatch})
	if err := c.emitSubs(); err != nil {
		return nil, err
	}
	return c.b.grammar(0, name)
}

type schemaCompiler struct {
	b    *builder
	root *jvalue
	subs map[*jvalue]*sub // subroutines by schema (nil: any value)
	any  *sub
	todo []*sub
	// xml is the markup of the XML-like tool calls XMLCallsIn compiles.
	xml XMLMarkup
}

// sub is a schema compiled out of line, entered by calls (recursion, and
// repeated items).
type sub struct {
	schema *jvalue
	root   *jvalue // the schema its $refs resolve in
	path   string
	entry  int32
	calls  []int32 // call instructions to patch
	done   bool
}

// call emits a call to the subroutine of schema (nil: any value).
func (c *schemaCompiler) call(schema *jvalue, path string) {
	var s *sub
	if schema == nil {
		if c.any == nil {
			c.any = &sub{}
			c.todo = append(c.todo, c.any)
		}
		s = c.any
	} else if s = c.subs[schema]; s == nil {
		s = &sub{schema: schema, root: c.root, path: path}
		c.subs[schema] = s
		c.todo = append(c.todo, s)
	}
	s.calls = append(s.calls, c.b.emit(inst{op: opCall}))
}

// emitSubs emits every subroutine called (and those they call).
func (c *schemaCompiler) emitSubs() error {
	for i := 0; i < len(c.todo); i++ {
		s := c.todo[i]
		s.entry = c.b.pc()
		c.root = s.root
		if s == c.any {
			c.anyValueBody()
		} else if err := c.value(s.schema, s.path); err != nil {
			return err
		}
		c.b.emit(inst{op: opRet})
	}
	for _, s := range c.todo {
		for _, pc := range s.calls {
			if int(pc) < len(c.b.prog) {
				c.b.prog[pc].x = s.entry
			}
		}
	}
	return c.b.err
}

// annotations are keywords that do not constrain the text.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "discriminator": true, "strict": true, "$anchor": true,
}

// keywordsOf lists the constraining keywords each type takes.
var keywordsOf = map[string][]string{
	"string":  {"minLength", "maxLength", "format", "pattern"},
	"integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
	"number":  {"minimum", "maximum"},
	"object":  {"properties", "required", "additionalProperties"},
	"array":   {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"},
	"boolean": nil,
	"null":    nil,
}

// generic keywords, handled before the type.
var generic = []string{"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable"}

// value emits the grammar of schema v (at path, for errors).
func (c *schemaCompiler) value(v *jvalue, path string) error {
	switch v.kind {
	case 'b':
		if !v.truth {
			return fmt.Errorf("%s: the schema false accepts nothing", path)
		}
		c.anyValue()
		return nil
	case 'o':
	default:
		return fmt.Errorf("%s: a schema must be an object or a boolean", path)
	}
	// $id below the root would move the base its #/... references
	// resolve against.
	if id := v.get("$id"); id != nil && v != c.root {
		return fmt.Errorf("%s: $id below the schema's root cannot be enforced (its references would resolve against it)", path)
	}
	// Every keyword must be known: enforced, an annotation, or one of
	// another type's (which JSON Schema ignores for this type).
	for _, k := range v.keys {
		if annotations[k] || slices.Contains(generic, k) {
			continue
		}
		known := false
		for _, kws := range keywordsOf {
			known = known || slices.Contains(kws, k)
		}
		if !known {
			return fmt.Errorf("%s: keyword %q cannot be enforced by constrained decoding", path, k)
		}
	}
	if n := v.get("nullable"); n != nil && n.kind == 'b' && n.truth {
		var err error
		c.b.alt(func() { c.b.lit("null") }, func() { err = c.value(without(v, "nullable", "$id"), path) })
		return err
	}
	if r := v.get("$ref"); r != nil {
		if others := constraining(v, "$ref"); len(others) > 0 {
			return fmt.Errorf("%s: $ref beside %s cannot be enforced (only annotations may sit beside $ref)", path, strings.Join(others, ", "))
		}
		target, err := c.resolve(r, path)
		if err != nil {
			return err
		}
		c.call(target, r.str)
		return nil
	}
	if e, k := v.get("const"), "const"; e != nil || v.get("enum") != nil {
		vals := []*jvalue{e}
		if en := v.get("enum"); en != nil {
			if en.kind != 'a' || len(en.vals) == 0 {
				return fmt.Errorf("%s.enum: expected a non-empty array", path)
			}
			if e == nil {
				vals, k = en.vals, "enum"
			} else if !slices.ContainsFunc(en.vals, func(x *jvalue) bool { return jsonEqual(x, e) }) {
				return fmt.Errorf("%s: the const is not among the enum's values: the schema cannot be satisfied", path)
			}
		}
		if others := constraining(v, "enum", "const", "type"); len(others) > 0 {
			return fmt.Errorf("%s: %s beside %s cannot be enforced", path, k, strings.Join(others, ", "))
		}
		if v.get("type") != nil { // only the values of the type
			types, err := typesOf(v, path)
			if err != nil {
				return err
			}
			vals = slices.DeleteFunc(slices.Clone(vals), func(x *jvalue) bool {
				return !slices.Contains(types, jsonType(x)) && !(jsonType(x) == "integer" && slices.Contains(types, "number"))
			})
			if len(vals) == 0 {
				return fmt.Errorf("%s: no value of the %s has the type %s", path, k, strings.Join(types, " or "))
			}
		}
		c.literals(vals)
		return nil
	}
	for _, comb := range []string{"anyOf", "oneOf", "allOf"} {
		if e := v.get(comb); e != nil {
			return c.combinator(v, comb, e, path)
		}
	}
	types, err := typesOf(v, path)
	if err != nil {
		return err
	}
	var frags []func()
	for _, t := range types {
		t := t
		frags = append(frags, func() {
			if err == nil {
				err = c.typed(v, t, path)
			}
		})
	}
	c.b.alt(frags...)
	return err
}

// jsonEqual reports whether a and b are the same JSON value (numbers by
// value, objects whatever their key order), as const and enum compare.
func jsonEqual(a, b *jvalue) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case 'n':
		for _, x := range []*jvalue{a, b} {
			if x.key == "" { // once per value: a const is compared with every enum value
				x.key = numberKey(x.str)
			}
		}
		return a.key == b.key
	case 's':
		return a.str == b.str
	case 'b':
		return a.truth == b.truth
	case 'a':
		return slices.EqualFunc(a.vals, b.vals, jsonEqual)
	case 'o':
		if len(a.keys) != len(b.keys) {
			return false
		}
		for i, k := range a.keys {
			if y := b.get(k); y == nil || !jsonEqual(a.vals[i], y) {
				return false
			}
		}
	}
	return true
}

// numberKey spells the JSON number s so that equal values spell the
// same (1, 1.0, 10e-1, 0.1e1; 0 and -0): its sign, its significant digits
// and its exponent. It is linear in s, where big.Rat would expand an
// exponent such as 1e-999999 into a million digits (a second each, over
// every value of a hostile enum).
func numberKey(s string) string {
	sign := ""
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		sign, s = "-", rest
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(expText)
		if err != nil || e > 1<<40 || e < -1<<40 {
			return "text " + sign + s // beyond any range: equal to its own text only
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	all := whole + frac
	digits := strings.TrimLeft(all, "0")
	// The value is 0.DIGITS × 10^exp, DIGITS without its leading zeros.
	exp += len(whole) - (len(all) - len(digits))
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return "0"
	}
	return sign + digits + "e" + strconv.Itoa(exp)
}

// jsonType is the JSON Schema type of a value (integer for a number
// without a fraction).
func jsonType(x *jvalue) string {
	switch x.kind {
	case 'o':
		return "object"
	case 'a':
		return "array"
	case 's':
		return "string"
	case 'b':
		return "boolean"
	case 'z':
		return "null"
	}
	if _, ok := x.integerValue(); ok {
		return "integer"
	}
	return "number"
}

// constraining lists v's keywords other than annotations and skip.
func constraining(v *jvalue, skip ...string) []string {
	var out []string
	for _, k := range v.keys {
		if !annotations[k] && !slices.Contains(skip, k) {
			out = append(out, k)
		}
	}
	return out
}

// without returns v less the keywords ks.
func without(v *jvalue, ks ...string) *jvalue {
	out := &jvalue{kind: 'o'}
	for i, key := range v.keys {
		if !slices.Contains(ks, key) {
			out.keys = append(out.keys, key)
			out.vals = append(out.vals, v.vals[i])
		}
	}
	return out
}

// typesOf reads v's type: a name, a list, or (absent) the type its
// keywords imply, or every type. Numeric keywords imply number, but
// exclusiveMinimum and exclusiveMaximum, which only an integer's grammar
// enforces, imply integer.
func typesOf(v *jvalue, path string) ([]string, error) {
	t := v.get("type")
	if t == nil {
		var implied []string
		for _, name := range []string{"object", "array", "string", "integer"} {
			for _, k := range keywordsOf[name] {
				if v.get(k) != nil && !slices.Contains(implied, name) {
					implied = append(implied, name)
				}
			}
		}
		if i := slices.Index(implied, "integer"); i >= 0 && v.get("exclusiveMinimum") == nil && v.get("exclusiveMaximum") == nil {
			implied[i] = "number"
		}
		if len(implied) == 0 {
			return []string{"any"}, nil
		}
		if len(implied) > 1 {
			return nil, fmt.Errorf("%s: no type, and keywords of several types (%s): give the type", path, strings.Join(implied, ", "))
		}
		return implied, nil
	}
	var names []string
	switch t.kind {
	case 's':
		names = []string{t.str}
	case 'a':
		if len(t.vals) == 0 {
			return nil, fmt.Errorf("%s.type: an empty list of types accepts nothing", path)
		}
		for _, x := range t.vals {
			if x.kind != 's' {
				return nil, fmt.Errorf("%s.type: expected a type name or a list of them", path)
			}
			if !slices.Contains(names, x.str) {
				names = append(names, x.str)
			}
		}
	default:
		return nil, fmt.Errorf("%s.type: expected a type name or a list of them", path)
	}
	for _, n := range names {
		if _, ok := keywordsOf[n]; !ok {
			return nil, fmt.Errorf("%s.type: unknown type %q", path, n)
		}
	}
	if slices.Contains(names, "number") && slices.Contains(names, "integer") {
		names = slices.DeleteFunc(names, func(s string) bool { return s == "integer" })
	}
	return names, nil
}

// resolve finds the schema a $ref names.
func (c *schemaCompiler) resolve(r *jvalue, path string) (*jvalue, error) {
	if r.kind != 's' {
		return nil, fmt.Errorf("%s.$ref: expected a string", path)
	}
	if r.str == "#" {
		return c.root, nil
	}
	rest, ok := strings.CutPrefix(r.str, "#/")
	if !ok {
		return nil, fmt.Errorf("%s.$ref: %q: only references inside the schema (#/...) are supported", path, r.str)
	}
	cur := c.root
	for _, part := range strings.Split(rest, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		next := cur.get(part)
		if next == nil && cur != nil && cur.kind == 'a' {
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(cur.vals) {
				next = cur.vals[i]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("%s.$ref: %q does not resolve", path, r.str)
		}
		if id := cur.get("$id"); cur != c.root && id != nil && id.kind == 's' {
			return nil, fmt.Errorf("%s.$ref: %q passes through a subschema with $id, which cannot be enforced (only the root may have one)", path, r.str)
		}
		cur = next
	}
	return cur, nil
}

// combinator emits anyOf, oneOf or allOf.
func (c *schemaCompiler) combinator(v *jvalue, name string, e *jvalue, path string) error {
	p := path + "." + name
	if e.kind != 'a' || len(e.vals) == 0 {
		return fmt.Errorf("%s: expected a non-empty array of schemas", p)
	}
	if others := constraining(v, name); len(others) > 0 {
		return fmt.Errorf("%s: %s beside %s cannot be enforced", path, name, strings.Join(others, ", "))
	}
	switch name {
	case "allOf":
		if len(e.vals) != 1 {
			return fmt.Errorf("%s: allOf of %d schemas cannot be enforced (one can)", path, len(e.vals))
		}
		return c.value(e.vals[0], p+"[0]")
	case "oneOf":
		// Exactly one branch must match: enforceable when the branches'
		// types cannot overlap.
		seen := map[string]bool{}
		for i, br := range e.vals {
			ts, err := typesOf(br, fmt.Sprintf("%s[%d]", p, i))
			if err != nil || br.get("$ref") != nil || br.get("enum") != nil || br.get("const") != nil || len(ts) != 1 || ts[0] == "any" {
				return fmt.Errorf("%s: oneOf can be enforced only over branches of distinct single types", path)
			}
			t := ts[0]
			if t == "integer" {
				t = "number"
			}
			branch := []string{t}
			if n := br.get("nullable"); n != nil && n.kind == 'b' && n.truth {
				branch = append(branch, "null")
			}
			for _, t := range branch {
				if seen[t] {
					return fmt.Errorf("%s: oneOf over two branches of type %s cannot be enforced (their texts may match both)", path, t)
				}
				seen[t] = true
			}
		}
	}
	var err error
	var frags []func()
	for i, br := range e.vals {
		frags = append(frags, func() {
			if err == nil {
				err = c.value(br, fmt.Sprintf("%s[%d]", p, i))
			}
		})
	}
	c.b.alt(frags...)
	return err
}

// literals emits a choice of exact JSON values.
func (c *schemaCompiler) literals(vals []*jvalue) {
	var frags []func()
	seen := map[string]bool{}
	for _, x := range vals {
		var buf bytes.Buffer
		x.encode(&buf)
		s := buf.String()
		if seen[s] {
			continue
		}
		seen[s] = true
		frags = append(frags, func() { c.b.lit(s) })
	}
	c.b.alt(frags...)
}

// typed emits the grammar of v's keywords for type t.
func (c *schemaCompiler) typed(v *jvalue, t, path string) error {
	switch t {
	case "any":
		c.anyValue()
	case "null":
		c.b.lit("null")
	case "boolean":
		c.b.alt(func() { c.b.lit("true") }, func() { c.b.lit("false") })
	case "string":
		return c.str(v, path)
	case "integer", "number":
		return c.number(v, t == "integer", path)
	case "object":
		return c.object(v, path)
	case "array":
		return c.array(v, path)
	}
	return nil
}

// count reads a non-negative integer keyword (def when absent).
func count(v *jvalue, k, path string, def int) (int, error) {
	x := v.get(k)
	if x == nil {
		return def, nil
	}
	n, ok := x.integerValue()
	if !ok || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("%s.%s: expected an integer from 0 to %d", path, k, 1<<20)
	}
	return int(n), nil
}

// ws emits the whitespace allowed between JSON tokens: none, a space, or
// a newline and up to 20 spaces or tabs.
func (c *schemaCompiler) ws() {
	c.b.opt(func() {
		c.b.alt(func() { c.b.lit(" ") }, func() {
			c.b.lit("\n")
			var s byteSet
			s.add(' ')
			s.add('\t')
			c.b.repeat(0, 20, func() { c.b.set(s) })
		})
	})
}

// char emits one character of a JSON string's content: printable ASCII
// but the quote and backslash, a well-formed UTF-8 sequence, or an
// escape. A \u escape never names a surrogate (D800-DFFF): a pair of
// them is one character and a lone one none, so a character beyond the
// BMP is written as its UTF-8 bytes, and every escape is one character
// for minLength and maxLength.
func (c *schemaCompiler) char() {
	b := c.b
	var ascii byteSet
	ascii.addRange(0x20, 0x7f)
	ascii[0] &^= 1 << '"'
	ascii[1] &^= 1 << ('\\' - 64)
	var esc, hex, notD, d, low byteSet
	for _, ch := range `"\/bfnrt` {
		esc.add(byte(ch))
	}
	hex.addRange('0', '9')
	hex.addRange('a', 'f')
	hex.addRange('A', 'F')
	notD = hex
	notD[1] &^= 1<<('d'-64) | 1<<('D'-64)
	d.add('d')
	d.add('D')
	low.addRange('0', '7')
	unicodeEsc := func() { // \uXXXX but not \uD800-\uDFFF
		b.lit("u")
		b.alt(func() { b.set(notD); b.set(hex) }, func() { b.set(d); b.set(low) })
		b.set(hex)
		b.set(hex)
	}
	frags := append([]func(){func() { b.set(ascii) }}, utf8Multi(b)...)
	b.alt(append(frags, func() {
		b.lit(`\`)
		b.alt(func() { b.set(esc) }, unicodeEsc)
	})...)
}

// utf8Multi are the fragments of one well-formed UTF-8 sequence of two to
// four bytes (no overlong forms, no surrogates, nothing past U+10FFFF).
func utf8Multi(b *builder) []func() {
	var cont byteSet
	cont.addRange(0x80, 0xbf)
	return []func(){
		func() { b.byteRange(0xc2, 0xdf); b.set(cont) },
		func() { b.byteRange(0xe0, 0xe0); b.byteRange(0xa0, 0xbf); b.set(cont) },
		func() { b.byteRange(0xe1, 0xec); b.set(cont); b.set(cont) },
		func() { b.byteRange(0xed, 0xed); b.byteRange(0x80, 0x9f); b.set(cont) },
		func() { b.byteRange(0xee, 0xef); b.set(cont); b.set(cont) },
		func() { b.byteRange(0xf0, 0xf0); b.byteRange(0x90, 0xbf); b.set(cont); b.set(cont) },
		func() { b.byteRange(0xf1, 0xf3); b.set(cont); b.set(cont); b.set(cont) },
		func() { b.byteRange(0xf4, 0xf4); b.byteRange(0x80, 0x8f); b.set(cont); b.set(cont) },
	}
}

// anyString emits a JSON string of any content.
func (c *schemaCompiler) anyString() {
	c.b.lit(`"`)
	c.b.star(c.char)
	c.b.lit(`"`)
}

// str emits a string schema.
func (c *schemaCompiler) str(v *jvalue, path string) error {
	lo, err := count(v, "minLength", path, 0)
	if err != nil {
		return err
	}
	hi, err := count(v, "maxLength", path, -1)
	if err != nil {
		return err
	}
	if hi >= 0 && hi < lo {
		return fmt.Errorf("%s: maxLength %d below minLength %d", path, hi, lo)
	}
	if p := v.get("pattern"); p != nil {
		if p.kind != 's' {
			return fmt.Errorf("%s.pattern: expected a string", path)
		}
		if v.get("minLength") != nil || v.get("maxLength") != nil || v.get("format") != nil {
			return fmt.Errorf("%s: pattern beside minLength, maxLength or format cannot be enforced", path)
		}
		return c.pattern(p.str, path)
	}
	if f := v.get("format"); f != nil {
		if v.get("minLength") != nil || v.get("maxLength") != nil {
			return fmt.Errorf("%s: format beside minLength/maxLength cannot be enforced", path)
		}
		return c.format(f, path)
	}
	c.b.lit(`"`)
	c.b.repeat(lo, hi, c.char)
	c.b.lit(`"`)
	return nil
}

// format emits the string formats the grammar can enforce.
func (c *schemaCompiler) format(f *jvalue, path string) error {
	b := c.b
	digits := func(n int) {
		for range n {
			b.byteRange('0', '9')
		}
	}
	twoDigit := func(max int) { // 00..max (max >= 9)
		b.alt(func() {
			b.byteRange('0', byte('0'+max/10-1))
			b.byteRange('0', '9')
		}, func() {
			b.byteRange(byte('0'+max/10), byte('0'+max/10))
			b.byteRange('0', byte('0'+max%10))
		})
	}
	// Days 01 to last (28, 30 or 31).
	day := func(last int) {
		frags := []func(){
			func() { b.lit("0"); b.byteRange('1', '9') },
			func() { b.lit("1"); b.byteRange('0', '9') },
		}
		if last == 28 {
			frags = append(frags, func() { b.lit("2"); b.byteRange('0', '8') })
		} else {
			frags = append(frags, func() { b.lit("2"); b.byteRange('0', '9') }, func() { b.lit("3"); b.byteRange('0', byte('0'+last-30)) })
		}
		b.alt(frags...)
	}
	// Two digits that are a multiple of 4 (00, 04, ..., 96); nonzero
	// leaves out 00.
	fourth := func(nonzero bool) {
		of := func(chars string) (s byteSet) {
			for i := range len(chars) {
				s.add(chars[i])
			}
			return s
		}
		units := "048"
		if nonzero {
			units = "48"
		}
		b.alt(
			func() { b.lit("0"); b.set(of(units)) },
			func() { b.set(of("2468")); b.set(of("048")) },
			func() { b.set(of("13579")); b.set(of("26")) },
		)
	}
	months := func(ms ...string) func() {
		return func() {
			var frags []func()
			for _, m := range ms {
				frags = append(frags, func() { b.lit(m) })
			}
			b.alt(frags...)
		}
	}
	// A date: 29 February only in leap years (a multiple of 4 but not
	// of 100, or of 400).
	date := func() {
		b.alt(func() {
			digits(4)
			b.lit("-")
			b.alt(
				func() { months("01", "03", "05", "07", "08", "10", "12")(); b.lit("-"); day(31) },
				func() { months("04", "06", "09", "11")(); b.lit("-"); day(30) },
				func() { b.lit("02-"); day(28) },
			)
		}, func() {
			b.alt(func() { digits(2); fourth(true) }, func() { fourth(false); b.lit("00") })
			b.lit("-02-29")
		})
	}
	time := func() {
		twoDigit(23)
		b.lit(":")
		twoDigit(59)
		b.lit(":")
		twoDigit(59)
		b.opt(func() { b.lit("."); b.repeat(1, 9, func() { b.byteRange('0', '9') }) })
		b.alt(func() { b.lit("Z") }, func() {
			var pm byteSet
			pm.add('+')
			pm.add('-')
			b.set(pm)
			twoDigit(23)
			b.lit(":")
			twoDigit(59)
		})
	}
	if f.kind != 's' {
		return fmt.Errorf("%s.format: expected a string", path)
	}
	b.lit(`"`)
	switch f.str {
	case "date":
		date()
	case "time":
		time()
	case "date-time":
		date()
		b.lit("T")
		time()
	case "uuid":
		var hex byteSet
		hex.addRange('0', '9')
		hex.addRange('a', 'f')
		for i, n := range []int{8, 4, 4, 4, 12} {
			if i > 0 {
				b.lit("-")
			}
			for range n {
				b.set(hex)
			}
		}
	default:
		return fmt.Errorf("%s: format %q cannot be enforced (date, time, date-time and uuid can)", path, f.str)
	}
	b.lit(`"`)
	return nil
}

// maxDigits bounds an unconstrained number's integer and fraction digits.
const maxDigits = 16

// number emits an integer or a number, within minimum and maximum.
func (c *schemaCompiler) number(v *jvalue, integer bool, path string) error {
	b := c.b
	frac := func() { b.opt(func() { b.lit("."); b.repeat(1, maxDigits, func() { b.byteRange('0', '9') }) }) }
	bound := func(k string) (int64, bool, error) {
		x := v.get(k)
		if x == nil {
			return 0, false, nil
		}
		n, ok := x.integerValue()
		if !ok || n > maxBound || n < -maxBound {
			what := "an integer"
			if !integer {
				what = "an integer (a number's bounds must be whole)"
			}
			return 0, false, fmt.Errorf("%s.%s: %s cannot be enforced: expected %s within ±%d", path, k, x.str, what, int64(maxBound))
		}
		return n, true, nil
	}
	if !integer && (v.get("exclusiveMinimum") != nil || v.get("exclusiveMaximum") != nil) {
		return fmt.Errorf("%s: exclusiveMinimum/exclusiveMaximum of a number cannot be enforced (of an integer they can)", path)
	}
	lo, hasLo, err := bound("minimum")
	if err != nil {
		return err
	}
	hi, hasHi, err := bound("maximum")
	if err != nil {
		return err
	}
	if x, ok, err := bound("exclusiveMinimum"); err != nil {
		return err
	} else if ok && (!hasLo || x+1 > lo) {
		lo, hasLo = x+1, true
	}
	if x, ok, err := bound("exclusiveMaximum"); err != nil {
		return err
	} else if ok && (!hasHi || x-1 < hi) {
		hi, hasHi = x-1, true
	}
	if !hasLo && !hasHi {
		b.opt(func() { b.lit("-") })
		b.alt(func() { b.lit("0") }, func() { b.byteRange('1', '9'); b.repeat(0, maxDigits-1, func() { b.byteRange('0', '9') }) })
		if !integer {
			frac()
			b.opt(func() {
				var e, pm byteSet
				e.add('e')
				e.add('E')
				pm.add('+')
				pm.add('-')
				b.set(e)
				b.opt(func() { b.set(pm) })
				b.repeat(1, 2, func() { b.byteRange('0', '9') }) // within float64's range
			})
		}
		return nil
	}
	if !hasLo {
		lo = -maxBound
	}
	if !hasHi {
		hi = maxBound
	}
	if lo > hi {
		return fmt.Errorf("%s: the bounds leave no value (minimum %d above maximum %d)", path, lo, hi)
	}
	if integer {
		var frags []func()
		if lo < 0 { // negatives: -(magnitude in [max(1,-hi), -lo])
			frags = append(frags, func() { b.lit("-"); c.intRange(max(1, -hi), -lo) })
		}
		if hi >= 0 {
			frags = append(frags, func() { c.intRange(max(0, lo), hi) })
		}
		b.alt(frags...)
		return nil
	}
	// Numbers between whole bounds: an integer part below the top bound
	// with any fraction, or the bound itself; no exponent.
	side := func(a, z int64) { // magnitudes in [a, z]
		if a == z {
			c.intRange(a, a)
			return
		}
		b.alt(func() { c.intRange(a, z-1); frac() }, func() { c.intRange(z, z) })
	}
	var frags []func()
	if lo < 0 {
		frags = append(frags, func() { b.lit("-"); side(max(0, -hi), -lo) })
	}
	if hi >= 0 {
		frags = append(frags, func() { side(max(0, lo), hi) })
	}
	b.alt(frags...)
	return nil
}

// maxBound is the largest bound a number may have (16 digits).
const maxBound = 1e16 - 1

// intRange emits the decimal integers in [lo, hi] (0 <= lo <= hi), with
// no leading zeros.
func (c *schemaCompiler) intRange(lo, hi int64) {
	var frags []func()
	for n := len(strconv.FormatInt(lo, 10)); n <= len(strconv.FormatInt(hi, 10)); n++ {
		a, z := lo, hi
		if first := int64(math.Pow10(n - 1)); n > 1 && a < first {
			a = first
		}
		if last := int64(math.Pow10(n)) - 1; z > last {
			z = last
		}
		as, zs := strconv.FormatInt(a, 10), strconv.FormatInt(z, 10)
		frags = append(frags, func() { c.digitRange(as, zs) })
	}
	c.b.alt(frags...)
}

// digitRange emits the digit strings of one length from a to z, in a
// program linear in the length: a run from a prefix's ...0 to its ...9 is
// one class per digit.
func (c *schemaCompiler) digitRange(a, z string) {
	b := c.b
	if a == "" {
		return
	}
	rest := len(a) - 1
	anyDigits := func() {
		for range rest {
			b.byteRange('0', '9')
		}
	}
	lowFull := strings.Trim(a[1:], "0") == ""  // a is d000…
	highFull := strings.Trim(z[1:], "9") == "" // z is d999…
	if lowFull && highFull {
		b.byteRange(a[0], z[0])
		anyDigits()
		return
	}
	if a[0] == z[0] {
		b.lit(a[:1])
		c.digitRange(a[1:], z[1:])
		return
	}
	lo, hi := a[0]+1, z[0]-1 // the first digits whose rest is free
	var frags []func()
	if lowFull {
		lo = a[0]
	} else {
		frags = append(frags, func() { b.lit(a[:1]); c.digitRange(a[1:], strings.Repeat("9", rest)) })
	}
	if highFull {
		hi = z[0]
	}
	if lo <= hi {
		frags = append(frags, func() { b.byteRange(lo, hi); anyDigits() })
	}
	if !highFull {
		frags = append(frags, func() { b.lit(z[:1]); c.digitRange(strings.Repeat("0", rest), z[1:]) })
	}
	b.alt(frags...)
}

// object emits an object schema: its properties in order, the required
// ones always; without properties, a free-form object whose values
// follow additionalProperties.
func (c *schemaCompiler) object(v *jvalue, path string) error {
	b := c.b
	props := v.get("properties")
	if props != nil && props.kind != 'o' {
		return fmt.Errorf("%s.properties: expected an object", path)
	}
	required := map[string]bool{}
	if r := v.get("required"); r != nil {
		if r.kind != 'a' {
			return fmt.Errorf("%s.required: expected an array of names", path)
		}
		for _, x := range r.vals {
			if x.kind != 's' {
				return fmt.Errorf("%s.required: expected an array of names", path)
			}
			if props.get(x.str) == nil {
				return fmt.Errorf("%s.required: %q is not among the properties, and a required property without a schema cannot be enforced", path, x.str)
			}
			required[x.str] = true
		}
	}
	addl := v.get("additionalProperties")
	b.lit("{")
	c.ws()
	if props == nil || len(props.keys) == 0 {
		if addl != nil && addl.kind == 'b' && !addl.truth {
			b.lit("}")
			return nil
		}
		var values *jvalue // nil: any value
		if addl != nil && addl.kind == 'o' {
			values = addl
		}
		var err error
		member := func() {
			c.anyString()
			c.ws()
			b.lit(":")
			c.ws()
			c.call(values, path+".additionalProperties")
			c.ws()
		}
		b.opt(func() {
			member()
			b.star(func() { b.lit(","); c.ws(); member() })
		})
		b.lit("}")
		return err
	}
	// Two tracks per property: A (nothing written yet) and B (a member
	// written, so the next one takes a comma). A member always leads to
	// track B at the next property.
	n := len(props.keys)
	toA := make([][]int32, n+1) // jumps to A_i
	toB := make([][]int32, n+1)
	toKV := make([][]int32, n)
	patch := func(list []int32, at int32) {
		for _, j := range list {
			if int(j) < len(b.prog) {
				if b.prog[j].op == opSplit {
					b.prog[j].y = at
				} else {
					b.prog[j].x = at
				}
			}
		}
	}
	for i, name := range props.keys {
		opt := !required[name]
		patch(toA[i], b.pc()) // A_i
		if opt {
			s := b.emit(inst{op: opSplit})
			b.prog[s].x = b.pc()
			toA[i+1] = append(toA[i+1], s)
		}
		toKV[i] = append(toKV[i], b.emit(inst{op: opJmp}))
		patch(toB[i], b.pc()) // B_i
		if opt {
			s := b.emit(inst{op: opSplit})
			b.prog[s].x = b.pc()
			toB[i+1] = append(toB[i+1], s)
		}
		b.lit(",")
		c.ws()
		patch(toKV[i], b.pc()) // KV_i
		b.lit(quote(name))
		c.ws()
		b.lit(":")
		c.ws()
		if err := c.value(props.vals[i], path+".properties."+name); err != nil {
			return err
		}
		c.ws()
		toB[i+1] = append(toB[i+1], b.emit(inst{op: opJmp}))
	}
	patch(toA[n], b.pc())
	patch(toB[n], b.pc())
	b.lit("}")
	return nil
}

// array emits an array schema.
func (c *schemaCompiler) array(v *jvalue, path string) error {
	b := c.b
	lo, err := count(v, "minItems", path, 0)
	if err != nil {
		return err
	}
	hi, err := count(v, "maxItems", path, -1)
	if err != nil {
		return err
	}
	if hi >= 0 && hi < lo {
		return fmt.Errorf("%s: maxItems %d below minItems %d", path, hi, lo)
	}
	if u := v.get("uniqueItems"); u != nil && u.kind == 'b' && u.truth {
		return fmt.Errorf("%s: uniqueItems cannot be enforced by constrained decoding", path)
	}
	items := v.get("items")
	var prefix []*jvalue
	if p := v.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			return fmt.Errorf("%s.prefixItems: expected an array of schemas", path)
		}
		prefix = p.vals
	}
	if items != nil && items.kind == 'b' && !items.truth {
		if hi < 0 || hi > len(prefix) {
			hi = len(prefix)
		}
		items = nil
		if lo > hi {
			return fmt.Errorf("%s: minItems %d but only %d items are allowed", path, lo, hi)
		}
	} else if items == nil && len(prefix) > 0 && (hi < 0 || hi > len(prefix)) {
		hi = max(lo, len(prefix)) // items beyond the tuple: none written
	}
	b.lit("[")
	c.ws()
	var ierr error
	item := func(k int) {
		if k < len(prefix) {
			if ierr == nil {
				ierr = c.value(prefix[k], fmt.Sprintf("%s.prefixItems[%d]", path, k))
			}
			return
		}
		c.call(items, path+".items")
	}
	// Items: k-th preceded by a comma; item k is optional from lo on.
	var ends []int32
	for k := 0; hi < 0 || k < hi; k++ {
		if k >= len(prefix) && hi < 0 && k >= lo {
			// The unbounded tail: ( , item )*.
			if k == 0 {
				s := b.emit(inst{op: opSplit})
				b.prog[s].x = b.pc()
				item(k)
				c.ws()
				b.star(func() { b.lit(","); c.ws(); item(k); c.ws() })
				b.prog[s].y = b.pc()
			} else {
				b.star(func() { b.lit(","); c.ws(); item(k); c.ws() })
			}
			break
		}
		if k >= lo {
			s := b.emit(inst{op: opSplit})
			b.prog[s].x = b.pc()
			ends = append(ends, s)
		}
		if k > 0 {
			b.lit(",")
			c.ws()
		}
		item(k)
		c.ws()
		if b.err != nil || ierr != nil {
			break
		}
	}
	for _, s := range ends {
		b.prog[s].y = b.pc()
	}
	b.lit("]")
	return ierr
}

// anyValue emits a call to the any-value subroutine.
func (c *schemaCompiler) anyValue() { c.call(nil, "") }

// anyValueBody is the any-value subroutine: any JSON value, its members
// and items calling it again.
func (c *schemaCompiler) anyValueBody() {
	b := c.b
	b.alt(
		c.anyObject,
		func() {
			b.lit("[")
			c.ws()
			b.opt(func() {
				c.anyValue()
				c.ws()
				b.star(func() { b.lit(","); c.ws(); c.anyValue(); c.ws() })
			})
			b.lit("]")
		},
		c.anyString,
		func() {
			_ = c.number(&jvalue{kind: 'o'}, false, "")
		},
		func() { b.lit("true") },
		func() { b.lit("false") },
		func() { b.lit("null") },
	)
}

// anyObject emits an object of any members.
func (c *schemaCompiler) anyObject() {
	_ = c.object(&jvalue{kind: 'o'}, "")
}
