package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatModel is the stories model with a plain chat template: "<s>" then
// "User: ...\nStory:" turns.
func chatModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		if name == "tokenizer_config.json" {
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(b, &cfg))
			cfg["chat_template"] = "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n{% elif m.role == 'user' %}User: {{ m.content }}\nStory:{% else %}{{ m.content }}\n{% endif %}{% endfor %}"
			b, err = json.Marshal(cfg)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

type chatTurn struct {
	Type         string `json:"type"`
	Turn         int    `json:"turn"`
	User         string `json:"user"`
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason"`
	Seed         uint64 `json:"seed"`
	Metrics      struct {
		PromptEvalCount   int `json:"prompt_eval_count"`
		PromptCachedCount int `json:"prompt_cached_count"`
		EvalCount         int `json:"eval_count"`
		DraftTokens       int `json:"draft_tokens"`
		DraftAccepted     int `json:"draft_accepted"`
	} `json:"metrics"`
}

func chatTurns(t *testing.T, out []byte) []chatTurn {
	t.Helper()
	var turns []chatTurn
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var tu chatTurn
		require.NoError(t, json.Unmarshal(sc.Bytes(), &tu), sc.Text())
		turns = append(turns, tu)
	}
	return turns
}

// TestChatOverStdin drives a conversation over stdin (one turn per line):
// the second turn prefills only its new tokens (the cache holds the first
// turn), and gives the same answer as a fresh session fed the whole
// conversation would; /set, /clear and /bye work, commands print no
// answer.
func TestChatOverStdin(t *testing.T) {
	dir := chatModel(t)
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader("Tell me about a cat.\nAnd the dog?\n/set temperature 0.8\n/set seed 5\nOne more.\n/set temperature 0\n/clear\nTell me about a cat.\n/bye\nnever read\n")
	require.Equal(t, ExitOK, e.run("chat", "--model", dir, "--json", "-n", "8", "--temperature", "0"), e.errOut.String())
	turns := chatTurns(t, e.out.Bytes())
	require.Len(t, turns, 4, e.out.String())
	for i, tu := range turns {
		assert.Equal(t, "turn", tu.Type)
		assert.Equal(t, i+1, tu.Turn)
		assert.NotEmpty(t, tu.Text)
	}
	assert.Zero(t, turns[0].Metrics.PromptCachedCount)
	assert.Positive(t, turns[1].Metrics.PromptCachedCount, "the second turn re-ran the first")
	assert.Positive(t, turns[2].Metrics.PromptCachedCount)
	assert.EqualValues(t, 5, turns[2].Seed)
	assert.Zero(t, turns[3].Metrics.PromptCachedCount, "after /clear the conversation is new")
	assert.Equal(t, turns[0].Text, turns[3].Text, "after /clear the first question gets the first answer")
	assert.Contains(t, e.errOut.String(), "set temperature 0.8")
	assert.Contains(t, e.errOut.String(), "conversation cleared")

	// The cached second turn answers as a fresh prefill of the whole
	// conversation does.
	fresh := genEnv(t)
	fresh.f.IOStreams.In = strings.NewReader("Tell me about a cat.\nAnd the dog?\n")
	require.Equal(t, ExitOK, fresh.run("chat", "--model", dir, "--json", "-n", "8", "--temperature", "0", "--prefill-chunk", "-1"), fresh.errOut.String())
	ft := chatTurns(t, fresh.out.Bytes())
	require.Len(t, ft, 2)
	assert.Equal(t, turns[1].Text, ft[1].Text)
}

// TestChatTextBothTTYModes: off --json each answer is one line on stdout,
// whether stdout is a terminal or not (stdin is not, so no line editor).
func TestChatTextBothTTYModes(t *testing.T) {
	dir := chatModel(t)
	for _, tty := range []bool{false, true} {
		e := genEnv(t)
		e.f.IOStreams.SetStdoutTTY(tty)
		e.f.IOStreams.In = strings.NewReader("Tell me about a cat.\n\n/system Be short.\n/nope\nAnd the dog?\n")
		require.Equal(t, ExitOK, e.run("chat", "--model", dir, "-n", "6", "--temperature", "0"), e.errOut.String())
		lines := strings.Split(strings.TrimSuffix(e.out.String(), "\n"), "\n")
		assert.Len(t, lines, 2, e.out.String())
		assert.Contains(t, e.errOut.String(), "system message set")
		assert.Contains(t, e.errOut.String(), "unknown command /nope")
	}
}

func TestChatErrors(t *testing.T) {
	// No chat template: unsupported, exit 3.
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader("hi\n")
	assert.Equal(t, ExitUnsupported, e.run("chat", "--model", storiesDir))
	assert.Contains(t, e.errOut.String(), "chat template")

	for _, args := range [][]string{
		{"chat"},
		{"chat", "--model", storiesDir, "--temperature", "-1"},
		{"chat", "--model", storiesDir, "--dp", "2"},
	} {
		e := genEnv(t)
		assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
	}

	// A bad /set is reported and the session goes on.
	dir := chatModel(t)
	e = genEnv(t)
	e.f.IOStreams.In = strings.NewReader("/set temperature hot\n/set colour blue\nHi\n")
	require.Equal(t, ExitOK, e.run("chat", "--model", dir, "-n", "3", "--temperature", "0"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), `--temperature "hot": want a number`)
	assert.Contains(t, e.errOut.String(), `"colour" is not a sampling setting`)
	assert.NotEmpty(t, strings.TrimSpace(e.out.String()))
}

// TestChatInterruptCancelsTheAnswer: Ctrl-C (the factory's interrupt
// handler) stops the answer being written; the session reads on.
func TestChatInterruptCancelsTheAnswer(t *testing.T) {
	dir := chatModel(t)
	e := genEnv(t)
	var interrupts int
	c := NewCmdChat(e.f, func(ctx context.Context, o *ChatOptions) error {
		inner := o.OnInterrupt
		o.OnInterrupt = func(fn func() bool) func() {
			remove := inner(fn)
			if interrupts++; interrupts == 1 {
				require.True(t, e.f.interrupt(), "chat did not take the Ctrl-C")
			}
			return remove
		}
		return chatRun(ctx, o)
	})
	e.f.IOStreams.In = strings.NewReader("Tell me about a cat.\nAnd the dog?\n")
	c.SetArgs([]string{"--model", dir, "-n", "6", "--temperature", "0"})
	e.f.Global.JSON = true
	require.NoError(t, c.Execute())
	turns := chatTurns(t, e.out.Bytes())
	require.Len(t, turns, 2, e.out.String())
	assert.Equal(t, "interrupted", turns[0].FinishReason)
	assert.Empty(t, turns[0].Text)
	assert.Equal(t, "length", turns[1].FinishReason)
	assert.NotEmpty(t, turns[1].Text)
	// The first turn, stopped before its first token, left no history:
	// the second prompt is only the second question.
	assert.Less(t, turns[1].Metrics.PromptEvalCount, turns[0].Metrics.PromptEvalCount)
	assert.Zero(t, turns[1].Metrics.PromptCachedCount)
	assert.False(t, e.f.interrupt(), "the handler stays installed after the answer")
}

// TestChatJSONKeepsStderrNDJSON: under --json the session's notes and
// errors (/set, /clear, /help, a bad /set) are NDJSON log lines on stderr,
// and under --json --quiet only the warnings are, still as NDJSON.
func TestChatJSONKeepsStderrNDJSON(t *testing.T) {
	dir := chatModel(t)
	for _, quiet := range []bool{false, true} {
		e := genEnv(t)
		e.f.IOStreams.In = strings.NewReader("/set temperature 0\n/set colour blue\n/clear\n/help\n/nope\n/system Be short.\nHi\n")
		args := []string{"chat", "--model", dir, "--json", "-n", "3"}
		if quiet {
			args = append(args, "-q")
		}
		require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
		require.Len(t, chatTurns(t, e.out.Bytes()), 1, e.out.String())
		var logs []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(e.errOut.Bytes()))
		for sc.Scan() {
			var m map[string]any
			require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "stderr line not JSON: %q", sc.Text())
			logs = append(logs, m)
		}
		assert.Contains(t, logs, map[string]any{"type": "log", "level": "warning", "message": `"colour" is not a sampling setting (have max-new-tokens, temperature, top-k, top-p, min-p, repetition-penalty, seed, stop)`})
		if quiet {
			assert.Len(t, logs, 1, e.errOut.String())
		} else {
			assert.Contains(t, logs, map[string]any{"type": "log", "level": "info", "message": "conversation cleared"})
			assert.Contains(t, logs, map[string]any{"type": "log", "level": "info", "message": "set temperature 0"})
		}
	}
}
