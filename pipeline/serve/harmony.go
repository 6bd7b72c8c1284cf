package serve

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// GPT-OSS answers in OpenAI's harmony format: messages of channels, each
// a header and a body between special tokens,
//
//	<|channel|>analysis<|message|>THOUGHT<|end|>
//	<|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
//
// The server decodes a harmony model's chat answers with the special
// tokens kept, and harmonySplitter turns them into the parts the API
// returns: the analysis channel is the reasoning, the final channel (and
// commentary addressed to no one) the content, and a commentary message
// to functions.NAME a tool call, re-emitted as hermes markup that the
// tool-call parser downstream reads. <|return|> and <|call|> end the
// sequence (they are end-of-sequence ids, whose text is not emitted).

// harmonyTokens are the markers of the format.
const (
	hChannel   = "<|channel|>"
	hMessage   = "<|message|>"
	hEnd       = "<|end|>"
	hStart     = "<|start|>"
	hCall      = "<|call|>"
	hReturn    = "<|return|>"
	hConstrain = "<|constrain|>"
)

// harmonySpecials are the markers, special tokens in GPT-OSS's tokenizer;
// harmonyFinal opens the answer's final message, where structured output
// starts.
var harmonySpecials = []string{hChannel, hMessage, hEnd, hStart, hCall, hReturn, hConstrain}

const harmonyFinal = hChannel + "final" + hMessage

// IsHarmony reports whether a chat template writes the harmony format.
func IsHarmony(t *chat.Template) bool {
	return t != nil && strings.Contains(t.Source(), hChannel) && strings.Contains(t.Source(), hMessage)
}

// maxHarmonyHeader bounds a header: text that runs longer without a
// <|message|> is no header, and is content.
const maxHarmonyHeader = 256

// harmonySplitter parses harmony text that arrives in pieces.
type harmonySplitter struct {
	header  bool   // reading a header (else a body)
	seen    bool   // a message has begun: text in a header is markup
	buf     string // the header so far, or body text held back (it may begin a marker)
	channel string
	to      string // the recipient: functions.NAME
	args    strings.Builder
}

func newHarmonySplitter() *harmonySplitter { return &harmonySplitter{header: true} }

// feed splits the next piece of text.
func (h *harmonySplitter) feed(text string) (reasoning, content string) {
	var rb, cb strings.Builder
	h.buf += text
	for h.buf != "" {
		if h.header {
			i := strings.Index(h.buf, hMessage)
			if i < 0 {
				if len(h.buf) > maxHarmonyHeader { // not harmony: plain content
					cb.WriteString(h.buf)
					h.buf, h.header, h.channel = "", false, "final"
				}
				break
			}
			h.parseHeader(h.buf[:i])
			h.seen = true
			h.buf, h.header = h.buf[i+len(hMessage):], false
			continue
		}
		// A body runs to the first marker that ends it.
		end, at := -1, ""
		for _, m := range []string{hEnd, hCall, hReturn, hStart, hChannel} {
			if i := strings.Index(h.buf, m); i >= 0 && (end < 0 || i < end) {
				end, at = i, m
			}
		}
		if end < 0 {
			keep := 0
			for _, m := range []string{hEnd, hCall, hReturn, hStart, hChannel} {
				keep = max(keep, heldBack(h.buf, m))
			}
			h.body(h.buf[:len(h.buf)-keep], &rb, &cb)
			h.buf = h.buf[len(h.buf)-keep:]
			break
		}
		h.body(h.buf[:end], &rb, &cb)
		h.closeMessage(&cb)
		h.buf, h.header = h.buf[end+len(at):], true
		if at == hChannel { // a header without <|start|>: its channel follows at once
			h.buf = hChannel + h.buf
		}
	}
	return rb.String(), cb.String()
}

// flush ends the text: a message cut short (or ended by <|call|> or
// <|return|>, whose text is not emitted) is closed.
func (h *harmonySplitter) flush() (reasoning, content string) {
	var rb, cb strings.Builder
	if h.header {
		// Text that never became a header is the answer, unless messages
		// came before it or it holds markup (an answer cut inside a header).
		if strings.TrimSpace(h.buf) != "" && !h.seen && !strings.Contains(h.buf, "<|") {
			cb.WriteString(h.buf)
		}
	} else {
		h.body(h.buf, &rb, &cb)
		h.closeMessage(&cb)
	}
	h.buf, h.header = "", true
	return rb.String(), cb.String()
}

// parseHeader reads a header: the channel and the recipient, in either
// order ("<|channel|>commentary to=functions.f <|constrain|>json" or
// " to=functions.f<|channel|>commentary json").
func (h *harmonySplitter) parseHeader(hd string) {
	h.channel, h.to = "", ""
	hd = strings.ReplaceAll(hd, hConstrain, " ")
	hd = strings.ReplaceAll(hd, hStart, " ")
	if i := strings.Index(hd, hChannel); i >= 0 {
		rest := hd[i+len(hChannel):]
		if f := strings.Fields(rest); len(f) > 0 {
			h.channel = f[0]
		}
		hd = hd[:i] + " " + rest
	}
	for _, f := range strings.Fields(hd) {
		if to, ok := strings.CutPrefix(f, "to="); ok {
			h.to = to
		}
	}
}

// body routes body text by channel.
func (h *harmonySplitter) body(text string, rb, cb *strings.Builder) {
	switch {
	case strings.HasPrefix(h.to, "functions."):
		h.args.WriteString(text)
	case h.channel == "analysis":
		rb.WriteString(text)
	case h.to != "" && h.channel != "final":
		// A message to another recipient (a built-in tool: browser.*,
		// python) is not the user's: vLLM drops it, as it does here.
	default: // final, commentary to no one (a preamble), anything else
		cb.WriteString(text)
	}
}

// closeMessage ends a message: a function call becomes hermes markup.
func (h *harmonySplitter) closeMessage(cb *strings.Builder) {
	if name, ok := strings.CutPrefix(h.to, "functions."); ok {
		args := strings.TrimSpace(h.args.String())
		if !json.Valid([]byte(args)) {
			b, _ := json.Marshal(args)
			args = string(b)
		}
		call, _ := json.Marshal(map[string]json.RawMessage{"name": jsonString(name), "arguments": json.RawMessage(args)})
		cb.WriteString("<tool_call>" + string(call) + "</tool_call>")
	}
	h.args.Reset()
	h.channel, h.to = "", ""
}

// continues primes the splitter with the prompt's last message when the
// prompt opened its body (a prefill after "<|channel|>final<|message|>"):
// the answer is that body's continuation, not a new header. A prompt
// whose last message is closed leaves the splitter as new.
func (h *harmonySplitter) continues(prompt string) {
	i := strings.LastIndex(prompt, hStart)
	if i < 0 || !strings.Contains(prompt[i:], hMessage) {
		return
	}
	h.feed(prompt[i:]) // the prompt's text, not the answer's
	h.buf = ""
	if h.header { // closed: nothing of the answer has begun
		h.seen = false
	}
}

// harmonyMessages readies a conversation for a harmony template
// (gpt-oss's chat_template.jinja), which reads an assistant message's
// earlier analysis from "thinking", not reasoning_content: it keeps the
// analysis of a tool call that no final answer follows yet and drops the
// others, as harmony's renderer and vLLM (auto_drop_analysis_messages)
// do. A call's message with content as well keeps its content only,
// since that template refuses both.
func harmonyMessages(msgs []chat.Message) []chat.Message {
	out := slices.Clone(msgs)
	for i, m := range out {
		r, _ := m.Extra["reasoning_content"].(string)
		if m.Role != "assistant" || r == "" {
			continue
		}
		if _, calls := m.Extra["tool_calls"]; calls && m.Content != "" {
			continue
		}
		out[i].Extra = maps.Clone(m.Extra)
		out[i].Extra["thinking"] = r
	}
	return out
}

// HarmonyReader reads a harmony answer as it arrives, for callers outside
// the server (the generate and chat commands): Feed and Flush return the
// reasoning (the analysis channel) and the content (the final channel;
// calls as hermes markup).
type HarmonyReader struct{ h *harmonySplitter }

// NewHarmonyReader starts an answer.
func NewHarmonyReader() *HarmonyReader { return &HarmonyReader{h: newHarmonySplitter()} }

// Feed reads the next piece of text (with its special tokens).
func (r *HarmonyReader) Feed(text string) (reasoning, content string) { return r.h.feed(text) }

// Flush ends the answer.
func (r *HarmonyReader) Flush() (reasoning, content string) { return r.h.flush() }
