package cmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// bertModel writes a sentence-transformers BERT model (all-MiniLM's and
// bge's layout: a WordPiece tokenizer, modules.json with Pooling by mode
// and Normalize, max_seq_length maxSeq) and returns its folder.
func bertModel(t *testing.T, c bertref.Config, mode string, maxSeq int) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, bertref.Write(dir, c, 11))
	require.NoError(t, bertref.WriteTokenizer(dir, c.Vocab))
	require.NoError(t, bertref.WriteSentenceTransformers(dir, c.Hidden, mode, maxSeq))
	return dir
}

// TestEmbedBert: `tputool embed` on a BERT sentence-transformers model
// gives, for text, the reference encoder's hidden states of the
// tokenizer's ids ([CLS] ... [SEP]) pooled as the model's Pooling config
// says (CLS or mean) and normalized, with --pooling overriding it; inputs
// beyond max_seq_length are cut to it, keeping [SEP].
func TestEmbedBert(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 24, TypeVocab: 2, Eps: 1e-12}
	texts := []string{"What is a TPU?", "hello world", "the model runs a matrix processor, what is it?"}
	for _, mode := range []string{"cls", "mean"} {
		dir := bertModel(t, c, mode, 12)
		tok, err := tokenizer.LoadDir(dir)
		require.NoError(t, err)
		e := genEnv(t)
		args := []string{"--json", "embed", "-m", dir}
		for _, p := range texts {
			args = append(args, "-p", p)
		}
		require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
		var res []embedResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		require.Len(t, res, len(texts))
		for i, p := range texts {
			ids, err := tok.Encode(p, true)
			require.NoError(t, err)
			if len(ids) > 12 { // max_seq_length: the content cut, [SEP] kept
				ids = append(ids[:11:11], ids[len(ids)-1])
			}
			assert.Equal(t, len(ids), res[i].Tokens, "input %d", i)
			h, err := bertref.Forward(dir, c, ids)
			require.NoError(t, err)
			want := bertref.Pool(h, mode, true)
			require.Len(t, res[i].Embedding, c.Hidden)
			for j, x := range res[i].Embedding {
				assert.InDelta(t, want[j], x, 1e-5, "%s pooling, input %d, value %d", mode, i, j)
			}
		}
		// --pooling overrides the model's mode.
		other := map[string]string{"cls": "mean", "mean": "cls"}[mode]
		e = genEnv(t)
		require.Equal(t, ExitOK, e.run("--json", "embed", "-m", dir, "--pooling", other, "-p", texts[0]), e.errOut.String())
		res = nil
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res))
		ids, err := tok.Encode(texts[0], true)
		require.NoError(t, err)
		h, err := bertref.Forward(dir, c, ids)
		require.NoError(t, err)
		want := bertref.Pool(h, other, true)
		for j, x := range res[0].Embedding {
			assert.InDelta(t, want[j], x, 1e-5, "--pooling %s, value %d", other, j)
		}
	}
}

// TestEncoderRefusesText: generate, chat, serve and bench on an encoder
// exit 3 (unsupported) saying that it gives embeddings.
func TestEncoderRefusesText(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 16, TypeVocab: 2, Eps: 1e-12}
	dir := bertModel(t, c, "mean", 16)
	for _, args := range [][]string{
		{"generate", "-m", dir, "-p", "hello", "-n", "2"},
		{"bench", "-m", dir, "--prompt-len", "4", "--gen-len", "2"},
		{"serve", "-m", dir, "--port", "0"},
	} {
		e := genEnv(t)
		code := e.run(args...)
		assert.Equal(t, ExitUnsupported, code, "%v: %s", args, e.errOut.String())
		assert.True(t, strings.Contains(e.errOut.String(), "is an encoder: it gives embeddings"), "%v: %s", args, e.errOut.String())
	}
}
