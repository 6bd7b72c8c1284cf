package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// Ollama's /api/generate and /api/chat, for the clients that speak it:
// NDJSON streaming by default ("stream": false for one object), settings
// in "options", errors as {"error": "..."}, and a request with no prompt
// (a client loading the model) done at once. Decoding is lenient, as
// ollama's own: unknown fields are ignored, but images, tools and a JSON
// images, which tputool cannot honour, are refused. /api/chat takes tools
// (calls come back as message.tool_calls) and think (the thought comes
// back as message.thinking).

// ollamaOptions are the options tputool honours; the others (num_ctx,
// num_thread, ...) are ignored.
type ollamaOptions struct {
	NumPredict    *int     `json:"num_predict"`
	Temperature   *float64 `json:"temperature"`
	TopK          *int     `json:"top_k"`
	TopP          *float64 `json:"top_p"`
	MinP          *float64 `json:"min_p"`
	Seed          *int64   `json:"seed"`
	Stop          []string `json:"stop"`
	RepeatPenalty *float64 `json:"repeat_penalty"`
}

// ollamaCommon are the fields both endpoints share.
type ollamaCommon struct {
	Model   string          `json:"model"`
	Stream  *bool           `json:"stream"`
	Format  json.RawMessage `json:"format"`
	Options ollamaOptions   `json:"options"`
}

type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt string   `json:"prompt"`
	System string   `json:"system"`
	Raw    bool     `json:"raw"`
	Suffix string   `json:"suffix"`
	Images []string `json:"images"`
}

type ollamaChatRequest struct {
	ollamaCommon
	Messages []struct {
		Role      string          `json:"role"`
		Content   string          `json:"content"`
		Images    []string        `json:"images"`
		Thinking  string          `json:"thinking"`
		ToolCalls json.RawMessage `json:"tool_calls"`
		ToolName  string          `json:"tool_name"`
	} `json:"messages"`
	Tools json.RawMessage `json:"tools"`
	// Think is true or false (the template's enable_thinking), or an
	// effort ("low", "medium", "high": reasoning_effort).
	Think json.RawMessage `json:"think"`
}

// ollamaMessage is a chat response's message.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

// ollamaToolCall is a call in ollama's shape: arguments as an object.
type ollamaToolCall struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaCalls converts parsed calls.
func ollamaCalls(calls []toolCall) []ollamaToolCall {
	out := make([]ollamaToolCall, len(calls))
	for i, c := range calls {
		out[i].Function.Name = c.Name
		out[i].Function.Arguments = json.RawMessage(c.Arguments)
		if !json.Valid(out[i].Function.Arguments) {
			out[i].Function.Arguments = jsonString(c.Arguments)
		}
	}
	return out
}

// ollamaResponse is one NDJSON line, or the whole answer without
// streaming; the statistics come with done.
type ollamaResponse struct {
	Model              string         `json:"model"`
	CreatedAt          string         `json:"created_at"`
	Response           *string        `json:"response,omitempty"`
	Message            *ollamaMessage `json:"message,omitempty"`
	Done               bool           `json:"done"`
	DoneReason         string         `json:"done_reason,omitempty"`
	TotalDuration      int64          `json:"total_duration,omitempty"`
	LoadDuration       int64          `json:"load_duration,omitempty"`
	PromptEvalCount    int            `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64          `json:"prompt_eval_duration,omitempty"`
	EvalCount          int            `json:"eval_count,omitempty"`
	EvalDuration       int64          `json:"eval_duration,omitempty"`
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

// ollamaOverrides checks the fields both endpoints share and returns the
// settings; num_predict below 0 (ollama's "until the context is full") is
// the default, the rest of the context.
func (s *Server) ollamaOverrides(c *ollamaCommon) (generate.Overrides, error) {
	var o generate.Overrides
	name := strings.TrimSuffix(c.Model, ":latest")
	if name != "" && name != s.o.ModelName && c.Model != s.o.ModelName {
		return o, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("model %q not found: this server serves %q", c.Model, s.o.ModelName)}
	}
	if _, err := ollamaFormat(c.Format); err != nil {
		return o, err
	}
	p := samplingParams{Temperature: c.Options.Temperature, TopP: c.Options.TopP, TopK: c.Options.TopK, MinP: c.Options.MinP,
		Seed: c.Options.Seed, RepetitionPenalty: c.Options.RepeatPenalty}
	var maxTokens *int
	if n := c.Options.NumPredict; n != nil && *n >= 0 {
		maxTokens = n
	}
	o, _, err := p.check("num_predict", maxTokens)
	if err != nil {
		return o, err
	}
	for _, st := range c.Options.Stop {
		if st == "" {
			return o, badRequest("stop", "stop strings must not be empty")
		}
	}
	o.Stop = c.Options.Stop
	return o, nil
}

// ollamaGenerate answers POST /api/generate: the prompt goes through the
// chat template as one user message (with system, if given), or as is
// under raw or without a template.
func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request, x *exchange) {
	var req ollamaGenerateRequest
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if req.Prompt == "" && req.System == "" {
		s.ollamaLoaded(w, &req.ollamaCommon, false)
		return
	}
	p, err := s.ollamaGeneratePlan(r.Context(), &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	s.ollamaRun(w, r, x, &req.ollamaCommon, p, false)
}

// ollamaTags answers GET /api/tags, ollama's model list, which its
// clients (Open WebUI among them) read first: the one served model.
func (s *Server) ollamaTags(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	type details struct {
		Format string `json:"format"`
		Family string `json:"family"`
	}
	type model struct {
		Name       string  `json:"name"`
		Model      string  `json:"model"`
		ModifiedAt string  `json:"modified_at"`
		Size       int64   `json:"size"`
		Digest     string  `json:"digest"`
		Details    details `json:"details"`
	}
	m := model{Name: s.o.ModelName, Model: s.o.ModelName, ModifiedAt: s.started.UTC().Format(time.RFC3339Nano),
		Details: details{Format: "safetensors", Family: s.o.Family}}
	writeJSON(w, http.StatusOK, map[string][]model{"models": {m}})
}

// ollamaVersion answers GET /api/version: tputool's version.
func (s *Server) ollamaVersion(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	v := s.o.Version
	if v == "" {
		v = "unknown"
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": v})
}

// ollamaLoaded answers a request with nothing to generate, which ollama's
// clients send to load the model: done at once, done_reason "load".
func (s *Server) ollamaLoaded(w http.ResponseWriter, c *ollamaCommon, isChat bool) {
	if _, err := s.ollamaOverrides(c); err != nil {
		writeOllamaError(w, err)
		return
	}
	resp := ollamaResponse{Model: s.o.ModelName, CreatedAt: s.o.Now().UTC().Format(time.RFC3339Nano), Done: true, DoneReason: "load"}
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
	case len(req.Images) > 0:
		return nil, badRequest("images", "images are not supported")
	case req.Suffix != "":
		return nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported")
	case s.o.Tokenizer == nil:
		return nil, badRequest("prompt", "this server has no tokenizer")
	}
	var ids []int
	if req.Raw || s.o.Template == nil {
		ids, err = s.o.Tokenizer.Encode(req.System+req.Prompt, true)
	} else {
		var msgs []chat.Message
		if req.System != "" {
			msgs = append(msgs, chat.Message{Role: "system", Content: req.System})
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: req.Prompt})
		_, ids, err = s.renderChat(ctx, msgs, nil, nil, "")
	}
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	return s.ollamaPlan(ids, o, &req.ollamaCommon, "prompt", nil)
}

// ollamaPlan plans one sequence under the request's format.
// parts, when set, says how the answer splits (reasoning, harmony, tool
// calls) before the format's grammar is put on it.
func (s *Server) ollamaPlan(ids []int, o generate.Overrides, c *ollamaCommon, promptParam string, parts func(p *plan, structured bool)) (*plan, error) {
	p, err := s.plan([][]int{ids}, o, 1, false, -1, promptParam, "num_predict")
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
	if len(req.Messages) == 0 {
		s.ollamaLoaded(w, &req.ollamaCommon, true)
		return
	}
	p, err := s.ollamaChatPlan(r.Context(), &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	s.ollamaRun(w, r, x, &req.ollamaCommon, p, true)
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
		in[i] = chatMessage{Role: m.Role, Content: jsonString(m.Content), ToolCalls: m.ToolCalls, ReasoningContent: m.Thinking, Name: m.ToolName}
	}
	msgs, err := chatMessages(in)
	if err != nil {
		return nil, err
	}
	extra := map[string]any{}
	if isSet(req.Think) {
		var on bool
		var effort string
		switch {
		case json.Unmarshal(req.Think, &on) == nil:
			extra["enable_thinking"] = on
		case json.Unmarshal(req.Think, &effort) == nil && (effort == "low" || effort == "medium" || effort == "high"):
			extra["enable_thinking"], extra["reasoning_effort"] = true, effort
		default:
			return nil, badRequest("think", "think must be true, false, \"low\", \"medium\" or \"high\"")
		}
	}
	text, ids, err := s.renderChat(ctx, msgs, extra, tools.list, "")
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
// as the text becomes final, or one object with stream false.
func (s *Server) ollamaRun(w http.ResponseWriter, r *http.Request, x *exchange, c *ollamaCommon, p *plan, isChat bool) {
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
	// A chat answer splits into thinking, content and tool calls as it
	// arrives (p.splitter and the tool parser; both nil for plain text).
	sp, tp := p.splitter(), p.toolParser()
	var calls []toolCall
	split := func(text string, last bool) (thinking, content string) {
		if !isChat {
			return "", text
		}
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
	line := func(thinking, text string) ollamaResponse {
		resp := ollamaResponse{Model: s.o.ModelName, CreatedAt: s.o.Now().UTC().Format(time.RFC3339Nano)}
		if isChat {
			resp.Message = &ollamaMessage{Role: "assistant", Content: text, Thinking: thinking}
		} else {
			resp.Response = &text
		}
		return resp
	}
	final := func(text, reason string) ollamaResponse {
		resp := line(split(text, true))
		if len(calls) > 0 {
			resp.Message.ToolCalls = ollamaCalls(calls)
		}
		total := s.o.Now().Sub(start)
		ttft := st.TTFT()
		resp.Done, resp.DoneReason = true, finishReason(reason)
		resp.TotalDuration, resp.PromptEvalDuration, resp.EvalDuration = total.Nanoseconds(), ttft.Nanoseconds(), (total - ttft).Nanoseconds()
		resp.PromptEvalCount, resp.EvalCount = st.PromptTokens, st.CompletionTokens()
		return resp
	}
	if c.Stream != nil && !*c.Stream {
		choices := collectChoices(streams, p)
		if err := outcome(r.Context(), choices); err != nil {
			writeOllamaError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, final(choices[0].text.String(), choices[0].finish))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	for ev := range st.Events {
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
