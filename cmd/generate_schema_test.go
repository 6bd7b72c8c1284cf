package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --json-schema holds the real stories model to a schema: greedy and
// sampled answers parse and validate, where unconstrained it writes a
// story, speculating or not (greedy then giving the same answer).
func TestGenerateJSONSchema(t *testing.T) {
	const schema = `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":1,"maximum":99},"happy":{"type":"boolean"},"pet":{"enum":["cat","dog",null]}},"required":["name","age","happy","pet"],"additionalProperties":false}`
	path := filepath.Join(t.TempDir(), "schema.json")
	require.NoError(t, os.WriteFile(path, []byte(schema), 0o644))
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("s.json", doc))
	val, err := c.Compile("s.json")
	require.NoError(t, err)
	var greedy string
	for _, args := range [][]string{
		{"--temperature", "0"},
		{"--temperature", "1", "--seed", "3"},
		{"--temperature", "0.8", "--top-p", "0.9", "--seed", "11", "--mode", "eager"},
		// Speculative decoding under the constraint: greedy gives the same
		// answer, sampling a valid one.
		{"--temperature", "0", "--speculate", "4"},
		{"--temperature", "1", "--seed", "3", "--speculate", "6", "--speculate-ngram", "1"},
	} {
		e := genEnv(t)
		code := e.run(append([]string{"generate", "--model", storiesDir, "-p", "Once upon a time, a girl named Lily", "-n", "300", "--json-schema", path}, args...)...)
		require.Equal(t, ExitOK, code, e.errOut.String())
		out := e.out.String()
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		require.NoError(t, err, "%v: %q does not parse", args, out)
		assert.NoError(t, val.Validate(inst), "%v: %q", args, out)
		switch {
		case len(args) == 2:
			greedy = out
		case args[1] == "0":
			assert.Equal(t, greedy, out, "%v: greedy decoding speculating", args)
		}
	}
}

func TestGenerateJSONSchemaErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"type":"string","pattern":"^(?!a)"}`), 0o644))
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.json"), "--json-schema: open"},
		{bad, `--json-schema ` + bad + `: #.pattern: "^(?!a)" cannot be enforced`},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "x", "--json-schema", tc.file))
		assert.Contains(t, e.errOut.String(), tc.want)
		assert.Empty(t, e.out.String())
	}
}
