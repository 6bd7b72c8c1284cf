package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Tool is a function a model may call: its name and the JSON schema of
// its arguments (nil: any object).
type Tool struct {
	Name       string
	Parameters []byte
}

// CallMarkup is how a chat template teaches a model to write a call:
// Open, then a JSON object {"name": NAME, ArgsKey: ARGUMENTS}, then
// Close; Many allows several calls, whitespace between them. With Array
// the calls are the elements of one JSON array after Open (mistral's
// [TOOL_CALLS][{...}, {...}]): Open and Close surround the array, and
// Many allows more than one element. With NameArgs a call is Open, the
// tool's name, NameArgs and the arguments object, no JSON around them
// (mistral's from tokenizer v11 on: [TOOL_CALLS]NAME[ARGS]{...}).
type CallMarkup struct {
	Open, Close string
	ArgsKey     string
	NameArgs    string
	Many        bool
	Array       bool
}

// ToolCalls compiles the grammar of answers that are tool calls (one, or
// with Many one or more) of the tools, each call's arguments valid
// against its tool's schema: tool_choice "required" (all the tools) or a
// named function (one tool).
func ToolCalls(tools []Tool, mk CallMarkup) (*Grammar, error) {
	c, roots, err := toolCompiler(tools)
	if err != nil {
		return nil, err
	}
	b := c.b
	open, close := mk.Open, mk.Close
	if mk.Array { // the markup surrounds the array, not each call
		mk.Open, mk.Close = "", ""
	}
	call := func() {
		b.lit(mk.Open)
		if mk.NameArgs != "" {
			var frags []func()
			for i, t := range tools {
				frags = append(frags, func() {
					b.lit(t.Name + mk.NameArgs)
					if e := c.toolArgs(i, t, roots[i]); e != nil && err == nil {
						err = e
					}
				})
			}
			b.alt(frags...)
			b.lit(mk.Close)
			return
		}
		c.ws()
		b.lit("{")
		c.ws()
		b.lit(`"name"`)
		c.ws()
		b.lit(":")
		c.ws()
		var frags []func()
		for i, t := range tools {
			frags = append(frags, func() {
				b.lit(quote(t.Name))
				c.ws()
				b.lit(",")
				c.ws()
				b.lit(quote(mk.ArgsKey))
				c.ws()
				b.lit(":")
				c.ws()
				if e := c.toolArgs(i, t, roots[i]); e != nil && err == nil {
					err = e
				}
			})
		}
		b.alt(frags...)
		c.ws()
		b.lit("}")
		c.ws()
		b.lit(mk.Close)
	}
	c.ws()
	if mk.Array {
		b.lit(open)
		c.ws()
		b.lit("[")
		c.ws()
		call()
		if mk.Many {
			b.star(func() { b.lit(","); c.ws(); call() })
		}
		b.lit("]")
		c.ws()
		b.lit(close)
	} else {
		call()
		if mk.Many {
			b.star(func() { c.ws(); call() })
		}
	}
	c.ws()
	if err != nil {
		return nil, err
	}
	return c.finish("tool calls")
}

// toolCompiler parses the tools' parameter schemas, for a grammar of
// their calls.
func toolCompiler(tools []Tool) (*schemaCompiler, []*jvalue, error) {
	if len(tools) == 0 {
		return nil, nil, fmt.Errorf("no tools to call")
	}
	c := newSchemaCompiler(nil)
	roots := make([]*jvalue, len(tools))
	for i, t := range tools {
		if len(t.Parameters) == 0 {
			continue
		}
		v, err := parseJSON(t.Parameters)
		if err != nil {
			return nil, nil, fmt.Errorf("tools[%d] (%s): the parameters are not valid JSON: %v", i, t.Name, err)
		}
		roots[i] = v
	}
	return c, roots, nil
}

// toolArgs emits tool i's arguments: an object valid against its schema
// r (any object when it has none). A schema of another type, or of no
// type that does not imply one, is refused.
func (c *schemaCompiler) toolArgs(i int, t Tool, r *jvalue) error {
	path := fmt.Sprintf("tools[%d].parameters", i)
	if r == nil || r.kind == 'o' && len(constraining(r)) == 0 {
		c.anyObject() // no schema: any object
		return nil
	}
	if ts, e := typesOf(r, path); e != nil || len(ts) != 1 || ts[0] != "object" {
		return fmt.Errorf("%s: %s: a tool's parameters must be a schema of type object", t.Name, path)
	}
	c.root = r
	if e := c.value(r, path); e != nil {
		return fmt.Errorf("%s: %w", t.Name, e)
	}
	return nil
}

// HarmonyCall compiles the grammar of a harmony answer (GPT-OSS) that
// calls one of the tools: an optional analysis message, then a commentary
// message to functions.NAME whose body is the call's arguments, valid
// against that tool's schema:
//
//	[<|channel|>analysis<|message|>THOUGHT<|end|><|start|>assistant]<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGUMENTS
//
// THOUGHT is any text without '<', so that no marker starts inside it.
// The answer then ends (harmony's <|call|> is an end-of-sequence token).
// The markers are special tokens in GPT-OSS's tokenizer: the vocabulary
// the grammar is indexed over must let them read as their text, and the
// arguments must not take them (Index.Guard).
func HarmonyCall(tools []Tool) (*Grammar, error) {
	c, roots, err := toolCompiler(tools)
	if err != nil {
		return nil, err
	}
	b := c.b
	var thought byteSet
	for x := 0; x < 256; x++ {
		if x != '<' {
			thought.add(byte(x))
		}
	}
	b.opt(func() {
		b.lit(HarmonyAnalysis)
		b.star(func() { b.set(thought) })
		b.lit("<|end|><|start|>assistant")
	})
	var frags []func()
	for i, t := range tools {
		if t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n<") {
			return nil, fmt.Errorf("tools[%d]: the name %q cannot be written in a harmony header (no spaces, no '<')", i, t.Name)
		}
		frags = append(frags, func() {
			b.lit("<|channel|>commentary to=functions." + t.Name + " " + HarmonyArgs)
			if e := c.toolArgs(i, t, roots[i]); e != nil && err == nil {
				err = e
			}
		})
	}
	b.alt(frags...)
	if err != nil {
		return nil, err
	}
	return c.finish("harmony tool call")
}

// Harmony's markers that HarmonyCall's grammar writes: the analysis
// message's header, and the end of a call's header, after which come the
// arguments (text that appears nowhere before them).
const (
	HarmonyAnalysis = "<|channel|>analysis<|message|>"
	HarmonyArgs     = "<|constrain|>json<|message|>"
)

// XMLCalls compiles the grammar of answers that are qwen_xml tool calls
// (Qwen3-Coder, Qwen3.5), one, or with many one or more, in the layout
// their templates teach:
//
//	<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>
//
// A tool's parameters are written in its schema's property order, the
// required ones always and the others optionally (no other keys; a tool
// without properties takes none). A value is the text the parser reads
// back as the property's type: an integer, number, boolean, object or
// array as the JSON its schema allows, a string as raw text (any
// characters but "</", and no '<' last, so that the parameter's close
// cannot start inside it; an enum or const of strings as one of them). A
// string property with other keywords (pattern, lengths, format), or a
// property of several types one of which is string, cannot be enforced
// on raw text and is refused, naming it.
func XMLCalls(tools []Tool, many bool) (*Grammar, error) {
	return XMLCallsIn(tools, many, QwenXML)
}

// XMLMarkup is how a format of XML-like tool calls writes a call and its
// parameters (XMLCallsIn).
type XMLMarkup struct {
	// Format names the format in errors.
	Format string
	// Open is what starts a call of the tool name, Close what ends it.
	Open  func(name string) string
	Close string
	// Param is what comes before a parameter key's value, ParamClose
	// what comes after it.
	Param      func(key string) string
	ParamClose string
	// Reserved are the characters a name or key cannot hold.
	Reserved string
	// UntypedJSON: the parser reads a parameter whose schema has no type
	// as the JSON its text is, where it is JSON (glm45), not as a string.
	UntypedJSON bool
}

// The XML-like call formats of the families tputool runs.
var (
	// QwenXML is Qwen3-Coder's and Qwen3.5's (qwen_xml).
	QwenXML = XMLMarkup{
		Format: "qwen_xml", Reserved: "<>\r\n",
		Open:  func(name string) string { return "<tool_call>\n<function=" + name + ">\n" },
		Close: "</function>\n</tool_call>",
		Param: func(key string) string { return "<parameter=" + key + ">\n" }, ParamClose: "\n</parameter>\n",
	}
	// GLMXML is GLM-4.5's (glm45): the name after <tool_call>, each
	// parameter a key and a value tag.
	GLMXML = XMLMarkup{
		Format: "glm45", Reserved: "<>\r\n", UntypedJSON: true,
		Open:  func(name string) string { return "<tool_call>" + name + "\n" },
		Close: "</tool_call>",
		Param: func(key string) string { return "<arg_key>" + key + "</arg_key>\n<arg_value>" }, ParamClose: "</arg_value>\n",
	}
	// MiniMaxXML is MiniMax-M2's (minimax_m2): an invoke in a
	// <minimax:tool_call> block, names and keys in quoted attributes.
	MiniMaxXML = XMLMarkup{
		Format: "minimax_m2", Reserved: "<>\"\r\n",
		Open:  func(name string) string { return "<minimax:tool_call>\n<invoke name=\"" + name + "\">\n" },
		Close: "</invoke>\n</minimax:tool_call>",
		Param: func(key string) string { return "<parameter name=\"" + key + "\">" }, ParamClose: "</parameter>\n",
	}
)

// XMLCallsIn is XMLCalls for the calls of markup m.
func XMLCallsIn(tools []Tool, many bool, m XMLMarkup) (*Grammar, error) {
	c, roots, err := toolCompiler(tools)
	if err != nil {
		return nil, err
	}
	c.xml = m
	b := c.b
	var frags []func()
	for i, t := range tools {
		if t.Name == "" || strings.ContainsAny(t.Name, m.Reserved) {
			return nil, fmt.Errorf("tools[%d]: the name %q cannot be written in a %s call (none of %q)", i, t.Name, m.Format, m.Reserved)
		}
		frags = append(frags, func() {
			b.lit(m.Open(t.Name))
			if e := c.xmlParams(i, t, roots[i]); e != nil && err == nil {
				err = e
			}
			b.lit(m.Close)
		})
	}
	call := func() { b.alt(frags...) }
	c.ws()
	call()
	if many {
		b.star(func() { c.ws(); call() })
	}
	c.ws()
	if err != nil {
		return nil, err
	}
	return c.finish(m.Format + " tool calls")
}

// xmlParams emits tool i's parameters (XMLCalls) from its schema r.
func (c *schemaCompiler) xmlParams(i int, t Tool, r *jvalue) error {
	return c.objectParams(i, t, r, func(key, path string) error {
		if strings.ContainsAny(key, c.xml.Reserved) {
			return fmt.Errorf("%s.properties: the key %q cannot be written in a %s parameter", path, key, c.xml.Format)
		}
		return nil
	}, func(key string, v *jvalue, path string) error {
		c.b.lit(c.xml.Param(key))
		err := c.xmlValue(v, path)
		c.b.lit(c.xml.ParamClose)
		return err
	})
}

// objectParams emits tool i's parameters from its schema r, as the
// markups that write each parameter apart (XMLCalls, PythonicCalls) do:
// none without a schema (or with one of annotations only); else each
// property in the schema's order through param (the required ones
// always, the others optionally), a key that keyErr refuses refused. A
// schema of another type than object, or a required property without a
// schema, is refused.
func (c *schemaCompiler) objectParams(i int, t Tool, r *jvalue, keyErr func(key, path string) error, param func(key string, v *jvalue, path string) error) error {
	path := fmt.Sprintf("tools[%d].parameters", i)
	if r == nil || r.kind == 'o' && len(constraining(r)) == 0 {
		return nil // no schema ({} or annotations only): no parameters, as toolArgs's any object
	}
	if ts, e := typesOf(r, path); e != nil || len(ts) != 1 || ts[0] != "object" {
		return fmt.Errorf("%s: %s: a tool's parameters must be a schema of type object", t.Name, path)
	}
	props := r.get("properties")
	if props != nil && props.kind != 'o' {
		return fmt.Errorf("%s: %s.properties: expected an object", t.Name, path)
	}
	required := map[string]bool{}
	if req := r.get("required"); req != nil && req.kind == 'a' {
		for _, x := range req.vals {
			if x.kind != 's' {
				continue
			}
			if props.get(x.str) == nil { // never written: the call would lack it
				return fmt.Errorf("%s: %s.required: %q is not among the properties, and a required property without a schema cannot be enforced", t.Name, path, x.str)
			}
			required[x.str] = true
		}
	}
	if props == nil {
		return nil
	}
	c.root = r
	var err error
	for k, key := range props.keys {
		if e := keyErr(key, path); e != nil {
			return fmt.Errorf("%s: %w", t.Name, e)
		}
		emit := func() {
			if e := param(key, props.vals[k], path+".properties."+key); e != nil && err == nil {
				err = fmt.Errorf("%s: %w", t.Name, e)
			}
		}
		if required[key] {
			emit()
		} else {
			c.b.opt(emit)
		}
	}
	return err
}

// xmlValue emits one qwen_xml parameter's value (XMLCalls).
func (c *schemaCompiler) xmlValue(v *jvalue, path string) error {
	if v.kind == 'b' { // true: any value; the parser reads untyped text as a string
		if !v.truth {
			return fmt.Errorf("%s: false accepts no value", path)
		}
		c.b.star(c.xmlText)
		return nil
	}
	ts, err := typesOf(v, path)
	if err != nil {
		return err
	}
	// The parser reads a parameter its schema gives no type as a string.
	str := slices.Contains(ts, "string") || ts[0] == "any"
	switch {
	case !str && !c.xml.UntypedJSON && len(slices.DeleteFunc(slices.Clone(ts), func(t string) bool { return t == "null" })) > 1:
		// The parser types the text by the first of them (and null).
		return fmt.Errorf("%s: a %s parameter of types %v cannot be enforced: its parser reads the value as the first", path, c.xml.Format, ts)
	case !str:
		return c.value(v, path) // as JSON, which the parser reads back
	case len(ts) > 1:
		return fmt.Errorf("%s: a %s parameter of types %v cannot be enforced: its string is raw text, which the others' JSON could be", path, c.xml.Format, ts)
	}
	var vals []*jvalue
	if e := v.get("enum"); e != nil {
		if e.kind != 'a' || len(e.vals) == 0 {
			return fmt.Errorf("%s.enum: expected a non-empty array", path)
		}
		vals = e.vals
	}
	if cst := v.get("const"); cst != nil {
		// Beside enum, as JSON's: the value must be in both.
		if vals != nil && !slices.ContainsFunc(vals, func(x *jvalue) bool { return jsonEqual(x, cst) }) {
			return fmt.Errorf("%s: the const is not among the enum's values: the schema cannot be satisfied", path)
		}
		vals = []*jvalue{cst}
	}
	if kw := constraining(v, "type", "enum", "const"); len(kw) > 0 {
		return fmt.Errorf("%s: keyword %q cannot be enforced on a %s string parameter (raw text)", path, kw[0], c.xml.Format)
	}
	if vals == nil {
		c.b.star(c.xmlText)
		return nil
	}
	var frags []func()
	for _, x := range vals {
		if x.kind != 's' {
			if ts[0] == "any" {
				var buf bytes.Buffer
				x.encode(&buf)
				return fmt.Errorf("%s: a %s parameter without a type is read back as a string, so its value %s cannot be", path, c.xml.Format, buf.String())
			}
			continue // not a string: the type excludes it
		}
		// The parser reads "null" as null but for a string parameter
		// (glm45: any JSON text, for a parameter without a type).
		untyped := ts[0] == "any" && (strings.EqualFold(strings.TrimSpace(x.str), "null") || c.xml.UntypedJSON && json.Valid([]byte(strings.TrimSpace(x.str))))
		if strings.Contains(x.str, "</") || strings.HasSuffix(x.str, "<") || untyped {
			return fmt.Errorf("%s: the value %q cannot be written as a %s parameter", path, x.str, c.xml.Format)
		}
		frags = append(frags, func() { c.b.lit(x.str) })
	}
	if len(frags) == 0 {
		return fmt.Errorf("%s: no string among the enum's values", path)
	}
	c.b.alt(frags...)
	return nil
}

// xmlText emits one character of a qwen_xml parameter's raw text: a
// well-formed UTF-8 character other than '<' and the control characters
// but tab, line feed and carriage return, or '<' followed by such a
// character other than '/' (so the text never holds "</" nor ends in
// '<').
func (c *schemaCompiler) xmlText() {
	b := c.b
	var plain byteSet
	plain.addRange(0x20, 0x7e)
	plain.add('\t')
	plain.add('\n')
	plain.add('\r')
	plain[0] &^= 1 << '<'
	afterLT := plain
	afterLT[0] &^= 1 << '/'
	b.alt(append(append([]func(){func() { b.set(plain) }}, utf8Multi(b)...), func() {
		b.lit("<")
		b.alt(append([]func(){func() { b.set(afterLT) }}, utf8Multi(b)...)...)
	})...)
}

// PythonicCalls compiles the grammar of an LFM2 answer that calls the
// tools (one call, or with many one or more) in its pythonic markup:
//
//	<|tool_call_start|>[NAME(KEY=VALUE, …), …]<|tool_call_end|>
//
// each VALUE the JSON its property's schema allows (JSON's strings,
// numbers, arrays and objects are Python's literals; the server's reader
// takes true, false and null as Python's True, False and None), each
// property written as KEY=VALUE followed by ", " (Python allows the
// trailing comma), the required ones always, the others optionally, in
// the schema's order. The markers are special tokens in LFM2's
// tokenizer: the vocabulary the grammar is indexed over must let them
// read as their text. A name or a key that is not a Python identifier
// (letters, digits and '_', not starting with a digit; a name may also
// hold '.' and '-', as the reader takes them) cannot be written and is
// refused, naming it.
func PythonicCalls(tools []Tool, many bool) (*Grammar, error) {
	c, roots, err := toolCompiler(tools)
	if err != nil {
		return nil, err
	}
	b := c.b
	var frags []func()
	for i, t := range tools {
		if !pyIdent(t.Name, ".-") {
			return nil, fmt.Errorf("tools[%d]: the name %q cannot be written in a pythonic call (letters, digits, '_', '.', '-')", i, t.Name)
		}
		frags = append(frags, func() {
			b.lit(t.Name + "(")
			if e := c.pyParams(i, t, roots[i]); e != nil && err == nil {
				err = e
			}
			b.lit(")")
		})
	}
	call := func() { b.alt(frags...) }
	b.lit("<|tool_call_start|>[")
	call()
	if many {
		b.star(func() { b.lit(", "); call() })
	}
	b.lit("]<|tool_call_end|>")
	if err != nil {
		return nil, err
	}
	return c.finish("pythonic tool calls")
}

// pyIdent reports that s is a Python identifier of ASCII letters,
// digits and '_' (and the bytes of extra), not starting with a digit.
func pyIdent(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '_' || 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || strings.IndexByte(extra, ch) >= 0:
		case '0' <= ch && ch <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// pyParams emits tool i's keyword arguments (PythonicCalls) from its
// schema r: KEY=VALUE, then ", ".
func (c *schemaCompiler) pyParams(i int, t Tool, r *jvalue) error {
	return c.objectParams(i, t, r, func(key, path string) error {
		if !pyIdent(key, "") {
			return fmt.Errorf("%s.properties: the key %q is not a Python identifier, so a pythonic call cannot pass it", path, key)
		}
		return nil
	}, func(key string, v *jvalue, path string) error {
		c.b.lit(key + "=")
		err := c.value(v, path)
		c.b.lit(", ")
		return err
	})
}
