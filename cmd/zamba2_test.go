package cmd

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/zamba2ref"
)

// TestZamba2Commands runs a tiny Zamba2 (two shared blocks over four
// hybrid layers, the stories tokenizer) through generate (the same greedy
// tokens on cpu, cpu:go and in eager mode), serve (the same completion),
// perplexity (a finite figure: the scoring head reads the stream beside
// the original embeddings) and inspect (hybrid layers counted as
// attention and Mamba-2).
func TestZamba2Commands(t *testing.T) {
	c := zamba2ref.Tiny()
	c.Vocab = 512
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	var want []int
	var text string
	for _, args := range [][]string{{"--device", "cpu"}, {"--device", "cpu:go"}, {"--device", "cpu", "--mode", "eager"}} {
		e := genEnv(t)
		full := append([]string{"--json"}, args[:2]...)
		full = append(full, "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0")
		full = append(full, args[2:]...)
		require.Equal(t, ExitOK, e.run(full...), e.errOut.String())
		var rs []jsonResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
		require.Len(t, rs, 1)
		if want == nil {
			want, text = rs[0].TokenIDs, rs[0].Text
		}
		assert.Equal(t, want, rs[0].TokenIDs, "%v", args)
	}
	addr, _, stop := serveInProcess(t, "--model", dir)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
	require.NoError(t, err)
	var completion struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&completion))
	resp.Body.Close()
	require.Len(t, completion.Choices, 1)
	assert.Equal(t, text, completion.Choices[0].Text, "serve's greedy completion is generate's")
	require.Equal(t, ExitOK, stop())

	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "perplexity", "--model", dir, "--text", "Once upon a time there was a little dog who liked to run."), e.errOut.String())
	var ppl struct {
		Perplexity float64 `json:"perplexity"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &ppl), e.out.String())
	assert.True(t, ppl.Perplexity > 1 && !math.IsInf(ppl.Perplexity, 0) && !math.IsNaN(ppl.Perplexity), "perplexity %v", ppl.Perplexity)

	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
	assert.Contains(t, e.out.String(), `"full_attention_layers":4`, "the hybrid layers count as attention")
	assert.Contains(t, e.out.String(), `"mamba_layers":7`, "every layer counts as Mamba-2")
}
