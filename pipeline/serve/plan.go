package serve

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/generate"
)

// The plan of a request, shared by the OpenAI and ollama endpoints: its
// prompts, settings and limits checked once, and the choices (sequences)
// it runs.

// plan is a request's sequences: prompts x n Requests, choice i is
// reqs[i] (prompt i / n, sampler stream i % n).
type plan struct {
	reqs         []Request
	promptTokens int
	// reasoning, when set, splits each chat choice's reasoning from its
	// content; thinking says the prompt opened the reasoning.
	reasoning *Reasoning
	thinking  bool // the prompt opened a thought
	mayThink  bool // the prompt neither opened nor closed one: the model may
	// harmony says the answers are GPT-OSS's harmony messages, decoded
	// with their special tokens (harmony.go).
	harmony bool
	// harmonyPrompt is the rendered prompt of a harmony plan, whose last
	// message the answer may continue (a prefill).
	harmonyPrompt string
	// tools is the format of tool calls to parse out of chat answers
	// ("" for none); toolTypes the JSON types of each tool's parameters
	// (for formats whose values are untyped text: qwen_xml); oneCall
	// keeps only an answer's first call (parallel_tool_calls false).
	tools     ToolFormat
	toolTypes map[string]map[string]string
	oneCall   bool
	// offsets are the text_offset each choice's generated text starts at
	// (a completion's echoed prompt before it); nil: 0.
	offsets []int
	// keepStop keeps the end-of-sequence token's log-probability (an
	// echoed completion's, as vLLM keeps it: a harness reads the last
	// entry as the generated token's).
	keepStop bool
}

// newChoice starts choice i's output: after its prompt's last token, at
// its text offset.
func (p *plan) newChoice(i int) *choice {
	c := &choice{prev: lastToken(p.reqs[i].Prompt)}
	if p.offsets != nil {
		c.offset = p.offsets[i]
	}
	return c
}

// toolParser starts parsing one chat answer's tool calls (nil when the
// plan has none).
func (p *plan) toolParser() *toolParser {
	return newToolParser(p.tools, p.toolTypes, p.oneCall)
}

// textSplitter separates a choice's reasoning from its content as the
// text arrives (*splitter: think tags; *harmonySplitter: GPT-OSS).
type textSplitter interface {
	feed(text string) (reasoning, content string)
	flush() (reasoning, content string)
}

// splitter returns a splitter for one choice, nil when the plan does not
// separate reasoning.
func (p *plan) splitter() textSplitter {
	switch {
	case p.harmony:
		h := newHarmonySplitter()
		h.continues(p.harmonyPrompt)
		return h
	case p.reasoning != nil:
		sp := newSplitter(*p.reasoning, p.thinking)
		switch p.tools {
		case ToolsHermes, ToolsQwenXML, ToolsGLM, ToolsMiniMax, ToolsPythonic:
			sp.call = p.tools.callMarker()
		}
		return sp
	}
	return nil
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
	if v := s.vocabSize(); v > 0 {
		for id := range o.LogitBias {
			if id >= v {
				return nil, badRequest("logit_bias", "logit_bias names token id %d, outside the vocabulary [0, %d)", id, v)
			}
		}
	}
	p := &plan{}
	for _, prompt := range prompts {
		if err := s.checkModelVocab(promptParam, prompt); err != nil {
			return nil, err
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
			// The rest of the context, bounded by generation_config's
			// max_new_tokens where it has one (as vLLM's default).
			limit = c - len(prompt)
			if m := gen.ConfigMaxNewTokens; m > 0 && limit > m {
				limit = m
			}
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

// checkModelVocab refuses a prompt with an id beyond the model's
// vocabulary. Token ids given are checked against both vocabularies
// (encodePrompts); text a tokenizer larger than its model encodes is
// checked here, so the engine never sees an id it cannot embed.
func (s *Server) checkModelVocab(promptParam string, prompt []int) error {
	if v := s.o.VocabSize; v > 0 {
		for _, id := range prompt {
			if id >= v {
				return badRequest(promptParam, "the %s encodes to token id %d, outside the model's vocabulary [0, %d)", promptParam, id, v)
			}
		}
	}
	return nil
}

// vocabSize is the ids a request may name: the smaller of the model's
// and the tokenizer's vocabularies, as far as they are known (0: not).
func (s *Server) vocabSize() int {
	vocab := s.o.VocabSize
	if s.o.Tokenizer != nil && (vocab == 0 || s.o.Tokenizer.VocabSize() < vocab) {
		vocab = s.o.Tokenizer.VocabSize()
	}
	return vocab
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

// ---- sequences in flight

// choice is one sequence's output as it arrives.
type choice struct {
	text     strings.Builder
	prev     int // the last token, context for the next token's text
	offset   int // characters (code points) of token text so far (completions' text_offset)
	finish   string
	stop     string // the stop string, when one ended the text
	err      error
	logprobs []Event // events with a token, for the log-probabilities
}

// collectChoices reads every stream to its end (the scheduler ends them all when
// ctx ends) and returns the choices.
func collectChoices(streams []*Stream, p *plan) []*choice {
	out := make([]*choice, len(streams))
	for i, st := range streams {
		c := p.newChoice(i)
		for ev := range st.Events {
			c.add(ev, p.reqs[i].Logprobs >= 0, p.keepStop)
		}
		out[i] = c
	}
	return out
}

// add records an event.
func (c *choice) add(ev Event, logprobs, keepStop bool) {
	c.text.WriteString(ev.Text)
	if ev.FinishReason != "" {
		c.finish, c.err, c.stop = ev.FinishReason, ev.Err, ev.StopString
	}
	if logprobs && hasLogprob(ev, keepStop) {
		c.logprobs = append(c.logprobs, ev)
	}
}

// hasLogprob says whether ev's token gets a log-probability entry: a
// token's event, not the end-of-sequence token's (its text is not part
// of the output) unless keepStop.
func hasLogprob(ev Event, keepStop bool) bool {
	return ev.Token >= 0 && (keepStop || ev.FinishReason != generate.FinishStop)
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
