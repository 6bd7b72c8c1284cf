package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tputool/tputool/pipeline/generate"
)

// POST /v1/responses: OpenAI's Responses API over the chat path, as a
// stateless server. The request (instructions, input items, function
// tools, tool_choice, text.format, reasoning.effort, sampling) is
// translated into a chat completion request and planned as one, so it
// renders through the same chat template, parses tool calls in the
// template's format, decodes under the same constraints and runs on the
// same scheduler. The answer comes back as a response object whose
// output items are reasoning, message and function_call items, or, with
// stream: true, as the Responses event stream (responses_stream.go).
// Nothing is stored: previous_response_id, conversation and background
// are refused.

// responsesRequest is POST /v1/responses.
type responsesRequest struct {
	Model        string          `json:"model"`
	Input        json.RawMessage `json:"input"`
	Instructions *string         `json:"instructions"`
	// Tools are function tools ({"type": "function", "name", ...},
	// flat, not nested under "function" as chat's).
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	Text              *struct {
		Format    json.RawMessage `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"` // accepted: the model says what it says
	} `json:"text"`
	Reasoning *struct {
		Effort          *string         `json:"effort"`
		Summary         json.RawMessage `json:"summary"`          // accepted: no summary is written
		GenerateSummary json.RawMessage `json:"generate_summary"` // the deprecated summary
		Context         json.RawMessage `json:"context"`          // accepted: the thought is the template's
		Mode            json.RawMessage `json:"mode"`
	} `json:"reasoning"`
	MaxOutputTokens *int     `json:"max_output_tokens"`
	Temperature     *float64 `json:"temperature"`
	TopP            *float64 `json:"top_p"`
	Stream          bool     `json:"stream"`
	// Truncation is "disabled" (the default: an input beyond the
	// context is a 400) or "auto" (the oldest turns are dropped).
	Truncation  *string  `json:"truncation"`
	Include     []string `json:"include"`
	TopLogprobs *int     `json:"top_logprobs"`

	// Refused when they ask for something: a stateless server has no
	// stored responses, conversations or prompts to refer to.
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
	ContextManagement  json.RawMessage `json:"context_management"`
	Moderation         json.RawMessage `json:"moderation"`

	// Accepted and ignored: nothing is stored (store), and bookkeeping
	// changes nothing a local model does. max_tool_calls bounds the
	// built-in tools' calls, of which there are none.
	Store                json.RawMessage `json:"store"`
	Metadata             json.RawMessage `json:"metadata"`
	User                 json.RawMessage `json:"user"`
	StreamOptions        json.RawMessage `json:"stream_options"`
	MaxToolCalls         json.RawMessage `json:"max_tool_calls"`
	PromptCacheKey       json.RawMessage `json:"prompt_cache_key"`
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	PromptCacheOptions   json.RawMessage `json:"prompt_cache_options"`
	SafetyIdentifier     json.RawMessage `json:"safety_identifier"`
	ServiceTier          json.RawMessage `json:"service_tier"`
	// ClientMetadata is Codex CLI's, on every request it sends.
	ClientMetadata    json.RawMessage `json:"client_metadata"`
	BackgroundOptions json.RawMessage `json:"background_options"`
}

// responses answers POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req responsesRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	// The model first, as on chat: a request for another one is a 404
	// whatever else it holds.
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	creq, err := req.chatRequest()
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := s.responsesPlan(r.Context(), &req, creq)
	if err != nil {
		writeError(w, responsesError(err))
		return
	}
	x.promptTokens = p.promptTokens
	streams, cancel, err := s.submit(r.Context(), p.reqs)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	defer func() { x.completionTokens = completionTokens(streams) }()
	resp := s.newResponse(&req, p)
	encrypted := slices.Contains(req.Include, "reasoning.encrypted_content")
	if req.Stream {
		s.streamResponse(r.Context(), w, p, encrypted, streams[0], resp)
		return
	}
	// The whole answer is built as the stream's is, without its events,
	// so both have the same items.
	out := newResponseOutput(p, encrypted, nil)
	out.logprob = s.responseLogprob(p)
	c := &choice{}
	for ev := range streams[0].Events {
		c.add(ev, false, false)
		out.feed(ev)
	}
	if err := outcome(r.Context(), []*choice{c}); err != nil {
		writeError(w, err)
		return
	}
	out.end(c.finish)
	s.finishResponse(resp, out, p.promptTokens, completionTokens(streams), c.finish)
	writeJSON(w, http.StatusOK, resp)
}

// chatRequest translates the request into a chat completion request,
// refusing what a stateless server of text cannot do.
func (req *responsesRequest) chatRequest() (*chatRequest, error) {
	if err := req.unsupported(); err != nil {
		return nil, err
	}
	c := &chatRequest{}
	c.Model, c.Temperature, c.TopP = req.Model, req.Temperature, req.TopP
	if n := req.MaxOutputTokens; n != nil {
		if *n <= 0 {
			return nil, badRequest("max_output_tokens", "max_output_tokens must be positive, got %d", *n)
		}
		c.MaxCompletionTokens = n
	}
	if req.Instructions != nil && *req.Instructions != "" {
		c.Messages = append(c.Messages, chatMessage{Role: "system", Content: jsonString(*req.Instructions)})
	}
	msgs, err := responsesInput(req.Input)
	if err != nil {
		return nil, err
	}
	c.Messages = append(c.Messages, msgs...)
	if c.Tools, err = responsesTools(req.Tools); err != nil {
		return nil, err
	}
	if c.ToolChoice, err = responsesToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	if req.ParallelToolCalls != nil {
		c.ParallelToolCalls, _ = json.Marshal(*req.ParallelToolCalls)
	}
	if req.Text != nil {
		if c.ResponseFormat, err = responsesFormat(req.Text.Format); err != nil {
			return nil, err
		}
	}
	if c.ResponseFormat != nil && len(req.Tools) > 0 {
		if mode, _, _ := toolChoice(c.ToolChoice); mode == "required" || mode == "function" {
			return nil, badRequest("text.format", "text.format cannot be combined with tool_choice %s: the answer is a tool call", string(req.ToolChoice))
		}
	}
	if rs := req.Reasoning; rs != nil && rs.Effort != nil {
		c.ReasoningEffort = jsonString(*rs.Effort)
	}
	if on, k := req.logprobs(); on {
		c.Logprobs, c.TopLogprobs = true, &k
	}
	return c, nil
}

// responseLogprob renders a message token's log-probability entry in
// the plan's answer (chat's shape: token, logprob, bytes, top_logprobs;
// each token's text after the one before it); nil when not asked.
func (s *Server) responseLogprob(p *plan) func(Event) any {
	if p.reqs[0].Logprobs < 0 {
		return nil
	}
	c := p.newChoice(0)
	return func(ev Event) any { return s.chatLogprobsOf(c, []Event{ev}).Content[0] }
}

// unsupported refuses the fields that ask for what tputool cannot do.
func (req *responsesRequest) unsupported() error {
	stateless := "this server is stateless and stores no responses: send the whole conversation as input"
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		return badRequest("previous_response_id", "previous_response_id is not supported: %s", stateless)
	case isSet(req.Conversation):
		return badRequest("conversation", "conversation is not supported: %s", stateless)
	case req.Background != nil && *req.Background:
		return badRequest("background", "background responses are not supported: %s", stateless)
	case isSet(req.Prompt):
		return badRequest("prompt", "stored prompt templates are not supported: send instructions and input")
	case isSet(req.ContextManagement) && string(req.ContextManagement) != "[]":
		return badRequest("context_management", "context_management (compaction) is not supported")
	case isSet(req.Moderation):
		return badRequest("moderation", "moderation is not supported")
	case req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > maxLogprobs):
		return badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxLogprobs, *req.TopLogprobs)
	case req.Truncation != nil && *req.Truncation != "auto" && *req.Truncation != "disabled":
		return badRequest("truncation", "truncation must be \"auto\" or \"disabled\", got %q", *req.Truncation)
	}
	return nil
}

// logprobs reports whether the request asks for its message's tokens'
// log-probabilities (include message.output_text.logprobs: top_logprobs
// alone only sets their alternatives, as OpenAI's and vLLM's), and with
// how many alternatives.
func (req *responsesRequest) logprobs() (bool, int) {
	k := 0
	if req.TopLogprobs != nil {
		k = *req.TopLogprobs
	}
	return slices.Contains(req.Include, "message.output_text.logprobs"), k
}

// truncates reports whether the oldest turns may be dropped to fit the
// context (truncation "auto").
func (req *responsesRequest) truncates() bool {
	return req.Truncation != nil && *req.Truncation == "auto"
}

// responsesItem is an input item (any type's fields; which apply
// depends on type).
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// function_call, function_call_output
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	// reasoning
	Summary []responsesText `json:"summary"`
	// EncryptedContent is the thought as this server wrote it (plain
	// text), which Codex sends back instead of the content.
	EncryptedContent *string `json:"encrypted_content"`
}

// responsesText is a text part of a reasoning item's content or summary.
type responsesText struct {
	Text string `json:"text"`
}

// responsesInput turns input (a string: one user message; or a list of
// items) into chat messages. A message's text parts join as chat's
// do; function_call items become the tool_calls of an assistant message
// (consecutive calls, and an assistant message just before them, are
// one message); function_call_output items are tool messages; a
// reasoning item's text is the next assistant message's reasoning (the
// template sees it as reasoning_content), or dropped when none follows.
func responsesInput(raw json.RawMessage) ([]chatMessage, error) {
	if !isSet(raw) {
		return nil, badRequest("input", "input is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []chatMessage{{Role: "user", Content: jsonString(text)}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must not be empty")
	}
	var msgs []chatMessage
	var calls [][]map[string]any // each message's tool calls
	var thoughts [][]string      // each message's reasoning, in parts
	var pending []string         // reasoning no assistant message holds yet
	for i, rawItem := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it responsesItem
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return nil, badRequest(param, "%s must be an input item object: %v", param, err)
		}
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message" // the easy form: {"role", "content"}
		}
		switch typ {
		case "message":
			switch it.Role {
			case "user", "system", "developer", "assistant":
			default:
				return nil, badRequest(param+".role", "%s.role must be user, system, developer or assistant, got %q", param, it.Role)
			}
			content, err := responsesContent(it.Content, param+".content")
			if err != nil {
				return nil, err
			}
			var thought []string
			if it.Role == "assistant" {
				thought, pending = pending, nil
			}
			msgs, calls, thoughts = append(msgs, chatMessage{Role: it.Role, Content: content}), append(calls, nil), append(thoughts, thought)
		case "function_call":
			if it.Name == "" || it.CallID == "" {
				return nil, badRequest(param, "%s (a function_call) needs name and call_id", param)
			}
			var args string
			if isSet(it.Arguments) && json.Unmarshal(it.Arguments, &args) != nil {
				return nil, badRequest(param+".arguments", "%s.arguments must be a string (the arguments' JSON)", param)
			}
			call := map[string]any{"id": it.CallID, "type": "function", "function": map[string]any{"name": it.Name, "arguments": args}}
			n := len(msgs)
			if n == 0 || msgs[n-1].Role != "assistant" {
				msgs, calls, thoughts = append(msgs, chatMessage{Role: "assistant"}), append(calls, nil), append(thoughts, nil)
				n++
			}
			thoughts[n-1], pending = append(thoughts[n-1], pending...), nil
			calls[n-1] = append(calls[n-1], call)
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "%s (a function_call_output) needs call_id", param)
			}
			content, err := responsesContent(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			msgs, calls, thoughts = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: content}), append(calls, nil), append(thoughts, nil)
		case "reasoning":
			var c []responsesText
			if isSet(it.Content) && json.Unmarshal(it.Content, &c) != nil {
				return nil, badRequest(param+".content", "%s.content must be an array of reasoning_text parts", param)
			}
			if len(c) == 0 { // a summary stands for the thought
				c = it.Summary
			}
			if len(c) == 0 && it.EncryptedContent != nil { // the thought as this server sent it
				c = append(c, responsesText{*it.EncryptedContent})
			}
			for _, part := range c {
				if part.Text != "" {
					pending = append(pending, part.Text)
				}
			}
		case "item_reference":
			return nil, badRequest(param+".type", "%s is an item_reference: %s", param, "this server is stateless and stores no items: send the item itself")
		case "":
			return nil, badRequest(param+".type", "%s has no type", param)
		default:
			return nil, badRequest(param+".type", "input items of type %q are not supported (message, function_call, function_call_output and reasoning are)", typ)
		}
	}
	for i, cs := range calls {
		if len(cs) > 0 {
			msgs[i].ToolCalls, _ = json.Marshal(cs)
		}
		msgs[i].Reasoning = strings.Join(thoughts[i], "\n")
	}
	return msgs, nil
}

// responsesContent reads a message's content (or a function call's
// output): a string, or text parts (input_text, output_text, refusal)
// as chat's text parts, which chat joins.
func responsesContent(raw json.RawMessage, param string) (json.RawMessage, error) {
	if !isSet(raw) {
		return jsonString(""), nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return raw, nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(param, "%s must be a string or an array of content parts", param)
	}
	type textPart struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	out := make([]textPart, len(parts))
	for j, p := range parts {
		text := p.Text
		switch p.Type {
		case "input_text", "output_text":
		case "refusal":
			text = p.Refusal
		case "input_image", "input_file", "input_audio":
			return nil, badRequest(fmt.Sprintf("%s[%d].type", param, j), "%s inputs are not supported: this server reads text only", strings.TrimPrefix(p.Type, "input_"))
		default:
			return nil, badRequest(fmt.Sprintf("%s[%d].type", param, j), "content parts of type %q are not supported (input_text and output_text are)", p.Type)
		}
		out[j] = textPart{"text", text}
	}
	return json.Marshal(out)
}

// responsesTools turns function tools into chat's (the function's
// fields nested under "function", in the order name, description,
// parameters, strict); any other type of tool is a 400 naming it.
func responsesTools(raw []json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	type function struct {
		Name        string          `json:"name"`
		Description *string         `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]tool, len(raw))
	for i, r := range raw {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type string `json:"type"`
			function
		}
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, badRequest(param, "%s must be a tool object: %v", param, err)
		}
		if t.Type != "function" {
			return nil, badRequest(param+".type", "tools of type %q are not supported: this server runs no hosted tools, only function tools", t.Type)
		}
		if t.Name == "" {
			return nil, badRequest(param+".name", "%s needs a name", param)
		}
		if !isSet(t.Parameters) {
			t.Parameters = nil
		} else if !bytes.HasPrefix(bytes.TrimSpace(t.Parameters), []byte("{")) {
			return nil, badRequest(param+".parameters", "%s.parameters must be a JSON schema object", param)
		}
		out[i] = tool{"function", t.function}
	}
	return json.Marshal(out)
}

// responsesToolChoice turns tool_choice into chat's: "none", "auto",
// "required", or {"type": "function", "name"}; a hosted tool, a custom
// tool or allowed_tools is a 400.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return raw, nil
		}
		return nil, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}, got %q", s)
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return nil, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}")
	}
	switch o.Type {
	case "function":
		if o.Name == "" {
			return nil, badRequest("tool_choice.name", "tool_choice of type function needs the function's name")
		}
		return json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": o.Name}})
	case "allowed_tools":
		return nil, badRequest("tool_choice.type", "tool_choice allowed_tools is not supported: send only the allowed tools")
	}
	return nil, badRequest("tool_choice.type", "tool_choice of type %q is not supported: only function tools are", o.Type)
}

// responsesFormat turns text.format into chat's response_format (nil for
// text): json_object, or json_schema with the schema (strict or not, it
// is enforced).
func responsesFormat(raw json.RawMessage) (json.RawMessage, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, badRequest("text.format", "text.format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}: %v", err)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`), nil
	case "json_schema":
		if !isSet(f.Schema) {
			return nil, badRequest("text.format.schema", "text.format json_schema needs schema")
		}
		return json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": f.Name, "description": f.Description, "schema": f.Schema, "strict": f.Strict}})
	}
	return nil, badRequest("text.format.type", "text.format.type must be text, json_object or json_schema, got %q", f.Type)
}

// responsesPlan plans the chat request. Under truncation "auto", an
// input the context cannot hold loses its oldest turns: the fewest that
// leave room, each cut made where a user message starts (so that no
// call is parted from its output), the system messages before the cut
// kept; found by bisection (a prompt shortens as turns go), so a long
// conversation costs log n renders. When no cut fits, the whole input's
// 400 stands.
func (s *Server) responsesPlan(ctx context.Context, req *responsesRequest, c *chatRequest) (*plan, error) {
	p, err := s.chatPlan(ctx, c)
	if err == nil || !req.truncates() || !contextExceeded(err) {
		return p, err
	}
	var cuts []int // where a cut may start: each user message after the first turn
	turns := false // a message other than the instructions came before
	for i, m := range c.Messages {
		if m.Role == "user" && turns {
			cuts = append(cuts, i)
		}
		turns = turns || (m.Role != "system" && m.Role != "developer")
	}
	var best *plan
	for lo, hi := 0, len(cuts)-1; lo <= hi; {
		mid := lo + (hi-lo)/2
		trial := *c
		trial.Messages = nil
		for _, m := range c.Messages[:cuts[mid]] {
			if m.Role == "system" || m.Role == "developer" {
				trial.Messages = append(trial.Messages, m)
			}
		}
		trial.Messages = append(trial.Messages, c.Messages[cuts[mid]:]...)
		q, terr := s.chatPlan(ctx, &trial)
		switch {
		case terr == nil:
			best, hi = q, mid-1
		case contextExceeded(terr):
			lo = mid + 1
		default:
			return nil, terr
		}
	}
	if best == nil {
		return nil, err
	}
	return best, nil
}

// contextExceeded reports whether err is the 400 of a prompt the context
// cannot hold.
func contextExceeded(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.Code == "context_length_exceeded"
}

// responsesNames renames, in the chat path's errors, the chat request's
// fields to the Responses request's.
var responsesNames = strings.NewReplacer(
	"max_completion_tokens", "max_output_tokens",
	"response_format.json_schema.schema", "text.format.schema",
	"response_format", "text.format",
	"reasoning_effort", "reasoning.effort",
	"the rendered messages", "the rendered input",
	"in the messages", "in the input",
	"shorten the messages", "shorten the input",
	"and the messages", "and the input",
)

// responsesError is err (the chat path's) with the Responses request's
// names: param messages is input, max_completion_tokens
// max_output_tokens, response_format text.format.
func responsesError(err error) error {
	var e *apiError
	if !errors.As(err, &e) {
		return err
	}
	out := *e
	out.Message = responsesNames.Replace(e.Message)
	out.Param = responsesNames.Replace(e.Param)
	if e.Param == "messages" || strings.HasPrefix(e.Param, "messages[") {
		out.Param = "input"
	}
	return &out
}

// ---- the response object

// responseObject is a response: the answer's items, its status and
// usage, and the request's settings echoed as OpenAI's responses carry
// them.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	CompletedAt        *int64             `json:"completed_at"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          responseReasoning  `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               map[string]any     `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	TopLogprobs        int                `json:"top_logprobs"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Background         bool               `json:"background"`
	Usage              *responseUsage     `json:"usage"`
	Metadata           json.RawMessage    `json:"metadata"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseReasoning struct {
	Effort  *string         `json:"effort"`
	Summary json.RawMessage `json:"summary"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// newResponse is the response to req in progress: no output yet, the
// settings echoed (temperature and top_p as the plan resolved them,
// generation_config.json's defaults included).
func (s *Server) newResponse(req *responsesRequest, p *plan) *responseObject {
	gen := p.reqs[0].Gen.Sampling
	topP := gen.TopP
	if topP <= 0 {
		topP = 1
	}
	resp := &responseObject{
		ID: "resp_" + rand.Text(), Object: "response", CreatedAt: s.o.Now().Unix(), Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: s.o.ModelName, Output: []any{},
		ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls, ServiceTier: "default",
		Temperature: gen.Temperature, TopP: topP, Truncation: "disabled",
		Text: map[string]any{"format": json.RawMessage(`{"type":"text"}`)}, ToolChoice: json.RawMessage(`"auto"`),
		Tools: req.Tools, Metadata: json.RawMessage("{}"), Reasoning: responseReasoning{Summary: json.RawMessage("null")},
	}
	if req.Truncation != nil {
		resp.Truncation = *req.Truncation
	}
	if req.TopLogprobs != nil {
		resp.TopLogprobs = *req.TopLogprobs
	}
	if t := req.Text; t != nil && isSet(t.Format) {
		resp.Text["format"] = t.Format
	}
	if t := req.Text; t != nil && isSet(t.Verbosity) {
		resp.Text["verbosity"] = t.Verbosity
	}
	if isSet(req.ToolChoice) {
		resp.ToolChoice = req.ToolChoice
	}
	if resp.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	if isSet(req.Metadata) {
		resp.Metadata = req.Metadata
	}
	if rs := req.Reasoning; rs != nil {
		resp.Reasoning.Effort = rs.Effort
		if isSet(rs.Summary) {
			resp.Reasoning.Summary = rs.Summary
		}
	}
	return resp
}

// finishResponse completes resp with out's items and the usage: status
// completed, or incomplete when the answer reached max_output_tokens
// (or the context's end). The reasoning tokens are the thought's text
// encoded again (the tags around it not counted).
func (s *Server) finishResponse(resp *responseObject, out *responseOutput, prompt, completion int, finish string) {
	resp.Output = out.objects()
	resp.Status = "completed"
	if finish == generate.FinishLength {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	} else {
		resp.CompletedAt = new(s.o.Now().Unix())
	}
	u := &responseUsage{InputTokens: prompt, OutputTokens: completion, TotalTokens: prompt + completion}
	if t := out.reasoning.String(); t != "" && s.o.Tokenizer != nil {
		if ids, err := s.o.Tokenizer.Encode(t, false); err == nil {
			u.OutputTokensDetails.ReasoningTokens = min(len(ids), completion)
		}
	}
	resp.Usage = u
}
