package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
)

// wantEmbedding is sumEmbed's vector of ids, cut to dims (0: all) and
// normalized, as the server answers it.
func wantEmbedding(ids []int, dims int) []float64 {
	sum := 0
	for _, id := range ids {
		sum += id
	}
	v := []float64{float64(len(ids)), float64(sum), float64(ids[0]), float64(ids[len(ids)-1])}
	if dims > 0 {
		v = v[:dims]
	}
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	for i := range v {
		v[i] /= math.Sqrt(ss)
	}
	return v
}

func assertVector(t *testing.T, what string, want []float64, got []float64) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		assert.InDelta(t, want[i], got[i], 1e-6, "%s [%d]", what, i)
	}
}

// TestEmbeddings drives /v1/embeddings with the official client: strings
// and token ids, more inputs than the engine embeds at once (their order
// kept), dimensions, and the usage.
func TestEmbeddings(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	ctx := context.Background()
	a, b := ts.encode(t, "Once upon a time"), ts.encode(t, "a cat")
	resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: testModel,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"Once upon a time", "a cat"}}})
	require.NoError(t, err)
	require.Len(t, resp.Data, 2)
	assert.Equal(t, testModel, resp.Model)
	assert.EqualValues(t, len(a)+len(b), resp.Usage.PromptTokens)
	assert.EqualValues(t, len(a)+len(b), resp.Usage.TotalTokens)
	for i, ids := range [][]int{a, b} {
		assert.EqualValues(t, i, resp.Data[i].Index)
		assertVector(t, fmt.Sprint("input ", i), wantEmbedding(ids, 0), resp.Data[i].Embedding)
	}

	// 11 inputs of token ids: four groups of the engine's three.
	var lists [][]int64
	for i := range 11 {
		lists = append(lists, []int64{int64(10 + i), int64(20 + i)})
	}
	resp, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: testModel, Dimensions: openai.Int(3),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: lists}})
	require.NoError(t, err)
	require.Len(t, resp.Data, 11)
	for i, d := range resp.Data {
		assert.EqualValues(t, i, d.Index)
		assertVector(t, fmt.Sprint("token input ", i), wantEmbedding([]int{10 + i, 20 + i}, 3), d.Embedding)
	}
	ts.waitIdle(t)
}

// TestEmbeddingsBase64: encoding_format base64 is the little-endian f32
// bytes of the same vector.
func TestEmbeddingsBase64(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, body := ts.post(t, "/v1/embeddings", `{"model":"`+testModel+`","input":[5,6,7],"encoding_format":"base64"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	raw, err := base64.StdEncoding.DecodeString(resp.Data[0].Embedding)
	require.NoError(t, err)
	got := make([]float64, len(raw)/4)
	for i := range got {
		got[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	assertVector(t, "base64", wantEmbedding([]int{5, 6, 7}, 0), got)
}

// TestEmbeddingsErrors: each bad request is a 400 (404 for another model)
// naming its parameter, and an engine failure a 500; the server serves
// on after them.
func TestEmbeddingsErrors(t *testing.T) {
	ts := newTestServer(t, serverConfig{context: 64})
	many := strings.TrimSuffix(strings.Repeat(`"a",`, maxEmbedInputs+1), ",")
	long := strings.TrimSuffix(strings.Repeat(`5,`, 65), ",")
	for _, c := range []struct {
		body   string
		status int
		param  string
		code   string
	}{
		{`{"input":"a","dimensions":0}`, 400, "dimensions", ""},
		{`{"input":"a","dimensions":5}`, 400, "dimensions", ""},
		{`{"input":"a","encoding_format":"int8"}`, 400, "encoding_format", ""},
		{`{"model":"` + testModel + `"}`, 400, "input", ""},
		{`{"input":[]}`, 400, "input", ""},
		{`{"input":[[]]}`, 400, "input", ""},
		{`{"input":[` + many + `]}`, 400, "input", ""},
		{`{"input":[` + long + `]}`, 400, "input", "context_length_exceeded"},
		{`{"input":"a","model":"other"}`, 404, "model", "model_not_found"},
		{`{"input":"a","temperature":1}`, 400, "temperature", ""},
		{`{"input":[509, 5]}`, 500, "", ""},
	} {
		status, _, body := ts.post(t, "/v1/embeddings", c.body)
		require.Equal(t, c.status, status, "%.60s: %s", c.body, body)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Param   string `json:"param"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		assert.Equal(t, c.param, e.Error.Param, c.body)
		assert.Equal(t, c.code, e.Error.Code, c.body)
		assert.NotEmpty(t, e.Error.Message, c.body)
	}
	status, _, body := ts.post(t, "/v1/embeddings", `{"input":[5]}`)
	assert.Equal(t, http.StatusOK, status, string(body))
	ts.waitIdle(t)
}

// TestOllamaEmbed: /api/embed answers ollama's shape; truncate (on by
// default) cuts an input to the context, and false refuses it.
func TestOllamaEmbed(t *testing.T) {
	ts := newTestServer(t, serverConfig{context: 64})
	status, _, body := ts.post(t, "/api/embed", `{"model":"`+testModel+`:latest","input":["Once upon a time","a cat"]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Model      string      `json:"model"`
		Embeddings [][]float64 `json:"embeddings"`
		Count      int         `json:"prompt_eval_count"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	a, b := ts.encode(t, "Once upon a time"), ts.encode(t, "a cat")
	require.Len(t, resp.Embeddings, 2)
	assertVector(t, "first", wantEmbedding(a, 0), resp.Embeddings[0])
	assertVector(t, "second", wantEmbedding(b, 0), resp.Embeddings[1])
	assert.Equal(t, len(a)+len(b), resp.Count)

	long := strings.Repeat("once upon a time ", 40)
	ids := ts.encode(t, long)
	require.Greater(t, len(ids), 64)
	status, _, body = ts.post(t, "/api/embed", `{"input":"`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &resp))
	assertVector(t, "truncated", wantEmbedding(ids[:64], 0), resp.Embeddings[0])

	// No input answers no embeddings; dimensions 0 or past the model's
	// size are whole vectors, as ollama's.
	for _, empty := range []string{`{}`, `{"input":""}`, `{"input":[]}`} {
		status, _, body = ts.post(t, "/api/embed", empty)
		require.Equal(t, http.StatusOK, status, "%s: %s", empty, body)
		assert.JSONEq(t, `{"model":"`+testModel+`","embeddings":[]}`, string(body), empty)
	}
	for _, dims := range []string{"0", "9", "-1"} {
		status, _, body = ts.post(t, "/api/embed", `{"input":"a cat","dimensions":`+dims+`}`)
		require.Equal(t, http.StatusOK, status, string(body))
		require.NoError(t, json.Unmarshal(body, &resp))
		assertVector(t, "dimensions "+dims, wantEmbedding(b, 0), resp.Embeddings[0])
	}

	for _, bad := range []string{`{"input":"` + long + `","truncate":false}`, `{"input":5}`, `{"model":"other","input":"a"}`} {
		status, _, body = ts.post(t, "/api/embed", bad)
		assert.Contains(t, []int{400, 404}, status, "%.50s: %s", bad, body)
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		assert.NotEmpty(t, e.Error, bad)
	}
	ts.waitIdle(t)
}

// TestEmbeddingsManyInputs: a request of 1000 inputs (LangChain's batch)
// is answered, in order, through the engine's groups of MaxPrefill.
func TestEmbeddingsManyInputs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	inputs := make([][]int64, 1000)
	for i := range inputs {
		inputs[i] = []int64{1, int64(3 + i%500)}
	}
	resp, err := ts.client("").Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: testModel,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: inputs}})
	require.NoError(t, err)
	require.Len(t, resp.Data, len(inputs))
	for i, d := range resp.Data {
		require.EqualValues(t, i, d.Index)
		assertVector(t, fmt.Sprint("input ", i), wantEmbedding([]int{1, 3 + i%500}, 0), d.Embedding)
	}
	assert.EqualValues(t, 2000, resp.Usage.PromptTokens)
}

// tokenizerWithEnd is the test tokenizer with a post-processor that adds
// </s> after the content as well as <s> before it, as Qwen3-Embedding's
// adds <|endoftext|> (its last-token pooling takes that token's state).
func tokenizerWithEnd(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "stories260K-hf", "tokenizer.json"))
	require.NoError(t, err)
	var tj map[string]any
	require.NoError(t, json.Unmarshal(b, &tj))
	tj["post_processor"] = map[string]any{"type": "TemplateProcessing",
		"single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
		"pair": []any{},
		"special_tokens": map[string]any{
			"<s>":  map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}},
			"</s>": map[string]any{"id": "</s>", "ids": []int{textEOS}, "tokens": []string{"</s>"}}}}
	b, err = json.Marshal(tj)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	ids, err := tok.Encode("a cat", true)
	require.NoError(t, err)
	require.True(t, len(ids) > 2 && ids[0] == 1 && ids[len(ids)-1] == textEOS, "a cat: %v", ids)
	return tok
}

// cutContent is ids (<s>, content, </s>) cut to n tokens as HF
// tokenizers cut it: the content, both added tokens kept.
func cutContent(ids []int, n int) []int {
	out := append([]int{}, ids[:n-1]...)
	return append(out, ids[len(ids)-1])
}

// TestOllamaEmbedTruncateKeepsAdded: /api/embed's truncate cuts the
// content, not the end, so the </s> the post-processor appends stays the
// last token (the one last-token pooling takes).
func TestOllamaEmbedTruncateKeepsAdded(t *testing.T) {
	tok := tokenizerWithEnd(t)
	ts := newTestServer(t, serverConfig{context: 64, tok: tok})
	long := strings.Repeat("once upon a time ", 40)
	ids := ts.encode(t, long)
	require.Greater(t, len(ids), 64)
	status, _, body := ts.post(t, "/api/embed", `{"input":"`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Embeddings [][]float64 `json:"embeddings"`
		Count      int         `json:"prompt_eval_count"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	assertVector(t, "truncated", wantEmbedding(cutContent(ids, 64), 0), resp.Embeddings[0])
	assert.Equal(t, 64, resp.Count)
	ts.waitIdle(t)
}

// TestEmbedMaxLength: EmbedMaxLength (sentence_bert_config.json's
// max_seq_length) cuts every endpoint's inputs to it, texts as HF
// tokenizers cut them and token ids at the end, while an input beyond
// the context is still a 400 where truncate is off.
func TestEmbedMaxLength(t *testing.T) {
	tok := tokenizerWithEnd(t)
	ts := newTestServer(t, serverConfig{context: 64, tok: tok})
	ts.srv.o.EmbedMaxLength = 16 // set before any request; served directly below
	do := func(path, body string) (int, []byte) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		ts.srv.ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	mid := strings.Repeat("once upon a time ", 6)
	ids := ts.encode(t, mid)
	require.True(t, len(ids) > 16 && len(ids) <= 64, "%d tokens", len(ids))
	want := wantEmbedding(cutContent(ids, 16), 0)

	status, body := do("/v1/embeddings", `{"model":"`+testModel+`","input":"`+mid+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var oa struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage embeddingUsage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &oa))
	assertVector(t, "/v1/embeddings", want, oa.Data[0].Embedding)
	assert.Equal(t, 16, oa.Usage.PromptTokens)

	// Token ids have no added tokens to keep: their end is cut.
	raw, _ := json.Marshal(ids)
	status, body = do("/v1/embeddings", `{"model":"`+testModel+`","input":`+string(raw)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &oa))
	assertVector(t, "token ids", wantEmbedding(ids[:16], 0), oa.Data[0].Embedding)

	for _, body := range []string{`{"input":"` + mid + `"}`, `{"input":["` + mid + `"],"truncate":false}`} {
		status, b := do("/api/embed", body)
		require.Equal(t, http.StatusOK, status, string(b))
		var resp struct {
			Embeddings [][]float64 `json:"embeddings"`
		}
		require.NoError(t, json.Unmarshal(b, &resp))
		assertVector(t, "/api/embed "+body[len(body)-16:], want, resp.Embeddings[0])
	}

	// Beyond the context: /v1/embeddings and truncate false refuse it,
	// truncate cuts it to the bound as well.
	long := strings.Repeat("once upon a time ", 40)
	require.Greater(t, len(ts.encode(t, long)), 64)
	for _, body := range []string{`{"input":"` + long + `"}`, `{"model":"` + testModel + `","input":["` + long + `"]}`} {
		path := "/v1/embeddings"
		if !strings.Contains(body, "model") {
			path = "/api/embed"
			body = strings.TrimSuffix(body, "}") + `,"truncate":false}`
		}
		status, b := do(path, body)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", path, b)
	}
	status, body = do("/api/embed", `{"input":"`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Embeddings [][]float64 `json:"embeddings"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	assertVector(t, "long, truncate", wantEmbedding(cutContent(ts.encode(t, long), 16), 0), resp.Embeddings[0])
	ts.waitIdle(t)
}

// TestEmbedPrompt: the model's default prompt (ServerOptions.EmbedPrompt)
// goes before every text input (/v1/embeddings and /api/embed here;
// /api/embeddings takes the same path), as sentence-transformers' encode
// puts it, and not before token ids.
func TestEmbedPrompt(t *testing.T) {
	ts := newTestServer(t, serverConfig{embedPrompt: "Once upon "})
	withPrompt := ts.encode(t, "Once upon a cat")
	for _, tc := range []struct{ path, body string }{
		{"/v1/embeddings", `{"model":"` + testModel + `","input":"a cat"}`},
		{"/api/embed", `{"model":"` + testModel + `","input":["a cat"]}`},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusOK, status, "%s: %s", tc.path, body)
		var r struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
			Embeddings [][]float64 `json:"embeddings"`
		}
		require.NoError(t, json.Unmarshal(body, &r), string(body))
		got := r.Embeddings
		for _, d := range r.Data {
			got = append(got, d.Embedding)
		}
		require.Len(t, got, 1, tc.path)
		assertVector(t, tc.path, wantEmbedding(withPrompt, 0), got[0])
	}
	status, _, body := ts.post(t, "/v1/embeddings", `{"model":"`+testModel+`","input":[[10,20]]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var r struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &r), string(body))
	require.Len(t, r.Data, 1)
	assertVector(t, "token ids", wantEmbedding([]int{10, 20}, 0), r.Data[0].Embedding)
}
