package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tputool/tputool/pipeline/generate"
)

// POST /v1/messages: Anthropic's Messages API over the same engine. The
// request is translated into a chat completion request (system prompt,
// messages with text, tool_use and tool_result blocks, tools, stop
// sequences, sampling) and planned as one; the answer comes back in
// Anthropic's shapes: content blocks (thinking, text, tool_use), a
// stop_reason, usage, and for stream: true the event stream
// (message_start, content_block_start/delta/stop, message_delta,
// message_stop). POST /v1/messages/count_tokens counts the tokens of the
// prompt a request renders.

// anthropicPath reports whether path is Anthropic's (/v1/messages and
// below): the API key may come as x-api-key, and errors have Anthropic's
// shape.
func anthropicPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

// anthropicRequest is POST /v1/messages (and count_tokens).
type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	Messages      []anthropicMessage `json:"messages"`
	System        json.RawMessage    `json:"system"`
	StopSequences []string           `json:"stop_sequences"`
	Stream        bool               `json:"stream"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	Tools         []anthropicTool    `json:"tools"`
	ToolChoice    *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	Thinking *struct {
		Type         string          `json:"type"`
		BudgetTokens *int            `json:"budget_tokens"` // accepted; the thought ends when the model ends it
		Display      json.RawMessage `json:"display"`       // ignored: a thought is always shown
	} `json:"thinking"`
	Metadata     json.RawMessage `json:"metadata"`      // ignored
	ServiceTier  json.RawMessage `json:"service_tier"`  // ignored
	CacheControl json.RawMessage `json:"cache_control"` // ignored: no prompt cache to mark
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	Type         string          `json:"type"`          // custom tools only
	CacheControl json.RawMessage `json:"cache_control"` // ignored: no prompt cache to mark
	Strict       json.RawMessage `json:"strict"`        // ignored
}

// anthropicBlock is a content block of a request or an answer.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"` // a tool_result's
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type anthropicResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// messages answers POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req anthropicRequest
	if err := decodeBody(r, &req); err != nil {
		writeAnthropicError(w, err)
		return
	}
	creq, err := req.chatRequest()
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	think, _ := req.thinks() // checked by chatRequest
	p, err := s.chatPlan(r.Context(), creq)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	x.promptTokens = p.promptTokens
	streams, cancel, err := s.submit(r.Context(), p.reqs)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	defer cancel()
	defer func() { x.completionTokens = completionTokens(streams) }()
	id := "msg_" + rand.Text()
	if req.Stream {
		s.streamMessages(r.Context(), w, p, streams, id, think)
		return
	}
	choices := collectChoices(streams, p)
	if err := outcome(r.Context(), choices); err != nil {
		writeAnthropicError(w, err)
		return
	}
	c := choices[0]
	a := newAnswer(p, think)
	a.feed(c.text.String())
	blocks, stop, seq := a.end(c.finish, c.stop)
	if len(blocks) == 0 {
		blocks = []anthropicBlock{{Type: "text", Text: new("")}}
	}
	writeJSON(w, http.StatusOK, anthropicResponse{
		ID: id, Type: "message", Role: "assistant", Model: s.o.ModelName, Content: blocks, StopReason: &stop, StopSequence: seq,
		Usage: anthropicUsage{InputTokens: p.promptTokens, OutputTokens: completionTokens(streams)},
	})
}

// countTokens answers POST /v1/messages/count_tokens: {"input_tokens":
// N}, the tokens of the prompt /v1/messages would render of the same
// request (system, tools and messages), planned as it would be and not
// run. max_tokens and stream are accepted and ignored. For a model that
// only gives embeddings (ServerOptions.EmbeddingsOnly) it is a 400, as
// /v1/messages is: it counts the prompt of a request the model cannot
// answer.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req anthropicRequest
	if err := decodeBody(r, &req); err != nil {
		writeAnthropicError(w, err)
		return
	}
	creq, err := req.chat()
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	creq.MaxTokens = nil
	p, err := s.chatPlan(r.Context(), creq)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	x.promptTokens = p.promptTokens
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": p.promptTokens})
}

// chatRequest translates the request into a chat completion request.
func (req *anthropicRequest) chatRequest() (*chatRequest, error) {
	if req.MaxTokens == nil {
		return nil, badRequest("max_tokens", "max_tokens is required")
	}
	return req.chat()
}

// chat is chatRequest without the check of max_tokens, which
// count_tokens does not need.
func (req *anthropicRequest) chat() (*chatRequest, error) {
	c := &chatRequest{continueFinal: true}
	c.Model, c.MaxTokens, c.Temperature, c.TopP, c.TopK = req.Model, req.MaxTokens, req.Temperature, req.TopP, req.TopK
	if len(req.StopSequences) > 0 {
		c.Stop, _ = json.Marshal(req.StopSequences)
	}
	if isSet(req.System) {
		text, err := blocksText(req.System, "system")
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, chatMessage{Role: "system", Content: jsonString(text)})
	}
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(param+".role", "%s.role must be user or assistant, got %q", param, m.Role)
		}
		var blocks []anthropicBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			blocks = []anthropicBlock{{Type: "text", Text: &s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, badRequest(param+".content", "%s.content must be a string or an array of content blocks", param)
		}
		var text, thought []string
		var calls []map[string]any
		for j, b := range blocks {
			bp := fmt.Sprintf("%s.content[%d]", param, j)
			switch b.Type {
			case "text":
				if b.Text != nil {
					text = append(text, *b.Text)
				}
			case "thinking":
				// Kept only beside a tool_use (below): a tool-use loop's
				// thought goes back to the model, as Anthropic's API and
				// harmony (GPT-OSS's analysis before a call) keep it.
				if b.Thinking != nil {
					thought = append(thought, *b.Thinking)
				}
			case "redacted_thinking":
			case "tool_use":
				// The template gets the input as an object (Qwen's and
				// Llama's iterate arguments.items() or write it | tojson).
				args := b.Input
				if !isSet(args) {
					args = json.RawMessage("{}")
				}
				if !bytes.HasPrefix(bytes.TrimSpace(args), []byte("{")) {
					return nil, badRequest(bp+".input", "%s.input must be a JSON object", bp)
				}
				calls = append(calls, map[string]any{"id": b.ID, "type": "function",
					"function": map[string]any{"name": b.Name, "arguments": args}})
			case "tool_result":
				result, err := blocksText(b.Content, bp+".content")
				if err != nil {
					return nil, err
				}
				if b.IsError {
					result = "Error: " + result
				}
				c.Messages = append(c.Messages, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: jsonString(result)})
			default:
				return nil, badRequest(bp+".type", "content blocks of type %q are not supported (text, tool_use and tool_result are)", b.Type)
			}
		}
		if len(text) == 0 && len(calls) == 0 {
			continue
		}
		cm := chatMessage{Role: m.Role, Content: jsonString(strings.Join(text, "\n"))}
		if len(calls) > 0 {
			cm.ToolCalls, _ = json.Marshal(calls)
			cm.Reasoning = strings.Join(thought, "\n")
		}
		c.Messages = append(c.Messages, cm)
	}
	if len(req.Tools) > 0 {
		var tools []map[string]any
		for i, t := range req.Tools {
			if t.Type != "" && t.Type != "custom" {
				return nil, badRequest(fmt.Sprintf("tools[%d].type", i), "server tools (%s) are not supported", t.Type)
			}
			fn := map[string]any{"name": t.Name, "description": t.Description}
			if isSet(t.InputSchema) {
				fn["parameters"] = t.InputSchema
			}
			tools = append(tools, map[string]any{"type": "function", "function": fn})
		}
		c.Tools, _ = json.Marshal(tools)
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "":
		case "none":
			c.ToolChoice = json.RawMessage(`"none"`)
		case "any":
			c.ToolChoice = json.RawMessage(`"required"`)
		case "tool":
			if tc.Name == "" {
				return nil, badRequest("tool_choice.name", "tool_choice of type tool needs the tool's name")
			}
			c.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return nil, badRequest("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got %q", tc.Type)
		}
		if tc.Type != "none" && tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
			c.ParallelToolCalls = json.RawMessage("false")
		}
	}
	// Anthropic's models think only when asked: without thinking (or
	// with it disabled) the template is told so, and a thought the model
	// writes anyway is left out of the answer (answer's think).
	think, err := req.thinks()
	if err != nil {
		return nil, err
	}
	c.ChatTemplateKwargs = map[string]any{"enable_thinking": think}
	return c, nil
}

// thinks reports whether the request asks for thinking: type enabled or
// adaptive (the model decides how long, as every thought here); absent
// or disabled, it does not.
func (req *anthropicRequest) thinks() (bool, error) {
	th := req.Thinking
	if th == nil {
		return false, nil
	}
	switch th.Type {
	case "enabled", "adaptive":
		return true, nil
	case "disabled":
		return false, nil
	}
	return false, badRequest("thinking.type", "thinking.type must be enabled, adaptive or disabled, got %q", th.Type)
}

// blocksText reads a string or an array of text blocks.
func blocksText(raw json.RawMessage, param string) (string, error) {
	if !isSet(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", badRequest(param, "%s must be a string or an array of text blocks", param)
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", badRequest(param, "%s holds a %q block: only text is supported there", param, b.Type)
		}
		parts = append(parts, *b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// answer turns a generated answer into content blocks, as it arrives:
// reasoning (a thinking block), text, and at the end the tool calls.
type answer struct {
	sp       textSplitter
	tp       *toolParser
	thinking strings.Builder
	text     strings.Builder
}

// newAnswer starts an answer of p; without think, the reasoning a model
// writes anyway (one whose template has no switch) is left out.
func newAnswer(p *plan, think bool) *answer {
	a := &answer{sp: p.splitter(), tp: p.toolParser()}
	if a.tp != nil {
		a.tp.objects = true // tool_use input is an object
	}
	if a.sp != nil && !think {
		a.sp = unthought{a.sp}
	}
	return a
}

// unthought splits text as its splitter does and drops the reasoning.
type unthought struct{ textSplitter }

func (u unthought) feed(text string) (reasoning, content string) {
	_, content = u.textSplitter.feed(text)
	return "", content
}

func (u unthought) flush() (reasoning, content string) {
	_, content = u.textSplitter.flush()
	return "", content
}

// feed splits the next piece into reasoning and text (text held back
// when it may be a tool call) and returns them.
func (a *answer) feed(piece string) (reasoning, text string) {
	reasoning, text = "", piece
	if a.sp != nil {
		reasoning, text = a.sp.feed(piece)
	}
	if a.tp != nil {
		text = a.tp.feed(text)
	}
	a.thinking.WriteString(reasoning)
	a.text.WriteString(text)
	return reasoning, text
}

// finishPieces ends the splitter and the parser: the last reasoning and
// text, and the tool calls.
func (a *answer) finishPieces() (reasoning, text string, calls []toolCall) {
	if a.sp != nil {
		var t string
		reasoning, t = a.sp.flush()
		if a.tp != nil {
			t = a.tp.feed(t)
		}
		text = t
	}
	if a.tp != nil {
		var rest string
		calls, rest = a.tp.finish()
		text += rest
	}
	a.thinking.WriteString(reasoning)
	a.text.WriteString(text)
	return reasoning, text, calls
}

// end returns the whole answer's blocks, its stop reason and the stop
// sequence that ended it.
func (a *answer) end(finish, stop string) ([]anthropicBlock, string, *string) {
	_, _, calls := a.finishPieces()
	var blocks []anthropicBlock
	if t := a.thinking.String(); t != "" {
		blocks = append(blocks, anthropicBlock{Type: "thinking", Thinking: new(t), Signature: new("")})
	}
	// Whitespace before a call (a tokenizer's leading space) is no answer.
	if t := a.text.String(); t != "" && (len(calls) == 0 || strings.TrimSpace(t) != "") {
		blocks = append(blocks, anthropicBlock{Type: "text", Text: new(t)})
	}
	for _, c := range calls {
		blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: toolUseID(), Name: c.Name, Input: json.RawMessage(c.Arguments)})
	}
	reason, seq := stopReason(finish, stop, len(calls) > 0)
	return blocks, reason, seq
}

func toolUseID() string { return "toolu_" + rand.Text()[:24] }

// stopReason is Anthropic's name for a sequence's finish (generate's
// reason), with the stop sequence for "stop_sequence".
func stopReason(finish, stop string, calls bool) (string, *string) {
	switch {
	case finish == generate.FinishLength:
		return "max_tokens", nil
	case calls:
		return "tool_use", nil
	case finish == generate.FinishStopString:
		return "stop_sequence", &stop
	}
	return "end_turn", nil
}

// streamMessages streams the answer as Anthropic's events: a block is
// opened when its first text arrives (thinking, then text), closed when
// the next kind starts or the answer ends; tool calls come last, one
// tool_use block each with its input as one input_json_delta.
func (s *Server) streamMessages(ctx context.Context, w http.ResponseWriter, p *plan, streams []*Stream, id string, think bool) {
	out := startSSE(w)
	send := func(typ string, v map[string]any) bool {
		v["type"] = typ
		return out.sendEvent(typ, v) == nil
	}
	msg := anthropicResponse{ID: id, Type: "message", Role: "assistant", Model: s.o.ModelName, Content: []anthropicBlock{},
		Usage: anthropicUsage{InputTokens: p.promptTokens}}
	if !send("message_start", map[string]any{"message": msg}) {
		return
	}
	a := newAnswer(p, think)
	index, open := -1, "" // the open block
	// closeBlock ends the open block; a thinking block's signature (empty:
	// nothing signs a local thought, as in the whole answer) comes first.
	closeBlock := func() bool {
		if open == "thinking" && !send("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "signature_delta", "signature": ""}}) {
			return false
		}
		return send("content_block_stop", map[string]any{"index": index})
	}
	block := func(kind, piece string) bool {
		if piece == "" {
			return true
		}
		if open != kind {
			if open != "" && !closeBlock() {
				return false
			}
			index, open = index+1, kind
			start := anthropicBlock{Type: kind, Text: new("")}
			if kind == "thinking" {
				start = anthropicBlock{Type: kind, Thinking: new("")}
			}
			if !send("content_block_start", map[string]any{"index": index, "content_block": start}) {
				return false
			}
		}
		delta := map[string]any{"type": "text_delta", "text": piece}
		if kind == "thinking" {
			delta = map[string]any{"type": "thinking_delta", "thinking": piece}
		}
		return send("content_block_delta", map[string]any{"index": index, "delta": delta})
	}
	finish, stop := "", ""
	for se := range merge(ctx, streams) {
		ev := se.ev
		if ev.FinishReason == FinishError || ev.FinishReason == FinishCancelled {
			err := ev.Err
			if err == nil {
				err = ErrClosed
			}
			send("error", map[string]any{"error": map[string]any{"type": "api_error", "message": fmt.Sprintf("generation failed: %v", err)}})
			return
		}
		r, t := a.feed(ev.Text)
		if !block("thinking", r) || !block("text", t) {
			return
		}
		if ev.FinishReason != "" {
			finish, stop = ev.FinishReason, ev.StopString
		}
	}
	if ctx.Err() != nil {
		return
	}
	r, t, calls := a.finishPieces()
	if !block("thinking", r) || !block("text", t) {
		return
	}
	if open != "" && !closeBlock() {
		return
	}
	for _, c := range calls {
		index++
		start := anthropicBlock{Type: "tool_use", ID: toolUseID(), Name: c.Name, Input: json.RawMessage("{}")}
		if !send("content_block_start", map[string]any{"index": index, "content_block": start}) ||
			!send("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": c.Arguments}}) ||
			!send("content_block_stop", map[string]any{"index": index}) {
			return
		}
	}
	reason, seq := stopReason(finish, stop, len(calls) > 0)
	if !send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]any{"output_tokens": completionTokens(streams)}}) {
		return
	}
	send("message_stop", map[string]any{})
}

// statusOverloaded is Anthropic's status for an API that cannot take a
// request now (overloaded_error), which its clients retry.
const statusOverloaded = 529

// writeAnthropicError answers err in Anthropic's error shape, with
// Anthropic's types; a server that cannot take the request now (503:
// shutting down) answers 529 overloaded_error, and a 429 (full queue)
// carries Retry-After as writeError's does.
func writeAnthropicError(w http.ResponseWriter, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	status := e.Status
	if status == http.StatusServiceUnavailable {
		status = statusOverloaded
	}
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 405: "invalid_request_error",
		413: "request_too_large", 429: "rate_limit_error", statusOverloaded: "overloaded_error"}[status]
	if typ == "" {
		typ = "api_error"
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	msg := e.Message
	if e.Param != "" && !strings.Contains(msg, e.Param) {
		msg = e.Param + ": " + msg
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
