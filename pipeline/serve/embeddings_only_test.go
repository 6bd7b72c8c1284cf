package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmbeddingsOnlyRefusesGeneration: for a model that only gives
// embeddings, every generating endpoint answers 400 in its API's error
// shape, streamed requests too, without reaching the engine: OpenAI's
// and Anthropic's invalid_request_error naming the embeddings endpoints,
// ollama's {"error"} in ollama's words; a request naming another model is
// still the 404, and ollama's unload (no prompt, keep_alive 0) still
// answers, while its load is refused as ollama refuses it.
func TestEmbeddingsOnlyRefusesGeneration(t *testing.T) {
	ts := newTestServer(t, serverConfig{embeddingsOnly: true})
	model := fmt.Sprintf(`"model":%q`, testModel)
	msgs := `"messages":[{"role":"user","content":"Hi"}]`
	refusal := fmt.Sprintf("model %q is an embedding model: it serves /v1/embeddings and /api/embed only", testModel)
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{` + model + `,"prompt":"Once upon a time","max_tokens":4}`},
		{"/v1/completions", `{"prompt":[300,301],"stream":true}`},
		{"/v1/chat/completions", `{` + model + `,` + msgs + `}`},
		{"/v1/chat/completions", `{` + msgs + `,"stream":true,"max_tokens":4}`},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", tc.path, tc.body, body)
		e := decodeError(t, body)
		assert.Equal(t, "invalid_request_error", e.Type, tc.path)
		assert.Equal(t, refusal, e.Message, tc.path)
		require.NotNil(t, e.Param, tc.path)
		assert.Equal(t, "model", *e.Param, tc.path)
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/messages", `{` + model + `,"max_tokens":4,` + msgs + `}`},
		{"/v1/messages", `{` + model + `,"max_tokens":4,"stream":true,` + msgs + `}`},
		{"/v1/messages/count_tokens", `{` + model + `,` + msgs + `}`},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", tc.path, tc.body, body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		assert.Equal(t, "error", e.Type, tc.path)
		assert.Equal(t, "invalid_request_error", e.Error.Type, tc.path)
		assert.Equal(t, refusal, e.Error.Message, tc.path)
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/api/generate", `{` + model + `,"prompt":"Once upon a time"}`, `"stories-test" does not support generate`},
		{"/api/generate", `{"model":"stories-test:latest","prompt":"Hi","stream":false}`, `"stories-test:latest" does not support generate`},
		{"/api/generate", `{"prompt":"Hi"}`, `"stories-test:latest" does not support generate`},
		{"/api/generate", `{` + model + `}`, `"stories-test" does not support generate`}, // loading it
		{"/api/chat", `{` + model + `,` + msgs + `}`, `"stories-test" does not support chat`},
		{"/api/chat", `{` + model + `,"stream":false,` + msgs + `}`, `"stories-test" does not support chat`},
		{"/api/chat", `{` + model + `,"messages":[]}`, `"stories-test" does not support chat`},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", tc.path, tc.body, body)
		assert.Equal(t, tc.want, ollamaError(t, body), "%s %s", tc.path, tc.body)
	}

	// Another model's name is the 404 it always is.
	status, _, body := ts.post(t, "/v1/chat/completions", `{"model":"gpt-4o",`+msgs+`}`)
	assert.Equal(t, http.StatusNotFound, status, string(body))
	assert.Equal(t, "model_not_found", decodeError(t, body).Code)
	status, _, body = ts.post(t, "/api/chat", `{"model":"llama3",`+msgs+`}`)
	assert.Equal(t, http.StatusNotFound, status, string(body))
	assert.Contains(t, ollamaError(t, body), "model 'llama3' not found")

	// Unloading the model is answered, as ollama answers it for any model.
	for _, path := range []string{"/api/generate", "/api/chat"} {
		status, _, body = ts.post(t, path, `{`+model+`,"keep_alive":0}`)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		var resp ollamaResponse
		require.NoError(t, json.Unmarshal(body, &resp))
		assert.True(t, resp.Done, path)
		assert.Equal(t, "unload", resp.DoneReason, path)
	}

	// Nothing reached the engine.
	ts.engine.mu.Lock()
	assert.Nil(t, ts.engine.last, "a prompt was prefilled")
	ts.engine.mu.Unlock()
	assert.Zero(t, ts.engine.liveSeqs())
}

// TestEmbeddingsOnlyServes: a model that only gives embeddings is served
// by the embeddings endpoints as any model is, lists "embedding" alone
// as its capability in /api/show, and the model list, /api/ps, /health
// and /metrics answer as usual.
func TestEmbeddingsOnlyServes(t *testing.T) {
	ts := newTestServer(t, serverConfig{embeddingsOnly: true, noChat: true})
	c := ts.client("")
	a, b := ts.encode(t, "Once upon a time"), ts.encode(t, "a cat")

	status, _, body := ts.post(t, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":["Once upon a time","a cat"]}`, testModel))
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	require.Len(t, resp.Data, 2)
	assertVector(t, "text input", wantEmbedding(a, 0), resp.Data[0].Embedding)
	assertVector(t, "second input", wantEmbedding(b, 0), resp.Data[1].Embedding)
	assert.Equal(t, len(a)+len(b), resp.Usage.PromptTokens)

	status, _, body = ts.post(t, "/api/embed", fmt.Sprintf(`{"model":%q,"input":"Once upon a time"}`, testModel))
	require.Equal(t, http.StatusOK, status, string(body))
	var embed struct {
		Embeddings [][]float64 `json:"embeddings"`
	}
	require.NoError(t, json.Unmarshal(body, &embed))
	require.Len(t, embed.Embeddings, 1)
	assertVector(t, "/api/embed", wantEmbedding(a, 0), embed.Embeddings[0])

	status, _, body = ts.post(t, "/api/embeddings", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time"}`, testModel))
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Contains(t, string(body), `"embedding":[`)

	status, _, body = ts.post(t, "/api/show", fmt.Sprintf(`{"model":%q}`, testModel))
	require.Equal(t, http.StatusOK, status, string(body))
	var show struct {
		Capabilities []string `json:"capabilities"`
	}
	require.NoError(t, json.Unmarshal(body, &show))
	assert.Equal(t, []string{"embedding"}, show.Capabilities)

	models, err := c.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	assert.Equal(t, testModel, models.Data[0].ID)
	for _, path := range []string{"/api/tags", "/api/ps", "/health", "/metrics", "/v1/models/" + testModel} {
		code, body := ts.getWithKey(t, path, "")
		assert.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	code, body := ts.getWithKey(t, "/api/tags", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), testModel+":latest")
	code, body = ts.getWithKey(t, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(string(body), `endpoint="/v1/embeddings"`), "the embeddings requests are counted:\n%s", body)
	ts.waitIdle(t)
}
