package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/optref"
)

// TestGenerateOPTSlowTokenizer: an OPT checkpoint with GPT-2's slow
// tokenizer files (vocab.json, merges.txt, GPT2Tokenizer's
// tokenizer_config.json with add_bos_token, as facebook/opt-* ship them)
// instead of a tokenizer.json generates from a prompt that starts with
// the BOS token and is split by the merges.
func TestGenerateOPTSlowTokenizer(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, optref.Tiny().Write(dir))
	// gpt2-tiny's vocabulary and merges (transformers' GPT-2 test), and
	// OPT's </s>.
	vocab := map[string]int{"l": 0, "o": 1, "w": 2, "e": 3, "r": 4, "s": 5, "t": 6, "i": 7, "d": 8, "n": 9, "Ġ": 10,
		"Ġl": 11, "Ġn": 12, "Ġlo": 13, "Ġlow": 14, "er": 15, "Ġlowest": 16, "Ġnewer": 17, "Ġwider": 18, "<unk>": 19,
		"<|endoftext|>": 20, "</s>": 21}
	v, err := json.Marshal(vocab)
	require.NoError(t, err)
	files := map[string]string{
		"vocab.json": string(v),
		"merges.txt": "#version: 0.2\nĠ l\nĠl o\nĠlo w\ne r\n",
		"tokenizer_config.json": `{"tokenizer_class": "GPT2Tokenizer", "add_bos_token": true, "add_prefix_space": false,
			"bos_token": {"content": "</s>", "special": true}, "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}`,
		"special_tokens_map.json": `{"bos_token": "</s>", "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>"}`,
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "generate", "-m", dir, "-p", "lower newer", "-n", "4", "--temperature", "0"), e.errOut.String())
	var res []struct {
		Prompt []int `json:"prompt_token_ids"`
		IDs    []int `json:"token_ids"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	// </s>; "lower" without a prefix space: l o w er; " newer": Ġ n e w er
	// (no merge makes Ġn).
	assert.Equal(t, []int{21, 0, 1, 2, 15, 10, 9, 3, 2, 15}, res[0].Prompt)
	assert.Len(t, res[0].IDs, 4)
}
