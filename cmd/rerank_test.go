package cmd

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/tokenizer"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// TestRerank: `tputool rerank` on a BERT cross-encoder scores each
// (query, document) pair as the float64 reference does (the sigmoid of
// bertref.Score on the tokenizer's pair ids and types), best first,
// --top-n cuts, --raw prints the logits, and the text output has one
// SCORE, INDEX, DOCUMENT line per document.
func TestRerank(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 32, Layers: 2, Heads: 4, Intermediate: 48, MaxPositions: 24,
		TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	dir := crossEncoderModel(t, c, false)
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	query := "what is a tpu?"
	docs := []string{"a tpu is a matrix processor", "hello world", "the model runs on a tpu, a matrix processor for the embed run and more words here"}
	logits := make([]float64, len(docs))
	for i, d := range docs {
		ids, types, err := tok.EncodePairTruncated(query, d, 24)
		require.NoError(t, err)
		s, err := bertref.Score(dir, c, ids, types)
		require.NoError(t, err)
		logits[i] = s[0]
	}
	args := []string{"rerank", "-m", dir, "--query", query}
	for _, d := range docs {
		args = append(args, "-d", d)
	}
	run := func(extra ...string) []rerankResult {
		t.Helper()
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run(append(append([]string{"--json"}, args...), extra...)...), e.errOut.String())
		var res []rerankResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
		return res
	}
	res := run()
	require.Len(t, res, len(docs))
	for k, r := range res {
		assert.InDelta(t, 1/(1+math.Exp(-logits[r.Index])), r.RelevanceScore, 1e-5, "document %d", r.Index)
		assert.Equal(t, docs[r.Index], r.Document)
		if k > 0 {
			assert.GreaterOrEqual(t, res[k-1].RelevanceScore, r.RelevanceScore, "best first")
		}
	}
	// Quantized weights score too (the head stays as stored).
	for _, q := range []string{"int8", "int4"} {
		qres := run("--quantize", q)
		require.Len(t, qres, len(docs), q)
		for _, r := range qres {
			assert.InDelta(t, 1/(1+math.Exp(-logits[r.Index])), r.RelevanceScore, 0.1, "--quantize %s, document %d", q, r.Index)
		}
	}
	raw := run("--raw", "--top-n", "2")
	require.Len(t, raw, 2)
	assert.Equal(t, res[0].Index, raw[0].Index)
	assert.InDelta(t, logits[raw[0].Index], raw[0].RelevanceScore, 1e-5)

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run(args...), e.errOut.String())
	lines := strings.Split(strings.TrimSuffix(e.out.String(), "\n"), "\n")
	require.Len(t, lines, len(docs))
	for k, l := range lines {
		f := strings.SplitN(l, "\t", 3)
		require.Len(t, f, 3, l)
		score, err := strconv.ParseFloat(f[0], 64)
		require.NoError(t, err)
		assert.InDelta(t, res[k].RelevanceScore, score, 1e-5)
		assert.Equal(t, strconv.Itoa(res[k].Index), f[1])
		assert.Equal(t, res[k].Document, f[2])
	}
}

// TestRerankRefuses: usage errors name the flag (exit 2); a model without
// a one-label classifier exits 3.
func TestRerankRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		code ExitCode
		want string
	}{
		{[]string{"rerank", "-m", storiesDir, "-d", "a"}, ExitUsage, "--query"},
		{[]string{"rerank", "-m", storiesDir, "--query", "q"}, ExitUsage, "--document"},
		{[]string{"rerank", "-m", storiesDir, "--query", "q", "-d", "a", "--top-n", "-1"}, ExitUsage, "--top-n -1"},
		{[]string{"rerank", "-m", storiesDir, "--query", "q", "-d", "a"}, ExitUnsupported, "no classification head"},
	} {
		e := genEnv(t)
		assert.Equal(t, c.code, e.run(c.args...), "%v: %s", c.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), c.want, "%v", c.args)
	}
	// A three-way classifier is not a reranker.
	cfg := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 24,
		TypeVocab: 2, Eps: 1e-12, Labels: 3, Prefix: "bert."}
	dir := crossEncoderModel(t, cfg, false)
	e := genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("rerank", "-m", dir, "--query", "q", "-d", "a"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "3 labels")
}

// TestRerankIdentityActivation: a cross-encoder whose config names the
// Identity activation (cross-encoder/ms-marco-*) is scored by its logits,
// as CrossEncoder scores it.
func TestRerankIdentityActivation(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 24,
		TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	dir := crossEncoderModel(t, c, false)
	editJSON(t, filepath.Join(dir, "config.json"), func(v map[string]any) {
		v["sbert_ce_default_activation_function"] = "torch.nn.modules.linear.Identity"
	})
	tok, err := tokenizer.LoadDir(dir)
	require.NoError(t, err)
	ids, types, err := tok.EncodePairTruncated("what is a tpu?", "a matrix processor", 24)
	require.NoError(t, err)
	want, err := bertref.Score(dir, c, ids, types)
	require.NoError(t, err)
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "rerank", "-m", dir, "--query", "what is a tpu?", "-d", "a matrix processor"), e.errOut.String())
	var res []rerankResult
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	assert.InDelta(t, want[0], res[0].RelevanceScore, 1e-5)
}

// TestRerankRawWhateverActivation: --raw prints the logit even for a
// model whose config names an activation tputool does not apply, which
// without it exits 3 naming it.
func TestRerankRawWhateverActivation(t *testing.T) {
	c := bertref.Config{Vocab: bertref.FullTokenizerVocab, Hidden: 16, Layers: 1, Heads: 2, Intermediate: 24, MaxPositions: 24,
		TypeVocab: 2, Eps: 1e-12, Labels: 1, Prefix: "bert."}
	dir := crossEncoderModel(t, c, false)
	editJSON(t, filepath.Join(dir, "config.json"), func(v map[string]any) {
		v["sbert_ce_default_activation_function"] = "torch.nn.modules.activation.Tanh"
	})
	e := genEnv(t)
	assert.Equal(t, ExitUnsupported, e.run("rerank", "-m", dir, "--query", "q", "-d", "a"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "Tanh")
	e = genEnv(t)
	assert.Equal(t, ExitOK, e.run("rerank", "-m", dir, "--query", "q", "-d", "a", "--raw"), e.errOut.String())
}
