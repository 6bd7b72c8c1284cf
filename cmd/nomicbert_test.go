package cmd

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/nomicbertref"
)

// TestEmbedNomicBertText: `tputool embed` on a NomicBERT
// sentence-transformers model (nomic-embed-text's layout: NomicBertModel,
// a WordPiece tokenizer, mean pooling) gives, for text, the reference
// encoder's last hidden states of the tokenizer's ids, mean-pooled and
// normalized; `tputool inspect` names the architecture.
func TestEmbedNomicBertText(t *testing.T) {
	c := nomicbertref.Config{Vocab: bertref.MinTokenizerVocab + 24, Hidden: 32, Inner: 256, Layers: 2, Heads: 4, MaxPositions: 128}
	dir := t.TempDir()
	require.NoError(t, nomicbertref.Write(dir, c, 5))
	require.NoError(t, bertref.WriteTokenizer(dir, c.Vocab))
	require.NoError(t, bertref.WriteSentenceTransformers(dir, c.Hidden, "mean", 64))
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	texts := []string{"hello world", "the tpu is a matrix", "a"}
	res := embedTexts(t, dir, texts)
	for i, p := range texts {
		ids, err := tok.Encode(p, true)
		require.NoError(t, err)
		h, err := nomicbertref.Forward(dir, c, ids)
		require.NoError(t, err)
		want := bertref.Pool(h, "mean", true)
		require.Len(t, res[i].Embedding, c.Hidden)
		for j, x := range res[i].Embedding {
			assert.InDelta(t, want[j], float64(x), 2e-5, "input %d, value %d", i, j)
		}
		var ss float64
		for _, x := range res[i].Embedding {
			ss += float64(x) * float64(x)
		}
		assert.InDelta(t, 1, math.Sqrt(ss), 1e-5)
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("inspect", "-m", dir), e.errOut.String())
	assert.Contains(t, e.out.String(), "NomicBertModel")
}
