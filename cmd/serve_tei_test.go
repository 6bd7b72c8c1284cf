package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// teiPost posts a JSON body to url+path and returns the status and body.
func teiPost(t *testing.T, url, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestServeTEI: the real server answers text-embeddings-inference's API.
// On a BERT sentence-transformers model (CLS pooling, max_seq_length 12):
// POST /embed gives /v1/embeddings' vectors, the reference encoder's;
// truncate false beyond max_seq_length is TEI's 422; GET /info describes
// an embedding model of max_input_length 12; /rerank in TEI's form is
// TEI's 424. On a cross-encoder: POST /rerank in TEI's form gives
// /v1/rerank's scores best first, with the texts under return_text, and
// /embed is TEI's 424.
func TestServeTEI(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "cls", 12)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(`{"prompts": {"query": "what is "}}`), 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	addr, _, stop := serveModelInProcess(t, "--model", dir, "--served-model-name", "minilm")
	url := "http://" + addr

	texts := []string{"What is a TPU?", "hello world"}
	in, err := json.Marshal(texts)
	require.NoError(t, err)
	status, body := teiPost(t, url, "/embed", `{"inputs":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var got [][]float64
	require.NoError(t, json.Unmarshal(body, &got), string(body))
	require.Len(t, got, len(texts))
	status, body = teiPost(t, url, "/v1/embeddings", `{"input":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var oa struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &oa))
	for i, p := range texts {
		assert.Equal(t, oa.Data[i].Embedding, got[i], "input %d: /v1/embeddings' vector", i)
		ids, err := tok.Encode(p, true)
		require.NoError(t, err)
		require.LessOrEqual(t, len(ids), 12)
		h, err := bertref.Forward(dir, c, ids)
		require.NoError(t, err)
		want := bertref.Pool(h, "cls", true)
		require.Len(t, got[i], c.Hidden)
		for j, x := range got[i] {
			assert.InDelta(t, want[j], x, 1e-5, "input %d, value %d", i, j)
		}
	}

	long := "the model runs a matrix processor, what is it?"
	ids, err := tok.Encode(long, true)
	require.NoError(t, err)
	require.Greater(t, len(ids), 12)
	status, body = teiPost(t, url, "/embed", `{"inputs":"`+long+`","truncate":false}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, string(body))
	assert.JSONEq(t, fmt.Sprintf(`{"error":"Input validation error: `+"`inputs`"+` must have less than 12 tokens. Given: %d","error_type":"Validation"}`, len(ids)), string(body))
	status, body = teiPost(t, url, "/embed", `{"inputs":"`+long+`"}`)
	require.Equal(t, http.StatusOK, status, string(body), "cut by default, as TEI's --auto-truncate")

	resp, err := http.Get(url + "/info")
	require.NoError(t, err)
	var info map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	resp.Body.Close()
	assert.Equal(t, "minilm", info["model_id"])
	assert.EqualValues(t, 12, info["max_input_length"])
	assert.Contains(t, info["model_type"], "embedding")
	assert.Equal(t, "float32", info["model_dtype"])
	assert.Equal(t, map[string]any{"embedding": map[string]any{"pooling": "cls"}}, info["model_type"], "the model's pooling")
	// prompt_name puts the model's prompt before the text.
	status, body = teiPost(t, url, "/embed", `{"inputs":"a tpu","prompt_name":"query"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	status, want := teiPost(t, url, "/embed", `{"inputs":"what is a tpu"}`)
	require.Equal(t, http.StatusOK, status, string(want))
	assert.JSONEq(t, string(want), string(body), "prompt_name query: the prompt's text before the input")
	status, body = teiPost(t, url, "/rerank", `{"query":"a","texts":["b"]}`)
	assert.Equal(t, http.StatusFailedDependency, status, string(body))
	assert.JSONEq(t, `{"error":"Backend error: model is not a re-ranker model","error_type":"Backend"}`, string(body))
	require.Equal(t, ExitOK, stop())

	// A cross-encoder.
	rc := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 40, TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	rdir := crossEncoderModel(t, rc, false)
	addr, _, stop = serveModelInProcess(t, "--model", rdir, "--served-model-name", "reranker")
	url = "http://" + addr
	query := "what is a tpu?"
	docs := []string{"hello world", "a tpu is a matrix processor, it runs the model", "the processor"}
	in, err = json.Marshal(docs)
	require.NoError(t, err)
	status, body = teiPost(t, url, "/v1/rerank", `{"query":"`+query+`","documents":`+string(in)+`}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var jina struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &jina), string(body))
	status, body = teiPost(t, url, "/rerank", `{"query":"`+query+`","texts":`+string(in)+`,"return_text":true}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var ranks []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
		Text  string  `json:"text"`
	}
	require.NoError(t, json.Unmarshal(body, &ranks), string(body))
	require.Len(t, ranks, len(docs))
	for k, r := range ranks {
		assert.Equal(t, jina.Results[k].Index, r.Index, "rank %d: /v1/rerank's order", k)
		assert.InDelta(t, jina.Results[k].RelevanceScore, r.Score, 1e-6, "rank %d", k)
		assert.Equal(t, docs[r.Index], r.Text)
		if k > 0 {
			assert.GreaterOrEqual(t, ranks[k-1].Score, r.Score, "best first")
		}
	}
	status, body = teiPost(t, url, "/embed", `{"inputs":"hello"}`)
	assert.Equal(t, http.StatusFailedDependency, status, string(body))
	assert.JSONEq(t, `{"error":"Backend error: Model is not an embedding model","error_type":"Backend"}`, string(body))
	require.Equal(t, ExitOK, stop())
}
