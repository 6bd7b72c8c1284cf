package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSchema has only bounded strings, so a fake model that prefers no
// token still finishes.
const testSchema = `{"type":"object","properties":{"color":{"enum":["red","green"]},"n":{"type":"integer","minimum":0,"maximum":9},"ok":{"type":"boolean"}},"required":["color","n"],"additionalProperties":false}`

// validates reports whether text is JSON valid against schema.
func validates(t *testing.T, schema, text string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("s.json", doc))
	s, err := c.Compile("s.json")
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	require.NoError(t, err, "%q does not parse", text)
	assert.NoError(t, s.Validate(inst), "%q", text)
}

func schemaFormat(t *testing.T) openai.ChatCompletionNewParamsResponseFormatUnion {
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(testSchema), &schema))
	return openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: schema, Strict: openai.Bool(true)}}}
}

// response_format json_schema through the official client: a model that
// writes a valid answer keeps it token for token; a model that would
// write prose is held to the schema, and its answer parses and
// validates, whole and streamed.
func TestResponseFormatSchema(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"follows", `{"color": "green", "n": 7}`},
		{"prose", "Sure! Here is some JSON for you."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := loadTestTokenizer(t).Encode(tc.answer, false)
			require.NoError(t, err)
			ts := newTestServer(t, serverConfig{script: ids})
			c := ts.client("")
			params := openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("A color and a digit?")},
				MaxTokens: openai.Int(400), ResponseFormat: schemaFormat(t),
			}
			resp, err := c.Chat.Completions.New(context.Background(), params)
			require.NoError(t, err)
			got := resp.Choices[0].Message.Content
			assert.Equal(t, "stop", resp.Choices[0].FinishReason)
			t.Logf("answer %q", got)
			validates(t, testSchema, got)
			if tc.name == "follows" {
				assert.Equal(t, tc.answer, strings.TrimSpace(got))
			}

			stream := c.Chat.Completions.NewStreaming(context.Background(), params)
			var streamed strings.Builder
			for stream.Next() {
				for _, cc := range stream.Current().Choices {
					streamed.WriteString(cc.Delta.Content)
				}
			}
			require.NoError(t, stream.Err())
			assert.Equal(t, got, streamed.String())
		})
	}
}

// json_object mode: the answer is a JSON object.
func TestResponseFormatJSONObject(t *testing.T) {
	const answer = `{"a": [1, "two", {"b": null}]}`
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids})
	resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("JSON please")}, MaxTokens: openai.Int(100),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	})
	require.NoError(t, err)
	assert.JSONEq(t, answer, resp.Choices[0].Message.Content)
}

// A thinking model whose prompt opened the thought thinks freely; the
// schema holds from the end of the thought.
func TestResponseFormatAfterThought(t *testing.T) {
	const answer = "Let me pick.</think>\n{\"color\": \"red\", \"n\": 3}"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	r := ThinkTags
	ts := newTestServer(t, serverConfig{script: ids, reasoning: &r,
		template: "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:<think>"})
	resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Pick")}, MaxTokens: openai.Int(200),
		ResponseFormat: schemaFormat(t),
	})
	require.NoError(t, err)
	assert.Equal(t, `{"color": "red", "n": 3}`, resp.Choices[0].Message.Content)
	var raw struct {
		Reasoning string `json:"reasoning_content"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Choices[0].Message.RawJSON()), &raw))
	assert.Equal(t, "Let me pick.", raw.Reasoning)
}

// ollama's format: a schema, and "json".
func TestOllamaFormat(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode("Well, the answer is green.", false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids})
	status, _, body := ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"Color?","stream":false,"format":%s,"options":{"num_predict":400}}`, testModel, testSchema))
	require.Equal(t, http.StatusOK, status, string(body))
	var r ollamaResponse
	require.NoError(t, json.Unmarshal(body, &r))
	require.NotNil(t, r.Response)
	validates(t, testSchema, *r.Response)

	status, _, body = ts.post(t, "/api/chat", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Color?"}],"stream":false,"format":%s,"options":{"num_predict":400}}`, testModel, testSchema))
	require.Equal(t, http.StatusOK, status, string(body))
	var cr struct {
		Message struct{ Content string }
	}
	require.NoError(t, json.Unmarshal(body, &cr))
	validates(t, testSchema, cr.Message.Content)

	status, _, body = ts.post(t, "/api/generate", fmt.Sprintf(`{"model":%q,"prompt":"x","format":"yaml"}`, testModel))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(body), `format must be \"json\" or a JSON schema`)
}

// What the grammar cannot enforce is a 400 naming it.
func TestResponseFormatRefused(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	for _, tc := range []struct{ format, extra, want string }{
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"number","multipleOf":3}}}`, "", `keyword \"multipleOf\" cannot be enforced`},
		{`{"type":"json_schema","json_schema":{"name":"x"}}`, "", "needs json_schema.schema"},
		{`{"type":"xml"}`, "", "must be text, json_object or json_schema"},
		{`{"type":"json_object"}`, `,"ignore_eos":true`, "cannot be combined with ignore_eos"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"d":{"type":"string","format":"email"}}}}}`, "", `properties.d: format \"email\"`},
	} {
		status, _, body := ts.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"response_format":%s%s}`, testModel, tc.format, tc.extra))
		assert.Equal(t, http.StatusBadRequest, status, tc.format)
		assert.Contains(t, string(body), tc.want, tc.format)
		assert.Contains(t, string(body), `"param":"response_format`, tc.format)
	}
}
