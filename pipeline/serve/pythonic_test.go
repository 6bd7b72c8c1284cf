package serve

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lfm2Template renders tools and tool results as LFM2's template does:
// the tools' JSON between <|tool_list_start|> and <|tool_list_end|> in
// the system turn, a tool's result between <|tool_response_start|> and
// <|tool_response_end|>.
const lfm2Template = "{% if tools %}<|im_start|>system\nList of tools: <|tool_list_start|>{{ tools | tojson }}<|tool_list_end|><|im_end|>\n{% endif %}" +
	"{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'tool' %}<|tool_response_start|>{{ m.content }}<|tool_response_end|>" +
	"{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"

// An LFM2 model's pythonic calls (two in one list, after some text) come
// back as tool_calls, whole and streamed, the markup never as content;
// the tools reach the prompt through the template, and a tool's result
// goes back through it.
func TestToolCallsPythonic(t *testing.T) {
	const answer = "Checking.<|tool_call_start|>[get_weather(city='Paris', days=3), get_time(tz=\"UTC\")]<|tool_call_end|>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids, template: lfm2Template, context: 4096})
	require.Equal(t, ToolsPythonic, ToolFormatOf(ts.srv.o.Template))
	weather := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
		Name:       "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
	}}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "get_time"}}}
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{weather, clock}, MaxTokens: openai.Int(256),
	}
	for _, streamed := range []bool{false, true} {
		var msg openai.ChatCompletionMessage
		if streamed {
			stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), params)
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			require.NoError(t, stream.Err())
			msg = acc.Choices[0].Message
		} else {
			resp, err := ts.client("").Chat.Completions.New(context.Background(), params)
			requireNoAPIError(t, err)
			assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
			msg = resp.Choices[0].Message
		}
		require.Len(t, msg.ToolCalls, 2, "streamed %v", streamed)
		assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)
		assert.JSONEq(t, `{"city": "Paris", "days": 3}`, msg.ToolCalls[0].Function.Arguments)
		assert.Equal(t, "get_time", msg.ToolCalls[1].Function.Name)
		assert.JSONEq(t, `{"tz": "UTC"}`, msg.ToolCalls[1].Function.Arguments)
		assert.Equal(t, "Checking.", strings.TrimSpace(msg.Content), "streamed %v", streamed)
		assert.NotContains(t, msg.Content, "tool_call_start")
	}
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, "List of tools: <|tool_list_start|>[")
	assert.Contains(t, prompt, `"name": "get_weather"`)

	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},`+
		`{"role":"assistant","content":"<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>"},`+
		`{"role":"tool","tool_call_id":"call_1","content":"21"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":64}`)
	require.Equal(t, 200, status, string(b))
	assert.Contains(t, ts.lastPrompt(t), "<|im_start|>tool\n<|tool_response_start|>21<|tool_response_end|><|im_end|>\n<|im_start|>assistant")
}
