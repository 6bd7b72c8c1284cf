package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/constrain"
	"github.com/tputool/tputool/pipeline/generate"
)

// POST /v1/chat/completions: messages rendered through the model's chat
// template, answered whole or streamed.

type chatResponseMessage struct {
	Role string `json:"role"`
	// Content is null in an answer of tool calls alone, as OpenAI's.
	Content *string `json:"content"`
	// Reasoning and ReasoningContent are the same thought, under current
	// vLLM's name and under the older one (DeepSeek's), for clients of
	// either.
	Reasoning        string         `json:"reasoning,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
	Refusal          *string        `json:"refusal"`
}

// toolCallJSON is a tool call in an answer or (with Index) a stream delta.
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func toolCallsJSON(calls []toolCall, withIndex bool, f ToolFormat) []toolCallJSON {
	out := make([]toolCallJSON, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = callID(f), "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
		if withIndex {
			out[i].Index = new(i)
		}
	}
	return out
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
	// PromptLogprobs is vLLM's prompt_logprobs of the rendered prompt,
	// when asked.
	PromptLogprobs []map[string]vllmLogprob `json:"prompt_logprobs,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// Reasoning and ReasoningContent: as in chatResponseMessage.
	Reasoning        *string        `json:"reasoning,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
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
	Usage   chunkUsage        `json:"usage,omitzero"`
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
	// vLLM's prompt_logprobs: the rendered prompt's tokens, scored.
	var promptLPs []map[string]vllmLogprob
	if k := req.PromptLogprobs; k != nil {
		switch {
		case *k < 0 || *k > maxLogprobs:
			writeError(w, badRequest("prompt_logprobs", "prompt_logprobs must be between 0 and %d, got %d", maxLogprobs, *k))
			return
		case req.Stream:
			writeError(w, badRequest("prompt_logprobs", "prompt_logprobs are not available when streaming (as vLLM's)"))
			return
		}
		e := &echoPlan{n: 1, prompts: [][]int{p.reqs[0].Prompt}, logprobs: -1, promptLogprobs: *k}
		x.promptTokens = p.promptTokens
		if err := s.scorePrompts(r.Context(), e); err != nil {
			writeError(w, err)
			return
		}
		promptLPs = e.vllm[0]
	}
	var stream func([]*Stream, string, int64)
	if req.Stream {
		stream = func(streams []*Stream, id string, created int64) {
			s.streamChat(r.Context(), w, &req, p, streams, id, created)
		}
	}
	s.answer(w, r, x, p, "chatcmpl-", stream, func(choices []*choice, u *usage, id string, created int64) any {
		resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: s.o.ModelName, Usage: u, PromptLogprobs: promptLPs}
		for i, c := range choices {
			msg := chatResponseMessage{Role: "assistant"}
			content := c.text.String()
			if sp := p.splitter(); sp != nil {
				r, ct := sp.feed(content)
				r2, ct2 := sp.flush()
				msg.ReasoningContent, content = r+r2, ct+ct2
				msg.Reasoning = msg.ReasoningContent
			}
			finish := finishReason(c.finish)
			if tp := p.toolParser(); tp != nil {
				before := tp.feed(content)
				calls, rest := tp.finish()
				content = before + rest
				if len(calls) > 0 {
					msg.ToolCalls = toolCallsJSON(calls, false, p.tools)
					if finish == "stop" {
						finish = "tool_calls"
					}
				}
			}
			// Whitespace before calls (a tokenizer's leading space) is
			// no content.
			if strings.TrimSpace(content) != "" || len(msg.ToolCalls) == 0 {
				msg.Content = &content
			}
			cc := chatChoice{Index: i, Message: msg, FinishReason: finish}
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
	if err := s.noGeneration(); err != nil {
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
	tools, err := s.chatTools(req)
	if err != nil {
		return nil, err
	}
	structured, err := responseFormat(req.ResponseFormat)
	if err != nil {
		return nil, err
	}
	if forced := tools.forced; forced != nil {
		if structured != nil {
			return nil, badRequest("response_format", "response_format cannot be combined with tool_choice %s: the answer is a tool call", string(req.ToolChoice))
		}
		structured = forced
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
	// A last assistant message the request asks to continue (Anthropic's
	// prefill) is written after the generation prompt, unclosed.
	prefill := ""
	if n := len(msgs); req.continueFinal && n > 1 && msgs[n-1].Role == "assistant" {
		prefill, msgs = msgs[n-1].Content, msgs[:n-1]
		// As Anthropic's API: a prompt ending in a lone space token is
		// one models rarely saw (transformers' continue_final_message
		// strips it instead).
		if strings.TrimRightFunc(prefill, unicode.IsSpace) != prefill {
			return nil, badRequest("messages", "final assistant content cannot end with trailing whitespace")
		}
	}
	text, ids, err := s.renderChat(ctx, msgs, extra, tools.list, prefill)
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
	s.answerParts(p, text, tools)
	if err := s.constrain(p, structured); err != nil {
		return nil, err
	}
	return p, nil
}

// answerParts sets how the plan's chat answers split into reasoning,
// content and tool calls (as tools says): the reasoning markup of the
// template (and whether the rendered prompt opened a thought), or
// harmony's messages, decoded with their special tokens.
func (s *Server) answerParts(p *plan, prompt string, tools chatToolSet) {
	format := tools.format
	if r := s.o.Reasoning; r != nil {
		p.reasoning, p.thinking = r, promptOpens(*r, prompt)
		p.mayThink = !p.thinking && !promptCloses(*r, prompt)
	}
	// Markup that is special tokens must reach the text: harmony's,
	// mistral's [TOOL_CALLS] (a control token in its tokenizers) and
	// LFM2's <|tool_call_start|> and <|tool_call_end|>.
	if s.o.Harmony || format.isMistral() || format == ToolsPythonic {
		p.harmony = s.o.Harmony
		if p.harmony {
			p.harmonyPrompt = prompt
		}
		tok := s.o.Tokenizer
		for i := range p.reqs {
			p.reqs[i].Gen.NewDecoder = func(prompt []int) generate.StreamDecoder { return tok.StreamDecoderWithSpecialAfter(prompt) }
		}
	}
	p.tools, p.toolTypes, p.oneCall = format, tools.types, tools.one
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
	case !noOp(req.Functions, "[]"):
		return badRequest("functions", "the deprecated functions field is not supported: use tools")
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
	for _, m := range req.Modalities {
		if m != "text" {
			return badRequest("modalities", "only the text modality is supported, got %q", m)
		}
	}
	return nil
}

// chatToolSet is what a request's tools make of its plan: the tools for
// the template (each as its JSON, key order kept), the format to parse
// calls in, the types of their parameters (qwen_xml), whether an answer
// keeps one call only (parallel_tool_calls false), and for tool_choice
// "required" or a named function the grammar that forces a call.
type chatToolSet struct {
	list   []any
	format ToolFormat
	types  map[string]map[string]string
	one    bool
	forced *grammarSpec
}

// chatTools validates the request's tools (chatToolSet); none when the
// request has none or tool_choice is "none".
func (s *Server) chatTools(req *chatRequest) (chatToolSet, error) {
	var none chatToolSet
	choice, name, err := toolChoice(req.ToolChoice)
	if err != nil {
		return none, err
	}
	one := false
	if isSet(req.ParallelToolCalls) {
		var parallel bool
		if json.Unmarshal(req.ParallelToolCalls, &parallel) != nil {
			return none, badRequest("parallel_tool_calls", "parallel_tool_calls must be true or false")
		}
		one = !parallel
	}
	if !isSet(req.Tools) || string(req.Tools) == "[]" || choice == "none" {
		if choice == "required" || name != "" {
			return none, badRequest("tool_choice", "tool_choice %s needs tools", string(req.ToolChoice))
		}
		return none, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(req.Tools, &raw); err != nil {
		return none, badRequest("tools", "tools must be an array of tool objects")
	}
	if len(raw) > maxTools {
		return none, badRequest("tools", "at most %d tools, got %d", maxTools, len(raw))
	}
	format := ToolFormatOf(s.o.Template)
	if format == "" {
		return none, badRequest("tools", "the chat template of %q has no tool-call markup tputool reads (hermes <tool_call>, qwen_xml <function=…>, glm45 <arg_key>, minimax_m2 <invoke>, mistral [TOOL_CALLS], llama3 JSON, pythonic <|tool_call_start|>)", s.o.ModelName)
	}
	var all, callable []constrain.Tool
	tools := make([]any, len(raw))
	for i, r := range raw {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		param := fmt.Sprintf("tools[%d]", i)
		if json.Unmarshal(r, &t) != nil || t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			return none, badRequest(param, "%s must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}", param)
		}
		if p := t.Function.Parameters; isSet(p) && !bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
			return none, badRequest(param+".function.parameters", "%s.function.parameters must be a JSON schema object", param)
		}
		tools[i] = r
		var params []byte
		if isSet(t.Function.Parameters) {
			params = t.Function.Parameters
		}
		tool := constrain.Tool{Name: t.Function.Name, Parameters: params}
		all = append(all, tool)
		if name == "" || name == t.Function.Name {
			callable = append(callable, tool)
		}
	}
	set := chatToolSet{list: tools, format: format, one: one}
	if format == ToolsQwenXML || format == ToolsGLM || format == ToolsMiniMax {
		set.types = parameterTypes(all)
	}
	if choice != "required" && name == "" {
		return set, nil
	}
	if len(callable) == 0 {
		return none, badRequest("tool_choice", "tool_choice names the function %q, which is not among the tools", name)
	}
	set.forced, err = forcedCalls(callable, format, name != "" || one)
	if err != nil {
		return none, err
	}
	return set, nil
}

// toolChoice reads tool_choice: "none", "auto" (also when absent),
// "required", or {"type": "function", "function": {"name": NAME}}.
func toolChoice(raw json.RawMessage) (choice, name string, err error) {
	if !isSet(raw) {
		return "auto", "", nil
	}
	if json.Unmarshal(raw, &choice) == nil {
		switch choice {
		case "none", "auto", "required":
			return choice, "", nil
		}
		return "", "", badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a named function, got %q", choice)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return "", "", badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return "function", named.Function.Name, nil
}

// forcedCalls is the grammar of an answer that calls the tools in the
// template's markup (one call when single: a named function, or
// parallel_tool_calls false; else one or more).
func forcedCalls(tools []constrain.Tool, format ToolFormat, single bool) (*grammarSpec, error) {
	var mk constrain.CallMarkup
	var specials []string
	switch format {
	case ToolsHermes:
		mk = constrain.CallMarkup{Open: "<tool_call>", Close: "</tool_call>", ArgsKey: "arguments", Many: !single}
	case ToolsLlama3:
		mk = constrain.CallMarkup{ArgsKey: "parameters"}
	case ToolsQwenXML, ToolsGLM, ToolsMiniMax:
		m := map[ToolFormat]constrain.XMLMarkup{ToolsQwenXML: constrain.QwenXML, ToolsGLM: constrain.GLMXML, ToolsMiniMax: constrain.MiniMaxXML}[format]
		key, _ := json.Marshal(tools)
		return &grammarSpec{key: fmt.Sprintf("tools:%s:%v:%s", format, single, key), param: "tool_choice", compile: func() (*constrain.Grammar, error) {
			return constrain.XMLCallsIn(tools, !single, m)
		}}, nil
	case ToolsHarmony:
		// One call a turn, after an optional analysis message.
		key, _ := json.Marshal(tools)
		return &grammarSpec{key: fmt.Sprintf("tools:%s:%s", format, key), param: "tool_choice", compile: func() (*constrain.Grammar, error) {
			return constrain.HarmonyCall(tools)
		}}, nil
	case ToolsPythonic:
		// LFM2's markers are special tokens: the grammar spells them, and
		// the vocabulary lets those tokens (or their text) write them.
		key, _ := json.Marshal(tools)
		return &grammarSpec{key: fmt.Sprintf("tools:%s:%v:%s", format, single, key), param: "tool_choice", compile: func() (*constrain.Grammar, error) {
			return constrain.PythonicCalls(tools, !single)
		}, specials: []string{pythonicOpen, pythonicClose}}, nil
	case ToolsMistral:
		// [TOOL_CALLS] is a control token: the grammar spells it, and the
		// vocabulary lets that token (or its text) write it.
		mk = constrain.CallMarkup{Open: "[TOOL_CALLS]", ArgsKey: "arguments", Many: !single, Array: true}
		specials = []string{"[TOOL_CALLS]"}
	case ToolsMistralArgs:
		// [TOOL_CALLS]NAME[ARGS]{…} a call; both markers are control
		// tokens.
		mk = constrain.CallMarkup{Open: "[TOOL_CALLS]", NameArgs: "[ARGS]", Many: !single}
		specials = []string{"[TOOL_CALLS]", "[ARGS]"}
	default:
		return nil, badRequest("tool_choice", "tool_choice \"required\" or a named function is enforced for templates with hermes (<tool_call>), qwen_xml, glm45, minimax_m2, mistral ([TOOL_CALLS]), llama3, pythonic or harmony calls; this model's calls are %s", format)
	}
	key, _ := json.Marshal(tools)
	return &grammarSpec{key: fmt.Sprintf("tools:%s:%v:%s", format, single, key), param: "tool_choice", compile: func() (*constrain.Grammar, error) {
		return constrain.ToolCalls(tools, mk)
	}, specials: specials}, nil
}

// maxTools bounds a request's tools.
const maxTools = 128

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
		if r := m.reasoning(); r != "" {
			extra["reasoning_content"] = r
		}
		for key, raw := range map[string]json.RawMessage{"tool_calls": m.ToolCalls, "function_call": m.FunctionCall} {
			if isSet(raw) {
				v, err := argumentsAsJSON(raw)
				if err != nil {
					return nil, badRequest(param+"."+key, "%s.%s: %v", param, key, err)
				}
				if v != nil {
					extra[key] = v
				}
			}
		}
		if len(extra) > 0 {
			cm.Extra = extra
		}
		out = append(out, cm)
	}
	return out, nil
}

// argumentsAsJSON returns a message's tool_calls (a list) or
// function_call for the template, with each call's arguments sent as a
// JSON string replaced by the JSON it holds: templates write a call's
// arguments as an object (| tojson, .items()), as transformers and vLLM
// pass them. Arguments that are not JSON stay the string. The result is
// JSON text, so that the template sees every object's keys in the
// request's order, as Python's dicts keep them; nil for an empty list (no
// calls: templates test for tool_calls, not its length).
func argumentsAsJSON(raw json.RawMessage) (json.RawMessage, error) {
	var calls []json.RawMessage
	single := json.Unmarshal(raw, &calls) != nil
	if single {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		calls = []json.RawMessage{raw}
	} else if len(calls) == 0 {
		return nil, nil
	}
	out := make([]json.RawMessage, len(calls))
	for i, call := range calls {
		out[i] = call
		var c struct {
			Arguments json.RawMessage `json:"arguments"`
			Function  *struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if json.Unmarshal(call, &c) != nil {
			continue
		}
		args := c.Arguments
		if c.Function != nil {
			args = c.Function.Arguments
		}
		var text string
		if json.Unmarshal(args, &text) != nil || !json.Valid([]byte(text)) {
			continue
		}
		// The string's bytes, as written, appear once in the call (its
		// id and name are other strings): put the JSON in their place.
		if bytes.Count(call, args) == 1 {
			out[i] = bytes.Replace(call, args, []byte(text), 1)
		}
	}
	if single {
		return out[0], nil
	}
	b, err := json.Marshal(out)
	return b, err
}

// renderChat renders msgs with the chat template (adding the generation
// prompt), appends prefill (the start of the answer, continued), and
// encodes them, as `tputool chat` does.
func (s *Server) renderChat(ctx context.Context, msgs []chat.Message, extra map[string]any, tools []any, prefill string) (string, []int, error) {
	if s.o.Template == nil {
		return "", nil, badRequest("messages", "the model %q has no chat template (tokenizer_config.json has no chat_template): use /v1/completions", s.o.ModelName)
	}
	if s.o.Tokenizer == nil {
		return "", nil, badRequest("messages", "this server has no tokenizer to encode chat messages")
	}
	if s.o.Harmony {
		msgs = harmonyMessages(msgs)
		if prefill != "" { // the answer so far is the final message's
			prefill = harmonyFinal + prefill
		}
	}
	text, err := s.o.Template.Render(ctx, chat.Input{Messages: msgs, AddGenerationPrompt: true, Extra: extra, Tools: tools})
	if err != nil {
		return "", nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	text += prefill
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
	chunk := func(u chunkUsage, cs ...chatChunkChoice) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.o.ModelName, Choices: cs, Usage: u}
	}
	su := req.streamUsageOf()
	for i := range streams {
		if err := out.send(chunk(su.chunk(p.promptTokens, 0), chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: new("")}})); err != nil {
			return
		}
	}
	splitters := make([]textSplitter, len(streams))
	parsers := make([]*toolParser, len(streams))
	for i := range splitters {
		splitters[i], parsers[i] = p.splitter(), p.toolParser()
	}
	s.streamEvents(ctx, out, p, streams, su, func(i int, c *choice, ev Event, lps []Event, logprobs bool, u chunkUsage) any {
		cc := chatChunkChoice{Index: i}
		r, ct := "", ev.Text
		if sp := splitters[i]; sp != nil {
			r, ct = sp.feed(ev.Text)
			if ev.FinishReason != "" {
				r2, ct2 := sp.flush()
				r, ct = r+r2, ct+ct2
			}
		}
		var calls []toolCall
		if tp := parsers[i]; tp != nil {
			ct = tp.feed(ct)
			if ev.FinishReason != "" {
				var rest string
				calls, rest = tp.finish()
				ct += rest
			}
		}
		if r != "" {
			cc.Delta.Reasoning, cc.Delta.ReasoningContent = new(r), new(r)
		}
		if ct != "" {
			cc.Delta.Content = new(ct)
		}
		if len(calls) > 0 {
			cc.Delta.ToolCalls = toolCallsJSON(calls, true, p.tools)
		}
		if logprobs {
			cc.Logprobs = s.chatLogprobsOf(c, lps)
		}
		if ev.FinishReason != "" {
			f := finishReason(ev.FinishReason)
			if len(calls) > 0 && f == "stop" {
				f = "tool_calls"
			}
			cc.FinishReason = new(f)
		}
		return chunk(u, cc)
	}, func(u *usage) any {
		last := chunk(chunkUsage{set: true, u: u})
		last.Choices = []chatChunkChoice{}
		return last
	})
}
