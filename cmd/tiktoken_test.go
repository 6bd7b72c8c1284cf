package cmd

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/dsref"
)

// TestGenerateKimiTokenizer: a DeepSeek-V3 checkpoint shipped as
// Moonlight and Kimi K2 ship theirs, with tiktoken.model and
// TikTokenTokenizer's tokenizer_config.json instead of a tokenizer.json,
// generates from a chat prompt whose special tokens and merges are the
// ranks file's.
func TestGenerateKimiTokenizer(t *testing.T) {
	// The 256 bytes, then "th", "the", " t", " the".
	var ranks [][]byte
	for b := range 256 {
		ranks = append(ranks, []byte{byte(b)})
	}
	ranks = append(ranks, []byte("th"), []byte("the"), []byte(" t"), []byte(" the"))
	base := len(ranks)
	c := dsref.TinyDeepSeek()
	c.Vocab = base + 258
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	var b strings.Builder
	for r, tok := range ranks {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString(tok), r)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tiktoken.model"), []byte(b.String()), 0o644))
	added := map[string]any{}
	names := []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"}
	for i, n := range names {
		added[fmt.Sprint(base+i)] = map[string]any{"content": n, "special": true}
	}
	cfg, err := json.Marshal(map[string]any{
		"tokenizer_class":      "TikTokenTokenizer",
		"auto_map":             map[string]any{"AutoTokenizer": []any{"tokenization_moonshot.TikTokenTokenizer", nil}},
		"added_tokens_decoder": added,
		"bos_token":            "[BOS]",
		"eos_token":            "[EOS]",
		"chat_template": "{% for m in messages %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>{{ m.content }}<|im_end|>{% endfor %}" +
			"{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}",
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644))

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "generate", "-m", dir, "--chat", "-p", "the the", "-n", "8", "--temperature", "0"), e.errOut.String())
	var res []struct {
		Prompt []int `json:"prompt_token_ids"`
		IDs    []int `json:"token_ids"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	bytesOf := func(s string) []int {
		var out []int
		for i := 0; i < len(s); i++ {
			out = append(out, int(s[i]))
		}
		return out
	}
	var want []int
	want = append(want, base+3)
	want = append(want, bytesOf("user")...)
	want = append(want, base+6, 257, 259, base+2, base+4)
	want = append(want, bytesOf("assistant")...)
	want = append(want, base+6)
	assert.Equal(t, want, res[0].Prompt)
	assert.NotEmpty(t, res[0].IDs)
}
