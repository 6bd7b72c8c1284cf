package serve

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
)

// POST /v1/rerank, /rerank and /v2/rerank: a cross-encoder's relevance
// scores of documents to a query, best first, for a server of a reranker
// (ServerOptions.Rerank). The API is Jina's and Cohere's, as vLLM serves
// it on the three paths (the Cohere SDK's v2 client posts to /v2/rerank)
// and llama.cpp's server on the first two:
//
//	{"model", "query", "documents": ["text", ...] or [{"text"}, ...],
//	 "top_n", "return_documents"}
//	-> {"id", "model", "usage": {"total_tokens", "prompt_tokens"},
//	    "results": [{"index", "relevance_score", "document": {"text"}}]}
//
// Each (query, document) pair is one input of the model (PairIDs: the
// tokenizer's pair form, cut to the served context as transformers cuts
// a pair; CausalPairIDs for a causal cross-encoder), scored through the scheduler as embeddings are
// (Scheduler.Embed: groups of the engine's MaxPrefill, the shortest
// together); relevance_score is the sigmoid of the classifier's logit,
// or the logit with ServerOptions.RerankRaw, as sentence-transformers'
// CrossEncoder scores a one-label model by its config's activation
// (RelevanceScore). The request is decoded strictly, as OpenAI's
// endpoints are, except for the fields Cohere's SDKs and vLLM's clients
// send (max_chunks_per_doc, max_tokens_per_doc, rank_fields,
// truncate_prompt_tokens, priority), accepted and ignored; another field
// is a 400 naming it. Documents are cut to the context (and the
// tokenizer's model_max_length), never split into chunks. No query (an
// empty one is scored), no documents and more than maxRerankDocuments of
// them are 400s too, a top_n of 0 or
// less means every document (as vLLM), another model's name is the 404
// of every endpoint, and /v1/rerank on a model that is not a reranker a
// 400; a full queue is a 429 and a server shutting down a 503, as for
// embeddings. usage counts the pairs' tokens (all of them, whatever
// top_n), as the access log and the metrics do.
//
// POST /rerank also serves text-embeddings-inference's form, {"query",
// "texts"}: a body with texts and without documents is answered by
// teiRerank (tei.go) in TEI's shapes; any other body, and every body on
// /v1/rerank and /v2/rerank, is read as above (texts beside documents is
// a 400 naming it).

// maxRerankDocuments is the most documents one rerank request takes, as
// Cohere's API recommends at most 1,000; the scheduler runs them a group
// of the engine's MaxPrefill at a time, and the body limit bounds their
// text.
const maxRerankDocuments = 1000

// rerankRequest is POST /v1/rerank.
type rerankRequest struct {
	Model string `json:"model"`
	// Query is required; an empty one is scored, as vLLM scores it.
	Query *string `json:"query"`
	// Documents are strings, or objects {"text": ...} (Cohere's v1 and
	// Jina's), or a mix: parsed by rerankDocuments.
	Documents json.RawMessage `json:"documents"`
	// TopN keeps the best that many results; 0 or absent, all of them.
	TopN *int `json:"top_n"`
	// ReturnDocuments puts each document's text in its result (default
	// true, as Jina and vLLM).
	ReturnDocuments *bool `json:"return_documents"`
	// Fields other clients send, accepted and ignored, as vLLM and
	// llama.cpp ignore them: Cohere's SDKs write max_chunks_per_doc (v1,
	// often null), max_tokens_per_doc (v2) and rank_fields; vLLM's own
	// truncate_prompt_tokens and priority. Pairs are cut to the served
	// context whatever they say.
	MaxChunksPerDoc      json.RawMessage `json:"max_chunks_per_doc"`
	MaxTokensPerDoc      json.RawMessage `json:"max_tokens_per_doc"`
	RankFields           json.RawMessage `json:"rank_fields"`
	TruncatePromptTokens json.RawMessage `json:"truncate_prompt_tokens"`
	Priority             json.RawMessage `json:"priority"`
}

// rerankDocument is a document as a result returns it.
type rerankDocument struct {
	Text string `json:"text"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *rerankDocument `json:"document,omitempty"`
}

type rerankUsage struct {
	TotalTokens  int `json:"total_tokens"`
	PromptTokens int `json:"prompt_tokens"`
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Usage   rerankUsage    `json:"usage"`
	Results []rerankResult `json:"results"`
}

// rerankDocuments reads documents: an array (1 to maxRerankDocuments
// long) whose elements are strings or objects {"text": string}; an
// object with other fields is a 400 naming the field.
func rerankDocuments(raw json.RawMessage) ([]string, error) {
	if !isSet(raw) {
		return nil, badRequest("documents", "documents is required: an array of strings (or of objects with text)")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, badRequest("documents", "documents must be an array of strings or of objects with text, got JSON %s", jsonKind(raw))
	}
	switch {
	case len(elems) == 0:
		return nil, badRequest("documents", "documents is empty: want at least one document")
	case len(elems) > maxRerankDocuments:
		return nil, badRequest("documents", "%d documents: at most %d per request", len(elems), maxRerankDocuments)
	}
	docs := make([]string, len(elems))
	for i, e := range elems {
		if json.Unmarshal(e, &docs[i]) == nil && isSet(e) {
			continue
		}
		var obj struct {
			Text *string `json:"text"`
		}
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		err := dec.Decode(&obj)
		switch {
		case err != nil && strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return nil, badRequest("documents", "document %d: unknown field %q: a document is a string or an object with text alone", i, field)
		case err != nil || !isSet(e):
			return nil, badRequest("documents", "document %d must be a string or an object with text, got JSON %s", i, jsonKind(e))
		case obj.Text == nil:
			return nil, badRequest("documents", "document %d has no text: want {\"text\": string}", i)
		}
		docs[i] = *obj.Text
	}
	return docs, nil
}

// jsonKind names the kind of a JSON value, for errors.
func jsonKind(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// notReranker is the 400 of /v1/rerank for a model that is not a
// reranker; nil for one that is.
func (s *Server) notReranker() error {
	if s.o.Rerank {
		return nil
	}
	return badRequest("model", "model %q is not a reranker: /v1/rerank serves a cross-encoder (a *ForSequenceClassification of one label)", s.o.ModelName)
}

// noEmbeddings is the 400 of the embeddings endpoints for a reranker
// (ServerOptions.Rerank), whose outputs are scores, not vectors; nil for
// any other model.
func (s *Server) noEmbeddings() error {
	if !s.o.Rerank {
		return nil
	}
	return badRequest("model", "model %q is a reranker (a cross-encoder): it serves /v1/rerank", s.o.ModelName)
}

// rerank answers POST /v1/rerank, /rerank and /v2/rerank; on /rerank a
// body in TEI's form goes to teiRerank.
func (s *Server) rerank(w http.ResponseWriter, r *http.Request, x *exchange) {
	if r.URL.Path == "/rerank" {
		if body, ok := teiRerankBody(r); ok {
			s.teiRerank(w, r, x, body)
			return
		}
	}
	var req rerankRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	if err := s.notReranker(); err != nil {
		writeError(w, err)
		return
	}
	if req.Query == nil {
		writeError(w, badRequest("query", "query is required: the text the documents are scored against"))
		return
	}
	docs, err := rerankDocuments(req.Documents)
	if err != nil {
		writeError(w, err)
		return
	}
	topN := len(docs)
	if req.TopN != nil && *req.TopN > 0 { // 0 or less: every document, as vLLM
		topN = min(*req.TopN, len(docs))
	}
	scores, err := s.rerankScores(r, x, *req.Query, docs)
	if err != nil {
		writeError(w, err)
		return
	}
	results := make([]rerankResult, len(docs))
	for i, sc := range scores {
		results[i] = rerankResult{Index: i, RelevanceScore: sc}
		if req.ReturnDocuments == nil || *req.ReturnDocuments {
			results[i].Document = &rerankDocument{Text: docs[i]}
		}
	}
	// Best first; equal scores keep the documents' order.
	slices.SortStableFunc(results, func(a, b rerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	writeJSON(w, http.StatusOK, rerankResponse{
		ID: newID("rerank-"), Model: s.o.ModelName,
		Usage:   rerankUsage{TotalTokens: x.promptTokens, PromptTokens: x.promptTokens},
		Results: results[:topN],
	})
}

// rerankScores encodes each (query, document) pair (rerankPair, cut to
// the served context), scores them through the scheduler and returns
// their relevance scores in the documents' order; x counts their tokens.
func (s *Server) rerankScores(r *http.Request, x *exchange, query string, docs []string) ([]float64, error) {
	if s.o.Tokenizer == nil {
		return nil, badRequest("query", "this server has no tokenizer to encode the query and documents with")
	}
	pairs, err := s.rerankPairs(query, s.rerankMaxLen())
	if err != nil {
		return nil, badRequest("query", "encoding the query: %v", err)
	}
	inputs := make([][]int, len(docs))
	for i, d := range docs {
		ids, err := pairs.IDs(d)
		if err != nil {
			return nil, badRequest("documents", "encoding the query with document %d: %v", i, err)
		}
		inputs[i] = ids
	}
	logits, err := s.rerankLogits(r, x, inputs)
	if err != nil {
		return nil, err
	}
	scores := make([]float64, len(logits))
	for i, l := range logits {
		scores[i] = RelevanceScore(l, s.o.RerankRaw)
	}
	return scores, nil
}

// rerankMaxLen is the most tokens of a pair: the served context and the
// tokenizer's model_max_length (CrossEncoder's max_length), the smaller.
func (s *Server) rerankMaxLen() int {
	maxLen := s.o.MaxContext
	if maxLen <= 0 {
		maxLen = math.MaxInt32 // no bound
	}
	if s.o.Tokenizer == nil {
		return maxLen // the callers answer that there is none
	}
	if n := s.o.Tokenizer.ModelMaxLength(); n > 0 {
		maxLen = min(maxLen, n)
	}
	return maxLen
}

// rerankPairs encodes the query's pairs cut to maxLen tokens (Pairs):
// PairIDs', or CausalPairIDs' for a causal cross-encoder.
func (s *Server) rerankPairs(query string, maxLen int) (*Pairs, error) {
	return NewPairs(s.o.Tokenizer, TypeStride(s.o.VocabSize, s.o.TokenTypes), s.o.RerankCausal, query, maxLen)
}

// rerankLogits scores a reranker's inputs through the scheduler: each
// one's logit, in their order; x counts their tokens.
func (s *Server) rerankLogits(r *http.Request, x *exchange, inputs [][]int) ([]float32, error) {
	out, err := s.embed(r, x, inputs, 0, false)
	if err != nil {
		return nil, err
	}
	logits := make([]float32, len(out))
	for i, v := range out {
		if len(v) != 1 {
			return nil, fmt.Errorf("rerank: the model gave %d scores for pair %d, want 1 (a cross-encoder of one label)", len(v), i)
		}
		logits[i] = v[0]
	}
	return logits, nil
}
