package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// Tool calls. A model calls a tool by writing markup its chat template
// taught it; the server renders the request's tools through the template
// (as transformers passes them), parses the calls out of the answer, and
// answers with tool_calls (finish_reason "tool_calls") instead of the
// markup, whole or streamed. The format follows the template:
//
//   - hermes (Qwen2.5/3, Hermes, most fine-tunes): <tool_call>{"name":
//     …, "arguments": {…}}</tool_call>, any number of them;
//   - mistral: [TOOL_CALLS] followed by a JSON array of {"name",
//     "arguments"} (or one object);
//   - llama3 (Llama 3.1+ JSON calling): the whole answer is one JSON
//     object {"name": …, "parameters": {…}}, optionally after
//     <|python_tag|>.
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
	ToolsMistral ToolFormat = "mistral"
	ToolsLlama3  ToolFormat = "llama3"
	// ToolsHarmony is GPT-OSS's: calls are harmony messages to
	// functions.NAME, which the harmony splitter re-emits as hermes
	// markup for the parser.
	ToolsHarmony ToolFormat = "harmony"
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
	case strings.Contains(src, "<tool_call>"):
		return ToolsHermes
	case strings.Contains(src, "[TOOL_CALLS]"):
		return ToolsMistral
	case strings.Contains(src, "<|python_tag|>") || (strings.Contains(src, "ipython") && strings.Contains(src, "\"parameters\"")):
		return ToolsLlama3
	}
	return ""
}

// toolCall is one parsed call.
type toolCall struct {
	Name      string
	Arguments string // JSON text
}

// maxToolCalls bounds the calls one answer may make.
const maxToolCalls = 64

// toolParser finds tool calls in an answer that arrives in pieces:
// content before the first call's markup streams on; from the markup on,
// the text is held until the answer ends, then parsed. Text that turns
// out not to be a call is returned as content, unchanged.
type toolParser struct {
	format ToolFormat
	held   strings.Builder
	hold   bool // the markup (or, llama3, a leading '{') was seen
	any    bool // non-space content was emitted
	tail   string
}

func newToolParser(f ToolFormat) *toolParser {
	if f == "" {
		return nil
	}
	if f == ToolsHarmony {
		f = ToolsHermes // the harmony splitter writes the calls as hermes markup
	}
	return &toolParser{format: f}
}

// marker is the text that opens a call.
func (p *toolParser) marker() string {
	switch p.format {
	case ToolsHermes:
		return "<tool_call>"
	case ToolsMistral:
		return "[TOOL_CALLS]"
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
	calls = parseToolCalls(p.format, text)
	if len(calls) == 0 {
		return nil, text
	}
	return calls, ""
}

// parseToolCalls parses the calls in text (the markup onwards) in format.
func parseToolCalls(f ToolFormat, text string) []toolCall {
	var calls []toolCall
	add := func(raw json.RawMessage) bool {
		var c struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(raw, &c) != nil || c.Name == "" {
			return false
		}
		args := c.Arguments
		if len(args) == 0 {
			args = c.Parameters
		}
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		var s string // arguments sent as a JSON string stay that string
		if json.Unmarshal(args, &s) == nil {
			args = json.RawMessage(s)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, args) != nil || compact.Len() == 0 || compact.Bytes()[0] != '{' {
			return false // arguments are an object (Anthropic's input must be)
		}
		calls = append(calls, toolCall{Name: c.Name, Arguments: compact.String()})
		return len(calls) < maxToolCalls
	}
	switch f {
	case ToolsHermes:
		for len(calls) < maxToolCalls {
			i := strings.Index(text, "<tool_call>")
			if i < 0 {
				break
			}
			text = text[i+len("<tool_call>"):]
			body := text
			if j := strings.Index(text, "</tool_call>"); j >= 0 {
				body, text = text[:j], text[j+len("</tool_call>"):]
			} else {
				text = ""
			}
			if !add(json.RawMessage(strings.TrimSpace(body))) {
				return nil
			}
		}
	case ToolsMistral:
		body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "[TOOL_CALLS]"))
		var list []json.RawMessage
		if json.Unmarshal([]byte(body), &list) != nil {
			list = []json.RawMessage{json.RawMessage(body)}
		}
		for _, raw := range list {
			if !add(raw) {
				return nil
			}
		}
	case ToolsLlama3:
		body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
		if !add(json.RawMessage(body)) {
			return nil
		}
	}
	return calls
}

// callID is a new tool call id, as OpenAI's: "call_" and 24 letters.
func callID() string { return "call_" + rand.Text()[:24] }
