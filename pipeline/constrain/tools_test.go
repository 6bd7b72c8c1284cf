package constrain

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":8},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)},
	{Name: "now"},
}

// Random answers under the hermes markup are one or more calls of the
// tools, each with arguments valid against its schema; llama3's is one
// bare object with "parameters".
func TestToolCallsGrammar(t *testing.T) {
	v, eos := testVocab(t)
	weather := validator(t, string(testTools[0].Parameters))
	g, err := ToolCalls(testTools, CallMarkup{Open: "<tool_call>", Close: "</tool_call>", ArgsKey: "arguments", Many: true})
	require.NoError(t, err)
	ix := NewIndex(g, v)
	re := regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>`)
	rng := rand.New(rand.NewPCG(3, 4))
	ended := 0
	for range 40 {
		text, ok := walk(t, ix, rng, eos)
		if !ok {
			continue
		}
		ended++
		calls := re.FindAllStringSubmatch(text, -1)
		require.NotEmpty(t, calls, text)
		rest := strings.TrimSpace(re.ReplaceAllString(text, ""))
		assert.Empty(t, rest, "text outside the calls in %q", text)
		for _, c := range calls {
			var call struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			require.NoError(t, json.Unmarshal([]byte(c[1]), &call), c[1])
			switch call.Name {
			case "get_weather":
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(call.Arguments)))
				require.NoError(t, err)
				assert.NoError(t, weather.Validate(inst), string(call.Arguments))
			case "now":
				assert.True(t, strings.HasPrefix(strings.TrimSpace(string(call.Arguments)), "{"))
			default:
				t.Errorf("unknown tool %q", call.Name)
			}
		}
	}
	assert.Greater(t, ended, 30)
	assert.True(t, accepts(ix, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"))
	assert.False(t, accepts(ix, `Sure.<tool_call>{"name": "now", "arguments": {}}</tool_call>`))
	assert.False(t, accepts(ix, `<tool_call>{"name": "nope", "arguments": {}}</tool_call>`))
	assert.False(t, accepts(ix, `<tool_call>{"name": "get_weather", "arguments": {"town": "x"}}</tool_call>`))

	one, err := ToolCalls(testTools[:1], CallMarkup{ArgsKey: "parameters"})
	require.NoError(t, err)
	ix = NewIndex(one, v)
	assert.True(t, accepts(ix, `{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}`))
	assert.False(t, accepts(ix, `{"name": "get_weather", "parameters": {"city": "Oslo"}}{"name": "get_weather", "parameters": {"city": "Oslo"}}`))

	assert.False(t, accepts(NewIndex(g, v), `<tool_call>{"name": "now", "arguments": 42}</tool_call>`), "arguments are an object")
	_, err = ToolCalls([]Tool{{Name: "s", Parameters: []byte(`{"type":"string"}`)}}, CallMarkup{ArgsKey: "arguments"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be a schema of type object")

	_, err = ToolCalls([]Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"s":{"type":"number","multipleOf":2}}}`)}}, CallMarkup{ArgsKey: "arguments"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `f: tools[0].parameters.properties.s: keyword "multipleOf"`)
}

// Mistral's markup: the calls are one JSON array after [TOOL_CALLS];
// every walk of the grammar is that array, each call valid; a named
// function (Many off) is an array of one.
func TestToolCallsArray(t *testing.T) {
	v, eos := testVocab(t)
	weather := validator(t, string(testTools[0].Parameters))
	g, err := ToolCalls(testTools, CallMarkup{Open: "[TOOL_CALLS]", ArgsKey: "arguments", Many: true, Array: true})
	require.NoError(t, err)
	ix := NewIndex(g, v)
	rng := rand.New(rand.NewPCG(5, 6))
	ended, several := 0, 0
	for range 40 {
		text, ok := walk(t, ix, rng, eos)
		if !ok {
			continue
		}
		ended++
		body, found := strings.CutPrefix(strings.TrimSpace(text), "[TOOL_CALLS]")
		require.True(t, found, text)
		var calls []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &calls), body)
		require.NotEmpty(t, calls)
		if len(calls) > 1 {
			several++
		}
		for _, c := range calls {
			switch c.Name {
			case "get_weather":
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(c.Arguments)))
				require.NoError(t, err)
				assert.NoError(t, weather.Validate(inst), string(c.Arguments))
			case "now":
			default:
				t.Errorf("unknown tool %q", c.Name)
			}
		}
	}
	assert.Greater(t, ended, 30)
	assert.Greater(t, several, 0, "no walk made more than one call")
	assert.True(t, accepts(ix, `[TOOL_CALLS][{"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]`))
	assert.False(t, accepts(ix, `[TOOL_CALLS]{"name": "now", "arguments": {}}`), "not an array")
	assert.False(t, accepts(ix, `[{"name": "now", "arguments": {}}]`), "no markup")
	assert.False(t, accepts(ix, `[TOOL_CALLS][]`), "no call")

	one, err := ToolCalls(testTools[1:], CallMarkup{Open: "[TOOL_CALLS]", ArgsKey: "arguments", Array: true})
	require.NoError(t, err)
	ix = NewIndex(one, v)
	assert.True(t, accepts(ix, `[TOOL_CALLS][{"name": "now", "arguments": {}}]`))
	assert.False(t, accepts(ix, `[TOOL_CALLS][{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]`))
}

// HarmonyCall: an optional analysis message without '<' in its text,
// then one commentary message to a tool with valid arguments, and
// nothing after.
func TestHarmonyCallGrammar(t *testing.T) {
	v, _ := testVocab(t)
	g, err := HarmonyCall(testTools)
	require.NoError(t, err)
	ix := NewIndex(g, v)
	const call = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}`
	assert.True(t, accepts(ix, call))
	assert.True(t, accepts(ix, "<|channel|>analysis<|message|>The user wants weather; call it.<|end|><|start|>assistant"+call))
	assert.True(t, accepts(ix, `<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}`))
	assert.False(t, accepts(ix, "<|channel|>analysis<|message|>a <b> c<|end|><|start|>assistant"+call), "'<' in the thought")
	assert.False(t, accepts(ix, `<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}`), "no such tool")
	assert.False(t, accepts(ix, `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"town": "x"}`), "invalid arguments")
	assert.False(t, accepts(ix, call+call), "one call")
	assert.False(t, accepts(ix, `<|channel|>final<|message|>{}`), "not a call")
	_, err = HarmonyCall([]Tool{{Name: "get weather"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot be written in a harmony header")
}

// xmlTools have the parameter types qwen_xml writes as raw text (a
// string, an enum of strings) and as JSON (an integer, an object).
var xmlTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7},` +
		`"unit":{"enum":["c","f"]},"opts":{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"],"additionalProperties":false}},` +
		`"required":["city","days"],"additionalProperties":false}`)},
	{Name: "now"},
}

// xmlArgs reads a qwen_xml call's parameters back as the server's parser
// does for these tools (raw text for city and unit, JSON for the rest).
func xmlArgs(t *testing.T, body string) (string, map[string]any) {
	t.Helper()
	m := regexp.MustCompile(`(?s)^<function=([^>]*)>\n(.*)</function>\n$`).FindStringSubmatch(body)
	require.NotNil(t, m, "%q", body)
	args := map[string]any{}
	for _, p := range regexp.MustCompile(`(?s)<parameter=([^>]*)>\n(.*?)\n</parameter>\n`).FindAllStringSubmatch(m[2], -1) {
		switch p[1] {
		case "city", "unit":
			args[p[1]] = p[2]
		default:
			var v any
			require.NoError(t, json.Unmarshal([]byte(p[2]), &v), "%s = %q", p[1], p[2])
			args[p[1]] = v
		}
	}
	return m[1], args
}

// Random answers under qwen_xml's markup are calls whose parameters, read
// back as the parser reads them, validate against the tool's schema;
// string text never holds "</"; keywords that raw text cannot honour are
// refused.
func TestXMLCallsGrammar(t *testing.T) {
	v, eos := testVocab(t)
	weather := validator(t, string(xmlTools[0].Parameters))
	g, err := XMLCalls(xmlTools, true)
	require.NoError(t, err)
	ix := NewIndex(g, v)
	re := regexp.MustCompile(`(?s)<tool_call>\n(.*?)</tool_call>`)
	rng := rand.New(rand.NewPCG(7, 8))
	ended := 0
	for range 60 {
		text, ok := walk(t, ix, rng, eos)
		if !ok {
			continue
		}
		ended++
		calls := re.FindAllStringSubmatch(text, -1)
		require.NotEmpty(t, calls, text)
		assert.Empty(t, strings.TrimSpace(re.ReplaceAllString(text, "")), "text outside the calls in %q", text)
		for _, c := range calls {
			name, args := xmlArgs(t, c[1])
			switch name {
			case "get_weather":
				assert.NoError(t, weather.Validate(args), "%q", c[1])
				assert.NotContains(t, args["city"], "</")
			case "now":
				assert.Empty(t, args)
			default:
				t.Errorf("unknown tool %q", name)
			}
		}
	}
	assert.Greater(t, ended, 20)
	call := "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan José, <CA>\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>"
	assert.True(t, accepts(ix, call+"\n<tool_call>\n<function=now>\n</function>\n</tool_call>"))
	for _, bad := range []string{
		"<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",                                        // city is required
		"<tool_call>\n<function=get_weather>\n<parameter=city>\na</b>\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", // "</" in text
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\n9\n</parameter>\n</function>\n</tool_call>",     // days over its maximum
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\n1\n</parameter>\n<parameter=unit>\nk\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=nope>\n</function>\n</tool_call>",
	} {
		assert.False(t, accepts(ix, bad), bad)
	}
	g, err = XMLCalls(xmlTools, false)
	require.NoError(t, err)
	assert.False(t, accepts(NewIndex(g, v), call+"\n"+call), "one call only")
	// A tool whose schema constrains nothing ({}, as ToolCalls's any
	// object) takes no parameters.
	g, err = XMLCalls([]Tool{{Name: "f", Parameters: []byte(`{"description":"no arguments"}`)}}, false)
	require.NoError(t, err)
	assert.True(t, accepts(NewIndex(g, v), "<tool_call>\n<function=f>\n</function>\n</tool_call>"))
	// "null" is a string parameter's text (the parser keeps it so).
	g, err = XMLCalls([]Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"s":{"type":"string","enum":["null","x"]}},"required":["s"]}`)}}, false)
	require.NoError(t, err)
	assert.True(t, accepts(NewIndex(g, v), "<tool_call>\n<function=f>\n<parameter=s>\nnull\n</parameter>\n</function>\n</tool_call>"))

	for schema, want := range map[string]string{
		`{"type":"object","properties":{"s":{"type":"string","maxLength":3}}}`:  `keyword "maxLength" cannot be enforced on a qwen_xml string parameter`,
		`{"type":"object","properties":{"s":{"type":["string","integer"]}}}`:    "cannot be enforced: its string is raw text",
		`{"type":"object","properties":{"s":{"enum":["a</b"]}}}`:                "cannot be written as a qwen_xml parameter",
		`{"type":"object","properties":{"a>b":{"type":"string"}}}`:              "cannot be written in a qwen_xml parameter",
		`{"type":"object","properties":{"n":{"type":"number","multipleOf":2}}}`: `"multipleOf"`,
		`{"type":"array"}`: "must be a schema of type object",
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a","b"]}`:     `"b" is not among the properties`,
		`{"type":"object","required":["a"]}`:                                              `"a" is not among the properties`,
		`{"type":"object","properties":{"s":{"type":"string","const":"a","enum":["b"]}}}`: "the const is not among the enum's values",
		`{"type":"object","properties":{"s":{"type":"string","enum":[]}}}`:                "expected a non-empty array",
		`{"type":"object","properties":{"s":{"enum":["x","null"]}}}`:                      `the value "null" cannot be written`,
	} {
		_, err := XMLCalls([]Tool{{Name: "f", Parameters: []byte(schema)}}, true)
		assert.ErrorContains(t, err, want, schema)
	}
}

// GLM-4.5's and MiniMax-M2's markups (XMLCallsIn) hold calls to the same
// grammar as qwen_xml's, in their own tags; glm45 reads a parameter
// without a type as the JSON its text is, so an enum string that is JSON
// cannot be written for one.
func TestXMLCallsInMarkups(t *testing.T) {
	v, _ := testVocab(t)
	for _, c := range []struct {
		m         XMLMarkup
		good, bad []string
	}{
		{GLMXML,
			[]string{
				"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>San José, <CA></arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
				"<tool_call>now\n</tool_call>\n<tool_call>now\n</tool_call>",
			},
			[]string{
				"<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>", // city is required
				"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a</b</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
				"<tool_call>\n<function=now>\n</function>\n</tool_call>",
			}},
		{MiniMaxXML,
			[]string{
				"<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n</minimax:tool_call>",
				"<minimax:tool_call>\n<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>",
			},
			[]string{
				"<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo</parameter>\n<parameter name=\"days\">9</parameter>\n</invoke>\n</minimax:tool_call>", // days over its maximum
				"<minimax:tool_call>\n<invoke name=\"nope\">\n</invoke>\n</minimax:tool_call>",
			}},
	} {
		g, err := XMLCallsIn(xmlTools, true, c.m)
		require.NoError(t, err, c.m.Format)
		ix := NewIndex(g, v)
		for _, s := range c.good {
			assert.True(t, accepts(ix, s), "%s: %q", c.m.Format, s)
		}
		for _, s := range c.bad {
			assert.False(t, accepts(ix, s), "%s: %q", c.m.Format, s)
		}
	}
	_, err := XMLCallsIn([]Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"s":{"enum":["x","12"]}}}`)}}, false, GLMXML)
	assert.ErrorContains(t, err, `the value "12" cannot be written as a glm45 parameter`)
	_, err = XMLCallsIn([]Tool{{Name: `say "hi"`}}, false, MiniMaxXML)
	assert.ErrorContains(t, err, "cannot be written in a minimax_m2 call")
}

// A qwen_xml or minimax_m2 parameter of several types but string is read
// back as its first, so it cannot be enforced; glm45 reads any JSON.
func TestXMLCallsSeveralTypes(t *testing.T) {
	tools := []Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"x":{"type":["integer","boolean"]}},"required":["x"]}`)}}
	for _, m := range []XMLMarkup{QwenXML, MiniMaxXML} {
		_, err := XMLCallsIn(tools, false, m)
		assert.ErrorContains(t, err, "its parser reads the value as the first", m.Format)
	}
	_, err := XMLCallsIn(tools, false, GLMXML)
	assert.NoError(t, err)
	_, err = XMLCallsIn([]Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"x":{"type":["integer","null"]}}}`)}}, false, MiniMaxXML)
	assert.NoError(t, err, "null beside one type is read back")
}

// pyArgs reads a forced pythonic call's keyword arguments (KEY=JSON, each
// followed by ", ") into a JSON object, failing the test on anything else.
func pyArgs(t *testing.T, body string) (string, map[string]any) {
	t.Helper()
	name, rest, ok := strings.Cut(body, "(")
	require.True(t, ok, body)
	require.True(t, strings.HasSuffix(rest, ")"), body)
	rest = strings.TrimSuffix(rest, ")")
	args := map[string]any{}
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		require.True(t, ok, body)
		dec := json.NewDecoder(strings.NewReader(after))
		var v any
		require.NoError(t, dec.Decode(&v), body)
		args[key] = v
		after = after[dec.InputOffset():]
		require.True(t, strings.HasPrefix(after, ", "), body)
		rest = strings.TrimPrefix(after, ", ")
	}
	return name, args
}

// Random answers under LFM2's pythonic markup are one list of one or
// more calls, each call's keyword arguments valid against its tool's
// schema; names and keys that are not Python identifiers are refused.
func TestPythonicCallsGrammar(t *testing.T) {
	v, eos := testVocab(t)
	weather := validator(t, string(xmlTools[0].Parameters))
	g, err := PythonicCalls(xmlTools, true)
	require.NoError(t, err)
	ix := NewIndex(g, v)
	call := regexp.MustCompile(`(?s)(get_weather|now)\((?:[a-z]+=.*?, )*\)`)
	rng := rand.New(rand.NewPCG(9, 10))
	ended := 0
	for range 60 {
		text, ok := walk(t, ix, rng, eos)
		if !ok {
			continue
		}
		ended++
		require.True(t, strings.HasPrefix(text, "<|tool_call_start|>[") && strings.HasSuffix(text, "]<|tool_call_end|>"), text)
		body := strings.TrimSuffix(strings.TrimPrefix(text, "<|tool_call_start|>["), "]<|tool_call_end|>")
		for _, c := range splitPyCalls(t, body) {
			require.Regexp(t, call, c)
			name, args := pyArgs(t, c)
			switch name {
			case "get_weather":
				b, _ := json.Marshal(args)
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
				require.NoError(t, err)
				assert.NoError(t, weather.Validate(inst), c)
			case "now":
				assert.Empty(t, args)
			}
		}
	}
	assert.Greater(t, ended, 20)
	one := `get_weather(city="San José", days=3, unit="c", )`
	assert.True(t, accepts(ix, "<|tool_call_start|>["+one+", now()]<|tool_call_end|>"))
	for _, bad := range []string{
		`<|tool_call_start|>[get_weather(days=3, )]<|tool_call_end|>`,           // city is required
		`<|tool_call_start|>[get_weather(city="x", days=9, )]<|tool_call_end|>`, // days over its maximum
		`<|tool_call_start|>[get_weather(city='x', )]<|tool_call_end|>`,         // Python's quotes: the grammar writes JSON
		`<|tool_call_start|>[nope()]<|tool_call_end|>`,
		`[now()]`,
	} {
		assert.False(t, accepts(ix, bad), bad)
	}
	g, err = PythonicCalls(xmlTools, false)
	require.NoError(t, err)
	assert.False(t, accepts(NewIndex(g, v), "<|tool_call_start|>[now(), now()]<|tool_call_end|>"), "one call only")
	for _, c := range []struct {
		tool Tool
		want string
	}{
		{Tool{Name: "get weather"}, `the name "get weather" cannot be written in a pythonic call`},
		{Tool{Name: "9f"}, `the name "9f" cannot be written`},
		{Tool{Name: "f", Parameters: []byte(`{"type":"object","properties":{"a-b":{"type":"string"}}}`)}, `the key "a-b" is not a Python identifier`},
		{Tool{Name: "f", Parameters: []byte(`{"type":"array"}`)}, "must be a schema of type object"},
		{Tool{Name: "f", Parameters: []byte(`{"type":"object","required":["a"]}`)}, `"a" is not among the properties`},
	} {
		_, err := PythonicCalls([]Tool{c.tool}, true)
		assert.ErrorContains(t, err, c.want, c.tool.Name)
	}
}

// splitPyCalls cuts a forced list's body at the ", " between calls: a
// call ends at the ')' that closes its '(' outside strings.
func splitPyCalls(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	depth, inStr, start := 0, false, 0
	for i := 0; i < len(body); i++ {
		switch ch := body[i]; {
		case inStr && ch == '\\':
			i++
		case ch == '"':
			inStr = !inStr
		case inStr:
		case ch == '(' || ch == '[' || ch == '{':
			depth++
		case ch == ')' || ch == ']' || ch == '}':
			depth--
			if depth == 0 && ch == ')' {
				out = append(out, body[start:i+1])
				if strings.HasPrefix(body[i+1:], ", ") {
					i += 2
				}
				start = i + 1
			}
		}
	}
	require.Equal(t, len(body), start, "text after the last call in %q", body)
	return out
}
