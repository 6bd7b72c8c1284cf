package serve

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/constrain"
)

// The parsers read each format's calls, whole and fed in pieces of any
// size, and give back text that holds no call unchanged.
func TestToolParser(t *testing.T) {
	obj := func(name, args string) toolCall { return toolCall{Name: name, Arguments: args, Object: true} }
	types := map[string]map[string]string{"get_weather": {"city": "string", "days": "integer", "metric": "boolean", "at": "number", "opts": "object"}}
	for _, c := range []struct {
		format  ToolFormat
		text    string
		content string
		calls   []toolCall
	}{
		{ToolsHermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"Let me check.\n", []toolCall{obj("get_weather", `{"city":"Paris"}`)}},
		{ToolsHermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>",
			"", []toolCall{obj("a", `{}`), obj("b", `{"x":1}`)}},
		// Arguments that are not an object are kept, as the model wrote
		// them: JSON compacted, other text as it is.
		{ToolsHermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":\"x\"}</tool_call><tool_call>{\"name\":\"c\",\"arguments\":[1, 2]}</tool_call>",
			"", []toolCall{obj("a", `{}`), {"b", "x", false}, {"c", "[1,2]", false}}},
		{ToolsHermes, "No tools needed.", "No tools needed.", nil},
		{ToolsHermes, "Broken <tool_call>{not json</tool_call>", "Broken <tool_call>{not json</tool_call>", nil},
		{ToolsMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"b\"}]",
			"", []toolCall{obj("get_weather", `{"city":"Paris"}`), obj("b", `{}`)}},
		// Tokenizer v11's form, with and without a call id, in either
		// mistral format.
		{ToolsMistralArgs, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
			"", []toolCall{obj("get_weather", `{"city":"Paris"}`), obj("get_time", `{}`)}},
		{ToolsMistral, "Sure. [TOOL_CALLS]f[ARGS]{\"q\": [1]}", "Sure. ", []toolCall{obj("f", `{"q":[1]}`)}},
		{ToolsMistralArgs, "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS][ARGS]{}", nil}, // no name
		{ToolsLlama3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", []toolCall{obj("get_weather", `{"city":"Paris"}`)}},
		{ToolsLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", []toolCall{obj("f", `{}`)}},
		{ToolsLlama3, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": \";\"}}",
			"", []toolCall{obj("a", `{}`), obj("b", `{"x":";"}`)}},
		{ToolsLlama3, "{\"name\": \"a\", \"parameters\": {}} and more", "{\"name\": \"a\", \"parameters\": {}} and more", nil},
		{ToolsLlama3, "{\"answer\": 4}", "{\"answer\": 4}", nil}, // JSON, but no call
		{ToolsLlama3, "It is {\"name\": \"x\"}", "It is {\"name\": \"x\"}", nil},
		// Qwen3-Coder / Qwen3.5: values typed by the tool's schema.
		{ToolsQwenXML, "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, \"CA\"\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=at>\n1.50\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=extra>\n7\n</parameter>\n</function>\n</tool_call>",
			"Checking.\n", []toolCall{obj("get_weather", `{"city":"San Francisco, \"CA\"","days":3,"metric":true,"at":1.5,"opts":{"a":[1]},"extra":"7"}`)}},
		// Values that are not their type stay text; null is null but
		// for a string; a call cut short still parses; hermes JSON calls
		// are read too.
		{ToolsQwenXML, "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=city>\nnull\n</parameter>\n<parameter=at>\nNull\n</parameter>\n<parameter=opts>\n{bad\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC",
			"", []toolCall{obj("get_weather", `{"days":"three","city":"null","at":null,"opts":"{bad"}`), obj("get_time", `{"tz":"UTC"}`)}},
		{ToolsQwenXML, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "", []toolCall{obj("f", `{}`)}},
		// GLM-4.5: a string parameter's value is its text; the others'
		// are JSON where the text is (the template writes them with
		// tojson), else text; the name is the text before the first key.
		{ToolsGLM, "<think>Weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>San Francisco, \"CA\"</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"a\": [1]}</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>[7]</arg_value>\n<arg_key>note</arg_key>\n<arg_value>not json</arg_value>\n</tool_call>",
			"<think>Weather.</think>\n", []toolCall{obj("get_weather", `{"city":"San Francisco, \"CA\"","days":3,"metric":true,"opts":{"a":[1]},"extra":[7],"note":"not json"}`)}},
		{ToolsGLM, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n</tool_call><tool_call>get_time\n</tool_call><tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>thr",
			"", []toolCall{obj("get_weather", `{"city":"123"}`), obj("get_time", `{}`), obj("get_weather", `{"days":"thr"}`)}},
		{ToolsGLM, "<tool_call>\n<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>", "<tool_call>\n<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>", nil}, // no name
		// MiniMax-M2: invokes inside one block, values typed as qwen_xml's.
		{ToolsMiniMax, "Checking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n<parameter name=\"metric\">True</parameter>\n</invoke>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">UTC</parameter>\n</invoke>\n</minimax:tool_call>",
			"Checking.\n", []toolCall{obj("get_weather", `{"city":"Paris","days":3,"metric":true}`), obj("get_time", `{"tz":"UTC"}`)}},
		{ToolsMiniMax, "<minimax:tool_call><invoke name=get_weather><parameter name=days>three</parameter><parameter name=\"at\">null", "",
			[]toolCall{obj("get_weather", `{"days":"three","at":null}`)}},
		// A value ends at its close tag whatever tags it holds; quotes
		// may be single; an integer is written as JSON ("+5" is 5); a
		// value is trimmed (vLLM strips it).
		{ToolsMiniMax, "<minimax:tool_call><invoke name='get_weather'><parameter name='city'>\n  see <parameters> here \n</parameter><parameter name=\"days\">+5</parameter></invoke></minimax:tool_call>", "",
			[]toolCall{obj("get_weather", `{"city":"see \u003cparameters\u003e here","days":5}`)}},
		{ToolsGLM, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a<arg_key>b</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>True</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>None</arg_value>\n</tool_call>", "",
			[]toolCall{obj("get_weather", `{"city":"a\u003carg_key\u003eb","metric":true,"opts":null}`)}},
		{ToolsQwenXML, "<tool_call>\n<function=get_weather>\n<parameter=days>\n007\n</parameter>\n</function>\n</tool_call>", "", []toolCall{obj("get_weather", `{"days":7}`)}},
		// LFM2's pythonic calls: Python literals (quotes of either kind,
		// True/None, tuples, a dict with a number key, escapes, triple
		// quotes, trailing commas, underscores in numbers) as JSON.
		{ToolsPythonic, "Let me check.\n<|tool_call_start|>[get_weather(city=\"Paris\", days=3)]<|tool_call_end|>",
			"Let me check.\n", []toolCall{obj("get_weather", `{"city":"Paris","days":3}`)}},
		{ToolsPythonic, "<|tool_call_start|>[get_weather(city='San Francisco, \"CA\"', metric=True, at=1.50, opts={'a': [1, (2, 3)], 7: None},), get_time()]<|tool_call_end|>",
			"", []toolCall{obj("get_weather", `{"city":"San Francisco, \"CA\"","metric":true,"at":1.5,"opts":{"a":[1,[2,3]],"7":null}}`), obj("get_time", `{}`)}},
		{ToolsPythonic, "<|tool_call_start|>[f(s=\"a\\nb\\u00e9\\x41\\q\\/\\ud83d\\ude00\", t='''two\nlines''', n=-2_500, e=1e3, z=False)]<|tool_call_end|>",
			"", []toolCall{obj("f", `{"s":"a\nbéA\\q/😀","t":"two\nlines","n":-2500,"e":1000,"z":false}`)}},
		{ToolsPythonic, "<|tool_call_start|>f(x=1, x=2)<|tool_call_end|>", "", []toolCall{obj("f", `{"x":2}`)}},                                        // no brackets; the last value
		{ToolsPythonic, "<|tool_call_start|>[{\"name\": \"f\", \"arguments\": {\"x\": [1]}}]<|tool_call_end|>", "", []toolCall{obj("f", `{"x":[1]}`)}}, // JSON calls
		{ToolsPythonic, "<|tool_call_start|>[f(x=1)]", "", []toolCall{obj("f", `{"x":1}`)}},                                                            // cut short after the list
		{ToolsPythonic, "<|tool_call_start|>[f(1)]<|tool_call_end|>", "<|tool_call_start|>[f(1)]<|tool_call_end|>", nil},                               // positional
		{ToolsPythonic, "<|tool_call_start|>[f(x=1]<|tool_call_end|>", "<|tool_call_start|>[f(x=1]<|tool_call_end|>", nil},
		{ToolsPythonic, "<|tool_call_start|>[f(x=open('a'))]<|tool_call_end|>", "<|tool_call_start|>[f(x=open('a'))]<|tool_call_end|>", nil}, // not a literal
		{ToolsPythonic, "<|tool_call_start|>[f(x='a\nb')]<|tool_call_end|>", "<|tool_call_start|>[f(x='a\nb')]<|tool_call_end|>", nil},       // a raw newline in quotes
		{ToolsPythonic, "<|tool_call_start|>[]<|tool_call_end|>", "<|tool_call_start|>[]<|tool_call_end|>", nil},
		{ToolsPythonic, "No call.", "No call.", nil},
		// Octal escapes, raw and unicode prefixes, a lone surrogate,
		// parentheses around one value (not a tuple), an int past 64
		// bits, an end marker inside a string, JSON calls after spaces
		// with "parameters", text after the block.
		{ToolsPythonic, "<|tool_call_start|>[f(a=\"\\012\\101\", b=r'C:\\new', c=u'\\u00e9', d=\"\\ud83d!\", e=(1), g=(1,), h=12345678901234567890, i='<|tool_call_end|>')]<|tool_call_end|> Done.",
			"", []toolCall{obj("f", `{"a":"\nA","b":"C:\\new","c":"é","d":"�!","e":1,"g":[1],"h":12345678901234567890,"i":"\u003c|tool_call_end|\u003e"}`)}},
		{ToolsPythonic, "<|tool_call_start|>[ {\"name\": \"f\", \"parameters\": {\"x\": 1}}]<|tool_call_end|>", "", []toolCall{obj("f", `{"x":1}`)}},
		{ToolsPythonic, "<|tool_call_start|>[f(x=1)] and more<|tool_call_end|>", "<|tool_call_start|>[f(x=1)] and more<|tool_call_end|>", nil}, // not just a list
		{ToolsPythonic, "<|tool_call_start|>[-(x=1)]<|tool_call_end|>", "<|tool_call_start|>[-(x=1)]<|tool_call_end|>", nil},                   // not a name
	} {
		for size := 1; size <= len(c.text); size++ {
			p := newToolParser(c.format, types, false)
			var content strings.Builder
			for i := 0; i < len(c.text); i += size {
				content.WriteString(p.feed(c.text[i:min(i+size, len(c.text))]))
			}
			calls, rest := p.finish()
			content.WriteString(rest)
			if content.String() != c.content || len(calls) != len(c.calls) {
				t.Fatalf("%s %q in pieces of %d: content %q, calls %v; want %q, %v", c.format, c.text, size, content.String(), calls, c.content, c.calls)
			}
			for i := range calls {
				if calls[i] != c.calls[i] {
					t.Fatalf("%s %q: call %d %v, want %v", c.format, c.text, i, calls[i], c.calls[i])
				}
			}
		}
	}
}

// With one (parallel_tool_calls false) only the first call is kept; with
// objects (Anthropic) calls whose arguments are not objects leave the
// answer as text.
func TestToolParserOneAndObjects(t *testing.T) {
	text := "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{\"x\":1}}</tool_call>"
	p := newToolParser(ToolsHermes, nil, true)
	p.feed(text)
	calls, rest := p.finish()
	require.Equal(t, []toolCall{{"a", "{}", true}}, calls)
	require.Empty(t, rest)

	bad := "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":\"x\"}</tool_call>"
	p = newToolParser(ToolsHermes, nil, false)
	p.objects = true
	content := p.feed(bad)
	calls, rest = p.finish()
	require.Empty(t, calls)
	require.Equal(t, bad, content+rest)
}

// A tool's parameter types come from its schema's properties (the first
// type of a list that is not null); tools without a schema have none.
func TestParameterTypes(t *testing.T) {
	got := parameterTypes([]constrain.Tool{
		{Name: "f", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":["null","number"]},"c":{"description":"x"}}}`)},
		{Name: "g"},
	})
	require.Equal(t, map[string]map[string]string{"f": {"a": "integer", "b": "number"}}, got)
}

// Call ids: OpenAI's form, and nine letters and digits for mistral's
// templates (which refuse any other).
func TestCallID(t *testing.T) {
	require.Regexp(t, `^call_[A-Za-z0-9]{24}$`, callID(ToolsHermes))
	for _, f := range []ToolFormat{ToolsMistral, ToolsMistralArgs} {
		require.Regexp(t, `^[A-Za-z0-9]{9}$`, callID(f))
	}
}

// FuzzToolParser: any text, fed in any two pieces, parses without a
// panic into at most maxToolCalls calls, and text without a call comes
// back whole.
func FuzzToolParser(f *testing.F) {
	f.Add("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", 5)
	f.Add("[TOOL_CALLS][{\"name\":\"a\"}]", 3)
	f.Add("[TOOL_CALLS]a[CALL_ID]x[ARGS]{\"k\":1}[TOOL_CALLS]b[ARGS]", 9)
	f.Add("<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n<parameter=y>\n", 20)
	f.Add("<tool_call>a\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n<arg_key>y", 12)
	f.Add("<minimax:tool_call><invoke name=\"a\"><parameter name=\"x\">1</parameter><parameter", 30)
	f.Add("{\"name\":\"a\"};{\"name\":\"b\"};", 4)
	f.Add("{\"name\":\"a\",\"parameters\":{\"q\":[1,2,{}]}}", 1)
	f.Add(strings.Repeat("<tool_call>{\"name\":\"a\"}</tool_call>", 100), 7)
	f.Add("<|tool_call_start|>[a(x=1, y='z\\n', w={'k': [(1, 2.5e3), None]}), b()]<|tool_call_end|>", 17)
	f.Add("<|tool_call_start|>[a(x="+strings.Repeat("[", 200)+strings.Repeat("]", 200)+")]", 40)
	f.Add("<|tool_call_start|>[{\"name\": \"a\", \"arguments\": {}}]", 2)
	f.Fuzz(func(t *testing.T, text string, cut int) {
		for _, format := range []ToolFormat{ToolsHermes, ToolsQwenXML, ToolsGLM, ToolsMiniMax, ToolsMistral, ToolsMistralArgs, ToolsLlama3, ToolsPythonic} {
			p := newToolParser(format, map[string]map[string]string{"a": {"x": "integer"}}, false)
			cut := min(max(cut, 0), len(text))
			content := p.feed(text[:cut]) + p.feed(text[cut:])
			calls, rest := p.finish()
			if len(calls) > maxToolCalls {
				t.Fatalf("%d calls", len(calls))
			}
			if len(calls) == 0 && content+rest != text {
				t.Fatalf("%s: no call, but content %q is not the text %q", format, content+rest, text)
			}
		}
	})
}

// toolTemplate renders tools as Qwen's template does (a JSON line each)
// and teaches the hermes markup.
const toolTemplate = "{% if tools %}Tools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\nCall with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>\n{% endif %}" +
	"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"

func toolServer(t *testing.T, answer string) *testServer {
	t.Helper()
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	return newTestServer(t, serverConfig{script: ids, template: toolTemplate})
}

var weatherTool = openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
	Function: openai.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Get the weather"),
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
	},
}}

// A model that answers with a hermes call gets tool_calls back (and
// finish_reason tool_calls), whole and streamed, through the official
// OpenAI client; the tools reach the template; the markup never reaches
// the content.
func TestToolCalls(t *testing.T) {
	const answer = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ts := toolServer(t, answer)
	c := ts.client("")
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool}, MaxTokens: openai.Int(128),
	}
	resp, err := c.Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	ch := resp.Choices[0]
	assert.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	assert.Equal(t, "function", string(call.Type))
	assert.Equal(t, "get_weather", call.Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, call.Function.Arguments)
	assert.True(t, strings.HasPrefix(call.ID, "call_"), call.ID)
	assert.Equal(t, "Checking.", strings.TrimSpace(ch.Message.Content))
	assert.Contains(t, ts.lastPrompt(t), `"name": "get_weather"`, "the tools were rendered through the template")

	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var content strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, cc := range chunk.Choices {
			content.WriteString(cc.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.NotContains(t, content.String(), "tool_call", "no markup in the streamed content")
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, "get_weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)

	// The call and its result go back to the template on the next turn.
	next := params
	next.Messages = append(next.Messages, resp.Choices[0].Message.ToParam(), openai.ToolMessage(`{"temp": 21}`, call.ID))
	_, err = c.Chat.Completions.New(context.Background(), next)
	require.NoError(t, err)
	assert.Contains(t, ts.lastPrompt(t), `tool: {"temp": 21}`)
}

// What tputool cannot honour is a 400 naming it.
func TestToolRequestsRefused(t *testing.T) {
	ts := toolServer(t, "x")
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`:                                                                                      "tool_choice must be",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`:                                                   `the function \"g\", which is not among the tools`,
		`{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`:                                                                                                                                          "needs tools",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"number","multipleOf":3}}}}}],"tool_choice":"required"}`: `keyword \"multipleOf\" cannot be enforced`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`:                                           "cannot be combined with tool_choice",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`:                                                                                                                       "tools[0] must be",
		`{"messages":[{"role":"user","content":"x"}],"tools":{"a":1}}`:                                                                                                                                                   "tools must be an array",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":3}}]}`:                                                                                              "must be a JSON schema object",
	} {
		status, _, b := ts.post(t, "/v1/chat/completions", body)
		assert.Equal(t, 400, status, body)
		assert.Contains(t, string(b), want, body)
	}
	plain := newTestServer(t, serverConfig{})
	status, _, b := plain.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(b), "has no tool-call markup")
}

// tool_choice "required" and a named function force a call: a model that
// would answer in prose calls a tool anyway, with arguments valid against
// its schema; a model that calls on its own keeps its call.
func TestToolChoiceForced(t *testing.T) {
	bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
		Function: openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false},
		},
	}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "now"}}}
	for _, tc := range []struct {
		name, answer string
		choice       openai.ChatCompletionToolChoiceOptionUnionParam
		want         string // the tool called
	}{
		{"required prose", "I think it is sunny.", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, ""},
		{"named prose", "I think it is sunny.", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "get_weather"},
		{"required follows", `<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "get_weather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := loadTestTokenizer(t).Encode(tc.answer, false)
			require.NoError(t, err)
			// A fake model that prefers nothing takes the most whitespace the
			// grammar allows: room for it.
			ts := newTestServer(t, serverConfig{script: ids, template: toolTemplate, context: 4096})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded, clock}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			ch := resp.Choices[0]
			assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
			require.NotEmpty(t, ch.Message.ToolCalls)
			for _, call := range ch.Message.ToolCalls {
				if tc.want != "" {
					assert.Equal(t, tc.want, call.Function.Name)
				}
				switch call.Function.Name {
				case "get_weather":
					validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Function.Arguments)
				case "now":
					validates(t, `{"type":"object"}`, call.Function.Arguments)
				default:
					t.Errorf("called %q", call.Function.Name)
				}
			}
			if tc.name == "required follows" {
				assert.JSONEq(t, `{"city": "Oslo"}`, ch.Message.ToolCalls[0].Function.Arguments)
			}
		})
	}
}

// mistralTemplate writes calls as mistral's templates do: [TOOL_CALLS]
// and a JSON array.
const mistralTemplate = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}" +
	"{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}</s>" +
	"{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"

// mistralTokenizer is the test tokenizer with [TOOL_CALLS] added as a
// special token (id 512), as mistral's tokenizers have it.
func mistralTokenizer(t *testing.T) *tokenizer.Tokenizer {
	return tokenizerWithSpecials(t, "[TOOL_CALLS]")
}

// tokenizerWithSpecials is the test tokenizer with specials added as
// special tokens, ids 512 on.
func tokenizerWithSpecials(t *testing.T, specials ...string) *tokenizer.Tokenizer {
	t.Helper()
	return tokenizerWithAdded(t, true, specials...)
}

// tokenizerWithAdded is the test tokenizer with tokens added, ids 512
// on, special or not (Qwen3's think tags are added tokens that are not).
func tokenizerWithAdded(t *testing.T, special bool, specials ...string) *tokenizer.Tokenizer {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "stories260K-hf")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	b, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	require.NoError(t, err)
	var tj map[string]any
	require.NoError(t, json.Unmarshal(b, &tj))
	for i, sp := range specials {
		tj["added_tokens"] = append(tj["added_tokens"].([]any), map[string]any{
			"id": textVocab + i, "content": sp, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": special})
	}
	b, err = json.Marshal(tj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	for i, sp := range specials {
		id, ok := tok.TokenToID(sp)
		require.True(t, ok && id == textVocab+i && tok.IsSpecial(id) == special, "%s is token %d, special %v", sp, textVocab+i, special)
	}
	return tok
}

// tool_choice "required" and a named function on a mistral template: the
// answer is [TOOL_CALLS] (the special token, which the grammar spells)
// and a JSON array of valid calls. A model that calls on its own, with
// the special token, keeps its call (the token is allowed: without it in
// the grammar's vocabulary the script loses its way); one that would
// answer in prose calls anyway.
func TestToolChoiceForcedMistral(t *testing.T) {
	tok := mistralTokenizer(t)
	follow, err := tok.Encode(`[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]`, false)
	require.NoError(t, err)
	require.Equal(t, 512, follow[0], "the script opens with the special token")
	prose, err := tok.Encode("I think it is sunny.", false)
	require.NoError(t, err)
	// A fake model that prefers nothing takes the most whitespace and the
	// longest strings the grammar allows: a bounded city.
	bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{
		Function: openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false},
		},
	}}
	for _, tc := range []struct {
		name   string
		script []int
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		city   string
	}{
		{"required follows", follow, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "Oslo"},
		{"named follows", follow, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "Oslo"},
		// Named: one call. (Under "required" this fake model, which takes
		// the lowest id a tie allows, would pick "," before "]" forever.)
		{"named prose", prose, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverConfig{script: tc.script, template: mistralTemplate, context: 4096, tok: tok})
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			ch := resp.Choices[0]
			assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
			require.NotEmpty(t, ch.Message.ToolCalls)
			for _, call := range ch.Message.ToolCalls {
				assert.Equal(t, "get_weather", call.Function.Name)
				validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Function.Arguments)
			}
			if tc.city != "" {
				require.Len(t, ch.Message.ToolCalls, 1)
				assert.JSONEq(t, `{"city": "`+tc.city+`"}`, ch.Message.ToolCalls[0].Function.Arguments)
			}
			assert.Empty(t, strings.TrimSpace(ch.Message.Content))
		})
	}
}

// requireNoAPIError stops the test at err, showing the server's error
// body when it is one.
func requireNoAPIError(t *testing.T, err error) {
	t.Helper()
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		t.Fatalf("%s", apiErr.RawJSON())
	}
	require.NoError(t, err)
}

// Earlier calls go back to the template with their arguments as objects
// (a string of JSON is decoded, as transformers and vLLM pass them, its
// keys in their order), so that `| tojson` writes the object and
// `.items()` iterates it; an empty tool_calls is no call. An answer of calls alone has null content.
func TestToolCallsHistory(t *testing.T) {
	const tmpl = "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{% for tc in m.tool_calls %}" +
		"[{{ tc.function.arguments | tojson }}{% for k, v in tc.function.arguments.items() %} {{ k }}={{ v }}{% endfor %}]" +
		"{% endfor %}{% else %} {{ m.content }}{% endif %}\n{% endfor %}assistant: <tool_call>"
	ids, err := loadTestTokenizer(t).Encode(`<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>`, false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids, template: tmpl})
	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"unit\": \"c\", \"city\": \"Paris\"}"}}]},`+
		`{"role":"tool","tool_call_id":"call_1","content":"21"},{"role":"assistant","content":"Done.","tool_calls":[]}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":64}`)
	require.Equal(t, 200, status, string(b))
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, `assistant:[{"unit": "c", "city": "Paris"} unit=c city=Paris]`, "the arguments' keys in the request's order")
	assert.Contains(t, prompt, "assistant: Done.", "an empty tool_calls is no call")
	var resp map[string]any
	require.NoError(t, json.Unmarshal(b, &resp))
	msg := resp["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	assert.Contains(t, msg, "content")
	assert.Nil(t, msg["content"], "an answer of calls alone has null content")
	require.Len(t, msg["tool_calls"], 1)
}

// parallel_tool_calls false keeps an answer's first call.
func TestParallelToolCallsFalse(t *testing.T) {
	ts := toolServer(t, `<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>`)
	for _, parallel := range []bool{true, false} {
		resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(128),
			Tools: []openai.ChatCompletionToolUnionParam{weatherTool}, ParallelToolCalls: openai.Bool(parallel),
		})
		requireNoAPIError(t, err)
		calls := resp.Choices[0].Message.ToolCalls
		if parallel {
			require.Len(t, calls, 2)
			continue
		}
		require.Len(t, calls, 1)
		assert.JSONEq(t, `{"city": "Oslo"}`, calls[0].Function.Arguments)
	}
	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":"no"}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(b), "parallel_tool_calls must be true or false")
}

// qwenXMLTemplate teaches Qwen3-Coder's (and Qwen3.5's) XML calls.
const qwenXMLTemplate = "{% if tools %}Tools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n" +
	"Call with <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>\n{% endif %}" +
	"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"

// A qwen_xml model's calls come back as tool_calls, their values typed by
// the tool's schema, whole and streamed.
func TestToolCallsQwenXML(t *testing.T) {
	const answer = "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids, template: qwenXMLTemplate})
	tool := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
		Name:       "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
	}}}
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{tool}, MaxTokens: openai.Int(256),
	}
	resp, err := ts.client("").Chat.Completions.New(context.Background(), params)
	requireNoAPIError(t, err)
	ch := resp.Choices[0]
	assert.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	assert.Equal(t, "get_weather", ch.Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city": "Paris", "days": 3}`, ch.Message.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "Let me look.", strings.TrimSpace(ch.Message.Content))

	stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.JSONEq(t, `{"city": "Paris", "days": 3}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	assert.NotContains(t, acc.Choices[0].Message.Content, "<function=")
}

// tool_choice "required" and a named function on a qwen_xml template: a
// model that would answer in prose writes a call in the template's XML,
// whose values, typed back by the parser, validate; a string parameter
// with keywords raw text cannot honour is a 400 naming it.
func TestToolChoiceForcedQwenXML(t *testing.T) {
	prose, err := loadTestTokenizer(t).Encode("I think it is sunny.", false)
	require.NoError(t, err)
	const schema = `{"type":"object","properties":{"city":{"enum":["Oslo","Rome"]},"days":{"type":"integer","minimum":1,"maximum":3}},"required":["city","days"],"additionalProperties":false}`
	var params map[string]any
	require.NoError(t, json.Unmarshal([]byte(schema), &params))
	tool := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "get_weather", Parameters: params}}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "now"}}}
	ts := newTestServer(t, serverConfig{script: prose, template: qwenXMLTemplate, context: 4096})
	for _, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{
		{OfAuto: openai.String("required")},
		openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
	} {
		resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
			Tools: []openai.ChatCompletionToolUnionParam{tool, clock}, ToolChoice: choice, ParallelToolCalls: openai.Bool(false),
		})
		requireNoAPIError(t, err)
		ch := resp.Choices[0]
		assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
		require.Len(t, ch.Message.ToolCalls, 1)
		call := ch.Message.ToolCalls[0]
		if call.Function.Name == "get_weather" {
			validates(t, schema, call.Function.Arguments)
		} else {
			assert.Equal(t, "now", call.Function.Name)
		}
	}
	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}}}}],"tool_choice":"required"}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, string(b), `keyword \"pattern\" cannot be enforced on a qwen_xml string parameter`)
}

// mistralArgsTemplate writes calls as tokenizer v11's templates do.
const mistralArgsTemplate = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}" +
	"{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% elif m.tool_calls %}" +
	"{% for tc in m.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ tc.function.arguments | tojson }}{% endfor %}</s>" +
	"{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"

// On a tokenizer-v11 mistral template, a call the model writes
// ([TOOL_CALLS]NAME[ARGS]{…}, both markers special tokens) comes back
// with a nine-character id; tool_choice forces that form.
func TestToolCallsMistralArgs(t *testing.T) {
	tok := tokenizerWithSpecials(t, "[TOOL_CALLS]", "[ARGS]")
	follow, err := tok.Encode(`[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}`, false)
	require.NoError(t, err)
	require.Contains(t, follow, 513, "[ARGS] is its special token")
	prose, err := tok.Encode("I think it is sunny.", false)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		script []int
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		city   string
	}{
		{"auto", follow, openai.ChatCompletionToolChoiceOptionUnionParam{}, "Oslo"},
		{"required follows", follow, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "Oslo"},
		{"named prose", prose, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, serverConfig{script: tc.script, template: mistralArgsTemplate, context: 4096, tok: tok})
			bounded := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
				Name:       "get_weather",
				Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"city"}, "additionalProperties": false},
			}}}
			resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
				Tools: []openai.ChatCompletionToolUnionParam{bounded}, ToolChoice: tc.choice,
			})
			requireNoAPIError(t, err)
			ch := resp.Choices[0]
			assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
			require.Len(t, ch.Message.ToolCalls, 1)
			call := ch.Message.ToolCalls[0]
			assert.Equal(t, "get_weather", call.Function.Name)
			assert.Regexp(t, `^[A-Za-z0-9]{9}$`, call.ID)
			validates(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}`, call.Function.Arguments)
			if tc.city != "" {
				assert.JSONEq(t, `{"city": "`+tc.city+`"}`, call.Function.Arguments)
			}
			assert.Empty(t, strings.TrimSpace(ch.Message.Content))
		})
	}
}

// glmTemplate is GLM-4.5's own chat template (testdata/SOURCE.md).
func glmTemplate(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "glm-4.5.jinja"))
	require.NoError(t, err)
	return string(b)
}

// On GLM-4.5's template, the tools and an earlier call reach the prompt
// as the template writes them (<arg_key>/<arg_value>, non-string values
// as JSON), and the model's call comes back as tool_calls with its
// thought as reasoning_content, whole and streamed, through the official
// OpenAI client; the markup never reaches the content.
func TestToolCallsGLM(t *testing.T) {
	const answer = "<think>The weather tool.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	think := ThinkTags // as serve reads it off the template (ReasoningOf)
	ts := newTestServer(t, serverConfig{script: ids, template: glmTemplate(t), context: 4096, reasoning: &think})
	assert.Equal(t, ToolsGLM, ToolFormatOf(ts.srv.o.Template))
	tool := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
		Name:       "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
	}}}
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{tool}, MaxTokens: openai.Int(256),
	}
	resp, err := ts.client("").Chat.Completions.New(context.Background(), params)
	requireNoAPIError(t, err)
	ch := resp.Choices[0]
	assert.Equal(t, "tool_calls", ch.FinishReason)
	require.Len(t, ch.Message.ToolCalls, 1)
	assert.Equal(t, "get_weather", ch.Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city": "Paris", "days": 3}`, ch.Message.ToolCalls[0].Function.Arguments)
	assert.Empty(t, strings.TrimSpace(ch.Message.Content))
	assert.Contains(t, ch.Message.RawJSON(), `"reasoning_content":"The weather tool."`)
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, "<|system|>\n# Tools")
	assert.Contains(t, prompt, `"name": "get_weather"`)
	assert.True(t, strings.HasSuffix(prompt, "<|user|>\nWeather?<|assistant|>"), prompt)

	stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
	assert.JSONEq(t, `{"city": "Paris", "days": 3}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	assert.NotContains(t, acc.Choices[0].Message.Content, "<arg_key>")

	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 3}"}}]},`+
		`{"role":"tool","tool_call_id":"call_1","content":"21"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":64}`)
	require.Equal(t, 200, status, string(b))
	assert.Contains(t, ts.lastPrompt(t), "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call><|observation|>\n<tool_response>\n21\n</tool_response><|assistant|>")
}

// miniMaxTemplate teaches MiniMax-M2's calls as its template does.
const miniMaxTemplate = "{% if tools %}<tools>{% for t in tools %}\n<tool>{{ t | tojson }}</tool>{% endfor %}\n</tools>\n" +
	"<minimax:tool_call>\n<invoke name=\"tool-name\">\n<parameter name=\"key\">value</parameter>\n</invoke>\n</minimax:tool_call>\n{% endif %}" +
	"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}ai:<think>"

// A MiniMax-M2 model's calls (two invokes in one block, after its
// thought) come back as tool_calls typed by the tools' schemas.
func TestToolCallsMiniMax(t *testing.T) {
	const answer = "Weather, then time.</think>\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">UTC</parameter>\n</invoke>\n</minimax:tool_call>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	think := ThinkTags
	ts := newTestServer(t, serverConfig{script: ids, template: miniMaxTemplate, context: 4096, reasoning: &think})
	assert.Equal(t, ToolsMiniMax, ToolFormatOf(ts.srv.o.Template))
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: weatherAndClock(), MaxTokens: openai.Int(256),
	}
	for i, msg := range plainAndStreamed(t, ts, params) {
		streamed := i == 1
		requireWeatherThenTime(t, msg, streamed)
		assert.NotContains(t, msg.Content, "minimax:tool_call")
		assert.NotContains(t, msg.Content, "Weather, then time.", "the thought the prompt opened is reasoning")
	}
}

// weatherAndClock are a weather tool (city a string, days an integer)
// and a clock tool without parameters.
func weatherAndClock() []openai.ChatCompletionToolUnionParam {
	weather := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{
		Name:       "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
	}}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "get_time"}}}
	return []openai.ChatCompletionToolUnionParam{weather, clock}
}

// plainAndStreamed asks ts for params plainly (its finish_reason must be
// "tool_calls") and streamed (gathered by openai-go's accumulator), and
// returns both answers' messages, plain first.
func plainAndStreamed(t *testing.T, ts *testServer, params openai.ChatCompletionNewParams) [2]openai.ChatCompletionMessage {
	t.Helper()
	resp, err := ts.client("").Chat.Completions.New(context.Background(), params)
	requireNoAPIError(t, err)
	assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	stream := ts.client("").Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	return [2]openai.ChatCompletionMessage{resp.Choices[0].Message, acc.Choices[0].Message}
}

// requireWeatherThenTime checks that msg calls get_weather for Paris over
// 3 days, then get_time in UTC.
func requireWeatherThenTime(t *testing.T, msg openai.ChatCompletionMessage, streamed bool) {
	t.Helper()
	require.Len(t, msg.ToolCalls, 2, "streamed %v", streamed)
	assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city": "Paris", "days": 3}`, msg.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "get_time", msg.ToolCalls[1].Function.Name)
	assert.JSONEq(t, `{"tz": "UTC"}`, msg.ToolCalls[1].Function.Arguments)
}

// tool_choice "required" and a named function on GLM-4.5's, MiniMax-M2's
// and LFM2's templates: a model that would answer in prose writes a call
// in the template's markup, which the format's parser reads back into
// arguments that validate.
func TestToolChoiceForcedGLMMiniMaxPythonic(t *testing.T) {
	prose, err := loadTestTokenizer(t).Encode("I think it is sunny.", false)
	require.NoError(t, err)
	const schema = `{"type":"object","properties":{"city":{"enum":["Oslo","Rome"]},"days":{"type":"integer","minimum":1,"maximum":3},"note":{"type":"string"}},"required":["city","days"],"additionalProperties":false}`
	var params map[string]any
	require.NoError(t, json.Unmarshal([]byte(schema), &params))
	tool := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "get_weather", Parameters: params}}}
	clock := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "now"}}}
	for _, tmpl := range []struct {
		name, src string
		format    ToolFormat
	}{{"glm", glmTemplate(t), ToolsGLM}, {"minimax", miniMaxTemplate, ToolsMiniMax}, {"pythonic", lfm2Template, ToolsPythonic}} {
		t.Run(tmpl.name, func(t *testing.T) {
			ts := newTestServer(t, serverConfig{script: prose, template: tmpl.src, context: 4096})
			require.Equal(t, tmpl.format, ToolFormatOf(ts.srv.o.Template))
			for _, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{
				{OfAuto: openai.String("required")},
				openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
			} {
				resp, err := ts.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
					Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, MaxTokens: openai.Int(3000),
					Tools: []openai.ChatCompletionToolUnionParam{tool, clock}, ToolChoice: choice, ParallelToolCalls: openai.Bool(false),
				})
				requireNoAPIError(t, err)
				ch := resp.Choices[0]
				assert.Equal(t, "tool_calls", ch.FinishReason, ch.Message.Content)
				require.Len(t, ch.Message.ToolCalls, 1)
				call := ch.Message.ToolCalls[0]
				t.Logf("%s(%s)", call.Function.Name, call.Function.Arguments)
				if call.Function.Name == "get_weather" {
					validates(t, schema, call.Function.Arguments)
				} else {
					assert.Equal(t, "now", call.Function.Name)
				}
			}
		})
	}
}
