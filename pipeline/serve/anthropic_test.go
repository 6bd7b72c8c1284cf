package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anthropicClient is the official Anthropic SDK for Go pointed at the
// server, without retries.
func (ts *testServer) anthropicClient(key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(ts.URL), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// streamMessage sends params streamed and returns the message the SDK
// accumulates from the events.
func streamMessage(t *testing.T, c anthropic.Client, params anthropic.MessageNewParams) anthropic.Message {
	t.Helper()
	stream := c.Messages.NewStreaming(context.Background(), params)
	acc := anthropic.Message{}
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	return acc
}

// Messages API: a system prompt and a user turn render through the chat
// template; the answer is the fake model's greedy text as one text
// block, whole and streamed (accumulated by the SDK), with usage and
// stop reasons (end_turn, max_tokens); x-api-key authenticates.
func TestAnthropicMessages(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey})
	c := ts.anthropicClient(testKey)
	params := anthropic.MessageNewParams{
		Model: testModel, MaxTokens: 12, System: []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Tell me a story"))},
	}
	msg, err := c.Messages.New(context.Background(), params)
	require.NoError(t, err)
	prompt, err := ts.tok.Encode("<s>system: Be brief.\nuser: Tell me a story\nassistant:", false)
	require.NoError(t, err)
	ids, text, finish := ts.expect(prompt, 12)
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "text", msg.Content[0].Type)
	assert.Equal(t, text, msg.Content[0].Text)
	assert.Equal(t, map[string]string{"length": "max_tokens", "stop": "end_turn"}[finish], string(msg.StopReason))
	assert.EqualValues(t, len(prompt), msg.Usage.InputTokens)
	assert.EqualValues(t, len(ids), msg.Usage.OutputTokens)
	assert.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	assert.Equal(t, testModel, msg.Model)

	acc := streamMessage(t, c, params)
	require.Len(t, acc.Content, 1)
	assert.Equal(t, text, acc.Content[0].Text)
	assert.Equal(t, msg.StopReason, acc.StopReason)
	assert.EqualValues(t, len(ids), acc.Usage.OutputTokens)

	wrong := ts.anthropicClient("wrong")
	_, err = wrong.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 401, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "authentication_error")
}

// Tools through the Messages API: the tool reaches the template, the
// model's hermes call comes back as a tool_use block (stop_reason
// tool_use), whole and streamed, and a tool_result goes back to the
// template as a tool message; a thinking model's thought is a thinking
// block when thinking is enabled.
func TestAnthropicTools(t *testing.T) {
	const answer = "<think>Need the weather.</think>Checking.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	r := ThinkTags
	ts := newTestServer(t, serverConfig{script: ids, template: toolTemplate + "{% if false %}<think></think>{% endif %}", reasoning: &r})
	c := ts.anthropicClient("")
	params := anthropic.MessageNewParams{
		Model: testModel, MaxTokens: 128, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Get the weather"),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}},
	}
	check := func(m anthropic.Message) {
		t.Helper()
		require.Len(t, m.Content, 3, "thinking, text, tool_use")
		assert.Equal(t, "thinking", m.Content[0].Type)
		assert.Equal(t, "Need the weather.", m.Content[0].Thinking)
		assert.Equal(t, "Checking.", m.Content[1].Text)
		assert.Equal(t, "tool_use", m.Content[2].Type)
		assert.Equal(t, "get_weather", m.Content[2].Name)
		assert.JSONEq(t, `{"city":"Paris"}`, string(m.Content[2].Input))
		assert.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
	}
	msg, err := c.Messages.New(context.Background(), params)
	require.NoError(t, err)
	check(*msg)
	assert.Contains(t, ts.lastPrompt(t), `"name": "get_weather"`)

	acc := streamMessage(t, c, params)
	check(acc)

	next := params
	next.Messages = append(next.Messages, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[2].ID, `{"temp": 21}`, false)))
	_, err = c.Messages.New(context.Background(), next)
	require.NoError(t, err)
	assert.Contains(t, ts.lastPrompt(t), `tool: {"temp": 21}`)

	named := params
	named.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "nope"}}
	_, err = c.Messages.New(context.Background(), named)
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 400, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "which is not among the tools")

	// tool_choice any: the answer is a call (here the model's own).
	ids, err = loadTestTokenizer(t).Encode(`<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`, false)
	require.NoError(t, err)
	forced := newTestServer(t, serverConfig{script: ids, template: toolTemplate})
	anyCall := params
	anyCall.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
	fc := forced.anthropicClient("")
	m, err := fc.Messages.New(context.Background(), anyCall)
	require.NoError(t, err)
	require.Len(t, m.Content, 1)
	assert.Equal(t, "get_weather", m.Content[0].Name)
	assert.JSONEq(t, `{"city":"Oslo"}`, string(m.Content[0].Input))
	assert.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
}

// Bad Messages requests are 400s in Anthropic's error shape, naming the
// field.
func TestAnthropicRefused(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for _, tc := range []struct{ body, want string }{
		{`{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`, "max_tokens is required"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"system","content":"hi"}]}`, "messages[0].role must be user or assistant"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, `"image" are not supported`},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":7}]}`, "messages[0].content must be a string or an array"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "server tools"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"frobnicate":1}`, "frobnicate"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[]}`, "messages"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"sometimes"}}`, "thinking.type"},
		{`{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]}]}`, "messages[1].content[0].input must be a JSON object"},
	} {
		status, _, body := ts.post(t, "/v1/messages", tc.body)
		assert.Equal(t, 400, status, tc.body)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		assert.Equal(t, "error", e.Type)
		assert.Equal(t, "invalid_request_error", e.Error.Type)
		assert.Contains(t, e.Error.Message, tc.want)
	}
}

// A stop sequence ends the answer before it, with stop_reason
// stop_sequence naming it, whole and streamed.
func TestAnthropicStopSequence(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode("Once upon a time END of the story", false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids})
	c := ts.anthropicClient("")
	params := anthropic.MessageNewParams{
		Model: testModel, MaxTokens: 64, StopSequences: []string{"zzz", " END"},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Tell me a story"))},
	}
	msg, err := c.Messages.New(context.Background(), params)
	require.NoError(t, err)
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "Once upon a time", strings.TrimLeft(msg.Content[0].Text, " "), "the tokenizer may add a prefix space")
	assert.Equal(t, anthropic.StopReasonStopSequence, msg.StopReason)
	assert.Equal(t, " END", msg.StopSequence)

	acc := streamMessage(t, c, params)
	assert.Equal(t, msg.Content[0].Text, acc.Content[0].Text)
	assert.Equal(t, anthropic.StopReasonStopSequence, acc.StopReason)
	assert.Equal(t, " END", acc.StopSequence)
}

// What Anthropic's clients send: thinking with a budget, cache_control on
// the request and a tool, and a last assistant message the answer
// continues (prefill).
func TestAnthropicClientFields(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: toolTemplate})
	body := `{"model":"` + testModel + `","max_tokens":4,"thinking":{"type":"enabled","budget_tokens":1024},"cache_control":{"type":"ephemeral"},` +
		`"tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":"Say a number"},{"role":"assistant","content":"The number is"}]}`
	status, _, b := ts.post(t, "/v1/messages", body)
	require.Equal(t, 200, status, string(b))
	prompt := ts.lastPrompt(t)
	assert.True(t, strings.HasSuffix(prompt, "assistant:The number is"), "the prefill is continued, not closed: %q", prompt)
	assert.Equal(t, 1, strings.Count(prompt, "assistant:"), prompt)

	// A prefill that ends in whitespace is refused, as Anthropic's API
	// refuses it.
	status, _, b = ts.post(t, "/v1/messages", strings.Replace(body, `"The number is"`, `"The number is "`, 1))
	require.Equal(t, 400, status, string(b))
	assert.Contains(t, string(b), "cannot end with trailing whitespace")
}

// sseEvents reads an Anthropic event stream's data objects in order.
func sseEvents(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
		out = append(out, ev)
	}
	return out
}

// Thinking only when asked: without thinking (or disabled) the template
// is told enable_thinking false and a thought the model writes anyway is
// left out, whole and streamed; enabled and adaptive answer it as a
// thinking block, streamed with an empty signature_delta before its
// content_block_stop.
func TestAnthropicThinking(t *testing.T) {
	ts := thinkingServer(t, "<think>Need the weather.</think>Sunny.") // thinkTemplate
	c := ts.anthropicClient("")
	for _, tc := range []struct {
		name     string
		thinking anthropic.ThinkingConfigParamUnion
		think    bool
	}{
		{"absent", anthropic.ThinkingConfigParamUnion{}, false},
		{"disabled", anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}}, false},
		{"enabled", anthropic.ThinkingConfigParamOfEnabled(1024), true},
		{"adaptive", anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := anthropic.MessageNewParams{Model: testModel, MaxTokens: 64, Thinking: tc.thinking,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather?"))}}
			check := func(m anthropic.Message) {
				t.Helper()
				if tc.think {
					require.Len(t, m.Content, 2)
					assert.Equal(t, "thinking", m.Content[0].Type)
					assert.Equal(t, "Need the weather.", m.Content[0].Thinking)
					assert.Equal(t, "Sunny.", m.Content[1].Text)
					return
				}
				require.Len(t, m.Content, 1, "no thinking block")
				assert.Equal(t, "Sunny.", m.Content[0].Text)
			}
			msg, err := c.Messages.New(context.Background(), params)
			require.NoError(t, err)
			check(*msg)
			assert.Equal(t, !tc.think, strings.HasSuffix(strings.TrimSpace(ts.lastPrompt(t)), "</think>"), "enable_thinking false: %q", ts.lastPrompt(t))

			acc := streamMessage(t, c, params)
			check(acc)
		})
	}

	body := `{"model":"` + testModel + `","max_tokens":64,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Weather?"}]}`
	status, _, b := ts.post(t, "/v1/messages", body)
	require.Equal(t, 200, status, string(b))
	var kinds []string
	for _, ev := range sseEvents(t, b) {
		if ev["index"] != 0.0 {
			continue
		}
		kind := ev["type"].(string)
		if d, ok := ev["delta"].(map[string]any); ok {
			kind += ":" + d["type"].(string)
			if d["type"] == "signature_delta" {
				assert.Equal(t, "", d["signature"])
			}
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != kind {
			kinds = append(kinds, kind)
		}
	}
	assert.Equal(t, []string{"content_block_start", "content_block_delta:thinking_delta", "content_block_delta:signature_delta", "content_block_stop"}, kinds)
}

// toolArgsTemplate writes an assistant's tool calls with their arguments
// as templates do: | tojson and .items(), which need an object.
const toolArgsTemplate = "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}{% for tc in m.tool_calls %}" +
	"[{{ tc.function.name }} {{ tc.function.arguments | tojson }}{% for k, v in tc.function.arguments.items() %} {{ k }}={{ v }}{% endfor %}]" +
	"{% endfor %}{% endif %}\n{% endfor %}assistant:"

// An assistant's tool_use reaches the template with its input as an
// object, and a tool_result with is_error as "Error: " and its text.
func TestAnthropicToolUseHistory(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: toolArgsTemplate})
	c := ts.anthropicClient("")
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 2,
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]any{"city": "Paris"}, "get_weather")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "no such city", true)),
		}})
	require.NoError(t, err)
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, `[get_weather {"city": "Paris"} city=Paris]`)
	assert.Contains(t, prompt, "tool: Error: no such city")
}

// disable_parallel_tool_use keeps an answer to one tool_use block, with
// tool_choice auto (the model's first call) and any (the grammar allows
// one call); without it both calls come back.
func TestAnthropicDisableParallelToolUse(t *testing.T) {
	const answer = `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>` +
		`<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`
	ts := toolServer(t, answer)
	c := ts.anthropicClient("")
	params := anthropic.MessageNewParams{Model: testModel, MaxTokens: 128,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris and Oslo?"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}},
	}
	uses := func(m *anthropic.Message) (n int) {
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				n++
			}
		}
		return n
	}
	msg, err := c.Messages.New(context.Background(), params)
	require.NoError(t, err)
	assert.Equal(t, 2, uses(msg))
	for name, choice := range map[string]anthropic.ToolChoiceUnionParam{
		"auto": {OfAuto: &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: anthropic.Bool(true)}},
		"any":  {OfAny: &anthropic.ToolChoiceAnyParam{DisableParallelToolUse: anthropic.Bool(true)}},
	} {
		one := params
		one.ToolChoice = choice
		msg, err := c.Messages.New(context.Background(), one)
		require.NoError(t, err, name)
		require.Equal(t, 1, uses(msg), name)
		assert.JSONEq(t, `{"city":"Paris"}`, string(msg.Content[len(msg.Content)-1].Input), name)
		assert.Equal(t, anthropic.StopReasonToolUse, msg.StopReason, name)
	}
}

// count_tokens answers the input_tokens /v1/messages counts for the same
// request (system, tools and messages), behind x-api-key, with
// Anthropic's errors.
func TestAnthropicCountTokens(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey, template: toolTemplate})
	c := ts.anthropicClient(testKey)
	tool := anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Get the weather"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 2, Messages: msgs,
		System: []anthropic.TextBlockParam{{Text: "Be brief."}}, Tools: []anthropic.ToolUnionParam{{OfTool: &tool}}})
	require.NoError(t, err)
	count, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: testModel, Messages: msgs,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("Be brief.")},
		Tools:  []anthropic.MessageCountTokensToolUnionParam{{OfTool: &tool}}})
	require.NoError(t, err)
	assert.Equal(t, msg.Usage.InputTokens, count.InputTokens)
	plain, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: testModel, Messages: msgs})
	require.NoError(t, err)
	assert.Less(t, plain.InputTokens, count.InputTokens, "tools and system count")

	// max_tokens and stream are accepted; x-api-key authenticates.
	status, _, b := ts.post(t, "/v1/messages/count_tokens", `{"model":"`+testModel+`","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Weather in Paris?"}]}`, "X-Api-Key", testKey)
	require.Equal(t, 200, status, string(b))
	assert.JSONEq(t, fmt.Sprintf(`{"input_tokens":%d}`, plain.InputTokens), string(b))

	wrong := ts.anthropicClient("wrong")
	_, err = wrong.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: testModel, Messages: msgs})
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 401, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "authentication_error")
	_, err = c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: "another-model", Messages: msgs})
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "not_found_error")
	status, _, b = ts.post(t, "/v1/messages/count_tokens", `{"model":"`+testModel+`","messages":[{"role":"user","content":"hi"}],"thinking":{"type":"sometimes"}}`, "X-Api-Key", testKey)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(b), "invalid_request_error")
	assert.Contains(t, string(b), "thinking.type")
}

// Anthropic's error types by status: 413 request_too_large, 429
// rate_limit_error with Retry-After, and a server that cannot take the
// request (503, shutting down) 529 overloaded_error.
func TestAnthropicErrorStatuses(t *testing.T) {
	for _, tc := range []struct {
		err        error
		status     int
		typ, retry string
	}{
		{schedulerError(ErrQueueFull), 429, "rate_limit_error", "1"},
		{schedulerError(ErrClosed), 529, "overloaded_error", ""},
		{&apiError{Status: 413, Message: "too big"}, 413, "request_too_large", ""},
		{errors.New("boom"), 500, "api_error", ""},
	} {
		w := httptest.NewRecorder()
		writeAnthropicError(w, tc.err)
		assert.Equal(t, tc.status, w.Code, tc.err)
		assert.Equal(t, tc.retry, w.Header().Get("Retry-After"), tc.err)
		var e struct{ Error struct{ Type string } }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e))
		assert.Equal(t, tc.typ, e.Error.Type, tc.err)
	}

	ts := newTestServer(t, serverConfig{})
	big := `{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"` + strings.Repeat("a", maxBodyBytes) + `"}]}`
	status, _, b := ts.post(t, "/v1/messages", big)
	assert.Equal(t, 413, status)
	assert.Contains(t, string(b), `"request_too_large"`)
	require.NoError(t, ts.sched.Shutdown(context.Background()))
	status, _, b = ts.post(t, "/v1/messages", `{"model":"`+testModel+`","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 529, status)
	assert.Contains(t, string(b), `"overloaded_error"`)
}
