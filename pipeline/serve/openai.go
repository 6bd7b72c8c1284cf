package serve

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// OpenAI's API as its official clients use it: /v1/models,
// /v1/completions and /v1/chat/completions, plain and streamed
// (server-sent events). A request is decoded strictly: a field outside
// OpenAI's API (and tputool's few extras: ignore_eos, min_p, top_k,
// repetition_penalty) is a 400 naming it, and a field of OpenAI's that
// tputool cannot honour (tools, a non-zero penalty, a logit bias, a JSON
// response format) is a 400 too rather than silently ignored; harmless
// ones (user, metadata, store, ...) are accepted and ignored.

// Bounds on a request.
const (
	maxChoices    = 16 // n
	maxSequences  = 64 // prompts x n, on /v1/completions
	maxLogprobs   = 20 // logprobs (completions) and top_logprobs (chat)
	maxStopString = 16 // stop strings
)

// samplingParams are the settings both endpoints take.
type samplingParams struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage       bool `json:"include_usage"`
		IncludeObfuscation bool `json:"include_obfuscation"` // ignored: no obfuscation padding
	} `json:"stream_options"`

	// Refused unless they are their no-op value.
	FrequencyPenalty *float64       `json:"frequency_penalty"`
	PresencePenalty  *float64       `json:"presence_penalty"`
	LogitBias        map[string]any `json:"logit_bias"`

	// Accepted and ignored.
	User json.RawMessage `json:"user"`

	// tputool's extras (vLLM's names).
	IgnoreEOS         bool     `json:"ignore_eos"`
	MinP              *float64 `json:"min_p"`
	TopK              *int     `json:"top_k"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	samplingParams
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	samplingParams
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`

	// Refused unless absent or a no-op.
	Tools            json.RawMessage `json:"tools"`
	ToolChoice       json.RawMessage `json:"tool_choice"`
	Functions        json.RawMessage `json:"functions"`
	FunctionCall     json.RawMessage `json:"function_call"`
	ResponseFormat   json.RawMessage `json:"response_format"`
	Audio            json.RawMessage `json:"audio"`
	Modalities       []string        `json:"modalities"`
	Prediction       json.RawMessage `json:"prediction"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
	Moderation       json.RawMessage `json:"moderation"`

	// Accepted and ignored: they change nothing a local model does.
	Metadata             json.RawMessage `json:"metadata"`
	Store                json.RawMessage `json:"store"`
	ParallelToolCalls    json.RawMessage `json:"parallel_tool_calls"`
	PromptCacheKey       json.RawMessage `json:"prompt_cache_key"`
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	PromptCacheOptions   json.RawMessage `json:"prompt_cache_options"`
	SafetyIdentifier     json.RawMessage `json:"safety_identifier"`
	ServiceTier          json.RawMessage `json:"service_tier"`
	ReasoningEffort      json.RawMessage `json:"reasoning_effort"`
	Verbosity            json.RawMessage `json:"verbosity"`
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Refusal    json.RawMessage `json:"refusal,omitempty"`
	Audio      json.RawMessage `json:"audio,omitempty"`
	// FunctionCall is the deprecated form of ToolCalls.
	FunctionCall json.RawMessage `json:"function_call,omitempty"`
	// ReasoningContent is a reasoning model's earlier thinking (vLLM,
	// DeepSeek); templates that know it use it.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// decodeBody decodes a JSON request body strictly into v: malformed JSON,
// a field v does not list, a value of the wrong type and trailing data are
// 400s naming what is wrong; a body over the limit is a 413.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return nil
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit), Type: "invalid_request_error"}
	case errors.As(err, &typeErr) && typeErr.Field != "":
		// The path of a field of an embedded struct names the struct.
		field := strings.TrimPrefix(strings.TrimPrefix(typeErr.Field, "samplingParams."), "ollamaCommon.")
		return badRequest(field, "invalid type for %q: expected %s, got JSON %s", field, typeErr.Type, typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(field, "unknown field %q: it is not a parameter of this endpoint", field)
	case errors.Is(err, io.EOF):
		return badRequest("", "invalid JSON: the request body is empty")
	}
	return badRequest("", "invalid JSON: %v", err)
}

// isSet reports whether a raw field was given and is not null.
func isSet(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// check validates the settings and returns them as generate's overrides,
// and n.
func (p *samplingParams) check(maxTokensParam string, maxTokens *int) (generate.Overrides, int, error) {
	var o generate.Overrides
	n := 1
	if p.N != nil {
		n = *p.N
		if n < 1 || n > maxChoices {
			return o, 0, badRequest("n", "n must be between 1 and %d, got %d", maxChoices, n)
		}
	}
	if maxTokens != nil {
		if *maxTokens <= 0 {
			return o, 0, badRequest(maxTokensParam, "%s must be positive, got %d", maxTokensParam, *maxTokens)
		}
		o.MaxNewTokens = maxTokens
	}
	if t := p.Temperature; t != nil {
		if *t < 0 || math.IsNaN(*t) {
			return o, 0, badRequest("temperature", "temperature must be at least 0, got %v", *t)
		}
		o.Temperature = t
	}
	if v := p.TopP; v != nil {
		if !(*v > 0 && *v <= 1) {
			return o, 0, badRequest("top_p", "top_p must be in (0, 1], got %v", *v)
		}
		o.TopP = v
	}
	if v := p.MinP; v != nil {
		if !(*v >= 0 && *v <= 1) {
			return o, 0, badRequest("min_p", "min_p must be in [0, 1], got %v", *v)
		}
		o.MinP = v
	}
	if v := p.TopK; v != nil {
		k := *v
		if k == -1 { // vLLM's "off"
			k = 0
		}
		if k < 0 {
			return o, 0, badRequest("top_k", "top_k must be at least 0 (or -1 for off), got %d", *v)
		}
		o.TopK = &k
	}
	if v := p.RepetitionPenalty; v != nil {
		if !(*v > 0) {
			return o, 0, badRequest("repetition_penalty", "repetition_penalty must be positive, got %v", *v)
		}
		o.RepetitionPenalty = v
	}
	if p.Seed != nil {
		seed := uint64(*p.Seed)
		o.Seed = &seed
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"frequency_penalty", p.FrequencyPenalty}, {"presence_penalty", p.PresencePenalty}} {
		if f.v != nil && *f.v != 0 {
			return o, 0, badRequest(f.name, "%s is not supported (only 0); repetition_penalty is", f.name)
		}
	}
	if len(p.LogitBias) > 0 {
		return o, 0, badRequest("logit_bias", "logit_bias is not supported")
	}
	stop, err := parseStop(p.Stop)
	if err != nil {
		return o, 0, err
	}
	o.Stop = stop
	return o, n, nil
}

// parseStop reads stop: a string, an array of strings, or null.
func parseStop(raw json.RawMessage) ([]string, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, badRequest("stop", "stop strings must not be empty")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > maxStopString {
		return nil, badRequest("stop", "at most %d stop strings, got %d", maxStopString, len(many))
	}
	for _, s := range many {
		if s == "" {
			return nil, badRequest("stop", "stop strings must not be empty")
		}
	}
	return many, nil
}

// checkModel answers 404 when the request names another model than the
// one served (an empty name means the served one).
func (s *Server) checkModel(name string) error {
	if name == "" || name == s.o.ModelName {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("the model %q does not exist: this server serves %q", name, s.o.ModelName),
		Type: "invalid_request_error", Param: "model", Code: "model_not_found"}
}

// plan is a request's sequences: prompts x n Requests, choice i is
// reqs[i] (prompt i / n, sampler stream i % n).
type plan struct {
	reqs         []Request
	promptTokens int
}

// plan builds the Requests of prompts: resolves the settings once (one
// seed for the request), bounds each prompt plus its max tokens by
// MaxContext (promptParam names the prompt in errors), and by default
// gives each sequence the rest of the context (without MaxContext,
// Resolve's limit).
func (s *Server) plan(prompts [][]int, o generate.Overrides, n int, ignoreEOS bool, logprobs int, promptParam, maxTokensParam string) (*plan, error) {
	gen, err := s.o.Resolve(o)
	if err != nil {
		if errors.Is(err, errs.ErrUsage) { // a setting out of range
			return nil, badRequest("", "%v", err)
		}
		return nil, fmt.Errorf("resolving the generation settings: %w", err)
	}
	if ignoreEOS {
		gen.EOS = nil
	}
	if tok := s.o.Tokenizer; tok != nil {
		gen.NewDecoder = func(prompt []int) generate.StreamDecoder { return tok.StreamDecoderAfter(prompt) }
	}
	p := &plan{}
	for _, prompt := range prompts {
		// Token ids given are checked against both vocabularies
		// (completionPrompts); text a tokenizer larger than its model
		// encodes is checked here, so the engine never sees an id it
		// cannot embed.
		if v := s.o.VocabSize; v > 0 {
			for _, id := range prompt {
				if id >= v {
					return nil, badRequest(promptParam, "the %s encodes to token id %d, outside the model's vocabulary [0, %d)", promptParam, id, v)
				}
			}
		}
		limit := gen.MaxNewTokens
		switch c := s.o.MaxContext; {
		case c <= 0:
		case o.MaxNewTokens != nil:
			if len(prompt)+limit > c {
				return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: promptParam, Code: "context_length_exceeded",
					Message: fmt.Sprintf("this model's maximum context length is %d tokens, but %d were requested (%d in the %s, %d in %s): shorten the %s or lower %s",
						c, len(prompt)+limit, len(prompt), promptParam, limit, maxTokensParam, promptParam, maxTokensParam)}
			}
		default:
			limit = c - len(prompt)
			if limit <= 0 {
				return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: promptParam, Code: "context_length_exceeded",
					Message: fmt.Sprintf("this model's maximum context length is %d tokens, and the %s has %d: no room is left to generate", c, promptParam, len(prompt))}
			}
		}
		p.promptTokens += len(prompt)
		for j := range n {
			g := gen
			g.MaxNewTokens = limit
			p.reqs = append(p.reqs, Request{Prompt: prompt, Gen: g, Index: j, Logprobs: logprobs})
		}
	}
	return p, nil
}

// finishReason is OpenAI's name for a sequence's finish.
func finishReason(reason string) string {
	switch reason {
	case generate.FinishStop, generate.FinishStopString:
		return "stop"
	}
	return reason
}

// newID returns a response id: prefix and 26 random characters.
func newID(prefix string) string { return prefix + rand.Text() }

// usage is OpenAI's token counts.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func newUsage(prompt, completion int) *usage {
	return &usage{prompt, completion, prompt + completion}
}

// ---- models

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) modelObject() modelObject {
	return modelObject{ID: s.o.ModelName, Object: "model", Created: s.started.Unix(), OwnedBy: "tputool"}
}

// models answers GET /v1/models: the one model served.
func (s *Server) models(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelObject{s.modelObject()}})
}

// model answers GET /v1/models/{id}.
func (s *Server) model(w http.ResponseWriter, r *http.Request, _ *exchange) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if id != s.o.ModelName {
		writeError(w, s.checkModel(id))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

// ---- sequences in flight

// choice is one sequence's output as it arrives.
type choice struct {
	text     strings.Builder
	prev     int // the last token, context for the next token's text
	offset   int // bytes of token text so far (completions' text_offset)
	finish   string
	err      error
	logprobs []Event // events with a token, for the log-probabilities
}

// collectChoices reads every stream to its end (the scheduler ends them all when
// ctx ends) and returns the choices.
func collectChoices(streams []*Stream, p *plan) []*choice {
	out := make([]*choice, len(streams))
	for i, st := range streams {
		c := &choice{prev: lastToken(p.reqs[i].Prompt)}
		for ev := range st.Events {
			c.add(ev, p.reqs[i].Logprobs >= 0)
		}
		out[i] = c
	}
	return out
}

// add records an event.
func (c *choice) add(ev Event, logprobs bool) {
	c.text.WriteString(ev.Text)
	if ev.FinishReason != "" {
		c.finish, c.err = ev.FinishReason, ev.Err
	}
	// The end-of-sequence token's text is not part of the output, nor is
	// its log-probability.
	if logprobs && ev.Token >= 0 && ev.FinishReason != generate.FinishStop {
		c.logprobs = append(c.logprobs, ev)
	}
}

func lastToken(prompt []int) int {
	if len(prompt) == 0 {
		return -1
	}
	return prompt[len(prompt)-1]
}

// statusClientClosed is the status logged for a request whose client went
// away before the answer (nginx's 499); nobody receives it.
const statusClientClosed = 499

// outcome is the error a finished set of choices answers instead of a
// response: an engine failure is a 500, a sequence cancelled while the
// client is still there (the server's shutdown deadline) a 503, and one
// whose client went away a 499 for the log.
func outcome(ctx context.Context, choices []*choice) error {
	for _, c := range choices {
		switch c.finish {
		case FinishError:
			return &apiError{Status: http.StatusInternalServerError, Message: fmt.Sprintf("generation failed: %v", c.err), Type: "server_error"}
		case FinishCancelled:
			if ctx.Err() == nil {
				return &apiError{Status: http.StatusServiceUnavailable, Message: ErrClosed.Error(), Type: "server_error", Code: "shutting_down"}
			}
			return &apiError{Status: statusClientClosed, Message: "the client closed the request", Type: "invalid_request_error"}
		}
	}
	return nil
}

// completionTokens sums the tokens the streams generated.
func completionTokens(streams []*Stream) int {
	n := 0
	for _, st := range streams {
		n += st.CompletionTokens()
	}
	return n
}

// ---- log-probabilities

// tokenText is the text of token id after token prev (so a SentencePiece
// word keeps its leading space); a byte-fallback token is its byte.
func (s *Server) tokenText(prev, id int) string {
	tok := s.o.Tokenizer
	if tok == nil {
		return fmt.Sprintf("token_id:%d", id)
	}
	if piece, ok := tok.IDToToken(id); ok && len(piece) == 6 && strings.HasPrefix(piece, "<0x") && piece[5] == '>' {
		if b, err := strconv.ParseUint(piece[3:5], 16, 8); err == nil {
			return string([]byte{byte(b)})
		}
	}
	if prev >= 0 {
		a := tok.Decode([]int{prev}, false)
		ab := tok.Decode([]int{prev, id}, false)
		if t, ok := strings.CutPrefix(ab, a); ok {
			return t
		}
	}
	return tok.Decode([]int{id}, false)
}

// logprobValue makes a log-probability JSON-safe: -Inf (a token the model
// rules out) is reported as -9999, as OpenAI does.
func logprobValue(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return -9999
	}
	return v
}

// completionLogprobs is a completion choice's logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf renders evs, continuing c's token context and text
// offsets.
func (s *Server) completionLogprobsOf(c *choice, evs []Event) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, ev := range evs {
		text := s.tokenText(c.prev, ev.Token)
		top := map[string]float64{}
		for _, t := range ev.TopLogprobs {
			top[s.tokenText(c.prev, t.Token)] = logprobValue(t.Logprob)
		}
		top[text] = logprobValue(ev.Logprob)
		lp.Tokens = append(lp.Tokens, text)
		lp.TokenLogprobs = append(lp.TokenLogprobs, logprobValue(ev.Logprob))
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, c.offset)
		c.offset += len(text)
		c.prev = ev.Token
	}
	return lp
}

// chatLogprob is one token of a chat choice's logprobs.content.
type chatLogprob struct {
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal []chatLogprob `json:"refusal"`
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// chatLogprobsOf renders evs, continuing c's token context.
func (s *Server) chatLogprobsOf(c *choice, evs []Event) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatLogprob{}}
	for _, ev := range evs {
		text := s.tokenText(c.prev, ev.Token)
		item := chatLogprob{Token: text, Logprob: logprobValue(ev.Logprob), Bytes: tokenBytes(text), TopLogprobs: []chatLogprob{}}
		for _, t := range ev.TopLogprobs {
			tt := s.tokenText(c.prev, t.Token)
			item.TopLogprobs = append(item.TopLogprobs, chatLogprob{Token: tt, Logprob: logprobValue(t.Logprob), Bytes: tokenBytes(tt), TopLogprobs: []chatLogprob{}})
		}
		lp.Content = append(lp.Content, item)
		c.prev = ev.Token
	}
	return lp
}

// ---- server-sent events

// sse writes a stream of server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers 200 with an event stream.
func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w)}
	e.rc.Flush()
	return e
}

// send writes one `data: {json}` event and flushes it.
func (e *sse) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return e.rc.Flush()
}

// done ends the stream with OpenAI's `data: [DONE]`.
func (e *sse) done() {
	io.WriteString(e.w, "data: [DONE]\n\n")
	e.rc.Flush()
}

// fail ends the stream with an error event, for a sequence that failed
// after the response began.
func (e *sse) fail(err error) {
	ae := &apiError{Message: fmt.Sprintf("generation failed: %v", err), Type: "server_error"}
	e.send(errorBody(ae))
}

// ---- /v1/completions

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// completionPrompts reads prompt: a string, an array of strings, an array
// of token ids, or an array of arrays of token ids.
func (s *Server) completionPrompts(raw json.RawMessage) ([][]int, error) {
	if !isSet(raw) {
		return nil, badRequest("prompt", "prompt is required")
	}
	// Each form is tried into its own variable: a failed Unmarshal may
	// have filled part of it.
	var texts []string
	var idLists [][]int
	var one string
	var many []string
	var ids []int
	var lists [][]int
	switch {
	case json.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(raw, &many) == nil:
		texts = many
	case json.Unmarshal(raw, &ids) == nil:
		idLists = [][]int{ids}
	case json.Unmarshal(raw, &lists) == nil:
		idLists = lists
	default:
		return nil, badRequest("prompt", "prompt must be a string, an array of strings, an array of token ids or an array of such arrays")
	}
	if len(texts) == 0 && len(idLists) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	var prompts [][]int
	for _, t := range texts {
		if s.o.Tokenizer == nil {
			return nil, badRequest("prompt", "this server has no tokenizer: send the prompt as token ids")
		}
		ids, err := s.o.Tokenizer.Encode(t, true)
		if err != nil {
			return nil, badRequest("prompt", "encoding the prompt: %v", err)
		}
		prompts = append(prompts, ids)
	}
	vocab := s.o.VocabSize
	if s.o.Tokenizer != nil && (vocab == 0 || s.o.Tokenizer.VocabSize() < vocab) {
		vocab = s.o.Tokenizer.VocabSize()
	}
	for _, ids := range idLists {
		for _, id := range ids {
			if id < 0 || (vocab > 0 && id >= vocab) {
				return nil, badRequest("prompt", "token id %d is outside the vocabulary [0, %d)", id, vocab)
			}
		}
		prompts = append(prompts, ids)
	}
	for _, p := range prompts {
		if len(p) == 0 {
			return nil, badRequest("prompt", "a prompt has no tokens")
		}
	}
	return prompts, nil
}

// completions answers POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.completionPlan(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	var stream func([]*Stream, string, int64)
	if req.Stream {
		stream = func(streams []*Stream, id string, created int64) {
			s.streamCompletions(r.Context(), w, &req, p, streams, id, created)
		}
	}
	s.answer(w, r, x, p, "cmpl-", stream, func(choices []*choice, u *usage, id string, created int64) any {
		resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName, Usage: u}
		for i, c := range choices {
			cc := completionChoice{Index: i, Text: c.text.String(), FinishReason: new(finishReason(c.finish))}
			if p.reqs[i].Logprobs >= 0 {
				cc.Logprobs = s.completionLogprobsOf(c, c.logprobs)
			}
			resp.Choices = append(resp.Choices, cc)
		}
		return resp
	})
}

// answer submits a plan's sequences and answers the request: through
// stream when it is set (a streamed request), else with the JSON that
// respond builds from the finished choices and the usage.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, x *exchange, p *plan, idPrefix string,
	stream func(streams []*Stream, id string, created int64), respond func(choices []*choice, u *usage, id string, created int64) any) {
	x.promptTokens = p.promptTokens
	streams, cancel, err := s.submit(r.Context(), p.reqs)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	defer func() { x.completionTokens = completionTokens(streams) }()
	id, created := newID(idPrefix), s.o.Now().Unix()
	if stream != nil {
		stream(streams, id, created)
		return
	}
	choices := collectChoices(streams, p)
	if err := outcome(r.Context(), choices); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, respond(choices, newUsage(p.promptTokens, completionTokens(streams)), id, created))
}

// completionPlan validates a completion request and plans its sequences.
func (s *Server) completionPlan(req *completionRequest) (*plan, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	o, n, err := req.check("max_tokens", req.MaxTokens)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Echo:
		return nil, badRequest("echo", "echo is not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported")
	case req.BestOf != nil && *req.BestOf != n:
		return nil, badRequest("best_of", "best_of is not supported beyond n (%d), got %d", n, *req.BestOf)
	}
	logprobs := -1
	if req.Logprobs != nil {
		logprobs = *req.Logprobs
		if logprobs < 0 || logprobs > maxLogprobs {
			return nil, badRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxLogprobs, logprobs)
		}
	}
	prompts, err := s.completionPrompts(req.Prompt)
	if err != nil {
		return nil, err
	}
	if len(prompts)*n > maxSequences {
		return nil, badRequest("n", "%d prompts x n=%d is over the %d sequences one request may run", len(prompts), n, maxSequences)
	}
	return s.plan(prompts, o, n, req.IgnoreEOS, logprobs, "prompt", "max_tokens")
}

// streamCompletions streams the choices as text_completion chunks.
func (s *Server) streamCompletions(ctx context.Context, w http.ResponseWriter, req *completionRequest, p *plan, streams []*Stream, id string, created int64) {
	response := func(cs []completionChoice, u *usage) completionResponse {
		return completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName, Choices: cs, Usage: u}
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	s.streamEvents(ctx, startSSE(w), p, streams, withUsage, func(i int, c *choice, ev Event, lps []Event, logprobs bool) any {
		cc := completionChoice{Index: i, Text: ev.Text}
		if logprobs {
			cc.Logprobs = s.completionLogprobsOf(c, lps)
		}
		if ev.FinishReason != "" {
			cc.FinishReason = new(finishReason(ev.FinishReason))
		}
		return response([]completionChoice{cc}, nil)
	}, func(u *usage) any { return response([]completionChoice{}, u) })
}

// streamEvents sends the events of a plan's streams as SSE chunks, in the
// order they come: chunk builds an event's chunk (lps holds the event when
// its log-probabilities are to be sent; logprobs says whether the choice
// asked for them), usageChunk the final usage chunk when withUsage.
// An engine failure is an SSE error; a client gone ends the stream
// silently, a shutdown cut-off as closed.
func (s *Server) streamEvents(ctx context.Context, out *sse, p *plan, streams []*Stream, withUsage bool,
	chunk func(i int, c *choice, ev Event, lps []Event, logprobs bool) any, usageChunk func(*usage) any) {
	choices := make([]*choice, len(streams))
	for i := range choices {
		choices[i] = &choice{prev: lastToken(p.reqs[i].Prompt)}
	}
	for se := range merge(ctx, streams) {
		ev := se.ev
		if ev.FinishReason == FinishError {
			out.fail(ev.Err)
			return
		}
		if ev.FinishReason == FinishCancelled {
			if ctx.Err() == nil {
				out.fail(ErrClosed)
			}
			return
		}
		logprobs := p.reqs[se.stream].Logprobs >= 0
		var lps []Event
		if logprobs && ev.Token >= 0 && ev.FinishReason != generate.FinishStop {
			lps = []Event{ev}
		}
		if ev.Text == "" && ev.FinishReason == "" && len(lps) == 0 {
			continue
		}
		if err := out.send(chunk(se.stream, choices[se.stream], ev, lps, logprobs)); err != nil {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	if withUsage {
		out.send(usageChunk(newUsage(p.promptTokens, completionTokens(streams))))
	}
	out.done()
}

// ---- /v1/chat/completions

type chatResponseMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChoice struct {
	Index        int                 `json:"index"`
	Message      chatResponseMessage `json:"message"`
	Logprobs     *chatLogprobs       `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

// chatCompletions answers POST /v1/chat/completions.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.chatPlan(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	var stream func([]*Stream, string, int64)
	if req.Stream {
		stream = func(streams []*Stream, id string, created int64) {
			s.streamChat(r.Context(), w, &req, p, streams, id, created)
		}
	}
	s.answer(w, r, x, p, "chatcmpl-", stream, func(choices []*choice, u *usage, id string, created int64) any {
		resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: s.o.ModelName, Usage: u}
		for i, c := range choices {
			cc := chatChoice{Index: i, Message: chatResponseMessage{Role: "assistant", Content: c.text.String()}, FinishReason: finishReason(c.finish)}
			if p.reqs[i].Logprobs >= 0 {
				cc.Logprobs = s.chatLogprobsOf(c, c.logprobs)
			}
			resp.Choices = append(resp.Choices, cc)
		}
		return resp
	})
}

// chatPlan validates a chat request, renders and encodes its messages,
// and plans its sequences.
func (s *Server) chatPlan(ctx context.Context, req *chatRequest) (*plan, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	maxParam, maxTokens := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxParam, maxTokens = "max_completion_tokens", req.MaxCompletionTokens
	}
	o, n, err := req.check(maxParam, maxTokens)
	if err != nil {
		return nil, err
	}
	if err := req.unsupported(); err != nil {
		return nil, err
	}
	logprobs := -1
	if req.Logprobs {
		logprobs = 0
	}
	if req.TopLogprobs != nil {
		k := *req.TopLogprobs
		switch {
		case k < 0 || k > maxLogprobs:
			return nil, badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxLogprobs, k)
		case !req.Logprobs && k > 0:
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if req.Logprobs {
			logprobs = k
		}
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	msgs, err := chatMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	ids, err := s.renderChat(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, badRequest("messages", "the rendered messages have no tokens")
	}
	return s.plan([][]int{ids}, o, n, req.IgnoreEOS, logprobs, "messages", maxParam)
}

// unsupported refuses the chat fields tputool cannot honour when they ask
// for something.
func (req *chatRequest) unsupported() error {
	noOp := func(raw json.RawMessage, ok ...string) bool {
		if !isSet(raw) {
			return true
		}
		for _, v := range ok {
			if string(raw) == v {
				return true
			}
		}
		return false
	}
	switch {
	case !noOp(req.Tools, "[]"):
		return badRequest("tools", "tool calling is not supported by tputool serve")
	case !noOp(req.Functions, "[]"):
		return badRequest("functions", "function calling is not supported by tputool serve")
	case !noOp(req.ToolChoice, `"none"`, `"auto"`):
		return badRequest("tool_choice", "tool calling is not supported by tputool serve (tool_choice may only be \"none\" or \"auto\")")
	case !noOp(req.FunctionCall, `"none"`, `"auto"`):
		return badRequest("function_call", "function calling is not supported by tputool serve")
	case !noOp(req.Audio):
		return badRequest("audio", "audio output is not supported")
	case !noOp(req.Prediction):
		return badRequest("prediction", "predicted outputs are not supported")
	case !noOp(req.WebSearchOptions):
		return badRequest("web_search_options", "web search is not supported")
	case !noOp(req.Moderation):
		return badRequest("moderation", "moderation is not supported")
	}
	if isSet(req.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return badRequest("response_format", "only response_format {\"type\": \"text\"} is supported (no JSON mode or schemas)")
		}
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return badRequest("modalities", "only the text modality is supported, got %q", m)
		}
	}
	return nil
}

// chatMessages turns the request's messages into the template's: text
// content parts are joined with newlines; a developer message is a
// system message (templates know only the latter).
func chatMessages(in []chatMessage) ([]chat.Message, error) {
	out := make([]chat.Message, 0, len(in))
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "developer":
			role = "system"
		case "system", "user", "assistant", "tool":
		case "":
			return nil, badRequest(param+".role", "%s has no role", param)
		default:
			return nil, badRequest(param+".role", "%s has the unknown role %q", param, m.Role)
		}
		if isSet(m.Audio) {
			return nil, badRequest(param+".audio", "audio content is not supported")
		}
		content, err := messageText(m.Content, param)
		if err != nil {
			return nil, err
		}
		cm := chat.Message{Role: role, Content: content}
		extra := map[string]any{}
		if m.Name != "" {
			extra["name"] = m.Name
		}
		if m.ToolCallID != "" {
			extra["tool_call_id"] = m.ToolCallID
		}
		if m.ReasoningContent != "" {
			extra["reasoning_content"] = m.ReasoningContent
		}
		for key, raw := range map[string]json.RawMessage{"tool_calls": m.ToolCalls, "function_call": m.FunctionCall} {
			if isSet(raw) {
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					return nil, badRequest(param+"."+key, "%s.%s: %v", param, key, err)
				}
				extra[key] = v
			}
		}
		if len(extra) > 0 {
			cm.Extra = extra
		}
		out = append(out, cm)
	}
	return out, nil
}

// renderChat renders msgs with the chat template (adding the generation
// prompt) and encodes them, as `tputool chat` does.
func (s *Server) renderChat(ctx context.Context, msgs []chat.Message) ([]int, error) {
	if s.o.Template == nil {
		return nil, badRequest("messages", "the model %q has no chat template (tokenizer_config.json has no chat_template): use /v1/completions", s.o.ModelName)
	}
	if s.o.Tokenizer == nil {
		return nil, badRequest("messages", "this server has no tokenizer to encode chat messages")
	}
	text, err := s.o.Template.Render(ctx, chat.Input{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		return nil, badRequest("messages", "rendering the chat template: %v", err)
	}
	ids, err := s.o.Tokenizer.Encode(text, false)
	if err != nil {
		return nil, badRequest("messages", "encoding the rendered messages: %v", err)
	}
	return ids, nil
}

// messageText reads a message's content: a string, null, or an array of
// parts of which only text parts are supported.
func messageText(raw json.RawMessage, param string) (string, error) {
	if !isSet(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param+".content", "%s.content must be a string or an array of content parts", param)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s.content[%d].type", param, j), "only text content parts are supported, got %q", p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// streamChat streams the choices as chat.completion.chunk events: first a
// chunk with each choice's role, then its text as it becomes final, the
// last one with its finish reason.
func (s *Server) streamChat(ctx context.Context, w http.ResponseWriter, req *chatRequest, p *plan, streams []*Stream, id string, created int64) {
	out := startSSE(w)
	chunk := func(cs ...chatChunkChoice) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.o.ModelName, Choices: cs}
	}
	for i := range streams {
		if err := out.send(chunk(chatChunkChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: new("")}})); err != nil {
			return
		}
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	s.streamEvents(ctx, out, p, streams, withUsage, func(i int, c *choice, ev Event, lps []Event, logprobs bool) any {
		cc := chatChunkChoice{Index: i}
		if ev.Text != "" {
			cc.Delta.Content = new(ev.Text)
		}
		if logprobs {
			cc.Logprobs = s.chatLogprobsOf(c, lps)
		}
		if ev.FinishReason != "" {
			cc.FinishReason = new(finishReason(ev.FinishReason))
		}
		return chunk(cc)
	}, func(u *usage) any {
		last := chunk()
		last.Choices = []chatChunkChoice{}
		last.Usage = u
		return last
	})
}
