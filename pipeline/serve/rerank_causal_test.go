package serve

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// TestCausalPairIDs: a causal cross-encoder's pair is, with a tokenizer
// without a pair form, the query's tokens then the document's, without
// special tokens (tokenizers' pair without a pair form), cut longest
// first; with one, the tokenizer's pair form; never with token types.
func TestCausalPairIDs(t *testing.T) {
	vocab := bertref.TokenizerVocab(rerankVocab)
	id := func(s string) int {
		for i, v := range vocab {
			if v == s {
				return i
			}
		}
		t.Fatalf("no token %q", s)
		return -1
	}
	got, err := CausalPairIDs(bertTokenizer(t), "what is a tpu", "hello world", 64)
	require.NoError(t, err)
	assert.Equal(t, []int{id("[CLS]"), id("what"), id("is"), id("a"), id("tpu"), id("[SEP]"), id("hello"), id("world"), id("[SEP]")}, got,
		"the pair form, no type offset")

	dir := t.TempDir()
	require.NoError(t, bertref.WriteTokenizer(dir, rerankVocab))
	path := filepath.Join(dir, "tokenizer.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	// Qwen's post-processor: ByteLevel alone, which adds nothing.
	var tj map[string]any
	require.NoError(t, json.Unmarshal(raw, &tj))
	tj["post_processor"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	raw, err = json.Marshal(tj)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	require.False(t, tok.HasPairTemplate())
	got, err = CausalPairIDs(tok, "what is a tpu", "hello world", 64)
	require.NoError(t, err)
	assert.Equal(t, []int{id("what"), id("is"), id("a"), id("tpu"), id("hello"), id("world")}, got)
	// Cut to 5: the document (2) takes no more than half and stays whole.
	got, err = CausalPairIDs(tok, "what is a tpu", "hello world", 5)
	require.NoError(t, err)
	assert.Equal(t, []int{id("what"), id("is"), id("a"), id("hello"), id("world")}, got)
}
