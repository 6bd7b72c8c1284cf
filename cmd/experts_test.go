package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// moeModelDir writes the tiny Qwen3-MoE with stories260K's vocabulary
// size and tokenizer, its experts stacked as transformers v5 stores them
// when stacked.
func moeModelDir(t *testing.T, stacked bool) string {
	t.Helper()
	c := qwenref.TinyQwen3MoE()
	c.Vocab, c.Stacked = 512, stacked
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	return dir
}

// copyStoriesTokenizer gives a generated checkpoint stories260K's
// tokenizer (vocabulary 512).
func copyStoriesTokenizer(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
}

// Every --experts formulation, on both checkpoint layouts and on both CPU
// backends, generates the same greedy tokens.
func TestGenerateExpertsFormulations(t *testing.T) {
	var want []int
	for _, stacked := range []bool{false, true} {
		dir := moeModelDir(t, stacked)
		for _, dev := range []string{"cpu", "cpu:go"} {
			for _, experts := range []string{"graph", "host", "dense"} {
				e := genEnv(t)
				code := e.run("--json", "--device", dev, "generate", "--model", dir, "-p", "Once upon a time", "-n", "12", "--temperature", "0", "--experts", experts)
				require.Equal(t, ExitOK, code, e.errOut.String())
				var rs []jsonResult
				require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
				require.Len(t, rs, 1)
				r := rs[0]
				require.Len(t, r.TokenIDs, 12)
				if want == nil {
					want = r.TokenIDs
				}
				assert.Equal(t, want, r.TokenIDs, "stacked=%v %s --experts %s", stacked, dev, experts)
			}
		}
	}
}

func TestExpertsFlagValues(t *testing.T) {
	e := genEnv(t)
	require.Equal(t, ExitUsage, e.run("generate", "--model", storiesDir, "-p", "hi", "--experts", "sparse"))
	assert.Contains(t, e.errOut.String(), `--experts "sparse": want graph, host or dense`)
	e = genEnv(t)
	require.Equal(t, ExitUsage, e.run("bench", "--model", storiesDir, "--experts", "x"))
	assert.Contains(t, e.errOut.String(), `--experts "x"`)
}

// --quantize int8 and int4 hold a mixture-of-experts model's experts
// quantised with every --experts: graph as stacks, dense and host as
// each expert's matrices on their own, which the host-routed experts
// decode as dense does (the same greedy tokens).
func TestQuantizeMoE(t *testing.T) {
	dir := moeModelDir(t, true)
	for _, q := range []string{"int8", "int4"} {
		tokens := map[string][]int{}
		for _, mode := range []string{"graph", "dense", "host"} {
			e := genEnv(t)
			require.Equal(t, ExitOK, e.run("--json", "generate", "--model", dir, "-p", "hi", "-n", "4", "--temperature", "0", "--quantize", q, "--experts", mode), mode+": "+e.errOut.String())
			var rs []jsonResult
			require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
			require.Len(t, rs, 1)
			tokens[mode] = rs[0].TokenIDs
		}
		assert.Equal(t, tokens["dense"], tokens["host"], "--quantize %s: --experts host against dense", q)
	}
}

// Qwen3.5-MoE through the commands: generate with the in-graph and the
// host-routed experts gives the same greedy tokens, and inspect reports its
// experts and active parameters.
func TestQwen35MoECommands(t *testing.T) {
	c := qwenref.TinyQwen35MoE()
	c.Vocab, c.Stacked = 512, true
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	var want []int
	for _, experts := range []string{"graph", "host"} {
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run("--json", "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0", "--experts", experts), e.errOut.String())
		var rs []jsonResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
		require.Len(t, rs, 1)
		require.Len(t, rs[0].TokenIDs, 8)
		if want == nil {
			want = rs[0].TokenIDs
		}
		assert.Equal(t, want, rs[0].TokenIDs, "--experts %s", experts)
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
	var r struct {
		Text struct {
			MoE struct {
				Experts         int `json:"experts"`
				ExpertsPerToken int `json:"experts_per_token"`
			} `json:"moe"`
		} `json:"text"`
		Params struct {
			Used, Active, Experts int64
		} `json:"parameters"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
	assert.Equal(t, 6, r.Text.MoE.Experts)
	assert.Equal(t, 2, r.Text.MoE.ExpertsPerToken)
	experts := int64(len(c.LayerTypes) * c.Experts * 3 * c.MoEIntermediate * c.Hidden)
	assert.Equal(t, experts, r.Params.Experts)
	assert.Equal(t, r.Params.Used-experts+experts*2/6, r.Params.Active)
}
