package serve

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lfm2Template renders tools and tool results in LFM2's documented
// layout, with the constructs its template uses: the system message and
// the tool list ("List of tools: <|tool_list_start|>[…]<|tool_list_end|>",
// each tool's JSON joined by ", ") merged into one system turn through a
// namespace, the messages after the system one sliced off, content that
// is not a string written as JSON, a tool's result between
// <|tool_response_start|> and <|tool_response_end|>.
const lfm2Template = `{{- bos_token -}}{%- set ns = namespace(system_prompt="") -%}` +
	`{%- if messages[0]["role"] == "system" -%}{%- set ns.system_prompt = messages[0]["content"] -%}{%- set messages = messages[1:] -%}{%- endif -%}` +
	`{%- if tools -%}{%- set ns.system_prompt = ns.system_prompt + ("\n" if ns.system_prompt else "") + "List of tools: <|tool_list_start|>[" -%}` +
	`{%- for tool in tools -%}{%- if tool is not string -%}{%- set tool = tool | tojson -%}{%- endif -%}{%- set ns.system_prompt = ns.system_prompt + tool -%}` +
	`{%- if not loop.last -%}{%- set ns.system_prompt = ns.system_prompt + ", " -%}{%- endif -%}{%- endfor -%}` +
	`{%- set ns.system_prompt = ns.system_prompt + "]<|tool_list_end|>" -%}{%- endif -%}` +
	`{%- if ns.system_prompt -%}{{- "<|im_start|>system\n" + ns.system_prompt + "<|im_end|>\n" -}}{%- endif -%}` +
	`{%- for message in messages -%}{{- "<|im_start|>" + message["role"] + "\n" -}}{%- set content = message["content"] -%}` +
	`{%- if content is not string -%}{%- set content = content | tojson -%}{%- endif -%}` +
	`{%- if message["role"] == "tool" -%}{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}{%- endif -%}` +
	`{{- content + "<|im_end|>\n" -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- "<|im_start|>assistant\n" -}}{%- endif -%}`

// An LFM2 model's pythonic calls (two in one list, after some text) come
// back as tool_calls, whole and streamed, the markup never as content;
// the tools reach the prompt through the template, and a tool's result
// goes back through it.
func TestToolCallsPythonic(t *testing.T) {
	const answer = "Checking.<|tool_call_start|>[get_weather(city='Paris', days=3), get_time(tz=\"UTC\")]<|tool_call_end|>"
	ids, err := loadTestTokenizer(t).Encode(answer, false)
	require.NoError(t, err)
	ts := newTestServer(t, serverConfig{script: ids, template: lfm2Template, context: 4096})
	require.Equal(t, ToolsPythonic, ToolFormatOf(ts.srv.o.Template))
	params := openai.ChatCompletionNewParams{
		Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Weather?")},
		Tools: weatherAndClock(), MaxTokens: openai.Int(256),
	}
	for i, msg := range plainAndStreamed(t, ts, params) {
		streamed := i == 1
		requireWeatherThenTime(t, msg, streamed)
		assert.Equal(t, "Checking.", strings.TrimSpace(msg.Content), "streamed %v", streamed)
		assert.NotContains(t, msg.Content, "tool_call_start")
	}
	prompt := ts.lastPrompt(t)
	assert.Contains(t, prompt, "<|im_start|>system\nBe brief.\nList of tools: <|tool_list_start|>[{")
	assert.Contains(t, prompt, `"name": "get_weather"`)
	assert.Contains(t, prompt, `"type": "function"}, {"`, "the tools joined by \", \"")
	assert.Contains(t, prompt, "]<|tool_list_end|><|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant")

	status, _, b := ts.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather?"},`+
		`{"role":"assistant","content":"<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>"},`+
		`{"role":"tool","tool_call_id":"call_1","content":"21"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":64}`)
	require.Equal(t, 200, status, string(b))
	assert.Contains(t, ts.lastPrompt(t), "<|im_start|>tool\n<|tool_response_start|>21<|tool_response_end|><|im_end|>\n<|im_start|>assistant")
}
