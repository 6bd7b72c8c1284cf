package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// FuzzRequestPlan: any body decodes and plans (no generation) into either
// sequences within the bounds or a 4xx; never a panic or a 5xx.
func FuzzRequestPlan(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"Once upon a time","max_tokens":5,"n":2,"logprobs":3,"stop":["a","b"]}`,
		`{"prompt":[[1,2,3],[4]],"max_tokens":500}`,
		`{"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}],"top_logprobs":2,"logprobs":true}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}],"max_completion_tokens":3}`,
		`{"temperature":0.5,"top_p":0.9,"top_k":-1,"min_p":0.1,"seed":-3,"repetition_penalty":1.1,"ignore_eos":true}`,
		`{"n":17}`, `{"max_tokens":0}`, `null`, `{"tools":[{}]}`,
		`{"prompt":[1,2,3],"echo":true,"max_tokens":0,"logprobs":1,"prompt_logprobs":2,"n":3}`,
		`{"prompt":["a","b"],"echo":true,"logprobs":20,"prompt_logprobs":20,"stream":true}`,
	} {
		f.Add(seed)
	}
	tok := loadTestTokenizer(f)
	tmpl, err := chat.New("test", testTemplate, chat.Options{BOSToken: "<s>"})
	if err != nil {
		f.Fatal(err)
	}
	s := &Server{o: ServerOptions{ModelName: testModel, Tokenizer: tok, Template: tmpl, MaxContext: testContext,
		Resolve: func(o generate.Overrides) (generate.Options, error) { return generate.Resolve(nil, []int{textEOS}, o) }}}
	f.Fuzz(func(t *testing.T, body string) {
		for _, isChat := range []bool{false, true} {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			var p *plan
			var e *echoPlan
			var err error
			if isChat {
				var req chatRequest
				if err = decodeBody(r, &req); err == nil {
					p, err = s.chatPlan(context.Background(), &req)
				}
			} else {
				var req completionRequest
				if err = decodeBody(r, &req); err == nil {
					p, e, err = s.completionPlan(&req)
				}
			}
			if err != nil {
				var e *apiError
				if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
					t.Fatalf("chat=%v %q: error %v is not a 4xx", isChat, body, err)
				}
				continue
			}
			if len(p.reqs) == 0 || len(p.reqs) > maxSequences {
				t.Fatalf("chat=%v %q: %d sequences", isChat, body, len(p.reqs))
			}
			echoOnly := !isChat && e != nil && e.only
			for _, rq := range p.reqs {
				if echoOnly && len(rq.Prompt) > 0 && len(rq.Prompt) <= testContext && rq.Gen.MaxNewTokens == 0 && rq.Logprobs <= maxLogprobs {
					continue // nothing to generate
				}
				if len(rq.Prompt) == 0 || rq.Gen.MaxNewTokens <= 0 || len(rq.Prompt)+rq.Gen.MaxNewTokens > testContext || rq.Logprobs > maxLogprobs {
					t.Fatalf("chat=%v %q: request out of bounds: %d prompt tokens, %d new, logprobs %d",
						isChat, body, len(rq.Prompt), rq.Gen.MaxNewTokens, rq.Logprobs)
				}
			}
		}
	})
}

// sseData is the data of each event of an SSE body, in order.
func sseData(body []byte) []string {
	var out []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, data)
		}
	}
	return out
}

// streamChunks posts a streamed request and returns its chunks as JSON
// objects, requiring the stream to end with [DONE].
func streamChunks(t *testing.T, ts *testServer, path, body string) []map[string]json.RawMessage {
	t.Helper()
	status, _, resp := ts.post(t, path, body)
	require.Equal(t, http.StatusOK, status, string(resp))
	data := sseData(resp)
	require.NotEmpty(t, data)
	require.Equal(t, "[DONE]", data[len(data)-1], string(resp))
	var out []map[string]json.RawMessage
	for _, d := range data[:len(data)-1] {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(d), &m), d)
		out = append(out, m)
	}
	return out
}

// TestStreamUsage: without stream_options chunks have no usage field;
// with include_usage every chunk but the last has "usage": null and the
// last the totals (OpenAI's); with continuous_usage_stats too (vLLM's)
// every chunk has the usage so far. Both endpoints.
func TestStreamUsage(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	chatBody := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"n":2,"stream":true%s}`
	cmplBody := `{"prompt":"Once upon a time","max_tokens":6,"stream":true%s}`
	for _, ep := range []struct{ path, body string }{{"/v1/chat/completions", chatBody}, {"/v1/completions", cmplBody}} {
		plain := streamChunks(t, ts, ep.path, fmt.Sprintf(ep.body, ""))
		for _, ch := range plain {
			assert.NotContains(t, ch, "usage", ep.path)
		}

		withUsage := streamChunks(t, ts, ep.path, fmt.Sprintf(ep.body, `,"stream_options":{"include_usage":true}`))
		require.Greater(t, len(withUsage), 2)
		for _, ch := range withUsage[:len(withUsage)-1] {
			assert.Equal(t, "null", string(ch["usage"]), "%s: a chunk before the last", ep.path)
		}
		var final usage
		require.NoError(t, json.Unmarshal(withUsage[len(withUsage)-1]["usage"], &final))
		require.Greater(t, final.CompletionTokens, 0)

		continuous := streamChunks(t, ts, ep.path, fmt.Sprintf(ep.body, `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`))
		prev := -1
		for i, ch := range continuous {
			var u usage
			require.NoError(t, json.Unmarshal(ch["usage"], &u), "%s chunk %d: %s", ep.path, i, ch["usage"])
			assert.Equal(t, final.PromptTokens, u.PromptTokens)
			assert.Equal(t, u.PromptTokens+u.CompletionTokens, u.TotalTokens)
			assert.GreaterOrEqual(t, u.CompletionTokens, prev, "the count grows")
			prev = u.CompletionTokens
		}
		assert.Equal(t, final.CompletionTokens, prev, "%s: the last chunk has the totals", ep.path)
		if ep.path == "/v1/chat/completions" {
			var first usage
			require.NoError(t, json.Unmarshal(continuous[0]["usage"], &first))
			assert.Equal(t, 0, first.CompletionTokens, "the role chunk: nothing generated yet")
		}
	}
}

// TestStreamErrorEndsWithDone: an engine failure mid-stream is an error
// event, followed by [DONE] as vLLM sends it.
func TestStreamErrorEndsWithDone(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ts.engine.mu.Lock()
	ts.engine.fail = true
	ts.engine.mu.Unlock()
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}`},
		{"/v1/completions", `{"prompt":"Once","max_tokens":4,"stream":true}`},
	} {
		status, _, body := ts.post(t, c.path, c.body)
		require.Equal(t, http.StatusOK, status, string(body))
		data := sseData(body)
		require.GreaterOrEqual(t, len(data), 2, string(body))
		assert.Contains(t, data[len(data)-2], `"error"`, c.path)
		assert.Contains(t, data[len(data)-2], "device lost", c.path)
		assert.Equal(t, "[DONE]", data[len(data)-1], c.path)
	}
}

// A request without a limit generates up to generation_config.json's
// max_new_tokens when the model has one (bounded by the context), as
// vLLM's default; a request's limit wins over it.
func TestConfigMaxNewTokensDefault(t *testing.T) {
	five := 5
	ts := newTestServer(t, serverConfig{context: 64, gen: &config.Generation{MaxNewTokens: &five}})
	for body, want := range map[string]int{
		`{"messages":[{"role":"user","content":"Hi"}],"ignore_eos":true}`:                5,
		`{"messages":[{"role":"user","content":"Hi"}],"ignore_eos":true,"max_tokens":9}`: 9,
	} {
		status, _, b := ts.post(t, "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, status, string(b))
		var chr chatResponse
		require.NoError(t, json.Unmarshal(b, &chr))
		assert.Equal(t, want, chr.Usage.CompletionTokens, body)
	}
}

// TestCompletionDefaultMaxTokens: /v1/completions without max_tokens
// generates 16 tokens (OpenAI's and vLLM's default), fewer where the
// context leaves less room; chat and ollama's /api/generate still run to
// the end of the context.
func TestCompletionDefaultMaxTokens(t *testing.T) {
	ts := newTestServer(t, serverConfig{context: 64})
	prompt := []int{1, 259}
	full, _, _ := ts.expect(prompt, 62)
	require.Greater(t, len(full), defaultCompletionTokens, "the fake model's answer is longer than the default")
	ids, text, _ := ts.expect(prompt, defaultCompletionTokens)
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":[1,259]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var cr completionResponse
	require.NoError(t, json.Unmarshal(body, &cr))
	assert.Equal(t, len(ids), cr.Usage.CompletionTokens)
	assert.Equal(t, text, cr.Choices[0].Text)
	assert.Equal(t, "length", *cr.Choices[0].FinishReason)

	// 60 prompt tokens of 64: the 4 left.
	long := strings.TrimSuffix(strings.Repeat("259,", 60), ",")
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":[`+long+`],"ignore_eos":true}`)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &cr))
	assert.Equal(t, 4, cr.Usage.CompletionTokens)

	// Chat: the rest of the context.
	chatPrompt := ts.chatPrompt(t, "Hi")
	chatIDs, _, _ := ts.expect(chatPrompt, 64-len(chatPrompt))
	require.Greater(t, len(chatIDs), defaultCompletionTokens)
	status, _, body = ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var chr chatResponse
	require.NoError(t, json.Unmarshal(body, &chr))
	assert.Equal(t, len(chatIDs), chr.Usage.CompletionTokens)

	// ollama: no num_predict is the rest of the context too.
	status, _, body = ts.post(t, "/api/generate", `{"prompt":"Hi","raw":true,"stream":false}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var or struct {
		EvalCount int `json:"eval_count"`
	}
	require.NoError(t, json.Unmarshal(body, &or))
	assert.Greater(t, or.EvalCount, defaultCompletionTokens)
}

// byteLevelServer serves qwen2-tiny's byte-level BPE tokenizer, the
// model's every answer being script.
func byteLevelServer(t *testing.T, script []int) *testServer {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join("..", "..", "loader", "tokenizer", "testdata", "tokenizers", "qwen2-tiny", "tokenizer.json"))
	require.NoError(t, err)
	return newTestServer(t, serverConfig{tok: tok, script: script})
}

// Ids of qwen2-tiny's byte-level vocabulary.
const (
	qwenC3    = 127 // "Ã": the byte 0xC3, the first of "é"
	qwenA9    = 102 // "©": the byte 0xA9, the last of "é"
	qwenRhoHi = 267 // "Ïĵ": the bytes CF 93, "ϓ", one character
	qwenA     = 64  // "a"
)

// TestChatLogprobBytes: a chat token's bytes are its raw bytes: "é"
// split over two byte-level tokens comes back as 0xC3 and 0xA9, whose
// concatenation is the text (each token's text alone is U+FFFD). Entries
// of top_logprobs have no top_logprobs of their own.
func TestChatLogprobBytes(t *testing.T) {
	ts := byteLevelServer(t, []int{qwenA, qwenC3, qwenA9})
	status, _, body := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":2}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Logprobs struct {
				Content []map[string]json.RawMessage `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	content := resp.Choices[0].Logprobs.Content
	require.Len(t, content, 3)
	var all []byte
	for i, lp := range content {
		var b []int
		require.NoError(t, json.Unmarshal(lp["bytes"], &b))
		for _, x := range b {
			all = append(all, byte(x))
		}
		var top []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(lp["top_logprobs"], &top))
		require.Len(t, top, 2)
		for _, e := range top {
			assert.Equal(t, []string{"bytes", "logprob", "token"}, slices.Sorted(mapsKeys(e)), "token %d: a top_logprobs entry is token, logprob, bytes", i)
		}
	}
	assert.Equal(t, "aé", string(all))
	assert.Equal(t, "aé", resp.Choices[0].Message.Content)
	var second []int
	require.NoError(t, json.Unmarshal(content[1]["bytes"], &second))
	assert.Equal(t, []int{0xc3}, second)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestCompletionTextOffsetCharacters: text_offset counts characters
// (code points), as OpenAI's and vLLM's: after "ϓ" (two UTF-8 bytes, one
// token) the next token starts at 1.
func TestCompletionTextOffsetCharacters(t *testing.T) {
	ts := byteLevelServer(t, []int{qwenRhoHi, qwenA, qwenA})
	resp, err := ts.client("").Completions.New(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{qwenA}}, MaxTokens: openai.Int(3), Logprobs: openai.Int(0)})
	require.NoError(t, err)
	assert.Equal(t, "ϓaa", resp.Choices[0].Text)
	assert.Equal(t, []int64{0, 1, 2}, resp.Choices[0].Logprobs.TextOffset)
}

// TestPenaltiesAndLogitBias: presence_penalty, frequency_penalty and
// logit_bias change what the fake model's greedy answer is, on both
// endpoints: the model always prefers A (logit 10); B biased +9 comes
// second. Unpenalized, A every time; with presence 2, A is 8 once
// generated (B, then A forever: B is 7 once generated); with frequency
// 2, A and B alternate; A in the prompt is not penalized.
func TestPenaltiesAndLogitBias(t *testing.T) {
	const a, b = 400, 401
	ts := newTestServer(t, serverConfig{script: []int{a, a, a, a, a, a}})
	prompt := []int{1, a}
	text := func(ids ...int) string {
		all := append(slices.Clone(prompt), ids...)
		return strings.TrimPrefix(ts.tok.Decode(all, true), ts.tok.Decode(prompt, true))
	}
	for _, c := range []struct {
		name, params string
		want         []int
	}{
		{"none", ``, []int{a, a, a, a, a, a}},
		{"bias", `"logit_bias":{"401":9}`, []int{a, a, a, a, a, a}},
		{"bias above", `"logit_bias":{"401":10.5}`, []int{b, b, b, b, b, b}},
		{"presence", `"logit_bias":{"401":9},"presence_penalty":2`, []int{a, b, a, a, a, a}},
		{"frequency", `"logit_bias":{"401":9},"frequency_penalty":2`, []int{a, b, a, b, a, b}},
		{"no rival", `"presence_penalty":2`, []int{a, a, a, a, a, a}},
	} {
		extra := ""
		if c.params != "" {
			extra = "," + c.params
		}
		status, _, body := ts.post(t, "/v1/completions", `{"prompt":[1,400],"max_tokens":6,"temperature":0`+extra+`}`)
		require.Equal(t, http.StatusOK, status, string(body))
		var cr completionResponse
		require.NoError(t, json.Unmarshal(body, &cr))
		assert.Equal(t, text(c.want...), cr.Choices[0].Text, "completions, %s", c.name)

		status, _, body = ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0`+extra+`}`)
		require.Equal(t, http.StatusOK, status, string(body))
		var chr chatResponse
		require.NoError(t, json.Unmarshal(body, &chr))
		chatPrompt := ts.chatPrompt(t, "Hi")
		all := append(slices.Clone(chatPrompt), c.want...)
		want := strings.TrimPrefix(ts.tok.Decode(all, true), ts.tok.Decode(chatPrompt, true))
		assert.Equal(t, want, *chr.Choices[0].Message.Content, "chat, %s", c.name)
	}
}
