package constrain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomSchema builds a schema of nested objects, arrays, enums,
// numbers with and without bounds, and strings with lengths and
// patterns, depth at most d.
func randomSchema(rng *rand.Rand, d int) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum", "string-bounded", "pattern", "anyOf"}
	if d > 0 {
		kinds = append(kinds, "object", "object", "array", "array")
	}
	switch kinds[rng.IntN(len(kinds))] {
	case "string":
		return map[string]any{"type": "string"}
	case "string-bounded":
		lo := rng.IntN(3)
		return map[string]any{"type": "string", "minLength": lo, "maxLength": lo + rng.IntN(5)}
	case "pattern":
		return map[string]any{"type": "string", "pattern": []string{`^[a-c]+\d?$`, `^x(y|z){1,3}$`, `1`, `^.{2}$`}[rng.IntN(4)]}
	case "integer":
		if rng.IntN(2) == 0 {
			return map[string]any{"type": "integer"}
		}
		lo := rng.IntN(200) - 100
		return map[string]any{"type": "integer", "minimum": lo, "maximum": lo + rng.IntN(300)}
	case "number":
		if rng.IntN(2) == 0 {
			return map[string]any{"type": "number"}
		}
		lo := rng.IntN(20) - 10
		return map[string]any{"type": "number", "minimum": lo, "maximum": lo + 1 + rng.IntN(20)}
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "null":
		return map[string]any{"type": "null"}
	case "enum":
		return map[string]any{"enum": []any{"a", 1, nil, true, "q\"uote"}[:1+rng.IntN(5)]}
	case "anyOf":
		return map[string]any{"anyOf": []any{randomSchema(rng, 0), randomSchema(rng, 0)}}
	case "object":
		props := map[string]any{}
		var required []string
		for i := range 1 + rng.IntN(4) {
			name := fmt.Sprintf("p%d", i)
			props[name] = randomSchema(rng, d-1)
			if rng.IntN(2) == 0 {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	default: // array
		lo := rng.IntN(3)
		s := map[string]any{"type": "array", "items": randomSchema(rng, d-1), "minItems": lo}
		if rng.IntN(2) == 0 {
			s["maxItems"] = lo + rng.IntN(3)
		}
		return s
	}
}

// Property: for random schemas, every text the constraint lets finish
// parses and validates.
func TestRandomSchemasValidate(t *testing.T) {
	v, eos := testVocab(t)
	rng := rand.New(rand.NewPCG(42, 1))
	n := 60
	if testing.Short() {
		n = 15
	}
	for i := range n {
		raw, err := json.Marshal(randomSchema(rng, 3))
		require.NoError(t, err)
		schema := string(raw)
		g, err := JSONSchema(raw)
		require.NoError(t, err, schema)
		ix := NewIndex(g, v)
		val := validator(t, schema)
		ended := 0
		for range 5 {
			text, ok := walk(t, ix, rng, eos)
			if !ok {
				continue
			}
			ended++
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
			require.NoError(t, err, "schema %d %s: %q does not parse", i, schema, text)
			assert.NoError(t, val.Validate(inst), "schema %d %s: %q", i, schema, text)
		}
		if ended == 0 {
			t.Logf("schema %d %s: no walk ended", i, schema)
		}
	}
}

// Hostile schemas: the compiler never panics, answers in bounded time,
// and refuses what it cannot do with an error.
func FuzzJSONSchema(f *testing.F) {
	for _, s := range schemas {
		f.Add(s)
	}
	for _, s := range []string{`{"type":"string","maxLength":1048576}`, `{"$ref":"#"}`, `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"type":"array","items":{"type":"array","items":{"type":"array"}},"maxItems":1000}`, `{"type":"string","pattern":"(a|b|c|d){1000}"}`,
		`{"enum":[` + strings.Repeat(`"x",`, 500) + `"y"]}`, `[[[[`, `{"type":"integer","minimum":-9999999999999999}`} {
		f.Add(s)
	}
	v, _ := testVocab(f)
	f.Fuzz(func(t *testing.T, schema string) {
		start := time.Now()
		g, err := JSONSchema([]byte(schema))
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("compiling %q took %v", schema, d)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		ix := NewIndex(g, v)
		m := ix.NewMatcher()
		m.Mask()
		for _, c := range []byte(`{"a":[1,"x",null]}`) {
			if !m.AdvanceBytes([]byte{c}) {
				break
			}
			m.Mask()
		}
	})
}
