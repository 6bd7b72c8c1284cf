package serve

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// Ollama's /api/generate and /api/chat, for the clients that speak it:
// NDJSON streaming by default ("stream": false for one object), settings
// in "options", errors as {"error": "..."}, and a request with no prompt
// (a client loading the model, or with keep_alive 0 unloading it) done at
// once. Decoding is lenient, as ollama's own: unknown fields are ignored,
// but images, which tputool cannot honour, are refused. /api/chat takes
// tools (calls come back as message.tool_calls, each with an id and an
// index, arguments an object); both take think (the thought comes back as
// message.thinking, or thinking). A prompt beyond the context is
// truncated unless truncate is false (ollamaRender, ollamaFit). The model
// list and details are in ollama_models.go.

// ollamaOptions are the options tputool honours; the others (num_ctx,
// num_thread, ...) are ignored.
type ollamaOptions struct {
	NumPredict, TopK, Seed                 *int64
	Temperature, TopP, MinP, RepeatPenalty *float64
	Stop                                   []string
}

// ollamaCommon are the fields both endpoints share.
type ollamaCommon struct {
	Model  string          `json:"model"`
	Stream *bool           `json:"stream"`
	Format json.RawMessage `json:"format"`
	// Options are read by parseOllamaOptions, which names the option a
	// bad value is for.
	Options   map[string]json.RawMessage `json:"options"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
	// Think is true or false (the template's enable_thinking), or an
	// effort ("low", "medium", "high", "max": reasoning_effort).
	Think json.RawMessage `json:"think"`
	// Truncate (true when absent) fits a prompt beyond the context to it
	// rather than refusing it.
	Truncate *bool `json:"truncate"`
	// Logprobs asks for each answer token's log-probability, with its
	// TopLogprobs (0 to 20) likeliest alternatives (ollama 0.12's).
	Logprobs    bool `json:"logprobs"`
	TopLogprobs int  `json:"top_logprobs"`
}

// logprobs is the plan's Request.Logprobs: -1 without logprobs, else
// top_logprobs (ollama reads it only with logprobs).
func (c *ollamaCommon) logprobs() (int, error) {
	if c.TopLogprobs < 0 || c.TopLogprobs > maxLogprobs { // ollama checks it with or without logprobs
		return 0, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "top_logprobs",
			Message: fmt.Sprintf("top_logprobs must be between 0 and %d, got %d", maxLogprobs, c.TopLogprobs)}
	}
	if !c.Logprobs {
		return -1, nil
	}
	return c.TopLogprobs, nil
}

// truncate reports the request's truncate, true by default.
func (c *ollamaCommon) truncate() bool { return c.Truncate == nil || *c.Truncate }

type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt   string   `json:"prompt"`
	System   string   `json:"system"`
	Template string   `json:"template"`
	Raw      bool     `json:"raw"`
	Suffix   string   `json:"suffix"`
	Images   []string `json:"images"`
	// Context is a previous answer's context: its prompt's and answer's
	// token ids, continued by this prompt.
	Context []int `json:"context"`
}

type ollamaChatRequest struct {
	ollamaCommon
	Messages []struct {
		Role       string          `json:"role"`
		Content    string          `json:"content"`
		Images     []string        `json:"images"`
		Thinking   string          `json:"thinking"`
		ToolCalls  json.RawMessage `json:"tool_calls"`
		ToolName   string          `json:"tool_name"`
		ToolCallID string          `json:"tool_call_id"`
	} `json:"messages"`
	Tools json.RawMessage `json:"tools"`
}

// ollamaMessage is a chat response's message.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

// ollamaToolCall is a call in ollama's shape: an id, and the function's
// index among the answer's calls and its arguments as an object.
type ollamaToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaCalls converts parsed calls (their arguments objects: the
// parser's objects is set for ollama).
func ollamaCalls(calls []toolCall) []ollamaToolCall {
	out := make([]ollamaToolCall, len(calls))
	for i, c := range calls {
		out[i].ID = ollamaCallID()
		out[i].Function.Index = i
		out[i].Function.Name = c.Name
		out[i].Function.Arguments = json.RawMessage(c.Arguments)
		if !json.Valid(out[i].Function.Arguments) {
			out[i].Function.Arguments = jsonString(c.Arguments)
		}
	}
	return out
}

// ollamaCallID is a call's id as ollama writes them: "call_" and eight
// lowercase letters and digits.
func ollamaCallID() string { return "call_" + strings.ToLower(rand.Text()[:8]) }

// ollamaResponse is one NDJSON line, or the whole answer without
// streaming; the statistics come with done.
type ollamaResponse struct {
	Model     string         `json:"model"`
	CreatedAt string         `json:"created_at"`
	Response  *string        `json:"response,omitempty"`
	Thinking  string         `json:"thinking,omitempty"` // /api/generate's
	Message   *ollamaMessage `json:"message,omitempty"`
	Done      bool           `json:"done"`
	// DoneReason is "stop", "length", or "load" and "unload" for a
	// request with nothing to generate.
	DoneReason string `json:"done_reason,omitempty"`
	// Context is /api/generate's prompt and answer as token ids (not
	// under raw), for the next request's context.
	Context            []int `json:"context,omitempty"`
	TotalDuration      int64 `json:"total_duration,omitempty"`
	LoadDuration       int64 `json:"load_duration,omitempty"`
	PromptEvalCount    int   `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64 `json:"prompt_eval_duration,omitempty"`
	EvalCount          int   `json:"eval_count,omitempty"`
	EvalDuration       int64 `json:"eval_duration,omitempty"`
	// Logprobs are the line's tokens' log-probabilities, when asked
	// (ollama's Logprob: token, logprob, bytes, top_logprobs).
	Logprobs []chatLogprob `json:"logprobs,omitempty"`
}

// decodeOllama decodes a request leniently; errors are the API's.
func decodeOllama(r *http.Request, v any) error {
	err := json.NewDecoder(r.Body).Decode(v)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit)}
	}
	return badRequest("", "invalid JSON: %v", err)
}

// writeOllamaError answers err in ollama's shape.
func writeOllamaError(w http.ResponseWriter, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, map[string]string{"error": e.Message})
}

// ollamaPath reports the paths whose errors are ollama's shape: / and
// /api/*.
func ollamaPath(path string) bool {
	return path == "/" || path == "/api" || strings.HasPrefix(path, "/api/")
}

// parseOllamaOptions reads the options tputool honours. Integers may be
// written as floats (128.0, 1e3: JavaScript clients do) when they are
// whole, as ollama's own decoding (float64 to int) takes them; null is
// absent.
func parseOllamaOptions(raw map[string]json.RawMessage) (ollamaOptions, error) {
	var o ollamaOptions
	for key, v := range map[string]**int64{"num_predict": &o.NumPredict, "top_k": &o.TopK, "seed": &o.Seed} {
		if r, ok := raw[key]; ok && isSet(r) {
			n, err := ollamaInt(key, r)
			if err != nil {
				return o, err
			}
			*v = &n
		}
	}
	for key, v := range map[string]**float64{"temperature": &o.Temperature, "top_p": &o.TopP, "min_p": &o.MinP, "repeat_penalty": &o.RepeatPenalty} {
		if r, ok := raw[key]; ok && isSet(r) {
			var f float64
			if json.Unmarshal(r, &f) != nil {
				return o, badRequest(key, "option %s must be a number, got %s", key, r)
			}
			*v = &f
		}
	}
	if r, ok := raw["stop"]; ok && isSet(r) {
		if json.Unmarshal(r, &o.Stop) != nil {
			return o, badRequest("stop", "option stop must be an array of strings")
		}
	}
	return o, nil
}

// ollamaInt reads an integer option: an integer, or a float that is a
// whole number.
func ollamaInt(key string, raw json.RawMessage) (int64, error) {
	var n int64
	if json.Unmarshal(raw, &n) == nil {
		return n, nil
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, badRequest(key, "option %s must be an integer, got %s", key, raw)
	}
	return int64(f), nil
}

// ollamaModelName is the served model as ollama's clients list it: with
// a tag, ":latest" when its name has none.
func (s *Server) ollamaModelName() string {
	n := s.o.ModelName
	if !strings.Contains(n[strings.LastIndexByte(n, '/')+1:], ":") {
		n += ":latest"
	}
	return n
}

// checkOllamaModel accepts the served model's name, with or without its
// tag, and an empty one; another is ollama's 404.
func (s *Server) checkOllamaModel(name string) error {
	if name == "" || name == s.o.ModelName || name == s.ollamaModelName() {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("model '%s' not found: this server serves '%s'", name, s.ollamaModelName())}
}

// ollamaOverrides checks the fields both endpoints share and returns the
// settings. num_predict 0 or below (ollama's "no limit", -1, and "fill
// the context", -2) is the default, the rest of the context; seed -1 is
// ollama's random seed.
func (s *Server) ollamaOverrides(c *ollamaCommon) (generate.Overrides, error) {
	var o generate.Overrides
	if err := s.checkOllamaModel(c.Model); err != nil {
		return o, err
	}
	if _, err := ollamaFormat(c.Format); err != nil {
		return o, err
	}
	opts, err := parseOllamaOptions(c.Options)
	if err != nil {
		return o, err
	}
	p := samplingParams{Temperature: opts.Temperature, TopP: opts.TopP, MinP: opts.MinP, RepetitionPenalty: opts.RepeatPenalty}
	if opts.Seed != nil && *opts.Seed != -1 {
		p.Seed = opts.Seed
	}
	if v := opts.TopK; v != nil {
		if *v < math.MinInt32 || *v > math.MaxInt32 {
			return o, badRequest("top_k", "option top_k %d is out of range", *v)
		}
		p.TopK = new(int(*v))
	}
	var maxTokens *int
	if n := opts.NumPredict; n != nil && *n > 0 {
		maxTokens = new(int(min(*n, math.MaxInt32)))
	}
	o, _, err = p.check("num_predict", maxTokens)
	if err != nil {
		return o, err
	}
	for _, st := range opts.Stop {
		if st == "" {
			return o, badRequest("stop", "stop strings must not be empty")
		}
	}
	o.Stop = opts.Stop
	return o, nil
}

// ollamaThink turns think into the template's variables: true or false
// is enable_thinking; an effort ("low", "medium", "high") is thinking
// with that reasoning_effort. "max", which ollama takes too, is "high"
// for a harmony model (as ollama maps it: harmony knows no higher) and
// thinking without an effort for the others.
func (s *Server) ollamaThink(raw json.RawMessage) (map[string]any, error) {
	extra := map[string]any{}
	if !isSet(raw) {
		return extra, nil
	}
	var on bool
	var effort string
	switch {
	case json.Unmarshal(raw, &on) == nil:
		extra["enable_thinking"] = on
	case json.Unmarshal(raw, &effort) == nil && (effort == "low" || effort == "medium" || effort == "high"):
		extra["enable_thinking"], extra["reasoning_effort"] = true, effort
	case effort == "max":
		extra["enable_thinking"] = true
		if s.o.Harmony {
			extra["reasoning_effort"] = "high"
		}
	default:
		return nil, badRequest("think", "think must be true, false, \"low\", \"medium\", \"high\" or \"max\"")
	}
	return extra, nil
}

// keepAliveZero reports keep_alive 0 (0, "0", "0s"): ollama's request to
// unload the model.
func keepAliveZero(raw json.RawMessage) bool {
	if !isSet(raw) {
		return false
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f == 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		d, err := time.ParseDuration(s)
		return err == nil && d == 0
	}
	return false
}

// ollamaGenerate answers POST /api/generate: the prompt goes through the
// chat template as one user message (with system, if given), or as is
// under raw or without a template; context (a previous answer's tokens)
// comes before it.
func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req ollamaGenerateRequest
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.ollamaNoGeneration(&req.ollamaCommon, req.Prompt == "", "generate"); err != nil {
		writeOllamaError(w, err)
		return
	}
	if req.Prompt == "" {
		s.ollamaLoaded(w, &req.ollamaCommon, false)
		return
	}
	p, err := s.ollamaGeneratePlan(r.Context(), &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	s.ollamaRun(w, r, x, &req.ollamaCommon, p, false, !req.Raw)
}

// ollamaNoGeneration is ollama's answer to /api/generate or /api/chat
// (endpoint "generate" or "chat") for a model that only gives embeddings
// (ServerOptions.EmbeddingsOnly): another model's name is the 404 it
// always is, and the served one a 400 in ollama's words, `"NAME" does
// not support generate` (or chat), NAME as the request wrote it. A
// request that unloads the model (nothing to generate, keep_alive 0) is
// answered as for any model, as ollama answers it before it checks what
// the model can do; one that loads it (nothing to generate) is refused,
// as ollama refuses it. nil for a model that generates.
func (s *Server) ollamaNoGeneration(c *ollamaCommon, nothing bool, endpoint string) error {
	if !s.o.EmbeddingsOnly || (nothing && keepAliveZero(c.KeepAlive)) {
		return nil
	}
	if err := s.checkOllamaModel(c.Model); err != nil {
		return err
	}
	name := c.Model
	if name == "" {
		name = s.ollamaModelName()
	}
	return badRequest("model", "%q does not support %s", name, endpoint)
}

// ollamaLoaded answers a request with nothing to generate, which ollama's
// clients send to load the model (done_reason "load") or, with keep_alive
// 0, to unload it ("unload"; the served model stays loaded).
func (s *Server) ollamaLoaded(w http.ResponseWriter, c *ollamaCommon, isChat bool) {
	if _, err := s.ollamaOverrides(c); err != nil {
		writeOllamaError(w, err)
		return
	}
	resp := ollamaResponse{Model: s.o.ModelName, CreatedAt: s.o.Now().UTC().Format(time.RFC3339Nano), Done: true, DoneReason: "load"}
	if keepAliveZero(c.KeepAlive) {
		resp.DoneReason = "unload"
	}
	if isChat {
		resp.Message = &ollamaMessage{Role: "assistant"}
	} else {
		resp.Response = new("")
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) ollamaGeneratePlan(ctx context.Context, req *ollamaGenerateRequest) (*plan, error) {
	o, err := s.ollamaOverrides(&req.ollamaCommon)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Raw && (req.Template != "" || req.System != "" || len(req.Context) > 0):
		return nil, badRequest("raw", "raw mode does not support template, system, or context")
	case req.Template != "":
		return nil, badRequest("template", "template is not supported: tputool renders prompts with the model's chat template (send raw: true with the prompt written out instead)")
	case len(req.Images) > 0:
		return nil, badRequest("images", "images are not supported")
	case req.Suffix != "":
		return nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported")
	case s.o.Tokenizer == nil:
		return nil, badRequest("prompt", "this server has no tokenizer")
	}
	extra, err := s.ollamaThink(req.Think)
	if err != nil {
		return nil, err
	}
	if err := s.checkTokenIDs("context", req.Context); err != nil {
		return nil, err
	}
	var ids []int
	text := ""
	templated := !req.Raw && s.o.Template != nil
	if templated {
		var msgs []chat.Message
		if req.System != "" {
			msgs = append(msgs, chat.Message{Role: "system", Content: req.System})
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: req.Prompt})
		text, ids, err = s.renderChat(ctx, msgs, extra, nil, "")
	} else {
		ids, err = s.o.Tokenizer.Encode(req.System+req.Prompt, true)
	}
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	if len(req.Context) > 0 {
		ids = append(append(make([]int, 0, len(req.Context)+len(ids)), req.Context...), ids...)
	}
	return s.ollamaPlan(ids, o, &req.ollamaCommon, "prompt", func(p *plan, _ bool) {
		if templated {
			s.answerParts(p, text, chatToolSet{}) // the thought, as /api/chat's
		}
	})
}

// checkTokenIDs checks token ids a request sends against both
// vocabularies (the model's and the tokenizer's).
func (s *Server) checkTokenIDs(param string, ids []int) error {
	vocab := s.vocabSize()
	for _, id := range ids {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return badRequest(param, "token id %d in %s is outside the vocabulary [0, %d)", id, param, vocab)
		}
	}
	return nil
}

// ollamaNumKeep is how many of a prompt's first tokens a cut keeps
// (ollama's num_keep default): the template's opening.
const ollamaNumKeep = 4

// ollamaFit fits a prompt to the context as ollama does: one that leaves
// no room to generate is, under truncate, cut in the middle (its first
// ollamaNumKeep tokens and its latest ones kept, leaving half the
// context, or num_predict if less, for the answer, where ollama would
// shift its context as it generates), else a 400; and num_predict is
// clamped to the room left.
func (s *Server) ollamaFit(ids []int, o *generate.Overrides, truncate bool, param string) ([]int, error) {
	c := s.o.MaxContext
	if c <= 0 {
		return ids, nil
	}
	if len(ids) >= c {
		if !truncate {
			return nil, &apiError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
				Message: fmt.Sprintf("the input length exceeds the context length: the %s has %d tokens, the context %d (truncate false)", param, len(ids), c)}
		}
		room := c / 2
		if n := o.MaxNewTokens; n != nil && *n < room {
			room = *n
		}
		want := max(c-max(room, 1), 1)
		keep := min(ollamaNumKeep, want/2)
		ids = append(append(make([]int, 0, want), ids[:keep]...), ids[len(ids)-(want-keep):]...)
	}
	if n := o.MaxNewTokens; n != nil && len(ids)+*n > c {
		o.MaxNewTokens = new(c - len(ids))
	}
	return ids, nil
}

// ollamaRender renders a chat's messages. Under truncate, while the
// prompt leaves no room in the context, the oldest messages are dropped,
// but for the system messages and the last one, as ollama's chatPrompt
// does; a cut the template refuses to render (roles that must alternate)
// is passed over. The fewest drops that fit are found by bisection (a
// prompt shortens as messages go), so a long chat costs log n renders,
// not n (each of n messages: quadratic on a hostile request). A prompt
// that still leaves no room is cut by ollamaFit.
func (s *Server) ollamaRender(ctx context.Context, msgs []chat.Message, extra map[string]any, tools []any, truncate bool) (string, []int, error) {
	text, ids, err := s.renderChat(ctx, msgs, extra, tools, "")
	c := s.o.MaxContext
	if err != nil || !truncate || c <= 0 || len(ids) < c {
		return text, ids, err
	}
	// cut renders the chat from message i on (and the system messages
	// before it), or, where the template refuses that, from the next
	// ones, ollamaCutTries in all; next is where a later cut may start.
	cut := func(i int) (next int, t string, x []int, ok bool) {
		for end := min(i+ollamaCutTries, len(msgs)); i < end; i++ {
			var kept []chat.Message
			for _, m := range msgs[:i] {
				if m.Role == "system" {
					kept = append(kept, m)
				}
			}
			if t, x, err := s.renderChat(ctx, append(kept, msgs[i:]...), extra, tools, ""); err == nil {
				return i + 1, t, x, true
			}
		}
		return i, "", nil, false
	}
	fits := false
	for lo, hi := 1, len(msgs)-1; lo <= hi; {
		mid := lo + (hi-lo)/2
		next, t, x, ok := cut(mid)
		switch {
		case ok && len(x) < c:
			text, ids, fits = t, x, true
			hi = mid - 1
		case ok && !fits: // the most dropped so far, for ollamaFit to cut
			text, ids = t, x
			lo = next
		default:
			lo = next
		}
	}
	return text, ids, nil
}

// ollamaCutTries bounds the cuts ollamaRender tries from one point
// when the template refuses to render them.
const ollamaCutTries = 4

// ollamaPlan fits ids to the context (ollamaFit) and plans the one
// sequence under the request's format. parts, when set, says how the
// answer splits (reasoning, harmony, tool calls) before the format's
// grammar is put on it.
func (s *Server) ollamaPlan(ids []int, o generate.Overrides, c *ollamaCommon, promptParam string, parts func(p *plan, structured bool)) (*plan, error) {
	ids, err := s.ollamaFit(ids, &o, c.truncate(), promptParam)
	if err != nil {
		return nil, err
	}
	logprobs, err := c.logprobs()
	if err != nil {
		return nil, err
	}
	p, err := s.plan([][]int{ids}, o, 1, false, logprobs, promptParam, "num_predict")
	if err != nil {
		return nil, err
	}
	spec, err := ollamaFormat(c.Format)
	if err != nil {
		return nil, err
	}
	if parts != nil {
		parts(p, spec != nil)
	}
	return p, s.constrain(p, spec)
}

// ollamaChat answers POST /api/chat.
func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req ollamaChatRequest
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if err := s.ollamaNoGeneration(&req.ollamaCommon, len(req.Messages) == 0, "chat"); err != nil {
		writeOllamaError(w, err)
		return
	}
	if len(req.Messages) == 0 {
		s.ollamaLoaded(w, &req.ollamaCommon, true)
		return
	}
	p, err := s.ollamaChatPlan(r.Context(), &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	s.ollamaRun(w, r, x, &req.ollamaCommon, p, true, false)
}

func (s *Server) ollamaChatPlan(ctx context.Context, req *ollamaChatRequest) (*plan, error) {
	o, err := s.ollamaOverrides(&req.ollamaCommon)
	if err != nil {
		return nil, err
	}
	tools, err := s.chatTools(&chatRequest{Tools: req.Tools})
	if err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	in := make([]chatMessage, len(req.Messages))
	for i, m := range req.Messages {
		if len(m.Images) > 0 {
			return nil, badRequest("images", "images are not supported")
		}
		in[i] = chatMessage{Role: strings.ToLower(m.Role), Content: jsonString(m.Content), ToolCalls: m.ToolCalls,
			ReasoningContent: m.Thinking, Name: m.ToolName, ToolCallID: m.ToolCallID}
	}
	msgs, err := chatMessages(in)
	if err != nil {
		return nil, err
	}
	extra, err := s.ollamaThink(req.Think)
	if err != nil {
		return nil, err
	}
	text, ids, err := s.ollamaRender(ctx, msgs, extra, tools.list, req.truncate())
	if err != nil {
		return nil, err
	}
	return s.ollamaPlan(ids, o, &req.ollamaCommon, "messages", func(p *plan, structured bool) {
		if structured {
			tools.format = "" // the format's grammar is the whole answer: no calls in it
		}
		s.answerParts(p, text, tools)
	})
}

// ollamaRun submits the plan's one sequence and answers it: NDJSON lines
// as the text becomes final, or one object with stream false. withContext
// adds the prompt's and answer's token ids to the last (/api/generate's
// context).
func (s *Server) ollamaRun(w http.ResponseWriter, r *http.Request, x *exchange, c *ollamaCommon, p *plan, isChat, withContext bool) {
	start := s.o.Now()
	x.promptTokens = p.promptTokens
	streams, cancel, err := s.submit(r.Context(), p.reqs)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	defer cancel()
	st := streams[0]
	defer func() { x.completionTokens = st.CompletionTokens() }()
	// The answer splits into thinking, content and (chat) tool calls as
	// it arrives (p.splitter and the tool parser; both nil for plain
	// text).
	sp, tp := p.splitter(), p.toolParser()
	if !isChat {
		tp = nil
	}
	if tp != nil {
		tp.objects = true // ollama's arguments are an object: other calls are text
	}
	var calls []toolCall
	split := func(text string, last bool) (thinking, content string) {
		content = text
		if sp != nil {
			thinking, content = sp.feed(text)
			if last {
				r2, c2 := sp.flush()
				thinking, content = thinking+r2, content+c2
			}
		}
		if tp != nil {
			content = tp.feed(content)
			if last {
				var rest string
				calls, rest = tp.finish()
				content += rest
			}
		}
		return thinking, content
	}
	var answer []int // the answer's tokens, for the context
	// The log-probabilities of the tokens not yet sent (a line goes out
	// once text is final: a token's may wait for the next one's).
	logprobs := p.reqs[0].Logprobs >= 0
	lc := p.newChoice(0)
	var pending []Event
	keep := func(ev Event) {
		if withContext && ev.Token >= 0 && ev.FinishReason != generate.FinishStop {
			answer = append(answer, ev.Token)
		}
		if logprobs && hasLogprob(ev, false) {
			pending = append(pending, ev)
		}
	}
	line := func(thinking, text string) ollamaResponse {
		resp := ollamaResponse{Model: s.o.ModelName, CreatedAt: s.o.Now().UTC().Format(time.RFC3339Nano)}
		if isChat {
			resp.Message = &ollamaMessage{Role: "assistant", Content: text, Thinking: thinking}
		} else {
			resp.Response, resp.Thinking = &text, thinking
		}
		if len(pending) > 0 {
			resp.Logprobs = s.chatLogprobsOf(lc, pending).Content
			pending = pending[:0]
		}
		return resp
	}
	final := func(text, reason string) ollamaResponse {
		resp := line(split(text, true))
		if len(calls) > 0 {
			resp.Message.ToolCalls = ollamaCalls(calls)
		}
		if withContext {
			resp.Context = append(append(make([]int, 0, len(p.reqs[0].Prompt)+len(answer)), p.reqs[0].Prompt...), answer...)
		}
		total := s.o.Now().Sub(start)
		ttft := st.TTFT()
		resp.Done, resp.DoneReason = true, finishReason(reason)
		resp.TotalDuration, resp.PromptEvalDuration, resp.EvalDuration = total.Nanoseconds(), ttft.Nanoseconds(), (total - ttft).Nanoseconds()
		resp.PromptEvalCount, resp.EvalCount = st.PromptTokens, st.CompletionTokens()
		return resp
	}
	if c.Stream != nil && !*c.Stream {
		ch := &choice{prev: lastToken(p.reqs[0].Prompt)}
		for ev := range st.Events {
			ch.add(ev, false, false)
			keep(ev) // the log-probabilities all go out with the one line
		}
		if err := outcome(r.Context(), []*choice{ch}); err != nil {
			writeOllamaError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, final(ch.text.String(), ch.finish))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	for ev := range st.Events {
		keep(ev)
		var v any
		switch ev.FinishReason {
		case "":
			thinking, text := split(ev.Text, false)
			if thinking == "" && text == "" {
				continue
			}
			v = line(thinking, text)
		case FinishCancelled:
			if r.Context().Err() != nil {
				return
			}
			v = map[string]string{"error": ErrClosed.Error()}
		case FinishError:
			v = map[string]string{"error": fmt.Sprintf("generation failed: %v", ev.Err)}
		default:
			v = final(ev.Text, ev.FinishReason)
		}
		if enc.Encode(v) != nil || rc.Flush() != nil {
			return
		}
	}
}
