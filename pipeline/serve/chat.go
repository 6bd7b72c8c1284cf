package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// POST /v1/chat/completions: messages rendered through the model's chat
// template, answered whole or streamed.

type chatResponseMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent string  `json:"reasoning_content,omitempty"`
	Refusal          *string `json:"refusal"`
}

type chatChoice struct {
	Index        int                 `json:"index"`
	Message      chatResponseMessage `json:"message"`
	Logprobs     *chatLogprobs       `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatDelta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

// chatCompletions answers POST /v1/chat/completions.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.chatPlan(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	var stream func([]*Stream, string, int64)
	if req.Stream {
		stream = func(streams []*Stream, id string, created int64) {
			s.streamChat(r.Context(), w, &req, p, streams, id, created)
		}
	}
	s.answer(w, r, x, p, "chatcmpl-", stream, func(choices []*choice, u *usage, id string, created int64) any {
		resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: s.o.ModelName, Usage: u}
		for i, c := range choices {
			msg := chatResponseMessage{Role: "assistant", Content: c.text.String()}
			if sp := p.splitter(); sp != nil {
				r, ct := sp.feed(msg.Content)
				r2, ct2 := sp.flush()
				msg.ReasoningContent, msg.Content = r+r2, ct+ct2
			}
			cc := chatChoice{Index: i, Message: msg, FinishReason: finishReason(c.finish)}
			if p.reqs[i].Logprobs >= 0 {
				cc.Logprobs = s.chatLogprobsOf(c, c.logprobs)
			}
			resp.Choices = append(resp.Choices, cc)
		}
		return resp
	})
}

// chatPlan validates a chat request, renders and encodes its messages,
// and plans its sequences.
func (s *Server) chatPlan(ctx context.Context, req *chatRequest) (*plan, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	maxParam, maxTokens := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxParam, maxTokens = "max_completion_tokens", req.MaxCompletionTokens
	}
	o, n, err := req.check(maxParam, maxTokens)
	if err != nil {
		return nil, err
	}
	if err := req.unsupported(); err != nil {
		return nil, err
	}
	logprobs := -1
	if req.Logprobs {
		logprobs = 0
	}
	if req.TopLogprobs != nil {
		k := *req.TopLogprobs
		switch {
		case k < 0 || k > maxLogprobs:
			return nil, badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxLogprobs, k)
		case !req.Logprobs && k > 0:
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if req.Logprobs {
			logprobs = k
		}
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	msgs, err := chatMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	extra := map[string]any{}
	for k, v := range req.ChatTemplateKwargs {
		extra[k] = v
	}
	if isSet(req.ReasoningEffort) {
		var effort string
		if json.Unmarshal(req.ReasoningEffort, &effort) != nil {
			return nil, badRequest("reasoning_effort", "reasoning_effort must be a string")
		}
		extra["reasoning_effort"] = effort
	}
	text, ids, err := s.renderChat(ctx, msgs, extra)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, badRequest("messages", "the rendered messages have no tokens")
	}
	p, err := s.plan([][]int{ids}, o, n, req.IgnoreEOS, logprobs, "messages", maxParam)
	if err != nil {
		return nil, err
	}
	if r := s.o.Reasoning; r != nil {
		p.reasoning, p.thinking = r, promptOpens(*r, text)
	}
	return p, nil
}

// unsupported refuses the chat fields tputool cannot honour when they ask
// for something.
func (req *chatRequest) unsupported() error {
	noOp := func(raw json.RawMessage, ok ...string) bool {
		if !isSet(raw) {
			return true
		}
		for _, v := range ok {
			if string(raw) == v {
				return true
			}
		}
		return false
	}
	switch {
	case !noOp(req.Tools, "[]"):
		return badRequest("tools", "tool calling is not supported by tputool serve")
	case !noOp(req.Functions, "[]"):
		return badRequest("functions", "function calling is not supported by tputool serve")
	case !noOp(req.ToolChoice, `"none"`, `"auto"`):
		return badRequest("tool_choice", "tool calling is not supported by tputool serve (tool_choice may only be \"none\" or \"auto\")")
	case !noOp(req.FunctionCall, `"none"`, `"auto"`):
		return badRequest("function_call", "function calling is not supported by tputool serve")
	case !noOp(req.Audio):
		return badRequest("audio", "audio output is not supported")
	case !noOp(req.Prediction):
		return badRequest("prediction", "predicted outputs are not supported")
	case !noOp(req.WebSearchOptions):
		return badRequest("web_search_options", "web search is not supported")
	case !noOp(req.Moderation):
		return badRequest("moderation", "moderation is not supported")
	}
	if isSet(req.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return badRequest("response_format", "only response_format {\"type\": \"text\"} is supported (no JSON mode or schemas)")
		}
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return badRequest("modalities", "only the text modality is supported, got %q", m)
		}
	}
	return nil
}

// chatMessages turns the request's messages into the template's: text
// content parts are joined with newlines; a developer message is a
// system message (templates know only the latter).
func chatMessages(in []chatMessage) ([]chat.Message, error) {
	out := make([]chat.Message, 0, len(in))
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "developer":
			role = "system"
		case "system", "user", "assistant", "tool":
		case "":
			return nil, badRequest(param+".role", "%s has no role", param)
		default:
			return nil, badRequest(param+".role", "%s has the unknown role %q", param, m.Role)
		}
		if isSet(m.Audio) {
			return nil, badRequest(param+".audio", "audio content is not supported")
		}
		content, err := messageText(m.Content, param)
		if err != nil {
			return nil, err
		}
		cm := chat.Message{Role: role, Content: content}
		extra := map[string]any{}
		if m.Name != "" {
			extra["name"] = m.Name
		}
		if m.ToolCallID != "" {
			extra["tool_call_id"] = m.ToolCallID
		}
		if m.ReasoningContent != "" {
			extra["reasoning_content"] = m.ReasoningContent
		}
		for key, raw := range map[string]json.RawMessage{"tool_calls": m.ToolCalls, "function_call": m.FunctionCall} {
			if isSet(raw) {
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					return nil, badRequest(param+"."+key, "%s.%s: %v", param, key, err)
				}
				extra[key] = v
			}
		}
		if len(extra) > 0 {
			cm.Extra = extra
		}
		out = append(out, cm)
	}
	return out, nil
}

// renderChat renders msgs with the chat template (adding the generation
// prompt) and encodes them, as `tputool chat` does.
func (s *Server) renderChat(ctx context.Context, msgs []chat.Message, extra map[string]any) (string, []int, error) {
	if s.o.Template == nil {
		return "", nil, badRequest("messages", "the model %q has no chat template (tokenizer_config.json has no chat_template): use /v1/completions", s.o.ModelName)
	}
	if s.o.Tokenizer == nil {
		return "", nil, badRequest("messages", "this server has no tokenizer to encode chat messages")
	}
	text, err := s.o.Template.Render(ctx, chat.Input{Messages: msgs, AddGenerationPrompt: true, Extra: extra})
	if err != nil {
		return "", nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	ids, err := s.o.Tokenizer.Encode(text, false)
	if err != nil {
		return "", nil, badRequest("messages", "encoding the rendered messages: %v", err)
	}
	return text, ids, nil
}

// messageText reads a message's content: a string, null, or an array of
// parts of which only text parts are supported.
func messageText(raw json.RawMessage, param string) (string, error) {
	if !isSet(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param+".content", "%s.content must be a string or an array of content parts", param)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s.content[%d].type", param, j), "only text content parts are supported, got %q", p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// streamChat streams the choices as chat.completion.chunk events: first a
// chunk with each choice's role, then its text as it becomes final, the
// last one with its finish reason.
func (s *Server) streamChat(ctx context.Context, w http.ResponseWriter, req *chatRequest, p *plan, streams []*Stream, id string, created int64) {
	out := startSSE(w)
	chunk := func(cs ...chatChunkChoice) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.o.ModelName, Choices: cs}
	}
	for i := range streams {
		if err := out.send(chunk(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: new("")}})); err != nil {
			return
		}
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	splitters := make([]*splitter, len(streams))
	for i := range splitters {
		splitters[i] = p.splitter()
	}
	s.streamEvents(ctx, out, p, streams, withUsage, func(i int, c *choice, ev Event, lps []Event, logprobs bool) any {
		cc := chatChunkChoice{Index: i}
		if sp := splitters[i]; sp != nil {
			r, ct := sp.feed(ev.Text)
			if ev.FinishReason != "" {
				r2, ct2 := sp.flush()
				r, ct = r+r2, ct+ct2
			}
			if r != "" {
				cc.Delta.ReasoningContent = new(r)
			}
			if ct != "" {
				cc.Delta.Content = new(ct)
			}
		} else if ev.Text != "" {
			cc.Delta.Content = new(ev.Text)
		}
		if logprobs {
			cc.Logprobs = s.chatLogprobsOf(c, lps)
		}
		if ev.FinishReason != "" {
			cc.FinishReason = new(finishReason(ev.FinishReason))
		}
		return chunk(cc)
	}, func(u *usage) any {
		last := chunk()
		last.Choices = []chatChunkChoice{}
		last.Usage = u
		return last
	})
}
