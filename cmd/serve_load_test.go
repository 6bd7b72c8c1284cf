package cmd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadPrompts are stories prompts of various lengths; the last spans
// several 64-token prefill pieces.
var loadPrompts = []string{
	"Once upon a time",
	"Lily and Tom went to the park",
	"The little dog",
	"One day, a big red ball",
	"Sam was sad because",
	"The sun was shining and the birds were singing in the trees. Mom said",
	"Tim",
	"There was a girl who loved to draw. She drew a cat, a dog and a house. One day",
	"The bird flew",
	"Ben had a toy car",
	"It was a rainy day",
	"Sue liked to bake cakes with her mom. They put flour, eggs and sugar in a big bowl. Then",
	"A frog",
	"The king and the queen",
	"Max found a shiny stone",
	strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ", 3) + "One day",
}

// generateGreedy runs `tputool generate --json` on one prompt and returns
// its text and finish reason.
func generateGreedy(t *testing.T, prompt string, n int) (string, string) {
	t.Helper()
	e := genEnv(t)
	code := e.run("--json", "generate", "--model", storiesDir, "-p", prompt, "-n", strconv.Itoa(n), "--temperature", "0")
	require.Equal(t, ExitOK, code, e.errOut.String())
	var res []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	return res[0].Text, res[0].FinishReason
}

// TestServeConcurrentEqualsGenerate: 16 concurrent completions, plain and
// streamed, with different prompts and lengths, through the official Go
// SDK against the real server on the stories model with 8 slots (so
// requests queue, join between decode steps and reuse freed slots): each
// greedy result is `tputool generate`'s, streams deliver every token's
// text in order, and usage counts match.
func TestServeConcurrentEqualsGenerate(t *testing.T) {
	type want struct {
		text, reason string
		n            int
	}
	wants := make([]want, len(loadPrompts))
	for i, p := range loadPrompts {
		n := 8 + 7*i%53
		text, reason := generateGreedy(t, p, n)
		wants[i] = want{text, reason, n}
	}
	addr, _, stop := serveInProcess(t, "--max-batch", "8", "--max-context", "256", "--served-model-name", "stories")
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	var wg sync.WaitGroup
	for i, p := range loadPrompts {
		wg.Add(1)
		go func(i int, p string) {
			defer wg.Done()
			params := openai.CompletionNewParams{
				Model:       "stories",
				Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(p)},
				MaxTokens:   openai.Int(int64(wants[i].n)),
				Temperature: openai.Float(0),
			}
			var text, reason string
			if i%2 == 0 {
				c, err := client.Completions.New(context.Background(), params)
				if !assert.NoError(t, err, "request %d", i) || !assert.Len(t, c.Choices, 1) {
					return
				}
				text, reason = c.Choices[0].Text, string(c.Choices[0].FinishReason)
				if reason == "length" {
					assert.Equal(t, int64(wants[i].n), c.Usage.CompletionTokens, "request %d: usage", i)
				}
			} else {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				s := client.Completions.NewStreaming(context.Background(), params)
				var b strings.Builder
				for s.Next() {
					ch := s.Current()
					for _, c := range ch.Choices {
						b.WriteString(c.Text)
						if c.FinishReason != "" {
							reason = string(c.FinishReason)
						}
					}
				}
				if !assert.NoError(t, s.Err(), "request %d", i) {
					return
				}
				text = b.String()
			}
			assert.Equal(t, wants[i].text, text, "request %d (%q, %d tokens): generate's greedy text", i, p, wants[i].n)
			assert.Equal(t, wants[i].reason, reason, "request %d: finish reason", i)
		}(i, p)
	}
	wg.Wait()

	// The requests were batched: some decode steps ran more than one
	// sequence (occupancy above 1/8 of the 8 slots).
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var low, all float64
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `tputool_batch_occupancy_bucket{le="0.125"} `); ok {
			low, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(line, "tputool_batch_occupancy_count "); ok {
			all, _ = strconv.ParseFloat(v, 64)
		}
	}
	assert.Greater(t, all-low, 0.0, "no decode step ran two sequences or more:\n%s", body)
	require.Equal(t, ExitOK, stop())
}

// TestServePrefixReuse: a prompt sharing a long prefix with an earlier one
// (a chat's system prompt) starts from its cached KV
// (tputool_prefix_reused_tokens_total grows) and still gives generate's
// greedy text.
func TestServePrefixReuse(t *testing.T) {
	prefix := strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ", 5)
	prompts := []string{prefix + "One day", prefix + "Her friend Tom", prefix + "One day"}
	wants := make([]string, len(prompts))
	for i, p := range prompts {
		wants[i], _ = generateGreedy(t, p, 12)
	}
	addr, _, stop := serveInProcess(t, "--max-context", "256", "--served-model-name", "stories")
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	for i, p := range prompts {
		c, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:       "stories",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(p)},
			MaxTokens:   openai.Int(12),
			Temperature: openai.Float(0),
		})
		require.NoError(t, err)
		assert.Equal(t, wants[i], c.Choices[0].Text, "prompt %d: generate's greedy text", i)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var reused float64
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "tputool_prefix_reused_tokens_total "); ok {
			reused, _ = strconv.ParseFloat(v, 64)
		}
	}
	assert.GreaterOrEqual(t, reused, 2*64.0, "the second and third prompts reuse the shared prefix (whole 64-token pieces)")
	require.Equal(t, ExitOK, stop())
}
