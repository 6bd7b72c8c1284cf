package cmd

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// speculateRun runs generate --json with args and returns its text, token
// ids and stderr.
func speculateRun(t *testing.T, args ...string) (string, []int, string) {
	t.Helper()
	e := genEnv(t)
	code := e.run(append([]string{"--json", "-v", "generate", "-m", storiesDir, "-p", "Once upon a time", "-n", "120", "--temperature", "0"}, args...)...)
	require.Equal(t, ExitOK, code, e.errOut.String())
	var res []struct {
		Text     string `json:"text"`
		TokenIDs []int  `json:"token_ids"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	return res[0].Text, res[0].TokenIDs, e.errOut.String()
}

// TestGenerateSpeculate: --speculate gives the tokens greedy decoding
// gives one at a time, in both modes, and says what it proposed under
// -v, sampling included; where it cannot run (GoMLX's go backend writes
// cache slots by adding, a batch) it warns and decodes one token at a
// time.
func TestGenerateSpeculate(t *testing.T) {
	text, ids, _ := speculateRun(t)
	for _, args := range [][]string{{"--speculate", "4"}, {"--speculate", "8", "--speculate-ngram", "1"}, {"--speculate", "3", "--mode", "eager"}} {
		got, gotIDs, errOut := speculateRun(t, args...)
		assert.Equal(t, text, got, "%v", args)
		assert.Equal(t, ids, gotIDs, "%v", args)
		assert.Contains(t, errOut, "speculative decoding: up to", "%v", args)
	}
	// The metrics count the drafts.
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("-v", "generate", "-m", storiesDir, "-p", "Once upon a time", "-n", "120", "--temperature", "0", "--speculate", "4"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "draft tokens:")
	got, _, errOut := speculateRun(t, "--speculate", "4", "--device", "cpu:go")
	assert.Equal(t, text, got)
	assert.Contains(t, errOut, "--speculate: off")
	_, _, errOut = speculateRun(t, "--speculate", "4", "--temperature", "0.7", "--seed", "3")
	assert.Contains(t, errOut, "speculative decoding: up to", "sampling speculates too")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "-m", storiesDir, "-p", "Once upon a time", "-p", "The dog", "-n", "8", "--temperature", "0", "--speculate", "4"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--speculate: off for a batch of 2 prompts")

	for _, bad := range [][]string{{"--speculate", "-1"}, {"--speculate", "33"}, {"--speculate", "4", "--speculate-ngram", "0"}} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(append([]string{"generate", "-m", storiesDir, "-p", "a"}, bad...)...), "%v", bad)
		assert.Contains(t, e.errOut.String(), bad[len(bad)-2], "%v", bad)
	}
}
