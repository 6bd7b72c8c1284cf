package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// OpenAI's API as its official clients use it: /v1/models,
// /v1/completions and /v1/chat/completions, plain and streamed
// (server-sent events). A request is decoded strictly: a field outside
// OpenAI's API (and tputool's few extras: ignore_eos, min_p, top_k,
// repetition_penalty) is a 400 naming it, and a field of OpenAI's that
// tputool cannot honour (audio, predicted outputs, ...) is a 400 too
// rather than silently ignored; harmless ones (user, metadata, store,
// ...) are accepted and ignored.

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
		// ContinuousUsageStats (vLLM's) puts the usage so far in every
		// chunk, with include_usage.
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`

	// OpenAI's penalties on the generated tokens, in [-2, 2], and biases
	// by token id (keys are ids as strings), in [-100, 100].
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`

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
	// PromptLogprobs is vLLM's prompt_logprobs: each prompt token's
	// log-probability with that many alternatives, in the choice's
	// prompt_logprobs.
	PromptLogprobs *int `json:"prompt_logprobs"`
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	samplingParams
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	// ChatTemplateKwargs are extra variables for the chat template
	// (vLLM's name; Qwen3's enable_thinking switch among them).
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	// ReasoningEffort reaches the template as reasoning_effort (gpt-oss's
	// template reads it).
	ReasoningEffort json.RawMessage `json:"reasoning_effort"`
	// PromptLogprobs is vLLM's prompt_logprobs: the rendered prompt's
	// tokens' log-probabilities, with that many alternatives, in the
	// response's prompt_logprobs.
	PromptLogprobs *int `json:"prompt_logprobs"`

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
	Verbosity            json.RawMessage `json:"verbosity"`

	// continueFinal: a last assistant message is continued, not closed
	// (Anthropic's prefill); set by the Messages API, never by JSON.
	continueFinal bool
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
	// DeepSeek); templates that know it use it. Reasoning is current
	// vLLM's name for it, and wins when both are given.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// reasoning is the message's earlier thinking: reasoning, else
// reasoning_content.
func (m *chatMessage) reasoning() string {
	if m.Reasoning != "" {
		return m.Reasoning
	}
	return m.ReasoningContent
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
		to   **float64
	}{{"frequency_penalty", p.FrequencyPenalty, &o.FrequencyPenalty}, {"presence_penalty", p.PresencePenalty, &o.PresencePenalty}} {
		if f.v == nil {
			continue
		}
		if !(math.Abs(*f.v) <= sample.MaxPenalty) {
			return o, 0, badRequest(f.name, "%s must be in [-%d, %d], got %v", f.name, sample.MaxPenalty, sample.MaxPenalty, *f.v)
		}
		*f.to = f.v
	}
	if len(p.LogitBias) > 0 {
		o.LogitBias = make(map[int]float64, len(p.LogitBias))
		for k, v := range p.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 {
				return o, 0, badRequest("logit_bias", "logit_bias keys must be token ids, got %q", k)
			}
			if !(math.Abs(v) <= sample.MaxLogitBias) {
				return o, 0, badRequest("logit_bias", "logit_bias values must be in [-%d, %d], got %v for token %d", sample.MaxLogitBias, sample.MaxLogitBias, v, id)
			}
			o.LogitBias[id] = v
		}
	}
	if p.StreamOptions != nil && !p.Stream {
		return o, 0, badRequest("stream_options", "stream_options can only be set when stream is true")
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
