package constrain

import (
	"fmt"
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
// Many allows more than one element.
type CallMarkup struct {
	Open, Close string
	ArgsKey     string
	Many        bool
	Array       bool
}

// ToolCalls compiles the grammar of answers that are tool calls (one, or
// with Many one or more) of the tools, each call's arguments valid
// against its tool's schema: tool_choice "required" (all the tools) or a
// named function (one tool).
func ToolCalls(tools []Tool, mk CallMarkup) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("no tools to call")
	}
	c := &schemaCompiler{b: newBuilder(), subs: map[*jvalue]*sub{}}
	roots := make([]*jvalue, len(tools))
	for i, t := range tools {
		if len(t.Parameters) == 0 {
			continue
		}
		v, err := parseJSON(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tools[%d] (%s): the parameters are not valid JSON: %v", i, t.Name, err)
		}
		roots[i] = v
	}
	b := c.b
	var err error
	open, close := mk.Open, mk.Close
	if mk.Array { // the markup surrounds the array, not each call
		mk.Open, mk.Close = "", ""
	}
	call := func() {
		b.lit(mk.Open)
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
				r := roots[i]
				path := fmt.Sprintf("tools[%d].parameters", i)
				if r == nil || r.kind == 'o' && len(constraining(r)) == 0 {
					c.anyObject() // no schema: any object
					return
				}
				// Arguments are an object: a schema of another type, or of
				// no type that does not imply one, is refused.
				if ts, e := typesOf(r, path); e != nil || len(ts) != 1 || ts[0] != "object" {
					if err == nil {
						err = fmt.Errorf("%s: %s: a tool's parameters must be a schema of type object", t.Name, path)
					}
					return
				}
				c.root = r
				if e := c.value(r, path); e != nil && err == nil {
					err = fmt.Errorf("%s: %w", t.Name, e)
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
	b.emit(inst{op: opMatch})
	if err != nil {
		return nil, err
	}
	if err := c.emitSubs(); err != nil {
		return nil, err
	}
	return b.grammar(0, "tool calls")
}
