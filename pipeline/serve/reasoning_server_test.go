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
// reasoning_content, the rest as content, whole and streamed (tags split
// over tokens: the test tokenizer spells them in pieces), through the
// official OpenAI client.
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
		Reasoning string `json:"reasoning_content"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Choices[0].Message.RawJSON()), &raw))
	assert.Equal(t, "Two and two.\n", raw.Reasoning)

	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	var content, reasoning strings.Builder
	for stream.Next() {
		for _, cc := range stream.Current().Choices {
			content.WriteString(cc.Delta.Content)
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
	assert.Equal(t, "It is four.", content.String(), "no tag reaches the content")
	assert.Equal(t, "Two and two.\n", reasoning.String())
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
