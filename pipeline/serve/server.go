package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// maxBodyBytes bounds a request body; beyond it the answer is 413.
const maxBodyBytes = 8 << 20

// ServerOptions configure a Server.
type ServerOptions struct {
	// ModelName is the served model's name (--served-model-name, by
	// default the --model argument): /v1/models lists it, and a request
	// naming another model is a 404.
	ModelName string
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat messages; nil makes the chat endpoints answer
	// 400 naming the missing chat template.
	Template *chat.Template
	// Resolve turns a request's explicit settings into generation options
	// (generation_config.json under them; cmd passes generate.Resolve bound
	// to the model). nil resolves over transformers' defaults alone.
	Resolve func(generate.Overrides) (generate.Options, error)
	// MaxContext bounds prompt plus max_tokens (the model's positions); a
	// request beyond it is a 400 naming the numbers. 0: no bound, and an
	// omitted max_tokens takes Resolve's limit.
	MaxContext int
	// CORSOrigins are the browser origins allowed to call the API
	// (exact, or "*" for any); none sends no CORS headers.
	CORSOrigins []string
	// Version is tputool's version (/api/version's tputool_version);
	// Family the model's architecture (ollama's details and model_info).
	Version, Family string
	// ParameterCount is the number of the model's weights (ollama's
	// parameter_size and general.parameter_count); 0: unknown.
	ParameterCount int64
	// Quantization names the form the weights are held in, as ollama's
	// quantization_level: "BF16", "F16", "F32", or the quantization
	// ("INT8", "INT4", a checkpoint's "MXFP4", "FP8"…); "" unknown.
	Quantization string
	// VocabSize is the model's vocabulary: prompt token ids must be below
	// it (and below the tokenizer's); 0 checks the tokenizer's only.
	VocabSize int
	// TokenTypes is the model's token types (lm.Spec.TokenTypes): a
	// reranker's pair carries them in its ids only when it reads two or
	// more (TypeStride).
	TokenTypes int
	// EmbeddingSize is the length of the embeddings' vectors (the model's
	// hidden size): a request's dimensions must not exceed it; 0 does
	// not check.
	EmbeddingSize int
	// EmbedMaxLength, when set, cuts the embeddings' inputs to that many
	// tokens (sentence_bert_config.json's max_seq_length), the content
	// cut and the tokenizer's special tokens kept, whatever a request's
	// truncate; 0 cuts them to MaxContext only.
	EmbedMaxLength int
	// EmbedPrompt is put before every text input of the embeddings
	// endpoints (not before token ids): the model's sentence-transformers
	// default prompt (config_sentence_transformers.json's
	// default_prompt_name), as sentence-transformers' encode puts it; ""
	// for none.
	EmbedPrompt string
	// EmbedPrompts are the model's sentence-transformers prompts by name
	// (config_sentence_transformers.json's prompts), which the prompt_name
	// of TEI's /embed picks (tei.go): that prompt instead of EmbedPrompt;
	// nil makes every prompt_name TEI's 422. Leave it nil when the model's
	// Pooling config leaves the prompt out of a mean (include_prompt
	// false), which tputool does not.
	EmbedPrompts map[string]string
	// Pooling names how the engine pools the embeddings ("last", "mean",
	// "cls": compile.Pooling's names), for TEI's GET /info
	// (model_type.embedding.pooling); "" unknown.
	Pooling string
	// APIKey, when set, is required as `Authorization: Bearer KEY` on
	// /v1/*, /api/*, /rerank, /v2/rerank, TEI's paths (/embed, /info…)
	// and /metrics (401 without it); /health and GET / (ollama's
	// "Ollama is running") stay open (an embeddings server's POST / is
	// TEI's /embed, behind the key).
	APIKey string
	// AccessLog receives one JSON line per request (time, method, path,
	// status, duration_ms, prompt_tokens, completion_tokens, remote); nil
	// logs nothing.
	AccessLog io.Writer
	// Metrics, when set, counts the requests answered and is served on
	// GET /metrics (the scheduler's Observer should be the same Metrics).
	Metrics *Metrics
	// Reasoning, when set, is the markup of the model's reasoning (see
	// ReasoningOf): chat answers carry it as reasoning_content.
	Reasoning *Reasoning
	// Harmony says the chat template writes OpenAI's harmony format
	// (GPT-OSS: IsHarmony): chat answers are decoded with their special
	// tokens and split into reasoning, content and tool calls.
	Harmony bool
	// EmbeddingsOnly says the model gives embeddings and generates
	// nothing (an encoder: BERT, XLM-RoBERTa; compile.Encoder is its
	// engine): /v1/embeddings, /api/embed and /api/embeddings serve it,
	// while the generating endpoints (/v1/completions,
	// /v1/chat/completions, /v1/messages and its count_tokens,
	// /api/generate, /api/chat) answer 400 in their API's error shape
	// without reaching the scheduler, and /api/show lists the capability
	// "embedding" alone. The model list, /health and /metrics are as for
	// any model.
	EmbeddingsOnly bool
	// Rerank says the model is a reranker: a cross-encoder of one label
	// (BertForSequenceClassification, XLMRobertaForSequenceClassification:
	// cross-encoder/ms-marco-MiniLM, bge-reranker; or a causal one,
	// RerankCausal), whose engine's Embed gives each input's logit
	// (compile.EncoderOptions.Scores) and whose tokenizer has a pair form
	// (a causal one's need not). POST /v1/rerank, /rerank and /v2/rerank serve it
	// (rerank.go), each pair cut to MaxContext and its second text's ids
	// offset by VocabSize when the model reads TokenTypes (PairIDs,
	// TypeStride), which must be the model's. It
	// implies EmbeddingsOnly's refusals of the generating endpoints (NewServer sets EmbeddingsOnly), and the embeddings
	// endpoints (/v1/embeddings, /api/embed, /api/embeddings) answer 400
	// too, in their API's shape: its outputs are scores, not vectors.
	// /api/show lists no capability (ollama has none for reranking).
	// Without it, /v1/rerank answers 400.
	Rerank bool
	// RerankRaw makes a reranker's relevance scores its logits as they
	// are instead of their sigmoid, as CrossEncoder scores a model whose
	// config names the Identity activation (cross-encoder/ms-marco-*:
	// loader.Checkpoint.CrossEncoderRaw).
	RerankRaw bool
	// RerankCausal says the reranker is a causal model's classifier
	// (lm.Spec.Classifier: Qwen3ForSequenceClassification and the like):
	// its pairs are CausalPairIDs', the two texts one after the other
	// when the tokenizer has no pair form (Qwen's), as tokenizers
	// encodes a pair then.
	RerankCausal bool
	// Pprof serves net/http/pprof's profiles under /debug/pprof/ (the
	// index, cmdline, profile, symbol, trace and the named profiles:
	// heap, allocs, goroutine…), behind APIKey like /v1: a CPU profile of
	// the server under load, without its warm-up. Off, those paths are
	// 404s.
	Pprof bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server is the HTTP API over a Scheduler: OpenAI's /v1/models,
// /v1/completions, /v1/chat/completions (openai.go), /v1/responses
// (responses.go) and /v1/embeddings (embeddings.go), Anthropic's
// /v1/messages and /v1/messages/count_tokens (anthropic.go), ollama's
// /api/generate, /api/chat (ollama.go), /api/embed,
// /api/embeddings (embeddings.go), /, /api/version, /api/tags, /api/show
// and /api/ps (ollama_models.go), Jina's and Cohere's /v1/rerank,
// /rerank and /v2/rerank (rerank.go), text-embeddings-inference's /embed,
// /rerank (its form), /predict, /decode, /similarity, /info, /embeddings
// and, on an embeddings or reranker server, its default POST / and
// /invocations (tei.go), GET /health and GET /metrics. Every error is
// answered in OpenAI's error shape, except under /v1/messages, in
// Anthropic's, under / and /api/, in ollama's, and on TEI's paths (and
// a TEI-form /rerank), in TEI's. A model that only
// gives embeddings (ServerOptions.EmbeddingsOnly) is served by the
// embeddings endpoints and the model list alone, a reranker
// (ServerOptions.Rerank) by the rerank endpoints and the model list.
type Server struct {
	sched    *Scheduler
	o        ServerOptions
	started  time.Time
	draining atomic.Bool
	logMu    sync.Mutex
	grammars grammarCache // structured output (structured.go)
}

// NewServer returns the API over s; the caller runs s (s.Run) and serves
// the Server with net/http.
func NewServer(s *Scheduler, o ServerOptions) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rerank {
		o.EmbeddingsOnly = true // a reranker generates nothing either
	}
	if o.Resolve == nil {
		o.Resolve = func(ov generate.Overrides) (generate.Options, error) { return generate.Resolve(nil, nil, ov) }
	}
	if o.Metrics != nil {
		o.Metrics.setSlots(s.Slots())
	}
	return &Server{sched: s, o: o, started: o.Now()}
}

// SetDraining marks the server as shutting down: /health answers 503 from
// then on, so a load balancer stops sending requests while the scheduler
// drains (cmd calls it before Scheduler.Shutdown).
func (s *Server) SetDraining() { s.draining.Store(true) }

// exchange is what a handler reports about its request for the access log
// and the metrics.
type exchange struct {
	endpoint         string
	promptTokens     int
	completionTokens int
}

// route is one endpoint: the method it answers and its handler.
type route struct {
	endpoint string
	method   string
	handle   func(s *Server, w http.ResponseWriter, r *http.Request, x *exchange)
}

// pprofRoute is the /debug/pprof/ endpoint of path (ServerOptions.Pprof).
// The profile and trace handlers answer after the seconds they are asked
// for (30 by default).
func pprofRoute(path string) (route, bool) {
	name, ok := strings.CutPrefix(path, "/debug/pprof/")
	if !ok {
		return route{}, false
	}
	h := pprof.Index // "" and the named profiles
	switch name {
	case "cmdline":
		h = pprof.Cmdline
	case "profile":
		h = pprof.Profile
	case "symbol":
		h = pprof.Symbol
	case "trace":
		h = pprof.Trace
	}
	return route{"/debug/pprof/", http.MethodGet, func(_ *Server, w http.ResponseWriter, r *http.Request, _ *exchange) { h(w, r) }}, true
}

// routeOf finds the endpoint of path; ok is false for an unknown path.
func routeOf(path string) (route, bool) {
	switch path {
	case "/health":
		return route{"/health", http.MethodGet, (*Server).health}, true
	case "/metrics":
		return route{"/metrics", http.MethodGet, (*Server).metrics}, true
	case "/v1/models":
		return route{"/v1/models", http.MethodGet, (*Server).models}, true
	case "/v1/completions":
		return route{"/v1/completions", http.MethodPost, (*Server).completions}, true
	case "/v1/chat/completions":
		return route{"/v1/chat/completions", http.MethodPost, (*Server).chatCompletions}, true
	case "/v1/embeddings", "/embeddings": // TEI serves OpenAI's embeddings without /v1 too
		return route{"/v1/embeddings", http.MethodPost, (*Server).embeddings}, true
	case "/api/embed":
		return route{"/api/embed", http.MethodPost, (*Server).ollamaEmbed}, true
	case "/api/embeddings":
		return route{"/api/embeddings", http.MethodPost, (*Server).ollamaEmbeddings}, true
	case "/v1/rerank", "/rerank", "/v2/rerank":
		return route{path, http.MethodPost, (*Server).rerank}, true
	case "/embed":
		return route{"/embed", http.MethodPost, (*Server).teiEmbed}, true
	case "/similarity":
		return route{"/similarity", http.MethodPost, (*Server).teiSimilarity}, true
	case "/predict":
		return route{"/predict", http.MethodPost, (*Server).teiPredict}, true
	case "/decode":
		return route{"/decode", http.MethodPost, (*Server).teiDecode}, true
	case "/info":
		return route{"/info", http.MethodGet, (*Server).teiInfo}, true
	case "/embed_all", "/embed_sparse":
		return route{path, http.MethodPost, (*Server).teiUnsupported}, true
	case "/tokenize":
		return route{"/tokenize", http.MethodPost, (*Server).tokenize}, true
	case "/detokenize":
		return route{"/detokenize", http.MethodPost, (*Server).detokenize}, true
	case "/v1/responses":
		return route{"/v1/responses", http.MethodPost, (*Server).responses}, true
	case "/v1/messages":
		return route{"/v1/messages", http.MethodPost, (*Server).messages}, true
	case "/v1/messages/count_tokens":
		return route{"/v1/messages/count_tokens", http.MethodPost, (*Server).countTokens}, true
	case "/api/generate":
		return route{"/api/generate", http.MethodPost, (*Server).ollamaGenerate}, true
	case "/api/chat":
		return route{"/api/chat", http.MethodPost, (*Server).ollamaChat}, true
	case "/api/tags":
		return route{"/api/tags", http.MethodGet, (*Server).ollamaTags}, true
	case "/api/version":
		return route{"/api/version", http.MethodGet, (*Server).ollamaVersion}, true
	case "/api/show":
		return route{"/api/show", http.MethodPost, (*Server).ollamaShow}, true
	case "/api/ps":
		return route{"/api/ps", http.MethodGet, (*Server).ollamaPS}, true
	case "/":
		return route{"/", http.MethodGet, (*Server).ollamaRoot}, true
	}
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
		return route{"/v1/models/{id}", http.MethodGet, (*Server).model}, true
	}
	return route{}, false
}

// ServeHTTP checks a request's API key, routes it, and logs and counts
// it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.o.Now()
	rec := &recorder{ResponseWriter: w}
	x := &exchange{endpoint: "other"}
	defer func() {
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if s.o.Metrics != nil {
			s.o.Metrics.request(x.endpoint, rec.status)
		}
		s.logRequest(r, rec.status, start, x)
	}()
	if r.Method == http.MethodPost && s.o.EmbeddingsOnly && (r.URL.Path == "/" || r.URL.Path == "/invocations") {
		// TEI's default routes (and SageMaker's): an embedding model's
		// /embed, a reranker's /rerank. GET / stays ollama's.
		r.URL.Path = "/embed"
		if s.o.Rerank {
			r.URL.Path = "/rerank"
		}
	}
	rt, ok := routeOf(r.URL.Path)
	if !ok && s.o.Pprof {
		rt, ok = pprofRoute(r.URL.Path)
	}
	if ok {
		x.endpoint = rt.endpoint
	}
	if s.cors(rec, r) {
		return // a preflight, answered
	}
	fail := writeError
	switch {
	case anthropicPath(r.URL.Path):
		fail = writeAnthropicError
	case ollamaPath(r.URL.Path):
		fail = writeOllamaError
	case teiPath(r.URL.Path):
		fail = writeTEIError
	}
	// The key comes first: without it, a client learns nothing, not even
	// which paths exist. GET / (ollama's "Ollama is running") is open, as
	// /health is (a POST / became TEI's /embed or /rerank above).
	if r.URL.Path != "/health" && r.URL.Path != "/" && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="tputool"`)
		e := &apiError{Status: http.StatusUnauthorized, Message: "missing or incorrect API key: send Authorization: Bearer <key>", Type: "invalid_request_error", Code: "invalid_api_key"}
		if anthropicPath(r.URL.Path) {
			e.Message = "missing or incorrect API key: send x-api-key: <key> or Authorization: Bearer <key>"
		}
		fail(rec, e)
		return
	}
	if !ok {
		fail(rec, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path), Type: "invalid_request_error", Code: "not_found"})
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		rec.Header().Set("Allow", rt.method)
		fail(rec, &apiError{Status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("%s takes %s, not %s", rt.endpoint, rt.method, r.Method), Type: "invalid_request_error", Code: "method_not_allowed"})
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(rec, r.Body, maxBodyBytes)
	}
	rt.handle(s, rec, r, x)
}

// cors adds the CORS headers for a request from an allowed origin
// (ServerOptions.CORSOrigins) and answers its preflight (OPTIONS with
// Access-Control-Request-Method), which browsers send without the API key;
// it reports whether it answered. Requests from other origins get no CORS
// headers, so browsers refuse their answers.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(s.o.CORSOrigins) == 0 {
		return false
	}
	allowed := slices.Contains(s.o.CORSOrigins, "*") || slices.Contains(s.o.CORSOrigins, origin)
	if !allowed {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", allowHeaders(r.Header.Values("Access-Control-Request-Headers")))
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// corsHeaders are the request headers every preflight allows.
var corsHeaders = []string{"Authorization", "Content-Type", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta"}

// allowHeaders is a preflight's Access-Control-Allow-Headers: corsHeaders
// and the names the browser asks for (Access-Control-Request-Headers),
// which are the client's own (the OpenAI and Anthropic SDKs send
// X-Stainless-* headers, Anthropic's browser clients
// anthropic-dangerous-direct-browser-access); a name that is not an HTTP
// token is left out, and so are names past maxCORSHeaders.
func allowHeaders(requested []string) string {
	names := slices.Clone(corsHeaders)
	seen := map[string]bool{}
	for _, n := range names {
		seen[strings.ToLower(n)] = true
	}
	for _, line := range requested {
		for name := range strings.SplitSeq(line, ",") {
			name = strings.TrimSpace(name)
			if len(names) >= maxCORSHeaders || !isToken(name) || seen[strings.ToLower(name)] {
				continue
			}
			seen[strings.ToLower(name)] = true
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// maxCORSHeaders bounds the names a preflight's answer allows.
const maxCORSHeaders = 64

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2), as a
// header's name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// authorized reports whether r carries the API key (always, without one).
func (s *Server) authorized(r *http.Request) bool {
	if s.o.APIKey == "" {
		return true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && anthropicPath(r.URL.Path) { // Anthropic's clients send x-api-key
		key, ok = r.Header.Get("X-Api-Key"), r.Header.Get("X-Api-Key") != ""
	}
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(s.o.APIKey)) == 1
}

// logRequest writes the access log's line for one request.
func (s *Server) logRequest(r *http.Request, status int, start time.Time, x *exchange) {
	if s.o.AccessLog == nil {
		return
	}
	line, err := json.Marshal(struct {
		Time             string  `json:"time"`
		Method           string  `json:"method"`
		Path             string  `json:"path"`
		Status           int     `json:"status"`
		DurationMS       float64 `json:"duration_ms"`
		PromptTokens     int     `json:"prompt_tokens"`
		CompletionTokens int     `json:"completion_tokens"`
		Remote           string  `json:"remote"`
	}{start.UTC().Format(time.RFC3339Nano), r.Method, r.URL.Path, status,
		float64(s.o.Now().Sub(start).Microseconds()) / 1000, x.promptTokens, x.completionTokens, r.RemoteAddr})
	if err != nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.o.AccessLog.Write(append(line, '\n'))
}

// health answers 200 {"status":"ok"}, or 503 {"status":"shutting_down"}
// once the server drains.
func (s *Server) health(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting_down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// metrics serves the Prometheus text. The queue gauges are read from the
// scheduler first: it reports them as requests arrive and start, not as
// they end.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	if s.o.Metrics == nil {
		writeError(w, &apiError{Status: http.StatusNotFound, Message: "metrics are not collected by this server", Type: "invalid_request_error", Code: "not_found"})
		return
	}
	s.o.Metrics.Queue(s.sched.Load())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.o.Metrics.WriteTo(w)
}

// submit queues reqs under one context, derived from ctx, that the caller
// cancels when done (which ends any sequence still running); when one
// Submit fails the others are cancelled and the error is the API's.
func (s *Server) submit(ctx context.Context, reqs []Request) ([]*Stream, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	streams := make([]*Stream, len(reqs))
	for i, rq := range reqs {
		st, err := s.sched.Submit(ctx, rq)
		if err != nil {
			cancel()
			return nil, nil, schedulerError(err)
		}
		streams[i] = st
	}
	return streams, cancel, nil
}

// noGeneration is the 400 of the generating endpoints of OpenAI's and
// Anthropic's APIs (completions, chat completions, messages and
// count_tokens) for a model that only gives embeddings
// (ServerOptions.EmbeddingsOnly) or scores (a reranker:
// ServerOptions.Rerank), as OpenAI refuses a model that an endpoint does
// not serve (invalid_request_error about param model); nil for a model
// that generates.
func (s *Server) noGeneration() error {
	if !s.o.EmbeddingsOnly {
		return nil
	}
	if s.o.Rerank {
		return badRequest("model", "model %q is a reranker (a cross-encoder): it serves /v1/rerank only", s.o.ModelName)
	}
	return badRequest("model", "model %q is an embedding model: it serves /v1/embeddings and /api/embed only", s.o.ModelName)
}

// schedulerError turns Submit's error into the API's: 429 for a full
// queue, 503 when shutting down.
func schedulerError(err error) error {
	switch {
	case errors.Is(err, ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Message: err.Error(), Type: "rate_limit_error", Code: "rate_limit_exceeded"}
	case errors.Is(err, ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Message: err.Error(), Type: "server_error", Code: "shutting_down"}
	}
	return &apiError{Status: http.StatusBadRequest, Message: err.Error(), Type: "invalid_request_error"}
}

// streamEvent is one event of one of a request's streams.
type streamEvent struct {
	stream int
	ev     Event
}

// merge delivers the events of every stream on one channel, each stream's
// in order; the channel closes when every stream has ended, or soon after
// ctx ends.
func merge(ctx context.Context, streams []*Stream) <-chan streamEvent {
	out := make(chan streamEvent)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Go(func() {
			for {
				select {
				case ev, ok := <-st.Events:
					if !ok {
						return
					}
					select {
					case out <- streamEvent{i, ev}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// ---- responses

// apiError is an error answered in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 about param (may be "").
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: param}
}

// writeError answers err: an *apiError as it says, anything else as a 500.
func writeError(w http.ResponseWriter, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, errorBody(e))
}

// errorBody is the JSON of e, for a response or an SSE event.
func errorBody(e *apiError) any {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		b.Param = &e.Param
	}
	if e.Code != "" {
		b.Code = &e.Code
	}
	return map[string]body{"error": b}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// recorder keeps the status a handler answered, and passes Flush through
// for streaming.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
