package serve

import (
	"context"
	"encoding/json"
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

	stream := c.Messages.NewStreaming(context.Background(), params)
	acc := anthropic.Message{}
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
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
// block.
func TestAnthropicTools(t *testing.T) {
	const answer = "<think>Need the weather.</think>Checking.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	r := ThinkTags
	ts := newTestServer(t, serverConfig{script: ids, template: toolTemplate + "{% if false %}<think></think>{% endif %}", reasoning: &r})
	c := ts.anthropicClient("")
	params := anthropic.MessageNewParams{
		Model: testModel, MaxTokens: 128,
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

	stream := c.Messages.NewStreaming(context.Background(), params)
	acc := anthropic.Message{}
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
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

	stream := c.Messages.NewStreaming(context.Background(), params)
	acc := anthropic.Message{}
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, msg.Content[0].Text, acc.Content[0].Text)
	assert.Equal(t, anthropic.StopReasonStopSequence, acc.StopReason)
	assert.Equal(t, " END", acc.StopSequence)
}

// What Anthropic's clients send: thinking with a budget, cache_control on
// a tool, and a last assistant message the answer continues (prefill).
func TestAnthropicClientFields(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: toolTemplate})
	body := `{"model":"` + testModel + `","max_tokens":4,"thinking":{"type":"enabled","budget_tokens":1024},` +
		`"tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":"Say a number"},{"role":"assistant","content":"The number is"}]}`
	status, _, b := ts.post(t, "/v1/messages", body)
	require.Equal(t, 200, status, string(b))
	prompt := ts.lastPrompt(t)
	assert.True(t, strings.HasSuffix(prompt, "assistant:The number is"), "the prefill is continued, not closed: %q", prompt)
	assert.Equal(t, 1, strings.Count(prompt, "assistant:"), prompt)
}
