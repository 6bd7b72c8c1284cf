package serve

import (
	"context"
	"encoding/json"
	"net/http"
)

// POST /v1/completions: a string, strings, token ids or lists of ids,
// answered whole or streamed.

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	// PromptLogprobs is vLLM's prompt_logprobs, when asked.
	PromptLogprobs []map[string]vllmLogprob `json:"prompt_logprobs,omitempty"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// completionChunk is a streamed completionResponse.
type completionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   chunkUsage         `json:"usage,omitzero"`
}

// defaultCompletionTokens is max_tokens when a completion request does
// not set it: OpenAI's default, and vLLM's (chat's default is the rest of
// the context).
const defaultCompletionTokens = 16

// promptsOf reads and encodes the prompts of the field param
// (completions' prompt; embeddings' input, which also needs the texts,
// calls promptForms and encodePrompts itself): a string, an array of
// strings, an array of token ids, or an array of arrays of token ids.
func (s *Server) promptsOf(param string, raw json.RawMessage) ([][]int, error) {
	texts, idLists, err := promptForms(param, raw)
	if err != nil {
		return nil, err
	}
	return s.encodePrompts(param, texts, idLists)
}

// promptForms reads a prompt field in one of its forms: texts (a string
// or an array of strings) or token id lists (an array of ids or an array
// of such arrays); one of the two is set.
func promptForms(param string, raw json.RawMessage) (texts []string, idLists [][]int, err error) {
	if !isSet(raw) {
		return nil, nil, badRequest(param, "%s is required", param)
	}
	// Each form is tried into its own variable: a failed Unmarshal may
	// have filled part of it.
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
		return nil, nil, badRequest(param, "%s must be a string, an array of strings, an array of token ids or an array of such arrays", param)
	}
	if len(texts) == 0 && len(idLists) == 0 {
		return nil, nil, badRequest(param, "%s is empty", param)
	}
	return texts, idLists, nil
}

// encodePrompts encodes texts (with the tokenizer's special tokens) and
// checks token id lists against the vocabulary: the prompts, texts first;
// each must have a token.
func (s *Server) encodePrompts(param string, texts []string, idLists [][]int) ([][]int, error) {
	var prompts [][]int
	for _, t := range texts {
		if s.o.Tokenizer == nil {
			return nil, badRequest(param, "this server has no tokenizer: send the %s as token ids", param)
		}
		ids, err := s.o.Tokenizer.Encode(t, true)
		if err != nil {
			return nil, badRequest(param, "encoding the %s: %v", param, err)
		}
		prompts = append(prompts, ids)
	}
	vocab := s.vocabSize()
	for _, ids := range idLists {
		for _, id := range ids {
			if id < 0 || (vocab > 0 && id >= vocab) {
				return nil, badRequest(param, "token id %d is outside the vocabulary [0, %d)", id, vocab)
			}
		}
		prompts = append(prompts, ids)
	}
	for _, p := range prompts {
		if len(p) == 0 {
			return nil, badRequest(param, "a %s has no tokens", param)
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
	p, e, err := s.completionPlan(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	if e != nil {
		x.promptTokens = p.promptTokens
		if err := s.scorePrompts(r.Context(), e); err != nil {
			writeError(w, err)
			return
		}
		p.offsets = e.offsets()
		if e.only {
			s.answerEchoOnly(w, &req, p, e)
			return
		}
	}
	var stream func([]*Stream, string, int64)
	if req.Stream {
		stream = func(streams []*Stream, id string, created int64) {
			s.streamCompletions(r.Context(), w, &req, p, e, streams, id, created)
		}
	}
	s.answer(w, r, x, p, "cmpl-", stream, func(choices []*choice, u *usage, id string, created int64) any {
		resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName, Usage: u}
		for i, c := range choices {
			resp.Choices = append(resp.Choices, s.completionChoiceOf(p, e, i, c))
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

// completionPlan validates a completion request and plans its
// sequences, and what it asks of its prompts (nil: nothing but the
// generation).
func (s *Server) completionPlan(req *completionRequest) (*plan, *echoPlan, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	if err := s.noGeneration(); err != nil {
		return nil, nil, err
	}
	maxTokens := req.MaxTokens
	if maxTokens != nil && *maxTokens == 0 {
		if !req.Echo {
			return nil, nil, badRequest("max_tokens", "max_tokens must be positive, got 0 (0 only with echo: the prompt alone)")
		}
		maxTokens = nil // the prompt alone (newEchoPlan): nothing generated
	}
	o, n, err := req.check("max_tokens", maxTokens)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case req.Suffix != nil && *req.Suffix != "":
		return nil, nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported")
	case req.BestOf != nil && *req.BestOf != n:
		return nil, nil, badRequest("best_of", "best_of is not supported beyond n (%d), got %d", n, *req.BestOf)
	}
	logprobs := -1
	if req.Logprobs != nil {
		logprobs = *req.Logprobs
		if logprobs < 0 || logprobs > maxLogprobs {
			return nil, nil, badRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxLogprobs, logprobs)
		}
	}
	texts, idLists, err := promptForms("prompt", req.Prompt)
	if err != nil {
		return nil, nil, err
	}
	prompts, err := s.encodePrompts("prompt", texts, idLists)
	if err != nil {
		return nil, nil, err
	}
	if len(prompts)*n > maxSequences {
		return nil, nil, badRequest("n", "%d prompts x n=%d is over the %d sequences one request may run", len(prompts), n, maxSequences)
	}
	e, err := s.newEchoPlan(req, texts, idLists, prompts, n, logprobs)
	if err != nil {
		return nil, nil, err
	}
	if e != nil && e.only {
		p, err := s.echoOnlyPlan(prompts, n, logprobs)
		return p, e, err
	}
	p, err := s.plan(prompts, o, n, req.IgnoreEOS, logprobs, "prompt", "max_tokens")
	if err != nil {
		return nil, nil, err
	}
	p.keepStop = e != nil && e.echo
	if maxTokens == nil {
		// Without max_tokens, the default within the room the context
		// leaves.
		for i := range p.reqs {
			g := &p.reqs[i].Gen
			g.MaxNewTokens = min(g.MaxNewTokens, defaultCompletionTokens)
		}
	}
	return p, e, nil
}

// streamCompletions streams the choices as text_completion chunks, each
// choice's echoed prompt (e, when set) first.
func (s *Server) streamCompletions(ctx context.Context, w http.ResponseWriter, req *completionRequest, p *plan, e *echoPlan, streams []*Stream, id string, created int64) {
	response := func(cs []completionChoice, u chunkUsage) completionChunk {
		return completionChunk{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName, Choices: cs, Usage: u}
	}
	out := startSSE(w)
	su := req.streamUsageOf()
	if e != nil && e.echo {
		for i := range p.reqs {
			cc := completionChoice{Index: i, Text: e.text(i)}
			if p.reqs[i].Logprobs >= 0 {
				cc.Logprobs = s.echoedLogprobs(e, i)
			}
			if err := out.send(response([]completionChoice{cc}, su.chunk(p.promptTokens, 0))); err != nil {
				return
			}
		}
	}
	s.streamEvents(ctx, out, p, streams, su, func(i int, c *choice, ev Event, lps []Event, logprobs bool, u chunkUsage) any {
		cc := completionChoice{Index: i, Text: ev.Text}
		if logprobs {
			cc.Logprobs = s.completionLogprobsOf(c, lps)
		}
		if ev.FinishReason != "" {
			cc.FinishReason = new(finishReason(ev.FinishReason))
		}
		return response([]completionChoice{cc}, u)
	}, func(u *usage) any { return response([]completionChoice{}, chunkUsage{set: true, u: u}) })
}

// streamEvents sends the events of a plan's streams as SSE chunks, in the
// order they come: chunk builds an event's chunk (lps holds the event when
// its log-probabilities are to be sent; logprobs says whether the choice
// asked for them; u is its usage field, as su says, counting the tokens
// of the events sent so far), usageChunk the final usage chunk when
// su.include. An engine failure is an SSE error; a client gone ends the
// stream silently, a shutdown cut-off as closed.
func (s *Server) streamEvents(ctx context.Context, out *sse, p *plan, streams []*Stream, su streamUsage,
	chunk func(i int, c *choice, ev Event, lps []Event, logprobs bool, u chunkUsage) any, usageChunk func(*usage) any) {
	choices := make([]*choice, len(streams))
	for i := range choices {
		choices[i] = p.newChoice(i)
	}
	generated := 0 // the tokens of the events so far
	for se := range merge(ctx, streams) {
		ev := se.ev
		if ev.Token >= 0 {
			generated++
		}
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
		if logprobs && hasLogprob(ev, p.keepStop) {
			lps = []Event{ev}
		}
		if ev.Text == "" && ev.FinishReason == "" && len(lps) == 0 {
			continue
		}
		if err := out.send(chunk(se.stream, choices[se.stream], ev, lps, logprobs, su.chunk(p.promptTokens, generated))); err != nil {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	if su.include {
		out.send(usageChunk(newUsage(p.promptTokens, completionTokens(streams))))
	}
	out.done()
}
