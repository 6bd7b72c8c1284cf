package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
		{"unknown model", "/api/generate", `{"model":"llama3","prompt":"a"}`, 404, "llama3"},
		{"malformed", "/api/chat", `{"model":`, 400, "invalid JSON"},
		{"images", "/api/generate", `{"model":"` + testModel + `","prompt":"a","images":["aGk="]}`, 400, "images"},
		{"tools", "/api/chat", `{"model":"` + testModel + `","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}`, 400, "tool"},
		{"format", "/api/generate", `{"model":"` + testModel + `","prompt":"a","format":"yaml"}`, 400, "format"},
		{"bad option", "/api/generate", `{"model":"` + testModel + `","prompt":"a","options":{"top_p":3}}`, 400, "top_p"},
		{"beyond context", "/api/generate", `{"model":"` + testModel + `","prompt":"a","options":{"num_predict":100000}}`, 400, "512"},
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
// read first, behind the API key like the rest of /api.
func TestOllamaTagsAndVersion(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: "k"})
	ts.srv.o.Version, ts.srv.o.Family = "1.2.3", "LlamaForCausalLM"
	get := func(path, key string) (int, []byte) { return ts.getWithKey(t, path, key) }
	code, body := get("/api/tags", "k")
	require.Equal(t, http.StatusOK, code, string(body))
	var tags struct {
		Models []struct {
			Name, Model string
			Details     struct{ Family string }
		}
	}
	require.NoError(t, json.Unmarshal(body, &tags))
	require.Len(t, tags.Models, 1)
	assert.Equal(t, testModel, tags.Models[0].Name)
	assert.Equal(t, "LlamaForCausalLM", tags.Models[0].Details.Family)
	code, body = get("/api/version", "k")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"version":"1.2.3"}`, string(body))
	code, _ = get("/api/tags", "")
	assert.Equal(t, http.StatusUnauthorized, code)
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

	status, _, b = ts.post(t, "/api/chat", fmt.Sprintf(`{"model":%q,"think":"max","messages":[{"role":"user","content":"x"}]}`, testModel))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(b), "think must be")
}
