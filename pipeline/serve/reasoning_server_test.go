package serve

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/constrain"
)

// thinkTemplate closes an empty thought when enable_thinking is false,
// as Qwen3's template does, and otherwise leaves the model to open one.
const thinkTemplate = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:" +
	"{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}" +
	"{% if reasoning_effort is defined %}[{{ reasoning_effort }}]{% endif %}"

// thinkingServer serves a model whose every answer is answer's tokens,
// with the think tags as its reasoning markup.
func thinkingServer(t *testing.T, answer string) *testServer {
	t.Helper()
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	r := ThinkTags
	return newTestServer(t, serverConfig{script: ids, reasoning: &r, template: thinkTemplate})
}

// A thinking model's answer comes back split: the thought as
// reasoning_content and reasoning (the same text, for clients of either
// name), the rest as content, whole and streamed (tags split over tokens:
// the test tokenizer spells them in pieces), through the official OpenAI
// client.
func TestReasoningContent(t *testing.T) {
	const answer = "<think>\nTwo and two.\n</think>\n\nIt is four."
	ts := thinkingServer(t, answer)
	c := ts.client("")
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2+2?")}, MaxTokens: openai.Int(64),
	}
	resp, err := c.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, "It is four.", resp.Choices[0].Message.Content)
	var raw struct {
		ReasoningContent string `json:"reasoning_content"`
		Reasoning        string `json:"reasoning"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Choices[0].Message.RawJSON()), &raw))
	assert.Equal(t, "Two and two.\n", raw.ReasoningContent)
	assert.Equal(t, "Two and two.\n", raw.Reasoning)

	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	var content, reasoningContent, reasoning strings.Builder
	for stream.Next() {
		for _, cc := range stream.Current().Choices {
			content.WriteString(cc.Delta.Content)
			var d struct {
				ReasoningContent string `json:"reasoning_content"`
				Reasoning        string `json:"reasoning"`
			}
			if cc.Delta.RawJSON() != "" {
				require.NoError(t, json.Unmarshal([]byte(cc.Delta.RawJSON()), &d))
			}
			assert.Equal(t, d.ReasoningContent, d.Reasoning, "a delta carries the thought under both names")
			reasoningContent.WriteString(d.ReasoningContent)
			reasoning.WriteString(d.Reasoning)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "It is four.", content.String(), "no tag reaches the content")
	assert.Equal(t, "Two and two.\n", reasoningContent.String())
	assert.Equal(t, "Two and two.\n", reasoning.String())
}

// An earlier assistant message's thought reaches the template as
// reasoning_content whether the request names it reasoning (current
// vLLM's) or reasoning_content; given both, reasoning wins.
func TestReasoningInput(t *testing.T) {
	const tmpl = "{% for m in messages %}{{ m.role }}:{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}{{ m.content }}\n{% endfor %}assistant:"
	ts := newTestServer(t, serverConfig{template: tmpl})
	for _, c := range []struct{ fields, want string }{
		{`"reasoning":"new name"`, "assistant:[new name]Four."},
		{`"reasoning_content":"old name"`, "assistant:[old name]Four."},
		{`"reasoning":"new name","reasoning_content":"old name"`, "assistant:[new name]Four."},
	} {
		status, _, body := ts.post(t, "/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"2+2?"},`+
			`{"role":"assistant","content":"Four.",`+c.fields+`},{"role":"user","content":"Sure?"}]}`)
		require.Equal(t, 200, status, string(body))
		assert.Contains(t, ts.lastPrompt(t), c.want, c.fields)
	}
}

// chat_template_kwargs and reasoning_effort reach the template: with
// enable_thinking false the prompt closes the thought (Qwen3's switch),
// and a model that then answers directly has no reasoning_content.
func TestReasoningTemplateKwargs(t *testing.T) {
	ts := thinkingServer(t, "Four.")
	c := ts.client("")
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("2+2?")}, MaxTokens: openai.Int(16),
		ReasoningEffort: openai.ReasoningEffortHigh,
	}, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
	require.NoError(t, err)
	assert.Equal(t, "Four.", strings.TrimSpace(resp.Choices[0].Message.Content))
	assert.NotContains(t, resp.Choices[0].Message.RawJSON(), "reasoning_content")
	prompt := ts.lastPrompt(t)
	assert.True(t, strings.HasSuffix(prompt, "assistant:<think>\n\n</think>\n\n[high]"), "rendered prompt %q", prompt)

	status, _, body := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":3}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(body), "reasoning_effort must be a string")
}

// Structured output for a model the prompt leaves to think (Qwen3 with
// thinking on: the prompt neither opens nor closes a thought, and the
// think tags are tokens of their own): a model that opens a thought
// thinks freely, then answers valid JSON; one that answers at once is
// held from its first token; with enable_thinking false (the prompt
// closes an empty thought) an answer that tries to think cannot.
func TestStructuredMayThink(t *testing.T) {
	tok := tokenizerWithAdded(t, false, "<think>", "</think>")
	const schema = `{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99}},"required":["n"],"additionalProperties":false}`
	encode := func(parts ...string) []int {
		var ids []int
		for _, p := range parts {
			if id, ok := tok.TokenToID(p); ok && id >= textVocab {
				ids = append(ids, id)
				continue
			}
			enc, err := tok.Encode(p, false)
			require.NoError(t, err)
			ids = append(ids, enc...)
		}
		return ids
	}
	// thinkTemplate without reasoning_effort's suffix: the prompt ends as
	// Qwen3's does.
	const tmpl = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:" +
		"{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
	for _, tc := range []struct {
		name      string
		ids       []int
		noThink   bool
		want      string
		reasoning string
	}{
		{"thinks", encode("<think>", "Two and two.", "</think>", `{"n": 4}`), false, `{"n": 4}`, "Two and two."},
		{"answers at once", encode(`{"n": 4}`), false, `{"n": 4}`, ""},
		{"thinks then prose", encode("<think>", "Two and two.", "</think>", "It is four."), false, "", "Two and two."},
		{"thinking off", encode("<think>", "Two and two.", "</think>", `{"n": 4}`), true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ThinkTags
			ts := newTestServer(t, serverConfig{script: tc.ids, reasoning: &r, template: tmpl, tok: tok, context: 4096})
			var opts []option.RequestOption
			if tc.noThink {
				opts = append(opts, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
			}
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("2+2?")}, MaxTokens: openai.Int(1000),
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
					JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "sum", Schema: json.RawMessage(schema), Strict: openai.Bool(true)},
				}},
			}, opts...)
			require.NoError(t, err)
			msg := resp.Choices[0].Message
			assert.Equal(t, tc.reasoning, strings.TrimSpace(reasoningContent(t, msg.RawJSON())))
			assert.Equal(t, "stop", resp.Choices[0].FinishReason, "%q", msg.Content)
			validates(t, schema, msg.Content)
			if tc.want != "" {
				assert.JSONEq(t, tc.want, msg.Content)
			}
			if tc.noThink {
				assert.NotContains(t, msg.Content, "think")
			}
		})
	}
}

// reasoningContent is the reasoning_content of a chat message's JSON.
func reasoningContent(t *testing.T, raw string) string {
	t.Helper()
	var m struct {
		Reasoning string `json:"reasoning_content"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &m))
	return m.Reasoning
}

// ChatConstraintOf (generate --chat --json-schema) starts the grammar as
// the server does: after a thought the prompt opened (Deferred), with the
// first token's choice where the prompt leaves the model to open one
// (MaybeAfter), at once where it closed one or the template has no
// reasoning (Matcher), in a harmony model's final message with its
// markers read as text (Deferred, Specials).
func TestChatConstraintOf(t *testing.T) {
	tok := tokenizerWithAdded(t, false, "<think>", "</think>")
	think, err := chat.New("t", thinkTemplate, chat.Options{})
	require.NoError(t, err)
	plain, err := chat.New("p", testTemplate, chat.Options{})
	require.NoError(t, err)
	harmony, err := chat.New("h", harmonyTemplate, chat.Options{})
	require.NoError(t, err)
	g, err := constrain.ToolCalls([]constrain.Tool{{Name: "f"}}, constrain.CallMarkup{ArgsKey: "arguments"})
	require.NoError(t, err)
	v, err := constrain.NewVocab(tok.TokenBytes(), []int{textEOS})
	require.NoError(t, err)
	ix := constrain.NewIndex(g, v)
	for _, c := range []struct {
		name     string
		tmpl     *chat.Template
		prompt   string
		want     any
		specials bool
	}{
		{"opened", think, "user: x\nassistant:<think>\n", &constrain.Deferred{}, false},
		{"left open", think, "user: x\nassistant:", &constrain.MaybeAfter{}, false},
		{"closed", think, "user: x\nassistant:<think>\n\n</think>\n\n", &constrain.Matcher{}, false},
		{"no reasoning", plain, "user: x\nassistant:", &constrain.Matcher{}, false},
		{"harmony", harmony, "<|start|>user<|message|>x<|end|><|start|>assistant", &constrain.Deferred{}, true},
	} {
		cc := ChatConstraintOf(tok, c.tmpl, c.prompt, []int{textEOS})
		assert.IsType(t, c.want, cc.New(ix), c.name)
		assert.Equal(t, c.specials, len(cc.Specials) > 0, c.name)
	}
}
