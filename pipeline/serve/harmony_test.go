package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
)

// Harmony text split into reasoning and content (calls as hermes
// markup), fed in pieces of every size.
func TestHarmonySplitterPieces(t *testing.T) {
	call := func(name, args string) string {
		b, _ := json.Marshal(map[string]json.RawMessage{"name": jsonString(name), "arguments": json.RawMessage(args)})
		return "<tool_call>" + string(b) + "</tool_call>"
	}
	for _, c := range []struct{ text, reasoning, content string }{
		{"<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Answer.", "Think.", "Answer."},
		{"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
			"Need weather.", call("get_weather", `{"city":"Paris"}`)},
		{" to=functions.now<|channel|>commentary json<|message|>{}", "", call("now", `{}`)},
		{"<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=functions.f<|channel|>commentary<|message|>oops", "", "Let me check." + call("f", `"oops"`)},
		{"<|channel|>analysis<|message|>cut short", "cut short", ""},
		{"Plain text, no harmony.", "", "Plain text, no harmony."},
		{"<|channel|>final<|message|>A <|channel> is fine", "", "A <|channel> is fine"},
		{"<|channel|>analysis<|message|>think<|end|><|start|>assistant", "think", ""}, // cut inside the next header
		// A call to a built-in tool is no content (vLLM drops it); on the
		// analysis channel it is reasoning.
		{"<|channel|>analysis<|message|>Look.<|end|><|start|>assistant<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"query\":\"x\"}", "Look.", ""},
		{"<|channel|>analysis to=python code<|message|>print(1)", "print(1)", ""},
	} {
		for size := 1; size <= len(c.text); size++ {
			h := newHarmonySplitter()
			var rb, cb strings.Builder
			for i := 0; i < len(c.text); i += size {
				r, ct := h.feed(c.text[i:min(i+size, len(c.text))])
				rb.WriteString(r)
				cb.WriteString(ct)
			}
			r, ct := h.flush()
			rb.WriteString(r)
			cb.WriteString(ct)
			if rb.String() != c.reasoning || cb.String() != c.content {
				t.Fatalf("%q in pieces of %d: reasoning %q, content %q; want %q, %q", c.text, size, rb.String(), cb.String(), c.reasoning, c.content)
			}
		}
	}
}

// harmonyTemplate writes harmony's markup (the test tokenizer spells its
// special tokens in pieces, which the splitter reads the same way).
const harmonyTemplate = "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}" +
	"{% if tools %}<|start|>developer<|message|>{% for t in tools %}{{ t | tojson }}{% endfor %}<|end|>{% endif %}" +
	"<|start|>assistant{% if false %}<|channel|>{% endif %}"

// A harmony model through the chat API: the analysis channel is
// reasoning_content, the final channel the content, a commentary message
// to functions.NAME a tool call; whole and streamed.
func TestHarmonyChat(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"final", "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello there."},
		{"call", "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := loadTestTokenizer(t).Encode(tc.answer, false)
			require.NoError(t, err)
			ts := newTestServer(t, serverConfig{script: ids, template: harmonyTemplate, harmony: true})
			params := openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}, MaxTokens: openai.Int(200),
				Tools: []openai.ChatCompletionToolUnionParam{weatherTool},
			}
			resp, err := ts.client("").Chat.Completions.New(context.Background(), params)
			require.NoError(t, err)
			msg := resp.Choices[0].Message
			var raw struct {
				Reasoning string `json:"reasoning_content"`
			}
			require.NoError(t, json.Unmarshal([]byte(msg.RawJSON()), &raw))
			stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), params)
			acc := openai.ChatCompletionAccumulator{}
			var reasoning strings.Builder
			for stream.Next() {
				acc.AddChunk(stream.Current())
				for _, cc := range stream.Current().Choices {
					var d struct {
						Reasoning string `json:"reasoning_content"`
					}
					if cc.Delta.RawJSON() != "" {
						require.NoError(t, json.Unmarshal([]byte(cc.Delta.RawJSON()), &d))
					}
					reasoning.WriteString(d.Reasoning)
				}
			}
			require.NoError(t, stream.Err())
			if tc.name == "final" {
				assert.Equal(t, "Hello there.", msg.Content)
				assert.Equal(t, "User greets.", raw.Reasoning)
				assert.Equal(t, "Hello there.", acc.Choices[0].Message.Content)
				assert.Equal(t, "User greets.", reasoning.String())
				return
			}
			assert.Equal(t, "Need the weather.", raw.Reasoning)
			assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
			require.Len(t, msg.ToolCalls, 1)
			assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)
			assert.JSONEq(t, `{"city":"Paris"}`, msg.ToolCalls[0].Function.Arguments)
			assert.Empty(t, strings.TrimSpace(msg.Content))
			require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
			assert.JSONEq(t, `{"city":"Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
			assert.Equal(t, "Need the weather.", reasoning.String())
		})
	}
}

// Structured output for a harmony model: the analysis and the headers
// are free, the final message is held to the schema. With harmony's
// markers as special tokens (as GPT-OSS's tokenizer has them), a model
// that answers in prose answers in valid JSON; one whose final message
// would carry <|end|> inside its JSON string (a special token that reads
// as text before the final message) cannot, and its answer still
// validates; reasoning stays apart.
func TestHarmonyStructured(t *testing.T) {
	tok := tokenizerWithSpecials(t, hChannel, hMessage, hEnd, hStart)
	// Room in the string for "Os<|end|>lo".
	const schema = `{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"],"additionalProperties":false}`
	script := func(parts ...string) []int { return harmonyScript(t, tok, parts...) }
	head := []string{hChannel, "analysis", hMessage, "Think.", hEnd, hStart, "assistant", hChannel, "final", hMessage}
	for _, tc := range []struct {
		name string
		ids  []int
		want string
	}{
		{"follows", script(append(head, `{"city": "Oslo"}`)...), `{"city": "Oslo"}`},
		{"prose", script(append(head, "Sunny.")...), ""},
		{"end inside", script(append(head, `{"city": "Os`, hEnd, `lo"}`)...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := tc.ids
			ts := newTestServer(t, serverConfig{script: ids, template: harmonyTemplate, harmony: true, tok: tok, context: 4096})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where?")}, MaxTokens: openai.Int(2000),
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
					JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "place", Schema: json.RawMessage(schema), Strict: openai.Bool(true)},
				}},
			})
			requireNoAPIError(t, err)
			msg := resp.Choices[0].Message
			assert.Equal(t, "Think.", strings.TrimSpace(reasoningContent(t, msg.RawJSON())))
			assert.Equal(t, "stop", resp.Choices[0].FinishReason, "%q", msg.Content)
			validates(t, schema, msg.Content)
			if tc.want != "" {
				assert.JSONEq(t, tc.want, msg.Content)
			}
		})
	}
}

// tool_choice "required" and a named function for a harmony model: the
// answer is an optional analysis message and one commentary message to
// functions.NAME whose body is valid arguments (constrain.HarmonyCall).
// A model that calls on its own keeps its call and its reasoning; one
// that would answer in its final channel calls anyway; arguments that
// would carry <|end|> in a string cannot (the marker would end the
// message), and still validate.
func TestHarmonyForcedCall(t *testing.T) {
	tok := tokenizerWithSpecials(t, hChannel, hMessage, hEnd, hStart, hConstrain)
	script := func(parts ...string) []int { return harmonyScript(t, tok, parts...) }
	analysis := []string{hChannel, "analysis", hMessage, "Think.", hEnd, hStart, "assistant"}
	call := append(slices.Clone(analysis), hChannel, "commentary to=functions.get_weather ", hConstrain, "json", hMessage)
	bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
		Function: openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 20}}, "required": []string{"city"}, "additionalProperties": false},
		},
	}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "now"}}}
	required := openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	named := openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
	for _, tc := range []struct {
		name   string
		ids    []int
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		want   string
	}{
		{"follows", script(append(call, `{"city": "Oslo"}`)...), required, `{"city": "Oslo"}`},
		{"named follows", script(append(call, `{"city": "Oslo"}`)...), named, `{"city": "Oslo"}`},
		{"final prose", script(append(analysis, hChannel, "final", hMessage, "Sunny.")...), required, ""},
		{"end inside", script(append(call, `{"city": "Os`, hEnd, `lo"}`)...), named, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverConfig{script: tc.ids, template: harmonyTemplate, harmony: true, tok: tok, context: 4096})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(2000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded, clock}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			msg := resp.Choices[0].Message
			assert.Equal(t, "Think.", strings.TrimSpace(reasoningContent(t, msg.RawJSON())))
			assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason, "%q", msg.Content)
			require.Len(t, msg.ToolCalls, 1, "%q", msg.Content)
			c := msg.ToolCalls[0]
			switch c.Function.Name {
			case "get_weather":
				validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"],"additionalProperties":false}`, c.Function.Arguments)
			case "now":
				assert.NotEqual(t, named, tc.choice, "a named function calls it")
				validates(t, `{"type":"object"}`, c.Function.Arguments)
			default:
				t.Errorf("called %q", c.Function.Name)
			}
			if tc.want != "" {
				assert.Equal(t, "get_weather", c.Function.Name)
				assert.JSONEq(t, tc.want, c.Function.Arguments)
			}
			assert.Empty(t, strings.TrimSpace(msg.Content))
		})
	}
}

// harmonyScript is an answer as GPT-OSS's byte-level tokenizer would
// write it: the markers special tokens, JSON encoded, and other words
// (headers, short thoughts) a character a token, since this test
// tokenizer would put a word-start space before a word it encodes after a
// special token.
func harmonyScript(t *testing.T, tok *tokenizer.Tokenizer, parts ...string) []int {
	t.Helper()
	var ids []int
	for _, p := range parts {
		if id, ok := tok.TokenToID(p); ok && tok.IsSpecial(id) {
			ids = append(ids, id)
			continue
		}
		if strings.ContainsAny(p, "{\"") {
			enc, err := tok.Encode(p, false)
			require.NoError(t, err)
			ids = append(ids, enc...)
			continue
		}
		for _, c := range strings.ReplaceAll(p, " ", "\u2581") { // this tokenizer's space
			id, ok := tok.TokenToID(string(c))
			if !ok { // a byte-fallback token
				id, ok = tok.TokenToID(fmt.Sprintf("<0x%02X>", c))
			}
			require.True(t, ok, "%q", c)
			ids = append(ids, id)
		}
	}
	return ids
}

// harmonyTurnsTemplate renders earlier turns as gpt-oss's template does:
// a call's message writes its "thinking" (or, refusing both, its content)
// as an analysis message before the call; other messages their content.
const harmonyTurnsTemplate = "{% for m in messages %}{% if m.tool_calls %}" +
	"{% if m.content and m.thinking %}{{ raise_exception('Cannot pass both content and thinking') }}{% endif %}" +
	"{% if m.content %}<|start|>assistant<|channel|>analysis<|message|>{{ m.content }}<|end|>{% endif %}" +
	"{% if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}" +
	"<|start|>assistant to=functions.{{ m.tool_calls[0].function.name }}<|channel|>commentary json<|message|>{{ m.tool_calls[0].function.arguments | tojson }}<|call|>" +
	"{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}{% endfor %}<|start|>assistant"

// A tool-use loop's analysis goes back to a harmony template as
// "thinking" (the field gpt-oss's template reads), from each API's own
// field: OpenAI's reasoning, ollama's thinking, Anthropic's thinking
// block beside its tool_use.
func TestHarmonyReasoningInput(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: harmonyTurnsTemplate, harmony: true})
	for _, c := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"Weather?"},` +
			`{"role":"assistant","content":null,"reasoning":"Need the weather.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"Sunny"}]}`, "Need the weather."},
		// With content too (a preamble) the template would refuse both:
		// the content stays, as before.
		{"/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"Weather?"},` +
			`{"role":"assistant","content":"Let me check.","reasoning":"Need the weather.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"Sunny"}]}`, "Let me check."},
		{"/api/chat", `{"model":"` + testModel + `","stream":false,"options":{"num_predict":1},"messages":[{"role":"user","content":"Weather?"},` +
			`{"role":"assistant","content":"","thinking":"Need the weather.","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},` +
			`{"role":"tool","content":"Sunny"}]}`, "Need the weather."},
		{"/v1/messages", `{"model":"` + testModel + `","max_tokens":1,"messages":[{"role":"user","content":"Weather?"},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"Need the weather.","signature":""},{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Sunny"}]}]}`, "Need the weather."},
	} {
		status, _, body := ts.post(t, c.path, c.body)
		require.Equal(t, 200, status, "%s: %s", c.path, body)
		assert.Contains(t, ts.lastPrompt(t), "<|channel|>analysis<|message|>"+c.want+"<|end|>", c.path)
	}
}

// Anthropic's prefill for a harmony model continues the final message:
// the prompt opens it, and the answer is read as its body.
func TestHarmonyPrefill(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode(" 42.<|end|>", false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids, template: harmonyTemplate, harmony: true})
	status, _, body := ts.post(t, "/v1/messages", `{"model":"`+testModel+`","max_tokens":64,`+
		`"messages":[{"role":"user","content":"Say a number"},{"role":"assistant","content":"The number is"}]}`)
	require.Equal(t, 200, status, string(body))
	prompt := ts.lastPrompt(t)
	assert.True(t, strings.HasSuffix(prompt, "<|start|>assistant<|channel|>final<|message|>The number is"), "%q", prompt)
	var resp struct {
		Content []struct{ Type, Text string } `json:"content"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	require.Len(t, resp.Content, 1, string(body))
	assert.Equal(t, "42.", strings.TrimSpace(resp.Content[0].Text))
}

// continues primes the splitter only when the prompt ends inside a
// message's body: after a closed last message (a template that adds no
// generation prompt) an unmarked answer is still the content, as with no
// prompt at all.
func TestHarmonySplitterContinues(t *testing.T) {
	for _, c := range []struct{ prompt, answer, content string }{
		{"<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>The number is", " 42.", " 42."},
		{"<|start|>user<|message|>Hi<|end|><|start|>assistant", "Plain answer.", "Plain answer."},
		{"<|start|>user<|message|>Hi<|end|>", "Plain answer.", "Plain answer."},
		{"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>", "Plain answer.", "Plain answer."},
	} {
		h := newHarmonySplitter()
		h.continues(c.prompt)
		_, ct := h.feed(c.answer)
		_, rest := h.flush()
		assert.Equal(t, c.content, ct+rest, "%q", c.prompt)
	}
}
