package serve

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/loader/tokenizer/chat"
	"github.com/tputool/tputool/pipeline/generate"
)

// The server is tested over a real tokenizer (stories260K's, 512 ids)
// and textEngine, a fake model whose next token is a fixed function of
// the last one (textNext), so every answer can be predicted.

const (
	textVocab   = 512
	textEOS     = 2
	textTrigger = 300 // the token after it is EOS
	testModel   = "stories-test"
	testKey     = "sk-test"
	testContext = 512
)

// textNext is the fake model's greedy choice after token t: a word piece
// (ids 259..510, so no byte-fallback token splits a character), or EOS
// after textTrigger.
func textNext(t int) int {
	if t == textTrigger {
		return textEOS
	}
	return 259 + (t*31+7)%252
}

// textLogits are the logits after token t: textNext(t) first, a runner-up
// second (for top logprobs).
func textLogits(t int) []float32 {
	l := make([]float32, textVocab)
	next := textNext(t)
	l[next] = 10
	l[259+(next-259+1)%252] = 5
	return l
}

// textEngine is an Engine running textNext. Every prefill piece (4
// tokens) and decode step sleeps delay; it checks the scheduler's use of
// slots and records the largest batch decoded.
type textEngine struct {
	t     *testing.T
	slots int

	noPrefixes
	fixedRows
	sumEmbed

	mu       sync.Mutex
	delay    time.Duration
	live     map[int]bool // rows holding a sequence
	maxBatch int
	fail     bool // Decode fails
	// script, when set, is every sequence's answer instead of textNext's
	// chain: token k of the answer is script[k], then EOS; pos holds
	// each live row's next index.
	script []int
	pos    map[int]int
	last   []int // the last prompt prefilled
}

// scriptLogits are the logits that pick token k of the script (EOS past
// its end).
func (e *textEngine) scriptLogits(k int) []float32 {
	n := textVocab // or one more, for mistralTokenizer's extra token
	if len(e.script) > 0 {
		n = max(n, slices.Max(e.script)+1)
	}
	l := make([]float32, n)
	if k < len(e.script) {
		l[e.script[k]] = 10
	} else {
		l[textEOS] = 10
	}
	return l
}

func newTextEngine(t *testing.T, slots int) *textEngine {
	return &textEngine{t: t, slots: slots, live: map[int]bool{}, fixedRows: fixedRows{t, slots}}
}

func (e *textEngine) setDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.delay = d
}

func (e *textEngine) sleep() {
	e.mu.Lock()
	d := e.delay
	e.mu.Unlock()
	time.Sleep(d)
}

func (e *textEngine) Slots() int { return e.slots }

// MaxPrefill implements Engine: up to 3 prompts prefill together.
func (e *textEngine) MaxPrefill() int { return 3 }

// PrefillGroup implements Engine: any prompts prefill together.
func (e *textEngine) PrefillGroup([]int) (int, int) { return 0, e.MaxPrefill() }

type textPrefill struct {
	e       *textEngine
	prompts [][]int
	done    int
}

func (e *textEngine) StartPrefill(prompts [][]int) (Prefill, error) {
	if len(prompts) > e.MaxPrefill() {
		e.t.Errorf("prefill of %d prompts, above MaxPrefill", len(prompts))
	}
	e.mu.Lock()
	e.last = prompts[len(prompts)-1]
	e.mu.Unlock()
	return &textPrefill{e: e, prompts: prompts}, nil
}

func (p *textPrefill) Step() ([][]float32, bool, error) {
	p.e.sleep()
	longest := 0
	for _, q := range p.prompts {
		longest = max(longest, len(q))
	}
	p.done = min(p.done+4, longest)
	if p.done < longest {
		return nil, false, nil
	}
	out := make([][]float32, len(p.prompts))
	for i, q := range p.prompts {
		out[i] = textLogits(q[len(q)-1])
		if p.e.script != nil {
			out[i] = p.e.scriptLogits(0)
		}
	}
	return out, true, nil
}

func (p *textPrefill) Close() {}

func (e *textEngine) Insert(p Prefill, i, row int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if row < 0 || row >= e.slots || e.live[row] {
		e.t.Errorf("insert into row %d of %d, live: %v", row, e.slots, e.live[row])
	}
	e.live[row] = true
	if e.script != nil {
		if e.pos == nil {
			e.pos = map[int]int{}
		}
		e.pos[row] = 1
	}
	return nil
}

func (e *textEngine) Decode(rows, tokens []int) ([][]float32, error) {
	e.sleep()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail {
		return nil, errors.New("device lost")
	}
	e.maxBatch = max(e.maxBatch, len(rows))
	out := make([][]float32, len(rows))
	for i, row := range rows {
		if !e.live[row] {
			e.t.Errorf("decode of free row %d", row)
		}
		out[i] = textLogits(tokens[i])
		if e.script != nil {
			out[i] = e.scriptLogits(e.pos[row])
			e.pos[row]++
		}
	}
	return out, nil
}

func (e *textEngine) Free(row int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, row)
}

func (e *textEngine) liveSeqs() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.live)
}

// testTemplate is a minimal chat template.
const testTemplate = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

var (
	tokOnce sync.Once
	testTok *tokenizer.Tokenizer
	tokErr  error
)

// loadTestTokenizer loads stories260K's tokenizer once.
func loadTestTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tokOnce.Do(func() {
		testTok, tokErr = tokenizer.LoadDir(filepath.Join("..", "..", "testdata", "stories260K-hf"))
	})
	require.NoError(t, tokErr)
	return testTok
}

// testServer is a Server over a textEngine, served on 127.0.0.1.
type testServer struct {
	*httptest.Server
	srv     *Server
	sched   *Scheduler
	engine  *textEngine
	tok     *tokenizer.Tokenizer
	metrics *Metrics
	log     *syncBuffer
}

type serverConfig struct {
	slots    int
	maxQueue int
	apiKey   string
	noChat   bool
	// script makes every answer these tokens (textEngine.script);
	// reasoning is ServerOptions.Reasoning; template replaces testTemplate.
	script    []int
	reasoning *Reasoning
	template  string
	context   int  // MaxContext (testContext when 0)
	harmony   bool // ServerOptions.Harmony
	pprof     bool // ServerOptions.Pprof
	// embeddingsOnly is ServerOptions.EmbeddingsOnly.
	embeddingsOnly bool
	// embedPrompt is ServerOptions.EmbedPrompt.
	embedPrompt string
	// tok replaces the test tokenizer (mistralTokenizer's has one token
	// more; the engine's logits cover it).
	tok *tokenizer.Tokenizer
	// gen is the model's generation_config.json (none when nil).
	gen *config.Generation
	// speculate is Config.Speculate, over a specEngine (echo's tests);
	// draft is Config.DraftModel.
	speculate int
	draft     *generate.DraftModel
}

func newTestServer(t *testing.T, c serverConfig) *testServer {
	t.Helper()
	if c.slots == 0 {
		c.slots = 4
	}
	tok := c.tok
	if tok == nil {
		tok = loadTestTokenizer(t)
	}
	var tmpl *chat.Template
	if !c.noChat {
		var err error
		src := testTemplate
		if c.template != "" {
			src = c.template
		}
		tmpl, err = chat.New("test", src, chat.Options{BOSToken: "<s>", EOSToken: "</s>"})
		require.NoError(t, err)
	}
	e := newTextEngine(t, c.slots)
	e.script = c.script
	m := NewMetrics(func() (int, int) { return 3, 1 })
	var engine Engine = e
	if c.speculate > 0 {
		engine = &specEngine{textEngine: e}
	}
	sched := New(engine, Config{MaxQueue: c.maxQueue, Observer: m, Speculate: c.speculate, DraftModel: c.draft})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(ctx); close(done) }()
	log := &syncBuffer{}
	srv := NewServer(sched, ServerOptions{
		ModelName: testModel, Tokenizer: tok, Template: tmpl,
		Resolve: func(o generate.Overrides) (generate.Options, error) {
			return generate.Resolve(c.gen, []int{textEOS}, o)
		},
		MaxContext: cmp.Or(c.context, testContext), APIKey: c.apiKey, AccessLog: log, Metrics: m, Reasoning: c.reasoning, Harmony: c.harmony,
		EmbeddingSize: 4, // sumEmbed's
		Pprof:         c.pprof,
		EmbedPrompt:   c.embedPrompt, EmbeddingsOnly: c.embeddingsOnly,
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
	})
	return &testServer{Server: hs, srv: srv, sched: sched, engine: e, tok: tok, metrics: m, log: log}
}

// client is the official OpenAI client pointed at the server, without
// retries.
func (ts *testServer) client(key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

// getWithKey sends a GET with the API key as a Bearer token (none when
// key is empty) and returns the status and body.
func (ts *testServer) getWithKey(t *testing.T, path, key string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// post sends a JSON body and returns the status and body.
func (ts *testServer) post(t *testing.T, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, data
}

// waitIdle waits until the scheduler and the engine hold nothing.
func (ts *testServer) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		w, a := ts.sched.Load()
		if w == 0 && a == 0 && ts.engine.liveSeqs() == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	w, a := ts.sched.Load()
	t.Fatalf("the scheduler is not idle: %d waiting, %d active, %d engine sequences", w, a, ts.engine.liveSeqs())
}

// expect is the fake model's greedy answer to prompt: its tokens (EOS
// included), text and finish reason.
func (ts *testServer) expect(prompt []int, maxTokens int) (ids []int, text, finish string) {
	last := prompt[len(prompt)-1]
	finish = "length"
	for len(ids) < maxTokens {
		last = textNext(last)
		ids = append(ids, last)
		if last == textEOS {
			finish = "stop"
			break
		}
	}
	all := append(slices.Clone(prompt), ids...)
	text = strings.TrimPrefix(ts.tok.Decode(all, true), ts.tok.Decode(prompt, true))
	return ids, text, finish
}

// chatPrompt is the token ids the server makes of one user message.
func (ts *testServer) chatPrompt(t *testing.T, user string) []int {
	t.Helper()
	ids, err := ts.tok.Encode("<s>user: "+user+"\nassistant:", false)
	require.NoError(t, err)
	return ids
}

// lastPrompt is the text of the last prompt the engine prefilled.
func (ts *testServer) lastPrompt(t *testing.T) string {
	t.Helper()
	ts.engine.mu.Lock()
	ids := ts.engine.last
	ts.engine.mu.Unlock()
	return ts.tok.Decode(ids, false)
}

func (ts *testServer) encode(t *testing.T, text string) []int {
	t.Helper()
	ids, err := ts.tok.Encode(text, true)
	require.NoError(t, err)
	return ids
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ---- OpenAI client tests

func TestChatCompletion(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey})
	c := ts.client(testKey)
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")},
		MaxTokens: openai.Int(12),
	})
	require.NoError(t, err)
	prompt := ts.chatPrompt(t, "Tell me a story")
	ids, text, finish := ts.expect(prompt, 12)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, text, resp.Choices[0].Message.Content)
	assert.Equal(t, "assistant", string(resp.Choices[0].Message.Role))
	assert.Equal(t, finish, resp.Choices[0].FinishReason)
	assert.Equal(t, testModel, resp.Model)
	assert.Equal(t, "chat.completion", string(resp.Object))
	assert.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"), resp.ID)
	assert.EqualValues(t, len(prompt), resp.Usage.PromptTokens)
	assert.EqualValues(t, len(ids), resp.Usage.CompletionTokens)
	assert.EqualValues(t, len(prompt)+len(ids), resp.Usage.TotalTokens)
	assert.InDelta(t, time.Now().Unix(), resp.Created, 5)
}

func TestChatCompletionStreaming(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         testModel,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hi")},
		MaxTokens:     openai.Int(20),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var chunks int
	var finish string
	var usage openai.CompletionUsage
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		if chunks == 0 {
			require.Len(t, ch.Choices, 1)
			assert.Equal(t, "assistant", ch.Choices[0].Delta.Role, "the first chunk carries the role")
		}
		chunks++
		assert.Equal(t, "chat.completion.chunk", string(ch.Object))
		for _, cc := range ch.Choices {
			text.WriteString(cc.Delta.Content)
			if cc.FinishReason != "" {
				finish = cc.FinishReason
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
			assert.Empty(t, ch.Choices, "the usage chunk has no choices")
		}
	}
	require.NoError(t, stream.Err())
	ids, err := ts.tok.Encode("<s>system: Be brief.\nuser: Hi\nassistant:", false)
	require.NoError(t, err)
	gen, want, wantFinish := ts.expect(ids, 20)
	assert.Equal(t, want, text.String())
	assert.Equal(t, want, acc.Choices[0].Message.Content)
	assert.Equal(t, wantFinish, finish)
	assert.Greater(t, chunks, 3, "the text comes in pieces")
	assert.EqualValues(t, len(ids), usage.PromptTokens)
	assert.EqualValues(t, len(gen), usage.CompletionTokens)
}

func TestCompletion(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	ctx := context.Background()
	prompt := ts.encode(t, "Once upon a time")
	_, want, finish := ts.expect(prompt, 16)

	for name, p := range map[string]openai.CompletionNewParamsPromptUnion{
		"string":       {OfString: openai.String("Once upon a time")},
		"one string":   {OfArrayOfStrings: []string{"Once upon a time"}},
		"token ids":    {OfArrayOfTokens: toInt64(prompt)},
		"token arrays": {OfArrayOfTokenArrays: [][]int64{toInt64(prompt)}},
	} {
		resp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel), Prompt: p, MaxTokens: openai.Int(16)})
		require.NoError(t, err, name)
		require.Len(t, resp.Choices, 1, name)
		assert.Equal(t, want, resp.Choices[0].Text, name)
		assert.Equal(t, finish, string(resp.Choices[0].FinishReason), name)
		assert.Equal(t, "text_completion", string(resp.Object), name)
		assert.True(t, strings.HasPrefix(resp.ID, "cmpl-"), resp.ID)
		assert.EqualValues(t, len(prompt), resp.Usage.PromptTokens, name)
		assert.EqualValues(t, 16, resp.Usage.CompletionTokens, name)
	}
}

func TestCompletionStreaming(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:         openai.CompletionNewParamsModel(testModel),
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens:     openai.Int(24),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var finish string
	var usage openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		for _, cc := range ch.Choices {
			text.WriteString(cc.Text)
			if cc.FinishReason != "" {
				finish = string(cc.FinishReason)
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	require.NoError(t, stream.Err())
	prompt := ts.encode(t, "Once upon a time")
	_, want, wantFinish := ts.expect(prompt, 24)
	assert.Equal(t, want, text.String())
	assert.Equal(t, wantFinish, finish)
	assert.EqualValues(t, 24, usage.CompletionTokens)
}

// TestEOSAndStop: the fake model's EOS ends a sequence with "stop" (its
// text not emitted), and a stop string cuts the text before it.
func TestEOSAndStop(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	ctx := context.Background()
	// A prompt ending in textTrigger: EOS comes first.
	resp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 259, textTrigger}}, MaxTokens: openai.Int(8)})
	require.NoError(t, err)
	assert.Equal(t, "", resp.Choices[0].Text)
	assert.Equal(t, "stop", string(resp.Choices[0].FinishReason))
	assert.EqualValues(t, 1, resp.Usage.CompletionTokens)

	// ignore_eos generates past it.
	status, _, body := ts.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":[1,259,%d],"max_tokens":3,"ignore_eos":true}`, testModel, textTrigger))
	require.Equal(t, http.StatusOK, status, string(body))
	var cr completionResponse
	require.NoError(t, json.Unmarshal(body, &cr))
	assert.Equal(t, "length", *cr.Choices[0].FinishReason)
	assert.Equal(t, 3, cr.Usage.CompletionTokens)

	prompt := ts.encode(t, "Once upon a time")
	_, full, _ := ts.expect(prompt, 30)
	stop := strings.TrimSpace(full[len(full)/2:])[:3]
	resp, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(30), Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}})
	require.NoError(t, err)
	assert.Equal(t, full[:strings.Index(full, stop)], resp.Choices[0].Text)
	assert.Equal(t, "stop", string(resp.Choices[0].FinishReason))
}

// TestChoicesAndLogprobs: n choices of a greedy request are equal and
// indexed; log-probabilities have OpenAI's shapes and the fake model's
// values.
func TestChoicesAndLogprobs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	ctx := context.Background()
	// The log-probability of the chosen token and of the runner-up.
	z := math.Log(math.Exp(10) + math.Exp(5) + float64(textVocab-2))
	best, second := 10-z, 5-z

	resp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		N:      openai.Int(3), MaxTokens: openai.Int(5), Logprobs: openai.Int(2), Temperature: openai.Float(0)})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 3)
	prompt := ts.encode(t, "Once upon a time")
	_, want, _ := ts.expect(prompt, 5)
	for i, ch := range resp.Choices {
		assert.EqualValues(t, i, ch.Index)
		assert.Equal(t, want, ch.Text)
		lp := ch.Logprobs
		require.Len(t, lp.Tokens, 5)
		assert.Equal(t, want, strings.Join(lp.Tokens, ""))
		assert.InDelta(t, best, lp.TokenLogprobs[0], 1e-4)
		require.Len(t, lp.TopLogprobs, 5)
		assert.Len(t, lp.TopLogprobs[0], 2)
		assert.EqualValues(t, 0, lp.TextOffset[0])
		assert.EqualValues(t, len(lp.Tokens[0]), lp.TextOffset[1])
	}
	assert.EqualValues(t, len(prompt), resp.Usage.PromptTokens, "the prompt counts once")
	assert.EqualValues(t, 15, resp.Usage.CompletionTokens)

	chatResp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
		MaxTokens: openai.Int(4), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2), N: openai.Int(2)})
	require.NoError(t, err)
	require.Len(t, chatResp.Choices, 2)
	content := chatResp.Choices[1].Logprobs.Content
	require.Len(t, content, 4)
	var text string
	for _, tl := range content {
		assert.Equal(t, tl.Token, string(toBytes(tl.Bytes)))
		require.Len(t, tl.TopLogprobs, 2)
		assert.InDelta(t, best, tl.TopLogprobs[0].Logprob, 1e-4)
		assert.InDelta(t, second, tl.TopLogprobs[1].Logprob, 1e-4)
		text += tl.Token
	}
	assert.InDelta(t, best, content[0].Logprob, 1e-4)
	assert.Equal(t, chatResp.Choices[1].Message.Content, text)
}

func TestModels(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey})
	c := ts.client(testKey)
	ctx := context.Background()
	page, err := c.Models.List(ctx)
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, testModel, page.Data[0].ID)
	assert.Equal(t, "tputool", page.Data[0].OwnedBy)
	m, err := c.Models.Get(ctx, testModel)
	require.NoError(t, err)
	assert.Equal(t, testModel, m.ID)

	_, err = c.Models.Get(ctx, "gpt-4")
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, "model_not_found", apiErr.Code)

	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}})
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, "model_not_found", apiErr.Code)
	assert.Equal(t, "model", apiErr.Param)
}

// TestConcurrentRequests: 24 requests at once (different prompts and
// lengths, streamed and not, both endpoints) each get exactly the fake
// model's answer, batched together on 4 slots.
func TestConcurrentRequests(t *testing.T) {
	ts := newTestServer(t, serverConfig{slots: 4, maxQueue: 64})
	ts.engine.setDelay(time.Millisecond)
	c := ts.client("")
	words := []string{"cat", "dog", "bird", "fish", "tree", "house", "sun", "moon"}
	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		user := fmt.Sprintf("Tell me about the %s and the %s", words[i%len(words)], words[(i*3+1)%len(words)])
		maxTokens := 5 + i*3%17
		// The expected answers, computed here: require may not fail a
		// test from another goroutine.
		_, wantText, wantTextFinish := ts.expect(ts.encode(t, user), maxTokens)
		_, wantChat, wantChatFinish := ts.expect(ts.chatPrompt(t, user), maxTokens)
		wg.Go(func() {
			ctx := context.Background()
			var got, finish string
			if i%2 == 0 {
				want, wantFinish := wantText, wantTextFinish
				if i%4 == 0 {
					resp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
						Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(user)}, MaxTokens: openai.Int(int64(maxTokens))})
					if !assert.NoError(t, err) {
						return
					}
					got, finish = resp.Choices[0].Text, string(resp.Choices[0].FinishReason)
				} else {
					stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
						Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(user)}, MaxTokens: openai.Int(int64(maxTokens))})
					var b strings.Builder
					for stream.Next() {
						for _, cc := range stream.Current().Choices {
							b.WriteString(cc.Text)
							if cc.FinishReason != "" {
								finish = string(cc.FinishReason)
							}
						}
					}
					if !assert.NoError(t, stream.Err()) {
						return
					}
					got = b.String()
				}
				assert.Equal(t, want, got, "request %d", i)
				assert.Equal(t, wantFinish, finish, "request %d", i)
				return
			}
			want, wantFinish := wantChat, wantChatFinish
			params := openai.ChatCompletionNewParams{Model: testModel,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)}, MaxCompletionTokens: openai.Int(int64(maxTokens))}
			if i%4 == 1 {
				resp, err := c.Chat.Completions.New(ctx, params)
				if !assert.NoError(t, err) {
					return
				}
				got, finish = resp.Choices[0].Message.Content, resp.Choices[0].FinishReason
			} else {
				stream := c.Chat.Completions.NewStreaming(ctx, params)
				var b strings.Builder
				for stream.Next() {
					for _, cc := range stream.Current().Choices {
						b.WriteString(cc.Delta.Content)
						if cc.FinishReason != "" {
							finish = cc.FinishReason
						}
					}
				}
				if !assert.NoError(t, stream.Err()) {
					return
				}
				got = b.String()
			}
			assert.Equal(t, want, got, "request %d", i)
			assert.Equal(t, wantFinish, finish, "request %d", i)
		})
	}
	wg.Wait()
	ts.waitIdle(t)
	ts.engine.mu.Lock()
	maxBatch := ts.engine.maxBatch
	ts.engine.mu.Unlock()
	assert.Greater(t, maxBatch, 1, "requests were decoded together")
}

// streamRequest starts a streamed chat request and returns its body
// reader after the first event.
func streamRequest(t *testing.T, ts *testServer, ctx context.Context, maxTokens int) (*http.Response, *bufio.Reader) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Go on"}],"max_tokens":%d,"stream":true}`, testModel, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: {"), line)
	return resp, r
}

// TestClientDisconnectFreesSlot: a client that goes away mid-stream frees
// its sequence slot, and the handler returns.
func TestClientDisconnectFreesSlot(t *testing.T) {
	ts := newTestServer(t, serverConfig{slots: 2})
	ts.engine.setDelay(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	resp, _ := streamRequest(t, ts, ctx, 400)
	require.Eventually(t, func() bool { w, a := ts.sched.Load(); return w == 0 && a == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	resp.Body.Close()
	ts.waitIdle(t)
	// The access log line is written when the handler returns.
	require.Eventually(t, func() bool { return strings.Contains(ts.log.String(), `"/v1/chat/completions"`) }, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, metricsText(t, ts), `tputool_requests_finished_total{reason="cancelled"} 1`)

	// A client waiting for a plain answer that goes away: logged as 499.
	ctx, cancel = context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"Once","max_tokens":400}`))
	require.NoError(t, err)
	go func() {
		assert.Eventually(t, func() bool { _, a := ts.sched.Load(); return a == 1 }, 5*time.Second, time.Millisecond)
		cancel()
	}()
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	ts.waitIdle(t)
	require.Eventually(t, func() bool { return strings.Contains(ts.log.String(), `"status":499`) }, 5*time.Second, 5*time.Millisecond)
}

// TestQueueFull: with the slot busy and the queue full, a request is a
// 429 with Retry-After; a request of n sequences that do not all fit is a
// 429 too, and frees what it had queued.
func TestQueueFull(t *testing.T) {
	ts := newTestServer(t, serverConfig{slots: 1, maxQueue: 1})
	ts.engine.setDelay(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp1, _ := streamRequest(t, ts, ctx, 400) // runs
	defer resp1.Body.Close()
	require.Eventually(t, func() bool { w, a := ts.sched.Load(); return w == 0 && a == 1 }, 5*time.Second, time.Millisecond)
	go func() { // waits
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { w, _ := ts.sched.Load(); return w == 1 }, 5*time.Second, time.Millisecond)

	status, h, body := ts.post(t, "/v1/completions", `{"prompt":"Once","max_tokens":2}`)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "1", h.Get("Retry-After"))
	e := decodeError(t, body)
	assert.Equal(t, "rate_limit_exceeded", e.Code)

	_, err := ts.client("").Completions.New(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once")}, MaxTokens: openai.Int(2)})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)

	cancel()
	ts.waitIdle(t)
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":"Once","max_tokens":2,"n":3}`)
	assert.Equal(t, http.StatusTooManyRequests, status, string(body))
	ts.waitIdle(t)
	assert.Contains(t, metricsText(t, ts), `tputool_requests_rejected_total{reason="queue_full"}`)
}

// TestEngineFailure: a failing engine is a 500, or an error event on a
// stream.
func TestEngineFailure(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ts.engine.mu.Lock()
	ts.engine.fail = true
	ts.engine.mu.Unlock()
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once","max_tokens":4}`)
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Contains(t, decodeError(t, body).Message, "device lost")

	stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}, MaxTokens: openai.Int(4)})
	for stream.Next() {
	}
	require.Error(t, stream.Err())
	assert.Contains(t, stream.Err().Error(), "device lost")
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// decodeError reads an OpenAI error body, requiring its shape.
func decodeError(t *testing.T, body []byte) errorFields {
	t.Helper()
	var e struct {
		Error *errorFields `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.NotNil(t, e.Error, string(body))
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
	return *e.Error
}

// TestBadRequests: bad input is a 4xx in OpenAI's error shape naming what
// is wrong, never a 500.
func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	long := make([]string, 500)
	for i := range long {
		long[i] = "300"
	}
	longIDs := "[" + strings.Join(long, ",") + "]"
	chatMsg := `"messages":[{"role":"user","content":"Hi"}]`
	for _, tc := range []struct {
		name, path, body string
		status           int
		param, contains  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, "", "invalid JSON"},
		{"empty body", "/v1/completions", ``, 400, "", "invalid JSON"},
		{"trailing data", "/v1/completions", `{"prompt":"a"} {}`, 400, "", "invalid JSON"},
		{"unknown field", "/v1/chat/completions", `{"foo":1,` + chatMsg + `}`, 400, "foo", `"foo"`},
		{"unknown message field", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi","bar":2}]}`, 400, "bar", `"bar"`},
		{"wrong type", "/v1/chat/completions", `{"max_tokens":"ten",` + chatMsg + `}`, 400, "max_tokens", "max_tokens"},
		{"negative max_tokens", "/v1/chat/completions", `{"max_tokens":-1,` + chatMsg + `}`, 400, "max_tokens", "max_tokens"},
		{"zero max_completion_tokens", "/v1/chat/completions", `{"max_completion_tokens":0,` + chatMsg + `}`, 400, "max_completion_tokens", "max_completion_tokens"},
		{"negative completions max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":-5}`, 400, "max_tokens", "max_tokens"},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", "messages"},
		{"no messages", "/v1/chat/completions", `{}`, 400, "messages", "messages"},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"Hi"}]}`, 400, "messages[0].role", "wizard"},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type", "image_url"},
		{"prompt beyond context", "/v1/completions", `{"prompt":` + longIDs + `,"max_tokens":100}`, 400, "prompt", "512"},
		{"prompt fills context", "/v1/completions", `{"prompt":[` + strings.Repeat("300,", 511) + `300]}`, 400, "prompt", "512"},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", "prompt"},
		{"bad prompt", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", "prompt"},
		{"token outside vocabulary", "/v1/completions", `{"prompt":[1,99999]}`, 400, "prompt", "99999"},
		{"negative temperature", "/v1/completions", `{"prompt":"a","temperature":-0.5}`, 400, "temperature", "temperature"},
		{"top_p zero", "/v1/completions", `{"prompt":"a","top_p":0}`, 400, "top_p", "top_p"},
		{"top_p above one", "/v1/chat/completions", `{"top_p":1.5,` + chatMsg + `}`, 400, "top_p", "top_p"},
		{"n zero", "/v1/chat/completions", `{"n":0,` + chatMsg + `}`, 400, "n", "n must"},
		{"n too large", "/v1/chat/completions", `{"n":17,` + chatMsg + `}`, 400, "n", "n must"},
		{"min_p", "/v1/completions", `{"prompt":"a","min_p":2}`, 400, "min_p", "min_p"},
		{"top_k", "/v1/completions", `{"prompt":"a","top_k":-3}`, 400, "top_k", "top_k"},
		{"repetition_penalty", "/v1/completions", `{"prompt":"a","repetition_penalty":0}`, 400, "repetition_penalty", "repetition_penalty"},
		{"logprobs", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs", "logprobs"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"top_logprobs":2,` + chatMsg + `}`, 400, "top_logprobs", "logprobs"},
		{"empty stop", "/v1/completions", `{"prompt":"a","stop":""}`, 400, "stop", "stop"},
		{"bad stop", "/v1/completions", `{"prompt":"a","stop":3}`, 400, "stop", "stop"},
		{"tools", "/v1/chat/completions", `{"tools":[{"type":"function","function":{"name":"f"}}],` + chatMsg + `}`, 400, "tools", "tool"},
		{"tool_choice", "/v1/chat/completions", `{"tool_choice":"required",` + chatMsg + `}`, 400, "tool_choice", "tool"},
		{"frequency_penalty", "/v1/chat/completions", `{"frequency_penalty":2.5,` + chatMsg + `}`, 400, "frequency_penalty", "[-2, 2]"},
		{"presence_penalty", "/v1/completions", `{"prompt":"a","presence_penalty":-3}`, 400, "presence_penalty", "[-2, 2]"},
		{"logit_bias value", "/v1/chat/completions", `{"logit_bias":{"50":101},` + chatMsg + `}`, 400, "logit_bias", "[-100, 100]"},
		{"logit_bias key", "/v1/completions", `{"prompt":"a","logit_bias":{"the":1}}`, 400, "logit_bias", `"the"`},
		{"logit_bias id", "/v1/completions", `{"prompt":"a","logit_bias":{"512":1}}`, 400, "logit_bias", "[0, 512)"},
		{"logit_bias type", "/v1/chat/completions", `{"logit_bias":{"50":"up"},` + chatMsg + `}`, 400, "logit_bias", "logit_bias"},
		{"stream_options without stream", "/v1/chat/completions", `{"stream_options":{"include_usage":true},` + chatMsg + `}`, 400, "stream_options", "stream_options can only be set when stream is true"},
		{"stream_options with stream false", "/v1/completions", `{"prompt":"a","stream":false,"stream_options":{"include_usage":true}}`, 400, "stream_options", "stream is true"},
		{"response_format", "/v1/chat/completions", `{"response_format":{"type":"yaml"},` + chatMsg + `}`, 400, "response_format.type", "response_format"},
		{"max_tokens 0 without echo", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", "only with echo"},
		{"prompt_logprobs too many", "/v1/completions", `{"prompt":"a","prompt_logprobs":21}`, 400, "prompt_logprobs", "between 0 and 20"},
		{"prompt_logprobs streamed", "/v1/completions", `{"prompt":"a","prompt_logprobs":1,"stream":true}`, 400, "prompt_logprobs", "streaming"},
		{"suffix", "/v1/completions", `{"prompt":"a","suffix":"b"}`, 400, "suffix", "suffix"},
		{"best_of", "/v1/completions", `{"prompt":"a","best_of":3}`, 400, "best_of", "best_of"},
		{"unknown model", "/v1/completions", `{"model":"davinci","prompt":"a"}`, 404, "model", "davinci"},
		{"unknown endpoint", "/v1/audio/speech", `{}`, 404, "", "/v1/audio/speech"},
		{"body too large", "/v1/completions", `{"prompt":"` + strings.Repeat("a", maxBodyBytes) + `"}`, 413, "", "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := ts.post(t, tc.path, tc.body)
			require.Equal(t, tc.status, status, string(body))
			e := decodeError(t, body)
			if tc.param != "" {
				require.NotNil(t, e.Param, string(body))
				assert.Equal(t, tc.param, *e.Param)
			}
			assert.Contains(t, e.Message, tc.contains)
		})
	}
	// Harmless fields of OpenAI's are accepted.
	status, _, body := ts.post(t, "/v1/chat/completions", `{"model":"`+testModel+`","user":"u1","frequency_penalty":0,"presence_penalty":0,"logit_bias":{},"metadata":{"a":"b"},"store":false,`+
		`"response_format":{"type":"text"},"tool_choice":"none","tools":[],"parallel_tool_calls":true,"seed":7,"service_tier":"auto",`+
		`"stream_options":null,"max_tokens":2,"messages":[{"role":"developer","content":[{"type":"text","text":"Be kind."}]},{"role":"user","content":"Hi","name":"bob"}]}`)
	assert.Equal(t, http.StatusOK, status, string(body))
}

func TestMethodNotAllowed(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	resp, err := http.Get(ts.URL + "/v1/chat/completions")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
	decodeError(t, body)
	status, _, body := ts.post(t, "/v1/models", `{}`)
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	decodeError(t, body)
}

func TestNoChatTemplate(t *testing.T) {
	ts := newTestServer(t, serverConfig{noChat: true})
	status, _, body := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, decodeError(t, body).Message, "chat template")
	status, _, body = ts.post(t, "/v1/completions", `{"prompt":"Hi","max_tokens":2}`)
	assert.Equal(t, http.StatusOK, status, string(body))
}

func TestAuth(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey})
	get := func(path, auth string) (int, []byte) {
		req, err := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	for _, path := range []string{"/v1/models", "/metrics"} {
		status, body := get(path, "")
		assert.Equal(t, http.StatusUnauthorized, status, path)
		assert.Equal(t, "invalid_api_key", decodeError(t, body).Code)
		status, _ = get(path, "Bearer wrong")
		assert.Equal(t, http.StatusUnauthorized, status, path)
		status, _ = get(path, "Bearer "+testKey)
		assert.Equal(t, http.StatusOK, status, path)
	}
	status, _, _ := ts.post(t, "/v1/completions", `{"prompt":"a","max_tokens":1}`)
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = ts.post(t, "/api/generate", `{"prompt":"a"}`)
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = ts.post(t, "/v1/audio/speech", `{}`)
	assert.Equal(t, http.StatusUnauthorized, status, "an unknown path without the key")
	status, _, _ = ts.post(t, "/v1/audio/speech", `{}`, "Authorization", "Bearer "+testKey)
	assert.Equal(t, http.StatusNotFound, status)
	status, body := get("/health", "")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"status":"ok"}`, string(body))

	_, err := ts.client("wrong").Models.List(context.Background())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
}

func TestHealthDraining(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ts.srv.SetDraining()
	resp, err := http.Get(ts.URL + "/health")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.JSONEq(t, `{"status":"shutting_down"}`, string(body))
	require.NoError(t, ts.sched.Shutdown(context.Background()))
	status, _, body := ts.post(t, "/v1/completions", `{"prompt":"a","max_tokens":1}`)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "shutting_down", decodeError(t, body).Code)
}

func metricsText(t *testing.T, ts *testServer) string {
	t.Helper()
	resp, err := http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "version=0.0.4")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// TestMetricsEndpoint: after traffic, /metrics has every series.
func TestMetricsEndpoint(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for range 3 {
		status, _, body := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":5}`)
		require.Equal(t, http.StatusOK, status, string(body))
	}
	ts.post(t, "/v1/completions", `{"prompt":"a","max_tokens":-1}`)
	text := metricsText(t, ts)
	for _, want := range []string{
		`tputool_requests_total{endpoint="/v1/completions",status="200"} 3`,
		`tputool_requests_total{endpoint="/v1/completions",status="400"} 1`,
		`tputool_generation_tokens_total 15`,
		`tputool_requests_finished_total{reason="length"} 3`,
		"tputool_queue_waiting 0\n",
		"tputool_sequences_running 0\n", // read at the scrape, after the sequences ended
		"tputool_batch_slots 4",
		`tputool_batch_occupancy_bucket{le="+Inf"}`,
		`tputool_time_to_first_token_seconds_count 3`,
		`tputool_inter_token_latency_seconds_count 12`,
		"tputool_decode_step_seconds_sum",
		"tputool_prefill_piece_seconds_count",
		"tputool_compiles_total 3",
		"tputool_recompiles_total 1",
		"# TYPE tputool_decode_step_seconds histogram",
	} {
		assert.Contains(t, text, want)
	}
	checkExposition(t, text)
}

// TestAccessLog: one JSON line per request, with its tokens.
func TestAccessLog(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	status, _, _ := ts.post(t, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":5}`)
	require.Equal(t, http.StatusOK, status)
	http.Get(ts.URL + "/health")
	ts.post(t, "/v1/chat/completions", `{bad`)
	lines := strings.Split(strings.TrimSpace(ts.log.String()), "\n")
	require.Len(t, lines, 3)
	type entry struct {
		Time             time.Time `json:"time"`
		Method           string    `json:"method"`
		Path             string    `json:"path"`
		Status           int       `json:"status"`
		DurationMS       *float64  `json:"duration_ms"`
		PromptTokens     int       `json:"prompt_tokens"`
		CompletionTokens int       `json:"completion_tokens"`
		Remote           string    `json:"remote"`
	}
	var es []entry
	for _, l := range lines {
		var e entry
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&e), l)
		require.NotNil(t, e.DurationMS, l)
		assert.Contains(t, e.Remote, "127.0.0.1")
		es = append(es, e)
	}
	assert.Equal(t, "/v1/completions", es[0].Path)
	assert.Equal(t, http.MethodPost, es[0].Method)
	assert.Equal(t, 200, es[0].Status)
	assert.Equal(t, len(ts.encode(t, "Once upon a time")), es[0].PromptTokens)
	assert.Equal(t, 5, es[0].CompletionTokens)
	assert.Equal(t, "/health", es[1].Path)
	assert.Equal(t, 400, es[2].Status)
}

func toInt64(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

func toBytes(b []int64) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

// TestShutdownDeadline: sequences the scheduler cuts off at its shutdown
// deadline, while their clients wait, end in a 503 or a stream error.
func TestShutdownDeadline(t *testing.T) {
	ts := newTestServer(t, serverConfig{slots: 2})
	ts.engine.setDelay(10 * time.Millisecond)
	plain := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once","max_tokens":400}`))
		if err != nil {
			plain <- 0
			return
		}
		resp.Body.Close()
		plain <- resp.StatusCode
	}()
	resp, r := streamRequest(t, ts, context.Background(), 400)
	defer resp.Body.Close()
	require.Eventually(t, func() bool { _, a := ts.sched.Load(); return a == 2 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, ts.sched.Shutdown(ctx), context.Canceled)
	assert.Equal(t, http.StatusServiceUnavailable, <-plain)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Contains(t, string(rest), `data: {"error":`)
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"), "the error event is followed by [DONE]: %s", rest)
}

// TestSeed: a sampled request with a seed is repeatable, and its n
// choices draw from different streams.
func TestSeed(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	run := func(seed int64) []string {
		resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			N:      openai.Int(4), MaxTokens: openai.Int(12), Temperature: openai.Float(8), Seed: openai.Int(seed)},
			option.WithJSONSet("top_k", 0)) // an extra, through the SDK's escape hatch
		require.NoError(t, err)
		var out []string
		for _, ch := range resp.Choices {
			out = append(out, ch.Text)
		}
		return out
	}
	a, b := run(42), run(42)
	assert.Equal(t, a, b, "the same seed gives the same choices")
	slices.Sort(a)
	assert.Greater(t, len(slices.Compact(a)), 1, "the choices differ: %q", a)
	assert.NotEqual(t, b, run(7))
}

// TestTokenText: a token's text keeps its SentencePiece leading space
// after another token, and a byte-fallback token is its byte.
func TestTokenText(t *testing.T) {
	tok := loadTestTokenizer(t)
	s := &Server{o: ServerOptions{Tokenizer: tok}}
	word, ok := tok.TokenToID("▁t")
	require.True(t, ok)
	he, ok := tok.TokenToID("he")
	require.True(t, ok)
	assert.Equal(t, " t", s.tokenText(word, word))
	assert.Equal(t, "he", s.tokenText(word, he))
	b, ok := tok.TokenToID("<0xE2>")
	require.True(t, ok)
	assert.Equal(t, "\xe2", s.tokenText(word, b))
	assert.Equal(t, []int{0xe2}, s.tokenBytes(b, s.tokenText(word, b)))
	assert.Equal(t, -9999.0, logprobValue(math.Inf(-1)))
}

// TestOddInputIsNever500: odd but well-formed or malformed bodies are
// 4xx answers on every generating endpoint.
func TestOddInputIsNever500(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	bodies := []string{
		`null`, `[]`, `"text"`, `42`, `{}`, `{"prompt":null}`, `{"prompt":[]}`, `{"prompt":[[]]}`, `{"prompt":[-1]}`,
		`{"prompt":["a",1]}`, `{"messages":null}`, `{"messages":[null]}`, `{"messages":[{"role":"user"}]}`,
		`{"messages":[{"role":"user","content":5}]}`, `{"n":1e400}`, `{"max_tokens":1.5}`, `{"temperature":"hot"}`,
		`{"stop":[null]}`, `{"stream_options":{"include_usage":"yes"}}`, `{"options":{"num_predict":"x"}}`,
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000), "\xff\xfe", `{"prompt":"a","max_tokens":1}garbage`,
	}
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/api/generate", "/api/chat", "/v1/embeddings", "/api/embed"} {
		for _, body := range bodies {
			status, _, resp := ts.post(t, path, body)
			if status >= 500 || status < 400 && status != http.StatusOK {
				t.Errorf("%s %.40q: status %d: %s", path, body, status, resp)
			}
		}
	}
	ts.waitIdle(t)
}

// TestStreamingChoices: a streamed request of n choices with
// log-probabilities delivers every choice's role first, then each choice's
// text in order, its tokens' log-probabilities alongside.
func TestStreamingChoices(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	_, want, _ := ts.expect(ts.chatPrompt(t, "Hi"), 9)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
		N:        openai.Int(3), MaxTokens: openai.Int(9), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(1)})
	texts := make([]strings.Builder, 3)
	tokens := make([]strings.Builder, 3)
	roles := 0
	for stream.Next() {
		for _, cc := range stream.Current().Choices {
			require.Less(t, cc.Index, int64(3))
			if cc.Delta.Role == "assistant" {
				roles++
			} else {
				assert.Equal(t, 3, roles, "the roles come first")
			}
			texts[cc.Index].WriteString(cc.Delta.Content)
			for _, lp := range cc.Logprobs.Content {
				tokens[cc.Index].WriteString(lp.Token)
				assert.Len(t, lp.TopLogprobs, 1)
			}
		}
	}
	require.NoError(t, stream.Err())
	for i := range 3 {
		assert.Equal(t, want, texts[i].String(), "choice %d", i)
		assert.Equal(t, want, tokens[i].String(), "choice %d", i)
	}

	prompt := ts.encode(t, "Once upon a time")
	_, wantText, _ := ts.expect(prompt, 7)
	cs := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(7), Logprobs: openai.Int(1)})
	var text, toks strings.Builder
	var offsets []int64
	for cs.Next() {
		for _, cc := range cs.Current().Choices {
			text.WriteString(cc.Text)
			toks.WriteString(strings.Join(cc.Logprobs.Tokens, ""))
			offsets = append(offsets, cc.Logprobs.TextOffset...)
		}
	}
	require.NoError(t, cs.Err())
	assert.Equal(t, wantText, text.String())
	assert.Equal(t, wantText, toks.String())
	require.Len(t, offsets, 7)
	assert.True(t, slices.IsSorted(offsets), "text offsets grow across chunks: %v", offsets)
}

// TestPromptIDsBelowModelVocab: token-id prompts are checked against the
// smaller of the model's and the tokenizer's vocabularies (a 400 naming
// the bound, not the engine's 500).
func TestPromptIDsBelowModelVocab(t *testing.T) {
	tok := loadTestTokenizer(t)
	s := &Server{o: ServerOptions{Tokenizer: tok, VocabSize: 100}}
	if _, err := s.promptsOf("prompt", []byte(`[1, 99]`)); err != nil {
		t.Errorf("ids below both vocabularies: %v", err)
	}
	_, err := s.promptsOf("prompt", []byte(`[1, 100]`))
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "[0, 100)") {
		t.Errorf("id 100 with a model of 100 tokens: %v, want a 400 naming [0, 100)", err)
	}
	s.o.VocabSize = 1 << 20 // the tokenizer's is the smaller
	if _, err := s.promptsOf("prompt", []byte(fmt.Sprintf(`[%d]`, tok.VocabSize()))); err == nil {
		t.Error("an id beyond the tokenizer's vocabulary was accepted")
	}
}

// TestEncodedIDsBelowModelVocab: text whose encoding holds an id the
// model cannot embed (a tokenizer larger than its model) is a 400.
func TestEncodedIDsBelowModelVocab(t *testing.T) {
	tok := loadTestTokenizer(t)
	s := &Server{o: ServerOptions{Tokenizer: tok, VocabSize: 3, Resolve: func(o generate.Overrides) (generate.Options, error) {
		return generate.Resolve(nil, nil, o)
	}}}
	prompts, err := s.promptsOf("prompt", []byte(`"Once upon a time"`))
	require.NoError(t, err)
	_, err = s.plan(prompts, generate.Overrides{}, 1, false, -1, "prompt", "max_tokens")
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Param != "prompt" {
		t.Errorf("a prompt encoding beyond the model's 3 tokens: %v, want a 400 on prompt", err)
	}
}

// TestCORS: with allowed origins, a browser's preflight is answered
// without the API key, answers to an allowed origin carry
// Access-Control-Allow-Origin, and other origins get no CORS headers.
func TestCORS(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	ts.srv.o.CORSOrigins = []string{"http://localhost:3000"}
	do := func(method, origin, key string, preflight bool) *http.Response {
		req, err := http.NewRequest(method, ts.URL+"/v1/models", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		if preflight {
			req.Header.Set("Access-Control-Request-Method", "GET")
			req.Header.Set("Access-Control-Request-Headers", "authorization")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := do(http.MethodOptions, "http://localhost:3000", "", true)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "preflight without the key")
	assert.Equal(t, "http://localhost:3000", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "Authorization")
	resp = do(http.MethodGet, "http://localhost:3000", "k", false)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "http://localhost:3000", resp.Header.Get("Access-Control-Allow-Origin"))
	resp = do(http.MethodGet, "http://localhost:3000", "", false)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the key is still needed")
	resp = do(http.MethodOptions, "http://evil.example", "", true)
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "another origin's preflight is not answered")
	ts.srv.o.CORSOrigins = nil
	resp = do(http.MethodGet, "http://localhost:3000", "k", false)
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "no origins: no CORS headers")
}

// TestCORSRequestHeaders: a preflight allows the headers the browser asks
// for (the Anthropic TypeScript SDK's X-Stainless-* and
// anthropic-dangerous-direct-browser-access) besides the fixed ones;
// a name that is not a token is left out.
func TestCORSRequestHeaders(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	ts.srv.o.CORSOrigins = []string{"http://localhost:3000"}
	req, err := http.NewRequest(http.MethodOptions, ts.URL+"/v1/messages", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "http://localhost:3000")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "anthropic-dangerous-direct-browser-access,anthropic-version,content-type,x-api-key,x-stainless-arch,x-stainless-retry-count, x-stainless-timeout,bad(name)")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "http://localhost:3000", resp.Header.Get("Access-Control-Allow-Origin"))
	allowed := map[string]bool{}
	for name := range strings.SplitSeq(resp.Header.Get("Access-Control-Allow-Headers"), ",") {
		allowed[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, name := range []string{"authorization", "anthropic-dangerous-direct-browser-access", "anthropic-version", "content-type", "x-api-key",
		"x-stainless-arch", "x-stainless-retry-count", "x-stainless-timeout"} {
		assert.True(t, allowed[name], name)
	}
	assert.False(t, allowed["bad(name)"])
	assert.Len(t, allowed, 9, "each name once: %s", resp.Header.Get("Access-Control-Allow-Headers"))
	assert.Contains(t, resp.Header.Values("Vary"), "Access-Control-Request-Headers")
}

// With Pprof the runtime's profiles are served under /debug/pprof/,
// behind the API key; without it those paths are 404s.
func TestServerPprof(t *testing.T) {
	get := func(ts *testServer, path, key string) (int, []byte) { return ts.getWithKey(t, path, key) }
	off := newTestServer(t, serverConfig{})
	status, _ := get(off, "/debug/pprof/", "")
	assert.Equal(t, http.StatusNotFound, status)

	on := newTestServer(t, serverConfig{pprof: true, apiKey: testKey})
	status, _ = get(on, "/debug/pprof/allocs?debug=1", "")
	assert.Equal(t, http.StatusUnauthorized, status, "without the key")
	status, body := get(on, "/debug/pprof/allocs?debug=1", testKey)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, string(body), "heap profile")
	status, body = get(on, "/debug/pprof/", testKey)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, string(body), "goroutine")
	status, body = get(on, "/debug/pprof/profile?seconds=1", testKey)
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b, "a CPU profile is gzipped protobuf")
	status, _ = get(on, "/debug/pprof/no-such-profile", testKey)
	assert.Equal(t, http.StatusNotFound, status)
}
