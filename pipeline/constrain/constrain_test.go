package constrain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testVocab is every single byte (ids 0-255), some multi-byte tokens as
// BPE vocabularies have them, and an end-of-sequence id.
func testVocab(t testing.TB) (*Vocab, int) {
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{`{"`, `":`, `": `, `",`, `", "`, `"}`, `},`, `}]`, `["`, `"]`, "\n  ", "\n    ", ` "`,
		`true`, `false`, `null`, `name`, `"name"`, `age`, `12`, `3.5`, `-1`, `e+`, `ab`, `abc`, `é`, "日本", `\n`, `\"`,
		`2024`, `-01-`, `T12:`, `00Z`, `}}`, `,"`, `[]`, `{}`, `""`} {
		toks = append(toks, []byte(s))
	}
	eos := len(toks)
	toks = append(toks, nil) // the EOS id: no bytes
	toks = append(toks, nil) // a special token: never allowed
	v, err := NewVocab(toks, []int{eos})
	require.NoError(t, err)
	return v, eos
}

// walk generates one text through m by choosing allowed tokens at
// random (closing tokens first once the text is long), checking at every
// step that Allows agrees with Mask; it returns the text and whether it
// ended with EOS.
func walk(t *testing.T, ix *Index, rng *rand.Rand, eos int) (string, bool) {
	m := ix.NewMatcher()
	var text []byte
	prefer := []string{"}", "]", `"`, "0", "1", ",", "null", "true"}
	for step := 0; step < 2000; step++ {
		mask := m.Mask()
		var allowed []int
		for id := range ix.v.size {
			in := mask[id/64]&(1<<(id%64)) != 0
			if id%7 == step%7 || in { // a sample of ids, and every allowed one
				require.Equal(t, in, m.Allows(id), "step %d id %d (%q) after %q", step, id, ix.v.tokens[id], text)
			}
			if in {
				allowed = append(allowed, id)
			}
		}
		require.NotEmpty(t, allowed, "no token allowed after %q", text)
		id := allowed[rng.IntN(len(allowed))]
		if step > 40 {
			// Closing tokens, at random among those allowed (inside a
			// string, "}" is content and the quote closes).
			var closing []int
			for _, a := range allowed {
				if a == eos {
					closing = []int{a}
					break
				}
				if slices.Contains(prefer, string(ix.v.tokens[a])) {
					closing = append(closing, a)
				}
			}
			if len(closing) > 0 {
				id = closing[rng.IntN(len(closing))]
			}
		}
		require.NoError(t, m.Advance(id))
		if id == eos {
			return string(text), true
		}
		text = append(text, ix.v.tokens[id]...)
	}
	return string(text), false
}

// validator compiles schema with a reference JSON Schema validator.
func validator(t *testing.T, schema string) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

var schemas = []string{
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"number"}}}`,
	`{"type":"object","properties":{"x":{"type":"string"},"y":{"type":"integer"},"z":{"type":"string"}},"required":["y"]}`,
	`{"type":"array","items":{"type":"integer","minimum":-5,"maximum":120},"minItems":2,"maxItems":4}`,
	`{"type":"array","items":{"type":"string","enum":["red","green","blue"]}}`,
	`{"enum":["a",1,null,{"k":[true]}]}`,
	`{"type":"string","minLength":2,"maxLength":5}`,
	`{"type":["string","null"]}`,
	`{"anyOf":[{"type":"integer","exclusiveMinimum":0},{"type":"string","format":"date"}]}`,
	`{"type":"object","additionalProperties":{"type":"integer"}}`,
	`{"type":"object"}`,
	`{}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/node"}`,
	`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"t":{"type":"string","format":"time"}},"required":["when","id","t"]}`,
	`{"type":"number","minimum":-2,"maximum":3}`,
	`{"type":"array","prefixItems":[{"const":"x"},{"type":"boolean"}],"items":false,"minItems":2}`,
	`{"oneOf":[{"type":"string"},{"type":"integer"}]}`,
	`{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}`,
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^x[0-9a-f]+$"},"note":{"type":"string","pattern":"1"}},"required":["code","note"]}`,
}

// Random texts through each schema's grammar always parse and validate.
func TestRandomTextsValidate(t *testing.T) {
	v, eos := testVocab(t)
	for i, schema := range schemas {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			g, err := JSONSchema([]byte(schema))
			require.NoError(t, err, schema)
			ix := NewIndex(g, v)
			val := validator(t, schema)
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			ended := 0
			for range 30 {
				text, ok := walk(t, ix, rng, eos)
				if !ok {
					t.Logf("unended: %q", text[max(0, len(text)-200):])
					continue
				}
				ended++
				var x any
				require.NoError(t, json.Unmarshal([]byte(text), &x), "schema %s: %q does not parse", schema, text)
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				require.NoError(t, err)
				assert.NoError(t, val.Validate(inst), "schema %s: %q", schema, text)
			}
			assert.Greater(t, ended, 20, "walks that ended")
		})
	}
}

// accepts feeds text through a fresh matcher and reports whether it is a
// complete text of the grammar.
func accepts(ix *Index, text string) bool {
	m := ix.NewMatcher()
	return m.AdvanceBytes([]byte(text)) && m.Accepting()
}

// Valid texts in the spellings models write (compact, indented, spaced)
// are accepted; invalid ones are not.
func TestAcceptsAndRejects(t *testing.T) {
	v, _ := testVocab(t)
	for _, tc := range []struct {
		schema   string
		good, no []string
	}{
		{schemas[0],
			[]string{`{"name":"Ann","age":3}`, "\n" + `{"name":"Ann","age":3} `, "{\n  \"name\": \"Ann\",\n  \"age\": -3\n}", `{ "name" : "é\"\\u00e9", "age" : 0 }`},
			[]string{`{"age":3,"name":"Ann"}`, `{"name":"Ann"}`, `{"name":"Ann","age":3.5}`, `{"name":"Ann","age":3,"x":1}`, `{"name":"Ann","age":03}`, `{"name":"A` + "\n" + `","age":1}`, `{"name":"Ann","age":3}  `, "{\"name\":\"\xff\",\"age\":1}"}},
		{schemas[2], []string{`{"y":1}`, `{"x":"a","y":1}`, `{"y":1,"z":""}`, `{"x":"","y":2,"z":"q"}`}, []string{`{}`, `{"x":"a"}`, `{"y":1,}`, `{,"y":1}`, `{"z":"","y":1}`}},
		{schemas[3], []string{`[1,2]`, `[-5,120,0,7]`, `[ 1 , 2 ]`}, []string{`[1]`, `[1,2,3,4,5]`, `[121,1]`, `[-6,1]`, `[-0,1]`}},
		{schemas[5], []string{`"a"`, `1`, `null`, `{"k":[true]}`}, []string{`"b"`, `2`, `{"k":[false]}`, `{ "k":[true]}`}},
		{schemas[6], []string{`"ab"`, `"abcde"`, `"日本"`, `"\n\t"`}, []string{`"a"`, `"abcdef"`, `""`}},
		{schemas[8], []string{`1`, `99`, `"2024-02-29"`, `"2023-12-31"`}, []string{`0`, `-1`, `"2024-02-30"`, `"2024-04-31"`, `"2024-13-01"`}},
		{schemas[9], []string{`{}`, `{"a":1,"b":-2}`}, []string{`{"a":"x"}`, `{"a":1,}`}},
		{schemas[11], []string{`[]`, `[{"a":[1,{"b":null}]},"x",-1.5e+3,true]`, `"s"`}, []string{`[1,]`, `{"a"}`, `tru`, `01`}},
		{schemas[12], []string{`{"v":1}`, `{"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]}`}, []string{`{"kids":[]}`, `{"v":1,"kids":[{"v":2},{"v":3},{"v":4}]}`}},
		{schemas[14], []string{`-2`, `3`, `0.5`, `-1.999`, `2.75`}, []string{`-2.5`, `3.1`, `4`, `1e2`}},
		{schemas[15], []string{`["x",true]`}, []string{`["x"]`, `["y",true]`, `["x",true,1]`}},
		{`{"type":"object","properties":{"q":{"type":"string","nullable":true}},"required":["q"]}`, []string{`{"q":null}`, `{"q":"s"}`}, []string{`{"q":1}`, `{}`}},
	} {
		g, err := JSONSchema([]byte(tc.schema))
		require.NoError(t, err)
		ix := NewIndex(g, v)
		for _, s := range tc.good {
			assert.True(t, accepts(ix, s), "%s should accept %q", tc.schema, s)
		}
		for _, s := range tc.no {
			assert.False(t, accepts(ix, s), "%s should reject %q", tc.schema, s)
		}
	}
}

// Integer ranges, exhaustively over small bounds.
func TestIntegerRanges(t *testing.T) {
	v, _ := testVocab(t)
	for _, r := range [][2]int{{0, 0}, {0, 9}, {1, 10}, {7, 123}, {-120, -3}, {-15, 15}, {99, 100}, {-1, 0}, {5, 1099}} {
		g, err := JSONSchema(fmt.Appendf(nil, `{"type":"integer","minimum":%d,"maximum":%d}`, r[0], r[1]))
		require.NoError(t, err)
		ix := NewIndex(g, v)
		for n := -1200; n <= 1200; n++ {
			want := n >= r[0] && n <= r[1]
			if got := accepts(ix, strconv.Itoa(n)); got != want {
				t.Errorf("range %v: %d accepted %v", r, n, got)
			}
		}
		assert.False(t, accepts(ix, "-0"), "range %v: -0", r)
		assert.False(t, accepts(ix, "007"), "range %v: leading zeros", r)
	}
	g, err := JSONSchema([]byte(`{"type":"integer","minimum":10}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	assert.True(t, accepts(ix, "9999999999999999"))
	assert.False(t, accepts(ix, "9"))
}

// Every day of eleven years, leap and not (2000 and 2400 are, 1900 and
// 2100 not): a date is accepted iff it exists; and 29 February of every
// year from 0 to 9999 iff the year is a leap year, in date-time too.
func TestDateFormat(t *testing.T) {
	v, _ := testVocab(t)
	g, err := JSONSchema([]byte(`{"type":"string","format":"date"}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	for _, y := range []int{0, 4, 100, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9999} {
		for m := 0; m <= 13; m++ {
			for d := 0; d <= 32; d++ {
				s := fmt.Sprintf("%04d-%02d-%02d", y, m, d)
				_, err := time.Parse("2006-01-02", s)
				assert.Equal(t, err == nil, accepts(ix, `"`+s+`"`), s)
			}
		}
	}
	g, err = JSONSchema([]byte(`{"type":"string","format":"date-time"}`))
	require.NoError(t, err)
	dt := NewIndex(g, v)
	for y := range 10000 {
		leap := y%4 == 0 && (y%100 != 0 || y%400 == 0)
		s := fmt.Sprintf("%04d-02-29", y)
		if got := accepts(ix, `"`+s+`"`); got != leap {
			t.Errorf("%s accepted %v", s, got)
		}
		if got := accepts(dt, `"`+s+`T12:00:00Z"`); got != leap {
			t.Errorf("%sT12:00:00Z accepted %v", s, got)
		}
	}
}

// Keywords the grammar cannot enforce are errors naming them and where.
func TestUnenforceable(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"string","pattern":"^(?=a)"}`, `pattern: "^(?=a)" cannot be enforced`},
		{`{"type":"string","pattern":"a\\bc"}`, `WordBoundary inside the pattern`},
		{`{"type":"string","pattern":"a{2000}"}`, "invalid repeat count"},
		{`{"type":"string","pattern":"a","maxLength":3}`, "pattern beside minLength"},
		{`{"type":"object","properties":{"n":{"type":"number","multipleOf":2}}}`, `#.properties.n: keyword "multipleOf"`},
		{`{"type":"string","format":"email"}`, `format "email" cannot be enforced`},
		{`{"type":"number","minimum":0.5}`, `minimum: 0.5 cannot be enforced`},
		{`{"type":"array","uniqueItems":true}`, "uniqueItems cannot be enforced"},
		{`{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}`, "oneOf over two branches of type string"},
		{`{"allOf":[{"type":"string"},{"maxLength":2}]}`, "allOf of 2 schemas"},
		{`{"$ref":"#/$defs/missing"}`, `"#/$defs/missing" does not resolve`},
		{`{"$ref":"http://example.com/s.json"}`, "only references inside the schema"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `"b" is not among the properties`},
		{`{"type":"strng"}`, `unknown type "strng"`},
		{`false`, "accepts nothing"},
		{`{"type":"integer","minimum":5,"maximum":1}`, "leave no value"},
		{`{"type":"string",}`, "not valid JSON"},
		{`{"type":"string","maxLength":2000000}`, "maxLength: expected an integer"},
		{`{"if":{"type":"string"}}`, `keyword "if"`},
		{`{"anyOf":[{"$ref":"#"},{"$ref":"#"}]}`, "too ambiguous"},
		{`{"type":"string","enum":["a",1]}`, ""}, // filtered to "a": see TestEnumFiltered
		{`{"type":"string","maxLength":2,"enum":["abcdef"]}`, "enum beside maxLength"},
		{`{"oneOf":[{"type":"string","nullable":true},{"type":"integer","nullable":true}]}`, "oneOf over two branches of type null"},
		{`{"type":"object","properties":{"a":{"type":[]}}}`, "#.properties.a.type: an empty list of types accepts nothing"},
		{`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, "no value that nests at most 32 deep"},
		{`{"minimum":0.5}`, "#.minimum: 0.5 cannot be enforced: expected an integer (a number's bounds must be whole)"},
		{`{"type":"object","properties":{"a":{"$id":"a.json","$defs":{"x":{"type":"string"}},"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"integer"}}}`, "#.properties.a: $id below the schema's root"},
		{`{"$defs":{"A":{"$id":"a.json","$defs":{"B":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/B"}}},"B":{"type":"integer"}},"$ref":"#/$defs/A/properties/x"}`, `"#/$defs/A/properties/x" passes through a subschema with $id`},
		{`{"const":"c","enum":["a","b"]}`, "#: the const is not among the enum's values: the schema cannot be satisfied"},
		// Numbers compare without expanding their exponents (a second each).
		{`{"const":1e-999999,"enum":[2e-999999,3e-999999,4e-999999,5e-999999]}`, "cannot be satisfied"},
	} {
		start := time.Now()
		_, err := JSONSchema([]byte(tc.schema))
		assert.Less(t, time.Since(start), 3*time.Second, tc.schema)
		if tc.want == "" {
			assert.NoError(t, err, tc.schema)
			continue
		}
		if assert.Error(t, err, tc.schema) {
			assert.Contains(t, err.Error(), tc.want, tc.schema)
		}
	}
}

// Two matchers of one index run concurrently (serve's sequences sharing
// a cached schema), and the cached masks equal fresh ones.
func TestConcurrentMatchers(t *testing.T) {
	v, eos := testVocab(t)
	g, err := JSONSchema([]byte(schemas[0]))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	done := make(chan string, 4)
	for w := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			m := ix.NewMatcher()
			var text []byte
			for range 300 {
				mask := m.Mask()
				var allowed []int
				for id := range v.size {
					if mask[id/64]&(1<<(id%64)) != 0 {
						allowed = append(allowed, id)
					}
				}
				id := allowed[rng.IntN(len(allowed))]
				if m.Advance(id) != nil || id == eos {
					break
				}
				text = append(text, v.tokens[id]...)
			}
			done <- string(text)
		}()
	}
	for range 4 {
		<-done
	}
	fresh := NewIndex(g, v)
	m := ix.NewMatcher()
	f := fresh.NewMatcher()
	for _, c := range []byte(`{"name":"x`) {
		require.True(t, m.AdvanceBytes([]byte{c}))
		require.True(t, f.AdvanceBytes([]byte{c}))
		assert.Equal(t, f.Mask(), m.Mask())
	}
}

func TestAnyJSONObject(t *testing.T) {
	v, _ := testVocab(t)
	ix := NewIndex(AnyJSON(true), v)
	assert.True(t, accepts(ix, `{"a":[1,2,{"b":"c"}]}`))
	assert.False(t, accepts(ix, `[1]`))
	assert.False(t, accepts(ix, `"s"`))
	// Nesting deeper than the stack bound is cut off.
	deep := strings.Repeat(`{"a":`, maxDepth+2) + "1" + strings.Repeat("}", maxDepth+2)
	assert.False(t, accepts(ix, deep))
}

// Before the marker the text is free but cannot end; after it, the
// grammar holds, starting with the bytes after the marker in its token.
func TestDeferred(t *testing.T) {
	v, eos := testVocab(t)
	g, err := JSONSchema([]byte(`{"type":"integer"}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	d := ix.After("</t>")
	byteID := func(c byte) int { return int(c) }
	assert.False(t, d.Allows(eos))
	assert.True(t, d.Allows(byteID('x')))
	assert.True(t, d.Allows(v.size-1) == false, "special token")
	for _, c := range []byte("thinking </t") {
		require.NoError(t, d.Advance(byteID(c)))
	}
	assert.False(t, d.Started())
	require.NoError(t, d.Advance(byteID('>')))
	assert.True(t, d.Started())
	assert.False(t, d.Allows(byteID('x')))
	assert.True(t, d.Allows(byteID('7')))
	require.NoError(t, d.Advance(byteID('7')))
	assert.True(t, d.Allows(eos))
	mask := d.Mask()
	assert.NotZero(t, mask[eos/64]&(1<<(eos%64)))
}

// patternCase is a pattern with texts it accepts (good) and rejects.
type patternCase struct {
	pattern  string
	good, no []string
}

// checkPatterns compiles each pattern as a string's and checks its texts.
func checkPatterns(t *testing.T, cases []patternCase) {
	t.Helper()
	v, _ := testVocab(t)
	for _, tc := range cases {
		schema, _ := json.Marshal(map[string]string{"type": "string", "pattern": tc.pattern})
		g, err := JSONSchema(schema)
		require.NoError(t, err, tc.pattern)
		ix := NewIndex(g, v)
		for _, s := range tc.good {
			assert.True(t, accepts(ix, s), "%s should accept %s", tc.pattern, s)
		}
		for _, s := range tc.no {
			assert.False(t, accepts(ix, s), "%s should reject %s", tc.pattern, s)
		}
	}
}

// Patterns: anchored and not, classes, escapes JSON spells, multi-byte
// characters, the newline that . does not match.
func TestPatterns(t *testing.T) {
	checkPatterns(t, []patternCase{
		{`^[A-Z]{2}-\d{3}$`, []string{`"AB-123"`}, []string{`"ab-123"`, `"AB-12"`, `"AB-1234"`, `"xAB-123"`}},
		{`abc`, []string{`"abc"`, `"xxabcyy"`, `"\nabc"`}, []string{`"xxab"`, `""`}},
		{`^a"b\\c$`, []string{`"a\"b\\c"`}, []string{`"a"b\\c"`, `"a\"bc"`}},
		{`^[é-ü]+$`, []string{`"éü"`, `"ñ"`}, []string{`"e"`, `"ÿ"`, `""`}},
		{`^a.b$`, []string{`"a-b"`, `"aéb"`, `"a日b"`, `"a\tb"`}, []string{`"a\nb"`, `"ab"`}},
		{`^(cat|dog)s?$`, []string{`"cat"`, `"dogs"`}, []string{`"cats!"`, `"bird"`}},
		{`^\S+@\S+$`, []string{`"a@b"`}, []string{`"a @b"`, `"@b"`}},
	})
}

// The UTF-8 split of rune ranges encodes exactly the runes of the range.
func TestUTF8Ranges(t *testing.T) {
	for _, r := range [][2]rune{{0x20, 0x7f}, {0x7f, 0x800}, {0x7ff, 0xd7ff}, {0xe000, 0x10ffff}, {0x61, 0x10ffff}, {0x3b1, 0x3c9}, {0xfff0, 0x10010}} {
		seqs := utf8Ranges(r[0], r[1])
		in := func(b []byte) bool {
			for _, seq := range seqs {
				if len(seq) != len(b) {
					continue
				}
				ok := true
				for i, br := range seq {
					ok = ok && br[0] <= b[i] && b[i] <= br[1]
				}
				if ok {
					return true
				}
			}
			return false
		}
		for x := rune(0); x <= 0x10ffff; x += 1 + x/64 {
			if x >= 0xd800 && x <= 0xdfff {
				continue
			}
			b := []byte(string(x))
			assert.Equal(t, x >= r[0] && x <= r[1], in(b), "range %x-%x rune %x", r[0], r[1], x)
		}
	}
}

// A marker that is a special token (no bytes) starts the grammar too.
func TestDeferredSpecialMarker(t *testing.T) {
	v, eos := testVocab(t)
	g, err := JSONSchema([]byte(`{"type":"boolean"}`))
	require.NoError(t, err)
	special := v.size - 1 // testVocab's special token
	d := NewIndex(g, v).After("</t>", special)
	assert.True(t, d.Allows(special))
	assert.NotZero(t, d.Mask()[special/64]&(1<<(special%64)))
	require.NoError(t, d.Advance(int('x')))
	require.NoError(t, d.Advance(special))
	assert.True(t, d.Started())
	assert.False(t, d.Allows(eos))
	assert.True(t, d.Allows(int('t')))
}

// enum and const keep only the values of the schema's type; other
// constraining keywords beside them are refused (TestUnenforceable).
func TestEnumFiltered(t *testing.T) {
	v, _ := testVocab(t)
	g, err := JSONSchema([]byte(`{"type":"string","enum":["a",1,null]}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	assert.True(t, accepts(ix, `"a"`))
	assert.False(t, accepts(ix, `1`))
	assert.False(t, accepts(ix, `null`))
	g, err = JSONSchema([]byte(`{"type":["integer","null"],"const":null}`))
	require.NoError(t, err)
	assert.True(t, accepts(NewIndex(g, v), `null`))
	_, err = JSONSchema([]byte(`{"type":"integer","const":"x"}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no value of the const has the type integer")
}

// A token that completes the marker with bytes the grammar refuses is not
// allowed before the marker (a vocabulary spelling "</t>" in pieces).
func TestDeferredSplitMarker(t *testing.T) {
	toks := [][]byte{[]byte("</"), []byte("t"), []byte(">\n\n{"), []byte(">"), []byte(">7"), []byte("7"), []byte("x"), nil}
	v, err := NewVocab(toks, []int{7})
	require.NoError(t, err)
	g, err := JSONSchema([]byte(`{"type":"integer"}`))
	require.NoError(t, err)
	d := NewIndex(g, v).After("</t>")
	require.NoError(t, d.Advance(0))
	require.NoError(t, d.Advance(1))
	assert.False(t, d.Allows(2), `">\n\n{" would start the answer with "\n\n{"`)
	assert.True(t, d.Allows(3))
	assert.True(t, d.Allows(4))
	mask := d.Mask()
	assert.Zero(t, mask[0]&(1<<2))
	assert.NotZero(t, mask[0]&(1<<4))
	assert.NotZero(t, mask[0]&(1<<6), "free text before the marker")
	require.NoError(t, d.Advance(4))
	assert.True(t, d.Started())
	assert.True(t, d.Allows(7), "the answer 7 is complete")
	assert.Error(t, d.Advance(2))
}

// A dead end (no token continues the text) lets the end of the sequence
// through, in Allows as in Mask.
func TestDeadEndAllowsEOS(t *testing.T) {
	toks := [][]byte{[]byte("a"), []byte("b"), nil}
	v, err := NewVocab(toks, []int{2})
	require.NoError(t, err)
	g, err := JSONSchema([]byte(`{"type":"string"}`))
	require.NoError(t, err)
	m := NewIndex(g, v).NewMatcher()
	assert.NotZero(t, m.Mask()[0]&(1<<2))
	assert.True(t, m.Allows(2))
	require.NoError(t, m.Advance(2))
}

// Patterns read as ECMA-262 (with the u flag) reads them: . stops at
// every line terminator, \s and \S are ECMA's, \u escapes and [^] are
// ECMA's; what Go reads otherwise is refused, naming the construct.
func TestPatternsECMA(t *testing.T) {
	checkPatterns(t, []patternCase{
		{`^a.b$`, []string{`"a-b"`, "\"a\u00a0b\""}, []string{`"a\rb"`, `"a\nb"`, "\"a\u2028b\"", "\"a\u2029b\""}},
		{`^\s$`, []string{`" "`, `"\t"`, `"\u000b"`, `"\f"`, "\"\u00a0\"", "\"\u1680\"", "\"\u2005\"", "\"\u2028\"", "\"\u202f\"", "\"\u3000\"", "\"\ufeff\""}, []string{`"x"`, "\"\u200b\"", `""`}},
		{`^\S$`, []string{`"x"`, `"é"`, "\"\u200b\""}, []string{`" "`, `"\u000b"`, "\"\u00a0\"", "\"\ufeff\"", `"ab"`}},
		{`^[\s]$`, []string{`"\u000b"`, "\"\u3000\""}, []string{`"x"`}},
		{`^[^\S]$`, []string{`"\u000b"`, "\"\u3000\""}, []string{`"x"`}},
		{`^[\Sx]$`, []string{`"x"`, `"y"`}, []string{`"\u000b"`, "\"\u00a0\""}},
		{`^[^\s]$`, []string{`"x"`}, []string{`"\u000b"`, "\"\u00a0\""}},
		{`^\d\w$`, []string{`"1_"`, `"0Z"`}, []string{`"١a"`, `"1é"`}},
		{`^\u0041\u{42}\x43$`, []string{`"ABC"`}, []string{`"abc"`}},
		{`^\uD83D\uDE00$`, []string{`"😀"`}, []string{`"x"`}},
		{`^[^]$`, []string{`"\n"`, `"x"`}, []string{`""`}},
		{`^(?<word>ab)+$`, []string{`"abab"`}, []string{`"aba"`}},
		{`^[\b]\0$`, []string{`"\b\u0000"`}, []string{`"b"`}},
		{`^\cJ$`, []string{`"\n"`}, []string{`"J"`}},
		{`^\/\-$`, []string{`"/-"`}, []string{`"-"`}},
	})
	for _, tc := range []struct{ pattern, want string }{
		{`^[[:digit:]]$`, "a [ inside a class"},
		{`^a\z`, `\z is not an ECMA-262 escape`},
		{`\Aa`, `\A is not an ECMA-262 escape`},
		{`\Qa.b\E`, `\Q is not an ECMA-262 escape`},
		{`\a`, `\a is not an ECMA-262 escape`},
		{`(?i)abc`, "(?i: inline flags"},
		{`(?s:a.b)`, "(?s: inline flags"},
		{`(?P<n>a)`, "(?P: inline flags"},
		{`\pL`, `Unicode property escapes (\p)`},
		{`\P{L}`, `Unicode property escapes (\P)`},
		{`\x{41}`, `\x takes two hex digits`},
		{`(a)\1`, `backreferences (\1)`},
		{`\k<n>`, `backreferences (\k)`},
		{`\012`, `octal escapes (\01)`},
		{`\ud800`, `\ud800 is a lone surrogate`},
		{`a[]`, "the empty class [] matches nothing"},
		{`(?=a)`, "lookarounds are not supported"},
		{`(?<!a)b`, "lookarounds are not supported"},
		{`a\`, "cannot end in a backslash"},
	} {
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"p": map[string]string{"type": "string", "pattern": tc.pattern}}})
		_, err := JSONSchema(schema)
		if assert.Error(t, err, tc.pattern) {
			assert.Contains(t, err.Error(), "#.properties.p.pattern: "+strconv.Quote(tc.pattern)+" cannot be enforced", tc.pattern)
			assert.Contains(t, err.Error(), tc.want, tc.pattern)
		}
	}
	// The rewriting is linear: 40,000 groups took 17 s when each one
	// converted the rest of the pattern.
	start := time.Now()
	schema, _ := json.Marshal(map[string]string{"type": "string", "pattern": strings.Repeat("(?:a)", 40000)})
	_, err := JSONSchema(schema)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)
}

// A \u escape is never a surrogate, so each escape is one character
// (minLength counts a pair as one) and no lone surrogate is written;
// characters beyond the BMP come as their UTF-8 bytes.
func TestUnicodeEscapes(t *testing.T) {
	v, _ := testVocab(t)
	g, err := JSONSchema([]byte(`{"type":"string","minLength":2}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	assert.False(t, accepts(ix, `"\ud83d\ude00"`), "a pair is one character")
	assert.False(t, accepts(ix, `"\uD800\uDFFF"`))
	assert.True(t, accepts(ix, `"😀😀"`))
	assert.True(t, accepts(ix, `"\u00e9\uD7FF"`))
	assert.True(t, accepts(ix, `"\uE000\uffff"`))
	g, err = JSONSchema([]byte(`{"type":"string"}`))
	require.NoError(t, err)
	ix = NewIndex(g, v)
	for _, s := range []string{`"\ud800"`, `"a\udfffb"`, `"\uDBFF"`, `"\ud83d\ude00"`} {
		assert.False(t, accepts(ix, s), s)
	}
	assert.True(t, accepts(ix, `"\u0041\ucfff"`))
}

// Without type, minimum and maximum imply number (integers included);
// the exclusive bounds, which only integers' grammar enforces, integer.
func TestImpliedNumber(t *testing.T) {
	v, _ := testVocab(t)
	g, err := JSONSchema([]byte(`{"minimum":0,"maximum":1}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	for _, s := range []string{`0`, `1`, `0.5`, `0.25`} {
		assert.True(t, accepts(ix, s), s)
	}
	for _, s := range []string{`-0.5`, `1.5`, `2`, `"x"`} {
		assert.False(t, accepts(ix, s), s)
	}
	g, err = JSONSchema([]byte(`{"exclusiveMinimum":0}`))
	require.NoError(t, err)
	ix = NewIndex(g, v)
	assert.True(t, accepts(ix, `1`))
	assert.False(t, accepts(ix, `0`))
	assert.False(t, accepts(ix, `0.5`))
}

// const beside enum: the value must be in both.
func TestConstAndEnum(t *testing.T) {
	v, _ := testVocab(t)
	for _, schema := range []string{`{"const":"a","enum":["a","b"]}`, `{"enum":["b","a"],"const":"a"}`} {
		g, err := JSONSchema([]byte(schema))
		require.NoError(t, err)
		ix := NewIndex(g, v)
		assert.True(t, accepts(ix, `"a"`), schema)
		assert.False(t, accepts(ix, `"b"`), schema)
	}
	g, err := JSONSchema([]byte(`{"const":{"x":1,"y":[2]},"enum":[{"y":[2.0],"x":1e0},3]}`))
	require.NoError(t, err)
	ix := NewIndex(g, v)
	assert.True(t, accepts(ix, `{"x":1,"y":[2]}`))
	assert.False(t, accepts(ix, `3`))
	g, err = JSONSchema([]byte(`{"const":-0.5,"enum":[1,-5E-1,1e999999]}`))
	require.NoError(t, err)
	assert.True(t, accepts(NewIndex(g, v), `-0.5`))
	for _, schema := range []string{`{"const":1,"enum":[2]}`, `{"const":0.5,"enum":[-0.5]}`, `{"const":1e999999,"enum":[1e999998]}`, `{"const":[1],"enum":[[1,2]]}`, `{"const":{"a":1},"enum":[{"a":1,"b":2}]}`} {
		_, err := JSONSchema([]byte(schema))
		if assert.Error(t, err, schema) {
			assert.Contains(t, err.Error(), "cannot be satisfied", schema)
		}
	}
}

// At the nesting bound a text can always be finished: an object or array
// opens there only when it can close, a member or item that would need
// to nest deeper is not offered, so until the text is complete the mask
// always holds a token other than the end of the sequence, and the text
// finished by closing parses and validates.
func TestDepthLimitNoDeadEnd(t *testing.T) {
	v, eos := testVocab(t)
	live := func(m *Matcher) bool {
		for id, w := range m.Mask() {
			for b := range 64 {
				if w&(1<<b) != 0 && id*64+b != eos {
					return true
				}
			}
		}
		return false
	}
	for _, tc := range []struct{ schema, open string }{
		{"json_object", `{"a":`},
		{"json", `[`},
		{"json", `{"a":[`},
		{`{"type":"object","additionalProperties":{"$ref":"#"}}`, `{"a":`},
		{`{"type":"object","properties":{"a":{"$ref":"#"}}}`, `{"a":`},
		{`{"type":"array","items":{"$ref":"#"}}`, `[`},
		{`{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"}`, `{"v":1,"kids":[`},
	} {
		var g *Grammar
		switch tc.schema {
		case "json_object", "json":
			g = AnyJSON(tc.schema == "json_object")
		default:
			var err error
			g, err = JSONSchema([]byte(tc.schema))
			require.NoError(t, err, tc.schema)
		}
		m := NewIndex(g, v).NewMatcher()
		var text []byte
		advance := func(c byte) {
			require.NoError(t, m.Advance(int(c)), "%s after %q", tc.schema, text)
			text = append(text, c)
			require.True(t, m.Accepting() || live(m), "%s: only the end of the sequence after %q", tc.schema, text)
		}
		// Open as deep as the grammar lets, then take what it offers,
		// closing first.
		open := []byte(strings.Repeat(tc.open, 3*maxDepth))
		for len(text) < len(open) && m.Allows(int(open[len(text)])) {
			advance(open[len(text)])
		}
		require.Less(t, len(text), len(open), "%s: the bound was not reached", tc.schema)
		for !m.Accepting() {
			require.Less(t, len(text), 2*len(open), "%s: no end after %q", tc.schema, text)
			next := -1
			for _, c := range []byte(`}]1"`) {
				if m.Allows(int(c)) {
					next = int(c)
					break
				}
			}
			for id := 0; next < 0 && id < 256; id++ {
				if m.Allows(id) {
					next = id
				}
			}
			require.GreaterOrEqual(t, next, 0, "%s: no byte allowed after %q", tc.schema, text)
			advance(byte(next))
		}
		var x any
		require.NoError(t, json.Unmarshal(text, &x), "%s: %q", tc.schema, text)
		if strings.HasPrefix(tc.schema, "{") {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(text)))
			require.NoError(t, err)
			assert.NoError(t, validator(t, tc.schema).Validate(inst), "%s: %q", tc.schema, text)
		}
		t.Logf("%s: %d bytes, %d opened", tc.schema, len(text), strings.Count(string(text), tc.open[:1]))
	}
}
