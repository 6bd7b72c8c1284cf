package cmd

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
)

// echoCompletion is a completion response's first choice with its
// logprobs' nulls kept.
type echoCompletion struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
}

func postCompletion(t *testing.T, url, body string) echoCompletion {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var c echoCompletion
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
	require.Len(t, c.Choices, 1)
	return c
}

// TestServeEchoLoglikelihood: lm-evaluation-harness's loglikelihood
// request on the real model. A prompt's greedy continuation, sent back
// after the prompt as token ids with echo, logprobs 1 and max_tokens 1,
// gets for each continuation token the log-probability the generation
// reported for it (the decode path against the prompt-scoring path),
// and each is its position's likeliest token (the harness's is_greedy).
func TestServeEchoLoglikelihood(t *testing.T) {
	addr, _, _ := serveInProcess(t)
	url := "http://" + addr
	gen := postCompletion(t, url, `{"prompt":"Once upon a time","max_tokens":6,"logprobs":1,"temperature":0}`)
	tok, err := tokenizer.LoadDir(storiesDir)
	require.NoError(t, err)
	ctx, err := tok.Encode("Once upon a time", true)
	require.NoError(t, err)
	full, err := tok.Encode("Once upon a time"+gen.Choices[0].Text, true)
	require.NoError(t, err)
	require.Equal(t, ctx, full[:len(ctx)], "the continuation re-encodes after the prompt's tokens")
	cont := len(full) - len(ctx)
	require.Equal(t, 6, cont, "the continuation re-encodes to the generated tokens")

	ids, _ := json.Marshal(full)
	echo := postCompletion(t, url, `{"prompt":`+string(ids)+`,"echo":true,"logprobs":1,"max_tokens":1,"temperature":0}`)
	lp := echo.Choices[0].Logprobs
	require.Len(t, lp.TokenLogprobs, len(full)+1)
	assert.Nil(t, lp.TokenLogprobs[0])
	for j := range cont {
		got := lp.TokenLogprobs[len(ctx)+j]
		want := gen.Choices[0].Logprobs.TokenLogprobs[j]
		require.NotNil(t, got)
		require.NotNil(t, want)
		assert.InDelta(t, *want, *got, 1e-4, "continuation token %d", j)
		best := *got
		for _, v := range lp.TopLogprobs[len(ctx)+j] {
			best = max(best, v)
		}
		assert.Equal(t, best, *got, "continuation token %d is the greedy choice", j)
	}
	assert.True(t, strings.HasSuffix(echo.Choices[0].Text, gen.Choices[0].Text+lp.Tokens[len(full)]), "%q", echo.Choices[0].Text)
}
