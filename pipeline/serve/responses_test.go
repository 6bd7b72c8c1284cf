package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Responses API is tested through the official openai-go client
// (client.Responses.New and NewStreaming), its streamed events fed to the
// SDK's ResponseAccumulator, against the fake model of server_test.go.

// streamed is what a streamed response gave: its events, their types,
// and the response the SDK's accumulator rebuilt from them.
type streamed struct {
	events []responses.ResponseStreamEventUnion
	types  []string
	final  *responses.Response
	acc    responses.ResponseAccumulatorSnapshot
}

// streamResponse sends params streamed; every event's sequence_number
// must be its index.
func streamResponse(t *testing.T, c *openai.Client, params responses.ResponseNewParams, opts ...option.RequestOption) streamed {
	t.Helper()
	stream := c.Responses.NewStreaming(context.Background(), params, opts...)
	var out streamed
	var acc responses.ResponseAccumulator
	for stream.Next() {
		ev := stream.Current()
		assert.EqualValues(t, len(out.events), ev.SequenceNumber, "event %d (%s)", len(out.events), ev.Type)
		out.events, out.types = append(out.events, ev), append(out.types, ev.Type)
		var se responses.ResponsesServerEventUnion
		require.NoError(t, json.Unmarshal([]byte(ev.RawJSON()), &se), ev.RawJSON())
		require.NoError(t, acc.AddEvent(se), ev.RawJSON())
	}
	require.NoError(t, stream.Err())
	final, err := acc.ReconstructedResponse()
	require.NoError(t, err)
	out.final, out.acc = final, acc.Snapshot()
	return out
}

// deltas joins the deltas of the events of type typ.
func (s streamed) deltas(typ string) string {
	var b strings.Builder
	for _, ev := range s.events {
		if ev.Type == typ {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

func inputText(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// Plain text: instructions and an input string render as chat's system
// and user messages, so the answer is the text /v1/chat/completions gives
// for that conversation, with its usage; max_output_tokens reached makes
// the response incomplete (reason max_output_tokens). Streamed, the
// events come in the SDK's order with their sequence numbers, the deltas
// join to the whole text, and the SDK's accumulator rebuilds the whole
// response.
func TestResponses(t *testing.T) {
	ts := newTestServer(t, serverConfig{apiKey: testKey})
	c := ts.client(testKey)
	params := responses.ResponseNewParams{Model: testModel, Instructions: openai.String("Be brief."), Input: inputText("Tell me a story"),
		MaxOutputTokens: openai.Int(12), Metadata: shared.Metadata{"k": "v"}, Store: openai.Bool(true), User: openai.String("u1")}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	chat, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: testModel,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Tell me a story")},
		MaxCompletionTokens: openai.Int(12)})
	require.NoError(t, err)
	require.Equal(t, "length", chat.Choices[0].FinishReason, "the fake model's chain does not end in 12 tokens")
	assert.Equal(t, chat.Choices[0].Message.Content, resp.OutputText())
	assert.True(t, strings.HasPrefix(resp.ID, "resp_"), resp.ID)
	assert.Equal(t, "response", string(resp.Object))
	assert.Equal(t, testModel, resp.Model)
	assert.InDelta(t, time.Now().Unix(), resp.CreatedAt, 5)
	assert.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
	assert.Equal(t, "max_output_tokens", resp.IncompleteDetails.Reason)
	assert.EqualValues(t, chat.Usage.PromptTokens, resp.Usage.InputTokens)
	assert.EqualValues(t, chat.Usage.CompletionTokens, resp.Usage.OutputTokens)
	assert.EqualValues(t, chat.Usage.TotalTokens, resp.Usage.TotalTokens)
	assert.Zero(t, resp.Usage.OutputTokensDetails.ReasoningTokens)
	require.Len(t, resp.Output, 1)
	msg := resp.Output[0]
	assert.Equal(t, "message", msg.Type)
	assert.Equal(t, "assistant", msg.Role)
	assert.Equal(t, "incomplete", msg.Status)
	assert.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	// The request's settings, echoed.
	assert.Equal(t, "Be brief.", resp.Instructions.OfString)
	assert.EqualValues(t, 12, resp.MaxOutputTokens)
	assert.Equal(t, "v", resp.Metadata["k"])
	assert.True(t, resp.ParallelToolCalls)
	assert.Equal(t, responses.ToolChoiceOptionsAuto, resp.ToolChoice.OfToolChoiceMode)
	assert.Empty(t, resp.Tools)
	assert.Equal(t, "text", resp.Text.Format.Type)
	assert.Equal(t, "disabled", string(resp.Truncation))
	assert.EqualValues(t, 1, resp.TopP)

	s := streamResponse(t, c, params)
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, s.types[:4])
	n := len(s.types)
	assert.Equal(t, []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"}, s.types[n-4:])
	for _, typ := range s.types[4 : n-4] {
		assert.Equal(t, "response.output_text.delta", typ)
	}
	assert.Greater(t, n-8, 3, "the text comes in pieces")
	assert.Equal(t, resp.OutputText(), s.deltas("response.output_text.delta"))
	assert.Equal(t, resp.OutputText(), s.acc.OutputText())
	assert.Equal(t, resp.OutputText(), s.final.OutputText())
	assert.Equal(t, responses.ResponseStatusIncomplete, s.final.Status)
	assert.Equal(t, resp.Usage.OutputTokens, s.final.Usage.OutputTokens)
	assert.Equal(t, responses.ResponseStatusInProgress, s.events[0].Response.Status)

	wrong := ts.client("wrong")
	_, err = wrong.Responses.New(context.Background(), params)
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 401, apiErr.StatusCode)
}

// A model that ends its answer: status completed, the message completed,
// completed_at set, whole and streamed; a list of input items (the easy
// form, a developer message, text parts joined as chat joins them)
// renders the prompt chat renders.
func TestResponsesCompleted(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode("Once upon a time.", false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids})
	c := ts.client("")
	params := responses.ResponseNewParams{Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Be brief.", responses.EasyInputMessageRoleDeveloper),
		responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
			responses.ResponseInputContentParamOfInputText("Tell me"), responses.ResponseInputContentParamOfInputText("a story")}, responses.EasyInputMessageRoleUser),
	}}}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	prompt := ts.lastPrompt(t)
	assert.Equal(t, "Once upon a time.", strings.TrimSpace(resp.OutputText()))
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	assert.Equal(t, "completed", resp.Output[0].Status)
	assert.NotZero(t, resp.CompletedAt)
	assert.EqualValues(t, len(ids)+1, resp.Usage.OutputTokens, "the text and EOS")

	status, _, body := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"system","content":"Be brief."},`+
		`{"role":"user","content":[{"type":"text","text":"Tell me"},{"type":"text","text":"a story"}]}]}`)
	require.Equal(t, 200, status, string(body))
	assert.Equal(t, ts.lastPrompt(t), prompt, "the prompt chat renders")

	s := streamResponse(t, c, params)
	assert.Equal(t, "response.completed", s.types[len(s.types)-1])
	assert.Equal(t, resp.OutputText(), s.final.OutputText())
	assert.Equal(t, responses.ResponseStatusCompleted, s.final.Status)
}

// A model's hermes call comes back as a function_call item (call_id,
// name, arguments as a JSON string) after the message of its text, whole
// and streamed (function_call_arguments events, the accumulator); the
// output items sent back as input, with a function_call_output, render
// the prompt chat renders for the same conversation.
func TestResponsesTools(t *testing.T) {
	const answer = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ts := toolServer(t, answer)
	c := ts.client("")
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: openai.String("Get the weather"),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	params := responses.ResponseNewParams{Model: testModel, Input: inputText("Weather in Paris?"), Tools: []responses.ToolUnionParam{tool}, MaxOutputTokens: openai.Int(128)}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	assert.Contains(t, ts.lastPrompt(t), `"name": "get_weather"`, "the tool reached the template")
	check := func(out []responses.ResponseOutputItemUnion) {
		t.Helper()
		require.Len(t, out, 2)
		assert.Equal(t, "message", out[0].Type)
		assert.Equal(t, "Checking.", strings.TrimSpace(out[0].Content[0].Text))
		call := out[1].AsFunctionCall()
		assert.Equal(t, "function_call", out[1].Type)
		assert.Equal(t, "get_weather", call.Name)
		assert.JSONEq(t, `{"city":"Paris"}`, call.Arguments)
		assert.True(t, strings.HasPrefix(call.CallID, "call_"), call.CallID)
		assert.True(t, strings.HasPrefix(call.ID, "fc_"), call.ID)
		assert.Equal(t, responses.ResponseFunctionToolCallStatusCompleted, call.Status)
	}
	check(resp.Output)
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	assert.Equal(t, "get_weather", resp.Tools[0].Name, "the tools echoed")

	s := streamResponse(t, c, params)
	check(s.final.Output)
	assert.NotContains(t, s.deltas("response.output_text.delta"), "tool_call", "no markup in the streamed text")
	assert.JSONEq(t, `{"city":"Paris"}`, s.deltas("response.function_call_arguments.delta"))
	require.Len(t, s.acc.Output, 2)
	assert.Equal(t, "get_weather", s.acc.Output[1].Name)
	assert.JSONEq(t, `{"city":"Paris"}`, s.acc.Output[1].Arguments)
	assert.Equal(t, []string{"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed"}, s.types[len(s.types)-5:])

	// The output, as the SDK returned it, goes back with the call's
	// output: the template gets what chat's messages give it.
	var raw struct {
		Output []json.RawMessage `json:"output"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.RawJSON()), &raw))
	callID := resp.Output[1].AsFunctionCall().CallID
	input := []any{map[string]any{"role": "user", "content": "Weather in Paris?"}}
	for _, item := range raw.Output {
		input = append(input, item)
	}
	input = append(input, map[string]any{"type": "function_call_output", "call_id": callID, "output": `{"temp": 21}`})
	next := params
	next.Input = responses.ResponseNewParamsInputUnion{}
	_, err = c.Responses.New(context.Background(), next, option.WithJSONSet("input", input))
	requireNoAPIError(t, err)
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, `tool: {"temp": 21}`)

	content, err := json.Marshal(resp.Output[0].Content[0].Text)
	require.NoError(t, err)
	status, _, body := ts.post(t, "/v1/chat/completions", `{"max_tokens":128,"messages":[{"role":"user","content":"Weather in Paris?"},`+
		`{"role":"assistant","content":`+string(content)+`,"tool_calls":[{"id":"`+callID+`","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},`+
		`{"role":"tool","tool_call_id":"`+callID+`","content":"{\"temp\": 21}"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}}}]}`)
	require.Equal(t, 200, status, string(body))
	assert.Equal(t, ts.lastPrompt(t), prompt)
}

// Earlier turns as items: function calls join the assistant message
// before them, a reasoning item's text (its content, else its summary,
// else the encrypted_content this server wrote, which Codex sends back
// alone) is the next assistant message's reasoning (reasoning_content in the
// template), the arguments reach the template as an object, as chat's
// do; a thought no assistant message follows is dropped.
func TestResponsesHistory(t *testing.T) {
	const tmpl = "{% for m in messages %}{{ m.role }}:{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}{{ m.content }}" +
		"{% for tc in m.tool_calls %}<{{ tc.id }} {{ tc.function.name }} {{ tc.function.arguments | tojson }}>{% endfor %}\n{% endfor %}assistant:"
	ts := newTestServer(t, serverConfig{template: tmpl})
	status, _, body := ts.post(t, "/v1/responses", `{"max_output_tokens":1,"instructions":"Sys.","input":[`+
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather?"}]},`+
		`{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Need it."}]},`+
		`{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},`+
		`{"type":"function_call","id":"fc_1","call_id":"c1","name":"get_weather","arguments":"{\"city\": \"Oslo\"}","status":"completed"},`+
		`{"type":"function_call","call_id":"c2","name":"now","arguments":""},`+
		`{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"21"}]},`+
		`{"type":"function_call_output","call_id":"c2","output":"noon"},`+
		`{"type":"reasoning","summary":[{"type":"summary_text","text":"Warm."}]},{"role":"assistant","content":"It is 21."},{"role":"user","content":"Thanks."},`+
		`{"type":"reasoning","summary":[],"encrypted_content":"Polite."},{"role":"assistant","content":"Welcome."},{"role":"user","content":"Bye."},`+
		`{"type":"reasoning","summary":[{"type":"summary_text","text":"dropped: no assistant message follows"}]}]}`)
	require.Equal(t, 200, status, string(body))
	prompt := ts.lastPrompt(t)
	assert.Equal(t, "system:Sys.user:Weather?assistant:[Need it.]Checking.<c1 get_weather {\"city\": \"Oslo\"}><c2 now \"\">tool:21tool:noonassistant:[Warm.]It is 21.user:Thanks.assistant:[Polite.]Welcome.user:Bye.assistant:", prompt)
}

// tool_choice "required" and a named function force a call through the
// chat path's grammar: a model that would answer in prose calls anyway,
// with arguments valid against the schema.
func TestResponsesToolChoiceForced(t *testing.T) {
	bounded := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(true),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false}}}
	clock := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "now", Parameters: map[string]any{"type": "object"}}}
	for _, tc := range []struct {
		name   string
		choice responses.ResponseNewParamsToolChoiceUnion
		want   string
	}{
		{"required", responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}, ""},
		{"named", responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}}, "get_weather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := loadTestTokenizer(t).Encode("I think it is sunny.", false)
			require.NoError(t, err)
			ts := newTestServer(t, serverConfig{script: ids, template: toolTemplate, context: 4096})
			resp, err := ts.client("").Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: inputText("Weather?"),
				MaxOutputTokens: openai.Int(3000), Tools: []responses.ToolUnionParam{bounded, clock}, ToolChoice: tc.choice, ParallelToolCalls: openai.Bool(false)})
			requireNoAPIError(t, err)
			require.Len(t, resp.Output, 1, "one call, and no message")
			call := resp.Output[0].AsFunctionCall()
			require.Equal(t, "function_call", resp.Output[0].Type)
			if tc.want != "" {
				assert.Equal(t, tc.want, call.Name)
			}
			switch call.Name {
			case "get_weather":
				validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Arguments)
			case "now":
				validates(t, `{"type":"object"}`, call.Arguments)
			default:
				t.Errorf("called %q", call.Name)
			}
			assert.False(t, resp.ParallelToolCalls)
		})
	}
}

// text.format json_schema (strict) holds a prose model to the schema:
// the output text validates, whole and streamed.
func TestResponsesStructured(t *testing.T) {
	ids, err := loadTestTokenizer(t).Encode("Sure! Here is some JSON for you.", false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids})
	c := ts.client("")
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(testSchema), &schema))
	params := responses.ResponseNewParams{Model: testModel, Input: inputText("A color and a digit?"), MaxOutputTokens: openai.Int(400),
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
			Name: "answer", Schema: schema, Strict: openai.Bool(true)}}}}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	assert.Equal(t, responses.ResponseStatusCompleted, resp.Status)
	validates(t, testSchema, resp.OutputText())
	assert.Equal(t, "json_schema", resp.Text.Format.Type, "the format echoed")
	assert.Equal(t, "answer", resp.Text.Format.Name)

	s := streamResponse(t, c, params)
	assert.Equal(t, resp.OutputText(), s.final.OutputText())

	// json_object: a model that writes an object keeps it.
	obj, err := loadTestTokenizer(t).Encode(`{"a": [1, "two"]}`, false)
	require.NoError(t, err)
	status, _, body := newTestServer(t, serverConfig{script: obj}).post(t, "/v1/responses", `{"input":"x","text":{"format":{"type":"json_object"}}}`)
	require.Equal(t, 200, status, string(body))
	var out struct {
		Output []struct {
			Content []struct{ Text string }
		}
	}
	require.NoError(t, json.Unmarshal(body, &out))
	assert.JSONEq(t, `{"a": [1, "two"]}`, out.Output[0].Content[0].Text)
}

// A thinking model's thought is a reasoning item (its text a
// reasoning_text part) before the message, whole and streamed
// (reasoning_text deltas); reasoning.effort reaches the template as chat's
// reasoning_effort; usage counts the thought's tokens.
func TestResponsesReasoning(t *testing.T) {
	ts := thinkingServer(t, "<think>\nTwo and two.\n</think>\n\nIt is four.")
	c := ts.client("")
	params := responses.ResponseNewParams{Model: testModel, Input: inputText("What is 2+2?"), MaxOutputTokens: openai.Int(64),
		Reasoning: shared.ReasoningParam{Effort: shared.ReasoningEffortHigh}}
	check := func(r *responses.Response) {
		t.Helper()
		require.Len(t, r.Output, 2)
		rs := r.Output[0]
		assert.Equal(t, "reasoning", rs.Type)
		assert.True(t, strings.HasPrefix(rs.ID, "rs_"), rs.ID)
		require.Len(t, rs.Content, 1)
		assert.Equal(t, "reasoning_text", rs.Content[0].Type)
		assert.Equal(t, "Two and two.\n", rs.Content[0].Text)
		assert.Equal(t, "message", r.Output[1].Type)
		assert.Equal(t, "It is four.", r.OutputText(), "no thought in the text")
	}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	check(resp)
	assert.True(t, strings.HasSuffix(ts.lastPrompt(t), "[high]"), ts.lastPrompt(t))
	assert.Equal(t, shared.ReasoningEffortHigh, resp.Reasoning.Effort)
	rt := resp.Usage.OutputTokensDetails.ReasoningTokens
	assert.Greater(t, rt, int64(2))
	assert.Less(t, rt, resp.Usage.OutputTokens)

	assert.Empty(t, resp.Output[0].EncryptedContent, "not asked for")

	// include reasoning.encrypted_content: the thought (plain text) for a
	// client that sends items back without their content.
	enc := params
	enc.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	er, err := c.Responses.New(context.Background(), enc)
	requireNoAPIError(t, err)
	assert.Equal(t, "Two and two.\n", er.Output[0].EncryptedContent)
	assert.Equal(t, "Two and two.\n", streamResponse(t, c, enc).final.Output[0].EncryptedContent)

	s := streamResponse(t, c, params)
	check(s.final)
	assert.Equal(t, "Two and two.\n", s.deltas("response.reasoning_text.delta"))
	assert.Equal(t, "It is four.", s.deltas("response.output_text.delta"))
	assert.Equal(t, rt, s.final.Usage.OutputTokensDetails.ReasoningTokens)
	for i, typ := range []string{"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta"} {
		assert.Equal(t, typ, s.types[2+i])
	}
	// An answer cut in its thought is a reasoning item alone, incomplete.
	cut := params
	cut.MaxOutputTokens = openai.Int(12)
	resp, err = c.Responses.New(context.Background(), cut)
	requireNoAPIError(t, err)
	require.Len(t, resp.Output, 1)
	assert.Equal(t, "reasoning", resp.Output[0].Type)
	assert.Equal(t, "Two and", resp.Output[0].Content[0].Text)
	assert.Equal(t, "incomplete", resp.Output[0].Status)
	assert.Equal(t, responses.ResponseStatusIncomplete, resp.Status)
}

// Truncation "auto" drops the oldest turns (the instructions kept) until
// the input fits; "disabled", the default, answers the 400 of chat, in
// the Responses request's names.
func TestResponsesTruncation(t *testing.T) {
	ts := newTestServer(t, serverConfig{context: 96})
	long := strings.Repeat("Once upon a time there was a cat. ", 6)
	body := func(truncation string) string {
		return `{"instructions":"Sys.","max_output_tokens":8,"truncation":"` + truncation + `","input":[` +
			`{"role":"user","content":"` + long + `"},{"role":"assistant","content":"` + long + `"},` +
			`{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Tell me a story"}]}`
	}
	status, _, b := ts.post(t, "/v1/responses", body("disabled"))
	require.Equal(t, 400, status, string(b))
	e := decodeError(t, b)
	assert.Equal(t, "input", *e.Param)
	assert.Equal(t, "context_length_exceeded", e.Code)
	assert.Contains(t, e.Message, "max_output_tokens")
	assert.NotContains(t, e.Message, "max_completion_tokens")

	status, _, b = ts.post(t, "/v1/responses", body("auto"))
	require.Equal(t, 200, status, string(b))
	prompt := ts.lastPrompt(t)
	assert.True(t, strings.HasSuffix(prompt, "system: Sys.\nuser: Hi\nassistant: Hello\nuser: Tell me a story\nassistant:"), "the first turn dropped, no more: %q", prompt)
	assert.NotContains(t, prompt, "Once upon")
	var resp struct{ Truncation string }
	require.NoError(t, json.Unmarshal(b, &resp))
	assert.Equal(t, "auto", resp.Truncation)

	status, _, b = ts.post(t, "/v1/responses", `{"truncation":"auto","max_output_tokens":8,"input":"`+long+long+`"}`)
	assert.Equal(t, 400, status, "nothing to drop: %s", b)
}

// What a stateless text server cannot do is a 400 in OpenAI's shape,
// naming the field.
func TestResponsesRefused(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: toolTemplate})
	for _, tc := range []struct{ body, param, want string }{
		{`{"input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", "stateless"},
		{`{"input":"hi","conversation":"conv_1"}`, "conversation", "stateless"},
		{`{"input":"hi","background":true}`, "background", "not supported"},
		{`{"input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt", "not supported"},
		{`{"input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type", `"web_search" are not supported`},
		{`{"input":"hi","tools":[{"type":"function"}]}`, "tools[0].name", "needs a name"},
		{`{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"file_search"}}`, "tool_choice.type", `"file_search" is not supported`},
		{`{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type", "allowed_tools"},
		{`{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice", `"g", which is not among the tools`},
		{`{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":"required","text":{"format":{"type":"json_object"}}}`, "text.format", "cannot be combined"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x/y.png"}]}]}`, "input[0].content[0].type", "image inputs are not supported"},
		{`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", "file inputs are not supported"},
		{`{"input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type", "stores no items"},
		{`{"input":[{"type":"web_search_call","id":"ws_1"}]}`, "input[0].type", `"web_search_call" are not supported`},
		{`{"input":[{"role":"tool","content":"x"}]}`, "input[0].role", "must be user, system, developer or assistant"},
		{`{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0]", "needs name and call_id"},
		{`{"input":[]}`, "input", "must not be empty"},
		{`{"instructions":"x"}`, "input", "input is required"},
		{`{"input":"hi","top_logprobs":21}`, "top_logprobs", "between 0 and 20"},
		{`{"input":"hi","truncation":"sometimes"}`, "truncation", "auto"},
		{`{"input":"hi","text":{"format":{"type":"xml"}}}`, "text.format.type", "json_schema"},
		{`{"input":"hi","text":{"format":{"type":"json_schema","name":"x"}}}`, "text.format.schema", "needs schema"},
		{`{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"number","multipleOf":3}}}}`, "text.format.schema", "multipleOf"},
		{`{"input":"hi","max_output_tokens":0}`, "max_output_tokens", "must be positive"},
		{`{"input":"hi","frobnicate":1}`, "frobnicate", "unknown field"},
		{`{"input":"hi","reasoning":{"effort":3}}`, "reasoning.effort", ""},
	} {
		status, _, b := ts.post(t, "/v1/responses", tc.body)
		if !assert.Equal(t, 400, status, "%s: %s", tc.body, b) {
			continue
		}
		e := decodeError(t, b)
		assert.Equal(t, "invalid_request_error", e.Type, tc.body)
		if assert.NotNil(t, e.Param, tc.body) {
			assert.Equal(t, tc.param, *e.Param, "%s: %s", tc.body, e.Message)
		}
		assert.Contains(t, e.Message, tc.want, tc.body)
	}

	// Through the SDK: an *openai.Error naming the field.
	_, err := ts.client("").Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: inputText("hi"),
		PreviousResponseID: openai.String("resp_1")})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, 400, apiErr.StatusCode)
	assert.Equal(t, "previous_response_id", apiErr.Param)

	// Another model is a 404, a GET a 405, as on chat.
	status, _, b := ts.post(t, "/v1/responses", `{"model":"other","input":"hi"}`)
	assert.Equal(t, 404, status, string(b))
	code, _ := ts.getWithKey(t, "/v1/responses", "")
	assert.Equal(t, 405, code)

	// Accepted and ignored: store, metadata, user, service_tier and the
	// like; reasoning.summary, which no summary answers; the easy
	// message form without a type.
	status, _, b = ts.post(t, "/v1/responses", `{"input":[{"role":"user","content":"hi"}],"max_output_tokens":2,"store":false,"metadata":{"a":"b"},`+
		`"user":"u","service_tier":"auto","prompt_cache_key":"k","safety_identifier":"s","include":["reasoning.encrypted_content"],`+
		`"reasoning":{"effort":"low","summary":"auto"},"truncation":"disabled","parallel_tool_calls":true,"top_logprobs":0,"stream_options":{"include_obfuscation":false}}`)
	assert.Equal(t, 200, status, string(b))
	// Codex CLI's request: its client_metadata on every request, function
	// tools, tool_choice auto, store false, the encrypted thought.
	status, _, b = ts.post(t, "/v1/responses", `{"model":"`+testModel+`","instructions":"You are Codex.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],`+
		`"tools":[{"type":"function","name":"shell","description":"Runs a command","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}}],`+
		`"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":false,`+
		`"include":["reasoning.encrypted_content"],"prompt_cache_key":"0199","client_metadata":{"x-codex-installation-id":"i"},"max_output_tokens":2}`)
	assert.Equal(t, 200, status, string(b))
}

// A generation that fails after the stream began ends it with
// response.failed carrying the error; before it, a 500.
func TestResponsesEngineFailure(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	ts.engine.mu.Lock()
	ts.engine.fail = true
	ts.engine.mu.Unlock()
	status, _, body := ts.post(t, "/v1/responses", `{"input":"Once","max_output_tokens":4}`)
	assert.Equal(t, 500, status)
	assert.Contains(t, decodeError(t, body).Message, "device lost")

	stream := ts.client("").Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: testModel, Input: inputText("Hi"), MaxOutputTokens: openai.Int(4)})
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "response.failed", last.Type)
	assert.Equal(t, responses.ResponseStatusFailed, last.Response.Status)
	assert.Contains(t, last.Response.Error.Message, "device lost")
}

// Odd but well-formed or malformed bodies are 4xx answers (or 200s),
// never 500s; a model that only embeds answers 400 naming model.
func TestResponsesOddInput(t *testing.T) {
	ts := newTestServer(t, serverConfig{template: toolTemplate})
	for _, body := range []string{
		`null`, `[]`, `"text"`, `{}`, `{"input":null}`, `{"input":5}`, `{"input":[null]}`, `{"input":[1]}`, `{"input":[[]]}`,
		`{"input":[{"type":"message"}]}`, `{"input":[{"role":"user","content":5}]}`, `{"input":[{"role":"user","content":[null]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":5}]}`, `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}`,
		`{"input":[{"type":"reasoning","content":"x"}]}`, `{"input":[{"type":"reasoning","summary":5}]}`,
		`{"input":"x","tools":[null]}`, `{"input":"x","tools":[1]}`, `{"input":"x","tools":{}}`, `{"input":"x","tools":[{"type":"function","name":"f","parameters":3}]}`,
		`{"input":"x","tool_choice":5}`, `{"input":"x","tool_choice":{}}`, `{"input":"x","text":null}`, `{"input":"x","text":{"format":5}}`,
		`{"input":"x","text":{"format":{"type":"json_schema","schema":5}}}`, `{"input":"x","reasoning":null}`, `{"input":"x","reasoning":{"effort":null}}`,
		`{"input":"x","max_output_tokens":1e400}`, `{"input":"x","temperature":"hot"}`, `{"input":"x","instructions":["a"]}`,
		`{"input":"x","parallel_tool_calls":"no"}`, `{"input":"x","truncation":null}`, `{"input":"x","stream":true,"max_output_tokens":1}`,
		"\xff\xfe", `{"input":"x","max_output_tokens":1}garbage`,
	} {
		status, _, resp := ts.post(t, "/v1/responses", body)
		if status >= 500 || status < 400 && status != http.StatusOK {
			t.Errorf("%.60q: status %d: %s", body, status, resp)
		}
	}
	ts.waitIdle(t)

	embed := newTestServer(t, serverConfig{embeddingsOnly: true})
	status, _, b := embed.post(t, "/v1/responses", `{"input":"hi"}`)
	assert.Equal(t, 400, status)
	assert.Equal(t, "model", *decodeError(t, b).Param)
}

// include message.output_text.logprobs with top_logprobs: the message's
// output_text carries each token's log-probability and alternatives, as
// chat's logprobs give them for the same answer, whole and streamed
// (the accumulator rebuilds them from the deltas'); an answer with a
// thought carries none of the thought's tokens.
func TestResponsesLogprobs(t *testing.T) {
	ts := newTestServer(t, serverConfig{})
	c := ts.client("")
	params := responses.ResponseNewParams{Model: testModel, Input: inputText("Tell me a story"), MaxOutputTokens: openai.Int(12),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs}, TopLogprobs: openai.Int(2)}
	resp, err := c.Responses.New(context.Background(), params)
	requireNoAPIError(t, err)
	chat, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: testModel,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")},
		MaxCompletionTokens: openai.Int(12), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2)})
	require.NoError(t, err)
	want := chat.Choices[0].Logprobs.Content
	check := func(what string, got []responses.ResponseOutputTextLogprob) {
		t.Helper()
		require.Len(t, got, len(want), what)
		for i := range want {
			assert.Equal(t, want[i].Token, got[i].Token, "%s token %d", what, i)
			assert.InDelta(t, want[i].Logprob, got[i].Logprob, 1e-9, "%s token %d", what, i)
			assert.Equal(t, want[i].Bytes, got[i].Bytes, "%s token %d", what, i)
			require.Len(t, got[i].TopLogprobs, 2, "%s token %d", what, i)
			assert.Equal(t, want[i].TopLogprobs[0].Token, got[i].TopLogprobs[0].Token, "%s token %d", what, i)
		}
	}
	require.Len(t, resp.Output, 1)
	check("whole", resp.Output[0].Content[0].Logprobs)
	assert.EqualValues(t, 2, resp.TopLogprobs)
	s := streamResponse(t, c, params)
	check("streamed", s.final.Output[0].Content[0].Logprobs)

	// Without include, none (top_logprobs alone only sets the
	// alternatives).
	plain := params
	plain.Include = nil
	resp, err = c.Responses.New(context.Background(), plain)
	requireNoAPIError(t, err)
	assert.Empty(t, resp.Output[0].Content[0].Logprobs)

	// A thought's tokens are not the message's.
	th := thinkingServer(t, "<think>\nTwo and two.\n</think>\n\nIt is four.")
	tr, err := th.client("").Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: inputText("What is 2+2?"),
		MaxOutputTokens: openai.Int(64), Include: []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs}})
	requireNoAPIError(t, err)
	require.Len(t, tr.Output, 2)
	var text strings.Builder
	for _, lp := range tr.Output[1].Content[0].Logprobs {
		text.WriteString(lp.Token)
	}
	assert.NotContains(t, text.String(), "Two")
	assert.True(t, strings.HasSuffix(text.String(), "It is four."), "%q", text.String())
}
