package serve

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// POST /v1/embeddings (OpenAI) and POST /api/embed (ollama): each input's
// final hidden states, pooled by the engine (last token or mean,
// compile.Pooling) and normalized to unit length, as both APIs return
// them; ollama's deprecated POST /api/embeddings returns the pooled
// vector as it is, as ollama's does. A reranker (ServerOptions.Rerank)
// gives scores, not vectors: all three answer it 400 (rerank.go).

// maxEmbedInputs is the most inputs one embeddings request takes:
// OpenAI's limit (LangChain sends 1000 at a time). The scheduler runs
// them a group of the engine's MaxPrefill at a time between decode steps
// (Scheduler.Embed), so one request holds the engine no longer than a
// prefill piece; the body limit bounds their tokens.
const maxEmbedInputs = 2048

// embeddingRequest is POST /v1/embeddings.
type embeddingRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

type embeddingObject struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type embeddingResponse struct {
	Object string            `json:"object"`
	Data   []embeddingObject `json:"data"`
	Model  string            `json:"model"`
	Usage  embeddingUsage    `json:"usage"`
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embed runs prompts through the scheduler and returns their vectors,
// cut to dims values when dims > 0 and, with normalize, scaled to unit
// length; x counts their tokens.
func (s *Server) embed(r *http.Request, x *exchange, prompts [][]int, dims int, normalize bool) ([][]float32, error) {
	for _, p := range prompts {
		x.promptTokens += len(p)
	}
	vecs, err := s.sched.Embed(r.Context(), prompts)
	switch {
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrClosed), errors.Is(err, errs.ErrUsage):
		return nil, schedulerError(err)
	case err != nil:
		return nil, err // a 500
	}
	for i, v := range vecs {
		vecs[i] = FinishEmbedding(v, dims, normalize)
	}
	return vecs, nil
}

// FinishEmbedding cuts a pooled vector to its first dims values (0: all)
// and, with normalize, scales it to unit length (a zero vector stays
// zero), as the embeddings endpoints answer it.
func FinishEmbedding(v []float32, dims int, normalize bool) []float32 {
	if dims > 0 && dims < len(v) {
		v = v[:dims]
	}
	if !normalize {
		return v
	}
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return v
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return v
}

// withEmbedPrompt puts ServerOptions.EmbedPrompt before each text (a new
// slice; texts as they are without a prompt).
func (s *Server) withEmbedPrompt(texts []string) []string {
	if s.o.EmbedPrompt == "" || len(texts) == 0 {
		return texts
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = s.o.EmbedPrompt + t
	}
	return out
}

// checkEmbedInputs bounds the inputs: how many, and each within the
// context (longer ones are cut to it when truncate, else a 400) and
// within EmbedMaxLength (longer ones cut to it whatever truncate, as
// sentence-transformers cuts to its max_seq_length). texts[i] is input
// i's text when it came as one (nil when the inputs are token ids): a
// text is cut as HF tokenizers cut it (Tokenizer.Truncate), token ids at the
// end.
func (s *Server) checkEmbedInputs(param string, texts []string, prompts [][]int, truncate bool) error {
	if len(prompts) > maxEmbedInputs {
		return badRequest(param, "%d inputs: at most %d per request", len(prompts), maxEmbedInputs)
	}
	limit := s.o.MaxContext
	if n := s.o.EmbedMaxLength; n > 0 && (limit <= 0 || n < limit) {
		limit = n
	}
	if limit <= 0 {
		return nil
	}
	for i, p := range prompts {
		if len(p) <= limit {
			continue
		}
		if ctx := s.o.MaxContext; ctx > 0 && len(p) > ctx && !truncate {
			e := badRequest(param, "input %d has %d tokens, beyond the context of %d tokens", i, len(p), ctx)
			e.Code = "context_length_exceeded"
			return e
		}
		if i >= len(texts) {
			prompts[i] = p[:limit]
			continue
		}
		cut, err := s.o.Tokenizer.Truncate(texts[i], p, limit)
		if err != nil {
			return badRequest(param, "encoding the %s: %v", param, err)
		}
		prompts[i] = cut
	}
	return nil
}

// checkDimensions checks a requested vector size against the model's.
func (s *Server) checkDimensions(dims *int) (int, error) {
	if dims == nil {
		return 0, nil
	}
	if *dims < 1 || (s.o.EmbeddingSize > 0 && *dims > s.o.EmbeddingSize) {
		return 0, badRequest("dimensions", "dimensions must be 1 to the model's %d, got %d", s.o.EmbeddingSize, *dims)
	}
	return *dims, nil
}

// embeddings answers POST /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req embeddingRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	if err := s.noEmbeddings(); err != nil {
		writeError(w, err)
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		writeError(w, badRequest("encoding_format", `encoding_format must be "float" or "base64", got %q`, req.EncodingFormat))
		return
	}
	dims, err := s.checkDimensions(req.Dimensions)
	if err != nil {
		writeError(w, err)
		return
	}
	texts, idLists, err := promptForms("input", req.Input)
	texts = s.withEmbedPrompt(texts)
	var prompts [][]int
	if err == nil {
		prompts, err = s.encodePrompts("input", texts, idLists)
	}
	if err == nil {
		err = s.checkEmbedInputs("input", texts, prompts, false)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	vecs, err := s.embed(r, x, prompts, dims, true)
	if err != nil {
		writeError(w, err)
		return
	}
	resp := embeddingResponse{Object: "list", Model: s.o.ModelName, Usage: embeddingUsage{x.promptTokens, x.promptTokens}}
	for i, v := range vecs {
		o := embeddingObject{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			o.Embedding = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data = append(resp.Data, o)
	}
	writeJSON(w, http.StatusOK, resp)
}

// ollamaEmbedRequest is POST /api/embed.
type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Truncate   *bool           `json:"truncate"`
	Dimensions *int            `json:"dimensions"`
	Options    json.RawMessage `json:"options"`
	KeepAlive  json.RawMessage `json:"keep_alive"`
}

// ollamaEmbed answers POST /api/embed: input is a string or an array of
// strings; truncate (default true) cuts inputs to the context
// (checkEmbedInputs). No input
// ("", [] or none: a client loading the model) answers no embeddings;
// dimensions 0 or beyond the model's size is ignored (whole vectors), as
// ollama's.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request, x *exchange) {
	start := time.Now()
	var req ollamaEmbedRequest
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.checkOllamaModel(req.Model); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.noEmbeddings(); err != nil { // loading it too, as ollama refuses a model without the capability
		writeOllamaError(w, err)
		return
	}
	var one string
	var many []string
	switch {
	case !isSet(req.Input):
	case json.Unmarshal(req.Input, &one) == nil:
		if one != "" {
			many = []string{one}
		}
	case json.Unmarshal(req.Input, &many) == nil:
	default:
		writeOllamaError(w, badRequest("input", "input must be a string or an array of strings"))
		return
	}
	if len(many) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"model": s.o.ModelName, "embeddings": [][]float32{}})
		return
	}
	many = s.withEmbedPrompt(many)
	prompts, err := s.encodePrompts("input", many, nil)
	if err == nil {
		err = s.checkEmbedInputs("input", many, prompts, req.Truncate == nil || *req.Truncate)
	}
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	dims := 0
	if d := req.Dimensions; d != nil && *d > 0 && (s.o.EmbeddingSize == 0 || *d <= s.o.EmbeddingSize) {
		dims = *d
	}
	vecs, err := s.embed(r, x, prompts, dims, true)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model": s.o.ModelName, "embeddings": vecs,
		"total_duration": time.Since(start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": x.promptTokens,
	})
}

// ollamaEmbeddings answers POST /api/embeddings, ollama's deprecated
// endpoint: {"model", "prompt"} to {"embedding": [...]}, the pooled
// vector not normalized (as ollama's), an empty prompt (a client loading
// the model) to an empty one. A prompt beyond the context is a 400.
// options and keep_alive are ignored, as every field decodeOllama does
// not know.
func (s *Server) ollamaEmbeddings(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
	}
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.checkOllamaModel(req.Model); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.noEmbeddings(); err != nil {
		writeOllamaError(w, err)
		return
	}
	if req.Prompt == "" {
		writeJSON(w, http.StatusOK, map[string][]float32{"embedding": {}})
		return
	}
	text := s.withEmbedPrompt([]string{req.Prompt})
	prompts, err := s.encodePrompts("prompt", text, nil)
	if err == nil {
		err = s.checkEmbedInputs("prompt", text, prompts, false)
	}
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	vecs, err := s.embed(r, x, prompts, 0, false)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]float32{"embedding": vecs[0]})
}
