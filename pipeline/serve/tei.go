package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/tputool/tputool/loader/tokenizer"
)

// Hugging Face text-embeddings-inference (TEI)'s HTTP API, for its
// clients (huggingface_hub's InferenceClient.feature_extraction given
// the /embed URL, llama-index's TextEmbeddingsInference, haystack's
// HuggingFaceTEIRanker), as TEI 1.9.3 serves it (router/src/http/types.rs
// and server.rs, core/src/infer.rs and tokenization.rs):
//
//	POST /embed   {"inputs", "normalize", "truncate", "truncation_direction",
//	               "prompt_name", "dimensions"} -> [[float, ...], ...]
//	POST /rerank  {"query", "texts", "raw_scores", "return_text", "truncate",
//	               "truncation_direction"} -> [{"index", "score", "text"?}]
//	               (rerank.go sends a body with texts and no documents here)
//	POST /predict {"inputs", "raw_scores", "truncate", "truncation_direction"}
//	               -> [{"score", "label"}] or [[...], ...] (a reranker's one label)
//	POST /decode  {"ids", "skip_special_tokens"} -> [string, ...]
//	POST /similarity {"inputs": {"source_sentence", "sentences"},
//	               "parameters"} -> [float, ...] (cosines of /embed's vectors)
//	GET  /info    the model's info object
//
// TEI's default routes, POST / and /invocations, are an embeddings
// server's /embed and a reranker's /rerank (server.go), and /embeddings
// is /v1/embeddings. /embed_all, /embed_sparse and /tokenize answer TEI's
// error for what the model cannot do. Each reuses the other APIs' paths: the scheduler's
// Embed for vectors and scores (Server.embed), FinishEmbedding's cut and
// normalisation, EmbedPrompt, EmbedMaxLength, PairIDs and RelevanceScore.
//
// Where TEI differs from tputool's other endpoints, these follow TEI:
// bodies are decoded leniently (unknown fields ignored, as serde does);
// errors are {"error", "error_type"} with TEI's statuses (422 for
// Validation and Tokenizer, 400 for Empty, 424 for Backend, 429 for
// Overloaded, 503 for Unhealthy); an input beyond the limit
// (max_input_length: EmbedMaxLength and the context for embeddings) is
// cut only with truncate, which defaults to true as TEI's --auto-truncate
// does since 1.9.0, and is otherwise a 422, EmbedMaxLength included; a
// reranker's score is the logit's sigmoid unless raw_scores, whatever the
// model's configured activation (ServerOptions.RerankRaw); ranks of equal
// score come in the reverse of the texts' order, as TEI's sort then
// reverse leaves them.

// teiAPIVersion is the TEI release whose API these endpoints follow
// (/info's version).
const teiAPIVersion = "1.9.3"

// teiLabel is a one-label reranker's label in /info and /predict:
// transformers' default id2label name (ServerOptions carries none).
const teiLabel = "LABEL_0"

// TEI's error types (its ErrorType, serialized as the variants' names).
const (
	teiValidation = "Validation"
	teiEmpty      = "Empty"
	teiBackend    = "Backend"
	teiOverloaded = "Overloaded"
	teiTokenizer  = "Tokenizer"
	teiUnhealthy  = "Unhealthy"
)

// teiError is an error answered in TEI's shape, {"error", "error_type"}.
type teiError struct {
	Status  int
	Message string
	Type    string
}

func (e *teiError) Error() string { return e.Message }

// teiInvalid is TEI's Validation error (422), its message prefixed as
// TextEmbeddingsError::Validation writes it.
func teiInvalid(format string, args ...any) *teiError {
	return &teiError{http.StatusUnprocessableEntity, "Input validation error: " + fmt.Sprintf(format, args...), teiValidation}
}

// teiBackendError is TEI's Backend error (424), as its wrong-model-type
// refusals (BackendError::Inference) read.
func teiBackendError(format string, args ...any) *teiError {
	return &teiError{http.StatusFailedDependency, "Backend error: " + fmt.Sprintf(format, args...), teiBackend}
}

// teiEmptyError is TEI's 400 for an empty batch.
func teiEmptyError(field string) *teiError {
	return &teiError{http.StatusBadRequest, fmt.Sprintf("`%s` cannot be empty", field), teiEmpty}
}

// teiBatchError is TEI's 422 for more inputs than max_client_batch_size.
func teiBatchError(n, max int) *teiError {
	return &teiError{http.StatusUnprocessableEntity, fmt.Sprintf("batch size %d > maximum allowed batch size %d", n, max), teiValidation}
}

// teiTooLong is TEI's 422 for an input beyond max_input_length without
// truncate.
func teiTooLong(limit, n int) *teiError {
	return teiInvalid("`inputs` must have less than %d tokens. Given: %d", limit, n)
}

// teiTokenizerError is TEI's 422 for a failed encoding.
func teiTokenizerError(err error) *teiError {
	return &teiError{http.StatusUnprocessableEntity, "tokenizer error " + err.Error(), teiTokenizer}
}

// teiBodyError is the error of a body that does not decode: 400 when it
// is not JSON, 422 when it is of the wrong shape (axum's statuses for
// TEI's Json extractor, which answers them in plain text), 413 over the
// body limit.
func teiBodyError(status int, format string, args ...any) *teiError {
	return &teiError{status, fmt.Sprintf(format, args...), teiValidation}
}

// teiPath reports whether path is one of TEI's own (its errors, the 401,
// 404 and 405 included, are TEI's shape). /rerank is not: it is Jina's and
// Cohere's too, and answers TEI's shape only for a body in TEI's form.
func teiPath(path string) bool {
	switch path {
	case "/embed", "/embed_all", "/embed_sparse", "/predict", "/info", "/tokenize", "/decode", "/similarity":
		return true
	}
	return false
}

// writeTEIError answers err in TEI's shape: a *teiError as it says, an
// *apiError of the shared paths by its status (a 400 as TEI's 422
// Validation, a full queue as Overloaded, a shutting-down server as
// Unhealthy, an engine failure as Backend), anything else as Backend.
func writeTEIError(w http.ResponseWriter, err error) {
	var te *teiError
	var ae *apiError
	switch {
	case errors.As(err, &te):
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusBadRequest:
			te = teiInvalid("%s", ae.Message)
		case http.StatusTooManyRequests:
			te = &teiError{ae.Status, "Model is overloaded", teiOverloaded}
		case http.StatusServiceUnavailable:
			te = &teiError{ae.Status, "unhealthy: " + ae.Message, teiUnhealthy}
		case http.StatusInternalServerError:
			te = teiBackendError("%s", ae.Message)
		default: // 401, 404, 405, 413
			te = &teiError{ae.Status, ae.Message, teiValidation}
		}
	default:
		te = teiBackendError("%v", err)
	}
	writeJSON(w, te.Status, map[string]string{"error": te.Message, "error_type": te.Type})
}

// decodeTEI decodes r's body into v as TEI's serde does: fields v does
// not list are ignored.
func decodeTEI(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return teiBodyError(http.StatusRequestEntityTooLarge, "the request body is over the %d-byte limit", tooBig.Limit)
		}
		return teiBodyError(http.StatusBadRequest, "reading the request body: %v", err)
	}
	return decodeTEIBody(body, v)
}

// decodeTEIBody is decodeTEI of a body already read.
func decodeTEIBody(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return teiBodyError(http.StatusBadRequest, "Failed to parse the request body as JSON: the body is empty")
	case errors.As(err, &syntax):
		return teiBodyError(http.StatusBadRequest, "Failed to parse the request body as JSON: %v", err)
	case errors.As(err, &typ) && typ.Field != "":
		return teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: %s: invalid type: %s, expected %s", typ.Field, typ.Value, typ.Type)
	}
	return teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: %v", err)
}

// teiMissing is the 422 of a required field absent or null.
func teiMissing(field string) *teiError {
	return teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: missing field `%s`", field)
}

// teiDirection reads truncation_direction: "Right" (the default) or
// "Left", either capitalized or not as TEI's aliases take them; it
// reports whether the cut keeps the end (Left).
func teiDirection(d *string) (left bool, err error) {
	if d == nil {
		return false, nil
	}
	switch *d {
	case "Right", "right":
		return false, nil
	case "Left", "left":
		return true, nil
	}
	return false, teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: truncation_direction: unknown variant `%s`, expected `Left` or `Right`", *d)
}

// teiTruncate is a request's truncate: as given, else true (TEI's
// --auto-truncate default since 1.9.0).
func teiTruncate(t *bool) bool { return t == nil || *t }

// teiMaxClientBatch is /info's max_client_batch_size: the most inputs of
// one request, the embeddings endpoints' (maxEmbedInputs) or, for a
// reranker, the rerank endpoints' (maxRerankDocuments).
func (s *Server) teiMaxClientBatch() int {
	if s.o.Rerank {
		return maxRerankDocuments
	}
	return maxEmbedInputs
}

// teiEmbedLimit is /embed's max_input_length: the context and
// EmbedMaxLength, the smaller of those set (0: no bound), as TEI's is
// sentence-transformers' max_seq_length within the positions.
func (s *Server) teiEmbedLimit() int {
	limit := s.o.MaxContext
	if n := s.o.EmbedMaxLength; n > 0 && (limit <= 0 || n < limit) {
		limit = n
	}
	return max(limit, 0)
}

// teiCut bounds ids, the encoding of text (or token ids sent as such,
// isText false), to limit tokens: without truncate a longer input is
// TEI's 422; with it, a text is cut as HF tokenizers cut it, its content
// at the end (Tokenizer.Truncate) or, left, at the start (leftTruncate),
// its special tokens kept; token ids are cut at the end or the start.
func (s *Server) teiCut(text string, isText bool, ids []int, limit int, truncate, left bool) ([]int, error) {
	if limit <= 0 || len(ids) <= limit {
		return ids, nil
	}
	if !truncate {
		return nil, teiTooLong(limit, len(ids))
	}
	var cut []int
	var err error
	switch {
	case !isText && left:
		cut = ids[len(ids)-limit:]
	case !isText:
		cut = ids[:limit]
	case left:
		cut, err = leftTruncate(s.o.Tokenizer, text, ids, limit)
	default:
		cut, err = s.o.Tokenizer.Truncate(text, ids, limit)
	}
	if err != nil {
		return nil, teiTokenizerError(err)
	}
	return cut, nil
}

// ---- POST /embed

// teiEmbedRequest is POST /embed (TEI's EmbedRequest).
type teiEmbedRequest struct {
	// Inputs is a string, token ids, or an array of strings and token
	// id arrays (teiInputs).
	Inputs              json.RawMessage `json:"inputs"`
	Truncate            *bool           `json:"truncate"`
	TruncationDirection *string         `json:"truncation_direction"`
	PromptName          *string         `json:"prompt_name"`
	// Normalize scales each vector to unit length (default true).
	Normalize  *bool `json:"normalize"`
	Dimensions *int  `json:"dimensions"`
}

// teiInput is one input of /embed: a text, or token ids (isIDs).
type teiInput struct {
	text  string
	ids   []int
	isIDs bool
}

// teiInputs reads /embed's inputs as TEI's Input does: a string, an
// array of token ids (one input), or an array whose elements are strings
// or arrays of token ids. An empty array is TEI's 400.
func teiInputs(raw json.RawMessage) ([]teiInput, error) {
	if !isSet(raw) {
		return nil, teiMissing("inputs")
	}
	shape := teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: inputs must be a string, an array of token ids, or an array of strings and arrays of token ids")
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, teiEmptyError("inputs") // tokenization.rs refuses an empty input
		}
		return []teiInput{{text: one}}, nil
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return nil, shape
	}
	if len(elems) == 0 {
		return nil, teiEmptyError("inputs")
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return []teiInput{{ids: ids, isIDs: true}}, nil
	}
	inputs := make([]teiInput, len(elems))
	for i, e := range elems {
		switch {
		case json.Unmarshal(e, &inputs[i].text) == nil && isSet(e):
		case json.Unmarshal(e, &inputs[i].ids) == nil && isSet(e):
			inputs[i].isIDs = true
		default:
			return nil, shape
		}
		if inputs[i].text == "" && len(inputs[i].ids) == 0 {
			return nil, teiEmptyError("inputs")
		}
	}
	return inputs, nil
}

// teiPrompt is the prompt put before /embed's texts: the model's prompt
// of that name (EmbedPrompts), else without a name EmbedPrompt (the
// model's default prompt); an unknown name is TEI's 422.
func (s *Server) teiPrompt(name *string) (string, error) {
	if name == nil {
		return s.o.EmbedPrompt, nil
	}
	if len(s.o.EmbedPrompts) == 0 {
		return "", teiInvalid("`default-prompt-name` is set to `%s` but no prompts were found in the Sentence Transformers configuration", *name)
	}
	p, ok := s.o.EmbedPrompts[*name]
	if !ok {
		names := slices.Sorted(maps.Keys(s.o.EmbedPrompts))
		return "", teiInvalid("`default-prompt-name` is set to `%s` but it was not found in the Sentence Transformers prompts. Available prompts: [\"%s\"]", *name, strings.Join(names, `", "`))
	}
	return p, nil
}

// teiEmbed answers POST /embed: each input's vector (FinishEmbedding:
// cut to dimensions, normalized unless normalize is false), in the
// inputs' order, for any model but a reranker (TEI's 424, as for its
// classifiers). Texts get the prompt (teiPrompt) before them; token ids
// are embedded as they are (TEI decodes and re-encodes them). Inputs are
// bounded by teiEmbedLimit (teiCut).
func (s *Server) teiEmbed(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req teiEmbedRequest
	if err := decodeTEI(r, &req); err != nil {
		writeTEIError(w, err)
		return
	}
	inputs, err := teiInputs(req.Inputs)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	vecs, err := s.teiVectors(r, x, inputs, req.Dimensions, req.Normalize == nil || *req.Normalize, req.Truncate, req.TruncationDirection, req.PromptName)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, vecs)
}

// teiVectors is /embed's vectors of inputs (and /similarity's): at most
// max_client_batch_size of them, dims values each when set (normalized
// again), the prompt_name's prompt before each text, each cut as
// truncate and direction say, through the scheduler as /v1/embeddings'
// are. A reranker has none (TEI's 424).
func (s *Server) teiVectors(r *http.Request, x *exchange, inputs []teiInput, dims *int, normalize bool, truncate *bool, direction, promptName *string) ([][]float32, error) {
	if n := s.teiMaxClientBatch(); len(inputs) > n {
		return nil, teiBatchError(len(inputs), n)
	}
	d := 0
	if dims != nil {
		switch {
		case *dims <= 0:
			return nil, teiInvalid("`dimensions` should be positive")
		case s.o.EmbeddingSize > 0 && *dims > s.o.EmbeddingSize:
			return nil, teiInvalid("`dimensions` should be smaller than the maximum embedding dimension.")
		}
		d = *dims
	}
	if s.o.Rerank {
		return nil, teiBackendError("Model is not an embedding model")
	}
	left, err := teiDirection(direction)
	if err != nil {
		return nil, err
	}
	prompt, err := s.teiPrompt(promptName)
	if err != nil {
		return nil, err
	}
	prompts, err := s.teiEncode(inputs, prompt, teiTruncate(truncate), left)
	if err != nil {
		return nil, err
	}
	return s.embed(r, x, prompts, d, normalize)
}

// teiEncode is the token ids of /embed's inputs: each text after the
// prompt, encoded, or ids as sent; each cut to the embedding limit
// (teiCut: from the left with left, an error beyond it without
// truncate).
func (s *Server) teiEncode(inputs []teiInput, prompt string, truncate, left bool) ([][]int, error) {
	limit := s.teiEmbedLimit()
	prompts := make([][]int, len(inputs))
	for i, in := range inputs {
		text := prompt + in.text
		var enc [][]int
		var err error
		if in.isIDs {
			enc, err = s.encodePrompts("text", nil, [][]int{in.ids})
		} else {
			enc, err = s.encodePrompts("text", []string{text}, nil)
		}
		if err == nil {
			prompts[i], err = s.teiCut(text, !in.isIDs, enc[0], limit, truncate, left)
		}
		if err != nil {
			return nil, err
		}
	}
	return prompts, nil
}

// ---- POST /similarity

// teiSimilarityRequest is TEI's POST /similarity (huggingface_hub's
// InferenceClient.sentence_similarity): a source sentence and the
// sentences to compare with it.
type teiSimilarityRequest struct {
	Inputs *struct {
		SourceSentence *string   `json:"source_sentence"`
		Sentences      []*string `json:"sentences"`
	} `json:"inputs"`
	Parameters *struct {
		Truncate            *bool   `json:"truncate"`
		TruncationDirection *string `json:"truncation_direction"`
		PromptName          *string `json:"prompt_name"`
	} `json:"parameters"`
}

// teiSimilarity answers POST /similarity: the cosine similarity of the
// source sentence's embedding with each sentence's ([f32], in the
// sentences' order), the embeddings /embed gives (normalized, the
// prompt_name's prompt before every text).
func (s *Server) teiSimilarity(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req teiSimilarityRequest
	if err := decodeTEI(r, &req); err != nil {
		writeTEIError(w, err)
		return
	}
	switch {
	case req.Inputs == nil:
		writeTEIError(w, teiMissing("inputs"))
		return
	case req.Inputs.SourceSentence == nil:
		writeTEIError(w, teiMissing("source_sentence"))
		return
	case len(req.Inputs.Sentences) == 0:
		writeTEIError(w, teiEmptyError("sentences"))
		return
	}
	inputs := []teiInput{{text: *req.Inputs.SourceSentence}}
	for i, t := range req.Inputs.Sentences {
		if t == nil {
			writeTEIError(w, teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: inputs.sentences[%d]: invalid type: null, expected a string", i))
			return
		}
		inputs = append(inputs, teiInput{text: *t})
	}
	for _, in := range inputs {
		if in.text == "" {
			writeTEIError(w, teiEmptyError("inputs"))
			return
		}
	}
	var truncate *bool
	var direction, name *string
	if p := req.Parameters; p != nil {
		truncate, direction, name = p.Truncate, p.TruncationDirection, p.PromptName
	}
	vecs, err := s.teiVectors(r, x, inputs, nil, true, truncate, direction, name)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	sims := make([]float32, len(vecs)-1)
	for i, v := range vecs[1:] {
		var dot float64
		for j, a := range vecs[0] {
			dot += float64(a) * float64(v[j])
		}
		sims[i] = float32(dot)
	}
	writeJSON(w, http.StatusOK, sims)
}

// ---- POST /rerank (TEI's form)

// teiRerankRequest is TEI's POST /rerank.
type teiRerankRequest struct {
	Query               *string   `json:"query"`
	Texts               []*string `json:"texts"`
	Truncate            *bool     `json:"truncate"`
	TruncationDirection *string   `json:"truncation_direction"`
	RawScores           bool      `json:"raw_scores"`
	ReturnText          bool      `json:"return_text"`
}

// teiRank is one text's rank in TEI's /rerank answer.
type teiRank struct {
	Index int     `json:"index"`
	Text  *string `json:"text,omitempty"`
	Score float32 `json:"score"`
}

// teiRerankBody reads r's body and reports whether it is TEI's form of
// /rerank: an object with texts and without documents. Otherwise r's
// body is put back for the Jina/Cohere decoding, a failed read (a body
// over the limit) failing it again there.
func teiRerankBody(r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) == nil {
		_, texts := fields["texts"]
		_, docs := fields["documents"]
		if texts && !docs {
			return body, true
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil, false
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// teiRerank answers POST /rerank in TEI's form: each (query, text) pair
// scored by the reranker (teiPair: rerankPair's input within the pair
// limit, rerankMaxLen), the score the logit's sigmoid or, with
// raw_scores, the logit; ranked best first, equal scores in reverse
// order as TEI leaves them; each rank carries its text with return_text.
func (s *Server) teiRerank(w http.ResponseWriter, r *http.Request, x *exchange, body []byte) {
	var req teiRerankRequest
	if err := decodeTEIBody(body, &req); err != nil {
		writeTEIError(w, err)
		return
	}
	switch {
	case req.Query == nil:
		writeTEIError(w, teiMissing("query"))
		return
	case req.Texts == nil:
		writeTEIError(w, teiMissing("texts"))
		return
	case len(req.Texts) == 0:
		writeTEIError(w, teiEmptyError("texts"))
		return
	case !s.o.Rerank:
		writeTEIError(w, teiBackendError("model is not a re-ranker model"))
		return
	case len(req.Texts) > s.teiMaxClientBatch():
		writeTEIError(w, teiBatchError(len(req.Texts), s.teiMaxClientBatch()))
		return
	}
	texts := make([]string, len(req.Texts))
	for i, t := range req.Texts {
		if t == nil {
			writeTEIError(w, teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: texts[%d]: invalid type: null, expected a string", i))
			return
		}
		texts[i] = *t
	}
	left, err := teiDirection(req.TruncationDirection)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	pairs := s.teiPairer(*req.Query, s.rerankMaxLen(), teiTruncate(req.Truncate), left)
	inputs := make([][]int, len(texts))
	for i, t := range texts {
		if inputs[i], err = pairs.ids(t); err != nil {
			writeTEIError(w, err)
			return
		}
	}
	scores, err := s.teiScores(r, x, inputs, req.RawScores)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	ranks := make([]teiRank, len(texts))
	for i, sc := range scores {
		ranks[i] = teiRank{Index: i, Score: sc}
		if req.ReturnText {
			ranks[i].Text = &texts[i]
		}
	}
	// TEI sorts ascending (stably) and reverses: best first, and equal
	// scores in the reverse of the texts' order.
	slices.SortStableFunc(ranks, func(a, b teiRank) int { return cmpFloat32(a.Score, b.Score) })
	slices.Reverse(ranks)
	writeJSON(w, http.StatusOK, ranks)
}

// cmpFloat32 orders two scores as TEI's sort does (partial_cmp).
func cmpFloat32(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// teiScores scores a reranker's inputs (rerankLogits): the logits'
// sigmoid, or with raw the logits, as TEI's predict scores a one-label
// model; a NaN is TEI's 424.
func (s *Server) teiScores(r *http.Request, x *exchange, inputs [][]int, raw bool) ([]float32, error) {
	logits, err := s.rerankLogits(r, x, inputs)
	if err != nil {
		return nil, err
	}
	scores := make([]float32, len(logits))
	for i, l := range logits {
		sc := RelevanceScore(l, raw)
		if math.IsNaN(sc) {
			return nil, &teiError{http.StatusFailedDependency, "score is NaN", teiBackend}
		}
		scores[i] = float32(sc)
	}
	return scores, nil
}

// teiPairer is a reranker's inputs of one query's pairs within maxLen
// tokens, the query encoded once a limit (Pairs): the whole pair when it
// fits; beyond, TEI's 422 without truncate, else cut longest first as
// PairIDs cuts it (keeping each text's first tokens) or, left, keeping
// each text's last tokens (leftTruncatePair).
type teiPairer struct {
	s              *Server
	query          string
	maxLen         int
	truncate, left bool
	fit, cut       *Pairs // at maxLen+1 (does it fit?) and at maxLen
	// whole is the query's pairs uncut (uncut): a pair's whole length for
	// the error, or the pair to cut from the left.
	whole *tokenizer.PairEncoder
}

func (s *Server) teiPairer(query string, maxLen int, truncate, left bool) *teiPairer {
	return &teiPairer{s: s, query: query, maxLen: maxLen, truncate: truncate, left: left}
}

// uncut makes whole, the query's pairs without a limit, once.
func (p *teiPairer) uncut() error {
	if p.whole != nil {
		return nil
	}
	var err error
	if p.whole, err = p.s.o.Tokenizer.NewPairEncoder(p.query, math.MaxInt32); err != nil {
		return teiTokenizerError(err)
	}
	return nil
}

// ids is the input of the query's pair with doc.
func (p *teiPairer) ids(doc string) ([]int, error) {
	s := p.s
	if s.o.Tokenizer == nil {
		return nil, teiTokenizerError(errors.New("this server has no tokenizer to encode the query and texts with"))
	}
	// One token past the limit tells whether the pair fits, and each text
	// is encoded only that far (tokenizers' early exit), whatever its
	// length: the whole pair is encoded only to count it for the error.
	var err error
	if p.fit == nil {
		if p.fit, err = s.rerankPairs(p.query, p.maxLen+1); err != nil {
			return nil, teiTokenizerError(err)
		}
	}
	ids, err := p.fit.IDs(doc)
	switch {
	case err != nil:
		return nil, teiTokenizerError(err)
	case len(ids) <= p.maxLen:
		return ids, nil
	case !p.truncate:
		if err := p.uncut(); err != nil {
			return nil, err
		}
		if ids, _, err = p.whole.Encode(doc); err != nil {
			return nil, teiTokenizerError(err)
		}
		return nil, teiTooLong(p.maxLen, len(ids))
	case !p.left:
		if p.cut == nil {
			if p.cut, err = s.rerankPairs(p.query, p.maxLen); err != nil {
				return nil, teiTokenizerError(err)
			}
		}
		if ids, err = p.cut.IDs(doc); err != nil {
			return nil, teiTokenizerError(err)
		}
		return ids, nil
	}
	if err := p.uncut(); err != nil {
		return nil, err
	}
	ids, types, err := leftTruncatePair(p.whole, s.o.Tokenizer, doc, p.maxLen)
	if err != nil {
		return nil, teiTokenizerError(err)
	}
	if !s.o.RerankCausal { // a decoder reads no token types (CausalPairIDs)
		stride := TypeStride(s.o.VocabSize, s.o.TokenTypes)
		for i, t := range types {
			ids[i] += t * stride
		}
	}
	return ids, nil
}

// ---- POST /predict

// teiPredictRequest is POST /predict (TEI's PredictRequest).
type teiPredictRequest struct {
	Inputs              json.RawMessage `json:"inputs"`
	Truncate            *bool           `json:"truncate"`
	TruncationDirection *string         `json:"truncation_direction"`
	RawScores           bool            `json:"raw_scores"`
}

// teiPrediction is one label's score in /predict's answer.
type teiPrediction struct {
	Score float32 `json:"score"`
	Label string  `json:"label"`
}

// teiSequence is one input of /predict: a text, or a pair (a, b).
type teiSequence struct {
	a, b string
	pair bool
}

// teiPredictInputs reads /predict's inputs as TEI's PredictInput does:
// a string, a pair [a, b] or [a] (one input), or a batch of such arrays
// (batch true).
func teiPredictInputs(raw json.RawMessage) (seqs []teiSequence, batch bool, err error) {
	const expecting = "expected a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]"
	if !isSet(raw) {
		return nil, false, teiMissing("inputs")
	}
	invalid := func(what string) error {
		return teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: inputs: %s, %s", what, expecting)
	}
	sequence := func(texts []string) (teiSequence, error) {
		switch len(texts) {
		case 1:
			return teiSequence{a: texts[0]}, nil
		case 2:
			return teiSequence{a: texts[0], b: texts[1], pair: true}, nil
		}
		return teiSequence{}, invalid(fmt.Sprintf("invalid length %d", len(texts)))
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []teiSequence{{a: one}}, false, nil
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return nil, false, invalid("invalid type " + jsonKind(raw))
	}
	if len(elems) == 0 {
		return nil, false, invalid("invalid length 0")
	}
	var texts []string
	if json.Unmarshal(elems[0], &one) == nil {
		if json.Unmarshal(raw, &texts) != nil || slices.ContainsFunc(elems, func(e json.RawMessage) bool { return !isSet(e) }) {
			return nil, false, invalid("a pair must be strings")
		}
		sq, err := sequence(texts)
		return []teiSequence{sq}, false, err
	}
	seqs = make([]teiSequence, len(elems))
	for i, e := range elems {
		var texts []string // fresh: a null in e would keep the last element's text
		var parts []json.RawMessage
		if json.Unmarshal(e, &texts) != nil || !isSet(e) || json.Unmarshal(e, &parts) != nil || slices.ContainsFunc(parts, func(p json.RawMessage) bool { return !isSet(p) }) {
			return nil, false, invalid(fmt.Sprintf("batch element %d is not an array of strings", i))
		}
		if seqs[i], err = sequence(texts); err != nil {
			return nil, false, err
		}
	}
	return seqs, true, nil
}

// teiPredict answers POST /predict for a reranker, the one-label
// classifier tputool serves: each input's score (as /rerank's) under
// teiLabel; a text alone is the tokenizer's single form, a pair the
// reranker's (teiPair). Any other model is TEI's 424.
func (s *Server) teiPredict(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req teiPredictRequest
	if err := decodeTEI(r, &req); err != nil {
		writeTEIError(w, err)
		return
	}
	seqs, batch, err := teiPredictInputs(req.Inputs)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	if n := s.teiMaxClientBatch(); batch && len(seqs) > n {
		writeTEIError(w, teiBatchError(len(seqs), n))
		return
	}
	if !s.o.Rerank {
		writeTEIError(w, teiBackendError("Model is not a classifier model"))
		return
	}
	left, err := teiDirection(req.TruncationDirection)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	truncate, maxLen := teiTruncate(req.Truncate), s.rerankMaxLen()
	inputs := make([][]int, len(seqs))
	for i, sq := range seqs {
		if sq.pair {
			inputs[i], err = s.teiPairer(sq.a, maxLen, truncate, left).ids(sq.b)
		} else {
			var enc [][]int
			enc, err = s.encodePrompts("text", []string{sq.a}, nil)
			if err == nil {
				inputs[i], err = s.teiCut(sq.a, true, enc[0], maxLen, truncate, left)
			}
		}
		if err != nil {
			writeTEIError(w, err)
			return
		}
	}
	scores, err := s.teiScores(r, x, inputs, req.RawScores)
	if err != nil {
		writeTEIError(w, err)
		return
	}
	preds := make([][]teiPrediction, len(scores))
	for i, sc := range scores {
		preds[i] = []teiPrediction{{Score: sc, Label: teiLabel}}
	}
	if !batch {
		writeJSON(w, http.StatusOK, preds[0])
		return
	}
	writeJSON(w, http.StatusOK, preds)
}

// ---- POST /decode

// teiDecode answers POST /decode: {"ids": [id, ...] or [[id, ...], ...],
// "skip_special_tokens" (default true)} to each list's text
// (Tokenizer.Decode; ids without a token are skipped, as tokenizers
// skips them).
func (s *Server) teiDecode(w http.ResponseWriter, r *http.Request, _ *exchange) {
	var req struct {
		IDs               json.RawMessage `json:"ids"`
		SkipSpecialTokens *bool           `json:"skip_special_tokens"`
	}
	if err := decodeTEI(r, &req); err != nil {
		writeTEIError(w, err)
		return
	}
	if !isSet(req.IDs) {
		writeTEIError(w, teiMissing("ids"))
		return
	}
	var one []int
	var lists [][]int
	switch {
	case json.Unmarshal(req.IDs, &one) == nil:
		lists = [][]int{one}
	case json.Unmarshal(req.IDs, &lists) == nil:
		if len(lists) > s.teiMaxClientBatch() {
			writeTEIError(w, teiBatchError(len(lists), s.teiMaxClientBatch()))
			return
		}
	default:
		writeTEIError(w, teiBodyError(http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: ids must be an array of token ids or an array of such arrays"))
		return
	}
	if s.o.Tokenizer == nil {
		writeTEIError(w, teiTokenizerError(errors.New("this server has no tokenizer")))
		return
	}
	for _, ids := range lists {
		if len(ids) == 0 {
			writeTEIError(w, teiEmptyError("input_ids"))
			return
		}
	}
	skip := req.SkipSpecialTokens == nil || *req.SkipSpecialTokens
	texts := make([]string, len(lists))
	for i, ids := range lists {
		texts[i] = s.o.Tokenizer.Decode(ids, skip)
	}
	writeJSON(w, http.StatusOK, texts)
}

// ---- GET /info

// teiInfoResponse is GET /info (TEI's Info), every field TEI writes.
type teiInfoResponse struct {
	ModelID         string         `json:"model_id"`
	ModelSHA        *string        `json:"model_sha"`
	ModelDType      string         `json:"model_dtype"`
	ServedModelName string         `json:"served_model_name"`
	ModelType       map[string]any `json:"model_type"`
	// MaxConcurrentRequests is the scheduler's queue: the requests taken
	// at once before the 429 (TEI's "Model is overloaded").
	MaxConcurrentRequests int `json:"max_concurrent_requests"`
	// MaxInputLength bounds an input (a reranker's pair): truncate cuts
	// to it.
	MaxInputLength int `json:"max_input_length"`
	// MaxBatchTokens and MaxBatchRequests: the engine embeds inputs in
	// groups of MaxBatchRequests (its MaxPrefill), each of at most
	// MaxInputLength tokens.
	MaxBatchTokens      int     `json:"max_batch_tokens"`
	MaxBatchRequests    *int    `json:"max_batch_requests"`
	MaxClientBatchSize  int     `json:"max_client_batch_size"`
	AutoTruncate        bool    `json:"auto_truncate"`
	TokenizationWorkers int     `json:"tokenization_workers"`
	Version             string  `json:"version"`
	SHA                 *string `json:"sha"`
	DockerLabel         *string `json:"docker_label"`
}

// teiInfo answers GET /info: the model as TEI describes it, a reranker as
// {"reranker": {"id2label", "label2id"}} and any other model as
// {"embedding": {"pooling"}} (TEI's pooling names: cls, mean,
// last_token), with the bounds the server applies. model_id is the
// served name; model_sha, sha and docker_label are null; version is
// teiAPIVersion (tputool's own is /api/version's tputool_version);
// tokenization_workers is GOMAXPROCS, as each request encodes on its own
// goroutine.
func (s *Server) teiInfo(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	group := s.sched.sl.MaxPrefill()
	info := teiInfoResponse{
		ModelID:               s.o.ModelName,
		ModelDType:            teiDType(s.o.Quantization),
		ServedModelName:       s.o.ModelName,
		MaxConcurrentRequests: s.sched.cfg.MaxQueue,
		MaxInputLength:        s.teiEmbedLimit(),
		MaxBatchRequests:      &group,
		MaxClientBatchSize:    s.teiMaxClientBatch(),
		AutoTruncate:          true,
		TokenizationWorkers:   runtime.GOMAXPROCS(0),
		Version:               teiAPIVersion,
	}
	if s.o.Rerank {
		info.ModelType = map[string]any{"reranker": map[string]any{
			"id2label": map[string]string{"0": teiLabel}, "label2id": map[string]int{teiLabel: 0}}}
		if s.o.Tokenizer != nil {
			info.MaxInputLength = s.rerankMaxLen()
		}
	} else {
		info.ModelType = map[string]any{"embedding": map[string]string{"pooling": teiPooling(s.o.Pooling)}}
	}
	if info.MaxInputLength >= math.MaxInt32 {
		info.MaxInputLength = 0 // no bound
	}
	info.MaxBatchTokens = info.MaxInputLength * group
	writeJSON(w, http.StatusOK, info)
}

// teiPooling is TEI's name of a pooling (compile.Pooling's name).
func teiPooling(p string) string {
	if p == "last" {
		return "last_token"
	}
	return p
}

// teiDType is TEI's model_dtype of ServerOptions.Quantization: float32,
// float16, bfloat16, else the form the weights are held in, lowercased.
func teiDType(q string) string {
	switch q {
	case "F32":
		return "float32"
	case "F16":
		return "float16"
	case "BF16":
		return "bfloat16"
	}
	return strings.ToLower(q)
}

// ---- what tputool does not serve

// teiUnsupported answers /embed_all, /embed_sparse and /tokenize with
// TEI's 424: the engine gives pooled vectors, not every token's hidden
// state; no model is SPLADE; the tokenizer keeps no character offsets
// for /tokenize's start and stop. A reranker's /embed_all is TEI's
// "not an embedding model".
func (s *Server) teiUnsupported(w http.ResponseWriter, r *http.Request, _ *exchange) {
	var err *teiError
	switch {
	case r.URL.Path == "/embed_sparse":
		err = teiBackendError("Model is not an embedding model with SPLADE pooling")
	case r.URL.Path == "/tokenize":
		err = teiBackendError("/tokenize is not available: tputool's tokenizer keeps no character offsets for the tokens' start and stop")
	case s.o.Rerank:
		err = teiBackendError("Model is not an embedding model")
	default:
		err = teiBackendError("`embed_all` is not available: tputool pools each input's hidden states (/embed), it does not return every token's")
	}
	writeTEIError(w, err)
}

// ---- truncation

// leftTruncate cuts ids, text encoded with its special tokens, to n
// tokens as HF tokenizers truncate with direction Left: the content
// keeps its last tokens and the post-processor's tokens before and after
// it stay (Tokenizer.Truncate is the Right cut). ids of n tokens or fewer
// come back as they are; when the added tokens leave no room for content,
// the start is cut.
func leftTruncate(tok *tokenizer.Tokenizer, text string, ids []int, n int) ([]int, error) {
	if len(ids) <= n {
		return ids, nil
	}
	content, err := tok.Encode(text, false)
	if err != nil {
		return nil, err
	}
	i := indexIDs(ids, content, 0)
	if i < 0 {
		return nil, fmt.Errorf("the text's tokens are not within its encoding with special tokens")
	}
	room := n - (len(ids) - len(content))
	if room <= 0 {
		return ids[len(ids)-n:], nil
	}
	out := append(slices.Clone(ids[:i]), content[len(content)-room:]...)
	return append(out, ids[i+len(content):]...), nil
}

// leftTruncatePair encodes the pair (a, b) with its special tokens, a
// being whole's first text (a PairEncoder without a limit, the query
// encoded once for all its texts), cut to n tokens as HF tokenizers
// truncate a pair with strategy LongestFirst and direction Left: each
// text keeps its last tokens, as many as LongestFirst keeps of texts of
// their lengths (tokenizer.EncodePairTruncated keeps the same counts of
// first tokens), and the special tokens stay. It returns the ids and
// their token type ids. A pair whose special tokens leave no room for a
// token of each text is an error, as EncodePairTruncated's.
func leftTruncatePair(whole *tokenizer.PairEncoder, tok *tokenizer.Tokenizer, b string, n int) (ids, types []int, err error) {
	ids, types, err = whole.Encode(b)
	if err != nil || len(ids) <= n {
		return ids, types, err
	}
	ea := whole.First()
	eb, err := tok.Encode(b, false)
	if err != nil {
		return nil, nil, err
	}
	i := indexIDs(ids, ea, 0)
	j := -1
	if i >= 0 {
		j = indexIDs(ids, eb, i+len(ea))
	}
	if j < 0 {
		return nil, nil, fmt.Errorf("the texts' tokens are not within the pair's encoding")
	}
	added := len(ids) - len(ea) - len(eb)
	room := n - added
	if room < min(len(ea), 1)+min(len(eb), 1) {
		return nil, nil, fmt.Errorf("a pair cut to %d tokens has no room for its %d special tokens and one token of each text", n, added)
	}
	ka, kb := tokenizer.LongestFirst(len(ea), len(eb), room)
	endA, endB := i+len(ea), j+len(eb)
	keep := func(s []int) []int {
		out := slices.Clone(s[:i])
		out = append(out, s[endA-ka:endA]...)
		out = append(out, s[endA:j]...)
		out = append(out, s[endB-kb:endB]...)
		return append(out, s[endB:]...)
	}
	return keep(ids), keep(types), nil
}

// indexIDs is the first index at or after from where sub occurs in ids,
// -1 if none (from itself for an empty sub).
func indexIDs(ids, sub []int, from int) int {
	for k := from; k+len(sub) <= len(ids); k++ {
		if slices.Equal(ids[k:k+len(sub)], sub) {
			return k
		}
	}
	return -1
}
