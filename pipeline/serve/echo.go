package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/sample"
)

// A completion's echoed prompt (echo: the prompt's text before each
// choice's, its tokens' log-probabilities before the generated ones'
// with logprobs) and vLLM's prompt_logprobs: what evaluation harnesses
// (lm-evaluation-harness's local-completions: echo, logprobs 1,
// max_tokens 1, the prompt as token ids) read a model's likelihood of a
// text from.

// echoPlan is what a completion request asks of its prompts beside the
// generation.
type echoPlan struct {
	// echo puts each prompt's text before its choices' text.
	echo bool
	// only is max_tokens 0 with echo: the prompts answered, nothing
	// generated.
	only bool
	// n is the choices of each prompt (choice i is prompt i/n's).
	n       int
	prompts [][]int
	// texts are the prompts as echoed: a text prompt as sent, token ids
	// decoded (special tokens included, as vLLM echoes them).
	texts []string
	// logprobs is the request's logprobs (-1: none): an echoed prompt's
	// tokens get them as the generated ones do.
	logprobs int
	// promptLogprobs is vLLM's prompt_logprobs (-1: none).
	promptLogprobs int
	// scores are each prompt's tokens' log-probabilities (scorePrompts).
	scores [][]sample.TokenLogprob
	// echoed and vllm are each prompt's rendered log-probabilities
	// (render), shared by its choices: an echoed prompt's, vLLM's
	// prompt_logprobs.
	echoed []*completionLogprobs
	vllm   [][]map[string]vllmLogprob
}

// maxEchoEntries bounds the log-probability entries one request's
// prompts ask for (each prompt token, and each of its alternatives, in
// each choice): about 50 MB of JSON.
const maxEchoEntries = 1 << 20

// param names the field a failure to score the prompts is about.
func (e *echoPlan) param() string {
	if e.echo {
		return "echo"
	}
	return "prompt_logprobs"
}

// topK is the alternatives the prompts' tokens are scored with; wants
// says whether they are scored at all.
func (e *echoPlan) topK() (k int, wants bool) {
	k = -1
	if e.echo {
		k = e.logprobs
	}
	k = max(k, e.promptLogprobs)
	return k, k >= 0
}

// newEchoPlan reads echo, max_tokens 0 and prompt_logprobs (nil when the
// request asks for none of them); texts and idLists are the prompt's
// forms (promptForms), prompts their tokens.
func (s *Server) newEchoPlan(req *completionRequest, texts []string, idLists, prompts [][]int, n, logprobs int) (*echoPlan, error) {
	e := &echoPlan{echo: req.Echo, n: n, prompts: prompts, logprobs: logprobs, promptLogprobs: -1}
	if req.PromptLogprobs != nil {
		k := *req.PromptLogprobs
		if k < 0 || k > maxLogprobs {
			return nil, badRequest("prompt_logprobs", "prompt_logprobs must be between 0 and %d, got %d", maxLogprobs, k)
		}
		if req.Stream {
			return nil, badRequest("prompt_logprobs", "prompt_logprobs are not available when streaming (as vLLM's)")
		}
		e.promptLogprobs = k
	}
	// max_tokens 0 without echo was refused (completionPlan).
	e.only = req.MaxTokens != nil && *req.MaxTokens == 0
	if !e.echo && e.promptLogprobs < 0 {
		return nil, nil
	}
	// Every choice repeats its prompt's entries.
	entries := 0
	for _, p := range prompts {
		per := 0
		if e.echo && logprobs >= 0 {
			per += 1 + logprobs
		}
		if e.promptLogprobs >= 0 {
			per += 1 + e.promptLogprobs
		}
		entries += len(p) * per * n
	}
	if entries > maxEchoEntries {
		return nil, badRequest(e.param(), "the prompts' log-probabilities would be %d entries (tokens x (1 + alternatives) x choices), over the %d one request may ask: shorten the prompts or ask fewer alternatives or choices", entries, maxEchoEntries)
	}
	if e.echo {
		e.texts = append(e.texts, texts...)
		for _, ids := range idLists {
			if s.o.Tokenizer == nil {
				return nil, badRequest("echo", "this server has no tokenizer: a prompt of token ids cannot be echoed as text")
			}
			e.texts = append(e.texts, s.o.Tokenizer.Decode(ids, false))
		}
	}
	return e, nil
}

// echoOnlyPlan is the plan of max_tokens 0 with echo: each prompt's n
// choices, nothing to generate, so a prompt may fill the context.
func (s *Server) echoOnlyPlan(prompts [][]int, n, logprobs int) (*plan, error) {
	p := &plan{}
	for _, prompt := range prompts {
		if err := s.checkModelVocab("prompt", prompt); err != nil {
			return nil, err
		}
		if c := s.o.MaxContext; c > 0 && len(prompt) > c {
			return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "prompt", Code: "context_length_exceeded",
				Message: fmt.Sprintf("this model's maximum context length is %d tokens, and the prompt has %d", c, len(prompt))}
		}
		p.promptTokens += len(prompt)
		for j := range n {
			p.reqs = append(p.reqs, Request{Prompt: prompt, Index: j, Logprobs: logprobs})
		}
	}
	return p, nil
}

// scorePrompts scores the prompts' tokens through the scheduler, when
// the request asks for their log-probabilities.
func (s *Server) scorePrompts(ctx context.Context, e *echoPlan) error {
	k, wants := e.topK()
	if !wants {
		return nil
	}
	scores, err := s.sched.PromptLogprobs(ctx, e.prompts, k)
	switch {
	case errors.Is(err, errs.ErrUnsupported):
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: e.param(), Message: err.Error()}
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrClosed), errors.Is(err, errs.ErrUsage):
		return schedulerError(err)
	case ctx.Err() != nil:
		return &apiError{Status: statusClientClosed, Message: "the client closed the request", Type: "invalid_request_error"}
	case err != nil:
		return err // a 500
	}
	e.scores = scores
	s.render(e)
	return nil
}

// render renders each prompt's log-probabilities once, for its choices.
func (s *Server) render(e *echoPlan) {
	for k := range e.prompts {
		if e.echo && e.logprobs >= 0 {
			e.echoed = append(e.echoed, s.promptLogprobsOf(e, k))
		}
		if e.promptLogprobs >= 0 {
			e.vllm = append(e.vllm, s.vllmPromptLogprobs(e, k))
		}
	}
}

// offsets are the text offsets each choice's generated tokens start at:
// after its echoed prompt's tokens, one count running over both, as
// vLLM's (nil without an echo's log-probabilities, where nothing reads
// them).
func (e *echoPlan) offsets() []int {
	if len(e.echoed) == 0 {
		return nil
	}
	out := make([]int, len(e.prompts)*e.n)
	for i := range out {
		lp := e.echoed[i/e.n]
		last := len(lp.Tokens) - 1
		out[i] = lp.TextOffset[last] + utf8.RuneCountInString(lp.Tokens[last])
	}
	return out
}

// text is choice i's echoed prompt ("" without echo).
func (e *echoPlan) text(i int) string {
	if e == nil || !e.echo {
		return ""
	}
	return e.texts[i/e.n]
}

// promptLogprobsOf renders prompt k's tokens as the start of a choice's
// logprobs: each token's text (after the one before it), its
// log-probability and its likeliest alternatives (the first token's
// null: nothing precedes it), and text offsets from 0, counting each
// token's text (a special token the tokenizer added counts its own).
func (s *Server) promptLogprobsOf(e *echoPlan, k int) *completionLogprobs {
	prompt := e.prompts[k]
	lp := &completionLogprobs{}
	prev, offset := -1, 0
	for j, id := range prompt {
		a := s.prevText(prev)
		text := s.tokenTextAfter(prev, a, id)
		lp.Tokens = append(lp.Tokens, text)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += utf8.RuneCountInString(text)
		if j == 0 {
			lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
			lp.TopLogprobs = append(lp.TopLogprobs, nil)
		} else {
			sc := e.scores[k][j-1]
			v := logprobValue(float64(sc.Logprob))
			top := map[string]float64{}
			for _, alt := range sc.Top[:min(len(sc.Top), e.logprobs)] {
				top[s.tokenTextAfter(prev, a, alt.ID)] = logprobValue(float64(alt.Logprob))
			}
			top[text] = v
			lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
			lp.TopLogprobs = append(lp.TopLogprobs, top)
		}
		prev = id
	}
	return lp
}

// vllmLogprob is one entry of vLLM's prompt_logprobs.
type vllmLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// vllmPromptLogprobs renders prompt k's tokens as vLLM's prompt_logprobs:
// null for the first, then for each token a map from token ids to their
// log-probability, rank and text: the token's own and its
// promptLogprobs likeliest alternatives (ranked 1, 2, … in order).
func (s *Server) vllmPromptLogprobs(e *echoPlan, k int) []map[string]vllmLogprob {
	prompt := e.prompts[k]
	out := []map[string]vllmLogprob{nil}
	for j := 1; j < len(prompt); j++ {
		prev, id := prompt[j-1], prompt[j]
		a := s.prevText(prev)
		sc := e.scores[k][j-1]
		m := map[string]vllmLogprob{}
		for r, alt := range sc.Top[:min(len(sc.Top), e.promptLogprobs)] {
			m[strconv.Itoa(alt.ID)] = vllmLogprob{logprobValue(float64(alt.Logprob)), r + 1, s.tokenTextAfter(prev, a, alt.ID)}
		}
		m[strconv.Itoa(id)] = vllmLogprob{logprobValue(float64(sc.Logprob)), sc.Rank, s.tokenTextAfter(prev, a, id)}
		out = append(out, m)
	}
	return out
}

// completionChoiceOf is choice i's answer with its echoed prompt before
// the generated text (c nil: nothing generated, finish "length"), and
// their log-probabilities when asked.
func (s *Server) completionChoiceOf(p *plan, e *echoPlan, i int, c *choice) completionChoice {
	cc := completionChoice{Index: i, Text: e.text(i), FinishReason: new("length")}
	var gen *completionLogprobs
	if c != nil {
		cc.Text += c.text.String()
		cc.FinishReason = new(finishReason(c.finish))
		if p.reqs[i].Logprobs >= 0 {
			gen = s.completionLogprobsOf(c, c.logprobs)
		}
	}
	if p.reqs[i].Logprobs >= 0 {
		cc.Logprobs = joinLogprobs(s.echoedLogprobs(e, i), gen)
	}
	if e != nil && e.promptLogprobs >= 0 {
		cc.PromptLogprobs = e.vllm[i/e.n]
	}
	return cc
}

// echoedLogprobs is choice i's echoed prompt's log-probabilities (nil
// without echo or its log-probabilities).
func (s *Server) echoedLogprobs(e *echoPlan, i int) *completionLogprobs {
	if e == nil || len(e.echoed) == 0 {
		return nil
	}
	return e.echoed[i/e.n]
}

// joinLogprobs is a then b (either may be nil; both nil: empty lists).
func joinLogprobs(a, b *completionLogprobs) *completionLogprobs {
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, x := range []*completionLogprobs{a, b} {
		if x == nil {
			continue
		}
		out.Tokens = append(out.Tokens, x.Tokens...)
		out.TokenLogprobs = append(out.TokenLogprobs, x.TokenLogprobs...)
		out.TopLogprobs = append(out.TopLogprobs, x.TopLogprobs...)
		out.TextOffset = append(out.TextOffset, x.TextOffset...)
	}
	return out
}

// answerEchoOnly answers a request of max_tokens 0 with echo: each
// choice its prompt, nothing generated, whole or as a stream.
func (s *Server) answerEchoOnly(w http.ResponseWriter, req *completionRequest, p *plan, e *echoPlan) {
	id, created := newID("cmpl-"), s.o.Now().Unix()
	choices := make([]completionChoice, len(p.reqs))
	for i := range choices {
		choices[i] = s.completionChoiceOf(p, e, i, nil)
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName,
			Choices: choices, Usage: newUsage(p.promptTokens, 0)})
		return
	}
	out := startSSE(w)
	su := req.streamUsageOf()
	for _, cc := range choices {
		if err := out.send(completionChunk{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName,
			Choices: []completionChoice{cc}, Usage: su.chunk(p.promptTokens, 0)}); err != nil {
			return
		}
	}
	if su.include {
		out.send(completionChunk{ID: id, Object: "text_completion", Created: created, Model: s.o.ModelName,
			Choices: []completionChoice{}, Usage: chunkUsage{set: true, u: newUsage(p.promptTokens, 0)}})
	}
	out.done()
}
