package cmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
)

// A harmony answer through the decoder generate --chat and chat use: the
// final channel is the text, the analysis goes to the reasoning callback.
func TestHarmonyDecoder(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(storiesDir, "tokenizer.json"))
	require.NoError(t, err)
	ids, err := tok.Encode("<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.", false)
	require.NoError(t, err)
	var reasoning strings.Builder
	d := newHarmonyDecoder(tok, func(r string) { reasoning.WriteString(r) })(nil)
	var text strings.Builder
	for _, id := range ids {
		text.WriteString(d.Add(id))
	}
	text.WriteString(d.Flush())
	assert.Equal(t, "Hello there.", text.String())
	assert.Equal(t, "User greets.", reasoning.String())
}
