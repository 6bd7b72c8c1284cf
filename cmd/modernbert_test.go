package cmd

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
	"github.com/tputool/tputool/pipeline/testkit/modernbertref"
)

// modernModel writes a tiny ModernBERT of c with its byte-level BPE
// tokenizer ([CLS] $A [SEP]) and, for an encoder, a sentence-transformers
// layout pooling by mode.
func modernModel(t *testing.T, c modernbertref.Config, mode string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, modernbertref.Write(dir, c, 17))
	require.NoError(t, modernbertref.WriteTokenizer(dir, c))
	if !c.Scorer {
		require.NoError(t, bertref.WriteSentenceTransformers(dir, c.Hidden, mode, 64))
	}
	return dir
}

// TestEmbedModernBertText: `tputool embed` on a ModernBERT
// sentence-transformers model gives, for text, the reference encoder's
// final hidden states of the tokenizer's ids pooled as the Pooling config
// says and normalized.
func TestEmbedModernBertText(t *testing.T) {
	c := modernbertref.Config{Vocab: modernbertref.MinTokenizerVocab + 40, Hidden: 32, Intermediate: 40, Layers: 3, Heads: 4,
		MaxPositions: 128, LocalAttention: 4, PadID: 0, CLSID: 1, SepID: 2, MaskID: 3, UnkID: 4}
	texts := []string{"hello world", "the tpu is a matrix encoder, hello", "a"}
	for _, mode := range []string{"mean", "cls"} {
		dir := modernModel(t, c, mode)
		tok, err := tokenizer.LoadDir(dir)
		require.NoError(t, err)
		res := embedTexts(t, dir, texts)
		for i, p := range texts {
			ids, err := tok.Encode(p, true)
			require.NoError(t, err)
			require.Equal(t, c.CLSID, ids[0], "input %d: %v starts with [CLS]", i, ids)
			assert.Equal(t, len(ids), res[i].Tokens, "input %d", i)
			h, err := modernbertref.Forward(dir, c, ids)
			require.NoError(t, err)
			want := bertref.Pool(h, mode, true)
			require.Len(t, res[i].Embedding, c.Hidden)
			for j, x := range res[i].Embedding {
				assert.InDelta(t, want[j], x, 1e-5, "%s pooling, input %d, value %d", mode, i, j)
			}
		}
	}
}

// TestRerankModernBert: `tputool rerank` on a
// ModernBertForSequenceClassification (mean pooling, one label) scores
// each pair as the reference does on the tokenizer's pair ids: the
// second text's token types, which the tokenizer gives and ModernBERT
// does not read, are dropped (serve.TypeStride).
func TestRerankModernBert(t *testing.T) {
	c := modernbertref.Config{Vocab: modernbertref.MinTokenizerVocab + 40, Hidden: 32, Intermediate: 40, Layers: 3, Heads: 4,
		MaxPositions: 128, LocalAttention: 4, PadID: 0, CLSID: 1, SepID: 2, MaskID: 3, UnkID: 4,
		Scorer: true, Labels: 1, ClassifierPooling: "mean"}
	dir := modernModel(t, c, "")
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	query := "what is a tpu?"
	docs := []string{"a tpu is a matrix encoder", "hello world", "the world"}
	args := []string{"--json", "rerank", "-m", dir, "--query", query}
	logits := make([]float64, len(docs))
	for i, d := range docs {
		args = append(args, "-d", d)
		ids, types, err := tok.EncodePairTruncated(query, d, 128)
		require.NoError(t, err)
		require.Contains(t, types, 1, "the pair template gives the second text type 1")
		s, err := modernbertref.Score(dir, c, ids)
		require.NoError(t, err)
		logits[i] = s[0]
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
	var res []rerankResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, len(docs))
	for _, r := range res {
		assert.InDelta(t, 1/(1+math.Exp(-logits[r.Index])), r.RelevanceScore, 1e-5, "document %d", r.Index)
	}
}
