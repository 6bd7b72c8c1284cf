package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ollamaLines reads an NDJSON answer.
func ollamaLines(t *testing.T, body []byte) []ollamaResponse {
	t.Helper()
	var out []ollamaResponse
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var r ollamaResponse
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		out = append(out, r)
	}
	return out
}

func TestOllamaGenerate(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	_, want, _ := ts.expect(ts.chatPrompt(t, "Once upon a time"), 10)

	// Streamed by default, through the chat template.
	status, h, body := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","options":{"num_predict":10,"temperature":0}}`, testModel))
	require.Equal(t, http.StatusOK, status, string(body))
	assert.Equal(t, "application/x-ndjson", h.Get("Content-Type"))
	lines := ollamaLines(t, body)
	require.Greater(t, len(lines), 2)
	var text strings.Builder
	for i, l := range lines {
		require.NotNil(t, l.Response)
		text.WriteString(*l.Response)
		assert.Equal(t, i == len(lines)-1, l.Done)
		assert.Equal(t, testModel, l.Model)
	}
	assert.Equal(t, want, text.String())
	last := lines[len(lines)-1]
	assert.Equal(t, "length", last.DoneReason)
	assert.Equal(t, 10, last.EvalCount)
	assert.Equal(t, len(ts.chatPrompt(t, "Once upon a time")), last.PromptEvalCount)
	assert.Positive(t, last.TotalDuration)

	// raw: the prompt as is; stream false: one object.
	prompt := ts.encode(t, "Once upon a time")
	_, wantRaw, _ := ts.expect(prompt, 6)
	status, _, body = ts.post(t, "/api/generate", `{"model":"`+testModel+`:latest","prompt":"Once upon a time","raw":true,"stream":false,"options":{"num_predict":6,"num_ctx":2048}}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var one ollamaResponse
	require.NoError(t, json.Unmarshal(body, &one))
	assert.True(t, one.Done)
	assert.Equal(t, wantRaw, *one.Response)
	assert.Equal(t, 6, one.EvalCount)
}

func TestOllamaChat(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	_, want, _ := ts.expect(ts.chatPrompt(t, "Hi"), 8)
	status, _, body := ts.post(t, "/api/chat", `{"model":"`+testModel+`","messages":[{"role":"user","content":"Hi"}],"options":{"num_predict":8}}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var text strings.Builder
	lines := ollamaLines(t, body)
	for _, l := range lines {
		require.NotNil(t, l.Message)
		assert.Equal(t, "assistant", l.Message.Role)
		text.WriteString(l.Message.Content)
	}
	assert.Equal(t, want, text.String())
	assert.True(t, lines[len(lines)-1].Done)

	status, _, body = ts.post(t, "/api/chat", `{"model":"`+testModel+`","messages":[{"role":"user","content":"Hi"}],"stream":false,"options":{"num_predict":8}}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var one ollamaResponse
	require.NoError(t, json.Unmarshal(body, &one))
	assert.Equal(t, want, one.Message.Content)
	assert.Equal(t, "length", one.DoneReason)
}

func TestOllamaErrors(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for _, tc := range []struct {
		name, path, body string
		status           int
		contains         string
	}{
		{"unknown model", "/api/generate", `{"model":"llama3","prompt":"a"}`, 404, "model 'llama3' not found"},
		{"malformed", "/api/chat", `{"model":`, 400, "invalid JSON"},
		{"images", "/api/generate", `{"model":"` + testModel + `","prompt":"a","images":["aGk="]}`, 400, "images"},
		{"tools", "/api/chat", `{"model":"` + testModel + `","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}`, 400, "tool"},
		{"format", "/api/generate", `{"model":"` + testModel + `","prompt":"a","format":"yaml"}`, 400, "format"},
		{"bad option", "/api/generate", `{"model":"` + testModel + `","prompt":"a","options":{"top_p":3}}`, 400, "top_p"},
		{"beyond context", "/api/generate", `{"model":"` + testModel + `","prompt":"` + strings.Repeat("once upon a time ", 200) + `","truncate":false}`, 400, "exceeds the context length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := ts.post(t, tc.path, tc.body)
			require.Equal(t, tc.status, status, string(body))
			var e struct {
				Error string `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			assert.Contains(t, e.Error, tc.contains)
		})
	}
}

// TestOllamaLoad: a request with nothing to generate (ollama's clients
// send one to load the model) is done at once.
func TestOllamaLoad(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for path, body := range map[string]string{
		"/api/generate": `{"model":"` + testModel + `"}`,
		"/api/chat":     `{"model":"` + testModel + `","messages":[]}`,
	} {
		status, _, resp := ts.post(t, path, body)
		require.Equal(t, http.StatusOK, status, string(resp))
		var one ollamaResponse
		require.NoError(t, json.Unmarshal(resp, &one))
		assert.True(t, one.Done, path)
		assert.Equal(t, "load", one.DoneReason, path)
	}
	status, _, _ := ts.post(t, "/api/generate", `{"model":"other"}`)
	assert.Equal(t, http.StatusNotFound, status)
}

// TestOllamaTagsAndVersion: the model list and version ollama's clients
// read first, behind the API key like the rest of /api: the model with a
// tag and all six details (Zed needs parameter_size and
// quantization_level), and the API version as numbers.
func TestOllamaTagsAndVersion(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	ts.srv.o.Version, ts.srv.o.Family = "1.2.3", "LlamaForCausalLM"
	ts.srv.o.ParameterCount, ts.srv.o.Quantization = 110_260_000, "BF16"
	get := func(path, key string) (int, []byte) { return ts.getWithKey(t, path, key) }
	code, body := get("/api/tags", "k")
	require.Equal(t, http.StatusOK, code, string(body))
	var tags struct {
		Models []struct {
			Name, Model string
			Details     map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(body, &tags))
	require.Len(t, tags.Models, 1)
	assert.Equal(t, testModel+":latest", tags.Models[0].Name)
	assert.Equal(t, testModel+":latest", tags.Models[0].Model)
	assert.Equal(t, map[string]any{"parent_model": "", "format": "safetensors", "family": "LlamaForCausalLM",
		"families": []any{"LlamaForCausalLM"}, "parameter_size": "110.26M", "quantization_level": "BF16"}, tags.Models[0].Details)
	code, body = get("/api/version", "k")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"version":"0.24.0","tputool_version":"1.2.3"}`, string(body))
	code, _ = get("/api/tags", "")
	assert.Equal(t, http.StatusUnauthorized, code)

	// The tagged name and the bare one are both the model.
	for _, name := range []string{testModel, testModel + ":latest"} {
		status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q}`, name), "Authorization", "Bearer k")
		assert.Equal(t, http.StatusOK, status, string(b))
	}
}

func TestOllamaHumanCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1K", 260_123: "260K", 1_000_000: "1M", 110_260_000: "110.26M",
		500_500_000: "500.50M", 1_000_000_000: "1B", 8_030_261_248: "8.0B", 2_850_000_000: "2.9B", 7e9: "7B"} {
		assert.Equal(t, want, humanCount(n), "%d", n)
	}
}

// /api/chat with tools and a thinking model: the thought comes back as
// message.thinking, the call as message.tool_calls (arguments as an
// object), streamed and whole; think false reaches the template; a
// call and its result go back through the template.
func TestOllamaChatToolsAndThinking(t *testing.T) {
	const answer = "<think>Need the weather.</think>Checking.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	r := ThinkTags
	tmpl := toolTemplate + "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
	ts := newTestServer(t, serverConfig{script: ids, template: tmpl, reasoning: &r})
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":%s,"stream":false}`, testModel, tools)
	status, _, b := ts.post(t, "/api/chat", body)
	require.Equal(t, http.StatusOK, status, string(b))
	var whole struct {
		Message ollamaMessage `json:"message"`
		Done    bool          `json:"done"`
	}
	require.NoError(t, json.Unmarshal(b, &whole))
	assert.Equal(t, "Need the weather.", whole.Message.Thinking)
	assert.Equal(t, "Checking.", whole.Message.Content)
	require.Len(t, whole.Message.ToolCalls, 1)
	assert.Equal(t, "get_weather", whole.Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, string(whole.Message.ToolCalls[0].Function.Arguments))
	assert.Contains(t, ts.lastPrompt(t), `"name": "get_weather"`)

	status, _, b = ts.post(t, "/api/chat", strings.Replace(body, `"stream":false`, `"stream":true`, 1))
	require.Equal(t, http.StatusOK, status, string(b))
	var thinking, content strings.Builder
	var calls []ollamaToolCall
	for _, l := range ollamaLines(t, b) {
		require.NotNil(t, l.Message)
		thinking.WriteString(l.Message.Thinking)
		content.WriteString(l.Message.Content)
		calls = append(calls, l.Message.ToolCalls...)
	}
	assert.Equal(t, "Need the weather.", thinking.String())
	assert.Equal(t, "Checking.", content.String())
	require.Len(t, calls, 1)
	assert.JSONEq(t, `{"city":"Paris"}`, string(calls[0].Function.Arguments))

	// think false reaches the template; the call and its result go back.
	next := fmt.Sprintf(`{"model":%q,"think":false,"stream":false,"tools":%s,"messages":[{"role":"user","content":"Weather in Paris?"},`+
		`{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},`+
		`{"role":"tool","tool_name":"get_weather","content":"{\"temp\": 21}"}]}`, testModel, tools)
	status, _, b = ts.post(t, "/api/chat", next)
	require.Equal(t, http.StatusOK, status, string(b))
	assert.Contains(t, ts.lastPrompt(t), `tool: {"temp": 21}`)
	assert.Contains(t, ts.lastPrompt(t), "<think>\n\n</think>")

	status, _, b = ts.post(t, "/api/chat", fmt.Sprintf(`{"model":%q,"think":"extreme","messages":[{"role":"user","content":"x"}]}`, testModel))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(b), "think must be")
}

// ollamaError decodes ollama's error shape: {"error": "..."}.
func ollamaError(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.NotEmpty(t, e.Error, string(body))
	return e.Error
}

// TestOllamaRoutes: the endpoints ollama's clients call besides
// generating: / (the CLI's heartbeat, open like /health), /api/show,
// /api/ps and the deprecated /api/embeddings; errors under /api/ are
// ollama's shape, the 401, 404 and 405 too.
func TestOllamaRoutes(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	ts.srv.o.Family, ts.srv.o.ParameterCount, ts.srv.o.Quantization = "llama", 260_000, "F32"
	key := []string{"Authorization", "Bearer k"}

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, err := http.NewRequest(method, ts.URL+"/", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, method)
		if method == http.MethodGet {
			assert.Equal(t, "Ollama is running", string(b))
		}
	}

	status, _, body := ts.post(t, "/api/show", `{"model":"`+testModel+`:latest"}`, key...)
	require.Equal(t, http.StatusOK, status, string(body))
	var show struct {
		Modelfile    *string        `json:"modelfile"`
		Parameters   *string        `json:"parameters"`
		Template     string         `json:"template"`
		Details      map[string]any `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
	}
	require.NoError(t, json.Unmarshal(body, &show))
	assert.NotNil(t, show.Modelfile)
	assert.NotNil(t, show.Parameters)
	assert.Equal(t, testTemplate, show.Template)
	assert.Equal(t, "260K", show.Details["parameter_size"])
	assert.Equal(t, map[string]any{"general.architecture": "llama", "general.parameter_count": 260000.0,
		"llama.context_length": float64(testContext), "llama.embedding_length": 4.0}, show.ModelInfo)
	assert.Equal(t, []string{"completion"}, show.Capabilities)
	status, _, body = ts.post(t, "/api/show", `{"name":"`+testModel+`"}`, key...)
	assert.Equal(t, http.StatusOK, status, string(body))
	status, _, body = ts.post(t, "/api/show", `{"model":"llama3"}`, key...)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, ollamaError(t, body), "model 'llama3' not found")
	status, _, body = ts.post(t, "/api/show", `{}`, key...)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, ollamaError(t, body), "model is required")

	code, body := ts.getWithKey(t, "/api/ps", "k")
	require.Equal(t, http.StatusOK, code, string(body))
	var ps struct {
		Models []struct {
			Name          string         `json:"name"`
			SizeVRAM      *int64         `json:"size_vram"`
			ExpiresAt     time.Time      `json:"expires_at"`
			ContextLength int            `json:"context_length"`
			Details       map[string]any `json:"details"`
		} `json:"models"`
	}
	require.NoError(t, json.Unmarshal(body, &ps))
	require.Len(t, ps.Models, 1)
	m := ps.Models[0]
	assert.Equal(t, testModel+":latest", m.Name)
	require.NotNil(t, m.SizeVRAM)
	assert.Zero(t, *m.SizeVRAM)
	assert.Equal(t, testContext, m.ContextLength)
	assert.True(t, m.ExpiresAt.After(time.Now().AddDate(50, 0, 0)), m.ExpiresAt)
	assert.Equal(t, "F32", m.Details["quantization_level"])

	// /api/embeddings: the pooled vector as it is, not normalized.
	status, _, body = ts.post(t, "/api/embeddings", `{"model":"`+testModel+`","prompt":"a cat"}`, key...)
	require.Equal(t, http.StatusOK, status, string(body))
	var emb struct {
		Embedding []float64 `json:"embedding"`
	}
	require.NoError(t, json.Unmarshal(body, &emb))
	ids := ts.encode(t, "a cat")
	sum := 0
	for _, id := range ids {
		sum += id
	}
	assert.Equal(t, []float64{float64(len(ids)), float64(sum), float64(ids[0]), float64(ids[len(ids)-1])}, emb.Embedding)
	status, _, body = ts.post(t, "/api/embeddings", `{"model":"`+testModel+`","prompt":""}`, key...)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.JSONEq(t, `{"embedding":[]}`, string(body))

	// Errors are ollama's {"error": "..."}: 401, 404, 405.
	code, body = ts.getWithKey(t, "/api/tags", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	ollamaError(t, body)
	code, body = ts.getWithKey(t, "/api/pull", "k")
	assert.Equal(t, http.StatusNotFound, code)
	ollamaError(t, body)
	status, _, body = ts.post(t, "/api/tags", `{}`, key...)
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	ollamaError(t, body)
	status, _, body = ts.post(t, "/", `{}`)
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	ollamaError(t, body)
}

// TestOllamaShowCapabilities: tools when the template has call markup
// tputool parses, thinking when it has reasoning markup.
func TestOllamaShowCapabilities(t *testing.T) {
	r := ThinkTags
	ts := newTestServer(t, serverConfig{template: toolTemplate, reasoning: &r})
	status, _, body := ts.post(t, "/api/show", `{"model":"`+testModel+`"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var show struct {
		Capabilities []string `json:"capabilities"`
	}
	require.NoError(t, json.Unmarshal(body, &show))
	assert.Equal(t, []string{"completion", "tools", "thinking"}, show.Capabilities)
}

// TestOllamaToolCallIDs: each call has an id and its index, as ollama's;
// an answer whose calls' arguments are not all objects is text.
func TestOllamaToolCallIDs(t *testing.T) {
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Weather?"}],"tools":%s,"stream":false}`, testModel, tools)
	ts := toolServer(t, `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`+"\n"+
		`<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>`)
	status, _, b := ts.post(t, "/api/chat", body)
	require.Equal(t, http.StatusOK, status, string(b))
	var resp struct {
		Message struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Index     *int            `json:"index"`
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(b, &resp))
	require.Len(t, resp.Message.ToolCalls, 2, string(b))
	for i, c := range resp.Message.ToolCalls {
		assert.Regexp(t, `^call_[a-z0-9]{8}$`, c.ID)
		require.NotNil(t, c.Function.Index, string(b))
		assert.Equal(t, i, *c.Function.Index)
	}
	assert.NotEqual(t, resp.Message.ToolCalls[0].ID, resp.Message.ToolCalls[1].ID)
	assert.JSONEq(t, `{"city":"Rome"}`, string(resp.Message.ToolCalls[1].Function.Arguments))

	const notObject = `<tool_call>{"name": "get_weather", "arguments": "Paris"}</tool_call>`
	ts = toolServer(t, notObject)
	status, _, b = ts.post(t, "/api/chat", body)
	require.Equal(t, http.StatusOK, status, string(b))
	resp.Message.ToolCalls = nil
	require.NoError(t, json.Unmarshal(b, &resp))
	assert.Empty(t, resp.Message.ToolCalls, string(b))
	assert.Equal(t, notObject, strings.TrimSpace(resp.Message.Content))
}

// TestOllamaChatTruncate: a chat beyond the context loses its oldest
// messages, but the system ones and the last, and num_predict is clamped
// to the room left; truncate false refuses it.
func TestOllamaChatTruncate(t *testing.T) {
	const ctx = 64
	ts := newTestServer(t, serverConfig{context: ctx})
	msgs := []string{`{"role":"system","content":"Be brief."}`, `{"role":"user","content":"the first question of all"}`}
	for i := range 8 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"answer number %d to the question"}`, i),
			fmt.Sprintf(`{"role":"user","content":"question number %d about the story"}`, i))
	}
	msgs = append(msgs, `{"role":"user","content":"the last question"}`)
	body := fmt.Sprintf(`{"model":%q,"stream":false,"messages":[%s],"options":{"num_predict":100000}}`, testModel, strings.Join(msgs, ","))
	status, _, b := ts.post(t, "/api/chat", body)
	require.Equal(t, http.StatusOK, status, string(b))
	var one ollamaResponse
	require.NoError(t, json.Unmarshal(b, &one))
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, "system: Be brief.\n")
	assert.Contains(t, prompt, "user: the last question\nassistant:")
	assert.NotContains(t, prompt, "first question")
	assert.Less(t, one.PromptEvalCount, ctx)
	assert.Greater(t, one.PromptEvalCount, ctx/2, "only as many messages as needed are dropped")
	assert.LessOrEqual(t, one.PromptEvalCount+one.EvalCount, ctx)
	assert.Positive(t, one.EvalCount)

	status, _, b = ts.post(t, "/api/chat", strings.Replace(body, `"stream":false`, `"stream":false,"truncate":false`, 1))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, ollamaError(t, b), "exceeds the context length")

	// A long chat is cut in log n renders, not n: 4,000 messages took
	// over half a minute when each drop re-rendered the rest.
	msgs = msgs[:0]
	for i := range 4000 {
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":"message %d"}`, []string{"user", "assistant"}[i%2], i))
	}
	start := time.Now()
	status, _, b = ts.post(t, "/api/chat", fmt.Sprintf(`{"model":%q,"stream":false,"messages":[%s],"options":{"num_predict":4}}`, testModel, strings.Join(msgs, ",")))
	require.Equal(t, http.StatusOK, status, string(b))
	assert.Less(t, time.Since(start), 5*time.Second)
	prompt = ts.lastPrompt(t)
	assert.Contains(t, prompt, "user: message 3998\n")
	assert.NotContains(t, prompt, "message 3900")
}

// TestOllamaGenerateTruncate: a prompt beyond the context keeps its first
// tokens and its latest, leaving room to answer (num_predict's, or half
// the context); truncate false refuses it.
func TestOllamaGenerateTruncate(t *testing.T) {
	const ctx = 64
	ts := newTestServer(t, serverConfig{context: ctx})
	long := strings.Repeat("once upon a time there was a cat ", 20)
	ids := ts.encode(t, long)
	require.Greater(t, len(ids), ctx)
	for _, tc := range []struct {
		predict, want int // num_predict (0: none), the prompt's length
	}{{0, ctx / 2}, {10, ctx - 10}} {
		body := fmt.Sprintf(`{"model":%q,"prompt":%q,"raw":true,"stream":false,"options":{"num_predict":%d}}`, testModel, long, tc.predict)
		status, _, b := ts.post(t, "/api/generate", body)
		require.Equal(t, http.StatusOK, status, string(b))
		var one ollamaResponse
		require.NoError(t, json.Unmarshal(b, &one))
		assert.Equal(t, tc.want, one.PromptEvalCount)
		ts.engine.mu.Lock()
		got := slices.Clone(ts.engine.last)
		ts.engine.mu.Unlock()
		assert.Equal(t, append(slices.Clone(ids[:4]), ids[len(ids)-(tc.want-4):]...), got)
	}
	status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":%q,"raw":true,"truncate":false}`, testModel, long))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, ollamaError(t, b), "exceeds the context length")
}

// TestOllamaGenerateThink: /api/generate splits the thought into
// thinking, streamed and whole, and takes think as /api/chat does, "max"
// included (on both).
func TestOllamaGenerateThink(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode("<think>Once upon a time.</think>The end.", false)
	require.NoError(t, err)
	r := ThinkTags
	tmpl := testTemplate + "{% if enable_thinking is defined and enable_thinking %}[thinking]{% endif %}"
	ts := newTestServer(t, serverConfig{script: ids, template: tmpl, reasoning: &r})
	body := fmt.Sprintf(`{"model":%q,"prompt":"Story?","think":"max","stream":false}`, testModel)
	status, _, b := ts.post(t, "/api/generate", body)
	require.Equal(t, http.StatusOK, status, string(b))
	var one ollamaResponse
	require.NoError(t, json.Unmarshal(b, &one))
	assert.Equal(t, "Once upon a time.", one.Thinking)
	assert.Equal(t, "The end.", *one.Response)
	assert.Contains(t, ts.lastPrompt(t), "[thinking]")

	status, _, b = ts.post(t, "/api/generate", strings.Replace(body, `"stream":false`, `"stream":true`, 1))
	require.Equal(t, http.StatusOK, status, string(b))
	var thinking, response strings.Builder
	for _, l := range ollamaLines(t, b) {
		thinking.WriteString(l.Thinking)
		response.WriteString(*l.Response)
	}
	assert.Equal(t, "Once upon a time.", thinking.String())
	assert.Equal(t, "The end.", response.String())

	status, _, b = ts.post(t, "/api/chat", fmt.Sprintf(`{"model":%q,"think":"max","stream":false,"messages":[{"role":"user","content":"x"}]}`, testModel))
	require.Equal(t, http.StatusOK, status, string(b))
	require.NoError(t, json.Unmarshal(b, &one))
	assert.Equal(t, "Once upon a time.", one.Message.Thinking)

	// "max" is "high" for a harmony model, thinking alone for the others.
	for harmony, want := range map[bool]map[string]any{
		false: {"enable_thinking": true},
		true:  {"enable_thinking": true, "reasoning_effort": "high"},
	} {
		s := &Server{o: ServerOptions{Harmony: harmony}}
		got, err := s.ollamaThink(json.RawMessage(`"max"`))
		require.NoError(t, err)
		assert.Equal(t, want, got, "harmony %v", harmony)
	}
}

// TestOllamaOptions: integer options written as floats are taken when
// whole; num_predict 0 and below is the rest of the context; seed -1 is
// random.
func TestOllamaOptions(t *testing.T) {
	ts := newTestServer(t, serverConfig{context: 64})
	for opts, want := range map[string]int{`{"num_predict":6.0}`: 6, `{"num_predict":1e1,"top_k":40.0,"seed":7.0}`: 10} {
		status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"a","stream":false,"options":%s}`, testModel, opts))
		require.Equal(t, http.StatusOK, status, string(b))
		var one ollamaResponse
		require.NoError(t, json.Unmarshal(b, &one))
		assert.Equal(t, want, one.EvalCount, opts)
	}
	for _, n := range []string{"0", "-1", "-2"} {
		status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"a","stream":false,"options":{"num_predict":%s}}`, testModel, n))
		require.Equal(t, http.StatusOK, status, "num_predict %s: %s", n, b)
		var one ollamaResponse
		require.NoError(t, json.Unmarshal(b, &one))
		assert.Positive(t, one.EvalCount)
		assert.LessOrEqual(t, one.PromptEvalCount+one.EvalCount, 64)
	}
	for opts, param := range map[string]string{`{"num_predict":1.5}`: "num_predict", `{"top_k":"x"}`: "top_k", `{"temperature":"hot"}`: "temperature", `{"stop":"x"}`: "stop"} {
		status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"a","options":%s}`, testModel, opts))
		assert.Equal(t, http.StatusBadRequest, status, opts)
		assert.Contains(t, ollamaError(t, b), param)
	}
	o, err := ts.srv.ollamaOverrides(&ollamaCommon{Options: map[string]json.RawMessage{"seed": json.RawMessage("-1")}})
	require.NoError(t, err)
	assert.Nil(t, o.Seed, "seed -1 is random")
	o, err = ts.srv.ollamaOverrides(&ollamaCommon{Options: map[string]json.RawMessage{"seed": json.RawMessage("42.0")}})
	require.NoError(t, err)
	require.NotNil(t, o.Seed)
	assert.EqualValues(t, 42, *o.Seed)
}

// TestOllamaGenerateContext: the answer's context (prompt and answer
// tokens, not under raw) continues in the next request; raw refuses
// system, template and context; template is refused; an empty prompt
// with keep_alive 0 unloads.
func TestOllamaGenerateContext(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	prompt := ts.chatPrompt(t, "Once upon a time")
	wantIDs, _, _ := ts.expect(prompt, 6)
	status, _, b := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","stream":false,"options":{"num_predict":6}}`, testModel))
	require.Equal(t, http.StatusOK, status, string(b))
	var one ollamaResponse
	require.NoError(t, json.Unmarshal(b, &one))
	context := append(slices.Clone(prompt), wantIDs...)
	assert.Equal(t, context, one.Context)

	// Streamed, the last line carries it.
	status, _, b = ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Once upon a time","options":{"num_predict":6}}`, testModel))
	require.Equal(t, http.StatusOK, status, string(b))
	lines := ollamaLines(t, b)
	assert.Equal(t, context, lines[len(lines)-1].Context)

	ctxJSON, _ := json.Marshal(context)
	status, _, b = ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"And then?","context":%s,"stream":false,"options":{"num_predict":2}}`, testModel, ctxJSON))
	require.Equal(t, http.StatusOK, status, string(b))
	require.NoError(t, json.Unmarshal(b, &one))
	next := ts.chatPrompt(t, "And then?")
	assert.Equal(t, len(context)+len(next), one.PromptEvalCount)
	ts.engine.mu.Lock()
	last := slices.Clone(ts.engine.last)
	ts.engine.mu.Unlock()
	assert.Equal(t, append(slices.Clone(context), next...), last)

	status, _, b = ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"a","raw":true,"stream":false,"options":{"num_predict":2}}`, testModel))
	require.Equal(t, http.StatusOK, status, string(b))
	one.Context = nil
	require.NoError(t, json.Unmarshal(b, &one))
	assert.Empty(t, one.Context, "no context under raw")

	for body, want := range map[string]string{
		`"raw":true,"system":"s"`:               "raw mode does not support template, system, or context",
		`"raw":true,"context":[1,2]`:            "raw mode does not support template, system, or context",
		`"raw":true,"template":"{{ .Prompt }}"`: "raw mode does not support template, system, or context",
		`"template":"{{ .Prompt }}"`:            "template is not supported",
		`"context":[100000]`:                    "outside the vocabulary",
	} {
		status, _, b = ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"a",%s}`, testModel, body))
		assert.Equal(t, http.StatusBadRequest, status, body)
		assert.Contains(t, ollamaError(t, b), want, body)
	}

	for path, body := range map[string]string{
		"/api/generate": `{"model":"` + testModel + `","keep_alive":0}`,
		"/api/chat":     `{"model":"` + testModel + `","messages":[],"keep_alive":"0s"}`,
	} {
		status, _, b = ts.post(t, path, body)
		require.Equal(t, http.StatusOK, status, string(b))
		require.NoError(t, json.Unmarshal(b, &one))
		assert.True(t, one.Done, path)
		assert.Equal(t, "unload", one.DoneReason, path)
	}
}

// TestOllamaChatMessages: roles are lowercased before they are checked,
// and a tool result's tool_call_id reaches the template.
func TestOllamaChatMessages(t *testing.T) {
	tmpl := "{% for m in messages %}{{ m.role }}{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}: {{ m.content }}\n{% endfor %}assistant:"
	ts := newTestServer(t, serverConfig{template: tmpl})
	body := fmt.Sprintf(`{"model":%q,"stream":false,"options":{"num_predict":1},"messages":[{"role":"USER","content":"Weather?"},`+
		`{"role":"Assistant","content":"","tool_calls":[{"id":"call_abc","function":{"name":"get_weather","arguments":{}}}]},`+
		`{"role":"tool","tool_call_id":"call_abc","content":"sunny"}]}`, testModel)
	status, _, b := ts.post(t, "/api/chat", body)
	require.Equal(t, http.StatusOK, status, string(b))
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, "user: Weather?\nassistant: \ntool[call_abc]: sunny\nassistant:")
}
