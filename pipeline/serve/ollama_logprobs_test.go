package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ollamaLine is an ollama response line with its log-probabilities.
type ollamaLine struct {
	Response  string `json:"response"`
	Done      bool   `json:"done"`
	EvalCount int    `json:"eval_count"`
	Message   *struct {
		Content string `json:"content"`
	} `json:"message"`
	Logprobs []struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		Bytes       []int   `json:"bytes"`
		TopLogprobs []struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
		} `json:"top_logprobs"`
	} `json:"logprobs"`
}

// TestOllamaLogprobs: ollama's logprobs and top_logprobs (ollama 0.12)
// on /api/generate and /api/chat, whole and streamed: one entry a
// generated token (none for the end-of-sequence token), its text the
// token's, its value the model's, with the asked alternatives; streamed,
// the lines' entries together are the whole answer's; none without
// logprobs; top_logprobs out of 0 to 20 is a 400, with or without
// logprobs (as ollama checks it).
func TestOllamaLogprobs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	prompt := ts.encode(t, "Once upon a time")
	ids, text, _ := ts.expect(prompt, 6)
	for _, c := range []struct{ path, body string }{
		{"/api/generate", `{"model":"stories-test","prompt":"Once upon a time","raw":true,"stream":false,"logprobs":true,"top_logprobs":2,"options":{"num_predict":6,"temperature":0}}`},
		{"/api/generate", `{"model":"stories-test","prompt":"Once upon a time","raw":true,"logprobs":true,"top_logprobs":2,"options":{"num_predict":6,"temperature":0}}`},
	} {
		status, _, body := ts.post(t, c.path, c.body)
		require.Equal(t, 200, status, string(body))
		var got []ollamaLine
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			var l ollamaLine
			require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
			got = append(got, l)
		}
		var all strings.Builder
		var n int
		for _, l := range got {
			all.WriteString(l.Response)
			for _, lp := range l.Logprobs {
				prev := prompt[len(prompt)-1]
				if n > 0 {
					prev = ids[n-1]
				}
				want := textLogits(prev)
				assert.Equal(t, ts.srv.tokenText(prev, ids[n]), lp.Token, "token %d", n)
				assert.InDelta(t, float64(want[ids[n]])-textLSE(want), lp.Logprob, 1e-4, "token %d", n)
				assert.Len(t, lp.TopLogprobs, 2)
				n++
			}
		}
		assert.Equal(t, text, all.String())
		assert.Equal(t, len(ids), n, "one entry a generated token (%s)", c.body)
	}
	status, _, body := ts.post(t, "/api/generate", `{"model":"stories-test","prompt":"Once upon a time","stream":false,"options":{"num_predict":4}}`)
	require.Equal(t, 200, status, string(body))
	assert.NotContains(t, string(body), "logprobs")
	status, _, body = ts.post(t, "/api/chat", `{"model":"stories-test","messages":[{"role":"user","content":"hi"}],"stream":false,"logprobs":true,"options":{"num_predict":4,"temperature":0}}`)
	require.Equal(t, 200, status, string(body))
	var chat ollamaLine
	require.NoError(t, json.Unmarshal(body, &chat))
	assert.Len(t, chat.Logprobs, chat.EvalCount)
	for _, bad := range []string{`"logprobs":true,"top_logprobs":21`, `"top_logprobs":-1`} {
		status, _, body = ts.post(t, "/api/generate", `{"model":"stories-test","prompt":"hi",`+bad+`}`)
		assert.Equal(t, 400, status, string(body))
		assert.Contains(t, string(body), "top_logprobs")
	}
}
