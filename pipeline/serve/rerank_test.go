package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// rerankVocab is the BERT tokenizer's vocabulary in the rerank tests.
const rerankVocab = bertref.FullTokenizerVocab

// bertTokenizer is bertref's WordPiece tokenizer of rerankVocab entries,
// whose pair form is [CLS] A [SEP] B:1 [SEP]:1.
func bertTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, bertref.WriteTokenizer(dir, rerankVocab))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	return tok
}

// scoreEngine is a reranker's engine: Embed gives one logit per input,
// the number of its ids of token type 1 (id ≥ vocab: the document and
// its [SEP]) less 4, so that a longer document scores higher and
// documents of one length tie. It records the inputs, and with gate set
// waits for it, after saying so on entered.
type scoreEngine struct {
	*textEngine
	vocab int

	mu      sync.Mutex
	inputs  [][]int
	gate    chan struct{}
	entered chan struct{}
}

func (e *scoreEngine) Embed(prompts [][]int) ([][]float32, error) {
	e.mu.Lock()
	e.inputs = append(e.inputs, prompts...)
	gate, entered := e.gate, e.entered
	e.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	out := make([][]float32, len(prompts))
	for i, p := range prompts {
		out[i] = []float32{scoreLogit(p, e.vocab)}
	}
	return out, nil
}

// scoreLogit is scoreEngine's logit of an input.
func scoreLogit(ids []int, vocab int) float32 {
	n := 0
	for _, id := range ids {
		if id >= vocab {
			n++
		}
	}
	return float32(n - 4)
}

// rerankServer is a testServer of a reranker (rerank) or of an encoder
// that embeds (not rerank) over a scoreEngine, with the BERT tokenizer,
// a context of ctx tokens and a queue of maxQueue (the default when 0).
func rerankServer(t *testing.T, rerank bool, ctx, maxQueue int) (*testServer, *scoreEngine) {
	t.Helper()
	tok := bertTokenizer(t)
	e := &scoreEngine{textEngine: newTextEngine(t, 1), vocab: rerankVocab}
	m := NewMetrics(func() (int, int) { return 0, 0 })
	sched := New(e, Config{MaxQueue: maxQueue, Observer: m})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(runCtx); close(done) }()
	log := &syncBuffer{}
	srv := NewServer(sched, ServerOptions{
		ModelName: testModel, Tokenizer: tok, MaxContext: ctx, VocabSize: rerankVocab,
		AccessLog: log, Metrics: m, EmbeddingSize: 1, Family: "BertForSequenceClassification",
		EmbeddingsOnly: !rerank, Rerank: rerank, TokenTypes: 2,
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
	})
	return &testServer{Server: hs, srv: srv, sched: sched, engine: e.textEngine, tok: tok, metrics: m, log: log}, e
}

// rerankReply is the response of /v1/rerank.
type rerankReply struct {
	ID    string `json:"id"`
	Model string `json:"model"`
	Usage struct {
		TotalTokens  int `json:"total_tokens"`
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
	Results []struct {
		Index          int             `json:"index"`
		RelevanceScore float64         `json:"relevance_score"`
		Document       *rerankDocument `json:"document"`
	} `json:"results"`
}

func decodeRerank(t *testing.T, body []byte) rerankReply {
	t.Helper()
	var r rerankReply
	require.NoError(t, json.Unmarshal(body, &r), string(body))
	return r
}

// TestRerank: /v1/rerank (and /rerank) scores each (query, document)
// pair through the engine's Embed, the pair encoded by PairIDs (type-1
// ids offset by the vocabulary), and answers the sigmoid of each logit,
// best first, equal scores in the documents' order, cut to top_n (0:
// all; more than the documents: all), each with its document's text
// unless return_documents is false; documents may be strings, objects
// {"text"} or both; usage counts the pairs' tokens, as the access log
// and the metrics do.
func TestRerank(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 0)
	query := "what is a tpu"
	docs := []string{"hello", "the tpu is a matrix processor", "hello world", "a model"}
	var pairs [][]int
	tokens := 0
	for _, d := range docs {
		ids, err := PairIDs(ts.tok, rerankVocab, query, d, 64)
		require.NoError(t, err)
		pairs, tokens = append(pairs, ids), tokens+len(ids)
	}
	wantOrder := []int{1, 2, 3, 0} // logits 3, -1, -1, -2: the tie keeps 2 before 3
	in, err := json.Marshal(docs)
	require.NoError(t, err)

	for _, path := range []string{"/v1/rerank", "/rerank"} {
		status, _, body := ts.post(t, path, fmt.Sprintf(`{"model":%q,"query":%q,"documents":%s}`, testModel, query, in))
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
		r := decodeRerank(t, body)
		assert.True(t, strings.HasPrefix(r.ID, "rerank-") && len(r.ID) > len("rerank-"), "id %q", r.ID)
		assert.Equal(t, testModel, r.Model)
		assert.Equal(t, tokens, r.Usage.TotalTokens, path)
		assert.Equal(t, tokens, r.Usage.PromptTokens, path)
		require.Len(t, r.Results, len(docs), path)
		for k, res := range r.Results {
			i := wantOrder[k]
			assert.Equal(t, i, res.Index, "%s: result %d", path, k)
			want := 1 / (1 + math.Exp(-float64(scoreLogit(pairs[i], rerankVocab))))
			assert.InDelta(t, want, res.RelevanceScore, 1e-12, "%s: document %d", path, i)
			require.NotNil(t, res.Document, "%s: document %d: return_documents defaults to true", path, i)
			assert.Equal(t, docs[i], res.Document.Text)
		}
	}
	// The engine got the pairs as PairIDs encodes them, the document's
	// ids carrying type 1.
	e.mu.Lock()
	got := e.inputs
	e.mu.Unlock()
	require.Len(t, got, 2*len(docs))
	assert.ElementsMatch(t, pairs, got[:len(docs)])

	// top_n cuts the best first; 0 and more than the documents keep all.
	for _, tc := range []struct{ topN, want int }{{2, 2}, {1, 1}, {0, 4}, {9, 4}} {
		status, _, body := ts.post(t, "/v1/rerank", fmt.Sprintf(`{"query":%q,"documents":%s,"top_n":%d}`, query, in, tc.topN))
		require.Equal(t, http.StatusOK, status, string(body))
		r := decodeRerank(t, body)
		require.Len(t, r.Results, tc.want, "top_n %d", tc.topN)
		for k, res := range r.Results {
			assert.Equal(t, wantOrder[k], res.Index, "top_n %d, result %d", tc.topN, k)
		}
		assert.Equal(t, tokens, r.Usage.TotalTokens, "every document is scored, whatever top_n")
	}

	// return_documents false leaves the documents out.
	status, _, body := ts.post(t, "/v1/rerank", fmt.Sprintf(`{"query":%q,"documents":%s,"return_documents":false}`, query, in))
	require.Equal(t, http.StatusOK, status, string(body))
	assert.NotContains(t, string(body), `"document"`)
	assert.Len(t, decodeRerank(t, body).Results, len(docs))

	// Objects with text, alone or mixed with strings, are the same
	// documents.
	for _, docsJSON := range []string{
		`[{"text":"hello"},{"text":"the tpu is a matrix processor"},{"text":"hello world"},{"text":"a model"}]`,
		`["hello",{"text":"the tpu is a matrix processor"},"hello world",{"text":"a model"}]`,
	} {
		status, _, body := ts.post(t, "/v1/rerank", fmt.Sprintf(`{"query":%q,"documents":%s}`, query, docsJSON))
		require.Equal(t, http.StatusOK, status, string(body))
		r := decodeRerank(t, body)
		require.Len(t, r.Results, len(docs))
		for k, res := range r.Results {
			assert.Equal(t, wantOrder[k], res.Index, "%s: result %d", docsJSON, k)
			assert.Equal(t, docs[wantOrder[k]], res.Document.Text)
		}
	}

	assert.Contains(t, ts.log.String(), `"path":"/v1/rerank","status":200`)
	assert.Contains(t, ts.log.String(), fmt.Sprintf(`"prompt_tokens":%d`, tokens))
	code, metrics := ts.getWithKey(t, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(metrics), `tputool_requests_total{endpoint="/v1/rerank",status="200"}`)
	assert.Contains(t, string(metrics), `tputool_requests_total{endpoint="/rerank",status="200"}`)
}

// TestRerankCutsToContext: a pair longer than the served context is cut
// to it as transformers cuts a pair (longest first), and usage counts
// the tokens scored.
func TestRerankCutsToContext(t *testing.T) {
	ts, e := rerankServer(t, true, 10, 0)
	long := "the tpu is a matrix processor that runs the model and the model runs on the tpu"
	status, _, body := ts.post(t, "/v1/rerank", fmt.Sprintf(`{"query":"what is a tpu","documents":[%q,"hello"]}`, long))
	require.Equal(t, http.StatusOK, status, string(body))
	want, err := PairIDs(ts.tok, rerankVocab, "what is a tpu", long, 10)
	require.NoError(t, err)
	require.Len(t, want, 10)
	short, err := PairIDs(ts.tok, rerankVocab, "what is a tpu", "hello", 10)
	require.NoError(t, err)
	e.mu.Lock()
	assert.ElementsMatch(t, [][]int{want, short}, e.inputs)
	e.mu.Unlock()
	assert.Equal(t, len(want)+len(short), decodeRerank(t, body).Usage.TotalTokens)
}

// TestRerankBadRequests: no query, no documents, a document that is neither a
// string nor an object with text alone, more than maxRerankDocuments
// documents and a field outside the API are 400s in OpenAI's shape naming
// what is wrong, and another model's name is the 404; none reaches the
// engine.
func TestRerankBadRequests(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 0)
	many, err := json.Marshal(make([]string, maxRerankDocuments+1))
	require.NoError(t, err)
	for _, tc := range []struct{ body, param, msg string }{
		{`{"documents":["a"]}`, "query", "query is required"},
		{`{"query":null,"documents":["a"]}`, "query", "query is required"},
		{`{"query":"tpu"}`, "documents", "documents is required"},
		{`{"query":"tpu","documents":null}`, "documents", "documents is required"},
		{`{"query":"tpu","documents":[]}`, "documents", "documents is empty"},
		{`{"query":"tpu","documents":"a"}`, "documents", "documents must be an array of strings or of objects with text, got JSON string"},
		{`{"query":"tpu","documents":["a",3]}`, "documents", "document 1 must be a string or an object with text, got JSON number"},
		{`{"query":"tpu","documents":[null]}`, "documents", "document 0 must be a string or an object with text, got JSON null"},
		{`{"query":"tpu","documents":[["a"]]}`, "documents", "document 0 must be a string or an object with text, got JSON array"},
		{`{"query":"tpu","documents":[{"title":"a","text":"b"}]}`, "documents", `document 0: unknown field "title"`},
		{`{"query":"tpu","documents":["a",{}]}`, "documents", "document 1 has no text"},
		{`{"query":"tpu","documents":["a"],"top_n":"2"}`, "top_n", `invalid type for "top_n"`},
		{`{"query":"tpu","documents":` + string(many) + `}`, "documents", "1001 documents: at most 1000 per request"},
		{`{"query":"tpu","documents":["a"],"return_text":true}`, "return_text", `unknown field "return_text"`},
	} {
		status, _, body := ts.post(t, "/v1/rerank", tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.body, body)
		ef := decodeError(t, body)
		assert.Equal(t, "invalid_request_error", ef.Type, tc.body)
		assert.Contains(t, ef.Message, tc.msg, tc.body)
		if assert.NotNil(t, ef.Param, tc.body) {
			assert.Equal(t, tc.param, *ef.Param, tc.body)
		}
	}
	status, _, body := ts.post(t, "/rerank", `{"model":"bge-reranker","query":"tpu","documents":["a"]}`)
	require.Equal(t, http.StatusNotFound, status, string(body))
	assert.Equal(t, "model_not_found", decodeError(t, body).Code)
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/v1/rerank", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	e.mu.Lock()
	assert.Empty(t, e.inputs, "a bad request reached the engine")
	e.mu.Unlock()
}

// TestRerankQueue: a full queue is a 429 with Retry-After, and a server
// shutting down a 503, as for embeddings.
func TestRerankQueue(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 1)
	e.mu.Lock()
	e.gate, e.entered = make(chan struct{}), make(chan struct{}, 1)
	e.mu.Unlock()
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/rerank", "application/json", strings.NewReader(`{"query":"tpu","documents":["a"]}`))
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
	status, header, body := ts.post(t, "/v1/rerank", `{"query":"tpu","documents":["b"]}`)
	assert.Equal(t, http.StatusTooManyRequests, status, string(body))
	assert.Equal(t, "1", header.Get("Retry-After"))
	close(e.gate)
	assert.Equal(t, http.StatusOK, <-first)

	e.mu.Lock()
	e.gate = nil
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ts.sched.Shutdown(ctx))
	status, _, body = ts.post(t, "/v1/rerank", `{"query":"tpu","documents":["b"]}`)
	assert.Equal(t, http.StatusServiceUnavailable, status, string(body))
	assert.Equal(t, "shutting_down", decodeError(t, body).Code)
}

// TestRerankerServesNothingElse: a reranker's embeddings endpoints
// answer 400 in their API's shape (its outputs are scores, not vectors),
// another model's name still the 404; its generating endpoints answer
// 400 naming /v1/rerank; /api/show lists no capability; and /v1/rerank
// on a server that is not a reranker is a 400.
func TestRerankerServesNothingElse(t *testing.T) {
	ts, e := rerankServer(t, true, 64, 0)
	refusal := fmt.Sprintf("model %q is a reranker (a cross-encoder): it serves /v1/rerank", testModel)
	status, _, body := ts.post(t, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":"hello"}`, testModel))
	require.Equal(t, http.StatusBadRequest, status, string(body))
	ef := decodeError(t, body)
	assert.Equal(t, refusal, ef.Message)
	assert.Equal(t, "invalid_request_error", ef.Type)
	for _, tc := range []struct{ path, body string }{
		{"/api/embed", `{"model":"stories-test","input":"hello"}`},
		{"/api/embed", `{"model":"stories-test"}`}, // loading it
		{"/api/embeddings", `{"model":"stories-test:latest","prompt":"hello"}`},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.path, body)
		assert.Equal(t, refusal, ollamaError(t, body), tc.path)
	}
	status, _, body = ts.post(t, "/v1/embeddings", `{"model":"text-embedding-3-small","input":"hello"}`)
	assert.Equal(t, http.StatusNotFound, status, string(body))
	status, _, body = ts.post(t, "/api/embed", `{"model":"nomic-embed-text","input":"hello"}`)
	assert.Equal(t, http.StatusNotFound, status, string(body))

	status, _, body = ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Equal(t, refusal+" only", decodeError(t, body).Message)
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":"hi"}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Equal(t, refusal+" only", decodeError(t, body).Message)
	status, _, body = ts.post(t, "/api/generate", `{"model":"stories-test","prompt":"hi"}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	assert.Equal(t, `"stories-test" does not support generate`, ollamaError(t, body))

	status, _, body = ts.post(t, "/api/show", `{"model":"stories-test"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Contains(t, string(body), `"capabilities":[]`)
	e.mu.Lock()
	assert.Empty(t, e.inputs)
	e.mu.Unlock()

	// An embedding model does not rerank.
	ts2, _ := rerankServer(t, false, 64, 0)
	status, _, body = ts2.post(t, "/v1/rerank", `{"query":"tpu","documents":["a"]}`)
	require.Equal(t, http.StatusBadRequest, status, string(body))
	ef = decodeError(t, body)
	assert.Contains(t, ef.Message, "is not a reranker")
	require.NotNil(t, ef.Param)
	assert.Equal(t, "model", *ef.Param)
}

// TestPairIDs: a BERT tokenizer's pair is [CLS] query [SEP] document
// [SEP], the document and its [SEP] offset by the vocabulary (type 1),
// cut to maxLen longest first; a tokenizer without a pair form is
// refused (errs.ErrUnsupported); RelevanceScore is the logit's sigmoid,
// or the logit raw.
func TestPairIDs(t *testing.T) {
	tok := bertTokenizer(t)
	vocab := bertref.TokenizerVocab(rerankVocab)
	id := func(s string) int {
		for i, v := range vocab {
			if v == s {
				return i
			}
		}
		t.Fatalf("no token %q", s)
		return -1
	}
	V := rerankVocab
	got, err := PairIDs(tok, V, "what is a tpu", "hello world", 64)
	require.NoError(t, err)
	assert.Equal(t, []int{id("[CLS]"), id("what"), id("is"), id("a"), id("tpu"), id("[SEP]"),
		V + id("hello"), V + id("world"), V + id("[SEP]")}, got)

	// Cut to 7: room for 4 of the texts' 6 tokens; the document (2) takes
	// no more than half of it and stays whole, the query is cut to the
	// other 2.
	got, err = PairIDs(tok, V, "what is a tpu", "hello world", 7)
	require.NoError(t, err)
	assert.Equal(t, []int{id("[CLS]"), id("what"), id("is"), id("[SEP]"), V + id("hello"), V + id("world"), V + id("[SEP]")}, got)

	// Without a pair form: refused.
	dir := t.TempDir()
	require.NoError(t, bertref.WriteTokenizer(dir, V))
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	require.NoError(t, err)
	var tj map[string]any
	require.NoError(t, json.Unmarshal(raw, &tj))
	tj["post_processor"] = nil
	raw, err = json.Marshal(tj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644))
	single, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	_, err = PairIDs(single, V, "what", "hello", 64)
	assert.True(t, errors.Is(err, errs.ErrUnsupported), "%v", err)

	assert.InDelta(t, 0.5, RelevanceScore(0, false), 1e-15)
	assert.InDelta(t, 1/(1+math.Exp(-2.5)), RelevanceScore(2.5, false), 1e-12)
	assert.Equal(t, -2.5, RelevanceScore(-2.5, true))
}

// TestRerankLenient: what other clients send is answered as vLLM answers
// it: a blank query, a top_n of 0 or less (every document), the fields
// Cohere's SDKs and vLLM's clients write (null or not), and the Cohere v2
// client's path /v2/rerank.
func TestRerankLenient(t *testing.T) {
	ts, _ := rerankServer(t, true, 64, 0)
	for _, tc := range []struct {
		path, body string
		results    int
	}{
		{"/v1/rerank", `{"query":"","documents":["a","b"]}`, 2},
		{"/v1/rerank", `{"query":"tpu","documents":["a","b","c"],"top_n":-1}`, 3},
		{"/v1/rerank", `{"query":"tpu","documents":["a","b"],"top_n":1,"max_chunks_per_doc":null,"return_documents":false}`, 1},
		{"/rerank", `{"query":"tpu","documents":["a"],"max_tokens_per_doc":4096,"rank_fields":null,"truncate_prompt_tokens":null,"priority":0}`, 1},
		{"/v2/rerank", `{"model":"stories-test","query":"tpu","documents":["a","b"],"top_n":2,"max_tokens_per_doc":null}`, 2},
	} {
		status, _, body := ts.post(t, tc.path, tc.body)
		require.Equal(t, http.StatusOK, status, "%s %s: %s", tc.path, tc.body, body)
		assert.Len(t, decodeRerank(t, body).Results, tc.results, "%s %s", tc.path, tc.body)
	}
}
