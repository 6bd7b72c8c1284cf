package serve

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/generate"
	"github.com/tputool/tputool/pipeline/sample"
)

// PromptLogprobs implements PromptScorer for the fake model: after token
// t its logits are textLogits(t).
func (e *textEngine) PromptLogprobs(prompts [][]int, topK int) ([][]sample.TokenLogprob, error) {
	if len(prompts) > e.MaxPrefill() {
		e.t.Errorf("%d prompts scored at once, above MaxPrefill", len(prompts))
	}
	out := make([][]sample.TokenLogprob, len(prompts))
	for i, p := range prompts {
		for j := 1; j < len(p); j++ {
			l := textLogits(p[j-1])
			lse := textLSE(l)
			tl := sample.TokenLogprob{Logprob: float32(float64(l[p[j]]) - lse), Rank: 1}
			for _, v := range l {
				if v > l[p[j]] {
					tl.Rank++
				}
			}
			ids := make([]int, len(l))
			for k := range ids {
				ids[k] = k
			}
			slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(l[b], l[a]) })
			for _, id := range ids[:topK] {
				tl.Top = append(tl.Top, sample.TopLogprob{ID: id, Logprob: float32(float64(l[id]) - lse)})
			}
			out[i] = append(out[i], tl)
		}
	}
	return out, nil
}

func textLSE(l []float32) float64 {
	var s float64
	for _, v := range l {
		s += math.Exp(float64(v))
	}
	return math.Log(s)
}

// rawCompletion is a completion response with its nulls kept.
type rawCompletion struct {
	Choices []struct {
		Index    int     `json:"index"`
		Text     string  `json:"text"`
		Finish   *string `json:"finish_reason"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
		PromptLogprobs []map[string]vllmLogprob `json:"prompt_logprobs"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

// TestEchoLogprobs: lm-evaluation-harness's loglikelihood request (the
// prompt as token ids, echo, logprobs 1, max_tokens 1) gets the prompt's
// text before the generated token, and the prompt's tokens' log-
// probabilities before the generated one's: null for the first token,
// then each token's under the model after the tokens before it, with the
// likeliest alternative beside it; the generated token's entry is the
// one a plain completion gives. Its text offsets run on from the echoed
// text's.
func TestEchoLogprobs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	prompt := ts.encode(t, "Once upon a time")
	ids, _ := json.Marshal(prompt)
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":`+string(ids)+`,"echo":true,"logprobs":1,"max_tokens":1,"temperature":0}`)
	require.Equal(t, 200, status, string(body))
	var res rawCompletion
	require.NoError(t, json.Unmarshal(body, &res))
	require.Len(t, res.Choices, 1)
	ch := res.Choices[0]
	echoed := ts.tok.Decode(prompt, false)
	next := textNext(prompt[len(prompt)-1])
	nextText := ts.srv.tokenText(prompt[len(prompt)-1], next)
	assert.Equal(t, echoed+nextText, ch.Text)
	lp := ch.Logprobs
	require.NotNil(t, lp)
	require.Len(t, lp.Tokens, len(prompt)+1)
	require.Len(t, lp.TokenLogprobs, len(prompt)+1)
	require.Len(t, lp.TopLogprobs, len(prompt)+1)
	assert.Nil(t, lp.TokenLogprobs[0])
	assert.Nil(t, lp.TopLogprobs[0])
	for j := 1; j < len(prompt); j++ {
		l := textLogits(prompt[j-1])
		want := float64(l[prompt[j]]) - textLSE(l)
		require.NotNil(t, lp.TokenLogprobs[j])
		assert.InDelta(t, want, *lp.TokenLogprobs[j], 1e-5, "token %d", j)
		tok := ts.srv.tokenText(prompt[j-1], prompt[j])
		assert.Equal(t, tok, lp.Tokens[j])
		assert.InDelta(t, want, lp.TopLogprobs[j][tok], 1e-5)
		best := ts.srv.tokenText(prompt[j-1], textNext(prompt[j-1]))
		assert.InDelta(t, 10-textLSE(l), lp.TopLogprobs[j][best], 1e-5, "the likeliest beside the token")
		assert.LessOrEqual(t, len(lp.TopLogprobs[j]), 2)
	}
	g := len(prompt)
	assert.Equal(t, nextText, lp.Tokens[g])
	assert.InDelta(t, 10-textLSE(textLogits(prompt[g-1])), *lp.TokenLogprobs[g], 1e-4)
	assert.Equal(t, 0, lp.TextOffset[0])
	for j := 1; j <= g; j++ {
		assert.Equal(t, lp.TextOffset[j-1]+len([]rune(lp.Tokens[j-1])), lp.TextOffset[j], "one count runs over the prompt's tokens and the generated one (token %d)", j)
	}
	assert.Equal(t, len(prompt), res.Usage.PromptTokens)
	assert.Equal(t, 1, res.Usage.CompletionTokens)
}

// TestEchoOnly: max_tokens 0 with echo answers the prompts alone, text
// prompts as sent, nothing generated (finish "length", no completion
// tokens), whole or streamed, each of n choices of each prompt with its
// own prompt; echo without logprobs has none.
func TestEchoOnly(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":["Once upon a time","The dog"],"echo":true,"max_tokens":0,"n":2}`)
	require.Equal(t, 200, status, string(body))
	var res rawCompletion
	require.NoError(t, json.Unmarshal(body, &res))
	require.Len(t, res.Choices, 4)
	for i, ch := range res.Choices {
		assert.Equal(t, i, ch.Index)
		assert.Equal(t, []string{"Once upon a time", "The dog"}[i/2], ch.Text)
		assert.Equal(t, "length", *ch.Finish)
		assert.Nil(t, ch.Logprobs)
	}
	assert.Equal(t, 0, res.Usage.CompletionTokens)
	assert.Equal(t, len(ts.encode(t, "Once upon a time"))+len(ts.encode(t, "The dog")), res.Usage.PromptTokens)

	// Streamed, with the prompt's log-probabilities and the usage.
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":0,"logprobs":0,"stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, 200, status, string(body))
	chunks := sseChunks(t, body)
	require.Len(t, chunks, 2, string(body))
	require.NoError(t, json.Unmarshal(chunks[0], &res))
	require.Len(t, res.Choices, 1)
	assert.Equal(t, "Once upon a time", res.Choices[0].Text)
	assert.Equal(t, "length", *res.Choices[0].Finish)
	prompt := ts.encode(t, "Once upon a time")
	require.Len(t, res.Choices[0].Logprobs.TokenLogprobs, len(prompt))
	for j, m := range res.Choices[0].Logprobs.TopLogprobs[1:] {
		assert.Len(t, m, 1, "logprobs 0: the token alone (token %d)", j+1)
	}
	require.NoError(t, json.Unmarshal(chunks[1], &res))
	assert.Empty(t, res.Choices)
	assert.Equal(t, len(prompt), res.Usage.PromptTokens)
}

// sseChunks returns the data of each SSE event of body before [DONE].
func sseChunks(t *testing.T, body []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		out = append(out, []byte(data))
	}
	require.True(t, done, "no [DONE]: %s", body)
	return out
}

// TestEchoStreamed: a streamed echo sends each choice's prompt (and its
// tokens' log-probabilities) first, then the generated text as a plain
// stream does.
func TestEchoStreamed(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":3,"logprobs":1,"stream":true,"temperature":0}`)
	require.Equal(t, 200, status, string(body))
	chunks := sseChunks(t, body)
	require.GreaterOrEqual(t, len(chunks), 2)
	var first rawCompletion
	require.NoError(t, json.Unmarshal(chunks[0], &first))
	assert.Equal(t, "Once upon a time", first.Choices[0].Text)
	prompt := ts.encode(t, "Once upon a time")
	require.Len(t, first.Choices[0].Logprobs.Tokens, len(prompt))
	assert.Nil(t, first.Choices[0].Logprobs.TokenLogprobs[0])
	var text strings.Builder
	offsets := []int{}
	for _, c := range chunks[1:] {
		var r rawCompletion
		require.NoError(t, json.Unmarshal(c, &r))
		for _, ch := range r.Choices {
			text.WriteString(ch.Text)
			if ch.Logprobs != nil {
				offsets = append(offsets, ch.Logprobs.TextOffset...)
			}
		}
	}
	_, want, _ := ts.expect(prompt, 3)
	assert.Equal(t, want, text.String())
	require.NotEmpty(t, offsets)
	end := 0
	for _, tok := range first.Choices[0].Logprobs.Tokens {
		end += len([]rune(tok))
	}
	assert.Equal(t, end, offsets[0], "the generated tokens' offsets run on after the echoed tokens'")
}

// TestEchoKeepsStop: with echo, a generated end-of-sequence token keeps
// its log-probability entry (as vLLM's), so that a harness reading the
// last entry as the generated token's finds it; without echo it has
// none, as before.
func TestEchoKeepsStop(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for _, echo := range []bool{true, false} {
		body := fmt.Sprintf(`{"prompt":[1, %d],"echo":%v,"logprobs":1,"max_tokens":1,"temperature":0}`, textTrigger, echo)
		status, _, raw := ts.post(t, "/v1/completions", body)
		require.Equal(t, 200, status, string(raw))
		var res rawCompletion
		require.NoError(t, json.Unmarshal(raw, &res))
		lp := res.Choices[0].Logprobs
		assert.Equal(t, "stop", *res.Choices[0].Finish)
		if !echo {
			assert.Empty(t, lp.Tokens)
			continue
		}
		require.Len(t, lp.TokenLogprobs, 3)
		assert.InDelta(t, 10-textLSE(textLogits(textTrigger)), *lp.TokenLogprobs[2], 1e-4, "the end-of-sequence token's")
	}
}

// TestEchoOnlyFillsContext: with nothing to generate, a prompt may fill
// the context; one past it is refused.
func TestEchoOnlyFillsContext(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	prompt := make([]int, testContext)
	for i := range prompt {
		prompt[i] = 259 + i%200
	}
	ids, _ := json.Marshal(prompt)
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":`+string(ids)+`,"echo":true,"max_tokens":0,"logprobs":0}`)
	require.Equal(t, 200, status, string(body))
	ids, _ = json.Marshal(append(prompt, 259))
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":`+string(ids)+`,"echo":true,"max_tokens":0}`)
	require.Equal(t, 400, status, string(body))
	assert.Contains(t, string(body), "context_length_exceeded")
}

// TestEchoEntriesBounded: a request whose prompts' log-probabilities
// would be more entries than one request may ask is a 400 naming the
// field, before anything runs.
func TestEchoEntriesBounded(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	prompt := make([]int, 500)
	for i := range prompt {
		prompt[i] = 259 + i%200
	}
	ids, _ := json.Marshal([][]int{prompt, prompt, prompt, prompt})
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":`+string(ids)+`,"echo":true,"max_tokens":0,"logprobs":20,"prompt_logprobs":20,"n":16}`)
	require.Equal(t, 400, status, string(body))
	e := decodeError(t, body)
	require.NotNil(t, e.Param)
	assert.Equal(t, "echo", *e.Param)
	assert.Contains(t, e.Message, "entries")
}

// TestPromptLogprobsVLLM: vLLM's prompt_logprobs gives, beside the
// generated text, null for the first prompt token and for each other a
// map of token ids to their log-probability, rank and text: the token's
// own (its rank among the vocabulary) and the likeliest alternatives
// ranked 1, 2, ….
func TestPromptLogprobsVLLM(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","prompt_logprobs":2,"max_tokens":2}`)
	require.Equal(t, 200, status, string(body))
	var res rawCompletion
	require.NoError(t, json.Unmarshal(body, &res))
	ch := res.Choices[0]
	prompt := ts.encode(t, "Once upon a time")
	_, want, _ := ts.expect(prompt, 2)
	assert.Equal(t, want, ch.Text, "no echo: the generated text alone")
	require.Len(t, ch.PromptLogprobs, len(prompt))
	assert.Nil(t, ch.PromptLogprobs[0])
	for j := 1; j < len(prompt); j++ {
		m := ch.PromptLogprobs[j]
		l := textLogits(prompt[j-1])
		lse := textLSE(l)
		own, ok := m[strconv.Itoa(prompt[j])]
		require.True(t, ok, "token %d: %v", j, m)
		assert.InDelta(t, float64(l[prompt[j]])-lse, own.Logprob, 1e-5)
		rank := 1
		for _, v := range l {
			if v > l[prompt[j]] {
				rank++
			}
		}
		assert.Equal(t, rank, own.Rank, "token %d", j)
		assert.Equal(t, ts.srv.tokenText(prompt[j-1], prompt[j]), own.DecodedToken)
		best := textNext(prompt[j-1])
		first := m[strconv.Itoa(best)]
		assert.Equal(t, 1, first.Rank, fmt.Sprint(m))
		assert.InDelta(t, 10-lse, first.Logprob, 1e-5)
		assert.LessOrEqual(t, len(m), 3)
	}
}

// specEngine is a textEngine of one row running a script that can be fed
// several tokens a step and taken back (Speculator): the script's
// position moves with the tokens fed, so a rewind of the wrong length
// changes the answer.
type specEngine struct {
	*textEngine
	many, rewound int
}

func (e *specEngine) SpeculateRoom() int {
	if e.liveSeqs() != 1 {
		return 0
	}
	return 6
}

func (e *specEngine) DecodeMany(row int, tokens []int) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.many++
	out := make([][]float32, len(tokens))
	for i := range tokens {
		out[i] = e.scriptLogits(e.pos[row])
		e.pos[row]++
	}
	return out, nil
}

func (e *specEngine) Rewind(n int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rewound += n
	e.pos[0] -= n
	return nil
}

// TestServeSpeculates: a greedy sequence running alone on an engine that
// speculates gives the script's tokens exactly (drafts confirmed in part,
// the end-of-sequence token inside a draft), with /metrics counting the
// drafts; the same requests on an engine without speculation give the
// same text.
func TestServeSpeculates(t *testing.T) {
	loop := []int{400, 401, 402, 403, 404}
	var script []int
	for range 6 {
		script = append(script, loop...)
	}
	script = append(script, 400, 401, 405, 406) // a draft cut short, then the end
	spec := newTestServer(t, serverConfig{slots: 1, script: script, speculate: 4})
	plain := newTestServer(t, serverConfig{slots: 1, script: script})
	var texts []string
	for _, ts := range []*testServer{spec, plain} {
		status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":100,"temperature":0}`)
		require.Equal(t, 200, status, string(body))
		var res rawCompletion
		require.NoError(t, json.Unmarshal(body, &res))
		assert.Equal(t, "stop", *res.Choices[0].Finish)
		assert.Equal(t, strings.TrimSpace(ts.tok.Decode(script, false)), strings.TrimSpace(res.Choices[0].Text))
		assert.Equal(t, len(script)+1, res.Usage.CompletionTokens, "the script and its end")
		texts = append(texts, res.Choices[0].Text)
	}
	assert.Equal(t, texts[1], texts[0])
	e := spec.sched.sl.e.(*specEngine)
	if e.many == 0 || e.rewound == 0 {
		t.Errorf("%d speculative steps, %d tokens taken back", e.many, e.rewound)
	}
	var b strings.Builder
	_, err := spec.metrics.WriteTo(&b)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^tputool_draft_tokens_accepted_total [1-9]`, b.String())
}

// TestChatPromptLogprobs: vLLM's prompt_logprobs on a chat request scores
// the rendered prompt's tokens (null for the first), in the response's
// prompt_logprobs; past 20, or streamed, it is a 400.
func TestChatPromptLogprobs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, body := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi there"}],"prompt_logprobs":1,"max_tokens":2}`)
	require.Equal(t, 200, status, string(body))
	var res struct {
		PromptLogprobs []map[string]vllmLogprob `json:"prompt_logprobs"`
	}
	require.NoError(t, json.Unmarshal(body, &res))
	prompt, err := ts.tok.Encode("<s>user: Hi there\nassistant:", false)
	require.NoError(t, err)
	require.Len(t, res.PromptLogprobs, len(prompt))
	assert.Nil(t, res.PromptLogprobs[0])
	for j := 1; j < len(prompt); j++ {
		l := textLogits(prompt[j-1])
		own := res.PromptLogprobs[j][strconv.Itoa(prompt[j])]
		assert.InDelta(t, float64(l[prompt[j]])-textLSE(l), own.Logprob, 1e-5, "token %d", j)
		assert.LessOrEqual(t, len(res.PromptLogprobs[j]), 2)
	}
	for _, bad := range []string{`"prompt_logprobs":21`, `"prompt_logprobs":1,"stream":true`} {
		status, _, body = ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],`+bad+`}`)
		assert.Equal(t, 400, status, string(body))
		assert.Equal(t, "prompt_logprobs", *decodeError(t, body).Param)
	}
}

// fixedDraft is a draft model that proposes token tok with certainty
// after anything, or fails every call when fail is set.
type fixedDraft struct {
	tok, vocab int
	fail       bool
	fed        int
	calls      int
}

func (f *fixedDraft) logits() [][]float32 {
	l := make([]float32, f.vocab)
	l[f.tok] = 50
	return [][]float32{l}
}

func (f *fixedDraft) step(n int) ([][]float32, error) {
	f.calls++
	if f.fail {
		return nil, errors.New("draft model out of memory")
	}
	f.fed += n
	return f.logits(), nil
}

func (f *fixedDraft) Prefill(p [][]int, _ int) ([][]float32, error) {
	f.fed = 0
	return f.step(len(p[0]))
}
func (f *fixedDraft) Decode(next []int) ([][]float32, error) { return f.step(1) }
func (f *fixedDraft) DecodeMany(t []int) ([][]float32, error) {
	rows, err := f.step(len(t))
	if err != nil {
		return nil, err
	}
	return slices.Repeat(rows, len(t)), nil
}
func (f *fixedDraft) Rewindable() bool   { return true }
func (f *fixedDraft) Speculates() bool   { return true }
func (f *fixedDraft) Room() int          { return 1 << 20 }
func (f *fixedDraft) Rewind(n int) error { f.fed -= n; return nil }
func (f *fixedDraft) Begin(p [][]int, _ int) (int, error) {
	f.fed = 0
	return len(p[0]), nil
}
func (f *fixedDraft) Extend(t [][]int, _ int) (int, error)    { return len(t[0]), nil }
func (f *fixedDraft) PrefillChunk(n int) ([][]float32, error) { return f.step(n) }

// TestServeDraftModelProposes: a sequence running alone takes its drafts
// from Config.DraftModel: a draft model proposing a wrong token every
// step leaves the script's text as it is (every draft refused), and one
// that fails leaves it too, the failure counted, the step decoding one
// token and the next ones sitting out.
func TestServeDraftModelProposes(t *testing.T) {
	script := []int{400, 401, 402, 403, 404, 400, 401, 405}
	for _, fail := range []bool{false, true} {
		d := &fixedDraft{tok: 406, vocab: 600, fail: fail}
		dm, err := generate.NewDraftModel(d, 600, 1<<20)
		require.NoError(t, err)
		ts := newTestServer(t, serverConfig{slots: 1, script: script, speculate: 4, draft: dm})
		status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":100,"temperature":0}`)
		require.Equal(t, 200, status, string(body))
		var res rawCompletion
		require.NoError(t, json.Unmarshal(body, &res))
		assert.Equal(t, strings.TrimSpace(ts.tok.Decode(script, false)), strings.TrimSpace(res.Choices[0].Text), "fail %v", fail)
		assert.Positive(t, d.calls)
		var b strings.Builder
		_, err = ts.metrics.WriteTo(&b)
		require.NoError(t, err)
		if fail {
			// After a failure the draft model sits out 16 steps.
			assert.Equal(t, 1, d.calls, "a failing draft model retried at every step")
			assert.Regexp(t, `(?m)^tputool_draft_errors_total 1$`, b.String())
			assert.Regexp(t, `(?m)^tputool_draft_tokens_total 0$`, b.String())
		} else {
			assert.Regexp(t, `(?m)^tputool_draft_tokens_total [1-9]`, b.String())
			assert.Regexp(t, `(?m)^tputool_draft_tokens_accepted_total 0$`, b.String())
			assert.Regexp(t, `(?m)^tputool_draft_errors_total 0$`, b.String())
		}
	}
}
