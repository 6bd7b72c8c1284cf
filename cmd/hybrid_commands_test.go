package cmd

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/gemma3nref"
	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
)

// TestGemma3nCommands runs a tiny Gemma 3n (the stories tokenizer, whose
// ids pass its per-layer vocabulary of 400) through generate (the same
// greedy tokens on cpu, cpu:go and in eager mode), serve (the same
// completion), perplexity (a finite figure: the scoring head reads the
// streams the layers carry) and inspect (the towers reported as skipped).
func TestGemma3nCommands(t *testing.T) {
	c := gemma3nref.Tiny()
	c.Vocab, c.PLEVocab = 512, 400
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	sameGreedyEverywhere(t, dir)
	finitePerplexity(t, dir)

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
	assert.Contains(t, e.out.String(), `"vision"`, "the vision tower is reported as skipped")
	assert.Contains(t, e.out.String(), `"audio"`, "the audio tower is reported as skipped")
}

// TestZamba2Commands runs a tiny Zamba2 (two shared blocks over four
// hybrid layers, the stories tokenizer) through generate, serve,
// perplexity (the scoring head reads the stream beside the original
// embeddings) and inspect (hybrid layers counted as attention and
// Mamba-2).
func TestZamba2Commands(t *testing.T) {
	c := zamba2ref.Tiny()
	c.Vocab = 512
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	sameGreedyEverywhere(t, dir)
	finitePerplexity(t, dir)

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
	assert.Contains(t, e.out.String(), `"full_attention_layers":4`, "the hybrid layers count as attention")
	assert.Contains(t, e.out.String(), `"mamba_layers":7`, "every layer counts as Mamba-2")
}

// finitePerplexity runs perplexity on a sentence with the checkpoint in
// dir: it exits 0 with a finite figure above 1.
func finitePerplexity(t *testing.T, dir string) {
	t.Helper()
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "perplexity", "--model", dir, "--text", "Once upon a time there was a little dog who liked to run."), e.errOut.String())
	var ppl struct {
		Perplexity float64 `json:"perplexity"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &ppl), e.out.String())
	assert.True(t, ppl.Perplexity > 1 && !math.IsInf(ppl.Perplexity, 0) && !math.IsNaN(ppl.Perplexity), "perplexity %v", ppl.Perplexity)
}
