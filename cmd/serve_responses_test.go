package cmd

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeResponses: /v1/responses on the real stories model (with
// chatModel's template), through openai-go: a greedy answer is the text
// /v1/chat/completions gives for the same conversation, and streamed, the
// deltas join to it; reaching max_output_tokens makes it incomplete.
func TestServeResponses(t *testing.T) {
	addr, _, _ := serveModelInProcess(t, "--model", chatModel(t), "--max-batch", "2", "--max-context", "128", "--served-model-name", "stories")
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "stories", Instructions: openai.String("Once upon a time"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("a cat")}, MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0)}
	resp, err := c.Responses.New(ctx, params)
	require.NoError(t, err)
	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "stories", MaxCompletionTokens: openai.Int(12), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Once upon a time"), openai.UserMessage("a cat")}})
	require.NoError(t, err)
	require.NotEmpty(t, chat.Choices[0].Message.Content)
	t.Logf("%s: %q", resp.Status, resp.OutputText())
	assert.Equal(t, chat.Choices[0].Message.Content, resp.OutputText())
	assert.EqualValues(t, chat.Usage.PromptTokens, resp.Usage.InputTokens)
	assert.EqualValues(t, chat.Usage.CompletionTokens, resp.Usage.OutputTokens)
	if chat.Choices[0].FinishReason == "length" {
		assert.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
		assert.Equal(t, "max_output_tokens", resp.IncompleteDetails.Reason)
	} else {
		assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	}

	stream := c.Responses.NewStreaming(ctx, params)
	var text string
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
		if last.Type == "response.output_text.delta" {
			text += last.Delta
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, resp.OutputText(), text)
	assert.Equal(t, resp.OutputText(), last.Response.OutputText())
	assert.Equal(t, resp.Status, last.Response.Status)
}
