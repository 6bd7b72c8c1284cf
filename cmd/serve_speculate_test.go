package cmd

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// servedCompletion is a greedy completion's text and its tokens'
// log-probabilities from the server at url.
func servedCompletion(t *testing.T, url, prompt string, n int) (string, []float64) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 1})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var c struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
	return c.Choices[0].Text, c.Choices[0].Logprobs.TokenLogprobs
}

// sameCompletion: the servers at want and got answer prompt's greedy
// completion of n tokens with the same text and log-probabilities
// (within 1e-3).
func sameCompletion(t *testing.T, want, got, prompt string, n int) {
	t.Helper()
	wantText, wantLP := servedCompletion(t, want, prompt, n)
	gotText, gotLP := servedCompletion(t, got, prompt, n)
	assert.Equal(t, wantText, gotText, "%q", prompt)
	require.Len(t, gotLP, len(wantLP))
	for i := range wantLP {
		assert.InDelta(t, wantLP[i], gotLP[i], 1e-3, "%q token %d", prompt, i)
	}
}

// metricValue reads a counter from /metrics.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "%s not in /metrics", name)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// TestServeSpeculate: serve --speculate answers a greedy request running
// alone with the text and log-probabilities of a server decoding one
// token a step (the real engine: a batch of one row fed several tokens
// and taken back), nothing compiles after the warm-up, and /metrics
// counts the drafts; a sampled request is answered too.
func TestServeSpeculate(t *testing.T) {
	plainAddr, _, _ := serveInProcess(t, "--max-context", "512")
	specAddr, _, _ := serveInProcess(t, "--max-context", "512", "--speculate", "4")
	plain, spec := "http://"+plainAddr, "http://"+specAddr
	for _, p := range []string{"Once upon a time", "Lily was sad and did not know what to do. Lily was sad and"} {
		sameCompletion(t, plain, spec, p, 200)
	}
	proposed := metricValue(t, spec, "tputool_draft_tokens_total")
	accepted := metricValue(t, spec, "tputool_draft_tokens_accepted_total")
	assert.Positive(t, proposed)
	assert.Positive(t, accepted)
	assert.LessOrEqual(t, accepted, proposed)
	assert.Zero(t, metricValue(t, plain, "tputool_draft_tokens_total"))
	assert.Zero(t, metricValue(t, spec, "tputool_recompiles_total"), "the warm-up compiled the speculative steps")

	body := `{"prompt":"Once upon a time","max_tokens":60,"temperature":0.8,"seed":5}`
	resp, err := http.Post(spec+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, metricValue(t, spec, "tputool_draft_tokens_total"), proposed)
}
