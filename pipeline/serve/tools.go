package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/constrain"
)

// Tool calls. A model calls a tool by writing markup its chat template
// taught it; the server renders the request's tools through the template
// (as transformers passes them), parses the calls out of the answer, and
// answers with tool_calls (finish_reason "tool_calls") instead of the
// markup, whole or streamed. The format follows the template:
//
//   - hermes (Qwen2.5/3, Hermes, most fine-tunes): <tool_call>{"name":
//     …, "arguments": {…}}</tool_call>, any number of them;
//   - qwen_xml (Qwen3-Coder, Qwen3.5): <tool_call><function=NAME>
//     <parameter=KEY>VALUE</parameter>…</function></tool_call>, each
//     value untyped text that the tool's schema types (xmlValue);
//   - mistral: [TOOL_CALLS] followed by a JSON array of {"name",
//     "arguments"} (or one object); mistral_args (tokenizers v11 on:
//     Mistral Small 3.2, Magistral, Devstral): [TOOL_CALLS]NAME[ARGS]{…}
//     a call, [CALL_ID]ID optionally before [ARGS]; either is parsed in
//     both;
//   - llama3 (Llama 3.1+ JSON calling): the whole answer is JSON objects
//     {"name": …, "parameters": {…}}, separated by ';' when several,
//     optionally after <|python_tag|>;
//   - glm45 (GLM-4.5, 4.6, 4.7): <tool_call>NAME <arg_key>KEY</arg_key>
//     <arg_value>VALUE</arg_value>… </tool_call>, each value raw text for
//     a string parameter and JSON for the others, as the template writes
//     them (glmValue);
//   - minimax_m2 (MiniMax-M2): <minimax:tool_call> holding <invoke
//     name="NAME"> <parameter name="KEY">VALUE</parameter>… </invoke>
//     calls, each value typed by the tool's schema as qwen_xml's;
//   - pythonic (LFM2, LFM2-MoE): <|tool_call_start|>[NAME(KEY=VALUE, …),
//     …]<|tool_call_end|>, each value a Python literal (pythonic.go).
//
// GPT-OSS's harmony calls are messages to functions.NAME, which the
// harmony splitter (harmony.go) re-emits as hermes markup for the parser.
// tool_choice "required" or a named function holds the answer to a
// grammar of the template's markup (forcedCalls).

// ToolFormat is how a model writes tool calls ("" when its template has
// no tool markup tputool knows).
type ToolFormat string

const (
	ToolsHermes  ToolFormat = "hermes"
	ToolsQwenXML ToolFormat = "qwen_xml"
	ToolsMistral ToolFormat = "mistral"
	// ToolsMistralArgs is mistral's from tokenizer v11 on: the name, then
	// [ARGS], then the arguments, a [TOOL_CALLS] each call.
	ToolsMistralArgs ToolFormat = "mistral_args"
	ToolsLlama3      ToolFormat = "llama3"
	// ToolsGLM is GLM-4.5's <tool_call>NAME <arg_key>…<arg_value>… form.
	ToolsGLM ToolFormat = "glm45"
	// ToolsMiniMax is MiniMax-M2's <minimax:tool_call><invoke name=…>
	// form.
	ToolsMiniMax ToolFormat = "minimax_m2"
	// ToolsHarmony is GPT-OSS's: calls are harmony messages to
	// functions.NAME, which the harmony splitter re-emits as hermes
	// markup for the parser.
	ToolsHarmony ToolFormat = "harmony"
	// ToolsPythonic is LFM2's: a Python list of calls with keyword
	// arguments between <|tool_call_start|> and <|tool_call_end|>.
	ToolsPythonic ToolFormat = "pythonic"
)

// ToolFormatOf reads a chat template's tool markup.
func ToolFormatOf(t *chat.Template) ToolFormat {
	if t == nil {
		return ""
	}
	src := t.Source()
	switch {
	case IsHarmony(t):
		return ToolsHarmony
	case strings.Contains(src, "<function=") && strings.Contains(src, "<parameter="):
		return ToolsQwenXML
	case strings.Contains(src, "<tool_call>") && strings.Contains(src, "<arg_key>"):
		return ToolsGLM
	case strings.Contains(src, "<minimax:tool_call>"):
		return ToolsMiniMax
	case strings.Contains(src, pythonicOpen) || strings.Contains(src, "<|tool_list_start|>"):
		return ToolsPythonic
	case strings.Contains(src, "<tool_call>"):
		return ToolsHermes
	case strings.Contains(src, "[TOOL_CALLS]") && strings.Contains(src, "[ARGS]"):
		return ToolsMistralArgs
	case strings.Contains(src, "[TOOL_CALLS]"):
		return ToolsMistral
	case strings.Contains(src, "<|python_tag|>") || (strings.Contains(src, "ipython") && strings.Contains(src, "\"parameters\"")):
		return ToolsLlama3
	}
	return ""
}

// isMistral reports the two mistral formats: [TOOL_CALLS] is a control
// token, and their call ids are nine letters and digits.
func (f ToolFormat) isMistral() bool { return f == ToolsMistral || f == ToolsMistralArgs }

// toolCall is one parsed call.
type toolCall struct {
	Name string
	// Arguments is the call's arguments as JSON text (compact), or, where
	// the model wrote something that does not parse, that text as it is
	// (OpenAI's arguments are a string the client parses).
	Arguments string
	// Object says Arguments is a JSON object (Anthropic's input must be).
	Object bool
}

// maxToolCalls bounds the calls one answer may make.
const maxToolCalls = 64

// toolParser finds tool calls in an answer that arrives in pieces:
// content before the first call's markup streams on; from the markup on,
// the text is held until the answer ends, then parsed. Text that turns
// out not to be a call is returned as content, unchanged.
type toolParser struct {
	format ToolFormat
	types  map[string]map[string]string // qwen_xml: tool → parameter → JSON type
	one    bool                         // keep the first call only
	// objects: an answer whose calls' arguments are not all JSON objects
	// is content (Anthropic's tool_use input must be an object).
	objects bool
	held    strings.Builder
	hold    bool // the markup (or, llama3, a leading '{') was seen
	any     bool // non-space content was emitted
	tail    string
}

func newToolParser(f ToolFormat, types map[string]map[string]string, one bool) *toolParser {
	if f == "" {
		return nil
	}
	if f == ToolsHarmony {
		f = ToolsHermes // the harmony splitter writes the calls as hermes markup
	}
	return &toolParser{format: f, types: types, one: one}
}

// marker is the text that opens a call.
func (p *toolParser) marker() string {
	return p.format.callMarker()
}

// callMarker is the text that opens a call in format f.
func (f ToolFormat) callMarker() string {
	switch f {
	case ToolsHermes, ToolsQwenXML, ToolsGLM:
		return "<tool_call>"
	case ToolsMiniMax:
		return "<minimax:tool_call>"
	case ToolsMistral, ToolsMistralArgs:
		return "[TOOL_CALLS]"
	case ToolsPythonic:
		return pythonicOpen
	}
	return "<|python_tag|>"
}

// feed returns the content of text that is surely not a call.
func (p *toolParser) feed(text string) string {
	if p.hold {
		p.held.WriteString(text)
		return ""
	}
	buf := p.tail + text
	p.tail = ""
	if p.format == ToolsLlama3 && !p.any { // a JSON answer is a call
		trimmed := strings.TrimLeft(buf, " \t\r\n")
		if strings.HasPrefix(trimmed, "{") {
			p.hold = true
			p.held.WriteString(buf)
			return ""
		}
		if trimmed == "" {
			p.tail = buf
			return ""
		}
	}
	m := p.marker()
	if i := strings.Index(buf, m); i >= 0 {
		p.hold = true
		p.held.WriteString(buf[i:])
		return p.emit(buf[:i])
	}
	keep := heldBack(buf, m)
	p.tail = buf[len(buf)-keep:]
	return p.emit(buf[:len(buf)-keep])
}

func (p *toolParser) emit(s string) string {
	if strings.TrimSpace(s) != "" {
		p.any = true
	}
	return s
}

// finish parses what was held: the calls, and the text to return as
// content (everything held when it holds no call).
func (p *toolParser) finish() (calls []toolCall, content string) {
	if !p.hold {
		t := p.tail
		p.tail = ""
		return nil, t
	}
	text := p.held.String()
	calls = parseToolCalls(p.format, text, p.types)
	for _, c := range calls {
		if p.objects && !c.Object {
			calls = nil
		}
	}
	if len(calls) == 0 {
		return nil, text
	}
	if p.one {
		calls = calls[:1]
	}
	return calls, ""
}

// parseToolCalls parses the calls in text (the markup onwards) in format;
// none when some call in it does not parse (the text is then content).
func parseToolCalls(f ToolFormat, text string, types map[string]map[string]string) []toolCall {
	var calls []toolCall
	ok := true
	// add takes one call, its name and its arguments (any JSON value; a
	// JSON string whose text is JSON stands for that JSON).
	add := func(name string, args json.RawMessage) {
		if name == "" {
			ok = false
			return
		}
		args = bytes.TrimSpace(args)
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		c := toolCall{Name: name, Arguments: string(args)}
		var s string
		if json.Unmarshal(args, &s) == nil { // the JSON it holds, or its text
			c.Arguments, args = s, json.RawMessage(s)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, args) == nil && compact.Len() > 0 {
			c.Arguments = compact.String()
			c.Object = c.Arguments[0] == '{'
		}
		if len(calls) < maxToolCalls {
			calls = append(calls, c)
		}
	}
	// addJSON takes a call written as {"name": …, "arguments" (or
	// "parameters"): …}.
	addJSON := func(raw []byte) {
		var c struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(raw, &c) != nil {
			ok = false
			return
		}
		if len(c.Arguments) == 0 {
			c.Arguments = c.Parameters
		}
		add(c.Name, c.Arguments)
	}
	switch f {
	case ToolsHermes, ToolsQwenXML:
		for _, body := range tagged(text, "<tool_call>", "</tool_call>") {
			if f == ToolsQwenXML && strings.Contains(body, "<function=") {
				name, args := xmlCall(body, types)
				add(name, args)
				continue
			}
			addJSON([]byte(strings.TrimSpace(body)))
		}
	case ToolsGLM:
		for _, body := range tagged(text, "<tool_call>", "</tool_call>") {
			name, args := glmCall(body, types)
			add(name, args)
		}
	case ToolsMiniMax:
		for _, block := range tagged(text, "<minimax:tool_call>", "</minimax:tool_call>") {
			for _, invoke := range tagged(block, "<invoke", "</invoke>") {
				name, args := miniMaxCall(invoke, types)
				add(name, args)
			}
		}
	case ToolsMistral, ToolsMistralArgs:
		parts := strings.Split(text, "[TOOL_CALLS]")
		for _, part := range parts[1:] {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if head, args, found := strings.Cut(part, "[ARGS]"); found {
				name, _, _ := strings.Cut(head, "[CALL_ID]")
				add(strings.TrimSpace(name), json.RawMessage(args))
				continue
			}
			var list []json.RawMessage
			if json.Unmarshal([]byte(part), &list) != nil {
				list = []json.RawMessage{json.RawMessage(part)}
			}
			for _, raw := range list {
				addJSON(raw)
			}
		}
	case ToolsPythonic:
		names, args, parsed := pythonicBlocks(text)
		if !parsed {
			return nil
		}
		for i, name := range names {
			add(name, args[i])
		}
	case ToolsLlama3:
		body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
		for ok && body != "" {
			dec := json.NewDecoder(strings.NewReader(body))
			var raw json.RawMessage
			if dec.Decode(&raw) != nil {
				return nil
			}
			addJSON(raw)
			body = strings.TrimSpace(body[dec.InputOffset():])
			if body != "" { // calls are separated by ';'
				rest, sep := strings.CutPrefix(body, ";")
				if !sep {
					return nil
				}
				body = strings.TrimSpace(rest)
			}
		}
	}
	if !ok {
		return nil
	}
	return calls
}

// tagged returns the text between each open and the next close (or the
// end of text, for a last call cut short), at most maxToolCalls of them.
func tagged(text, open, close string) []string {
	var out []string
	for len(out) < maxToolCalls {
		i := strings.Index(text, open)
		if i < 0 {
			break
		}
		text = text[i+len(open):]
		body := text
		if j := strings.Index(text, close); j >= 0 {
			body, text = text[:j], text[j+len(close):]
		} else {
			text = ""
		}
		out = append(out, body)
	}
	return out
}

// xmlCall reads a qwen_xml call's body, <function=NAME> and its
// <parameter=KEY>VALUE</parameter>s (a parameter cut short ends at the
// next one, at </function> or at the end), into the name and the
// arguments as a JSON object, each value typed by the tool's schema
// (xmlValue); a key given twice keeps its last value.
func xmlCall(body string, types map[string]map[string]string) (string, json.RawMessage) {
	_, fn, _ := strings.Cut(body, "<function=")
	name, rest, _ := strings.Cut(fn, ">")
	name = strings.TrimSpace(name)
	rest, _, _ = strings.Cut(rest, "</function>")
	var keys []string
	vals := map[string]json.RawMessage{}
	for {
		i := strings.Index(rest, "<parameter=")
		if i < 0 {
			break
		}
		rest = rest[i+len("<parameter="):]
		end := len(rest)
		if j := strings.Index(rest, "</parameter>"); j >= 0 {
			end = j
		}
		if j := strings.Index(rest, "<parameter="); j >= 0 && j < end {
			end = j
		}
		key, value, _ := strings.Cut(rest[:end], ">")
		rest = strings.TrimPrefix(rest[end:], "</parameter>")
		key = strings.TrimSpace(key)
		value = strings.TrimPrefix(value, "\n")
		value = strings.TrimSuffix(value, "\n")
		if _, seen := vals[key]; !seen {
			keys = append(keys, key)
		}
		vals[key] = xmlValue(value, types[name][key])
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.Write(vals[k])
	}
	b.WriteByte('}')
	return name, b.Bytes()
}

// glmCall reads a glm45 call's body, NAME then <arg_key>KEY</arg_key>
// <arg_value>VALUE</arg_value> pairs (a value ends at its close tag, as
// vLLM's parser reads it, whatever tags it holds; one cut short at the
// next key or at the end), into the name and the arguments as a JSON
// object (glmValue); a key given twice keeps its last value.
func glmCall(body string, types map[string]map[string]string) (string, json.RawMessage) {
	name, rest, _ := strings.Cut(body, "<arg_key>")
	name = strings.TrimSpace(name)
	var pairs [][2]string
	for rest != "" && len(pairs) < maxToolArgs {
		key, after, _ := strings.Cut(rest, "</arg_key>")
		_, value, _ := strings.Cut(after, "<arg_value>")
		var closed bool
		value, rest, closed = strings.Cut(value, "</arg_value>")
		if i := strings.Index(value, "<arg_key>"); i >= 0 && !closed { // cut short
			value, rest = value[:i], value[i+len("<arg_key>"):]
		} else if _, next, found := strings.Cut(rest, "<arg_key>"); found {
			rest = next
		} else {
			rest = ""
		}
		k := strings.TrimSpace(key)
		pairs = append(pairs, [2]string{k, string(glmValue(value, types[name][k]))})
	}
	return name, jsonObject(pairs)
}

// glmValue is a glm45 argument's text as JSON, as vLLM's glm45 parser
// reads it: the text (trimmed) for a string parameter, else the JSON it
// is (or Python's True, False and None, which its literal_eval fallback
// reads), else the text.
func glmValue(text, typ string) json.RawMessage {
	t := strings.TrimSpace(text)
	if typ != "string" {
		if json.Valid([]byte(t)) {
			return json.RawMessage(t)
		}
		if v, ok := map[string]string{"True": "true", "False": "false", "None": "null"}[t]; ok {
			return json.RawMessage(v)
		}
	}
	return jsonString(t)
}

// miniMaxCall reads a minimax_m2 invoke (the text after "<invoke"): its
// name attribute and its <parameter name="KEY">VALUE</parameter>s (a
// value ends at its close tag, whatever tags it holds; one cut short at
// the next parameter or at the end), each value trimmed and typed by the
// tool's schema as qwen_xml's (xmlValue).
func miniMaxCall(invoke string, types map[string]map[string]string) (string, json.RawMessage) {
	name, rest := xmlAttr(invoke, "name")
	var pairs [][2]string
	for len(pairs) < maxToolArgs {
		i := strings.Index(rest, "<parameter")
		if i < 0 {
			break
		}
		key, after := xmlAttr(rest[i+len("<parameter"):], "name")
		end := len(after)
		if j := strings.Index(after, "</parameter>"); j >= 0 {
			end = j
		} else if j := strings.Index(after, "<parameter"); j >= 0 { // cut short
			end = j
		}
		value := strings.TrimSpace(after[:end]) // vLLM strips a value
		rest = strings.TrimPrefix(after[end:], "</parameter>")
		pairs = append(pairs, [2]string{key, string(xmlValue(value, types[name][key]))})
	}
	return name, jsonObject(pairs)
}

// xmlAttr reads a tag's attribute attr="VALUE" (or 'VALUE', or unquoted) from s,
// the text after the tag's name, and returns its value and the text after
// the tag's '>'.
func xmlAttr(s, attr string) (value, rest string) {
	head, rest, _ := strings.Cut(s, ">")
	_, v, found := strings.Cut(head, attr+"=")
	if !found {
		return "", rest
	}
	v = strings.TrimSpace(v)
	for _, quote := range []string{`"`, "'"} {
		if q, ok := strings.CutPrefix(v, quote); ok {
			v, _, _ = strings.Cut(q, quote)
			break
		}
	}
	return strings.TrimSpace(v), rest
}

// maxToolArgs bounds the arguments one call may have.
const maxToolArgs = 1024

// jsonObject writes pairs of a key and a JSON value as a JSON object, in
// their order; a key given twice keeps its last value, at its first
// place.
func jsonObject(pairs [][2]string) json.RawMessage {
	var keys []string
	vals := map[string]string{}
	for _, p := range pairs {
		if _, seen := vals[p[0]]; !seen {
			keys = append(keys, p[0])
		}
		vals[p[0]] = p[1]
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.WriteString(vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// xmlValue is a qwen_xml parameter's text as the JSON value its schema
// type (typ: "" when the tool's schema does not give one) says, as
// vLLM's qwen3_coder parser reads it: null for "null" (but for a string
// parameter, whose text it may be); a string for string types and
// untyped parameters; an integer or a number where the text is one; true
// or false for booleans ("true", any case, is true); objects and arrays
// (and other types) as the JSON the text is. Text that is not the type's
// stays a string.
func xmlValue(text, typ string) json.RawMessage {
	if typ != "string" && strings.EqualFold(strings.TrimSpace(text), "null") {
		return json.RawMessage("null")
	}
	t := strings.TrimSpace(text)
	switch {
	case typ == "" || typ == "string":
	case typ == "integer":
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			return json.RawMessage(strconv.FormatInt(n, 10)) // "+5" and "007" are 5 and 7, as Python's int reads them
		}
	case typ == "number":
		if f, err := strconv.ParseFloat(t, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			b, _ := json.Marshal(f)
			return b
		}
	case typ == "boolean":
		switch strings.ToLower(t) {
		case "true":
			return json.RawMessage("true")
		case "false":
			return json.RawMessage("false")
		}
	default: // object, array
		if json.Valid([]byte(t)) {
			return json.RawMessage(t)
		}
	}
	return jsonString(text)
}

// parameterTypes reads each tool's parameters' JSON types (the first of
// a list that is not "null"), for the qwen_xml parser.
func parameterTypes(tools []constrain.Tool) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range tools {
		var schema struct {
			Properties map[string]struct {
				Type json.RawMessage `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.Parameters, &schema) != nil {
			continue
		}
		types := map[string]string{}
		for k, p := range schema.Properties {
			var one string
			var list []string
			if json.Unmarshal(p.Type, &one) == nil {
				types[k] = one
			} else if json.Unmarshal(p.Type, &list) == nil {
				for _, x := range list {
					if x != "null" {
						types[k] = x
						break
					}
				}
			}
		}
		out[t.Name] = types
	}
	return out
}

// callID is a new tool call id: OpenAI's form, "call_" and 24 letters and
// digits; for mistral's templates, which refuse any other, nine.
func callID(f ToolFormat) string {
	if f.isMistral() {
		return rand.Text()[:9]
	}
	return "call_" + rand.Text()[:24]
}
