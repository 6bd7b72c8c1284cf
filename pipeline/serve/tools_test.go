package serve

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
)

// The parsers read each format's calls, whole and fed in pieces of any
// size, and give back text that holds no call unchanged.
func TestToolParser(t *testing.T) {
	for _, c := range []struct {
		format  ToolFormat
		text    string
		content string
		calls   []toolCall
	}{
		{ToolsHermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"Let me check.\n", []toolCall{{"get_weather", `{"city":"Paris"}`}}},
		{ToolsHermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>",
			"", []toolCall{{"a", `{}`}, {"b", `{"x":1}`}}},
		{ToolsHermes, "No tools needed.", "No tools needed.", nil},
		{ToolsHermes, "Broken <tool_call>{not json</tool_call>", "Broken <tool_call>{not json</tool_call>", nil},
		{ToolsMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"b\"}]",
			"", []toolCall{{"get_weather", `{"city":"Paris"}`}, {"b", `{}`}}},
		{ToolsLlama3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", []toolCall{{"get_weather", `{"city":"Paris"}`}}},
		{ToolsLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", []toolCall{{"f", `{}`}}},
		{ToolsLlama3, "{\"answer\": 4}", "{\"answer\": 4}", nil}, // JSON, but no call
		{ToolsLlama3, "It is {\"name\": \"x\"}", "It is {\"name\": \"x\"}", nil},
	} {
		for size := 1; size <= len(c.text); size++ {
			p := newToolParser(c.format)
			var content strings.Builder
			for i := 0; i < len(c.text); i += size {
				content.WriteString(p.feed(c.text[i:min(i+size, len(c.text))]))
			}
			calls, rest := p.finish()
			content.WriteString(rest)
			if content.String() != c.content || len(calls) != len(c.calls) {
				t.Fatalf("%s %q in pieces of %d: content %q, calls %v; want %q, %v", c.format, c.text, size, content.String(), calls, c.content, c.calls)
			}
			for i := range calls {
				if calls[i] != c.calls[i] {
					t.Fatalf("%s %q: call %d %v, want %v", c.format, c.text, i, calls[i], c.calls[i])
				}
			}
		}
	}
}

// FuzzToolParser: any text, fed in any two pieces, parses without a
// panic into at most maxToolCalls calls, and text without a call comes
// back whole.
func FuzzToolParser(f *testing.F) {
	f.Add("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", 5)
	f.Add("[TOOL_CALLS][{\"name\":\"a\"}]", 3)
	f.Add("{\"name\":\"a\",\"parameters\":{\"q\":[1,2,{}]}}", 1)
	f.Add(strings.Repeat("<tool_call>{\"name\":\"a\"}</tool_call>", 100), 7)
	f.Fuzz(func(t *testing.T, text string, cut int) {
		for _, format := range []ToolFormat{ToolsHermes, ToolsMistral, ToolsLlama3} {
			p := newToolParser(format)
			cut := min(max(cut, 0), len(text))
			content := p.feed(text[:cut]) + p.feed(text[cut:])
			calls, rest := p.finish()
			if len(calls) > maxToolCalls {
				t.Fatalf("%d calls", len(calls))
			}
			if len(calls) == 0 && content+rest != text {
				t.Fatalf("%s: no call, but content %q is not the text %q", format, content+rest, text)
			}
		}
	})
}

// toolTemplate renders tools as Qwen's template does (a JSON line each)
// and teaches the hermes markup.
const toolTemplate = "{% if tools %}Tools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\nCall with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>\n{% endif %}" +
	"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"

func toolServer(t *testing.T, answer string) *testServer {
	t.Helper()
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	return newTestServer(t, serverConfig{script: ids, template: toolTemplate})
}

var weatherTool = openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
	Function: openai.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Get the weather"),
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
	},
}}

// A model that answers with a hermes call gets tool_calls back (and
// finish_reason tool_calls), whole and streamed, through the official
// OpenAI client; the tools reach the template; the markup never reaches
// the content.
func TestToolCalls(t *testing.T) {
	const answer = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ts := toolServer(t, answer)
	c := ts.client("")
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool}, MaxTokens: openai.Int(128),
	}
	resp, err := c.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	ch := resp.Choices[0]
	assert.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	assert.Equal(t, "function", string(call.Type))
	assert.Equal(t, "get_weather", call.Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, call.Function.Arguments)
	assert.True(t, strings.HasPrefix(call.ID, "call_"), call.ID)
	assert.Equal(t, "Checking.", strings.TrimSpace(ch.Message.Content))
	assert.Contains(t, ts.lastPrompt(t), `"name": "get_weather"`, "the tools were rendered through the template")

	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var content strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, cc := range chunk.Choices {
			content.WriteString(cc.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.NotContains(t, content.String(), "tool_call", "no markup in the streamed content")
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, "get_weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)

	// The call and its result go back to the template on the next turn.
	next := params
	next.Messages = append(next.Messages, resp.Choices[0].Message.ToParam(), openai.ToolMessage(`{"temp": 21}`, call.ID))
	_, err = c.Chat.Completions.New(context.Background(), next)
	require.NoError(t, err)
	assert.Contains(t, ts.lastPrompt(t), `tool: {"temp": 21}`)
}

// What tputool cannot honour is a 400 naming it.
func TestToolRequestsRefused(t *testing.T) {
	ts := toolServer(t, "x")
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`:                                                                                      "tool_choice must be",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`:                                                   `the function \"g\", which is not among the tools`,
		`{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`:                                                                                                                                          "needs tools",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"number","multipleOf":3}}}}}],"tool_choice":"required"}`: `keyword \"multipleOf\" cannot be enforced`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`:                                           "cannot be combined with tool_choice",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`:                                                                                                                       "tools[0] must be",
		`{"messages":[{"role":"user","content":"x"}],"tools":{"a":1}}`:                                                                                                                                                   "tools must be an array",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":3}}]}`:                                                                                              "must be a JSON schema object",
	} {
		status, _, b := ts.post(t, "/v1/chat/completions", body)
		assert.Equal(t, 400, status, body)
		assert.Contains(t, string(b), want, body)
	}
	plain := newTestServer(t, serverConfig{})
	status, _, b := plain.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(b), "has no tool-call markup")
}

// tool_choice "required" and a named function force a call: a model that
// would answer in prose calls a tool anyway, with arguments valid against
// its schema; a model that calls on its own keeps its call.
func TestToolChoiceForced(t *testing.T) {
	bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
		Function: openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false},
		},
	}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "now"}}}
	for _, tc := range []struct {
		name, answer string
		choice       openai.ChatCompletionToolChoiceOptionUnionParam
		want         string // the tool called
	}{
		{"required prose", "I think it is sunny.", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, ""},
		{"named prose", "I think it is sunny.", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "get_weather"},
		{"required follows", `<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "get_weather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := loadTestTokenizer(t).Encode(tc.answer, false)
			require.NoError(t, err)
			// A fake model that prefers nothing takes the most whitespace the
			// grammar allows: room for it.
			ts := newTestServer(t, serverConfig{script: ids, template: toolTemplate, context: 4096})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded, clock}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			ch := resp.Choices[0]
			assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
			require.NotEmpty(t, ch.Message.ToolCalls)
			for _, call := range ch.Message.ToolCalls {
				if tc.want != "" {
					assert.Equal(t, tc.want, call.Function.Name)
				}
				switch call.Function.Name {
				case "get_weather":
					validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Function.Arguments)
				case "now":
					validates(t, `{"type":"object"}`, call.Function.Arguments)
				default:
					t.Errorf("called %q", call.Function.Name)
				}
			}
			if tc.name == "required follows" {
				assert.JSONEq(t, `{"city": "Oslo"}`, ch.Message.ToolCalls[0].Function.Arguments)
			}
		})
	}
}

// mistralTemplate writes calls as mistral's templates do: [TOOL_CALLS]
// and a JSON array.
const mistralTemplate = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}" +
	"{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}</s>" +
	"{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"

// mistralTokenizer is the test tokenizer with [TOOL_CALLS] added as a
// special token (id 512), as mistral's tokenizers have it.
func mistralTokenizer(t *testing.T) *tokenizer.Tokenizer {
	return tokenizerWithSpecials(t, "[TOOL_CALLS]")
}

// tokenizerWithSpecials is the test tokenizer with specials added as
// special tokens, ids 512 on.
func tokenizerWithSpecials(t *testing.T, specials ...string) *tokenizer.Tokenizer {
	t.Helper()
	return tokenizerWithAdded(t, true, specials...)
}

// tokenizerWithAdded is the test tokenizer with tokens added, ids 512
// on, special or not (Qwen3's think tags are added tokens that are not).
func tokenizerWithAdded(t *testing.T, special bool, specials ...string) *tokenizer.Tokenizer {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "stories260K-hf")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	b, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	require.NoError(t, err)
	var tj map[string]any
	require.NoError(t, json.Unmarshal(b, &tj))
	for i, sp := range specials {
		tj["added_tokens"] = append(tj["added_tokens"].([]any), map[string]any{
			"id": textVocab + i, "content": sp, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": special})
	}
	b, err = json.Marshal(tj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	for i, sp := range specials {
		id, ok := tok.TokenToID(sp)
		require.True(t, ok && id == textVocab+i && tok.IsSpecial(id) == special, "%s is token %d, special %v", sp, textVocab+i, special)
	}
	return tok
}

// tool_choice "required" and a named function on a mistral template: the
// answer is [TOOL_CALLS] (the special token, which the grammar spells)
// and a JSON array of valid calls. A model that calls on its own, with
// the special token, keeps its call (the token is allowed: without it in
// the grammar's vocabulary the script loses its way); one that would
// answer in prose calls anyway.
func TestToolChoiceForcedMistral(t *testing.T) {
	tok := mistralTokenizer(t)
	follow, err := tok.Encode(`[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]`, false)
	require.NoError(t, err)
	require.Equal(t, 512, follow[0], "the script opens with the special token")
	prose, err := tok.Encode("I think it is sunny.", false)
	require.NoError(t, err)
	// A fake model that prefers nothing takes the most whitespace and the
	// longest strings the grammar allows: a bounded city.
	bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
		Function: openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false},
		},
	}}
	for _, tc := range []struct {
		name   string
		script []int
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		city   string
	}{
		{"required follows", follow, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "Oslo"},
		{"named follows", follow, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "Oslo"},
		// Named: one call. (Under "required" this fake model, which takes
		// the lowest id a tie allows, would pick "," before "]" forever.)
		{"named prose", prose, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverConfig{script: tc.script, template: mistralTemplate, context: 4096, tok: tok})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			ch := resp.Choices[0]
			assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
			require.NotEmpty(t, ch.Message.ToolCalls)
			for _, call := range ch.Message.ToolCalls {
				assert.Equal(t, "get_weather", call.Function.Name)
				validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Function.Arguments)
			}
			if tc.city != "" {
				require.Len(t, ch.Message.ToolCalls, 1)
				assert.JSONEq(t, `{"city": "`+tc.city+`"}`, ch.Message.ToolCalls[0].Function.Arguments)
			}
			assert.Empty(t, strings.TrimSpace(ch.Message.Content))
		})
	}
}

// requireNoAPIError stops the test at err, showing the server's error
// body when it is one.
func requireNoAPIError(t *testing.T, err error) {
	t.Helper()
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		t.Fatalf("%s", apiErr.RawJSON())
	}
	require.NoError(t, err)
}
