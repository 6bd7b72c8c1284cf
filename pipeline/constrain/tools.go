package constrain

import (
	"fmt"
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
