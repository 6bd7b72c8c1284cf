package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// teiErr decodes TEI's error body, {"error", "error_type"}, and returns
// its two fields (both required).
func teiErr(t *testing.T, body []byte) (msg, typ string) {
	t.Helper()
	var e map[string]any
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Len(t, e, 2, "TEI's error has error and error_type alone: %s", body)
	msg, _ = e["error"].(string)
	typ, _ = e["error_type"].(string)
	require.NotEmpty(t, msg, string(body))
	require.NotEmpty(t, typ, string(body))
	return msg, typ
}

// teiVectors decodes /embed's answer, [[float, ...], ...].
func teiVectors(t *testing.T, body []byte) [][]float64 {
	t.Helper()
	var v [][]float64
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// openAIVectors posts body to /v1/embeddings and returns its vectors.
func openAIVectors(t *testing.T, ts *testServer, body string) [][]float64 {
	t.Helper()
	status, _, b := ts.post(t, "/v1/embeddings", body)
	require.Equal(t, http.StatusOK, status, string(b))
	var r struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(b, &r), string(b))
	var out [][]float64
	for _, d := range r.Data {
		out = append(out, d.Embedding)
	}
	return out
}

// TestTEIEmbed: POST /embed answers TEI's [[float, ...]] with the vectors
// /v1/embeddings gives for the same inputs (strings, one string, token
// ids, strings and ids mixed, more inputs than the engine embeds at
// once), the pooled vector as it is with normalize false, cut and
// normalized again with dimensions; unknown fields are ignored, as TEI's
// serde ignores them; the access log and the metrics count it.
func TestTEIEmbed(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	texts := `["Once upon a time","a cat","the end"]`
	status, _, body := ts.post(t, "/embed", `{"inputs":`+texts+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	got := teiVectors(t, body)
	want := openAIVectors(t, ts, `{"input":`+texts+`}`)
	require.Len(t, got, 3)
	assert.Equal(t, want, got, "the vectors of /v1/embeddings")
	for i, s := range []string{"Once upon a time", "a cat", "the end"} {
		assertVector(t, s, wantEmbedding(ts.encode(t, s), 0), got[i])
	}

	// One string is one vector in an array; so are token ids; strings
	// and ids mix, each in its place.
	status, _, body = ts.post(t, "/embed", `{"inputs":"a cat","model":"anything","user":1}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, [][]float64{want[1]}, teiVectors(t, body))
	status, _, body = ts.post(t, "/embed", `{"inputs":[5,6,7]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	got = teiVectors(t, body)
	require.Len(t, got, 1)
	assertVector(t, "ids", wantEmbedding([]int{5, 6, 7}, 0), got[0])
	status, _, body = ts.post(t, "/embed", `{"inputs":[[10,20],"a cat",[30]]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	got = teiVectors(t, body)
	require.Len(t, got, 3)
	assertVector(t, "mixed 0", wantEmbedding([]int{10, 20}, 0), got[0])
	assertVector(t, "mixed 1", want[1], got[1])
	assertVector(t, "mixed 2", wantEmbedding([]int{30}, 0), got[2])

	// normalize false: the pooled vector (sumEmbed's) as it is; with
	// dimensions, its first values.
	ids := ts.encode(t, "a cat")
	raw := []float64{float64(len(ids)), 0, float64(ids[0]), float64(ids[len(ids)-1])}
	for _, id := range ids {
		raw[1] += float64(id)
	}
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"normalize":false}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, [][]float64{raw}, teiVectors(t, body))
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"normalize":false,"dimensions":2}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, [][]float64{raw[:2]}, teiVectors(t, body))
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"dimensions":3,"normalize":null}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, openAIVectors(t, ts, `{"input":["a cat"],"dimensions":3}`), teiVectors(t, body))

	// 7 inputs: three groups of the engine's three, in order.
	var many []string
	for i := range 7 {
		many = append(many, strings.Repeat("a cat ", i+1))
	}
	in, err := json.Marshal(many)
	require.NoError(t, err)
	status, _, body = ts.post(t, "/embed", `{"inputs":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, openAIVectors(t, ts, `{"input":`+string(in)+`}`), teiVectors(t, body))

	assert.Contains(t, ts.log.String(), `"path":"/embed","status":200,`)
	assert.Contains(t, ts.log.String(), fmt.Sprintf(`"prompt_tokens":%d`, len(ids)))
	code, metrics := ts.getWithKey(t, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(metrics), `tputool_requests_total{endpoint="/embed",status="200"}`)
	ts.waitIdle(t)
}

// TestTEIEmbedTruncate: an input beyond max_input_length (the context,
// and EmbedMaxLength within it) is TEI's 422 with truncate false; cut
// without truncate (TEI's --auto-truncate default) and with truncate
// true, keeping the tokenizer's added tokens: at the end as /api/embed
// cuts it, or with truncation_direction Left at the start; token ids are
// cut at their end or start.
func TestTEIEmbedTruncate(t *testing.T) {
	tok := tokenizerWithEnd(t)
	ts := newTestServer(t, serverConfig{context: 64, tok: tok})
	long := strings.Repeat("once upon a time ", 40)
	ids := ts.encode(t, long)
	require.Greater(t, len(ids), 64)

	status, _, body := ts.post(t, "/embed", `{"inputs":"`+long+`","truncate":false}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, typ := teiErr(t, body)
	assert.Equal(t, fmt.Sprintf("Input validation error: `inputs` must have less than 64 tokens. Given: %d", len(ids)), msg)
	assert.Equal(t, "Validation", typ)

	right := wantEmbedding(cutContent(ids, 64), 0)
	status, _, body = ts.post(t, "/api/embed", `{"input":"`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var ollama struct {
		Embeddings [][]float64 `json:"embeddings"`
	}
	require.NoError(t, json.Unmarshal(body, &ollama))
	for _, req := range []string{
		`{"inputs":["` + long + `"]}`,
		`{"inputs":["` + long + `"],"truncate":true,"truncation_direction":"Right"}`,
		`{"inputs":["` + long + `"],"truncate":null,"truncation_direction":"right"}`,
	} {
		status, _, body = ts.post(t, "/embed", req)
		require.Equal(t, http.StatusOK, status, string(body))
		got := teiVectors(t, body)
		assertVector(t, "right "+req[len(req)-30:], right, got[0])
		assert.Equal(t, ollama.Embeddings, got, "/api/embed's cut")
	}

	// Left: <s>, the content's last 62 tokens, </s>.
	left := append([]int{ids[0]}, ids[len(ids)-63:]...)
	require.Len(t, left, 64)
	require.Equal(t, textEOS, left[63])
	for _, dir := range []string{"Left", "left"} {
		status, _, body = ts.post(t, "/embed", `{"inputs":"`+long+`","truncate":true,"truncation_direction":"`+dir+`"}`)
		require.Equal(t, http.StatusOK, status, string(body))
		assertVector(t, dir, wantEmbedding(left, 0), teiVectors(t, body)[0])
	}

	// Token ids: cut at the end, or at the start.
	raw, err := json.Marshal(ids)
	require.NoError(t, err)
	status, _, body = ts.post(t, "/embed", `{"inputs":`+string(raw)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assertVector(t, "ids right", wantEmbedding(ids[:64], 0), teiVectors(t, body)[0])
	status, _, body = ts.post(t, "/embed", `{"inputs":[`+string(raw)+`],"truncation_direction":"Left"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assertVector(t, "ids left", wantEmbedding(ids[len(ids)-64:], 0), teiVectors(t, body)[0])
	status, _, body = ts.post(t, "/embed", `{"inputs":`+string(raw)+`,"truncate":false}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))

	// EmbedMaxLength (sentence-transformers' max_seq_length) is TEI's
	// max_input_length: beyond it, truncate false is the 422 too, where
	// /v1/embeddings cuts silently.
	ts.srv.o.EmbedMaxLength = 16
	mid := strings.Repeat("once upon a time ", 6)
	midIDs := ts.encode(t, mid)
	require.True(t, len(midIDs) > 16 && len(midIDs) <= 64, "%d tokens", len(midIDs))
	status, _, body = ts.post(t, "/embed", `{"inputs":"`+mid+`","truncate":false}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, _ = teiErr(t, body)
	assert.Equal(t, fmt.Sprintf("Input validation error: `inputs` must have less than 16 tokens. Given: %d", len(midIDs)), msg)
	status, _, body = ts.post(t, "/embed", `{"inputs":"`+mid+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, openAIVectors(t, ts, `{"input":"`+mid+`"}`), teiVectors(t, body))
	ts.waitIdle(t)
}

// TestTEIEmbedPrompt: the model's default prompt comes before every text
// (EmbedPrompt), prompt_name picks one of EmbedPrompts instead, and an
// unknown name is TEI's 422 naming the prompts there are.
func TestTEIEmbedPrompt(t *testing.T) {
	ts := newTestServer(t, serverConfig{embedPrompt: "Once upon "})
	status, _, body := ts.post(t, "/embed", `{"inputs":"a cat"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assertVector(t, "default prompt", wantEmbedding(ts.encode(t, "Once upon a cat"), 0), teiVectors(t, body)[0])

	status, _, body = ts.post(t, "/embed", `{"inputs":"a cat","prompt_name":"query"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, typ := teiErr(t, body)
	assert.Equal(t, "Input validation error: `default-prompt-name` is set to `query` but no prompts were found in the Sentence Transformers configuration", msg)
	assert.Equal(t, "Validation", typ)

	ts.srv.o.EmbedPrompts = map[string]string{"query": "the end ", "document": ""}
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"prompt_name":"query"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assertVector(t, "query prompt", wantEmbedding(ts.encode(t, "the end a cat"), 0), teiVectors(t, body)[0])
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"prompt_name":"document"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assertVector(t, "empty prompt", wantEmbedding(ts.encode(t, "a cat"), 0), teiVectors(t, body)[0])
	status, _, body = ts.post(t, "/embed", `{"inputs":["a cat"],"prompt_name":"passage"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, _ = teiErr(t, body)
	assert.Contains(t, msg, "`passage` but it was not found in the Sentence Transformers prompts. Available prompts: [\"document\", \"query\"]")
}

// TestTEIBadRequests: bad bodies and refusals are TEI's {"error",
// "error_type"} with TEI's statuses, on every TEI path, the 401 and 405
// included; none reaches the engine.
func TestTEIBadRequests(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	key := []string{"Authorization", "Bearer k"}
	many := `[` + strings.TrimSuffix(strings.Repeat(`"a",`, maxEmbedInputs+1), ",") + `]`
	for _, tc := range []struct {
		path, body string
		status     int
		typ, msg   string
	}{
		{"/embed", `{"inputs":`, 400, "Validation", "Failed to parse the request body as JSON"},
		{"/embed", ``, 400, "Validation", "the body is empty"},
		{"/embed", `{}`, 422, "Validation", "missing field `inputs`"},
		{"/embed", `{"inputs":null}`, 422, "Validation", "missing field `inputs`"},
		{"/embed", `{"inputs":5}`, 422, "Validation", "inputs must be a string"},
		{"/embed", `{"inputs":["a",{"text":"b"}]}`, 422, "Validation", "inputs must be a string"},
		{"/embed", `{"inputs":[]}`, 400, "Empty", "`inputs` cannot be empty"},
		{"/embed", `{"inputs":""}`, 400, "Empty", "`inputs` cannot be empty"},
		{"/embed", `{"inputs":["a",""]}`, 400, "Empty", "`inputs` cannot be empty"},
		{"/embed", `{"inputs":[[]]}`, 400, "Empty", "`inputs` cannot be empty"},
		{"/decode", `{"ids":[]}`, 400, "Empty", "`input_ids` cannot be empty"},
		{"/decode", `{"ids":[[1],[]]}`, 400, "Empty", "`input_ids` cannot be empty"},
		{"/embed", `{"inputs":"a","normalize":"yes"}`, 422, "Validation", "normalize: invalid type: string"},
		{"/embed", `{"inputs":"a","truncation_direction":"Up"}`, 422, "Validation", "unknown variant `Up`, expected `Left` or `Right`"},
		{"/embed", `{"inputs":"a","dimensions":0}`, 422, "Validation", "Input validation error: `dimensions` should be positive"},
		{"/embed", `{"inputs":"a","dimensions":5}`, 422, "Validation", "Input validation error: `dimensions` should be smaller than the maximum embedding dimension."},
		{"/embed", `{"inputs":[99999]}`, 422, "Validation", "Input validation error: token id 99999 is outside the vocabulary"},
		{"/embed", `{"inputs":` + many + `}`, 422, "Validation", "batch size 2049 > maximum allowed batch size 2048"},
		{"/embed_all", `{"inputs":"a"}`, 424, "Backend", "Backend error: `embed_all` is not available"},
		{"/embed_sparse", `{"inputs":"a"}`, 424, "Backend", "Backend error: Model is not an embedding model with SPLADE pooling"},
		{"/tokenize", `{"inputs":"a"}`, 424, "Backend", "Backend error: /tokenize is not available"},
		{"/predict", `{"inputs":"a"}`, 424, "Backend", "Backend error: Model is not a classifier model"},
		{"/predict", `{"inputs":["a","b","c"]}`, 422, "Validation", "invalid length 3"},
		{"/predict", `{"inputs":[]}`, 422, "Validation", "invalid length 0"},
		{"/predict", `{"inputs":[["x","y"],["a",null]]}`, 422, "Validation", "batch element 1 is not an array of strings"},
		{"/decode", `{"ids":"a"}`, 422, "Validation", "ids must be an array of token ids"},
		{"/decode", `{}`, 422, "Validation", "missing field `ids`"},
		{"/rerank", `{"query":"a","texts":["b"]}`, 424, "Backend", "Backend error: model is not a re-ranker model"},
		{"/rerank", `{"query":"a","texts":[]}`, 400, "Empty", "`texts` cannot be empty"},
		{"/rerank", `{"texts":["b"]}`, 422, "Validation", "missing field `query`"},
	} {
		status, _, body := ts.post(t, tc.path, tc.body, key...)
		require.Equal(t, tc.status, status, "%s %s: %s", tc.path, tc.body, body)
		msg, typ := teiErr(t, body)
		assert.Equal(t, tc.typ, typ, "%s %s", tc.path, tc.body)
		assert.Contains(t, msg, tc.msg, "%s %s", tc.path, tc.body)
	}

	// Without the key, and with the wrong method: TEI's shape too.
	status, _, body := ts.post(t, "/embed", `{"inputs":"a"}`)
	require.Equal(t, http.StatusUnauthorized, status, string(body))
	teiErr(t, body)
	code, body := ts.getWithKey(t, "/info", "")
	require.Equal(t, http.StatusUnauthorized, code, string(body))
	teiErr(t, body)
	code, body = ts.getWithKey(t, "/embed", "k")
	require.Equal(t, http.StatusMethodNotAllowed, code, string(body))
	teiErr(t, body)
	// The rerank path's own errors stay OpenAI's before its body is read.
	status, _, body = ts.post(t, "/rerank", `{"query":"a","texts":["b"]}`)
	require.Equal(t, http.StatusUnauthorized, status, string(body))
	decodeError(t, body)

	assert.NotRegexp(t, `"prompt_tokens":[1-9]`, ts.log.String(), "a bad request reached the engine")
}

// teiRanks decodes TEI's /rerank answer.
func teiRanks(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var r []map[string]any
	require.NoError(t, json.Unmarshal(body, &r), string(body))
	return r
}

// TestTEIRerank: POST /rerank with TEI's form ranks the texts by the
// sigmoid of each pair's logit (the scores /v1/rerank gives), best
// first and equal scores in the reverse of the texts' order (TEI's sort
// then reverse); raw_scores gives the logits, return_text the texts;
// the Jina form on /rerank and /v1/rerank is as before, texts beside
// documents still a 400 naming it.
func TestTEIRerank(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 0)
	query := "what is a tpu"
	docs := []string{"hello", "the tpu is a matrix processor", "hello world", "a model"}
	in, err := json.Marshal(docs)
	require.NoError(t, err)
	logits := make([]float64, len(docs))
	for i, d := range docs {
		ids, err := PairIDs(ts.tok, rerankVocab, query, d, 64)
		require.NoError(t, err)
		logits[i] = float64(scoreLogit(ids, rerankVocab))
	}

	status, _, body := ts.post(t, "/rerank", fmt.Sprintf(`{"query":%q,"texts":%s}`, query, in))
	require.Equal(t, http.StatusOK, status, string(body))
	ranks := teiRanks(t, body)
	require.Len(t, ranks, len(docs))
	status, _, body = ts.post(t, "/v1/rerank", fmt.Sprintf(`{"query":%q,"documents":%s}`, query, in))
	require.Equal(t, http.StatusOK, status, string(body))
	jina := decodeRerank(t, body)
	jinaScore := map[int]float64{}
	for _, r := range jina.Results {
		jinaScore[r.Index] = r.RelevanceScore
	}
	// Logits 3, -1, -1, -2: documents 2 and 3 tie, and TEI lists 3 first.
	wantOrder := []int{1, 3, 2, 0}
	for k, r := range ranks {
		i := wantOrder[k]
		assert.EqualValues(t, i, r["index"], "rank %d", k)
		assert.InDelta(t, jinaScore[i], r["score"], 1e-6, "text %d: /v1/rerank's relevance_score", i)
		assert.NotContains(t, r, "text", "return_text defaults to false")
		assert.Len(t, r, 2)
	}

	status, _, body = ts.post(t, "/rerank", fmt.Sprintf(`{"query":%q,"texts":%s,"raw_scores":true,"return_text":true,"truncate":false}`, query, in))
	require.Equal(t, http.StatusOK, status, string(body))
	for k, r := range teiRanks(t, body) {
		i := wantOrder[k]
		assert.EqualValues(t, i, r["index"], "rank %d", k)
		assert.InDelta(t, logits[i], r["score"], 1e-6, "text %d: the logit", i)
		assert.Equal(t, docs[i], r["text"])
	}

	// The Jina form is unchanged on /rerank; texts with documents is
	// Jina's with an unknown field, as on /v1/rerank.
	status, _, body = ts.post(t, "/rerank", fmt.Sprintf(`{"model":%q,"query":%q,"documents":%s}`, testModel, query, in))
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, jina.Results, decodeRerank(t, body).Results)
	for _, path := range []string{"/rerank", "/v1/rerank"} {
		status, _, body = ts.post(t, path, `{"query":"a","documents":["b"],"texts":["b"]}`)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", path, body)
		assert.Contains(t, decodeError(t, body).Message, `unknown field "texts"`, path)
	}
	status, _, body = ts.post(t, "/v1/rerank", `{"query":"a","texts":["b"]}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Contains(t, decodeError(t, body).Message, `unknown field "texts"`)

	many, err := json.Marshal(make([]string, maxRerankDocuments+1))
	require.NoError(t, err)
	status, _, body = ts.post(t, "/rerank", `{"query":"a","texts":`+string(many)+`}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, _ := teiErr(t, body)
	assert.Equal(t, "batch size 1001 > maximum allowed batch size 1000", msg)
	status, _, body = ts.post(t, "/embed", `{"inputs":"a"}`)
	require.Equal(t, http.StatusFailedDependency, status, string(body))
	msg, typ := teiErr(t, body)
	assert.Equal(t, "Backend error: Model is not an embedding model", msg)
	assert.Equal(t, "Backend", typ)

	assert.Contains(t, ts.log.String(), `"path":"/rerank","status":200`)
	e.mu.Lock()
	assert.Len(t, e.inputs, 4*len(docs), "TEI, Jina, TEI raw, Jina on /rerank")
	e.mu.Unlock()
}

// TestTEIRerankTruncate: a pair beyond the served context is TEI's 422
// with truncate false; cut as /v1/rerank cuts it (each text's first
// tokens, longest first) by default; with truncation_direction Left,
// each text keeps its last tokens, as many as longest first keeps.
func TestTEIRerankTruncate(t *testing.T) {
	ts, e := rerankServer(t, true, 10, 0)
	query := "what is a tpu" // 4 tokens
	long := "the tpu is a matrix processor that runs the model and the model runs on the tpu"
	full, err := PairIDs(ts.tok, rerankVocab, query, long, 1000)
	require.NoError(t, err)

	status, _, body := ts.post(t, "/rerank", fmt.Sprintf(`{"query":%q,"texts":[%q],"truncate":false}`, query, long))
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	msg, typ := teiErr(t, body)
	assert.Equal(t, fmt.Sprintf("Input validation error: `inputs` must have less than 10 tokens. Given: %d", len(full)), msg)
	assert.Equal(t, "Validation", typ)

	right, err := PairIDs(ts.tok, rerankVocab, query, long, 10)
	require.NoError(t, err)
	require.Len(t, right, 10)
	// 10 less [CLS] [SEP] [SEP] is 7: the query (4) takes more than half,
	// so it keeps 3 and the text 4 (tokenizers' LongestFirst).
	V := rerankVocab
	cls, sep := full[0], full[5]
	docIDs := full[6 : len(full)-1]
	left := append([]int{cls}, full[2:5]...)
	left = append(left, sep)
	left = append(left, docIDs[len(docIDs)-4:]...)
	left = append(left, full[len(full)-1])
	require.Len(t, left, 10)
	assert.Equal(t, right[:4], append([]int{cls}, full[1:4]...), "right keeps the query's first tokens")
	assert.Equal(t, V+sep, left[9])

	for _, tc := range []struct {
		body string
		want []int
	}{
		{fmt.Sprintf(`{"query":%q,"texts":[%q]}`, query, long), right},
		{fmt.Sprintf(`{"query":%q,"texts":[%q],"truncate":true,"truncation_direction":"Right"}`, query, long), right},
		{fmt.Sprintf(`{"query":%q,"texts":[%q],"truncation_direction":"Left"}`, query, long), left},
	} {
		e.mu.Lock()
		e.inputs = nil
		e.mu.Unlock()
		status, _, body := ts.post(t, "/rerank", tc.body)
		require.Equal(t, http.StatusOK, status, string(body))
		e.mu.Lock()
		assert.Equal(t, [][]int{tc.want}, e.inputs, tc.body)
		e.mu.Unlock()
		assert.InDelta(t, RelevanceScore(scoreLogit(tc.want, V), false), teiRanks(t, body)[0]["score"], 1e-6)
	}
	// The query is encoded once for all the texts: each of several gets
	// its own cut, from either side.
	for _, dir := range []string{"Left", "Right"} {
		want := map[string][]int{"Left": left, "Right": right}[dir]
		e.mu.Lock()
		e.inputs = nil
		e.mu.Unlock()
		status, _, body := ts.post(t, "/rerank", fmt.Sprintf(`{"query":%q,"texts":[%q,%q,%q],"truncation_direction":%q}`, query, long, long, long, dir))
		require.Equal(t, http.StatusOK, status, string(body))
		e.mu.Lock()
		assert.Equal(t, [][]int{want, want, want}, e.inputs, dir)
		e.mu.Unlock()
	}
}

// TestTEIRerankQueue: a full queue is TEI's 429 Overloaded.
func TestTEIRerankQueue(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 1)
	e.mu.Lock()
	e.gate, e.entered = make(chan struct{}), make(chan struct{}, 1)
	e.mu.Unlock()
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/rerank", "application/json", strings.NewReader(`{"query":"tpu","texts":["a"]}`))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	select {
	case <-e.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach the engine")
	}
	status, _, body := ts.post(t, "/rerank", `{"query":"tpu","texts":["b"]}`)
	require.Equal(t, http.StatusTooManyRequests, status, string(body))
	msg, typ := teiErr(t, body)
	assert.Equal(t, "Model is overloaded", msg)
	assert.Equal(t, "Overloaded", typ)
	close(e.gate)
	assert.Equal(t, http.StatusOK, <-first)
	e.mu.Lock()
	e.gate = nil
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ts.sched.Shutdown(ctx))
	status, _, body = ts.post(t, "/predict", `{"inputs":"a"}`)
	require.Equal(t, http.StatusServiceUnavailable, status, string(body))
	_, typ = teiErr(t, body)
	assert.Equal(t, "Unhealthy", typ)
}

// TestTEIPredict: a reranker's /predict scores a text alone (the
// tokenizer's single form), a pair (as /rerank scores it) or a batch of
// both, under LABEL_0: one input's predictions, or a batch's arrays.
func TestTEIPredict(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 0)
	single := ts.encode(t, "hello world")
	pair, err := PairIDs(ts.tok, rerankVocab, "what is a tpu", "hello world", 64)
	require.NoError(t, err)
	score := func(ids []int) float64 { return RelevanceScore(scoreLogit(ids, rerankVocab), false) }

	var one []teiPrediction
	status, _, body := ts.post(t, "/predict", `{"inputs":"hello world"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &one), string(body))
	require.Len(t, one, 1)
	assert.Equal(t, "LABEL_0", one[0].Label)
	assert.InDelta(t, score(single), one[0].Score, 1e-6)

	status, _, body = ts.post(t, "/predict", `{"inputs":["what is a tpu","hello world"],"raw_scores":true}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &one), string(body))
	require.Len(t, one, 1)
	assert.InDelta(t, scoreLogit(pair, rerankVocab), one[0].Score, 1e-6, "the logit")

	var batch [][]teiPrediction
	status, _, body = ts.post(t, "/predict", `{"inputs":[["what is a tpu","hello world"],["hello world"]]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &batch), string(body))
	require.Len(t, batch, 2)
	assert.InDelta(t, score(pair), batch[0][0].Score, 1e-6)
	assert.InDelta(t, score(single), batch[1][0].Score, 1e-6)
	e.mu.Lock()
	assert.True(t, slices.ContainsFunc(e.inputs, func(in []int) bool { return slices.Equal(in, pair) }))
	e.mu.Unlock()
}

// TestTEIDecode: /decode gives each id list's text, without the special
// tokens unless skip_special_tokens is false.
func TestTEIDecode(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ids := ts.encode(t, "Once upon a time")
	raw, err := json.Marshal(ids)
	require.NoError(t, err)
	var texts []string
	status, _, body := ts.post(t, "/decode", `{"ids":`+string(raw)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &texts))
	assert.Equal(t, []string{ts.tok.Decode(ids, true)}, texts)
	assert.Equal(t, "Once upon a time", strings.TrimSpace(texts[0]))

	status, _, body = ts.post(t, "/decode", `{"ids":[`+string(raw)+`,[5]],"skip_special_tokens":false}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &texts))
	assert.Equal(t, []string{ts.tok.Decode(ids, false), ts.tok.Decode([]int{5}, false)}, texts)
	assert.NotEqual(t, texts[0], ts.tok.Decode(ids, true), "the special <s> is kept")
}

// TestTEIInfo: GET /info has every field of TEI's Info; an embedding
// model's model_type names its pooling in TEI's words, a reranker's its
// one label; the bounds are the server's.
func TestTEIInfo(t *testing.T) {
	fields := []string{"model_id", "model_sha", "model_dtype", "served_model_name", "model_type",
		"max_concurrent_requests", "max_input_length", "max_batch_tokens", "max_batch_requests",
		"max_client_batch_size", "auto_truncate", "tokenization_workers", "version", "sha", "docker_label"}
	info := func(ts *testServer) map[string]any {
		t.Helper()
		code, body := ts.getWithKey(t, "/info", "")
		require.Equal(t, http.StatusOK, code, string(body))
		var m map[string]any
		require.NoError(t, json.Unmarshal(body, &m), string(body))
		assert.ElementsMatch(t, fields, slices.Collect(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}))
		return m
	}

	ts := newTestServer(t, serverConfig{context: 64, maxQueue: 5})
	ts.srv.o.Pooling, ts.srv.o.Quantization, ts.srv.o.EmbedMaxLength = "last", "BF16", 32
	m := info(ts)
	assert.Equal(t, testModel, m["model_id"])
	assert.Equal(t, testModel, m["served_model_name"])
	assert.Equal(t, "bfloat16", m["model_dtype"])
	assert.Equal(t, map[string]any{"embedding": map[string]any{"pooling": "last_token"}}, m["model_type"])
	assert.EqualValues(t, 32, m["max_input_length"], "EmbedMaxLength within the context")
	assert.EqualValues(t, 3, m["max_batch_requests"], "the engine's MaxPrefill")
	assert.EqualValues(t, 96, m["max_batch_tokens"])
	assert.EqualValues(t, 5, m["max_concurrent_requests"])
	assert.EqualValues(t, maxEmbedInputs, m["max_client_batch_size"])
	assert.Equal(t, true, m["auto_truncate"])
	assert.Equal(t, teiAPIVersion, m["version"])
	assert.Nil(t, m["model_sha"])

	rs, _ := rerankServer(t, true, 40, 0)
	m = info(rs)
	assert.Equal(t, map[string]any{"reranker": map[string]any{"id2label": map[string]any{"0": "LABEL_0"}, "label2id": map[string]any{"LABEL_0": 0.0}}}, m["model_type"])
	assert.EqualValues(t, 40, m["max_input_length"])
	assert.EqualValues(t, maxRerankDocuments, m["max_client_batch_size"])
}

// TestLeftTruncate: a Left cut keeps the content's last tokens between
// the added ones; ids that fit come back as they are, and a limit that
// leaves no room for content cuts the start.
func TestLeftTruncate(t *testing.T) {
	tok := tokenizerWithEnd(t)
	ids, err := tok.Encode("once upon a time there was a cat", true)
	require.NoError(t, err)
	n := len(ids)
	got, err := leftTruncate(tok, "once upon a time there was a cat", ids, 5)
	require.NoError(t, err)
	assert.Equal(t, append(append([]int{ids[0]}, ids[n-4:n-1]...), ids[n-1]), got)
	got, err = leftTruncate(tok, "once upon a time there was a cat", ids, n)
	require.NoError(t, err)
	assert.Equal(t, ids, got)
	got, err = leftTruncate(tok, "once upon a time there was a cat", ids, 2)
	require.NoError(t, err)
	assert.Equal(t, ids[n-2:], got)

}

// TestTEIDefaultRoute: TEI's POST / (and SageMaker's /invocations) is an
// embedding server's /embed and a reranker's /rerank, for the clients
// given the server's bare URL (huggingface_hub's InferenceClient,
// haystack's embedders); GET / stays ollama's, and a generating model's
// POST / is still a 405.
func TestTEIDefaultRoute(t *testing.T) {
	ts := newTestServer(t, serverConfig{embeddingsOnly: true})
	_, _, want := ts.post(t, "/embed", `{"inputs":["a cat","the end"]}`)
	for _, path := range []string{"/", "/invocations"} {
		status, _, body := ts.post(t, path, `{"inputs":["a cat","the end"]}`)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		assert.JSONEq(t, string(want), string(body), "%s: /embed's vectors", path)
	}
	resp, err := http.Get(ts.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "GET / is ollama's")

	rs, _ := rerankServer(t, true, 64, 0)
	body := `{"query":"what is a tpu","texts":["hello","the tpu is a matrix processor"]}`
	_, _, want = rs.post(t, "/rerank", body)
	status, _, got := rs.post(t, "/", body)
	require.Equal(t, http.StatusOK, status, string(got))
	assert.JSONEq(t, string(want), string(got), "/rerank's ranks")

	gen := newTestServer(t, serverConfig{})
	status, _, got = gen.post(t, "/", `{"inputs":"a"}`)
	assert.Equal(t, http.StatusMethodNotAllowed, status, string(got))
}

// TestTEISimilarity: POST /similarity (huggingface_hub's
// sentence_similarity) is the cosine of the source sentence's /embed
// vector with each sentence's, in their order; /embeddings is
// /v1/embeddings; a reranker's /similarity is TEI's 424, and missing or
// empty inputs TEI's 4xx.
func TestTEISimilarity(t *testing.T) {
	ts := newTestServer(t, serverConfig{embeddingsOnly: true})
	_, _, body := ts.post(t, "/embed", `{"inputs":["Once upon a time","a cat","the end"]}`)
	vecs := teiVectors(t, body)
	status, _, body := ts.post(t, "/similarity", `{"inputs":{"source_sentence":"Once upon a time","sentences":["a cat","the end"]}}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var sims []float64
	require.NoError(t, json.Unmarshal(body, &sims))
	require.Len(t, sims, 2)
	for i, v := range vecs[1:] {
		var dot float64
		for j, a := range vecs[0] {
			dot += a * v[j]
		}
		assert.InDelta(t, dot, sims[i], 1e-6, "sentence %d", i)
	}
	assert.NotEqual(t, sims[0], sims[1])

	_, _, want := ts.post(t, "/v1/embeddings", `{"input":"a cat"}`)
	status, _, got := ts.post(t, "/embeddings", `{"input":"a cat"}`)
	require.Equal(t, http.StatusOK, status, string(got))
	var a, b struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(want, &a))
	require.NoError(t, json.Unmarshal(got, &b))
	assert.Equal(t, a.Data, b.Data, "/embeddings is /v1/embeddings")

	for _, tc := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{}`, 422, "missing field `inputs`"},
		{`{"inputs":{"sentences":["a"]}}`, 422, "missing field `source_sentence`"},
		{`{"inputs":{"source_sentence":"a","sentences":[]}}`, 400, "`sentences` cannot be empty"},
		{`{"inputs":{"source_sentence":"","sentences":["a"]}}`, 400, "`inputs` cannot be empty"},
		{`{"inputs":{"source_sentence":"a","sentences":["b"]},"parameters":{"prompt_name":"nope"}}`, 422, "is set to `nope`"},
	} {
		status, _, body := ts.post(t, "/similarity", tc.body)
		assert.Equal(t, tc.status, status, "%s: %s", tc.body, body)
		assert.Contains(t, string(body), tc.msg, tc.body)
	}
	rs, _ := rerankServer(t, true, 64, 0)
	status, _, body = rs.post(t, "/similarity", `{"inputs":{"source_sentence":"a","sentences":["b"]}}`)
	assert.Equal(t, http.StatusFailedDependency, status, string(body))
}
